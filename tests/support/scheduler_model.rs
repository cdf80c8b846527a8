//! [`tickwheel::sync::Scheduler`] driven through an explicit interleaving of its phases,
//! against a model of each id's lifecycle (absent → pending → in flight → absent).
//!
//! One thread plays every role in turn: producers (`schedule`, `reschedule`), an operator
//! (`cancel`, `drain_queue`), and a dispatcher whose phase two is spread over many steps:
//! `pop_due` opens a batch and keeps it open, later steps take some of its items, finish
//! (drop or consume) the `Due`s taken in any order, or drop the batch half-taken — with any
//! other operation in between. Ids and queues are a handful of `u8`s, so every operation
//! keeps meeting ids that are pending, in flight, or just done.
//!
//! The model gives, for every step, the exact answer: schedule/reschedule/cancel results,
//! each batch's ids in delivery order (deadline tick, then schedule order, whatever the
//! shard count), each `Due`'s id, queue, deadline and value, a drain's two lists in delivery
//! order. After every step it checks `len`, `in_flight_len`, `queue_len` of every queue,
//! `queues()` (ordered by each queue's oldest current member: the lowest `seq` among its
//! pending and in-flight timers, whatever the shard count), `next_deadline` (`None` iff
//! nothing pending, never later than the earliest pending deadline's tick), and `stats()`.
//! Flow control joins in: `hold_queue`, `release_queue` and `set_concurrency` at any step;
//! the model's `pop_due` skips held queues and hands out no more of a limited queue than its
//! limit leaves beside its members in flight that hold a slot (those popped once the queue
//! had a limit record), and `set_rate` (the model keeps its own GCRA per queue, over the
//! exact `now`); `flush_queue` and `pop_due_queue` too. `next_deadline` is checked only while no queue is held or limited
//! (a parked timer is pending but not in it).
//!
//! A ledger of every accepted value checks **exactly once**: each ends once, delivered (its
//! `Due` finished) or returned (cancel, drain), never both, never neither — at the end
//! everything left is dropped or drained and every value must be accounted for.
//!
//! Used by `tests/scheduler_model.rs`, and included with `#[path]` by the fuzz crate
//! (`scheduler_races`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

use tickwheel::sync::{
    Cancel, Drained, Due, DueBatch, RateLimit, RescheduleError, ScheduleError, Scheduler,
};

type Sched = Scheduler<u8, u8, u64>;
type TheDue = Due<u8, u8, u64>;
type Batch = DueBatch<u8, u8, u64>;

/// Queues the harness uses (`queue % QUEUES`).
pub const QUEUES: u8 = 4;
/// Ids the harness uses (`id % IDS`).
pub const IDS: u8 = 12;

/// An instant, chosen in ticks relative to the largest `now` seen so far, so sequences keep
/// landing near the due edge whatever the resolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    /// `ticks` whole ticks after the clock position, minus `sub` nanoseconds (`sub` taken
    /// modulo the resolution): the tick edge and just before it.
    Ahead { ticks: u32, sub: u32 },
    /// `ticks` ticks before the clock position (time going backwards, past deadlines).
    Behind { ticks: u32 },
    /// `ns` nanoseconds before the origin: deadline tick 0, and no `now` tick at all.
    BeforeOrigin { ns: u32 },
    /// About 2^`shift` ticks after the origin (far deadlines, saturation).
    Far { shift: u8 },
}

