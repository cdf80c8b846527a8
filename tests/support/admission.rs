//! Set-ups of the admission tests: queues at the tests' resolution, one holding all its
//! capacity, one under a shared [`Limit`], and a future polled by hand.

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

/// A queue of `capacity` units under `global`, strict FIFO.
pub fn under(global: &Limit, capacity: u64) -> AdmissionQueue {
    AdmissionQueue::with_options(capacity, Some(global.clone()), Order::Strict, RES)
}

/// One poll of `f` with `waker`.
pub fn poll_once<F: Future + Unpin>(f: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(f).poll(&mut Context::from_waker(waker))
}
