//! Peer adapters and workloads shared by `benches/wheel.rs` (criterion) and
//! `examples/compare.rs` (the side-by-side table). One copy, included by `#[path]` from both.
//!
//! # The peers, and what each figure includes
//!
//! Every peer stores the same payload (the timer's *lane*, a `u64`), receives deadlines as
//! milliseconds converted beforehand (outside the timed region) into the type its API takes,
//! and is driven by the same generic workload code below, so harness costs are the same for all.
//! A structure that offers a capacity hint gets `n` (the number of timers) in the timing
//! workloads; the memory workload builds each one without a hint.
//!
//! Times are the thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`, see [`thread_cpu_ns`]) of the
//! timed region only: building the structure, converting deadlines and the setup steps of a
//! workload (the inserts before a cancel, say) are outside it; page faults of memory first
//! touched inside it are in. A poll hands the harness the lanes that fired; the harness
//! checksums them (sequentially) and, only for the two peers whose keys must be handed back
//! after firing (`nexus-timer`'s handles, tokio's dead `Sleep` boxes), releases the key.
//! Everyone else's fired keys are simply overwritten later, as a caller would.
//!
//! | peer | insert | cancel | reset | expiry |
//! |------|--------|--------|-------|--------|
//! | `tickwheel` | [`Wheel::insert`] | [`Wheel::cancel`] | [`Wheel::reset`] | [`Wheel::poll`] until `None` |
//! | `DelayQueue` | `insert_at` (precomputed `Instant`) | `remove` | `reset_at` | `poll_expired` until `Pending`, after advancing tokio's paused clock |
//! | `tokio Sleep` | `Box::pin(sleep_until)` + one poll (registration is lazy) | drop | `Sleep::reset` | the paused clock's `advance`; the driver wakes each fired `Sleep`'s waker |
//! | `nexus-timer` | `schedule` | `cancel` | `reschedule` | `poll`, then `free` of each fired handle (handles must be consumed) |
//! | `timer-queue` | `insert` | `remove` | `reset` | `poll` until `None` |
//! | `hhwt` | `insert` of an `IdOnlyTimerEntry` (relative delay) | `cancel(id)` (lazy) | cancel + insert (no reset API) | `tick` per ms, `skip` over empty ticks (`can_skip`) |
//! | `BTreeMap` | `insert((deadline, seq), v)` | `remove` | remove + insert | `pop_first` while due |
//! | `BinaryHeap` | push, value in a generation-checked slab | lazy: bump the generation | lazy cancel + push | pop, skipping stale entries |
//!
//! tokio peers run inside a current-thread runtime started with a paused clock (entered for
//! the whole workload, so `Sleep`s and `Instant::now` find it). A poll at tick `t` is one
//! `block_on` that advances that clock to `t` (`tokio::time::advance`, which yields once so
//! the driver processes its wheel) and, for `DelayQueue`, drains `poll_expired` until
//! `Pending`, under `tokio::task::unconstrained` (tokio's co-operative budget would otherwise
//! cut a long drain short with a `Pending` that only means "yield"). The fixed cost of one
//! such `block_on` is measured on an empty runtime in the same process and subtracted per
//! poll: it is the test clock's cost, not the timers'. For `tokio Sleep`, each fired timer
//! wakes a waker that pushes its lane into a mutex-guarded vector: the stand-in for waking a
//! task, which is what a real `Sleep` does.
//!
//! `hierarchical_hash_wheel_timer` (`hhwt`) takes delays relative to its own clock, which only
//! moves by `tick`/`skip`; its ids are the lanes. `nexus-timer` never cascades: every `poll`
//! walks every pending entry to compare deadlines, so polling each tick costs O(pending) per
//! tick; the budget below stops it on the large runs and the table marks the estimate.
//!
//! # Budget
//!
//! A run that exceeds its time budget stops at the next check and reports the cost per
//! operation of the part it completed (marked `~` in the table): an estimate, not a bound.

#![allow(dead_code)]

pub mod scheduler;

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use tickwheel::{TimerKey, Wheel};

/// Deadlines are uniform over this many ticks (60 s at 1 ms).
pub const SPAN: u64 = 60_000;
/// Resets per timer in the reset-heavy workload.
pub const RESETS: usize = 100;
/// Ticks between two rounds of resets in the reset-heavy workload.
pub const ROUND_TICKS: u64 = 10;
/// Fraction of churn timers cancelled before they fire.
pub const CHURN_CANCEL: f64 = 0.99;
/// Operations of the churn workload per timer.
pub const CHURN_OPS_PER_TIMER: u64 = 10;
/// Idle polls measured by the idle-poll workload.
pub const IDLE_POLLS: u64 = 20_000;

// ---------------------------------------------------------------------------------------------
// The peer interface
// ---------------------------------------------------------------------------------------------

/// One timer structure under test, as its documentation intends it to be used.
pub trait Peer: Sized {
    /// Column name in the table.
    const NAME: &'static str;
    /// What `insert` returns and `cancel`/`reset` take.
    type Key;
    /// The deadline type of the API (converted outside the timed region).
    type Deadline: Copy;

    /// An empty structure at tick 0 for timers on `lanes` lanes (`0..lanes`), with a capacity
    /// hint. Called inside [`Peer::with_context`].
    fn new(lanes: usize, capacity: usize) -> Self;
    /// The API's deadline for tick `ms`.
    fn deadline(&self, ms: u64) -> Self::Deadline;
    fn insert(&mut self, deadline: Self::Deadline, lane: u64) -> Self::Key;
    /// Cancels a pending timer; returns whether it was pending.
    fn cancel(&mut self, key: Self::Key) -> bool;
    /// Moves a pending timer to a later deadline; returns the key to use from now on.
    fn reset(&mut self, key: Self::Key, deadline: Self::Deadline) -> Self::Key;
    /// Takes out every timer due at or before tick `now`, pushing its lane into `fired`.
    fn poll(&mut self, now: u64, fired: &mut Vec<u64>);
    /// Whether the key of a timer that fired must be handed back ([`Peer::release`]) when
    /// it fires: nexus-timer's handles must be consumed, and a fired tokio `Sleep` is dropped
    /// by the task that awaited it. For the others a fired key is just forgotten (it is
    /// overwritten when its lane gets a new timer).
    const RELEASE: bool = false;
    /// Releases the key of a timer that fired.
    #[inline]
    fn release(&mut self, key: Self::Key) {
        drop(key);
    }
    /// Cost of the clock machinery per `poll` call, in ns, to subtract (tokio's paused clock).
    fn poll_overhead_ns() -> f64 {
        0.0
    }
    /// Runs a workload in the context the peer needs (a tokio runtime, or nothing).
    fn with_context<R>(f: impl FnOnce() -> R) -> R {
        f()
    }
}