/// One step of an interleaving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchedOp {
    Schedule {
        queue: u8,
        id: u8,
        at: At,
    },
    Reschedule {
        id: u8,
        at: At,
    },
    Cancel(u8),
    Drain(u8),
    /// Phase one: a batch of up to `limit` (255: no limit) due at `now`, kept open.
    PopDue {
        now: At,
        limit: u8,
    },
    /// Take `n` items out of open batch `batch` (modulo the open count).
    Take {
        batch: u8,
        n: u8,
    },
    /// Drop open batch `batch`: its untaken items go back, pending and due.
    DropBatch(u8),
    /// Finish a taken `Due`: drop it, or consume it with `into_value`.
    Finish {
        due: u8,
        consume: bool,
    },
    /// `hold_queue`.
    Hold(u8),
    /// `release_queue`.
    Release(u8),
    /// `set_concurrency(queue, limit)`; a `limit` of 255 is `None`.
    Limit {
        queue: u8,
        limit: u8,
    },
    /// `flush_queue(queue, now)`.
    Flush {
        queue: u8,
        now: At,
    },
    /// `pop_due_queue(queue, now, limit)`, kept open like `PopDue`.
    PopQueue {
        queue: u8,
        now: At,
        limit: u8,
    },
    /// `set_rate(queue, one per (interval % 4 + 1) resolutions, burst % 3 + 1)`; an
    /// `interval` of 255 is `None`.
    Rate {
        queue: u8,
        interval: u8,
        burst: u8,
    },
}

/// The model's GCRA of one queue, in nanoseconds since the origin (`u128`: exact over the
/// whole tick range).
#[derive(Debug, Clone, Copy, Default)]
struct Gcra {
    /// 0: lifted (or never set).
    emission: u128,
    /// The last limit set's interval and burst (kept across a lift).
    basis: u128,
    burst: u128,
    tat: u128,
}

impl Gcra {
    fn permit(&mut self, now: u128) -> bool {
        if self.emission == 0 {
            return true;
        }
        let from = self.tat.max(now);
        if from - now > self.emission * (self.burst - 1) {
            return false;
        }
        self.tat = from + self.emission;
        true
    }

    /// `set_rate` as documented: the backlog at `max(seen, tat − interval × burst)` (the
    /// latest `now` polled, or the earliest the last hand-out could be) rescaled to the new
    /// interval, rounded up.
    fn set(&mut self, emission: u128, burst: u128, seen: u128) {
        self.emission = emission;
        if emission == 0 {
            return;
        }
        let (old, old_burst) = (self.basis, self.burst);
        (self.basis, self.burst) = (emission, burst);
        if old == 0 || old == emission {
            return;
        }
        let from = seen.max(self.tat.saturating_sub(old * old_burst));
        if self.tat > from {
            self.tat = from + ((self.tat - from) * emission).div_ceil(old);
        }
    }
}

/// Where an accepted value is; it ends exactly once, in `Delivered` or `Returned`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Pending,
    InFlight,
    Delivered,
    Returned,
}

#[derive(Debug, Clone, Copy)]
struct Timer {
    queue: u8,
    tick: u64,
    seq: u64,
    at: Instant,
    value: u64,
}

#[derive(Debug, Clone, Copy)]
enum State {
    Pending(Timer),
    InFlight(Timer),
}

struct OpenBatch {
    batch: Batch,
    /// The `now` it was popped at.
    now: Instant,
    /// Ids still to come out of it, in order.
    expected: VecDeque<u8>,
}

/// Runs one interleaving against a real scheduler and the model; panics on the first
/// difference.
pub struct SchedHarness {
    sched: Sched,
    origin: Instant,
    resolution: Duration,
    shards: usize,
    ids: BTreeMap<u8, State>,
    seq: u64,
    ledger: BTreeMap<u64, Fate>,
    batches: Vec<OpenBatch>,
    held: Vec<(TheDue, u8)>,
    /// Largest `now` tick seen, where [`At`] is measured from.
    clock: u64,
    /// Queues held.
    holds: BTreeSet<u8>,
    /// Queues with a limit record (ever limited), and their current limits.
    records: BTreeSet<u8>,
    limits: BTreeMap<u8, usize>,
    /// In-flight ids that hold a slot of their queue's limit.
    slotted: BTreeSet<u8>,
    /// Rate limits (kept when lifted: the GCRA state stays).
    rates: BTreeMap<u8, Gcra>,
    /// The latest `now` (ns) a pop ran at: the rate limits' clock, as the scheduler keeps
    /// it (and where a rate change rescales from).
    seen: u128,
    next_value: u64,
    step: usize,
    op: Option<SchedOp>,
}

