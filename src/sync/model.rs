//! Exhaustive-interleaving model checker (test-only). Not loom: see the `sync` module doc.
//!
//! Two harnesses, both of the same shape: a few "threads", each a short list of steps; every
//! interleaving of those lists is enumerated and replayed from scratch on a real
//! [`Scheduler`] in one OS thread.
//!
//! - **Dispatch phases** (`phases_*`): steps are whole critical sections — schedule,
//!   reschedule, cancel, `pop_due`, taking a `Due` from the batch, dropping it, dropping a
//!   half-taken batch, and one shard's part of a drain (a drain is not atomic across shards,
//!   so each shard is its own step). Every step's answer is compared with a sequential
//!   model of the id states; at the end everything left is popped, and each accepted timer
//!   must have ended exactly once (delivered, or returned by cancel/drain).
//! - **Wake protocol** (`wake_*`): steps are each atomic access of `signal.rs`'s protocol
//!   (arm, read one shard, lower the watermark, decide to sleep; a producer's insert, and its
//!   announce). At the end, a poller that went to sleep and was not woken must not have
//!   slept past any pending deadline. Two deliberately broken pollers (no arm, late arm)
//!   must be caught, which shows the harness can fail.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Wake, Waker};
use std::time::{Duration, Instant};

use super::{Cancel, Due, DueBatch, RescheduleError, ScheduleError, Scheduler};

type Sched = Scheduler<u8, u64, u64>;

const MS: Duration = Duration::from_millis(1);

/// Visits every interleaving of threads with `lens[i]` steps: the thread of each step.
fn interleavings(lens: &[usize], visit: &mut impl FnMut(&[usize])) {
    fn go<F: FnMut(&[usize])>(left: &mut [usize], order: &mut Vec<usize>, visit: &mut F) {
        if left.iter().all(|&n| n == 0) {
            visit(order);
            return;
        }
        for t in 0..left.len() {
            if left[t] > 0 {
                left[t] -= 1;
                order.push(t);
                go(left, order, visit);
                order.pop();
                left[t] += 1;
            }
        }
    }
    go(&mut lens.to_vec(), &mut Vec::new(), visit);
}

/// Runs `threads` in every interleaving; `run(steps in order)` returns an error to report.
fn check_all<S: Copy + std::fmt::Debug>(
    threads: &[Vec<S>],
    mut run: impl FnMut(&[S]) -> Result<(), String>,
) -> usize {
    let lens: Vec<usize> = threads.iter().map(Vec::len).collect();
    let mut count = 0;
    interleavings(&lens, &mut |order| {
        let mut next = vec![0; threads.len()];
        let steps: Vec<S> = order
            .iter()
            .map(|&t| {
                next[t] += 1;
                threads[t][next[t] - 1]
            })
            .collect();
        if let Err(e) = run(&steps) {
            panic!("interleaving {count} failed: {e}\nsteps: {steps:?}");
        }
        count += 1;
    });
    count
}

/// The `nth` id (counting from 0) that lands on `shard` of a 2-shard scheduler.
fn id_on(shard: usize, nth: usize) -> u64 {
    let probe: Sched = Scheduler::builder().shards(2).build();
    (0u64..)
        .filter(|id| probe.shard_index(id) == shard)
        .nth(nth)
        .unwrap_or(u64::MAX)
}

#[derive(Debug, Clone, Copy)]
enum Step {
    Schedule { queue: u8, id: u64, tick: u64 },
    Reschedule { id: u64, tick: u64 },
    Cancel { id: u64 },
    DrainShard { queue: u8, shard: usize },
    Pop { now: u64, limit: usize },
    Take,
    Finish,
    DropBatch,
}

/// The sequential model's view of an id: pending or in flight, with its order key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rec {
    queue: u8,
    tick: u64,
    seq: u64,
    token: u64,
    in_flight: bool,
}

/// One replay: the real scheduler, the dispatcher's batch and `Due` in hand, and the model.
struct World {
    sched: Sched,
    origin: Instant,
    batch: Option<DueBatch<u8, u64, u64>>,
    held: Option<Due<u8, u64, u64>>,
    ids: BTreeMap<u64, Rec>,
    seq: u64,
    tokens: u64,
    m_batch: VecDeque<u64>,
    m_held: Option<u64>,
    accepted: Vec<u64>,
    delivered: Vec<u64>,
    returned: Vec<u64>,
}

