//! `tokio::DelayQueue::deadline` for a never-due entry whose deadline lies past what its
//! 1 ms ticks can reach (README, "One saturation rule"; `deadline`: a deadline past the last
//! tick shows the instant that last tick begins at): the entry never expires, and the shown
//! instant is that far one, never a near one.
#![cfg(feature = "tokio")]

mod support;

use std::time::Duration;

use tickwheel::tokio::DelayQueue;
use tokio::time::Instant;

/// The latest whole second after `t0` that `Instant` can represent.
fn last_instant(t0: Instant) -> Instant {
    t0 + support::last_whole_secs(|d| t0.checked_add(d).is_some())
}

#[tokio::test(flavor = "current_thread")]
async fn a_deadline_past_the_tick_range_shows_the_last_tick() {
    let t0 = Instant::now();
    let mut queue = DelayQueue::new();
    let end = last_instant(t0);
    let key = queue.insert_at("never", end);
    let shown = queue.deadline(&key);
    // The last tick begins u64::MAX ms after the origin, which is at or after t0.
    let last_tick = t0 + Duration::from_millis(u64::MAX);
    assert!(
        shown >= last_tick,
        "shown {shown:?} before the last tick {last_tick:?}"
    );
    assert!(
        shown <= end,
        "shown {shown:?} after the instant asked for {end:?}"
    );
    let near = queue.insert_at("near", t0 + Duration::from_secs(3600));
    assert!(queue.deadline(&near) < shown);
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
