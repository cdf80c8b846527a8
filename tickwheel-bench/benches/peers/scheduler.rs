//! Workload 7: the concurrent scheduler against a mutex around a single-threaded queue.
//!
//! Two producer threads ([`PRODUCERS`]; [`run_with`] takes another count) schedule `n`
//! timers between them (ids unique, one of [`QUEUES`] queues each, deadline uniform over the
//! next [`DEADLINE_SPREAD`] of real time); every
//! [`DRAIN_EVERY`] schedules a producer drains a whole queue (the operator's "bounce this
//! destination"). One dispatcher thread pops what is due, up to [`BATCH`] at a time, and
//! delivers it (counts it and drops it); when nothing is due it yields its thread
//! (`std::thread::yield_now`), every contender alike. The `DelayQueue` dispatcher then also
//! yields to its runtime (`tokio::task::yield_now`): its internal `Sleep` only fires when the
//! runtime's driver runs. (Sleeping instead would round up to tokio's 1 ms tick: a dispatcher
//! that slept fell ~10 µs per timer behind.)
//!
//! The figure is wall time per operation from the start until every timer has ended
//! exactly once (checked), operations being the schedules, the drain calls and the timers
//! ended (delivered or drained): its inverse is the throughput. It includes the tail after
//! the producers stop, up to [`DEADLINE_SPREAD`] for the last deadlines plus however far
//! the dispatcher lags, so a dispatcher that cannot keep up pays for it. Wall time, because
//! this is about threads: on a 2-core machine with three busy threads it includes the
//! scheduling of those threads, for every contender alike. Runs shorter than a few tens of
//! milliseconds say little; `examples/compare/` runs this from 100 000 timers on.
//!
//! Contenders, each doing the same work with its own API:
//! - `tickwheel::sync::Scheduler<u32, u64, u64>`: `schedule`, `drain_queue`, `pop_due`
//!   (two-phase: a drain reports in-flight timers instead of racing with the dispatcher);
//! - `Mutex<DelayQueue>` with the two maps a drain needs (id → key, queue → ids); its
//!   dispatcher is a task on a current-thread tokio runtime (the `DelayQueue` needs the
//!   runtime's timer to advance), idling as above;
//! - `Mutex<BTreeMap<(Instant, seq), _>>` with the same two maps.
//!
//! The maps are `hashbrown`'s with its default hasher (foldhash), the map tickwheel's own
//! index uses, so no contender pays for std's SipHash where tickwheel does not. Each
//! dispatcher reuses one batch buffer; tickwheel's `pop_due` returns its own batch (the
//! crate's cost, part of its figure).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use hashbrown::{HashMap, HashSet};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use tickwheel::sync::Scheduler;

/// Queues (destinations) the timers are spread over.
pub const QUEUES: u32 = 64;
/// Deadlines are uniform over this much real time after their schedule.
pub const DEADLINE_SPREAD: Duration = Duration::from_millis(10);
/// A producer drains one queue every this many schedules.
pub const DRAIN_EVERY: u64 = 1000;
/// The dispatcher pops at most this many timers at a time.
pub const BATCH: usize = 1024;

/// What one contender must provide: thread-safe schedule and drain, and a dispatcher loop.
pub trait Contender: Send + Sync + 'static {
    const NAME: &'static str;
    /// Schedules timer `id` in `queue` at `at`.
    fn schedule(&self, queue: u32, id: u64, at: Instant);
    /// Drains `queue`; returns how many pending timers it took out.
    fn drain(&self, queue: u32) -> u64;
    /// Runs the dispatcher until `done` says every timer has ended: pops due timers and
    /// adds each one to `delivered`.
    fn dispatch(self: Arc<Self>, delivered: &AtomicU64, done: &dyn Fn(u64) -> bool);
    /// Context a producer thread holds while it runs (a tokio runtime for `DelayQueue`).
    fn thread_context(&self) -> Option<tokio::runtime::EnterGuard<'_>> {
        None
    }
}

/// The result of one run.
#[derive(Clone, Copy, Debug)]
pub struct Throughput {
    pub nanos: f64,
    pub ops: u64,
    /// Every timer ended exactly once (delivered + drained == scheduled).
    pub exact: bool,
}

impl Throughput {
    pub fn ns_per_op(&self) -> f64 {
        self.nanos / self.ops.max(1) as f64
    }
}

/// Runs workload 7 with `n` timers on a fresh contender.
pub fn run<C: Contender>(n: u64, make: impl FnOnce() -> C) -> Throughput {
    run_with(n, PRODUCERS, make)
}

/// The producer threads of workload 7.
pub const PRODUCERS: u64 = 2;

