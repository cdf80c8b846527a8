//! Set-ups of the admission tests: queues at the tests' resolution, one holding all its
//! capacity, one under a shared [`Limit`], an idle runtime entered, and a future polled by
//! hand.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tickwheel::admission::{AdmissionQueue, Limit, Order, Permit};

/// The resolution of every queue made here: 1 ms.
pub const RES: Duration = Duration::from_millis(1);

/// A deadline an hour away: a request never expires within a test.
pub fn far() -> Instant {
    Instant::now() + Duration::from_secs(3600)
}

/// A queue of `capacity` units and the permit that holds all of them.
pub fn full(capacity: u64) -> (AdmissionQueue, Permit) {
    let q = AdmissionQueue::new(capacity, RES);
    let all = q
        .acquire(capacity, far())
        .unwrap_or_else(|e| panic!("an idle queue grants its capacity: {e:?}"));
    (q, all)
}

/// A global limit of `global` units and `N` strict-FIFO queues of `each` units under it.
pub fn limited<const N: usize>(global: u64, each: u64) -> (Limit, [AdmissionQueue; N]) {
    let limit = Limit::new(global);
    let queues = std::array::from_fn(|_| under(&limit, each));
    (limit, queues)
}

/// A queue of `capacity` units under `global`, strict FIFO.
pub fn under(global: &Limit, capacity: u64) -> AdmissionQueue {
    AdmissionQueue::with_options(capacity, Some(global.clone()), Order::Strict, RES)
}

/// One poll of `f` with `waker`.
pub fn poll_once<F: Future + Unpin>(f: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(f).poll(&mut Context::from_waker(waker))
}

/// Enters an idle runtime (feature `tokio`) until the end of the block: `acquire_async`
/// finds a runtime to spawn its expiry driver on, and the driver never runs, since nothing
/// drives that runtime. Passes (and so expiries) run only where the test calls for them.
macro_rules! enter_idle {
    () => {
        let rt = $crate::support::tasks::idle_runtime();
        let _guard = rt.enter();
    };
}
pub(crate) use enter_idle;
