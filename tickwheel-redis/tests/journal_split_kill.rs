//! redis-server SIGKILLed again and again (some times frozen with SIGSTOP first, batches in
//! flight) while a writer journals with buckets of two records on average, so that nearly
//! every put splits a bucket and every end deletes a record in place (the journal's
//! compaction), then restarted from its AOF. After each restart the journal holds what was
//! acknowledged, each id once and in the bucket its hash names, the meta's live count is the
//! records' count, and the same `Journal` handle goes on writing through the restarted server.
//!
//! A request answered with an error (the server died under it) may or may not have been
//! applied: the check allows either, op by op, and then checks that no such request was
//! applied in part where the load can tell. Each op leaves its id's state whole (a put the
//! record, an end nothing), so an id holds what its last applied op left.

mod support;

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::*;
use tickwheel_redis::Member;
use tickwheel_redis::journal::{Journal, JournalError, JournalOptions, Pending};
use tickwheel_redis::keys::{DEFAULT_PREFIX, JournalKeys};

const QUEUE: &[u8] = b"split.example";
const TOKEN: u64 = 23;
/// `JournalOptions::bucket_load`: a put splits a bucket whenever the live count passes twice
/// the buckets.
const LOAD: u64 = 2;

/// What an op leaves for its id: (deadline µs, value) after a put, nothing after an end.
type State = Option<(u64, Vec<u8>)>;

/// The live records by id: (deadline µs, value).
type Live = BTreeMap<u64, (u64, Vec<u8>)>;

/// One submitted request: the ids of its ops and the states they leave, in order, and its
/// answer (`None`: not yet; `Some(false)`: an error, outcome unknown).
struct Sent {
    ops: Vec<(u64, State)>,
    acked: Option<bool>,
}

/// What the writer task and the test share: the requests in submission order (the order
/// Redis applies them: one handle, one queue), the count acknowledged, the stop flag.
#[derive(Default)]
struct Shared {
    log: Mutex<Vec<Sent>>,
    acked: AtomicUsize,
    stop: AtomicBool,
}

/// How a writer picks each op, in percent: an end of a live id, a put again of a live id
/// (a reschedule); 3 % end an id that holds nothing; the rest put new ids.
#[derive(Clone, Copy, Debug)]
struct Mix {
    end: u64,
    reput: u64,
}

const GROW: Mix = Mix { end: 20, reput: 10 };
const SHRINK: Mix = Mix { end: 55, reput: 10 };
/// Ends nine ops in ten: the journal empties (its meta deleted) and starts over, again and
/// again.
const DRAIN: Mix = Mix { end: 87, reput: 0 };

/// The writer's choices (a deterministic generator, so a failure replays) and the ids it
/// believes live or ended: only guesses, the check works from the log.
struct Writer {
    live: Vec<u64>,
    ended: Vec<u64>,
    next_id: u64,
    seq: u64,
    rng: u64,
}

impl Writer {
    fn rand(&mut self, below: u64) -> u64 {
        // splitmix64
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % below
    }

    /// A new record for `id`: every put of an id differs from the others in deadline and
    /// value; one in eleven values is empty.
    fn record(&mut self, id: u64) -> (u64, Vec<u8>) {
        self.seq += 1;
        let value = if self.seq.is_multiple_of(11) {
            Vec::new()
        } else {
            format!("v{id}.{}", self.seq).into_bytes()
        };
        (1_765_000_000_000_000 + self.seq, value)
    }

    /// One request of one to six ops.
    fn request(&mut self, mix: Mix) -> Vec<(u64, State)> {
        let n = 1 + self.rand(6);
        let mut ops = Vec::new();
        for _ in 0..n {
            let roll = self.rand(100);
            let op = if roll < mix.end && !self.live.is_empty() {
                let at = self.rand(self.live.len() as u64) as usize;
                let id = self.live.swap_remove(at);
                self.ended.push(id);
                (id, None)
            } else if roll < mix.end + 3 {
                let id = if !self.ended.is_empty() && self.rand(2) == 0 {
                    let at = self.rand(self.ended.len() as u64) as usize;
                    self.ended[at]
                } else {
                    u64::MAX - self.rand(1000)
                };
                (id, None)
            } else if roll < mix.end + 3 + mix.reput && !self.live.is_empty() {
                let at = self.rand(self.live.len() as u64) as usize;
                let id = self.live[at];
                (id, Some(self.record(id)))
            } else {
                let id = self.next_id;
                self.next_id += 1;
                self.live.push(id);
                (id, Some(self.record(id)))
            };
            ops.push(op);
        }
        ops
    }
}

