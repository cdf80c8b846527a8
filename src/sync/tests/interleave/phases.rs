//! The dispatch-phase harness: whole critical sections as steps, checked against a
//! sequential model of the id states, and exactly-once at the end.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Instant;

use super::{MS, Sched, alternating, check_all, id_on};
use crate::sync::{Cancel, Due, DueBatch, RescheduleError, ScheduleError, Scheduler};

#[derive(Debug, Clone, Copy)]
pub(super) enum Step {
    Schedule {
        queue: u8,
        id: u64,
        tick: u64,
    },
    Reschedule {
        id: u64,
        tick: u64,
    },
    Cancel {
        id: u64,
    },
    DrainShard {
        queue: u8,
        shard: usize,
    },
    Pop {
        now: u64,
        limit: usize,
    },
    Take,
    Finish,
    DropBatch,
    /// One shard's part of `freeze_queue`, `take_forwarded`, `unfreeze_queue`.
    FreezeShard {
        queue: u8,
        shard: usize,
    },
    TakeForwardedShard {
        queue: u8,
        shard: usize,
    },
    UnfreezeShard {
        queue: u8,
        shard: usize,
    },
    /// `Due::retry_at` of the `Due` in hand.
    Retry {
        tick: u64,
    },
    /// One shard's part of `hold_queue`, `release_queue`.
    HoldShard {
        queue: u8,
        shard: usize,
    },
    ReleaseShard {
        queue: u8,
        shard: usize,
    },
    /// `set_concurrency` (whole: it takes one shard lock at a time, but only marks; the
    /// limit itself is one shared atomic).
    Limit {
        queue: u8,
        limit: Option<usize>,
    },
    /// `flush_queue` (whole: it locks every shard at once).
    Flush {
        queue: u8,
        now: u64,
    },
}

/// `Step::Schedule` in one line, as the scenarios write it.
pub(super) fn schedule(queue: u8, id: u64, tick: u64) -> Step {
    Step::Schedule { queue, id, tick }
}

/// `Step::Pop` in one line, as the scenarios write it.
pub(super) fn pop(now: u64, limit: usize) -> Step {
    Step::Pop { now, limit }
}

/// `Step::Retry` in one line, as the scenarios write it.
pub(super) fn retry(tick: u64) -> Step {
    Step::Retry { tick }
}

/// The one-shard steps in one line, as the scenarios write them: `hold(queue, shard)` is
/// `Step::HoldShard { queue, shard }`, and so on.
macro_rules! shard_steps {
    ($($name:ident => $variant:ident,)*) => {$(
        pub(super) fn $name(queue: u8, shard: usize) -> Step {
            Step::$variant { queue, shard }
        }
    )*};
}

shard_steps! {
    drain => DrainShard,
    freeze => FreezeShard,
    take_forwarded => TakeForwardedShard,
    unfreeze => UnfreezeShard,
    hold => HoldShard,
    release => ReleaseShard,
}

/// The start several scenarios share: timers `a`, `c` in shard 0 and `b`, `d` in shard 1,
/// all of queue 0 but `c` (queue 1), due at `ticks` (of `a`, `b`, `c`, `d`). Returns the
/// ids `[a, b, c, d]` and the steps scheduling them, in that order.
pub(super) fn four_timers(ticks: [u64; 4]) -> ([u64; 4], Vec<Step>) {
    let ids: [u64; 4] = alternating();
    let queues = [0, 0, 1, 0];
    let steps = (0..4)
        .map(|i| schedule(queues[i], ids[i], ticks[i]))
        .collect();
    (ids, steps)
}

/// The sequential model's view of an id: pending, forwarded or in flight, with its order
/// key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Rec {
    pub(super) queue: u8,
    pub(super) tick: u64,
    pub(super) seq: u64,
    pub(super) token: u64,
    pub(super) in_flight: bool,
    pub(super) forwarded: bool,
}

