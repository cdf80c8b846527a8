//! The peers on a paused current-thread tokio runtime: tokio-util's `DelayQueue`, tickwheel's
//! drop-in `tickwheel::tokio::DelayQueue` (same adapter), tokio's `Sleep`, and the runtime
//! functions they share.

use std::cell::RefCell;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use super::Peer;
use super::cpu_time::thread_cpu_ns;
use super::workloads::median;

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

/// A tokio peer's runtime and its paused clock, in ticks (ms) since `epoch`.
struct PausedClock {
    rt: Rc<tokio::runtime::Runtime>,
    epoch: tokio::time::Instant,
    now: u64,
}

impl PausedClock {
    /// The runtime of [`with_paused_runtime`], its clock at tick 0 now.
    fn start() -> Self {
        PausedClock {
            rt: current_runtime(),
            epoch: tokio::time::Instant::now(),
            now: 0,
        }
    }

    /// The `Instant` of tick `ms`.
    #[inline]
    fn deadline(&self, ms: u64) -> tokio::time::Instant {
        self.epoch + Duration::from_millis(ms)
    }

    /// One `block_on`: advances the clock to tick `to` (never back), then runs `then`, under
    /// `unconstrained` (tokio's co-operative budget would otherwise cut a long drain short
    /// with a `Pending` that only means "yield", not "nothing due").
    fn advance_then(&mut self, to: u64, then: impl Future<Output = ()>) {
        let from = self.now;
        self.rt.block_on(tokio::task::unconstrained(async {
            advance_clock(from, to).await;
            then.await;
        }));
        self.now = self.now.max(to);
    }
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

/// The part of the `DelayQueue` API the adapter drives. Implemented by
/// `tokio_util::time::DelayQueue<u64>` and by its drop-in, `tickwheel::tokio::DelayQueue<u64>`,
/// so both are driven by the same code ([`DelayQueuePeer`]): same runtime, same calls, same
/// clock-overhead subtraction.
pub trait DelayQueueApi {
    /// Column name in the table.
    const NAME: &'static str;
    type Key;
    fn with_capacity(capacity: usize) -> Self;
    fn insert_at(&mut self, lane: u64, when: tokio::time::Instant) -> Self::Key;
    /// `try_remove`: removes the entry, or returns `false` for a key that names none.
    fn try_remove(&mut self, key: &Self::Key) -> bool;
    fn reset_at(&mut self, key: &Self::Key, when: tokio::time::Instant);
    fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<Option<u64>>;
}

/// [`DelayQueueApi`] for a queue with tokio-util's `DelayQueue` methods: `$q`, its name, its
/// key type and its `Expired`'s `into_inner`. The two queues share one API by design (the
/// tickwheel one is a drop-in), so their adapters are one.
macro_rules! delay_queue_api {
    ($q:ty, $name:literal, $key:ty, $into_inner:expr) => {
        impl DelayQueueApi for $q {
            const NAME: &'static str = $name;
            type Key = $key;
            #[inline]
            fn with_capacity(capacity: usize) -> Self {
                <$q>::with_capacity(capacity)
            }
            #[inline]
            fn insert_at(&mut self, lane: u64, when: tokio::time::Instant) -> Self::Key {
                <$q>::insert_at(self, lane, when)
            }
            #[inline]
            fn try_remove(&mut self, key: &Self::Key) -> bool {
                <$q>::try_remove(self, key).is_some()
            }
            #[inline]
            fn reset_at(&mut self, key: &Self::Key, when: tokio::time::Instant) {
                <$q>::reset_at(self, key, when);
            }
            #[inline]
            fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<Option<u64>> {
                <$q>::poll_expired(self, cx).map(|e| e.map($into_inner))
            }
        }
    };
}

delay_queue_api!(
    tokio_util::time::DelayQueue<u64>,
    "DelayQueue",
    tokio_util::time::delay_queue::Key,
    tokio_util::time::delay_queue::Expired::into_inner
);

#[cfg(feature = "tokio")]
delay_queue_api!(
    tickwheel::tokio::DelayQueue<u64>,
    "tickwheel DelayQueue",
    tickwheel::tokio::Key,
    tickwheel::tokio::Expired::into_inner
);

/// A `DelayQueue<u64>` (tokio-util's or tickwheel's drop-in) on a paused current-thread
/// runtime.
///
/// Cancel is `try_remove` (tokio-util ≥ 0.7.5), not `remove`, so the harness sees whether an
/// entry was there: `remove` panics on an absent key instead. Caveat for tokio-util's: its keys
/// are bare slab indexes, so a stale key whose slot was reused would remove the new entry and
/// still say `true`. The workloads only cancel pending timers, so that case never arises here;
/// a wrong removal would show in the fires instead.
pub struct DelayQueuePeer<Q> {
    clock: PausedClock,
    queue: Q,
}

/// `tokio_util::time::DelayQueue<u64>`.
pub type TokioDelayQueue = DelayQueuePeer<tokio_util::time::DelayQueue<u64>>;
/// `tickwheel::tokio::DelayQueue<u64>`, the drop-in for tokio-util's (needs the `tokio`
/// feature).
#[cfg(feature = "tokio")]
pub type TickwheelDelayQueue = DelayQueuePeer<tickwheel::tokio::DelayQueue<u64>>;

impl<Q: DelayQueueApi> Peer for DelayQueuePeer<Q> {
    const NAME: &'static str = Q::NAME;
    type Key = Q::Key;
    type Deadline = tokio::time::Instant;

