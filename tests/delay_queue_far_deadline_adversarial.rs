//! `tokio::DelayQueue::deadline` for a never-due entry whose deadline lies past what its
//! 1 ms ticks can reach (README, "One saturation rule"; `deadline`: "the instant asked for,
//! rounded up to the queue's 1 ms resolution"): the shown instant is never before the one
//! asked for, and the entry never expires.
#![cfg(feature = "tokio")]

use std::time::Duration;

use tickwheel::tokio::DelayQueue;
use tokio::time::Instant;

fn last_instant(t0: Instant) -> Instant {
    let (mut lo, mut hi) = (0u64, u64::MAX);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if t0.checked_add(Duration::from_secs(mid)).is_some() {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    t0 + Duration::from_secs(lo)
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "fails: deadline() shows origin + u64::MAX ms (about 585 million years), earlier than the instant asked for"]
async fn a_deadline_past_the_tick_range_is_never_shown_earlier_than_asked() {
    let mut queue = DelayQueue::new();
    let end = last_instant(Instant::now());
    let key = queue.insert_at("never", end);
    let shown = queue.deadline(&key);
    assert!(shown >= end, "shown {shown:?} < asked {end:?}");
}

#[tokio::test(flavor = "current_thread")]
async fn a_deadline_past_the_tick_range_never_expires() {
    let mut queue = DelayQueue::new();
    let end = last_instant(Instant::now());
    queue.insert_at("never", end);
    queue.insert_at("soon", Instant::now() + Duration::from_millis(5));
    let first = std::future::poll_fn(|cx| queue.poll_expired(cx)).await;
    assert_eq!(first.map(|e| e.into_inner()), Some("soon"));
    let next = tokio::time::timeout(
        Duration::from_millis(50),
        std::future::poll_fn(|cx| queue.poll_expired(cx)),
    )
    .await;
    assert!(next.is_err(), "{next:?}");
    assert_eq!(queue.len(), 1);
}
