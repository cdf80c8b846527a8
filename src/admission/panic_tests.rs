//! Wakers that panic where the public API cannot reach, or the result cannot be seen from
//! it: a cancelled request's waker (a task's waker is recorded only by `acquire_async`,
//! whose ticket is not public), and a replaced waker dropped by a poll that must spawn the
//! queue's driver.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

use super::AdmissionQueue;
use super::shared::Polled;
use crate::test_tasks::{PanicsOnDrop, counting, idle_runtime, panics};

#[test]
fn a_cancelled_waker_that_panics_leaves_the_cancels_grants_woken() {
    let q = AdmissionQueue::new(10, Duration::from_millis(1));
    let far = Instant::now() + Duration::from_secs(3600);
    let four = q.acquire(4, far).unwrap();
    let head = q.register(8, far).unwrap(); // waits: 6 left
    let behind = q.register(6, far).unwrap(); // fits, but waits behind the head (strict)
    assert!(matches!(head.poll_take(&panics()), Polled::Pending(None)));
    let (counts, waker) = counting();
    assert!(matches!(behind.poll_take(&waker), Polled::Pending(None)));
    let cancelled = catch_unwind(AssertUnwindSafe(|| q.cancel(head.ticket())));
    assert!(cancelled.is_err(), "the waker's panic reaches the caller");
    assert_eq!(
        counts.0.load(Ordering::SeqCst),
        1,
        "the grant's waker woken"
    );
    assert!(matches!(behind.poll_take(&waker), Polled::Ready(Ok(p)) if p.amount() == 6));
    drop((head, behind, four));
    assert_eq!((q.available(), q.held(), q.waiting()), (10, 0, 0));
}

/// The driver's runtime shut down; the next poll, with another waker, must spawn a new
/// driver. The waker it replaces panics when dropped: the driver is spawned all the same.
#[test]
fn a_replaced_waker_that_panics_when_dropped_still_leaves_a_driver() {
    let q = AdmissionQueue::new(1, Duration::from_millis(1));
    let far = Instant::now() + Duration::from_secs(3600);
    let held = q.acquire(1, far).unwrap();
    let mut fut = q.acquire_async(1, far);
    let first = Waker::from(Arc::new(PanicsOnDrop));
    {
        let rt = idle_runtime();
        let _guard = rt.enter();
        let polled = std::pin::Pin::new(&mut fut).poll(&mut Context::from_waker(&first));
        assert!(polled.is_pending());
    } // the runtime and its driver end here
    drop(first); // the recorded clone is the last handle now
    assert_eq!(q.driver().spawned.load(Ordering::Relaxed), 1);
    let rt = idle_runtime();
    let _guard = rt.enter();
    let polled = catch_unwind(AssertUnwindSafe(|| {
        let (_, second) = counting();
        let _ = std::pin::Pin::new(&mut fut).poll(&mut Context::from_waker(&second));
    }));
    assert!(
        polled.is_err(),
        "the replaced waker's panic reaches the poller"
    );
    assert_eq!(
        q.driver().spawned.load(Ordering::Relaxed),
        2,
        "no driver was spawned on the live runtime"
    );
    drop((fut, held));
    assert_eq!((q.available(), q.held(), q.waiting()), (1, 0, 0));
}
