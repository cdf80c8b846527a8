//! `acquire_async` with feature `tokio`: grants in FIFO order, expiry by the task itself,
//! and cancellation safety — a future dropped while waiting or after being granted leaves
//! no capacity behind; a never-due deadline waits without a panic; a passed deadline is
//! reported in instants.
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

/// A never-due deadline (what a saturating `now + Duration::MAX` gives: the end of
/// `Instant`'s range) with ticks of a second: the task waits without panicking inside
/// tokio's timer, and is still granted when capacity comes back.
#[tokio::test]
async fn a_never_due_deadline_waits_without_panicking() {
    for resolution in [Duration::from_millis(500), Duration::from_secs(1)] {
        let q = AdmissionQueue::new(1, resolution);
        let end_of_time = q.clock().instant_saturating(u64::MAX);
        let held = q.acquire_async(1, far()).await.unwrap();
        let mut never = Box::pin(q.acquire_async(1, end_of_time));
        let waited = tokio::time::timeout(Duration::from_millis(50), never.as_mut()).await;
        assert!(waited.is_err(), "{resolution:?}: still waiting");
        drop(held);
        let granted = tokio::time::timeout(Duration::from_secs(10), never).await;
        let amount = granted.ok().and_then(|r| r.ok()).map(|p| p.amount());
        assert_eq!(
            amount,
            Some(1),
            "{resolution:?}: granted once capacity came back"
        );
    }
}

/// A passed deadline is reported in the instants the caller gave, not in internal ticks:
/// the data holds the deadline as given, and the message says how long ago it passed.
#[test]
fn a_passed_deadline_is_reported_in_instants() {
    let q = AdmissionQueue::new(1, Duration::from_millis(10));
    let _held = q.acquire(1, far()).unwrap();
    let deadline = Instant::now();
    std::thread::sleep(Duration::from_millis(30));
    match q.acquire(1, deadline) {
        Err(AcquireError::Refused(RegisterError::DeadlinePassedAt { deadline: d, now })) => {
            assert_eq!(d, deadline);
            assert!(now.duration_since(d) >= Duration::from_millis(30));
            let text = RegisterError::DeadlinePassedAt { deadline: d, now }.to_string();
            assert!(text.contains("ago") && !text.contains("tick"), "{text}");
        }
        other => panic!("expected DeadlinePassedAt, got {other:?}"),
    }
}