/// Workload 7 with `producers` producer threads (at least 1) instead of [`PRODUCERS`], for
/// the scaling figure: the same `n` timers, split between them (producer `p` schedules ids
/// `p`, `p + producers`, …, and drains every [`DRAIN_EVERY`] of its own schedules).
pub fn run_with<C: Contender>(n: u64, producers: u64, make: impl FnOnce() -> C) -> Throughput {
    let threads = producers.max(1);
    let contender = Arc::new(make());
    let delivered = Arc::new(AtomicU64::new(0));
    let drained = Arc::new(AtomicU64::new(0));
    let drains = Arc::new(AtomicU64::new(0));
    let producing = Arc::new(AtomicBool::new(true));
    // The producers, the dispatcher, this thread.
    let start = Arc::new(Barrier::new(threads as usize + 2));

    let producers: Vec<_> = (0..threads)
        .map(|p| {
            let (c, drained, drains, start) = (
                contender.clone(),
                drained.clone(),
                drains.clone(),
                start.clone(),
            );
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(0x5c4e_d000 + p);
                let spread = DEADLINE_SPREAD.as_micros() as u64;
                let _context = c.thread_context();
                start.wait();
                let mut count = 0u64;
                let mut id = p;
                while id < n {
                    let at = Instant::now() + Duration::from_micros(rng.gen_range(0..spread));
                    c.schedule((id % QUEUES as u64) as u32, id, at);
                    count += 1;
                    if count % DRAIN_EVERY == 0 {
                        let queue = ((count / DRAIN_EVERY + p) % QUEUES as u64) as u32;
                        drained.fetch_add(c.drain(queue), Ordering::Relaxed);
                        drains.fetch_add(1, Ordering::Relaxed);
                    }
                    id += threads;
                }
            })
        })
        .collect();

    let dispatcher = {
        let (c, delivered, drained, producing, start) = (
            contender.clone(),
            delivered.clone(),
            drained.clone(),
            producing.clone(),
            start.clone(),
        );
        std::thread::spawn(move || {
            start.wait();
            let done = |delivered: u64| {
                !producing.load(Ordering::Acquire)
                    && delivered + drained.load(Ordering::Acquire) >= n
            };
            c.dispatch(&delivered, &done);
        })
    };
    let started = {
        start.wait();
        Instant::now()
    };
    for producer in producers {
        producer.join().expect("producer");
    }
    producing.store(false, Ordering::Release);
    dispatcher.join().expect("dispatcher");
    let nanos = started.elapsed().as_nanos() as f64;
    let (delivered, drained) = (
        delivered.load(Ordering::Acquire),
        drained.load(Ordering::Acquire),
    );
    Throughput {
        nanos,
        ops: n + drains.load(Ordering::Acquire) + delivered + drained,
        exact: delivered + drained == n,
    }
}

// ---------------------------------------------------------------------------------------------
// tickwheel::sync::Scheduler
// ---------------------------------------------------------------------------------------------

/// `tickwheel::sync::Scheduler` with its default shard count and 1 ms resolution.
pub struct TickwheelScheduler(Scheduler<u32, u64, u64>);

impl TickwheelScheduler {
    pub fn new() -> Self {
        TickwheelScheduler(Scheduler::new())
    }
}