// ---------------------------------------------------------------------------------------------
// tickwheel
// ---------------------------------------------------------------------------------------------

/// `tickwheel::Wheel<u64>`.
pub struct Tickwheel(Wheel<u64>);

impl Peer for Tickwheel {
    const NAME: &'static str = "tickwheel";
    type Key = TimerKey;
    type Deadline = u64;

    fn new(_lanes: usize, capacity: usize) -> Self {
        Tickwheel(Wheel::with_capacity(capacity))
    }
    #[inline]
    fn deadline(&self, ms: u64) -> u64 {
        ms
    }
    #[inline]
    fn insert(&mut self, deadline: u64, lane: u64) -> TimerKey {
        self.0.insert(deadline, lane)
    }
    #[inline]
    fn cancel(&mut self, key: TimerKey) -> bool {
        self.0.cancel(key).is_some()
    }
    #[inline]
    fn reset(&mut self, key: TimerKey, deadline: u64) -> TimerKey {
        self.0.reset(key, deadline);
        key
    }
    #[inline]
    fn poll(&mut self, now: u64, fired: &mut Vec<u64>) {
        while let Some(expired) = self.0.poll(now) {
            fired.push(expired.value);
        }
    }
}

impl Tickwheel {
    pub fn wheel(&self) -> &Wheel<u64> {
        &self.0
    }
}

// ---------------------------------------------------------------------------------------------
// tokio: DelayQueue and Sleep, on a paused current-thread runtime
// ---------------------------------------------------------------------------------------------

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("tokio runtime")
}

thread_local! {
    /// The runtime of the tokio peer being measured, set by its `with_context`.
    static RUNTIME: RefCell<Option<Rc<tokio::runtime::Runtime>>> = const { RefCell::new(None) };
}

/// Runs `f` with a fresh paused runtime entered (so `Sleep`s and `Instant::now` find it) and
/// available to the peer through [`current_runtime`].
fn with_paused_runtime<R>(f: impl FnOnce() -> R) -> R {
    let rt = Rc::new(paused_runtime());
    RUNTIME.with(|slot| *slot.borrow_mut() = Some(rt.clone()));
    let out = {
        let _entered = rt.enter();
        f()
    };
    RUNTIME.with(|slot| slot.borrow_mut().take());
    out
}

fn current_runtime() -> Rc<tokio::runtime::Runtime> {
    RUNTIME
        .with(|slot| slot.borrow().clone())
        .expect("inside with_paused_runtime")
}

/// Moves tokio's paused clock from tick `from` to tick `to`; `advance` also yields once, so
/// the runtime's driver processes its wheel up to the new time.
async fn advance_clock(from: u64, to: u64) {
    if to > from {
        tokio::time::advance(Duration::from_millis(to - from)).await;
    }
}

/// Per-call cost of `block_on(advance_clock(t, t + 1))` on a runtime with no timers, in ns:
/// the median of five batches. Measured once per process, outside any runtime, and cached.
fn tokio_clock_overhead_ns() -> f64 {
    thread_local! {
        static CACHED: std::cell::Cell<Option<f64>> = const { std::cell::Cell::new(None) };
    }
    if let Some(ns) = CACHED.with(|c| c.get()) {
        return ns;
    }
    let rt = paused_runtime();
    let _entered = rt.enter();
    let mut samples = Vec::new();
    for _ in 0..5 {
        let calls = 20_000u64;
        let start = thread_cpu_ns();
        for t in 0..calls {
            rt.block_on(tokio::task::unconstrained(advance_clock(t, t + 1)));
        }
        samples.push((thread_cpu_ns() - start) as f64 / calls as f64);
    }
    let ns = median(&mut samples);
    CACHED.with(|c| c.set(Some(ns)));
    ns
}

/// `tokio_util::time::DelayQueue<u64>`.
pub struct TokioDelayQueue {
    rt: Rc<tokio::runtime::Runtime>,
    queue: tokio_util::time::DelayQueue<u64>,
    epoch: tokio::time::Instant,
    now: u64,
}

impl Peer for TokioDelayQueue {
    const NAME: &'static str = "DelayQueue";
    type Key = tokio_util::time::delay_queue::Key;
    type Deadline = tokio::time::Instant;

    fn new(_lanes: usize, capacity: usize) -> Self {
        TokioDelayQueue {
            rt: current_runtime(),
            queue: tokio_util::time::DelayQueue::with_capacity(capacity),
            epoch: tokio::time::Instant::now(),
            now: 0,
        }
    }
    #[inline]
    fn deadline(&self, ms: u64) -> tokio::time::Instant {
        self.epoch + Duration::from_millis(ms)
    }
    #[inline]
    fn insert(&mut self, deadline: tokio::time::Instant, lane: u64) -> Self::Key {
        self.queue.insert_at(lane, deadline)
    }
    #[inline]
    fn cancel(&mut self, key: Self::Key) -> bool {
        self.queue.remove(&key);
        true
    }
    #[inline]
    fn reset(&mut self, key: Self::Key, deadline: tokio::time::Instant) -> Self::Key {
        self.queue.reset_at(&key, deadline);
        key
    }
    fn poll(&mut self, now: u64, fired: &mut Vec<u64>) {
        let TokioDelayQueue { rt, queue, .. } = self;
        let from = self.now;
        // `unconstrained`: tokio's co-operative budget would otherwise cut a long drain short
        // with a `Pending` that only means "yield", not "nothing due".
        rt.block_on(tokio::task::unconstrained(async {
            advance_clock(from, now).await;
            std::future::poll_fn(|cx| {
                loop {
                    match queue.poll_expired(cx) {
                        Poll::Ready(Some(expired)) => fired.push(expired.into_inner()),
                        Poll::Ready(None) | Poll::Pending => return Poll::Ready(()),
                    }
                }
            })
            .await;
        }));
        self.now = self.now.max(now);
    }
    fn poll_overhead_ns() -> f64 {
        tokio_clock_overhead_ns()
    }
    fn with_context<R>(f: impl FnOnce() -> R) -> R {
        with_paused_runtime(f)
    }
}

