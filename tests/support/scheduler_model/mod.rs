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
}

mod checks;
mod gcra;
mod steps;

use gcra::Gcra;