/// One replay: the real scheduler, the dispatcher's batch and `Due` in hand, and the model.
pub(super) struct World {
    pub(super) sched: Sched,
    pub(super) origin: Instant,
    pub(super) batch: Option<DueBatch<u8, u64, u64>>,
    pub(super) held: Option<Due<u8, u64, u64>>,
    pub(super) ids: BTreeMap<u64, Rec>,
    pub(super) seq: u64,
    pub(super) tokens: u64,
    pub(super) m_batch: VecDeque<u64>,
    pub(super) m_held: Option<u64>,
    pub(super) accepted: Vec<u64>,
    pub(super) delivered: Vec<u64>,
    pub(super) returned: Vec<u64>,
    /// (queue, shard) frozen in the model.
    pub(super) frozen: BTreeSet<(u8, usize)>,
    /// Tokens handed out by freezes and `take_forwarded`.
    pub(super) handed_over: Vec<u64>,
    /// (queue, shard) held in the model.
    pub(super) holds: BTreeSet<(u8, usize)>,
    /// The latest `now` a `pop_due` ran at: no held timer due later can be parked.
    pub(super) popped_to: u64,
    /// Concurrency limits in the model (set before any pop: see `flow.rs`).
    pub(super) limits: BTreeMap<u8, usize>,
}

pub(super) fn expect<A: PartialEq + std::fmt::Debug>(
    what: &str,
    real: A,
    model: A,
) -> Result<(), String> {
    if real == model {
        Ok(())
    } else {
        Err(format!(
            "{what}: scheduler says {real:?}, model says {model:?}"
        ))
    }
}

impl World {
    fn new() -> Self {
        let origin = Instant::now();
        World {
            sched: Scheduler::builder().shards(2).origin(origin).build(),
            origin,
            batch: None,
            held: None,
            ids: BTreeMap::new(),
            seq: 0,
            tokens: 0,
            m_batch: VecDeque::new(),
            m_held: None,
            accepted: Vec::new(),
            delivered: Vec::new(),
            returned: Vec::new(),
            frozen: BTreeSet::new(),
            handed_over: Vec::new(),
            holds: BTreeSet::new(),
            popped_to: 0,
            limits: BTreeMap::new(),
        }
    }

    pub(super) fn at(&self, tick: u64) -> Instant {
        self.origin + MS * tick as u32
    }

    fn apply(&mut self, step: Step) -> Result<(), String> {
        match step {
            Step::Schedule { queue, id, tick } => self.schedule(queue, id, tick)?,
            Step::Reschedule { id, tick } => {
                let real = self.sched.reschedule(&id, self.at(tick));
                let model = match self.ids.get_mut(&id) {
                    Some(r) if r.in_flight => Err(RescheduleError::InFlight),
                    Some(r) if r.forwarded => Err(RescheduleError::Frozen),
                    Some(r) => {
                        self.seq += 1;
                        (r.tick, r.seq) = (tick, self.seq);
                        Ok(())
                    }
                    None => Err(RescheduleError::NotFound),
                };
                expect("reschedule", real, model)?;
            }
            Step::Cancel { id } => {
                let real = self.sched.cancel(&id);
                let model = match self.ids.get(&id).copied() {
                    Some(r) if r.in_flight => Cancel::InFlight,
                    Some(r) => {
                        self.ids.remove(&id);
                        Cancel::Cancelled(r.token)
                    }
                    None => Cancel::NotFound,
                };
                if let Cancel::Cancelled(token) = real {
                    self.returned.push(token);
                }
                expect("cancel", real, model)?;
            }
            Step::DrainShard { queue, shard } => self.drain_shard(queue, shard)?,
            Step::Pop { now, limit } => self.pop(now, limit)?,
            Step::Take => self.take()?,
            Step::Finish => self.finish(),
            Step::DropBatch => self.drop_batch(),
            Step::FreezeShard { queue, shard } => self.freeze_shard(queue, shard)?,
            Step::TakeForwardedShard { queue, shard } => self.take_forwarded_shard(queue, shard)?,
            Step::UnfreezeShard { queue, shard } => self.unfreeze_shard(queue, shard)?,
            Step::Retry { tick } => self.retry(tick)?,
            Step::HoldShard { queue, shard } => self.hold_shard(queue, shard)?,
            Step::ReleaseShard { queue, shard } => self.release_shard(queue, shard)?,
            Step::Limit { queue, limit } => self.limit(queue, limit),
            Step::Flush { queue, now } => self.flush(queue, now)?,
        }
        self.check_counts()
    }