/// Where fired `Sleep`s report their lane: the stand-in for waking a task.
#[derive(Default)]
struct FiredSink(Mutex<Vec<u64>>);

struct LaneWaker {
    lane: u64,
    sink: Arc<FiredSink>,
}

impl Wake for LaneWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.sink.0.lock().expect("sink").push(self.lane);
    }
}

/// tokio's runtime timer wheel, through `tokio::time::Sleep`.
pub struct TokioSleep {
    rt: Rc<tokio::runtime::Runtime>,
    epoch: tokio::time::Instant,
    wakers: Vec<Waker>,
    sink: Arc<FiredSink>,
    now: u64,
}

impl Peer for TokioSleep {
    const NAME: &'static str = "tokio Sleep";
    const RELEASE: bool = true;
    type Key = Pin<Box<tokio::time::Sleep>>;
    type Deadline = tokio::time::Instant;

    fn new(lanes: usize, _capacity: usize) -> Self {
        let sink = Arc::new(FiredSink::default());
        let wakers = (0..lanes as u64)
            .map(|lane| {
                Waker::from(Arc::new(LaneWaker {
                    lane,
                    sink: sink.clone(),
                }))
            })
            .collect();
        TokioSleep {
            rt: current_runtime(),
            epoch: tokio::time::Instant::now(),
            wakers,
            sink,
            now: 0,
        }
    }
    #[inline]
    fn deadline(&self, ms: u64) -> tokio::time::Instant {
        self.epoch + Duration::from_millis(ms)
    }
    #[inline]
    fn insert(&mut self, deadline: tokio::time::Instant, lane: u64) -> Self::Key {
        let mut sleep = Box::pin(tokio::time::sleep_until(deadline));
        // Registration with the driver is lazy: the first poll puts the timer in the wheel.
        let mut cx = Context::from_waker(&self.wakers[lane as usize]);
        let _ = sleep.as_mut().poll(&mut cx);
        sleep
    }
    #[inline]
    fn cancel(&mut self, key: Self::Key) -> bool {
        let pending = !key.is_elapsed();
        drop(key);
        pending
    }
    #[inline]
    fn reset(&mut self, mut key: Self::Key, deadline: tokio::time::Instant) -> Self::Key {
        key.as_mut().reset(deadline);
        key
    }
    fn poll(&mut self, now: u64, fired: &mut Vec<u64>) {
        self.rt
            .block_on(tokio::task::unconstrained(advance_clock(self.now, now)));
        self.now = self.now.max(now);
        fired.append(&mut self.sink.0.lock().expect("sink"));
    }
    fn poll_overhead_ns() -> f64 {
        tokio_clock_overhead_ns()
    }
    fn with_context<R>(f: impl FnOnce() -> R) -> R {
        with_paused_runtime(f)
    }
}

// ---------------------------------------------------------------------------------------------
// nexus-timer
// ---------------------------------------------------------------------------------------------

/// `nexus_timer::Wheel<u64>` (unbounded, the README's configuration: 1 ms ticks, 4096-entry
/// slab chunks).
pub struct NexusTimer {
    wheel: nexus_timer::Wheel<u64>,
    epoch: Instant,
}

impl Peer for NexusTimer {
    const NAME: &'static str = "nexus-timer";
    type Key = nexus_timer::TimerHandle<u64>;
    type Deadline = Instant;

    fn new(_lanes: usize, _capacity: usize) -> Self {
        let epoch = Instant::now();
        NexusTimer {
            wheel: nexus_timer::Wheel::unbounded(4096, epoch),
            epoch,
        }
    }
    #[inline]
    fn deadline(&self, ms: u64) -> Instant {
        self.epoch + Duration::from_millis(ms)
    }
    #[inline]
    fn insert(&mut self, deadline: Instant, lane: u64) -> Self::Key {
        self.wheel.schedule(deadline, lane)
    }
    #[inline]
    fn cancel(&mut self, key: Self::Key) -> bool {
        self.wheel.cancel(key).is_some()
    }
    #[inline]
    fn reset(&mut self, key: Self::Key, deadline: Instant) -> Self::Key {
        self.wheel.reschedule(key, deadline)
    }
    #[inline]
    fn poll(&mut self, now: u64, fired: &mut Vec<u64>) {
        self.wheel
            .poll(self.epoch + Duration::from_millis(now), fired);
    }
    const RELEASE: bool = true;
    #[inline]
    fn release(&mut self, key: Self::Key) {
        self.wheel.free(key);
    }
}

// ---------------------------------------------------------------------------------------------
// timer-queue
// ---------------------------------------------------------------------------------------------

/// `timer_queue::TimerQueue<u64>`.
pub struct TimerQueue(timer_queue::TimerQueue<u64>);

impl Peer for TimerQueue {
    const NAME: &'static str = "timer-queue";
    type Key = timer_queue::Timer;
    type Deadline = u64;