    fn new(_lanes: usize, capacity: usize) -> Self {
        DelayQueuePeer {
            clock: PausedClock::start(),
            queue: Q::with_capacity(capacity),
        }
    }
    #[inline]
    fn deadline(&self, ms: u64) -> tokio::time::Instant {
        self.clock.deadline(ms)
    }
    #[inline]
    fn insert(&mut self, deadline: tokio::time::Instant, lane: u64) -> Self::Key {
        self.queue.insert_at(lane, deadline)
    }
    #[inline]
    fn cancel(&mut self, key: Self::Key) -> bool {
        self.queue.try_remove(&key)
    }
    #[inline]
    fn reset(&mut self, key: Self::Key, deadline: tokio::time::Instant) -> Self::Key {
        self.queue.reset_at(&key, deadline);
        key
    }
    fn poll(&mut self, now: u64, fired: &mut Vec<u64>) {
        let DelayQueuePeer { clock, queue } = self;
        clock.advance_then(
            now,
            std::future::poll_fn(|cx| {
                loop {
                    match queue.poll_expired(cx) {
                        Poll::Ready(Some(lane)) => fired.push(lane),
                        Poll::Ready(None) | Poll::Pending => return Poll::Ready(()),
                    }
                }
            }),
        );
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
    clock: PausedClock,
    wakers: Vec<Waker>,
    sink: Arc<FiredSink>,
}

impl Peer for TokioSleep {
    const NAME: &'static str = "tokio Sleep";
    const RELEASE: bool = true;
    type Key = Pin<Box<tokio::time::Sleep>>;
    type Deadline = tokio::time::Instant;

    fn new(lanes: usize, capacity: usize) -> Self {
        // Room for every lane to fire before a poll collects them (one poll expires them all).
        let sink = Arc::new(FiredSink(Mutex::new(Vec::with_capacity(capacity))));
        let wakers = (0..lanes as u64)
            .map(|lane| {
                Waker::from(Arc::new(LaneWaker {
                    lane,
                    sink: sink.clone(),
                }))
            })
            .collect();
        TokioSleep {
            clock: PausedClock::start(),
            wakers,
            sink,
        }
    }
    #[inline]
    fn deadline(&self, ms: u64) -> tokio::time::Instant {
        self.clock.deadline(ms)
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
        self.clock.advance_then(now, async {});
        fired.append(&mut self.sink.0.lock().expect("sink"));
    }
    fn poll_overhead_ns() -> f64 {
        tokio_clock_overhead_ns()
    }
    fn with_context<R>(f: impl FnOnce() -> R) -> R {
        with_paused_runtime(f)
    }
}