/// Submits rounds of 32 requests, up to four rounds outstanding (so that Redis has batches to
/// apply when it is frozen or killed), until told to stop; then waits for every answer.
async fn write(j: Journal, mut w: Writer, mix: Mix, shared: Arc<Shared>) -> Writer {
    let mut rounds: VecDeque<Vec<(usize, Pending)>> = VecDeque::new();
    while !shared.stop.load(Ordering::SeqCst) {
        let round = (0..32)
            .map(|_| {
                let ops = w.request(mix);
                let sent: Vec<_> = ops
                    .iter()
                    .map(|(id, state)| match state {
                        Some((deadline, value)) => put(&id.to_be_bytes(), *deadline, value),
                        None => end(&id.to_be_bytes()),
                    })
                    .collect();
                // Logged and submitted under the lock: the log's order is the submission order.
                let mut log = shared.log.lock().expect("log");
                log.push(Sent { ops, acked: None });
                (log.len() - 1, j.submit(QUEUE, TOKEN, sent))
            })
            .collect();
        rounds.push_back(round);
        if rounds.len() >= 4 {
            settle(rounds.pop_front().unwrap_or_default(), &shared).await;
        }
    }
    for round in rounds {
        settle(round, &shared).await;
    }
    w
}

async fn settle(round: Vec<(usize, Pending)>, shared: &Shared) {
    for (i, pending) in round {
        let acked = match pending.await {
            Ok(_) => true,
            // The server died under it (or was not back yet): applied or not.
            Err(JournalError::Redis(_)) => false,
            Err(e) => panic!("request {i}: {e}"),
        };
        if acked {
            shared.acked.fetch_add(1, Ordering::SeqCst);
        }
        shared.log.lock().expect("log")[i].acked = Some(acked);
    }
}