impl Contender for TickwheelScheduler {
    const NAME: &'static str = "tickwheel";
    fn schedule(&self, queue: u32, id: u64, at: Instant) {
        self.0.schedule(queue, id, at, id).expect("fresh id");
    }
    fn drain(&self, queue: u32) -> u64 {
        // Timers in flight are the dispatcher's: it will deliver them.
        self.0.drain_queue(&queue).cancelled.len() as u64
    }
    fn dispatch(self: Arc<Self>, delivered: &AtomicU64, done: &dyn Fn(u64) -> bool) {
        let mut count = 0u64;
        while !done(count) {
            let batch = self.0.pop_due(Instant::now(), BATCH);
            if batch.is_empty() {
                std::thread::yield_now();
                continue;
            }
            for due in batch {
                std::hint::black_box(due.into_value());
                count += 1;
            }
            delivered.store(count, Ordering::Release);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The maps a drain needs, beside a single-threaded queue
// ---------------------------------------------------------------------------------------------

/// Each pending timer's key in the queue (by id), and each queue's pending ids.
struct Members<K> {
    keys: HashMap<u64, K>,
    ids: HashMap<u32, HashSet<u64>>,
}

impl<K> Default for Members<K> {
    fn default() -> Self {
        Members {
            keys: HashMap::new(),
            ids: HashMap::new(),
        }
    }
}

impl<K> Members<K> {
    /// Timer `id` of `queue` is pending at `key`.
    fn add(&mut self, queue: u32, id: u64, key: K) {
        self.keys.insert(id, key);
        self.ids.entry(queue).or_default().insert(id);
    }

    /// Timer `id` of `queue` fired: forgets it.
    fn fired(&mut self, queue: u32, id: u64) {
        self.keys.remove(&id);
        if let Some(set) = self.ids.get_mut(&queue) {
            set.remove(&id);
        }
    }

    /// Forgets every pending timer of `queue`, handing each one's key to `remove` (which
    /// takes it out of the queue); returns how many there were.
    fn drain(&mut self, queue: u32, mut remove: impl FnMut(K)) -> u64 {
        let ids = self.ids.remove(&queue).unwrap_or_default();
        for id in &ids {
            if let Some(key) = self.keys.remove(id) {
                remove(key);
            }
        }
        ids.len() as u64
    }
}

// ---------------------------------------------------------------------------------------------
// Mutex<DelayQueue>
// ---------------------------------------------------------------------------------------------

struct DqState {
    queue: tokio_util::time::DelayQueue<(u32, u64)>,
    members: Members<tokio_util::time::delay_queue::Key>,
}

/// `Mutex<DelayQueue>` plus the maps a drain needs. Producers enter the runtime (a
/// `DelayQueue` creates a `Sleep` on insert); the dispatcher drives it.
pub struct MutexDelayQueue {
    rt: tokio::runtime::Runtime,
    state: Mutex<DqState>,
}

impl MutexDelayQueue {
    pub fn new() -> Self {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("tokio runtime");
        let queue = {
            let _entered = rt.enter();
            tokio_util::time::DelayQueue::new()
        };
        MutexDelayQueue {
            rt,
            state: Mutex::new(DqState {
                queue,
                members: Members::default(),
            }),
        }
    }
}

impl Contender for MutexDelayQueue {
    const NAME: &'static str = "Mutex<DelayQueue>";
    fn thread_context(&self) -> Option<tokio::runtime::EnterGuard<'_>> {
        Some(self.rt.enter())
    }
    fn schedule(&self, queue: u32, id: u64, at: Instant) {
        let mut st = self.state.lock().expect("state");
        let key = st.queue.insert_at((queue, id), at.into());
        st.members.add(queue, id, key);
    }
    fn drain(&self, queue: u32) -> u64 {
        let mut st = self.state.lock().expect("state");
        let DqState { queue: dq, members } = &mut *st;
        members.drain(queue, |key| {
            dq.remove(&key);
        })
    }
    fn dispatch(self: Arc<Self>, delivered: &AtomicU64, done: &dyn Fn(u64) -> bool) {
        self.rt.block_on(async {
            let mut count = 0u64;
            let mut batch = Vec::with_capacity(BATCH);
            while !done(count) {
                // The lock is taken inside the poll, so it is never held across an await.
                std::future::poll_fn(|cx| {
                    let mut st = self.state.lock().expect("state");
                    let DqState { queue, members } = &mut *st;
                    while batch.len() < BATCH {
                        match queue.poll_expired(cx) {
                            Poll::Ready(Some(expired)) => {
                                let (q, id) = expired.into_inner();
                                members.fired(q, id);
                                batch.push(id);
                            }
                            Poll::Ready(None) | Poll::Pending => break,
                        }
                    }
                    Poll::Ready(())
                })
                .await;
                if batch.is_empty() {
                    std::thread::yield_now();
                    // The runtime's driver runs here and fires the queue's `Sleep`.
                    tokio::task::yield_now().await;
                    continue;
                }
                for id in batch.drain(..) {
                    std::hint::black_box(id);
                    count += 1;
                }
                delivered.store(count, Ordering::Release);
            }
        });
    }
}

// ---------------------------------------------------------------------------------------------
// Mutex<BTreeMap>
// ---------------------------------------------------------------------------------------------

#[derive(Default)]
struct BtState {
    map: BTreeMap<(Instant, u64), (u32, u64)>,
    members: Members<(Instant, u64)>,
    seq: u64,
}

/// `Mutex<BTreeMap<(deadline, seq), (queue, id)>>` plus the maps a drain needs.
#[derive(Default)]
pub struct MutexBTreeMap(Mutex<BtState>);

impl Contender for MutexBTreeMap {
    const NAME: &'static str = "Mutex<BTreeMap>";
    fn schedule(&self, queue: u32, id: u64, at: Instant) {
        let mut st = self.0.lock().expect("state");
        st.seq += 1;
        let key = (at, st.seq);
        st.map.insert(key, (queue, id));
        st.members.add(queue, id, key);
    }
    fn drain(&self, queue: u32) -> u64 {
        let mut st = self.0.lock().expect("state");
        let BtState { map, members, .. } = &mut *st;
        members.drain(queue, |key| {
            map.remove(&key);
        })
    }
    fn dispatch(self: Arc<Self>, delivered: &AtomicU64, done: &dyn Fn(u64) -> bool) {
        let mut count = 0u64;
        let mut batch = Vec::with_capacity(BATCH);
        while !done(count) {
            {
                let now = Instant::now();
                let mut st = self.0.lock().expect("state");
                while batch.len() < BATCH {
                    let Some(entry) = st.map.first_entry() else {
                        break;
                    };
                    if entry.key().0 > now {
                        break;
                    }
                    let (q, id) = entry.remove();
                    st.members.fired(q, id);
                    batch.push(id);
                }
            }
            if batch.is_empty() {
                std::thread::yield_now();
                continue;
            }
            for id in batch.drain(..) {
                std::hint::black_box(id);
                count += 1;
            }
            delivered.store(count, Ordering::Release);
        }
    }
}