impl fmt::Debug for SchedHarness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "step {} op {:?} (shards {}, resolution {:?}): model {:?}; open batches {}, held {}",
            self.step,
            self.op,
            self.shards,
            self.resolution,
            self.ids,
            self.batches.len(),
            self.held.len()
        )
    }
}

macro_rules! ensure {
    ($h:expr, $cond:expr, $($fmt:tt)+) => {
        if !$cond {
            panic!("{:?}: {}", $h, format!($($fmt)+));
        }
    };
}

/// The resolutions an input can choose.
pub const RESOLUTIONS: [Duration; 4] = [
    Duration::from_millis(1),
    Duration::from_nanos(1),
    Duration::from_millis(3),
    Duration::from_secs(1),
];

impl SchedHarness {
    /// A scheduler with `shards` (1..=8) shards and `RESOLUTIONS[resolution % 4]`.
    pub fn new(shards: u8, resolution: u8) -> Self {
        let shards = usize::from(shards % 8) + 1;
        let resolution = RESOLUTIONS[usize::from(resolution) % RESOLUTIONS.len()];
        let origin = Instant::now();
        let sched = Scheduler::builder()
            .shards(shards)
            .resolution(resolution)
            .origin(origin)
            .build();
        SchedHarness {
            sched,
            origin,
            resolution,
            shards,
            ids: BTreeMap::new(),
            seq: 0,
            ledger: BTreeMap::new(),
            batches: Vec::new(),
            held: Vec::new(),
            clock: 0,
            holds: BTreeSet::new(),
            records: BTreeSet::new(),
            limits: BTreeMap::new(),
            slotted: BTreeSet::new(),
            rates: BTreeMap::new(),
            seen: 0,
            next_value: 0,
            step: 0,
            op: None,
        }
    }

    /// Runs `ops`, checking after every step, then ends everything and checks the ledger.
    pub fn run(shards: u8, resolution: u8, ops: &[SchedOp]) {
        let mut h = Self::new(shards, resolution);
        h.check();
        for &op in ops {
            h.apply(op);
            h.check();
        }
        h.finish();
    }

    fn res_ns(&self) -> u128 {
        self.resolution.as_nanos()
    }

    /// `origin + nanos`, or `None` past the platform's `Instant` range.
    fn at_nanos(&self, nanos: u128) -> Option<Instant> {
        let secs = u64::try_from(nanos / 1_000_000_000).ok()?;
        let d = Duration::new(secs, (nanos % 1_000_000_000) as u32);
        self.origin.checked_add(d)
    }

    /// The instant an [`At`] names now.
    pub fn instant(&self, at: At) -> Instant {
        let res = self.res_ns();
        let clock = u128::from(self.clock) * res;
        let nanos = match at {
            At::Ahead { ticks, sub } => {
                (clock + u128::from(ticks) * res).saturating_sub(u128::from(sub) % res)
            }
            At::Behind { ticks } => clock.saturating_sub(u128::from(ticks) * res),
            At::BeforeOrigin { ns } => {
                let back = Duration::from_nanos(u64::from(ns) + 1);
                return self.origin.checked_sub(back).unwrap_or(self.origin);
            }
            At::Far { shift } => (1u128 << (shift % 64)) * res,
        };
        // Past the end of `Instant`'s range: the farthest representable whole second.
        self.at_nanos(nanos).unwrap_or_else(|| {
            let mut secs = 1u64 << 62;
            loop {
                if let Some(at) = self.origin.checked_add(Duration::from_secs(secs)) {
                    return at;
                }
                secs /= 2;
            }
        })
    }

