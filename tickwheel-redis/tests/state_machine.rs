//! The scripts as a state machine: random calls from three members, some of whose replies are
//! lost (the call ran; the member retries it later with the same token), checked call by call
//! against a model of the protocol written in Rust. Seeded, bounded.

mod support;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use tickwheel_redis::{Applied, Effect, Error, Member, Protocol, Record, Rejection, State, Token};

const Q: &[u8] = b"q{1}\n";
const NAMES: [&str; 3] = ["a", "b", "c"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Deadline {
    None,
    Future,
    Past,
}

#[derive(Debug, Clone)]
struct MRec {
    state: State,
    owner: String,
    boot: String,
    epoch: u64,
    target: Option<String>,
    deadline: Deadline,
    entries: u64,
    source: Option<(String, String, u64)>,
    token: String,
}

#[derive(Debug, Default)]
struct Model {
    rec: Option<MRec>,
    data: Vec<Vec<u8>>,
    fenced: HashMap<u64, u64>,
}

#[derive(Debug, Clone)]
enum Op {
    Acquire,
    Recover,
    Prepare(Option<String>),
    Append(u64, Vec<u8>, u64),
    Seal(u64, u64),
    Abort,
    Claim,
    Reclaim,
    Commit,
    Renew,
    Fetch(u64),
}

impl Op {
    /// The step's name, as the scripts store it beside the token.
    fn step(&self) -> &'static str {
        match self {
            Op::Acquire => "acquire",
            Op::Recover => "recover",
            Op::Prepare(_) => "prepare",
            Op::Append(..) => "append",
            Op::Seal(..) => "seal",
            Op::Abort => "abort",
            Op::Claim => "claim",
            Op::Reclaim => "reclaim",
            Op::Commit => "commit",
            Op::Renew => "renew",
            Op::Fetch(_) => "fetch",
        }
    }

    fn mutates(&self) -> bool {
        !matches!(self, Op::Fetch(_))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Out {
    Changed,
    Repeated,
    Unchanged,
    Absent,
    Taken,
    Fenced(Option<u64>),
    State,
    NotOffered,
    NotExpired,
    Order(u64),
    Conflict,
    Count(u64),
    Missing,
    Fetched(Vec<u8>),
    TokenReused(String),
}

impl Model {
    fn step(&mut self, name: &str, boot: &str, epoch: u64, op: &Op, token: &str) -> Out {
        // The record keeps the last token with its step; a renewal keeps none.
        if let Some(r) = &self.rec
            && op.mutates()
            && r.token.split_once('#').map(|(_, t)| t) == Some(token)
            && r.owner == name
            && r.boot == boot
        {
            let (step, _) = r.token.split_once('#').unwrap_or_default();
            if step != op.step() {
                return Out::TokenReused(step.to_owned());
            }
            return Out::Repeated;
        }
        let held = self
            .rec
            .as_ref()
            .is_some_and(|r| r.owner == name && r.boot == boot && r.epoch == epoch);
        let fenced = |m: &Model| match m.rec {
            None => Out::Absent,
            Some(_) => Out::Fenced(m.fenced.get(&epoch).copied()),
        };
        let needs_hold = matches!(
            op,
            Op::Prepare(_)
                | Op::Append(..)
                | Op::Seal(..)
                | Op::Abort
                | Op::Commit
                | Op::Renew
                | Op::Fetch(_)
        );
        if needs_hold && !held {
            return fenced(self);
        }
        let token = format!("{}#{token}", op.step());
        let Some(r) = self.rec.as_mut() else {
            return match op {
                Op::Acquire => {
                    self.rec = Some(MRec {
                        state: State::Owned,
                        owner: name.into(),
                        boot: boot.into(),
                        epoch: 1,
                        target: None,
                        deadline: Deadline::None,
                        entries: 0,
                        source: None,
                        token,
                    });
                    Out::Changed
                }
                _ => Out::Absent,
            };
        };
        // CLAIMED by the caller, under the next epoch.
        fn claimed_by(r: &mut MRec, name: &str, boot: &str, token: String) {
            r.state = State::Claimed;
            r.owner = name.into();
            r.boot = boot.into();
            r.epoch += 1;
            r.deadline = Deadline::Future;
            r.token = token;
        }
        let to_owned = |r: &mut MRec, data: &mut Vec<Vec<u8>>| {
            data.clear();
            r.target = None;
            r.deadline = Deadline::None;
            r.source = None;
            r.state = State::Owned;
            r.entries = 0;
        };
        match op {
            Op::Acquire => {
                if r.state == State::Owned && r.owner == name && r.boot == boot {
                    Out::Repeated
                } else {
                    Out::Taken
                }
            }
            Op::Recover => {
                if r.owner != name {
                    return Out::Taken;
                }
                if r.boot == boot {
                    return Out::Repeated;
                }
                match r.state {
                    State::Offered => return Out::Unchanged,
                    State::Preparing => {
                        self.fenced.insert(r.epoch, 0);
                        to_owned(r, &mut self.data);
                    }
                    State::Claimed => r.deadline = Deadline::Future,
                    State::Owned => {}
                }
                r.boot = boot.into();
                r.epoch += 1;
                r.token = token;
                Out::Changed
            }
            Op::Prepare(target) => {
                if r.state != State::Owned {
                    return Out::State;
                }
                self.data.clear();
                self.fenced.remove(&epoch);
                r.state = State::Preparing;
                r.deadline = Deadline::Future;
                r.entries = 0;
                r.source = Some((name.into(), boot.into(), epoch));
                r.token = token;
                r.target = target.clone();
                Out::Changed
            }
            Op::Append(i, bytes, n) => {
                if r.state != State::Preparing {
                    return Out::State;
                }
                if let Some(have) = self.data.get(*i as usize) {
                    return if have == bytes {
                        Out::Repeated
                    } else {
                        Out::Conflict
                    };
                }
                let len = self.data.len() as u64;
                if *i != len {
                    return Out::Order(len);
                }
                self.data.push(bytes.clone());
                r.entries += n;
                r.token = token;
                Out::Changed
            }
            Op::Seal(c, n) => {
                if r.state != State::Preparing {
                    return Out::State;
                }
                let len = self.data.len() as u64;
                if len != *c || r.entries != *n {
                    return Out::Count(len);
                }
                self.fenced.insert(epoch, len);
                r.state = State::Offered;
                r.deadline = Deadline::Future;
                r.token = token;
                Out::Changed
            }
            // Back to OWNED: an abort from PREPARING, a commit from CLAIMED.
            Op::Abort | Op::Commit => {
                let from = if matches!(op, Op::Abort) {
                    State::Preparing
                } else {
                    State::Claimed
                };
                if r.state != from {
                    return Out::State;
                }
                to_owned(r, &mut self.data);
                r.token = token;
                Out::Changed
            }
            Op::Claim => {
                if r.state != State::Offered {
                    return Out::NotOffered;
                }
                if r.target.as_ref().is_some_and(|t| t != name) && r.deadline != Deadline::Past {
                    return Out::NotOffered;
                }
                claimed_by(r, name, boot, token);
                Out::Changed
            }
            Op::Reclaim => {
                if r.state == State::Owned {
                    return Out::State;
                }
                if r.deadline != Deadline::Past {
                    return Out::NotExpired;
                }
                if r.state == State::Preparing {
                    self.fenced.insert(r.epoch, self.data.len() as u64);
                }
                r.target = None;
                claimed_by(r, name, boot, token);
                Out::Changed
            }
            Op::Renew => {
                if r.state == State::Offered {
                    return Out::State;
                }
                r.deadline = Deadline::Future;
                Out::Changed
            }
            Op::Fetch(i) => {
                if r.state != State::Claimed {
                    return Out::State;
                }
                match self.data.get(*i as usize) {
                    Some(b) => Out::Fetched(b.clone()),
                    None => Out::Missing,
                }
            }
        }
    }

    fn check(&self, real: Option<&Record>, context: &str) {
        match (&self.rec, real) {
            (None, None) => {}
            (Some(m), Some(r)) => {
                let deadline = match m.deadline {
                    Deadline::None => None,
                    Deadline::Past => Some(0),
                    Deadline::Future => r.deadline_ms.filter(|d| *d > 0),
                };
                let mine = (
                    m.state,
                    m.owner.as_str(),
                    m.boot.as_str(),
                    m.epoch,
                    m.target.as_deref(),
                    deadline,
                    self.data.len() as u64,
                    m.entries,
                    m.source
                        .as_ref()
                        .map(|(n, b, e)| (n.as_str(), b.as_str(), *e)),
                );
                let theirs = (
                    r.state,
                    r.owner.name.as_str(),
                    r.owner.boot_id.as_str(),
                    r.epoch,
                    r.target.as_deref(),
                    r.deadline_ms,
                    r.chunks,
                    r.entries,
                    r.source
                        .as_ref()
                        .map(|(m, e)| (m.name.as_str(), m.boot_id.as_str(), *e)),
                );
                assert_eq!(mine, theirs, "{context}");
                assert_eq!(r.queue, Q);
            }
            (m, r) => panic!("{context}: model {m:?}, redis {r:?}"),
        }
    }
}

fn real_out(r: Result<Applied, Error>) -> Out {
    match r {
        Ok(a) => match a.effect {
            Effect::Changed => Out::Changed,
            Effect::Repeated => Out::Repeated,
            Effect::Unchanged => Out::Unchanged,
        },
        Err(Error::Rejected(rej)) => match *rej {
            Rejection::Absent => Out::Absent,
            Rejection::Taken(_) => Out::Taken,
            Rejection::Fenced { taken_chunks, .. } => Out::Fenced(taken_chunks),
            Rejection::WrongState(_) => Out::State,
            Rejection::NotOffered(_) => Out::NotOffered,
            Rejection::NotExpired(_) => Out::NotExpired,
            Rejection::OutOfOrder { expected, .. } => Out::Order(expected),
            Rejection::ChunkConflict { .. } => Out::Conflict,
            Rejection::CountMismatch {
                chunks_in_redis, ..
            } => Out::Count(chunks_in_redis),
            Rejection::MissingChunk { .. } => Out::Missing,
            Rejection::OtherQueue(r) => panic!("other queue {r:?}"),
            Rejection::TokenReused { step, .. } => Out::TokenReused(step),
        },
        Err(e) => panic!("transport error in a healthy run: {e}"),
    }
}

struct Actor {
    p: Protocol,
    epoch: u64,
    /// A call whose reply was lost: retried (same token) before anything else.
    pending: Option<(Op, Token, u64)>,
}

async fn run(url: &str, seed: u64, steps: usize, changed: &mut HashMap<String, u32>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut actors = Vec::new();
    for n in NAMES {
        actors.push(Actor {
            p: support::connect(url, Member::new_boot(n)).await,
            epoch: 0,
            pending: None,
        });
    }
    let mut model = Model::default();
    let keys = actors[0].p.keys(Q);
    let mut losses = 0;
    let mut changes = 0;
    for step in 0..steps {
        let who = rng.random_range(0..actors.len());
        // Sometimes time passes: the current deadline lapses.
        if rng.random_bool(0.05)
            && let Some(r) = model.rec.as_mut()
            && r.deadline != Deadline::None
        {
            support::expire(url, &keys.owner).await;
            r.deadline = Deadline::Past;
        }
        // Sometimes a member restarts: a new boot, its lost call forgotten.
        if rng.random_bool(0.02) {
            actors[who] = Actor {
                p: support::connect(url, Member::new_boot(NAMES[who])).await,
                epoch: 0,
                pending: None,
            };
        }
        let actor = &mut actors[who];
        let (op, token, epoch) = match actor.pending.take() {
            Some(p) => p,
            None => {
                let len = model.data.len() as u64;
                let entries = model.rec.as_ref().map_or(0, |r| r.entries);
                let mut epoch = actor.epoch;
                if rng.random_bool(0.1) {
                    epoch = model.rec.as_ref().map_or(1, |r| r.epoch);
                }
                let i = match rng.random_range(0..10) {
                    0 => len.saturating_sub(1),
                    1 => len + 1,
                    _ => len,
                };
                let bytes = if rng.random_bool(0.1) {
                    b"conflict".to_vec()
                } else {
                    format!("e{epoch}i{i}").into_bytes()
                };
                let random = match rng.random_range(0..14) {
                    0 => Op::Acquire,
                    1 => Op::Recover,
                    2 => Op::Prepare(match rng.random_range(0..4) {
                        0 => None,
                        k => Some(NAMES[k - 1].to_owned()),
                    }),
                    3..=5 => Op::Append(i, bytes, i + 1),
                    6 => Op::Seal(
                        len,
                        if rng.random_bool(0.9) {
                            entries
                        } else {
                            entries + 1
                        },
                    ),
                    7 => Op::Abort,
                    8 | 9 => Op::Claim,
                    10 => Op::Reclaim,
                    11 => Op::Commit,
                    12 => Op::Renew,
                    _ => Op::Fetch(rng.random_range(0..len + 1)),
                };
                // Mostly what a member in this position would do, so that every transition
                // is exercised; sometimes anything at all.
                let me = actor.p.member();
                let sensible = match &model.rec {
                    None => Some(Op::Acquire),
                    Some(r) if r.owner == me.name && r.boot == me.boot_id => match r.state {
                        State::Owned => Some(if rng.random_bool(0.8) {
                            Op::Prepare(match rng.random_range(0..3) {
                                0 => None,
                                k => Some(NAMES[(who + k) % 3].to_owned()),
                            })
                        } else {
                            Op::Renew
                        }),
                        State::Preparing => Some(match rng.random_range(0..6) {
                            0 => Op::Seal(len, entries),
                            1 => Op::Abort,
                            _ => Op::Append(len, format!("e{epoch}i{len}").into_bytes(), 2),
                        }),
                        State::Claimed => Some(match rng.random_range(0..3) {
                            0 => Op::Fetch(rng.random_range(0..len + 1)),
                            _ => Op::Commit,
                        }),
                        State::Offered => Some(Op::Claim),
                    },
                    Some(r) if r.owner == me.name => Some(Op::Recover),
                    Some(r) if r.deadline == Deadline::Past => Some(Op::Reclaim),
                    Some(r) if r.state == State::Offered => Some(Op::Claim),
                    Some(_) => None,
                };
                let op = match sensible {
                    Some(op) if rng.random_bool(0.75) => op,
                    _ => random,
                };
                (op, Token::generate(), epoch)
            }
        };
        let m = actor.p.member().clone();
        let want = model.step(&m.name, &m.boot_id, epoch, &op, token.as_str());
        let p = &actor.p;
        let got = match &op {
            Op::Acquire => real_out(p.acquire(Q, &token).await),
            Op::Recover => real_out(p.recover(Q, &token).await),
            Op::Prepare(t) => real_out(p.prepare(Q, epoch, t.as_deref(), &token).await),
            Op::Append(i, b, n) => real_out(p.append(Q, epoch, *i, b, *n, &token).await),
            Op::Seal(c, n) => real_out(p.seal(Q, epoch, *c, *n, &token).await),
            Op::Abort => real_out(p.abort(Q, epoch, &token).await),
            Op::Claim => real_out(p.claim(Q, &token).await),
            Op::Reclaim => real_out(p.reclaim(Q, &token).await),
            Op::Commit => real_out(p.commit(Q, epoch, &token).await),
            Op::Renew => real_out(p.renew(Q, epoch, &token).await),
            Op::Fetch(i) => match p.fetch(Q, epoch, *i).await {
                Ok(b) => Out::Fetched(b),
                Err(e) => real_out(Err(e)),
            },
        };
        let context = format!("seed {seed} step {step}: {} {op:?} epoch {epoch}", m.name);
        assert_eq!(got, want, "{context}");
        if got == Out::Changed {
            changes += 1;
            *changed
                .entry(format!("{op:?}").split('(').next().unwrap_or("").to_owned())
                .or_insert(0) += 1;
        }
        let view = p.read(Q, None).await.expect("read");
        model.check(view.record.as_ref(), &context);
        if op.mutates() && rng.random_bool(0.25) {
            // The reply is lost: the member does not learn the outcome and retries later.
            losses += 1;
            actor.pending = Some((op, token, epoch));
        } else if let Some(r) = &view.record
            && r.owner == m
        {
            actor.epoch = r.epoch;
        }
    }
    assert!(
        losses > steps / 10 && changes > steps / 10,
        "{losses} {changes}"
    );
}

#[tokio::test]
async fn random_calls_with_lost_replies_match_the_model() {
    let Some(server) = support::server() else {
        return;
    };
    let seeds: u64 = std::env::var("TICKWHEEL_MODEL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    let mut changed = HashMap::new();
    for seed in 0..seeds {
        // A queue per seed would need a model per queue: flush instead.
        let client = redis::Client::open(server.url()).expect("url");
        let mut c = client.get_multiplexed_async_connection().await.expect("c");
        let _: () = redis::cmd("FLUSHALL")
            .query_async(&mut c)
            .await
            .expect("flush");
        run(&server.url(), seed, 600, &mut changed).await;
    }
    // Every mutating step changed the record at least once.
    for step in tickwheel_redis::STEPS {
        let name = format!("{}{}", step[..1].to_uppercase(), &step[1..]);
        assert!(
            changed.get(&name).is_some_and(|n| *n > 0),
            "{name} never applied: {changed:?}"
        );
    }
    eprintln!("transitions applied: {changed:?}");
}