fn expect<A: PartialEq + std::fmt::Debug>(what: &str, real: A, model: A) -> Result<(), String> {
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
        }
    }

    fn at(&self, tick: u64) -> Instant {
        self.origin + MS * tick as u32
    }

    fn apply(&mut self, step: Step) -> Result<(), String> {
        match step {
            Step::Schedule { queue, id, tick } => self.schedule(queue, id, tick)?,
            Step::Reschedule { id, tick } => {
                let real = self.sched.reschedule(&id, self.at(tick));
                let model = match self.ids.get_mut(&id) {
                    Some(r) if r.in_flight => Err(RescheduleError::InFlight),
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
        }
        self.check_counts()
    }

    fn schedule(&mut self, queue: u8, id: u64, tick: u64) -> Result<(), String> {
        let token = self.tokens;
        self.tokens += 1;
        let real = self.sched.schedule(queue, id, self.at(tick), token);
        let model = match self.ids.get(&id) {
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
            .map(|&(_, _, id, token)| (id, token))
            .collect();
        let real_f: Vec<u64> = in_flight.iter().map(|&(_, _, id)| id).collect();
        self.returned.extend(real_c.iter().map(|&(_, token)| token));

        let mut members: Vec<(u64, Rec)> = self
            .ids
            .iter()
            .filter(|(id, r)| r.queue == queue && self.sched.shard_index(id) == shard)
            .map(|(&id, &r)| (id, r))
            .collect();
        members.sort_unstable_by_key(|(_, r)| (r.tick, r.seq));
        let model_c: Vec<(u64, u64)> = members
            .iter()
            .filter(|(_, r)| !r.in_flight)
            .map(|(id, r)| (*id, r.token))
            .collect();
        let model_f: Vec<u64> = members
            .iter()
            .filter(|(_, r)| r.in_flight)
            .map(|(id, _)| *id)
            .collect();
        for (id, _) in &model_c {
            self.ids.remove(id);
        }
        expect("drain cancelled", real_c, model_c)?;
        expect("drain in flight", real_f, model_f)
    }

    fn pop(&mut self, now: u64, limit: usize) -> Result<(), String> {
        self.drop_batch();
        let batch = self.sched.pop_due(self.at(now), limit);
        let mut due: Vec<(u64, u64, u64)> = self
            .ids
            .iter()
            .filter(|(_, r)| !r.in_flight && r.tick <= now)
            .map(|(&id, r)| (r.tick, r.seq, id))
            .collect();
        due.sort_unstable();
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

    fn take(&mut self) -> Result<(), String> {
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

    fn finish(&mut self) {
        if let Some(due) = self.held.take() {
            self.delivered.push(due.into_value());
        }
        if let Some(id) = self.m_held.take() {
            self.ids.remove(&id);
        }
    }

    fn drop_batch(&mut self) {
        self.batch = None;
        for id in self.m_batch.drain(..) {
            if let Some(r) = self.ids.get_mut(&id) {
                r.in_flight = false;
            }
        }
    }

    fn check_counts(&self) -> Result<(), String> {
        self.sched.check_invariants();
        let pending = self.ids.values().filter(|r| !r.in_flight).count();
        expect("len", self.sched.len(), pending)?;
        expect(
            "in_flight_len",
            self.sched.in_flight_len(),
            self.ids.len() - pending,
        )?;
        for q in 0..2u8 {
            let model = self
                .ids
                .values()
                .filter(|r| !r.in_flight && r.queue == q)
                .count();
            expect("queue_len", self.sched.queue_len(&q), model)?;
        }
        Ok(())
    }

    /// Ends every open item, delivers everything left, and checks exactly-once.
    fn settle(mut self) -> Result<(), String> {
        self.finish();
        self.drop_batch();
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
        let mut ended: Vec<u64> = self
            .delivered
            .iter()
            .chain(&self.returned)
            .copied()
            .collect();
        ended.sort_unstable();
        let mut accepted = self.accepted.clone();
        accepted.sort_unstable();
        expect(
            "tokens ended (delivered + returned) vs accepted, each once",
            ended,
            accepted,
        )
    }
}

fn run_phases(initial: &[Step], threads: &[Vec<Step>]) -> usize {
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
        Step::Schedule {
            queue: 0,
            id: a,
            tick: 1,
        },
        Step::Schedule {
            queue: 0,
            id: b,
            tick: 2,
        },
        Step::Schedule {
            queue: 0,
            id: c,
            tick: 9,
        },
        Step::Schedule {
            queue: 1,
            id: d,
            tick: 1,
        },
    ];
    let threads = [
        vec![
            Step::Pop { now: 5, limit: 2 },
            Step::Take,
            Step::Finish,
            Step::DropBatch,
        ],
        vec![
            Step::DrainShard { queue: 0, shard: 0 },
            Step::DrainShard { queue: 0, shard: 1 },
        ],
        vec![
            Step::Cancel { id: d },
            Step::Schedule {
                queue: 0,
                id: a,
                tick: 0,
            },
        ],
        vec![
            Step::Reschedule { id: c, tick: 3 },
            Step::Reschedule { id: b, tick: 7 },
        ],
    ];
    assert_eq!(run_phases(&initial, &threads), 18_900);
}

#[test]
fn phases_pop_vs_schedule_of_the_same_id_and_half_taken_batches() {
    let (a, c) = (id_on(0, 0), id_on(1, 0));
    let initial = [
        Step::Schedule {
            queue: 0,
            id: a,
            tick: 1,
        },
        Step::Schedule {
            queue: 0,
            id: c,
            tick: 1,
        },
    ];
    let threads = [
        vec![
            Step::Pop { now: 2, limit: 1 },
            Step::DropBatch,
            Step::Pop { now: 2, limit: 5 },
            Step::Take,
            Step::Finish,
        ],
        vec![
            Step::Schedule {
                queue: 0,
                id: a,
                tick: 0,
            },
            Step::Cancel { id: a },
            Step::Schedule {
                queue: 1,
                id: a,
                tick: 1,
            },
        ],
        vec![
            Step::DrainShard { queue: 0, shard: 0 },
            Step::DrainShard { queue: 0, shard: 1 },
        ],
    ];
    assert_eq!(run_phases(&initial, &threads), 2_520);
}

#[test]
fn phases_single_shard_take_while_draining() {
    let (a, b, c) = (id_on(0, 0), id_on(0, 1), id_on(0, 2));
    let initial = [
        Step::Schedule {
            queue: 0,
            id: a,
            tick: 1,
        },
        Step::Schedule {
            queue: 0,
            id: b,
            tick: 1,
        },
        Step::Schedule {
            queue: 0,
            id: c,
            tick: 2,
        },
    ];
    let threads = [
        vec![
            Step::Pop { now: 3, limit: 3 },
            Step::Take,
            Step::Finish,
            Step::Take,
            Step::DropBatch,
        ],
        vec![
            Step::DrainShard { queue: 0, shard: 0 },
            Step::Schedule {
                queue: 0,
                id: b,
                tick: 0,
            },
        ],
        vec![Step::Cancel { id: c }, Step::Reschedule { id: a, tick: 2 }],
    ];
    assert_eq!(run_phases(&initial, &threads), 756);
}

// ---------------------------------------------------------------- wake protocol

#[derive(Debug, Clone, Copy)]
enum WStep {
    Arm,
    Read(usize),
    Lower,
    Decide,
    Insert { id: u64, tick: u64 },
    Announce { tick: u64 },
}

/// How the poller under test arms.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Poller {
    /// The thread dispatcher: arm, epoch checked before sleeping.
    Thread,
    /// An async task: `arm_waker`, woken through its waker.
    Waker,
    /// Broken: never arms (reads the epoch, leaves the watermark alone).
    NoArm,
}

#[derive(Default)]
struct CountWaker(AtomicUsize);

impl Wake for CountWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn wake_run(poller: Poller, first: u64, steps: &[WStep]) -> Result<(), String> {
    let origin = Instant::now();
    let sched: Sched = Scheduler::builder().shards(2).origin(origin).build();
    let at = |tick: u64| origin + MS * tick as u32;
    let mut ticks = vec![10];
    sched
        .schedule(0, first, at(10), 0)
        .map_err(|e| e.to_string())?;
    let counter = Arc::new(CountWaker::default());
    let waker = Waker::from(Arc::clone(&counter));
    let signal = Arc::clone(sched.signal());
    let mut epoch = (poller == Poller::NoArm).then(|| signal.epoch());
    let (mut reads, mut target, mut sleeping) = (Vec::new(), None, None);
    for &step in steps {
        match step {
            WStep::Arm if poller == Poller::Waker => epoch = Some(signal.arm_waker(&waker)),
            WStep::Arm if poller == Poller::Thread => epoch = Some(signal.arm()),
            WStep::Arm => {}
            WStep::Read(shard) => reads.push(sched.shard_earliest(shard)),
            WStep::Lower => {
                target = reads.iter().flatten().copied().min();
                if poller != Poller::NoArm {
                    signal.lower(target);
                }
            }
            WStep::Decide => {
                let moved = epoch.is_none_or(|e| signal.moved_since(e));
                // A thread re-checks instead of sleeping; a task returns Pending either way.
                sleeping = (poller == Poller::Waker || !moved).then_some(target);
            }
            WStep::Insert { id, tick } => {
                sched
                    .schedule_locked(0, id, at(tick), 0)
                    .map_err(|e| e.to_string())?;
                ticks.push(tick);
            }
            WStep::Announce { tick } => signal.deadline_added(tick),
        }
    }
    let Some(target) = sleeping else {
        return Ok(());
    };
    let woken = match poller {
        Poller::Waker => counter.0.load(Ordering::SeqCst) > 0,
        Poller::Thread | Poller::NoArm => epoch.is_none_or(|e| signal.moved_since(e)),
    };
    let missed: Vec<u64> = ticks
        .iter()
        .copied()
        .filter(|&t| target.is_none_or(|target| t < target))
        .collect();
    if !woken && !missed.is_empty() {
        return Err(format!(
            "lost wakeup: sleeping until tick {target:?}, not woken, deadlines {missed:?} pending"
        ));
    }
    Ok(())
}

/// The poller and two producers with deadlines before its target (tick 10, on shard 0),
/// one on each shard; with `later`, a third producer whose deadline is after it.
fn wake_threads(poller_steps: Vec<WStep>, later: bool) -> Vec<Vec<WStep>> {
    let producer = |id, tick| vec![WStep::Insert { id, tick }, WStep::Announce { tick }];
    let mut threads = vec![
        poller_steps,
        producer(id_on(0, 1), 3),
        producer(id_on(1, 1), 5),
    ];
    if later {
        threads.push(producer(id_on(1, 2), 30));
    }
    threads
}

const POLLER: [WStep; 5] = [
    WStep::Arm,
    WStep::Read(0),
    WStep::Read(1),
    WStep::Lower,
    WStep::Decide,
];

#[test]
fn wake_protocol_thread_poller_loses_no_wakeup() {
    let first = id_on(0, 5);
    let n = check_all(&wake_threads(POLLER.to_vec(), true), |steps| {
        wake_run(Poller::Thread, first, steps)
    });
    assert_eq!(n, 41_580);
}

#[test]
fn wake_protocol_waker_poller_loses_no_wakeup() {
    let first = id_on(0, 5);
    let n = check_all(&wake_threads(POLLER.to_vec(), false), |steps| {
        wake_run(Poller::Waker, first, steps)
    });
    assert_eq!(n, 756);
}

/// Counts the interleavings in which `poller` with `steps` loses a wakeup.
fn count_lost(poller: Poller, steps: Vec<WStep>) -> usize {
    let threads = wake_threads(steps, false);
    let first = id_on(0, 5);
    let lens: Vec<usize> = threads.iter().map(Vec::len).collect();
    let mut lost = 0;
    interleavings(&lens, &mut |order| {
        let mut next = vec![0; threads.len()];
        let steps: Vec<WStep> = order
            .iter()
            .map(|&t| {
                next[t] += 1;
                threads[t][next[t] - 1]
            })
            .collect();
        lost += usize::from(wake_run(poller, first, &steps).is_err());
    });
    lost
}

#[test]
fn wake_harness_catches_a_poller_that_never_arms() {
    assert!(count_lost(Poller::NoArm, POLLER.to_vec()) > 0);
}

#[test]
fn wake_harness_catches_a_poller_that_arms_after_reading() {
    let late = vec![
        WStep::Read(0),
        WStep::Read(1),
        WStep::Arm,
        WStep::Lower,
        WStep::Decide,
    ];
    assert!(count_lost(Poller::Thread, late) > 0);
}