    /// The documented clock (`sync/ticks.rs`): a deadline rounds up to a tick, saturating at
    /// `u64::MAX`; before the origin it is tick 0.
    fn deadline_tick(&self, at: Instant) -> u64 {
        let ns = at.saturating_duration_since(self.origin).as_nanos();
        u64::try_from(ns.div_ceil(self.res_ns())).unwrap_or(u64::MAX)
    }

    /// `now` rounds down; before the origin there is no tick; saturates at `u64::MAX - 1`.
    fn now_tick(&self, now: Instant) -> Option<u64> {
        let ns = now.checked_duration_since(self.origin)?.as_nanos();
        Some(u64::try_from(ns / self.res_ns()).map_or(u64::MAX - 1, |t| t.min(u64::MAX - 1)))
    }

    /// `queues()` as the model has it: each queue with a member, ordered by its oldest
    /// current member (lowest `seq` among its pending and in-flight timers).
    fn queue_order(&self) -> Vec<u8> {
        let mut oldest: BTreeMap<u8, u64> = BTreeMap::new();
        for state in self.ids.values() {
            let (State::Pending(t) | State::InFlight(t)) = state;
            let seq = oldest.entry(t.queue).or_insert(t.seq);
            *seq = (*seq).min(t.seq);
        }
        let mut order: Vec<(u64, u8)> = oldest.into_iter().map(|(q, seq)| (seq, q)).collect();
        order.sort_unstable();
        order.into_iter().map(|(_, q)| q).collect()
    }

    fn fate(&mut self, value: u64, from: Fate, to: Fate) {
        let now = self.ledger.insert(value, to);
        ensure!(
            self,
            now == Some(from),
            "value {value} went {now:?} -> {to:?}, expected from {from:?}"
        );
    }

    pub fn apply(&mut self, op: SchedOp) {
        self.step += 1;
        self.op = Some(op);
        match op {
            SchedOp::Schedule { queue, id, at } => self.schedule(queue % QUEUES, id % IDS, at),
            SchedOp::Reschedule { id, at } => self.reschedule(id % IDS, at),
            SchedOp::Cancel(id) => self.cancel(id % IDS),
            SchedOp::Drain(queue) => self.drain(queue % QUEUES),
            SchedOp::PopDue { now, limit } => {
                let limit = if limit == u8::MAX {
                    usize::MAX
                } else {
                    usize::from(limit)
                };
                let now = self.instant(now);
                self.pop_due(now, limit);
            }
            SchedOp::Take { batch, n } => {
                if !self.batches.is_empty() {
                    let i = usize::from(batch) % self.batches.len();
                    self.take(i, usize::from(n));
                }
            }
            SchedOp::DropBatch(batch) => {
                if !self.batches.is_empty() {
                    let i = usize::from(batch) % self.batches.len();
                    self.drop_batch(i);
                }
            }
            SchedOp::Finish { due, consume } => {
                if !self.held.is_empty() {
                    let i = usize::from(due) % self.held.len();
                    self.finish_due(i, consume);
                }
            }
            SchedOp::Hold(queue) => {
                let queue = queue % QUEUES;
                let got = self.sched.hold_queue(&queue);
                let model = self.holds.insert(queue);
                ensure!(self, got == model, "hold_queue({queue}) = {got}");
            }
            SchedOp::Release(queue) => {
                let queue = queue % QUEUES;
                self.sched.release_queue(&queue);
                self.holds.remove(&queue);
                ensure!(self, !self.sched.is_held(&queue), "held after release");
            }
            SchedOp::Limit { queue, limit } => {
                let limit = (limit != u8::MAX).then_some(usize::from(limit % 4));
                self.set_limit(queue % QUEUES, limit);
            }
            SchedOp::Flush { queue, now } => {
                let now = self.instant(now);
                self.flush(queue % QUEUES, now);
            }
            SchedOp::PopQueue { queue, now, limit } => {
                let now = self.instant(now);
                self.pop_due_of(Some(queue % QUEUES), now, usize::from(limit % 4));
            }
            SchedOp::Rate {
                queue,
                interval,
                burst,
            } => {
                let queue = queue % QUEUES;
                let limit = (interval != u8::MAX).then(|| RateLimit {
                    count: 1,
                    per: self.resolution * (u32::from(interval % 4) + 1),
                    burst: u32::from(burst % 3) + 1,
                });
                self.sched.set_rate(&queue, limit);
                let seen = self.seen;
                let gcra = self.rates.entry(queue).or_default();
                match limit {
                    Some(limit) => {
                        gcra.set(limit.per.as_nanos(), u128::from(limit.burst), seen);
                        self.records.insert(queue);
                    }
                    None => gcra.set(0, 1, seen),
                }
            }
        }
    }

