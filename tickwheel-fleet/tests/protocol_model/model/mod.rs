//! A model of one queue's owner record (tickwheel-redis's Lua steps) and of the fleet's etcd
//! leases, for the `stateright` model checker (`tests/protocol_model/main.rs`).
//!
//! Two members, `A` (0) and `B` (1), and two timers (chunk `i` holds timer `i`). Time is
//! discrete: one tick is one step of every clock. Each `Req` is a call of one script; Redis runs
//! scripts one at a time, atomically (`Exec`). A call's reply can be lost (the client sends the
//! same token again: the script must answer `Repeated`), and a call the client gave up on stays
//! in the network and may run late (a delayed packet). A member can crash at any step (it never
//! comes back; its spool keeps what it held, and its calls still in the network can still run).
//!
//! Two modes, as the protocol is used:
//! - `Mode::Handoff`: `acquire`, then the source `prepare`s, `append`s both chunks, `seal`s and
//!   drops its copy; a claimer `claim`s, fetches and `commit`s; a holder of PREPARING or
//!   CLAIMED `renew`s; any member `reclaim`s a PREPARING, OFFERED or CLAIMED record past its
//!   deadline. Counted epochs.
//! - `Mode::Fleet`: etcd leases with keep-alives (anchored to their send time), the owner key
//!   deleted at lease expiry, `adopt` at the token of a new owner key `grace` after the
//!   deletion, a member's self-fencing when its own lease end passed, and re-registration.
//!
//! The clocks: a member's lease end is `sent + ttl − margin` (the send time of the call that
//! renewed it); etcd and Redis expire at `received + ttl` on their clocks. A member's clock may
//! run slow: it may still act until `DRIFT` ticks after its lease end (the clocks' combined
//! disagreement over one lease at the documented rate bound, see docs/fleet.md).

use std::hash::Hash;

use stateright::{Model, Property};

mod scripts;

/// Members.
pub const A: u8 = 0;
pub const B: u8 = 1;
const MEMBERS: [u8; 2] = [A, B];
/// Timers: chunk `i` holds timer `i`.
const TIMERS: u8 = 2;
const ALL: u8 = (1 << TIMERS) - 1;

/// Which use of the protocol is modelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Handoff,
    Fleet,
}

/// Protocol faults planted on purpose: each must be caught.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// The scripts skip the epoch comparison: `held()` checks the owner only, and `adopt`
    /// takes a token not above the record's epoch.
    pub skip_epoch_check: bool,
    /// `reclaim` does not wait for the record's deadline.
    pub reclaim_ignores_lease: bool,
}

/// The model and its bounds.
#[derive(Clone, Debug)]
pub struct ProtocolModel {
    pub mode: Mode,
    pub faults: Faults,
    /// Record and etcd lease, in ticks.
    pub ttl: u8,
    /// A member's lease end is this much before etcd's or Redis's.
    pub margin: u8,
    /// A takeover waits this long after it saw the old owner key deleted.
    pub grace: u8,
    /// How long after its lease end a member with a slow clock may still act.
    pub drift: u8,
    /// Last tick explored.
    pub horizon: u8,
    /// Most crashes, lost replies and calls left behind in the network along one path.
    pub crashes: u8,
    pub losses: u8,
    pub network: usize,
}