    pub(super) fn schedule(&mut self, queue: u8, id: u64, tick: u64) -> Result<(), String> {
        let token = self.tokens;
        self.tokens += 1;
        let real = self.sched.schedule(queue, id, self.at(tick), token);
        let frozen = self.frozen.contains(&(queue, self.sched.shard_index(&id)));
        let model = match self.ids.get(&id) {
            _ if frozen => Err(ScheduleError::Frozen(token)),
            Some(r) if r.in_flight => Err(ScheduleError::InFlight(token)),
            Some(_) => Err(ScheduleError::Pending(token)),
            None => {
                self.seq += 1;
                self.ids.insert(
                    id,
                    Rec {
                        queue,
                        tick,
                        seq: self.seq,
                        token,
                        in_flight: false,
                        forwarded: false,
                    },
                );
                self.accepted.push(token);
                Ok(())
            }
        };
        expect("schedule", real, model)
    }

    fn drain_shard(&mut self, queue: u8, shard: usize) -> Result<(), String> {
        let (mut cancelled, mut in_flight) = (Vec::new(), Vec::new());
        self.sched
            .drain_shard(shard, &queue, &mut cancelled, &mut in_flight);
        cancelled.sort_unstable();
        in_flight.sort_unstable();
        let real_c: Vec<(u64, u64)> = cancelled
            .iter()
            .map(|&(_, _, (id, token))| (id, token))
            .collect();
        let real_f: Vec<u64> = in_flight.iter().map(|&(_, _, id)| id).collect();
        self.returned.extend(real_c.iter().map(|&(_, token)| token));

        let (model_c, model_f) = self.take_members(queue, shard, |r| !r.in_flight);
        expect("drain cancelled", real_c, model_c)?;
        expect("drain in flight", real_f, model_f)
    }

    /// The model's members of `queue` in `shard`, in delivery order.
    pub(super) fn members(&self, queue: u8, shard: usize) -> Vec<(u64, Rec)> {
        let mut members: Vec<_> = (self.ids.iter())
            .filter(|(id, r)| r.queue == queue && self.sched.shard_index(id) == shard)
            .map(|(&id, &r)| (id, r))
            .collect();
        members.sort_unstable_by_key(|(_, r)| (r.tick, r.seq));
        members
    }

    /// The model's side of one shard's part of a drain or a freeze of `queue`: the members
    /// `taken` takes, in delivery order as `(id, token)`, removed from the model; and the ids
    /// of the members in flight (reported, never taken).
    pub(super) fn take_members(
        &mut self,
        queue: u8,
        shard: usize,
        taken: impl Fn(&Rec) -> bool,
    ) -> (Vec<(u64, u64)>, Vec<u64>) {
        let members = self.members(queue, shard);
        let took: Vec<(u64, u64)> = (members.iter())
            .filter(|(_, r)| taken(r))
            .map(|&(id, r)| (id, r.token))
            .collect();
        let in_flight: Vec<u64> = (members.iter())
            .filter(|(_, r)| r.in_flight)
            .map(|&(id, _)| id)
            .collect();
        for (id, _) in &took {
            self.ids.remove(id);
        }
        (took, in_flight)
    }

