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

use stateright::{Model, Property};

mod scripts;
mod state;
mod steps;

use state::canonical_tokens;
pub use state::*;

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