impl ProtocolModel {
    /// The protocol as built: TTL 5, margin 1, grace 1 (TTL/5 each, as `FleetOptions`), drift
    /// 2 in the fleet; a record lease of 4 with margin and drift 1 in the handoff.
    pub fn new(mode: Mode) -> Self {
        match mode {
            Mode::Fleet => ProtocolModel {
                mode,
                faults: Faults::default(),
                ttl: 5,
                margin: 1,
                grace: 1,
                drift: 2,
                horizon: 7,
                crashes: 1,
                losses: 1,
                network: 3,
            },
            Mode::Handoff => ProtocolModel {
                mode,
                faults: Faults::default(),
                ttl: 4,
                margin: 1,
                grace: 0,
                drift: 1,
                horizon: 6,
                crashes: 1,
                losses: 1,
                network: 3,
            },
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RState {
    Owned,
    Preparing,
    Offered,
    Claimed,
}

/// The owner record (one Redis hash) with its chunk count, as the scripts see it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Record {
    pub state: RState,
    pub owner: u8,
    pub epoch: u8,
    pub deadline: u8,
    pub chunks: u8,
    /// The last mutating call (`token`, `step`) and its caller, for `Repeated`.
    pub token: u8,
    pub step: Step,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    Acquire,
    Prepare,
    Append(u8),
    Seal(u8),
    Claim,
    Reclaim,
    Commit,
    Renew,
    Adopt,
}

/// A call in the network: who sent it, when, at which epoch (the token for `adopt`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Req {
    pub from: u8,
    pub step: Step,
    pub epoch: u8,
    pub token: u8,
    pub sent: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reply {
    Ok {
        epoch: u8,
    },
    Repeated {
        epoch: u8,
    },
    /// Not held any more; `taken` chunks of the caller's epoch went to a claimer.
    Fenced {
        taken: u8,
    },
    Refused,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Idle,
    /// Dispatches the queue (in the fleet: while its lease is valid by its clock).
    Owner,
    Preparing {
        appended: u8,
    },
    /// Sealed and dropped its copy.
    Sealed,
    Claimed,
    /// Fleet: created the owner key, waits for `adopt`.
    Adopting,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Member {
    pub up: bool,
    pub phase: Phase,
    pub epoch: u8,
    /// Timers in its scheduler and spool (bit `i`: timer `i`).
    pub held: u8,
    /// A claimer's read copy, valid once its commit ran.
    pub fetched: u8,
    /// Its own lease end (ticks of real time; its clock may be `drift` slow).
    pub valid_until: u8,
    /// The token of the call it waits for.
    pub waiting: Option<u8>,
    /// Fleet: its lease at etcd ends at this tick (`None`: no lease).
    pub etcd_lease: Option<u8>,
    /// Fleet: a keep-alive sent at this tick, and, once etcd took it, whether the lease lived.
    pub keep_alive: Option<(u8, Option<bool>)>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub now: u8,
    pub record: Option<Record>,
    /// `fenced[e]`: chunks of epoch `e`'s offer a claimer took (the FENCED hash).
    pub fenced: [Option<u8>; 8],
    pub members: [Member; 2],
    pub net: Vec<Req>,
    /// Fleet: the owner key (holder, token), the store's revision, when the key was deleted.
    pub owner_key: Option<(u8, u8)>,
    pub revision: u8,
    pub deleted_at: Option<u8>,
    pub next_token: u8,
    pub crashes: u8,
    pub losses: u8,
    /// A write accepted from a caller whose epoch was not the record's (or an `adopt` at a
    /// token not above it).
    pub stale_write: bool,
    /// A record taken from a holder whose lease was still valid by its own clock.
    pub robbed: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Tick,
    Send(u8, Step),
    /// Redis runs call `i`; the reply reaches the caller (`true`) or is lost.
    Exec(usize, bool),
    Fetch(u8),
    /// Gives up on the call it waits for (its lease passed by its clock).
    Abandon(u8),
    Crash(u8),
    KeepAliveSend(u8),
    KeepAliveArrive(u8),
    /// The keep-alive's answer reaches the member (`true`) or is lost.
    KeepAliveReply(u8, bool),
    SelfFence(u8),
    Register(u8),
    /// Fleet: create the owner key (txn `create_revision == 0`) and send `adopt` at its token.
    TakeKey(u8),
}

/// Renumbers call tokens in order of age (only their equality matters), so that states that
/// differ only in how many calls came before are one state.
fn canonical_tokens(s: &mut State) {
    let mut seen: Vec<u8> = s.net.iter().map(|q| q.token).collect();
    seen.extend(s.record.as_ref().map(|r| r.token));
    seen.extend(s.members.iter().filter_map(|m| m.waiting));
    seen.sort_unstable();
    seen.dedup();
    let rank = |t: u8| seen.iter().position(|&x| x == t).unwrap_or(0) as u8;
    for q in &mut s.net {
        q.token = rank(q.token);
    }
    if let Some(r) = &mut s.record {
        r.token = rank(r.token);
    }
    for m in &mut s.members {
        m.waiting = m.waiting.map(rank);
    }
    s.next_token = seen.len() as u8;
}

fn mask(n: u8) -> u8 {
    ((1u16 << n) - 1) as u8
}

impl ProtocolModel {
    /// Whether member `m` still acts by its own (possibly slow) clock.
    fn lease_valid(&self, s: &State, m: u8) -> bool {
        s.now < s.members[m as usize].valid_until.saturating_add(self.drift)
    }

    /// Whether member `m` hands out the queue's timers now.
    pub fn dispatching(&self, s: &State, m: u8) -> bool {
        let mem = &s.members[m as usize];
        mem.up
            && mem.phase == Phase::Owner
            && (self.mode == Mode::Handoff || self.lease_valid(s, m))
    }

    /// Places holding timer `i`: the record's holder, a sealed or claimed offer in Redis, a
    /// value handed back to a fenced source, a committed claimer's copy. Exactly one is custody.
    pub fn places(&self, s: &State, i: u8) -> u8 {
        let bit = 1 << i;
        let mut n = 0;
        if let Some(r) = &s.record
            && matches!(r.state, RState::Offered | RState::Claimed)
            && i < r.chunks
        {
            n += 1;
        }
        for (m, mem) in s.members.iter().enumerate() {
            if mem.held & bit != 0 {
                let taken = s.fenced[mem.epoch as usize].is_some_and(|t| i < t);
                let source_copy = s.record.as_ref().is_some_and(|r| {
                    r.owner == m as u8 && r.epoch == mem.epoch && r.state == RState::Preparing
                });
                if source_copy || !taken {
                    n += 1;
                }
            }
            if mem.fetched & bit != 0
                && mem.held & bit == 0
                && s.record.as_ref().is_some_and(|r| {
                    r.state == RState::Owned && r.owner == m as u8 && r.epoch == mem.epoch
                })
            {
                n += 1;
            }
        }
        n
    }
}

impl Model for ProtocolModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let idle = Member {
            up: true,
            phase: Phase::Idle,
            epoch: 0,
            held: 0,
            fetched: 0,
            valid_until: 0,
            waiting: None,
            etcd_lease: None,
            keep_alive: None,
        };
        let mut s = State {
            now: 0,
            record: None,
            fenced: [None; 8],
            members: [idle.clone(), idle],
            net: Vec::new(),
            owner_key: None,
            revision: 0,
            deleted_at: None,
            next_token: 0,
            crashes: 0,
            losses: 0,
            stale_write: false,
            robbed: false,
        };
        s.members[A as usize].held = ALL;
        if self.mode == Mode::Fleet {
            // Both live, `A` owns the queue at token 1 (adopted), its keys under its lease.
            s.revision = 1;
            s.owner_key = Some((A, 1));
            for m in &mut s.members {
                m.etcd_lease = Some(self.ttl);
                m.valid_until = self.ttl - self.margin;
            }
            let a = &mut s.members[A as usize];
            a.phase = Phase::Owner;
            a.epoch = 1;
            s.record = Some(Record {
                state: RState::Owned,
                owner: A,
                epoch: 1,
                deadline: 0,
                chunks: 0,
                token: 0,
                step: Step::Adopt,
            });
            s.next_token = 1;
        }
        vec![s]
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        if s.now < self.horizon {
            out.push(Action::Tick);
        }
        for (i, q) in s.net.iter().enumerate() {
            let waited = s.members[q.from as usize].waiting == Some(q.token);
            out.push(Action::Exec(i, true));
            if waited && s.losses < self.losses {
                out.push(Action::Exec(i, false));
            }
        }
        for m in MEMBERS {
            let mem = &s.members[m as usize];
            if !mem.up {
                continue;
            }
            if s.crashes < self.crashes {
                out.push(Action::Crash(m));
            }
            if mem.waiting.is_some() {
                let leased = matches!(
                    mem.phase,
                    Phase::Preparing { .. } | Phase::Claimed | Phase::Adopting
                );
                if leased && !self.lease_valid(s, m) && s.net.len() < self.network {
                    out.push(Action::Abandon(m));
                }
            } else {
                self.member_steps(s, m, out);
            }
            if self.mode == Mode::Fleet {
                self.lease_steps(s, m, out);
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Tick => {
                s.now += 1;
                for m in MEMBERS {
                    let mem = &mut s.members[m as usize];
                    if mem.etcd_lease.is_some_and(|end| end <= s.now) {
                        mem.etcd_lease = None;
                        if s.owner_key.is_some_and(|(h, _)| h == m) {
                            s.owner_key = None;
                            s.deleted_at = Some(s.now);
                        }
                    }
                }
            }
            Action::Exec(i, delivered) => {
                let q = s.net[i];
                let reply = self.script(&mut s, &q);
                if delivered {
                    s.net.remove(i);
                    self.on_reply(&mut s, &q, reply);
                } else {
                    s.losses += 1;
                }
            }
            Action::Fetch(m) => {
                let epoch = s.members[m as usize].epoch;
                if let Some(r) = &s.record
                    && r.state == RState::Claimed
                    && r.owner == m
                    && r.epoch == epoch
                {
                    s.members[m as usize].fetched = mask(r.chunks);
                } else {
                    return None;
                }
            }
            Action::Abandon(m) => {
                let mem = &mut s.members[m as usize];
                mem.waiting = None;
                if mem.phase != Phase::Owner {
                    mem.phase = Phase::Idle;
                }
            }
            Action::Crash(m) => {
                s.crashes += 1;
                let mem = &mut s.members[m as usize];
                mem.up = false;
                mem.waiting = None;
                mem.keep_alive = None;
            }
            Action::Send(m, step) => {
                let epoch = match step {
                    Step::Adopt => s.owner_key.map(|(_, t)| t).unwrap_or(0),
                    _ => s.members[m as usize].epoch,
                };
                self.send(&mut s, m, step, epoch);
            }
            Action::KeepAliveSend(m) => s.members[m as usize].keep_alive = Some((s.now, None)),
            Action::KeepAliveArrive(m) => {
                let (ttl, now) = (self.ttl, s.now);
                let mem = &mut s.members[m as usize];
                let alive = mem.etcd_lease.is_some();
                if alive {
                    mem.etcd_lease = Some(now + ttl);
                }
                mem.keep_alive = mem.keep_alive.map(|(sent, _)| (sent, Some(alive)));
            }
            Action::KeepAliveReply(m, delivered) => {
                let (ttl, margin) = (self.ttl, self.margin);
                if !delivered {
                    s.losses += 1;
                }
                let mem = &mut s.members[m as usize];
                if let Some((sent, Some(alive))) = mem.keep_alive.take()
                    && delivered
                {
                    if alive {
                        // River #1213: anchored to the send time, not the answer's arrival.
                        mem.valid_until = mem.valid_until.max(sent + ttl - margin);
                    } else {
                        mem.valid_until = 0;
                    }
                }
            }
            Action::SelfFence(m) => {
                // Freeze the queue (the user's store keeps its timers) and revoke the lease:
                // etcd deletes the member's keys at once.
                let mem = &mut s.members[m as usize];
                mem.phase = Phase::Idle;
                mem.held = 0;
                mem.etcd_lease = None;
                mem.keep_alive = None;
                if s.owner_key.is_some_and(|(h, _)| h == m) {
                    s.owner_key = None;
                    s.deleted_at = Some(s.now);
                }
            }
            Action::Register(m) => {
                let mem = &mut s.members[m as usize];
                mem.etcd_lease = Some(s.now + self.ttl);
                mem.valid_until = s.now + self.ttl - self.margin;
            }
            Action::TakeKey(m) => {
                s.revision += 1;
                s.owner_key = Some((m, s.revision));
                let mem = &mut s.members[m as usize];
                mem.phase = Phase::Adopting;
                let token = s.revision;
                self.send(&mut s, m, Step::Adopt, token);
            }
        }
        canonical_tokens(&mut s);
        Some(s)
    }

    fn within_boundary(&self, s: &State) -> bool {
        s.now <= self.horizon && s.revision < 7 && s.next_token < 250
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "custody: every timer in exactly one place",
                |m: &Self, s: &State| {
                    m.mode == Mode::Fleet || (0..TIMERS).all(|i| m.places(s, i) == 1)
                },
            ),
            Property::always("one dispatching owner at a time", |m: &Self, s: &State| {
                MEMBERS.iter().filter(|&&x| m.dispatching(s, x)).count() <= 1
            }),
            Property::always("no write by a fenced epoch", |_, s: &State| !s.stale_write),
            Property::always(
                "no record taken from a holder within its lease",
                |_, s: &State| !s.robbed,
            ),
            Property::sometimes(
                "a survivor dispatches after the owner crashed",
                |m: &Self, s: &State| !s.members[A as usize].up && m.dispatching(s, B),
            ),
            Property::sometimes("the queue moves to B", |m: &Self, s: &State| {
                s.members[A as usize].up
                    && m.dispatching(s, B)
                    && (m.mode == Mode::Fleet || s.members[B as usize].held == ALL)
            }),
        ]
    }
}

