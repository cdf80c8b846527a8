//! `acquire_async` with feature `tokio`: grants in FIFO order, expiry by the task itself,
//! and cancellation safety — a future dropped while waiting or after being granted leaves
//! no capacity behind.
#![cfg(feature = "tokio")]

use std::future::Future;
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

use tickwheel::admission::{AcquireError, AdmissionQueue, RegisterError};

fn far() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

#[tokio::test]
async fn grants_in_order_and_expires() {
    let q = AdmissionQueue::new(10, Duration::from_millis(1));
    let held = q.acquire_async(10, far()).await.unwrap();
    let first = q.acquire_async(6, far());
    let second = q.acquire_async(4, far());
    let late = q.acquire_async(1, Instant::now() + Duration::from_millis(10));
    assert_eq!(late.await.unwrap_err(), AcquireError::Expired);
    drop(held);
    let (a, b) = (first.await.unwrap(), second.await.unwrap());
    assert_eq!((a.amount(), b.amount(), q.available()), (6, 4, 0));
    assert_eq!(
        q.acquire_async(11, far()).await.unwrap_err(),
        AcquireError::Refused(RegisterError::TooLarge {
            amount: 11,
            limit: 10
        })
    );
}

#[tokio::test]
async fn a_dropped_future_leaves_nothing_behind() {
    let q = AdmissionQueue::new(4, Duration::from_millis(1));
    let held = q.acquire_async(4, far()).await.unwrap();
    // Dropped while waiting: cancelled.
    let waiting = q.acquire_async(2, far());
    assert!(
        tokio::time::timeout(Duration::from_millis(5), waiting)
            .await
            .is_err()
    );
    assert_eq!(q.waiting(), 0);
    // Polled once, granted afterwards, dropped before it was polled again: given back.
    let mut granted = Box::pin(q.acquire_async(3, far()));
    let mut cx = Context::from_waker(Waker::noop());
    assert!(granted.as_mut().poll(&mut cx).is_pending());
    drop(held);
    assert_eq!(q.available(), 1, "granted to the pending future");
    drop(granted);
    assert_eq!((q.available(), q.held(), q.waiting()), (4, 0, 0));
}
