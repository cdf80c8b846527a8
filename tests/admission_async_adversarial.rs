//! `AdmissionQueue::acquire_async` with never-due deadlines (README, "One saturation rule":
//! the admission queues are among the layers where such a deadline is never due and nothing
//! panics), at large ticks, just below and above the representable bound, cancelled mid-wait;
//! and the admission errors' messages in the caller's terms.
#![cfg(feature = "tokio")]

mod support;

use std::time::{Duration, Instant};

use tickwheel::admission::{AcquireError, AdmissionQueue, RegisterError};

/// The latest whole second after `t0` that `Instant` can represent.
fn last_instant(t0: Instant) -> Instant {
    t0 + support::last_whole_secs(|d| t0.checked_add(d).is_some())
}

const RESOLUTIONS: [Duration; 5] = [
    Duration::from_nanos(1),
    Duration::from_millis(1),
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(3600),
];

/// Each far deadline waits (no panic) until the request is dropped; the capacity comes back.
#[tokio::test(flavor = "current_thread")]
async fn far_deadlines_wait_without_panicking_and_cancel_cleanly() {
    for resolution in RESOLUTIONS {
        let q = AdmissionQueue::new(1, resolution);
        let held = q
            .acquire_async(1, Instant::now() + Duration::from_secs(5))
            .await;
        let held = held.unwrap_or_else(|e| panic!("{resolution:?}: {e}"));
        let end = last_instant(Instant::now());
        let deadlines = [
            end,
            end - Duration::from_secs(1),
            end - resolution,
            end - resolution * 2,
            Instant::now() + Duration::from_secs(200 * 365 * 24 * 3600),
        ];
        for at in deadlines {
            let waiting = q.acquire_async(1, at);
            let r = tokio::time::timeout(Duration::from_millis(30), waiting).await;
            assert!(r.is_err(), "{resolution:?}, {at:?}: resolved early: {r:?}");
            assert_eq!(
                q.waiting(),
                0,
                "{resolution:?}: a dropped request left a ticket"
            );
            assert_eq!(q.available(), 0, "{resolution:?}");
        }
        // A far request granted when the capacity comes back, while it waits.
        let waiting = q.acquire_async(1, end);
        drop(held);
        let permit = tokio::time::timeout(Duration::from_secs(5), waiting).await;
        let permit = match permit {
            Ok(Ok(p)) => p,
            other => panic!("{resolution:?}: {other:?}"),
        };
        assert_eq!(permit.amount(), 1);
        drop(permit);
        assert_eq!(q.available(), 1, "{resolution:?}");
    }
}

/// Cancelled through `cancel` mid-wait with a never-due deadline: resolves `Cancelled`.
#[tokio::test(flavor = "current_thread")]
async fn a_never_due_request_cancelled_mid_wait_resolves_cancelled() {
    let q = AdmissionQueue::new(1, Duration::from_secs(1));
    let held = q
        .acquire(1, Instant::now() + Duration::from_secs(5))
        .unwrap();
    let end = last_instant(Instant::now());
    let waiter = q.register(1, end).unwrap();
    let ticket = waiter.ticket();
    let task = tokio::task::spawn_blocking(move || waiter.wait());
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(q.cancel(ticket));
    let r = tokio::time::timeout(Duration::from_secs(5), task).await;
    assert!(matches!(r, Ok(Ok(Err(AcquireError::Cancelled)))), "{r:?}");
    drop(held);
    assert_eq!(q.available(), 1);
}

/// A passed deadline is reported in `Instant`s, and its message speaks of time, not ticks.
#[test]
fn a_passed_deadline_is_reported_in_instants() {
    let q = AdmissionQueue::new(1, Duration::from_millis(1));
    let _held = q
        .acquire(1, Instant::now() + Duration::from_secs(5))
        .unwrap();
    let past = Instant::now() - Duration::from_secs(3);
    let before = Instant::now();
    let err = match q.register(1, past) {
        Err(e) => e,
        Ok(_) => panic!("a passed deadline was registered"),
    };
    let after = Instant::now();
    match err {
        RegisterError::DeadlinePassedAt { deadline, now } => {
            assert_eq!(deadline, past);
            assert!(
                now >= before && now <= after,
                "now: when it was found passed"
            );
        }
        e => panic!("{e:?}"),
    }
    let text = err.to_string();
    assert!(!text.contains("tick"), "{text}");
    assert!(text.contains("ago"), "{text}");
    let debug = format!("{err:?}");
    assert!(debug.contains("DeadlinePassedAt"), "{debug}");
    let acq = AcquireError::Refused(err).to_string();
    assert!(acq.starts_with("refused: "), "{acq}");
}

/// `AdmissionQueue::register`: a deadline rounds up to a tick boundary, so one still ahead
/// is never refused, even with 1 h ticks and a deadline 1 ms ahead; one whose tick has
/// begun is.
#[test]
fn a_deadline_still_ahead_is_accepted_and_a_passed_one_refused() {
    let before = Instant::now();
    let q = AdmissionQueue::new(1, Duration::from_secs(3600));
    let _held = q
        .acquire(1, Instant::now() + Duration::from_secs(5))
        .unwrap();
    let soon = Instant::now() + Duration::from_millis(1);
    let waiter = q
        .register(1, soon)
        .expect("a deadline still ahead is accepted");
    assert!(waiter.try_take().is_none(), "capacity is held");
    // At or before the queue's origin: its tick (0) has begun.
    let r = q.register(1, before);
    assert!(
        matches!(r, Err(RegisterError::DeadlinePassedAt { .. })),
        "{:?}",
        r.map(|w| w.ticket())
    );
}