    /// `flush_queue`: the queue's pending members due later than `now` become due at `now`,
    /// in delivery order, each with a new `seq`.
    fn flush(&mut self, queue: u8, now: Instant) {
        let got = self.sched.flush_queue(&queue, now);
        let Some(now_tick) = self.now_tick(now) else {
            ensure!(self, got == 0, "flush before the origin moved {got}");
            return;
        };
        let mut later: Vec<((u64, u64), u8)> = (self.ids.iter())
            .filter_map(|(&id, s)| match *s {
                State::Pending(t) if t.queue == queue && t.tick > now_tick => {
                    Some(((t.tick, t.seq), id))
                }
                _ => None,
            })
            .collect();
        later.sort_unstable();
        // The deadline becomes the start of `now`'s tick.
        let at = self
            .at_nanos(u128::from(now_tick) * self.res_ns())
            .unwrap_or(now);
        for &(_, id) in &later {
            if let Some(State::Pending(t)) = self.ids.get_mut(&id) {
                self.seq += 1;
                (t.tick, t.seq, t.at) = (now_tick, self.seq, at);
            }
        }
        ensure!(
            self,
            got == later.len(),
            "flush_queue({queue}) moved {got}, model {later:?}"
        );
    }

    fn set_limit(&mut self, queue: u8, limit: Option<usize>) {
        self.sched.set_concurrency(&queue, limit);
        match limit {
            Some(limit) => {
                self.records.insert(queue);
                self.limits.insert(queue, limit);
            }
            None => {
                self.limits.remove(&queue);
            }
        }
        let got = self.sched.concurrency(&queue);
        ensure!(self, got == limit, "concurrency({queue}) = {got:?}");
    }

    /// Keeps, of `due` (in delivery order), what a `pop_due` hands out: nothing of a held
    /// queue, and of a limited one no more than its limit leaves beside its slotted
    /// members in flight.
    fn eligible(&mut self, due: &mut Vec<((u64, u64), u8)>, now: Instant, limit: usize) {
        // The rate limits' clock ignores a `now` that goes backwards: the latest pop's.
        let now_ns = now
            .saturating_duration_since(self.origin)
            .as_nanos()
            .max(self.seen);
        let mut room: BTreeMap<u8, usize> = BTreeMap::new();
        for (&queue, &limit) in &self.limits {
            let flying = (self.slotted.iter())
                .filter(
                    |id| matches!(self.ids.get(id), Some(State::InFlight(t)) if t.queue == queue),
                )
                .count();
            room.insert(queue, limit.saturating_sub(flying));
        }
        let mut taken = 0;
        due.retain(|&(_, id)| {
            if taken == limit {
                return false;
            }
            let Some(State::Pending(t)) = self.ids.get(&id) else {
                return false;
            };
            if self.holds.contains(&t.queue) {
                return false;
            }
            // As `pop_due` takes them: a slot first, then a hand-out of the rate.
            if room.get(&t.queue) == Some(&0) {
                return false;
            }
            if let Some(gcra) = self.rates.get_mut(&t.queue) {
                if !gcra.permit(now_ns) {
                    return false;
                }
            }
            if let Some(n) = room.get_mut(&t.queue) {
                *n -= 1;
            }
            taken += 1;
            true
        });
    }