impl ProtocolModel {
    /// Steps a member may start when it waits for no reply.
    fn member_steps(&self, s: &State, m: u8, out: &mut Vec<Action>) {
        let mem = &s.members[m as usize];
        let valid = self.lease_valid(s, m);
        let rec = s.record.as_ref();
        match (self.mode, mem.phase) {
            (Mode::Handoff, Phase::Idle) if m == A && rec.is_none() => {
                out.push(Action::Send(m, Step::Acquire))
            }
            (Mode::Handoff, Phase::Owner) if m == A && mem.held == ALL => {
                out.push(Action::Send(m, Step::Prepare))
            }
            (Mode::Handoff, Phase::Preparing { appended }) if valid => {
                if appended < TIMERS {
                    out.push(Action::Send(m, Step::Append(appended)));
                } else {
                    out.push(Action::Send(m, Step::Seal(appended)));
                }
                self.renew(s, m, out);
            }
            (Mode::Handoff, Phase::Claimed) if valid => {
                if mem.fetched == 0 {
                    out.push(Action::Fetch(m));
                } else {
                    out.push(Action::Send(m, Step::Commit));
                }
                self.renew(s, m, out);
            }
            (
                Mode::Handoff,
                Phase::Idle | Phase::Sealed | Phase::Claimed | Phase::Preparing { .. },
            ) => {
                if let Some(r) = rec {
                    if r.state == RState::Offered && m == B {
                        out.push(Action::Send(m, Step::Claim));
                    }
                    // The member reads the record's deadline first (the planted fault skips
                    // that check too).
                    let due = s.now >= r.deadline || self.faults.reclaim_ignores_lease;
                    if r.state != RState::Owned && due {
                        out.push(Action::Send(m, Step::Reclaim));
                    }
                }
            }
            (Mode::Fleet, _)
                if !valid && (mem.phase == Phase::Owner || mem.etcd_lease.is_some()) =>
            {
                out.push(Action::SelfFence(m))
            }
            (Mode::Fleet, Phase::Idle) => {
                let leased = mem.etcd_lease.is_some() && s.now < mem.valid_until;
                let free_since = s.deleted_at.filter(|_| s.owner_key.is_none());
                if leased && free_since.is_some_and(|d| s.now >= d + self.grace) {
                    out.push(Action::TakeKey(m));
                }
            }
            _ => {}
        }
    }

    /// A renewal when it would move the member's lease end.
    fn renew(&self, s: &State, m: u8, out: &mut Vec<Action>) {
        if s.now + self.ttl - self.margin > s.members[m as usize].valid_until {
            out.push(Action::Send(m, Step::Renew));
        }
    }

    /// Fleet: keep-alives and re-registration.
    fn lease_steps(&self, s: &State, m: u8, out: &mut Vec<Action>) {
        let mem = &s.members[m as usize];
        match mem.keep_alive {
            None if mem.etcd_lease.is_some() || mem.valid_until > s.now => {
                out.push(Action::KeepAliveSend(m))
            }
            None if mem.phase == Phase::Idle => out.push(Action::Register(m)),
            Some((_, None)) => out.push(Action::KeepAliveArrive(m)),
            Some((_, Some(_))) => {
                out.push(Action::KeepAliveReply(m, true));
                if s.losses < self.losses {
                    out.push(Action::KeepAliveReply(m, false));
                }
            }
            None => {}
        }
    }
}