    fn new(_lanes: usize, capacity: usize) -> Self {
        TimerQueue(timer_queue::TimerQueue::with_capacity(capacity))
    }
    #[inline]
    fn deadline(&self, ms: u64) -> u64 {
        ms
    }
    #[inline]
    fn insert(&mut self, deadline: u64, lane: u64) -> Self::Key {
        self.0.insert(deadline, lane)
    }
    #[inline]
    fn cancel(&mut self, key: Self::Key) -> bool {
        self.0.remove(key);
        true
    }
    #[inline]
    fn reset(&mut self, key: Self::Key, deadline: u64) -> Self::Key {
        self.0.reset(key, deadline);
        key
    }
    #[inline]
    fn poll(&mut self, now: u64, fired: &mut Vec<u64>) {
        while let Some(lane) = self.0.poll(now) {
            fired.push(lane);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// hierarchical_hash_wheel_timer
// ---------------------------------------------------------------------------------------------

type HhwtEntry = hierarchical_hash_wheel_timer::IdOnlyTimerEntry<u64>;

/// `hierarchical_hash_wheel_timer::wheels::cancellable::QuadWheelWithOverflow` with
/// `IdOnlyTimerEntry<u64>`: ids are lanes, delays are relative to the wheel's own clock.
pub struct Hhwt {
    wheel: hierarchical_hash_wheel_timer::wheels::cancellable::QuadWheelWithOverflow<HhwtEntry>,
    /// The tick the wheel has been moved to by `tick`/`skip`.
    now: u64,
}

impl Hhwt {
    #[inline]
    fn schedule(&mut self, deadline: u64, lane: u64) {
        let delay = Duration::from_millis(deadline.saturating_sub(self.now).max(1));
        let entry = HhwtEntry::new(lane, delay);
        if self.wheel.insert(entry).is_err() {
            unreachable!("hhwt rejected a future deadline");
        }
    }
}

impl Peer for Hhwt {
    const NAME: &'static str = "hhwt";
    type Key = u64;
    type Deadline = u64;

    fn new(_lanes: usize, _capacity: usize) -> Self {
        Hhwt {
            wheel: Default::default(),
            now: 0,
        }
    }
    #[inline]
    fn deadline(&self, ms: u64) -> u64 {
        ms
    }
    #[inline]
    fn insert(&mut self, deadline: u64, lane: u64) -> u64 {
        self.schedule(deadline, lane);
        lane
    }
    #[inline]
    fn cancel(&mut self, key: u64) -> bool {
        self.wheel.cancel(&key).is_ok()
    }
    #[inline]
    fn reset(&mut self, key: u64, deadline: u64) -> u64 {
        let _ = self.wheel.cancel(&key);
        self.schedule(deadline, key);
        key
    }
    fn poll(&mut self, now: u64, fired: &mut Vec<u64>) {
        use hierarchical_hash_wheel_timer::wheels::Skip;
        while self.now < now {
            match self.wheel.can_skip() {
                Skip::Empty => {
                    let by = (now - self.now).min(u32::MAX as u64);
                    self.wheel.skip(by as u32);
                    self.now += by;
                }
                Skip::Millis(n) => {
                    let by = (now - self.now).min(n as u64);
                    self.wheel.skip(by as u32);
                    self.now += by;
                }
                Skip::None => {
                    fired.extend(self.wheel.tick().into_iter().map(|e| e.id));
                    self.now += 1;
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// BTreeMap and BinaryHeap baselines
// ---------------------------------------------------------------------------------------------

/// `BTreeMap<(deadline, seq), u64>`: the ordered-map baseline.
pub struct BTree {
    map: BTreeMap<(u64, u64), u64>,
    seq: u64,
}

impl Peer for BTree {
    const NAME: &'static str = "BTreeMap";
    type Key = (u64, u64);
    type Deadline = u64;

    fn new(_lanes: usize, _capacity: usize) -> Self {
        BTree {
            map: BTreeMap::new(),
            seq: 0,
        }
    }
    #[inline]
    fn deadline(&self, ms: u64) -> u64 {
        ms
    }
    #[inline]
    fn insert(&mut self, deadline: u64, lane: u64) -> (u64, u64) {
        self.seq += 1;
        self.map.insert((deadline, self.seq), lane);
        (deadline, self.seq)
    }
    #[inline]
    fn cancel(&mut self, key: (u64, u64)) -> bool {
        self.map.remove(&key).is_some()
    }
    #[inline]
    fn reset(&mut self, key: (u64, u64), deadline: u64) -> (u64, u64) {
        let lane = self.map.remove(&key).expect("pending");
        self.insert(deadline, lane)
    }
    #[inline]
    fn poll(&mut self, now: u64, fired: &mut Vec<u64>) {
        while let Some(entry) = self.map.first_entry() {
            if entry.key().0 > now {
                break;
            }
            fired.push(entry.remove());
        }
    }
}

/// `BinaryHeap` with lazy deletion: the heap holds (deadline, seq, slot, generation); values
/// live in a generation-checked slab, so cancel is O(1) and stale heap entries are skipped
/// when they surface. The heap is rebuilt when stale entries outnumber live ones (bounded
/// memory, amortised O(1) per cancel).
pub struct LazyHeap {
    heap: BinaryHeap<Reverse<(u64, u64, u32, u32)>>,
    slots: Vec<(u32, Option<u64>)>,
    free: Vec<u32>,
    live: usize,
    seq: u64,
}

impl LazyHeap {
    #[inline]
    fn push(&mut self, deadline: u64, slot: u32, generation: u32) {
        self.seq += 1;
        self.heap
            .push(Reverse((deadline, self.seq, slot, generation)));
    }

    fn maybe_compact(&mut self) {
        if self.heap.len() > 2 * self.live + 64 {
            let slots = &self.slots;
            self.heap
                .retain(|Reverse((_, _, s, g))| slots[*s as usize].0 == *g);
        }
    }
}

impl Peer for LazyHeap {
    const NAME: &'static str = "BinaryHeap";
    type Key = (u32, u32);
    type Deadline = u64;

    fn new(_lanes: usize, capacity: usize) -> Self {
        LazyHeap {
            heap: BinaryHeap::with_capacity(capacity),
            slots: Vec::with_capacity(capacity),
            free: Vec::new(),
            live: 0,
            seq: 0,
        }
    }
    #[inline]
    fn deadline(&self, ms: u64) -> u64 {
        ms
    }
    #[inline]
    fn insert(&mut self, deadline: u64, lane: u64) -> (u32, u32) {
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize].1 = Some(lane);
                slot
            }
            None => {
                self.slots.push((0, Some(lane)));
                (self.slots.len() - 1) as u32
            }
        };
        let generation = self.slots[slot as usize].0;
        self.push(deadline, slot, generation);
        self.live += 1;
        (slot, generation)
    }
    #[inline]
    fn cancel(&mut self, (slot, generation): (u32, u32)) -> bool {
        let entry = &mut self.slots[slot as usize];
        if entry.0 != generation || entry.1.is_none() {
            return false;
        }
        entry.0 = entry.0.wrapping_add(1);
        entry.1 = None;
        self.free.push(slot);
        self.live -= 1;
        self.maybe_compact();
        true
    }
    #[inline]
    fn reset(&mut self, (slot, generation): (u32, u32), deadline: u64) -> (u32, u32) {
        let entry = &mut self.slots[slot as usize];
        debug_assert_eq!(entry.0, generation);
        entry.0 = entry.0.wrapping_add(1);
        let generation = entry.0;
        self.push(deadline, slot, generation);
        self.maybe_compact();
        (slot, generation)
    }
    #[inline]
    fn poll(&mut self, now: u64, fired: &mut Vec<u64>) {
        while let Some(&Reverse((deadline, _, slot, generation))) = self.heap.peek() {
            let entry = &mut self.slots[slot as usize];
            if entry.0 != generation {
                self.heap.pop();
                continue;
            }
            if deadline > now {
                break;
            }
            self.heap.pop();
            let lane = entry.1.take().expect("live entry");
            entry.0 = entry.0.wrapping_add(1);
            self.free.push(slot);
            self.live -= 1;
            fired.push(lane);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------------------------

/// Everything the workloads need for `n` timers, generated once from a fixed seed and shared
/// by every peer.
pub struct Input {
    pub n: usize,
    /// Deadline of timer `i`, uniform in `1..=SPAN`.
    pub deadlines: Vec<u64>,
    /// A random permutation of `0..n`: the order of cancels and resets.
    pub order: Vec<u32>,
    /// Idle timeout of timer `i` in the reset-heavy workload, uniform in
    /// `ROUND_TICKS + 1..=SPAN`.
    pub idle: Vec<u64>,
    /// The churn script, built on first use (it is large).
    churn: RefCell<Option<Rc<Churn>>>,
}

impl Input {
    pub fn new(n: usize) -> Self {
        let mut rng = StdRng::seed_from_u64(0x71c4_e55e ^ n as u64);
        let deadlines = (0..n).map(|_| rng.gen_range(1..=SPAN)).collect();
        let mut order: Vec<u32> = (0..n as u32).collect();
        order.shuffle(&mut rng);
        let idle = (0..n)
            .map(|_| rng.gen_range(ROUND_TICKS + 1..=SPAN))
            .collect();
        Input {
            n,
            deadlines,
            order,
            idle,
            churn: RefCell::new(None),
        }
    }

    pub fn churn(&self) -> Rc<Churn> {
        self.churn
            .borrow_mut()
            .get_or_insert_with(|| Rc::new(Churn::new(self.n)))
            .clone()
    }

    /// The timers cancelled in workloads 2–4: the first half of `order`.
    fn cancelled(&self) -> &[u32] {
        &self.order[..self.n / 2]
    }

    /// Whether timer `i` survives the cancel of workloads 2–4.
    fn survivors(&self) -> Vec<bool> {
        let mut alive = vec![true; self.n];
        for &i in self.cancelled() {
            alive[i as usize] = false;
        }
        alive
    }
}

const OP_INSERT: u64 = 0;
const OP_CANCEL: u64 = 1 << 62;
const OP_TICK: u64 = 2 << 62;
const OP_TAG: u64 = 3 << 62;

/// The steady-churn script: `n` lanes, each holding one timer at a time. A timer's deadline is
/// uniform over the next `SPAN` ticks; with probability [`CHURN_CANCEL`] it is cancelled at a
/// uniform tick before its deadline, otherwise it fires. Either way its lane gets a new timer
/// at once (after a cancel) or on the next tick (after a fire). Every tick ends with a poll.
pub struct Churn {
    /// Ops, each one `u64`: tag in the top two bits, then a lane or a tick.
    pub ops: Vec<u64>,
    /// Deadlines of the inserts, in op order; the first `n` are the prefill.
    pub deadlines: Vec<u64>,
    /// Inserts (after the prefill) + cancels + fires the script performs.
    pub counted_ops: u64,
    pub expected: Tally,
    pub ticks: u64,
}

impl Churn {
    fn new(n: usize) -> Self {
        let mut rng = StdRng::seed_from_u64(0xc4a7_c4a7 ^ n as u64);
        let mut plan = Plan {
            cancel_at: Vec::new(),
            refill_at: Vec::new(),
            deadlines: Vec::with_capacity(n * 6),
        };
        let mut ops = Vec::with_capacity(n * 11);
        for lane in 0..n as u32 {
            plan.schedule(lane, 0, &mut rng);
        }
        let target = CHURN_OPS_PER_TIMER * n as u64;
        let mut counted = 0u64;
        let mut expected = Tally::default();
        let mut tick = 0u64;
        while counted < target {
            tick += 1;
            let t = tick as usize;
            for lane in plan
                .cancel_at
                .get_mut(t)
                .map(std::mem::take)
                .unwrap_or_default()
            {
                ops.push(OP_CANCEL | lane as u64);
                expected.cancelled += 1;
                ops.push(OP_INSERT | lane as u64);
                plan.schedule(lane, tick, &mut rng);
                counted += 2;
            }
            for lane in plan
                .refill_at
                .get_mut(t)
                .map(std::mem::take)
                .unwrap_or_default()
            {
                expected.fire(lane as u64, tick - 1);
                ops.push(OP_INSERT | lane as u64);
                plan.schedule(lane, tick, &mut rng);
                counted += 2;
            }
            ops.push(OP_TICK | tick);
        }
        // Timers firing at the last tick are counted too: their refill is past the end.
        for &lane in plan
            .refill_at
            .get(tick as usize + 1)
            .map(Vec::as_slice)
            .unwrap_or(&[])
        {
            expected.fire(lane as u64, tick);
            counted += 1;
        }
        Churn {
            ops,
            deadlines: plan.deadlines,
            counted_ops: counted,
            expected,
            ticks: tick,
        }
    }
}

/// The churn script's future: which lanes end at which tick.
struct Plan {
    /// `cancel_at[t]`: lanes whose timer is cancelled at tick `t`.
    cancel_at: Vec<Vec<u32>>,
    /// `refill_at[t]`: lanes whose timer fired at tick `t - 1`.
    refill_at: Vec<Vec<u32>>,
    deadlines: Vec<u64>,
}

impl Plan {
    /// Gives `lane` a new timer at tick `now` and decides how it ends.
    fn schedule(&mut self, lane: u32, now: u64, rng: &mut StdRng) {
        let deadline = now + rng.gen_range(1..=SPAN);
        self.deadlines.push(deadline);
        let (bucket, at) = if deadline > now + 1 && rng.gen_bool(CHURN_CANCEL) {
            (&mut self.cancel_at, rng.gen_range(now + 1..deadline))
        } else {
            (&mut self.refill_at, deadline + 1)
        };
        let at = at as usize;
        if bucket.len() <= at {
            bucket.resize_with(at + 1, Vec::new);
        }
        bucket[at].push(lane);
    }
}

// ---------------------------------------------------------------------------------------------
// Workloads
// ---------------------------------------------------------------------------------------------

/// The workloads of issue 6 (7, the scheduler, and 8, memory, live in `examples/compare.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// 1: insert `n` timers.
    Insert,
    /// 2: cancel half of them, in random order.
    Cancel,
    /// 3: expire the other half with one poll far ahead.
    ExpireOnce,
    /// 4: expire the other half by polling every tick (idle polls count).
    ExpireTicks,
    /// 5: insert `n` idle timeouts, push each later `RESETS` times (polling every tick), then
    /// cancel half and expire the rest.
    ResetHeavy,
    /// 6: steady churn, 99 % cancelled before they fire, polling every tick.
    Churn,
    /// An idle poll: nothing due, `n` timers pending far ahead.
    IdlePoll,
}

impl Workload {
    pub const ALL: [Workload; 7] = [
        Workload::Insert,
        Workload::Cancel,
        Workload::ExpireOnce,
        Workload::ExpireTicks,
        Workload::ResetHeavy,
        Workload::Churn,
        Workload::IdlePoll,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Workload::Insert => "1 insert",
            Workload::Cancel => "2 cancel half",
            Workload::ExpireOnce => "3 expire, one poll",
            Workload::ExpireTicks => "4 expire, every tick",
            Workload::ResetHeavy => "5 reset-heavy",
            Workload::Churn => "6 churn 99% cancel",
            Workload::IdlePoll => "idle poll",
        }
    }

    /// What one operation is, for the table's footnote.
    pub fn unit(self) -> &'static str {
        match self {
            Workload::Insert => "per insert",
            Workload::Cancel => "per cancel",
            Workload::ExpireOnce | Workload::ExpireTicks => {
                "per timer expired (idle polls included)"
            }
            Workload::ResetHeavy => "per op (insert, reset, cancel or expiry)",
            Workload::Churn => "per op (insert, cancel or expiry; polls included)",
            Workload::IdlePoll => "per poll",
        }
    }

    pub fn short(self) -> &'static str {
        match self {
            Workload::Insert => "insert",
            Workload::Cancel => "cancel",
            Workload::ExpireOnce => "expire_once",
            Workload::ExpireTicks => "expire_ticks",
            Workload::ResetHeavy => "reset_heavy",
            Workload::Churn => "churn",
            Workload::IdlePoll => "idle_poll",
        }
    }
}

/// What fired and what was cancelled: compared across peers (and against the script) so a
/// peer that fires early, late or twice is caught instead of measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub fired: u64,
    /// Sum over fired timers of lane × (tick of the poll that returned it), wrapping.
    pub checksum: u64,
    pub cancelled: u64,
}

impl Tally {
    #[inline]
    fn fire(&mut self, lane: u64, tick: u64) {
        self.fired += 1;
        self.checksum = self
            .checksum
            .wrapping_add(lane.wrapping_mul(tick).wrapping_add(lane));
    }
}

/// The result of one run of one workload on one peer.
#[derive(Clone, Copy, Debug)]
pub struct Outcome {
    /// Time of the timed region, with the clock overhead subtracted (tokio peers).
    pub nanos: f64,
    /// Operations done in the timed region.
    pub ops: u64,
    pub tally: Tally,
    pub expected: Tally,
    /// The run stopped at its time budget: `nanos / ops` is an estimate from a prefix.
    pub partial: bool,
}

impl Outcome {
    pub fn ns_per_op(&self) -> f64 {
        self.nanos / self.ops.max(1) as f64
    }
}

/// CPU time this thread has used, in ns (`CLOCK_THREAD_CPUTIME_ID`). The figures are CPU
/// time, not wall time: on a shared machine the time a thread spends descheduled is noise,
/// not work. Everything a peer does runs on this thread (tokio's runtime is current-thread).
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux and the
    // BSDs define. clock_gettime only writes `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The timed region of a workload, with a time budget.
struct Clock {
    /// Wall clock (for the budget) and thread CPU time (for the figure) at `start`.
    started: Option<(Instant, u64)>,
    /// Thread CPU time spent in the timed region, in ns.
    spent: u64,
    budget: Duration,
    polls: u64,
    partial: bool,
}

impl Clock {
    fn new(budget: Duration) -> Self {
        Clock {
            started: None,
            spent: 0,
            budget,
            polls: 0,
            partial: false,
        }
    }
    fn start(&mut self) {
        self.started = Some((Instant::now(), thread_cpu_ns()));
    }
    fn stop(&mut self) {
        if let Some((_, cpu)) = self.started.take() {
            self.spent += thread_cpu_ns() - cpu;
        }
    }
    /// True when the budget (of CPU time, checked on the wall clock for cheapness: wall
    /// time is never less) is used up; marks the outcome partial.
    fn over(&mut self) -> bool {
        let running = self.started.map_or(Duration::ZERO, |(t, _)| t.elapsed());
        if Duration::from_nanos(self.spent) + running > self.budget {
            self.partial = true;
        }
        self.partial
    }
    fn outcome<P: Peer>(self, ops: u64, tally: Tally, expected: Tally) -> Outcome {
        let raw = self.spent as f64;
        let overhead = P::poll_overhead_ns() * self.polls as f64;
        Outcome {
            nanos: (raw - overhead).max(raw * 0.01),
            ops,
            tally,
            expected,
            partial: self.partial,
        }
    }
}

/// Polls `peer` at `now` and hands fired keys back to it.
#[inline]
fn poll_at<P: Peer>(
    peer: &mut P,
    now: u64,
    keys: &mut [Option<P::Key>],
    fired: &mut Vec<u64>,
    tally: &mut Tally,
    clock: &mut Clock,
) {
    clock.polls += 1;
    peer.poll(now, fired);
    for &lane in fired.iter() {
        tally.fire(lane, now);
        if P::RELEASE {
            if let Some(key) = keys[lane as usize].take() {
                peer.release(key);
            }
        }
    }
    fired.clear();
}

/// Runs one workload on one peer and returns what it measured.
pub fn run<P: Peer>(workload: Workload, input: &Input, budget: Duration) -> Outcome {
    // Calibrate the clock overhead now: it needs a runtime of its own, outside this one.
    let _ = P::poll_overhead_ns();
    P::with_context(|| match workload {
        Workload::Insert => insert::<P>(input, budget),
        Workload::Cancel => cancel::<P>(input, budget),
        Workload::ExpireOnce => expire::<P>(input, budget, false),
        Workload::ExpireTicks => expire::<P>(input, budget, true),
        Workload::ResetHeavy => reset_heavy::<P>(input, budget),
        Workload::Churn => churn::<P>(input, budget),
        Workload::IdlePoll => idle_poll::<P>(input, budget),
    })
}

fn fill<P: Peer>(peer: &mut P, input: &Input) -> Vec<Option<P::Key>> {
    let deadlines: Vec<P::Deadline> = input.deadlines.iter().map(|&d| peer.deadline(d)).collect();
    deadlines
        .into_iter()
        .enumerate()
        .map(|(lane, d)| Some(peer.insert(d, lane as u64)))
        .collect()
}

/// Takes the keys of `lanes` out of `keys`, in that order (outside the timed region, so the
/// timed loop walks them sequentially while the peer sees a random order).
fn take_keys<K>(keys: &mut [Option<K>], lanes: &[u32]) -> Vec<K> {
    lanes
        .iter()
        .map(|&l| keys[l as usize].take().expect("pending key"))
        .collect()
}

fn insert<P: Peer>(input: &Input, budget: Duration) -> Outcome {
    let mut peer = P::new(input.n, input.n);
    let deadlines: Vec<P::Deadline> = input.deadlines.iter().map(|&d| peer.deadline(d)).collect();
    let mut keys = Vec::with_capacity(input.n);
    let mut clock = Clock::new(budget);
    clock.start();
    for (lane, &d) in deadlines.iter().enumerate() {
        keys.push(peer.insert(d, lane as u64));
    }
    clock.stop();
    let expected = Tally::default();
    let out = clock.outcome::<P>(input.n as u64, Tally::default(), expected);
    drop(keys);
    out
}

fn cancel<P: Peer>(input: &Input, budget: Duration) -> Outcome {
    let mut peer = P::new(input.n, input.n);
    let mut keys = fill(&mut peer, input);
    let victims = take_keys(&mut keys, input.cancelled());
    let mut tally = Tally::default();
    let mut clock = Clock::new(budget);
    clock.start();
    for key in victims {
        tally.cancelled += peer.cancel(key) as u64;
    }
    clock.stop();
    let expected = Tally {
        cancelled: input.cancelled().len() as u64,
        ..Tally::default()
    };
    clock.outcome::<P>(input.cancelled().len() as u64, tally, expected)
}

fn expire<P: Peer>(input: &Input, budget: Duration, every_tick: bool) -> Outcome {
    let mut peer = P::new(input.n, input.n);
    let mut keys = fill(&mut peer, input);
    for key in take_keys(&mut keys, input.cancelled()) {
        peer.cancel(key);
    }
    let survivors = input.survivors();
    let mut expected = Tally::default();
    for (lane, &d) in input.deadlines.iter().enumerate() {
        if survivors[lane] {
            expected.fire(lane as u64, if every_tick { d } else { SPAN + 1 });
        }
    }
    let mut fired = Vec::with_capacity(input.n);
    let mut tally = Tally::default();
    let mut clock = Clock::new(budget);
    clock.start();
    if every_tick {
        for now in 1..=SPAN {
            poll_at(
                &mut peer, now, &mut keys, &mut fired, &mut tally, &mut clock,
            );
            if now % 256 == 0 && clock.over() {
                break;
            }
        }
    } else {
        poll_at(
            &mut peer,
            SPAN + 1,
            &mut keys,
            &mut fired,
            &mut tally,
            &mut clock,
        );
    }
    clock.stop();
    let ops = if clock.partial {
        tally.fired.max(1)
    } else {
        expected.fired
    };
    clock.outcome::<P>(ops, tally, expected)
}

fn reset_heavy<P: Peer>(input: &Input, budget: Duration) -> Outcome {
    let n = input.n;
    let mut peer = P::new(n, n);
    let mut fired = Vec::new();
    let mut tally = Tally::default();
    let mut clock = Clock::new(budget);
    let mut ops = 0u64;

    let first: Vec<P::Deadline> = input.idle.iter().map(|&d| peer.deadline(d)).collect();
    let mut keys: Vec<Option<P::Key>> = Vec::with_capacity(n);
    clock.start();
    for (lane, &d) in first.iter().enumerate() {
        keys.push(Some(peer.insert(d, lane as u64)));
    }
    clock.stop();
    ops += n as u64;

    // Each round the keys are put in a new random order (outside the timed region), so the
    // peer sees random access while the timed loop walks `round` sequentially.
    let mut lanes: Vec<u32> = (0..n as u32).collect();
    let mut now = 0u64;
    let mut rounds = 0;
    for _ in 0..RESETS {
        let order: Vec<u32> = input.order.iter().map(|&i| lanes[i as usize]).collect();
        lanes = order;
        let round: Vec<P::Key> = take_keys(&mut keys, &lanes);
        let target = now + ROUND_TICKS;
        let deadlines: Vec<P::Deadline> = lanes
            .iter()
            .map(|&l| peer.deadline(target + input.idle[l as usize]))
            .collect();
        clock.start();
        while now < target {
            now += 1;
            poll_at(
                &mut peer, now, &mut keys, &mut fired, &mut tally, &mut clock,
            );
        }
        for ((key, &d), &lane) in round.into_iter().zip(&deadlines).zip(&lanes) {
            keys[lane as usize] = Some(peer.reset(key, d));
        }
        clock.stop();
        ops += n as u64;
        rounds += 1;
        if clock.over() {
            break;
        }
    }

    let mut expected = Tally::default();
    if rounds == RESETS {
        // Cancel half, then expire the rest with one poll far ahead.
        let victims = take_keys(&mut keys, input.cancelled());
        let far = now + SPAN + 1;
        let alive = input.survivors();
        for lane in (0..n).filter(|&l| alive[l]) {
            expected.fire(lane as u64, far);
        }
        expected.cancelled = victims.len() as u64;
        clock.start();
        for key in victims {
            tally.cancelled += peer.cancel(key) as u64;
        }
        poll_at(
            &mut peer, far, &mut keys, &mut fired, &mut tally, &mut clock,
        );
        clock.stop();
        ops += n as u64;
    }
    clock.outcome::<P>(ops, tally, expected)
}

fn churn<P: Peer>(input: &Input, budget: Duration) -> Outcome {
    let script = input.churn();
    let n = input.n;
    let mut peer = P::new(n, n);
    let deadlines: Vec<P::Deadline> = script.deadlines.iter().map(|&d| peer.deadline(d)).collect();
    let mut keys: Vec<Option<P::Key>> = Vec::with_capacity(n);
    for (lane, &d) in deadlines[..n].iter().enumerate() {
        keys.push(Some(peer.insert(d, lane as u64)));
    }
    let mut next_deadline = n;
    let mut fired = Vec::new();
    let mut tally = Tally::default();
    let mut clock = Clock::new(budget);
    let mut inserts = 0u64;
    clock.start();
    for &op in &script.ops {
        let arg = op & !OP_TAG;
        match op & OP_TAG {
            OP_INSERT => {
                keys[arg as usize] = Some(peer.insert(deadlines[next_deadline], arg));
                next_deadline += 1;
                inserts += 1;
            }
            OP_CANCEL => {
                let key = keys[arg as usize].take().expect("pending key");
                tally.cancelled += peer.cancel(key) as u64;
            }
            _ => {
                poll_at(
                    &mut peer, arg, &mut keys, &mut fired, &mut tally, &mut clock,
                );
                if arg % 256 == 0 && clock.over() {
                    break;
                }
            }
        }
    }
    clock.stop();
    let ops = if clock.partial {
        inserts + tally.cancelled + tally.fired
    } else {
        script.counted_ops
    };
    clock.outcome::<P>(ops, tally, script.expected)
}

fn idle_poll<P: Peer>(input: &Input, budget: Duration) -> Outcome {
    let mut peer = P::new(input.n, input.n);
    // Deadlines in the second minute: nothing is due during the measured polls.
    let deadlines: Vec<P::Deadline> = input
        .deadlines
        .iter()
        .map(|&d| peer.deadline(SPAN + d))
        .collect();
    let mut keys: Vec<Option<P::Key>> = deadlines
        .into_iter()
        .enumerate()
        .map(|(lane, d)| Some(peer.insert(d, lane as u64)))
        .collect();
    let mut fired = Vec::new();
    let mut tally = Tally::default();
    let mut clock = Clock::new(budget);
    let mut polls = 0;
    clock.start();
    for now in 1..=IDLE_POLLS {
        poll_at(
            &mut peer, now, &mut keys, &mut fired, &mut tally, &mut clock,
        );
        polls += 1;
        if now % 256 == 0 && clock.over() {
            break;
        }
    }
    clock.stop();
    clock.outcome::<P>(polls, tally, Tally::default())
}

// ---------------------------------------------------------------------------------------------
// Memory (workload 8)
// ---------------------------------------------------------------------------------------------

/// Heap bytes per pending timer after inserting `n` timers into a structure built without a
/// capacity hint, as `heap()` (a counting allocator) sees it. Includes the keys' own heap (a
/// `Box<Sleep>` for tokio), not the vector the harness keeps them in.
pub fn bytes_per_timer<P: Peer>(input: &Input, heap: &dyn Fn() -> isize) -> f64 {
    P::with_context(|| {
        let deadlines: Vec<u64> = input.deadlines.clone();
        let mut keys: Vec<Option<P::Key>> = Vec::with_capacity(input.n);
        let mut peer = P::new(input.n, 0);
        let before = heap();
        for (lane, &d) in deadlines.iter().enumerate() {
            let d = peer.deadline(d);
            keys.push(Some(peer.insert(d, lane as u64)));
        }
        let after = heap();
        let per = (after - before) as f64 / input.n as f64;
        drop(keys);
        drop(peer);
        per
    })
}

/// Heap held by a peer during the churn workload, as growth since before the first insert:
/// after the prefill, half-way through the script and at its end. Flat means the second
/// half adds nothing: whatever the structure keeps for stale references and spare capacity
/// has reached its steady state.
pub fn churn_heap<P: Peer>(input: &Input, heap: &dyn Fn() -> isize) -> [isize; 3] {
    let script = input.churn();
    let n = input.n;
    P::with_context(|| {
        let mut keys: Vec<Option<P::Key>> = Vec::with_capacity(n);
        let mut fired = Vec::with_capacity(n);
        let mut peer = P::new(n, 0);
        let base = heap();
        for (lane, &d) in script.deadlines[..n].iter().enumerate() {
            let d = peer.deadline(d);
            keys.push(Some(peer.insert(d, lane as u64)));
        }
        let start = heap() - base;
        let mut half = start;
        let mut next_deadline = n;
        let mut tally = Tally::default();
        let mut clock = Clock::new(Duration::MAX);
        let middle = script.ops.len() / 2;
        for (i, &op) in script.ops.iter().enumerate() {
            let arg = op & !OP_TAG;
            match op & OP_TAG {
                OP_INSERT => {
                    let d = peer.deadline(script.deadlines[next_deadline]);
                    keys[arg as usize] = Some(peer.insert(d, arg));
                    next_deadline += 1;
                }
                OP_CANCEL => {
                    let key = keys[arg as usize].take().expect("pending key");
                    peer.cancel(key);
                }
                _ => poll_at(
                    &mut peer, arg, &mut keys, &mut fired, &mut tally, &mut clock,
                ),
            }
            if i == middle {
                half = heap() - base;
            }
        }
        [start, half, heap() - base]
    })
}

// ---------------------------------------------------------------------------------------------
// Small statistics
// ---------------------------------------------------------------------------------------------

pub fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        samples[n / 2]
    } else {
        (samples[n / 2 - 1] + samples[n / 2]) / 2.0
    }
}