    pub(super) fn pop(&mut self, now: u64, limit: usize) -> Result<(), String> {
        self.drop_batch();
        let batch = self.sched.pop_due(self.at(now), limit);
        self.popped_to = self.popped_to.max(now);
        let mut due: Vec<(u64, u64, u64)> = self
            .ids
            .iter()
            .filter(|(_, r)| !r.in_flight && !r.forwarded && r.tick <= now)
            .filter(|(id, r)| !self.holds.contains(&(r.queue, self.sched.shard_index(id))))
            .map(|(&id, r)| (r.tick, r.seq, id))
            .collect();
        due.sort_unstable();
        self.within_limits(&mut due);
        due.truncate(limit);
        for &(_, _, id) in &due {
            if let Some(r) = self.ids.get_mut(&id) {
                r.in_flight = true;
            }
        }
        self.m_batch = due.iter().map(|&(_, _, id)| id).collect();
        let real_len = batch.len();
        self.batch = Some(batch);
        expect("pop_due batch size", real_len, self.m_batch.len())
    }

    pub(super) fn take(&mut self) -> Result<(), String> {
        self.finish();
        let real = self.batch.as_mut().and_then(Iterator::next);
        let model = self.m_batch.pop_front();
        let real_view = real
            .as_ref()
            .map(|d| (*d.id(), *d.queue(), *d.value(), d.deadline()));
        let model_view = model.and_then(|id| {
            self.ids
                .get(&id)
                .map(|r| (id, r.queue, r.token, self.at(r.tick)))
        });
        self.held = real;
        self.m_held = model;
        expect(
            "taken Due (id, queue, value, deadline)",
            real_view,
            model_view,
        )
    }

    pub(super) fn finish(&mut self) {
        if let Some(due) = self.held.take() {
            self.delivered.push(due.into_value());
        }
        if let Some(id) = self.m_held.take() {
            self.ids.remove(&id);
        }
    }

    /// An untaken item goes back pending, or forwarded if its queue is frozen in its shard.
    fn drop_batch(&mut self) {
        self.batch = None;
        for id in self.m_batch.drain(..) {
            let shard = self.sched.shard_index(&id);
            if let Some(r) = self.ids.get_mut(&id) {
                r.in_flight = false;
                r.forwarded = self.frozen.contains(&(r.queue, shard));
            }
        }
    }

    /// Checks the counts after a step without settling the done lists (the public count
    /// methods settle first): a done `Due` stays unsettled until a later step meets it, so
    /// the lazy paths (an operation that finds an in-flight id settles and looks again) are
    /// what the next steps exercise.
    fn check_counts(&self) -> Result<(), String> {
        self.sched.check_invariants();
        let pending = self.ids.values().filter(|r| !r.in_flight).count();
        for q in 0..2u8 {
            let (real_pending, real_in_flight, real_queue) = self.sched.counts_unsettled(&q);
            expect("len", real_pending, pending)?;
            expect("in_flight_len", real_in_flight, self.ids.len() - pending)?;
            let model = self
                .ids
                .values()
                .filter(|r| !r.in_flight && r.queue == q)
                .count();
            expect("queue_len", real_queue, model)?;
        }
        Ok(())
    }

    /// Ends every open item, delivers everything left, and checks exactly-once.
    fn settle(mut self) -> Result<(), String> {
        self.finish();
        self.drop_batch();
        self.hand_over_and_unfreeze()?;
        self.release_all()?;
        // The public counts settle the done lists: they must agree with the model too.
        let pending = self.ids.values().filter(|r| !r.in_flight).count();
        expect("len (settled)", self.sched.len(), pending)?;
        expect("in_flight_len (settled)", self.sched.in_flight_len(), 0)?;
        self.pop(1_000, usize::MAX)?;
        while self.batch.as_ref().is_some_and(|b| !b.is_empty()) {
            self.take()?;
            self.finish();
        }
        self.check_counts()?;
        expect(
            "pending after settling",
            self.sched.len() + self.sched.in_flight_len(),
            0,
        )?;
        expect("queues after settling", self.sched.queues(), Vec::new())?;
        let both: Vec<&u64> = (self.delivered.iter())
            .filter(|t| self.handed_over.contains(t))
            .collect();
        expect("tokens both delivered and handed over", both, Vec::new())?;
        let mut ended: Vec<u64> = self
            .delivered
            .iter()
            .chain(&self.returned)
            .chain(&self.handed_over)
            .copied()
            .collect();
        ended.sort_unstable();
        let mut accepted = self.accepted.clone();
        accepted.sort_unstable();
        expect(
            "tokens ended (delivered + returned + handed over) vs accepted, each once",
            ended,
            accepted,
        )
    }
}