/// Waits until `shared` counts `n` acknowledged requests (a hang guard of 60 s, no timing
/// asserted).
async fn acknowledged(shared: &Shared, n: usize, when: &str) {
    let started = Instant::now();
    while shared.acked.load(Ordering::SeqCst) < n {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{when}: only {} of {n} requests acknowledged in 60 s",
            shared.acked.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Loads the journal with a reader of its own and checks it against `before` (the journal at
/// the last check) and `log` (every request since, answered): each id holds what its last
/// acknowledged op left (or `before`'s), or what an op of unknown outcome after it left; no
/// other id is there. Then checks that each request of unknown outcome was applied whole or
/// not at all ([`whole`]) and the layout ([`layout`]). Returns the records, the bucket count
/// and how many requests of unknown outcome were seen applied.
async fn check(url: &str, before: &Live, log: &[Sent], when: &str) -> (Live, u64, usize) {
    let mut may: BTreeMap<u64, Vec<State>> = before
        .iter()
        .map(|(id, r)| (*id, vec![Some(r.clone())]))
        .collect();
    for (i, sent) in log.iter().enumerate() {
        let acked = sent
            .acked
            .unwrap_or_else(|| panic!("{when}: request {i} unanswered"));
        for (id, state) in &sent.ops {
            let states = may.entry(*id).or_insert_with(|| vec![None]);
            if acked {
                *states = vec![state.clone()];
            } else {
                states.push(state.clone());
            }
        }
    }
    let reader = connect(url, Member::new_boot("reader")).await;
    let j = start_with(&reader, options());
    let records = retry(100, || async {
        j.load(QUEUE, TOKEN).await.map_err(|e| match e {
            JournalError::Redis(e) => e,
            other => panic!("{when}: load: {other}"),
        })
    })
    .await
    .unwrap_or_else(|e| panic!("{when}: load: {e}"));
    let mut loaded = Live::new();
    for r in records {
        let id = u64::from_be_bytes(r.id.as_slice().try_into().expect("8-byte id"));
        let again = loaded.insert(id, (r.deadline_us, r.value));
        assert!(again.is_none(), "{when}: id {id} loaded twice");
    }
    for (id, states) in &may {
        let got = loaded.get(id).cloned();
        if !states.contains(&got) {
            let what = match (&got, states.iter().all(Option::is_none)) {
                (None, _) => "an acknowledged put is lost",
                (Some(_), true) => "an acknowledged end came back",
                (Some(_), false) => "a record not written last",
            };
            panic!("{when}: {what}: id {id} loaded as {got:?}, may be one of {states:?}");
        }
    }
    let stray: Vec<_> = loaded.keys().filter(|id| !may.contains_key(id)).collect();
    assert!(stray.is_empty(), "{when}: ids never written: {stray:?}");
    let applied = whole(log, &loaded, when);
    let buckets = layout(url, &loaded, when).await;
    (loaded, buckets, applied)
}

/// Checks that each request of unknown outcome in `log` was applied whole or not at all,
/// where `loaded` tells: an op that is the last one on its id in all of `log` left its state
/// if its request was applied, so a different state says "not applied", and the record of
/// that put (each put's is unique) says "applied". Returns how many were applied.
fn whole(log: &[Sent], loaded: &Live, when: &str) -> usize {
    let mut last = BTreeMap::new();
    for (i, sent) in log.iter().enumerate() {
        for (id, _) in &sent.ops {
            last.insert(*id, i);
        }
    }
    let mut applied = 0;
    for (i, sent) in log.iter().enumerate() {
        if sent.acked != Some(false) {
            continue;
        }
        // The request's last op on each id (a later op of the request overrides an earlier).
        let own: BTreeMap<u64, &State> = sent.ops.iter().map(|(id, s)| (*id, s)).collect();
        let mut verdicts = Vec::new();
        for (id, state) in own {
            if last.get(&id) != Some(&i) {
                continue;
            }
            let got = loaded.get(&id).cloned();
            if got != *state {
                verdicts.push((id, false));
            } else if state.is_some() {
                verdicts.push((id, true));
            }
        }
        let yes = verdicts.iter().filter(|(_, a)| *a).count();
        assert!(
            yes == 0 || yes == verdicts.len(),
            "{when}: request {i} (outcome unknown) applied in part, by id: {verdicts:?}"
        );
        applied += usize::from(yes > 0);
    }
    applied
}

/// Reads the journal's keys with raw commands and checks that the meta's live count is the
/// number of records in its buckets, that no id is in two buckets, that each is in the bucket
/// its hash names under the meta's level and split (no bucket beyond them), that the splits
/// kept up with the puts (at most `LOAD` records a bucket on average), that no meta means no
/// record, and that the buckets hold exactly `loaded`'s ids. Returns the bucket count (0
/// without a meta).
async fn layout(url: &str, loaded: &Live, when: &str) -> u64 {
    let keys = JournalKeys::new(DEFAULT_PREFIX, QUEUE);
    let mut c = raw(url).await;
    let (n, level, split): (Option<u64>, Option<u32>, Option<u64>) = redis::cmd("HMGET")
        .arg(&keys.meta)
        .arg("n")
        .arg("level")
        .arg("split")
        .query_async(&mut c)
        .await
        .expect("hmget");
    let names: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}*", keys.bucket_prefix))
        .query_async(&mut c)
        .await
        .expect("keys");
    let mut held: BTreeMap<u64, u64> = BTreeMap::new();
    for name in names {
        let b: u64 = name
            .strip_prefix(&keys.bucket_prefix)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{when}: key {name}"));
        let ids: Vec<Vec<u8>> = redis::cmd("HKEYS")
            .arg(&name)
            .query_async(&mut c)
            .await
            .expect("hkeys");
        for id in ids {
            let id = u64::from_be_bytes(id.as_slice().try_into().expect("8-byte id"));
            if let Some(other) = held.insert(id, b) {
                panic!("{when}: id {id} in buckets {other} and {b}");
            }
        }
    }
    let Some(n) = n else {
        assert!(
            held.is_empty(),
            "{when}: no meta, yet {} records in buckets",
            held.len()
        );
        return 0;
    };
    let (level, split) = (level.expect("level"), split.expect("split"));
    let size = 1u64 << level;
    assert!(split < size, "{when}: split {split} at level {level}");
    let buckets = size + split;
    let records = held.len() as u64;
    assert_eq!(
        n, records,
        "{when}: the meta counts {n} live records, the buckets hold {records}"
    );
    assert!(
        n <= LOAD * buckets,
        "{when}: {n} records in {buckets} buckets: a split is missing"
    );
    for (id, b) in &held {
        let h = u64::from(h32(&id.to_be_bytes()));
        let mut home = h % size;
        if home < split {
            home = h % (size * 2);
        }
        assert_eq!(
            *b, home,
            "{when}: id {id} in bucket {b}, its hash names {home} (level {level}, split {split})"
        );
    }
    assert!(
        held.keys().eq(loaded.keys()),
        "{when}: the buckets hold other ids than the load returned"
    );
    buckets
}

fn options() -> JournalOptions {
    JournalOptions {
        bucket_load: LOAD as u32,
        ..JournalOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kills_during_splits_and_compaction_lose_nothing_acknowledged() {
    let Some(mut server) = server() else {
        return;
    };
    let url = server.url();
    let p = member(&server, "mx1").await;
    adopt(&p, QUEUE, TOKEN).await;
    // One handle throughout: it must reconnect and go on after every restart.
    let j = start_with(&p, options());
    let mut writer = Writer {
        live: Vec::new(),
        ended: Vec::new(),
        next_id: 0,
        seq: 0,
        rng: 0x5eed_2026,
    };
    let mut live = Live::new();
    // (requests acknowledged before the kill, freeze Redis with SIGSTOP first, mix)
    let cycles = [
        (400, false, GROW),
        (1500, true, GROW),
        (5, false, GROW),
        (800, true, SHRINK),
        (1500, false, DRAIN),
        (600, true, GROW),
        (50, false, SHRINK),
    ];
    for (c, &(after, freeze, mix)) in cycles.iter().enumerate() {
        let when = format!(
            "restart {} (killed once {after} requests were acknowledged, {mix:?})",
            c + 1
        );
        let shared = Arc::new(Shared::default());
        let task = tokio::spawn(write(j.clone(), writer, mix, shared.clone()));
        acknowledged(&shared, after, &when).await;
        if freeze {
            // Redis frozen with batches in flight: none of them is answered before it dies.
            let pid = server.pid().expect("redis pid");
            tickwheel_testkit::send_signal(pid, "STOP").expect("stop redis");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        server.kill9().expect("kill redis");
        shared.stop.store(true, Ordering::SeqCst);
        writer = task.await.expect("writer");
        server.restart().expect("restart redis");
        let log = std::mem::take(&mut *shared.log.lock().expect("log"));
        let (loaded, buckets, applied) = check(&url, &live, &log, &when).await;
        let unknown = log.iter().filter(|s| s.acked == Some(false)).count();
        eprintln!(
            "{when}: {} requests acknowledged, {unknown} unknown (at least {applied} of them \
             applied); {} records in {buckets} buckets",
            log.len() - unknown,
            loaded.len(),
        );
        live = loaded;
        writer.live = live.keys().copied().collect();
    }
    // The same handle after the last restart, no kill: it splits and compacts on, and every
    // request from the first acknowledged one on is acknowledged (the ones before may have met
    // the old, dead connection).
    let when = "after the last restart";
    let shared = Arc::new(Shared::default());
    let task = tokio::spawn(write(j.clone(), writer, GROW, shared.clone()));
    acknowledged(&shared, 1000, when).await;
    shared.stop.store(true, Ordering::SeqCst);
    task.await.expect("writer");
    let log = std::mem::take(&mut *shared.log.lock().expect("log"));
    let first = log.iter().position(|s| s.acked == Some(true)).unwrap_or(0);
    let failed = log[first..]
        .iter()
        .filter(|s| s.acked != Some(true))
        .count();
    assert_eq!(failed, 0, "{when}: requests failed on a running server");
    let (loaded, buckets, _) = check(&url, &live, &log, when).await;
    eprintln!(
        "{when}: {} requests, {} records in {buckets} buckets",
        log.len(),
        loaded.len()
    );
}