    fn schedule(&mut self, queue: u8, id: u8, at: At) {
        let at = self.instant(at);
        self.next_value += 1;
        let value = self.next_value;
        let got = self.sched.schedule(queue, id, at, value);
        match self.ids.get(&id) {
            Some(State::Pending(_)) => ensure!(
                self,
                got == Err(ScheduleError::Pending(value)),
                "schedule of pending id {id}: {got:?}"
            ),
            Some(State::InFlight(_)) => ensure!(
                self,
                got == Err(ScheduleError::InFlight(value)),
                "schedule of in-flight id {id}: {got:?}"
            ),
            None => {
                ensure!(self, got.is_ok(), "schedule of absent id {id}: {got:?}");
                self.seq += 1;
                let timer = Timer {
                    queue,
                    tick: self.deadline_tick(at),
                    seq: self.seq,
                    at,
                    value,
                };
                self.ids.insert(id, State::Pending(timer));
                self.ledger.insert(value, Fate::Pending);
            }
        }
    }

    fn reschedule(&mut self, id: u8, at: At) {
        let at = self.instant(at);
        let got = self.sched.reschedule(&id, at);
        match self.ids.get(&id).copied() {
            Some(State::Pending(mut timer)) => {
                ensure!(self, got.is_ok(), "reschedule of pending id {id}: {got:?}");
                self.seq += 1;
                timer.seq = self.seq;
                timer.tick = self.deadline_tick(at);
                timer.at = at;
                self.ids.insert(id, State::Pending(timer));
            }
            Some(State::InFlight(_)) => ensure!(
                self,
                got == Err(RescheduleError::InFlight),
                "reschedule of in-flight id {id}: {got:?}"
            ),
            None => ensure!(
                self,
                got == Err(RescheduleError::NotFound),
                "reschedule of absent id {id}: {got:?}"
            ),
        }
    }

    fn cancel(&mut self, id: u8) {
        let got = self.sched.cancel(&id);
        match self.ids.get(&id).copied() {
            Some(State::Pending(timer)) => {
                ensure!(
                    self,
                    got == Cancel::Cancelled(timer.value),
                    "cancel of pending id {id}: {got:?}"
                );
                self.ids.remove(&id);
                self.fate(timer.value, Fate::Pending, Fate::Returned);
            }
            Some(State::InFlight(_)) => {
                ensure!(
                    self,
                    got == Cancel::InFlight,
                    "cancel of in-flight id {id}: {got:?}"
                )
            }
            None => ensure!(
                self,
                got == Cancel::NotFound,
                "cancel of absent id {id}: {got:?}"
            ),
        }
    }

    fn drain(&mut self, queue: u8) {
        let got = self.sched.drain_queue(&queue);
        let mut cancelled = Vec::new();
        let mut in_flight = Vec::new();
        for (&id, state) in &self.ids {
            match *state {
                State::Pending(t) if t.queue == queue => {
                    cancelled.push(((t.tick, t.seq), id, t.value))
                }
                State::InFlight(t) if t.queue == queue => in_flight.push(((t.tick, t.seq), id)),
                _ => {}
            }
        }
        cancelled.sort_unstable();
        in_flight.sort_unstable();
        let expected = Drained {
            cancelled: cancelled
                .iter()
                .map(|&(_, id, value)| (id, value))
                .collect(),
            in_flight: in_flight.iter().map(|&(_, id)| id).collect(),
        };
        ensure!(
            self,
            got == expected,
            "drain_queue({queue}) = {got:?}, model says {expected:?}"
        );
        for (_, id, value) in cancelled {
            self.ids.remove(&id);
            self.fate(value, Fate::Pending, Fate::Returned);
        }
    }