pub(super) fn run_phases(initial: &[Step], threads: &[Vec<Step>]) -> usize {
    check_all(threads, |steps| {
        let mut world = World::new();
        for &step in initial.iter().chain(steps) {
            world.apply(step)?;
        }
        world.settle()
    })
}

#[test]
fn phases_drain_cancel_reschedule_against_in_flight() {
    let (a, c) = (id_on(0, 0), id_on(0, 1));
    let (b, d) = (id_on(1, 0), id_on(1, 1));
    let initial = [
        schedule(0, a, 1),
        schedule(0, b, 2),
        schedule(0, c, 9),
        schedule(1, d, 1),
    ];
    let threads = [
        vec![pop(5, 2), Step::Take, Step::Finish, Step::DropBatch],
        vec![drain(0, 0), drain(0, 1)],
        vec![Step::Cancel { id: d }, schedule(0, a, 0)],
        vec![
            Step::Reschedule { id: c, tick: 3 },
            Step::Reschedule { id: b, tick: 7 },
        ],
    ];
    assert_eq!(run_phases(&initial, &threads), 18_900);
}

#[test]
fn phases_pop_vs_schedule_of_the_same_id_and_half_taken_batches() {
    let [a, c] = alternating();
    let initial = [schedule(0, a, 1), schedule(0, c, 1)];
    let threads = [
        vec![
            pop(2, 1),
            Step::DropBatch,
            pop(2, 5),
            Step::Take,
            Step::Finish,
        ],
        vec![schedule(0, a, 0), Step::Cancel { id: a }, schedule(1, a, 1)],
        vec![drain(0, 0), drain(0, 1)],
    ];
    assert_eq!(run_phases(&initial, &threads), 2_520);
}

#[test]
fn phases_single_shard_take_while_draining() {
    let (a, b, c) = (id_on(0, 0), id_on(0, 1), id_on(0, 2));
    let initial = [schedule(0, a, 1), schedule(0, b, 1), schedule(0, c, 2)];
    let threads = [
        vec![
            pop(3, 3),
            Step::Take,
            Step::Finish,
            Step::Take,
            Step::DropBatch,
        ],
        vec![drain(0, 0), schedule(0, b, 0)],
        vec![Step::Cancel { id: c }, Step::Reschedule { id: a, tick: 2 }],
    ];
    assert_eq!(run_phases(&initial, &threads), 756);
}

/// A done `Due` is finished lazily (see `core.rs`): the next operation that meets its id
/// settles. Here each `Due` is dropped and, in every order, another thread reschedules,
/// cancels, schedules again or drains the same ids without a `pop_due` in between (which
/// would settle everything first): each must see the id as gone, never as in flight.
#[test]
fn phases_done_dues_are_settled_by_whoever_meets_their_ids() {
    let (a, b) = (id_on(0, 0), id_on(0, 1));
    let c = id_on(1, 0);
    let initial = [
        schedule(0, a, 1),
        schedule(0, b, 1),
        schedule(1, c, 1),
        pop(2, 3),
    ];
    let threads = [
        vec![Step::Take, Step::Take, Step::Take, Step::Finish],
        vec![
            Step::Reschedule { id: a, tick: 4 },
            schedule(1, a, 4),
            Step::Cancel { id: c },
        ],
        vec![drain(0, 0), schedule(0, b, 5)],
    ];
    assert_eq!(run_phases(&initial, &threads), 1_260);
}