    /// `pop_due`, or with `only` `pop_due_queue` of that queue.
    fn pop_due(&mut self, now: Instant, limit: usize) {
        self.pop_due_of(None, now, limit);
    }

    fn pop_due_of(&mut self, only: Option<u8>, now: Instant, limit: usize) {
        let batch = match only {
            Some(queue) => self.sched.pop_due_queue(&queue, now, limit),
            None => self.sched.pop_due(now, limit),
        };
        let now_tick = self.now_tick(now);
        if let Some(tick) = now_tick {
            self.clock = self.clock.max(tick);
            if limit > 0 {
                let ns = now.saturating_duration_since(self.origin).as_nanos();
                self.seen = self.seen.max(ns);
            }
        }
        let mut due: Vec<((u64, u64), u8)> = match now_tick {
            Some(now_tick) if limit > 0 => self
                .ids
                .iter()
                .filter_map(|(&id, s)| match *s {
                    State::Pending(t)
                        if t.tick <= now_tick && only.is_none_or(|q| q == t.queue) =>
                    {
                        Some(((t.tick, t.seq), id))
                    }
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        due.sort_unstable();
        self.eligible(&mut due, now, limit);
        ensure!(
            self,
            batch.len() == due.len(),
            "pop_due(tick {now_tick:?}, {limit}) gave {} timers, model says {:?}",
            batch.len(),
            due
        );
        for &(_, id) in &due {
            let Some(State::Pending(timer)) = self.ids.get(&id).copied() else {
                unreachable!("due ids are pending");
            };
            self.ids.insert(id, State::InFlight(timer));
            self.fate(timer.value, Fate::Pending, Fate::InFlight);
            if self.records.contains(&timer.queue) {
                self.slotted.insert(id);
            }
        }
        let expected = due.into_iter().map(|(_, id)| id).collect();
        self.batches.push(OpenBatch {
            batch,
            now,
            expected,
        });
    }

    fn take(&mut self, i: usize, n: usize) {
        for _ in 0..n {
            let open = &mut self.batches[i];
            let got = open.batch.next();
            let now = open.now;
            let Some(id) = open.expected.pop_front() else {
                ensure!(
                    self,
                    got.is_none(),
                    "batch {i} yields more than popped: {got:?}"
                );
                return;
            };
            let Some(due) = got else {
                panic!("{self:?}: batch {i} ended before id {id}");
            };
            let Some(State::InFlight(timer)) = self.ids.get(&id).copied() else {
                panic!("{self:?}: model has id {id} of batch {i} not in flight");
            };
            ensure!(
                self,
                (*due.id(), *due.queue(), due.deadline(), *due.value())
                    == (id, timer.queue, timer.at, timer.value),
                "batch {i} yielded {due:?}, model expects id {id} {timer:?}"
            );
            ensure!(
                self,
                due.deadline() <= now,
                "delivered early: {due:?} popped at {now:?}"
            );
            self.held.push((due, id));
        }
    }

    fn drop_batch(&mut self, i: usize) {
        let open = self.batches.remove(i);
        drop(open.batch);
        for id in open.expected {
            let Some(State::InFlight(timer)) = self.ids.get(&id).copied() else {
                unreachable!("untaken ids are in flight");
            };
            self.ids.insert(id, State::Pending(timer));
            self.fate(timer.value, Fate::InFlight, Fate::Pending);
            self.slotted.remove(&id);
        }
    }

    fn finish_due(&mut self, i: usize, consume: bool) {
        let (due, id) = self.held.remove(i);
        self.slotted.remove(&id);
        let Some(State::InFlight(timer)) = self.ids.remove(&id) else {
            panic!("{self:?}: finishing id {id}, which the model has not in flight");
        };
        if consume {
            let value = due.into_value();
            ensure!(
                self,
                value == timer.value,
                "into_value {value}, model has {timer:?}"
            );
        } else {
            drop(due);
        }
        self.fate(timer.value, Fate::InFlight, Fate::Delivered);
    }

    /// Every observable against the model.
    pub fn check(&self) {
        let s = &self.sched;
        let pending: Vec<Timer> = self
            .ids
            .values()
            .filter_map(|s| match *s {
                State::Pending(t) => Some(t),
                State::InFlight(_) => None,
            })
            .collect();
        let in_flight = self.ids.len() - pending.len();
        ensure!(
            self,
            s.len() == pending.len(),
            "len {} != {}",
            s.len(),
            pending.len()
        );
        ensure!(self, s.is_empty() == pending.is_empty(), "is_empty");
        ensure!(
            self,
            s.in_flight_len() == in_flight,
            "in_flight_len {}",
            s.in_flight_len()
        );
        for queue in 0..QUEUES {
            let expected = pending.iter().filter(|t| t.queue == queue).count();
            ensure!(self, s.queue_len(&queue) == expected, "queue_len({queue})");
        }
        let expected = self.queue_order();
        let queues = s.queues();
        ensure!(
            self,
            queues == expected,
            "queues() = {queues:?}, model (by oldest current member) {expected:?}"
        );
        let earliest = pending.iter().map(|t| t.tick).min();
        let next = s.next_deadline();
        let flow = !self.holds.is_empty() || !self.records.is_empty();
        ensure!(
            self,
            flow || next.is_some() == earliest.is_some(),
            "next_deadline {next:?}"
        );
        if let (false, Some(next), Some(tick)) = (flow, next, earliest) {
            let bound = self.at_nanos(u128::from(tick) * self.res_ns());
            ensure!(
                self,
                bound.is_none_or(|bound| next <= bound),
                "next_deadline {next:?} later than the earliest pending tick {tick}"
            );
        }
        let stats = s.stats();
        ensure!(
            self,
            (stats.shards, stats.pending, stats.in_flight, stats.queues)
                == (self.shards, pending.len(), in_flight, expected.len()),
            "stats {stats:?}"
        );
        ensure!(
            self,
            stats.wheel.live + stats.due_waiting + stats.parked == stats.pending,
            "stats: wheel timers + due waiting + parked != pending: {stats:?}"
        );
        let bound = 2 * stats.wheel.live + self.shards * (8 * 704 + 16);
        ensure!(
            self,
            stats.wheel.stale <= bound,
            "stale references over {bound}: {stats:?}"
        );
    }

    /// Ends everything: drops open batches (untaken items go back), finishes held `Due`s,
    /// delivers what is left, and checks that every accepted value ended exactly once.
    pub fn finish(&mut self) {
        self.op = None;
        while !self.batches.is_empty() {
            self.drop_batch(self.batches.len() - 1);
        }
        while !self.held.is_empty() {
            self.finish_due(0, true);
        }
        self.check();
        // Every hold released and every limit lifted: nothing parked stays.
        for queue in 0..QUEUES {
            self.apply(SchedOp::Release(queue));
            self.set_limit(queue, None);
            self.apply(SchedOp::Rate {
                queue,
                interval: u8::MAX,
                burst: 0,
            });
        }
        self.op = None;
        self.check();
        // Deliver the rest; a deadline that saturated to u64::MAX never fires: drain it.
        let far = self.instant(At::Far { shift: 63 });
        self.pop_due(far, usize::MAX);
        let i = self.batches.len() - 1;
        self.take(i, usize::MAX);
        self.drop_batch(i);
        while !self.held.is_empty() {
            self.finish_due(0, false);
        }
        for queue in 0..QUEUES {
            self.drain(queue);
        }
        self.check();
        ensure!(
            self,
            self.ids.is_empty(),
            "ids left after the end: {:?}",
            self.ids
        );
        let open: Vec<_> = self
            .ledger
            .iter()
            .filter(|(_, f)| !matches!(f, Fate::Delivered | Fate::Returned))
            .collect();
        ensure!(self, open.is_empty(), "values that never ended: {open:?}");
    }
}
