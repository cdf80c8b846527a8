//! Freezing a queue (`tickwheel::sync`) on edge inputs, one thread at a time: unknown
//! queues, double freezes, imports of duplicate ids and of ids in flight or forwarded,
//! `Instant` extremes, retries earlier than the deadline, and the snapshot conversions at
//! `u64` extremes (feature `serde`). The threaded races are in `freeze_races.rs`.

mod support;

use std::time::{Duration, Instant};

use support::latest_instant;
use tickwheel::sync::{Cancel, FrozenEntry, RescheduleError, Retried, ScheduleError, Scheduler};

fn sched(t0: Instant) -> Scheduler<&'static str, u32, u32> {
    Scheduler::builder().shards(4).origin(t0).build()
}

/// A scheduler of 4 shards whose origin is now, and that origin.
fn started() -> (Instant, Scheduler<&'static str, u32, u32>) {
    let t0 = Instant::now();
    (t0, sched(t0))
}

/// A frozen entry: `id` due at `at` with `value`.
fn entry<K, T>(id: K, at: Instant, value: T) -> FrozenEntry<K, T> {
    FrozenEntry { id, at, value }
}

#[test]
fn freeze_unknown_queue_then_unfreeze_leaves_nothing() {
    let (t0, s) = started();
    let f = s.freeze_queue(&"nobody");
    assert!(f.pending.is_empty() && f.in_flight.is_empty());
    assert!(s.is_frozen(&"nobody"));
    // A frozen queue without members is not a queue: must not show up.
    assert!(s.queues().is_empty(), "queues() lists {:?}", s.queues());
    assert_eq!(s.queue_len(&"nobody"), 0);
    assert_eq!(s.unfreeze_queue(&"nobody"), 0);
    assert!(!s.is_frozen(&"nobody"));
    assert_eq!(
        s.unfreeze_queue(&"nobody"),
        0,
        "unfreeze of an unfrozen queue"
    );
    s.schedule("nobody", 1, t0, 1).unwrap();
}

#[test]
fn double_freeze_reports_in_flight_again_takes_nothing_twice() {
    let (t0, s) = started();
    for id in 0..10 {
        s.schedule("q", id, t0 + Duration::from_millis(u64::from(id)), id)
            .unwrap();
    }
    let mut batch = s.pop_due(t0 + Duration::from_millis(2), 10);
    let d0 = batch.next().unwrap();
    let f1 = s.freeze_queue(&"q");
    assert_eq!(f1.pending.len(), 7);
    assert_eq!(f1.in_flight, [0, 1, 2]);
    let f2 = s.freeze_queue(&"q");
    assert!(f2.pending.is_empty());
    assert_eq!(f2.in_flight, [0, 1, 2]);
    // Dropping the half-taken batch forwards 1 and 2.
    drop(batch);
    let f3 = s.freeze_queue(&"q");
    assert!(f3.pending.is_empty(), "freeze must not take forwarded");
    assert_eq!(f3.in_flight, [0]);
    assert_eq!(s.stats().forwarded, 2);
    assert_eq!(s.queue_in_flight(&"q"), [0]);
    drop(d0);
    assert!(s.queue_in_flight(&"q").is_empty());
    let fwd = s.take_forwarded(&"q");
    assert_eq!(fwd.iter().map(|e| e.id).collect::<Vec<_>>(), [1, 2]);
    // Their deadlines are the originals (not rounded, not changed).
    assert_eq!(fwd[0].at, t0 + Duration::from_millis(1));
    assert!(s.is_empty());
    assert_eq!(s.unfreeze_queue(&"q"), 0);
    assert_eq!(s.unfreeze_queue(&"q"), 0);
}

#[test]
fn frozen_queue_refuses_schedule_import_reschedule_and_pop_delivers_nothing() {
    let (t0, s) = started();
    s.schedule("q", 1, t0, 10).unwrap();
    s.schedule("other", 2, t0, 20).unwrap();
    let due = s.pop_due(t0, 1).next().unwrap();
    assert_eq!(*due.id(), 1);
    s.freeze_queue(&"q");
    assert_eq!(s.schedule("q", 3, t0, 30), Err(ScheduleError::Frozen(30)));
    // schedule of an id in flight into a frozen queue: Frozen (checked first).
    assert_eq!(s.schedule("q", 1, t0, 11), Err(ScheduleError::Frozen(11)));
    // An id pending in another queue, imported into a frozen one: refused, not present.
    let got = s.import("q", vec![entry(2, t0, 21)]);
    assert_eq!(
        (got.imported, got.present.len(), got.refused.len()),
        (0, 0, 1)
    );
    assert_eq!(due.retry_at(t0), Ok(Retried::Forwarded));
    assert_eq!(s.reschedule(&1, t0), Err(RescheduleError::Frozen));
    assert_eq!(
        s.schedule("other", 1, t0, 12),
        Err(ScheduleError::Pending(12))
    );
    let popped: Vec<_> = s
        .pop_due(t0 + Duration::from_secs(1), 100)
        .map(|d| *d.id())
        .collect();
    assert_eq!(popped, [2], "a forwarded timer must never be due");
    assert_eq!(s.cancel(&1), Cancel::Cancelled(10));
    assert!(s.is_empty());
}

#[test]
fn import_duplicate_ids_in_one_call() {
    let (t0, s) = started();
    let e = |id, v| FrozenEntry {
        id,
        at: t0 + Duration::from_millis(5),
        value: v,
    };
    let got = s.import("q", vec![e(1, 1), e(1, 2), e(2, 3), e(1, 4)]);
    assert_eq!(got.imported, 2);
    assert_eq!(got.present, vec![e(1, 2), e(1, 4)]);
    assert_eq!(s.len(), 2);
    let vals: Vec<_> = s
        .pop_due(t0 + Duration::from_secs(1), 10)
        .map(|d| d.into_value())
        .collect();
    assert_eq!(vals, [1, 3], "first of the duplicates wins, in input order");
}

#[test]
fn import_of_an_id_in_flight_or_forwarded_is_present() {
    let (t0, s) = started();
    s.schedule("q", 1, t0, 1).unwrap();
    s.schedule("q", 2, t0, 2).unwrap();
    let mut batch = s.pop_due(t0, 10);
    let d1 = batch.next().unwrap();
    let got = s.import("z", vec![entry(1, t0, 9)]);
    assert_eq!(got.present.len(), 1, "in flight");
    s.freeze_queue(&"q");
    drop(batch); // 2 forwarded
    let got = s.import("z", vec![entry(2, t0, 9)]);
    assert_eq!(got.present.len(), 1, "forwarded");
    drop(d1);
    let got = s.import("z", vec![entry(1, t0, 9)]);
    assert_eq!(got.imported, 1, "delivered: free again");
}

#[test]
fn instant_extremes_do_not_panic_or_drop() {
    let t0 = Instant::now() + Duration::from_secs(1000);
    let s = sched(t0);
    // Far future: the latest Instant the platform holds.
    let far = latest_instant(t0);
    // Before the origin.
    let early = Instant::now()
        .checked_sub(Duration::from_secs(1))
        .unwrap_or_else(Instant::now);
    s.schedule("q", 1, far, 1).unwrap();
    s.schedule("q", 2, early, 2).unwrap();
    let got = s.import("q", vec![entry(3, far, 3), entry(4, early, 4)]);
    assert_eq!(got.imported, 2);
    // pop at the far end: due ones come out, not the saturated ones; nothing panics.
    let popped: Vec<_> = s.pop_due(far, 10).map(|d| *d.id()).collect();
    assert_eq!(popped, [2, 4]);
    let f = s.freeze_queue(&"q");
    assert_eq!(
        f.pending.iter().map(|e| (e.id, e.at)).collect::<Vec<_>>(),
        [(1, far), (3, far)]
    );
    // retry_at with extremes.
    s.unfreeze_queue(&"q");
    s.schedule("q", 5, early, 5).unwrap();
    let due = s.pop_due(t0, 1).next().unwrap();
    assert_eq!(due.retry_at(far), Ok(Retried::Pending));
    let due_none = s.pop_due(far, 10).count();
    assert_eq!(due_none, 0);
    assert_eq!(s.cancel(&5), Cancel::Cancelled(5));
}

#[test]
fn retry_at_earlier_than_original_deadline_is_honoured_but_never_before_it() {
    // retry_at to a time in the past: due now, delivered next pop, not early w.r.t. the
    // new deadline.
    let (t0, s) = started();
    s.schedule("q", 1, t0 + Duration::from_millis(10), 1)
        .unwrap();
    let now = t0 + Duration::from_millis(10);
    let due = s.pop_due(now, 1).next().unwrap();
    assert_eq!(due.retry_at(t0), Ok(Retried::Pending));
    let d = s.pop_due(now, 1).next().unwrap();
    assert_eq!(d.deadline(), t0);
}

// ---------------------------------------------------------------------------------------
// Snapshot conversions (feature serde).

#[cfg(feature = "serde")]
mod snapshots {
    use super::*;
    use tickwheel::sync::snapshot::{
        SNAPSHOT_VERSION, Snapshot, SnapshotError, from_reference, to_reference,
    };

    #[test]
    fn to_reference_extremes() {
        let now = Instant::now();
        assert_eq!(to_reference(now, now, u64::MAX), u64::MAX);
        assert_eq!(to_reference(now, now, 0), 0);
        assert_eq!(
            to_reference(now + Duration::from_nanos(1), now, u64::MAX),
            u64::MAX
        );
        assert_eq!(to_reference(now + Duration::from_nanos(1), now, 0), 2);
        assert_eq!(to_reference(latest_instant(now), now, 0), u64::MAX);
        assert_eq!(
            to_reference(latest_instant(now), now, u64::MAX - 1),
            u64::MAX
        );
        // Never earlier: at least the reference reading.
        let early = now.checked_sub(Duration::from_secs(5)).unwrap_or(now);
        assert_eq!(to_reference(early, now, 7), 7);
    }

    #[test]
    fn from_reference_extremes() {
        let now = Instant::now();
        assert_eq!(from_reference(0, u64::MAX, now), now);
        assert_eq!(from_reference(0, 0, now), now);
        // u64::MAX is the saturated deadline: the latest Instant, whatever the reading.
        let far = from_reference(u64::MAX, 0, now);
        assert!(far >= now + Duration::from_micros(u64::MAX / 2));
        assert_eq!(from_reference(u64::MAX, u64::MAX, now), far);
        assert_eq!(from_reference(u64::MAX, u64::MAX - 1, now), far);
        // ~584 000 years of µs fits in a Duration; whether it fits in an Instant is the
        // platform's call. Either way: no panic, never earlier than now + something large.
        let far2 = from_reference(u64::MAX / 2, 0, now);
        assert!(far2 > now + Duration::from_secs(1_000_000));
    }

    #[test]
    fn round_trip_never_earlier_through_scheduler() {
        let (t0, s) = started();
        let ats = [
            t0,
            t0 + Duration::from_nanos(1),
            t0 + Duration::from_nanos(999),
            t0 + Duration::from_micros(1),
            t0 + Duration::from_secs(3600),
            latest_instant(t0),
        ];
        for (i, &at) in ats.iter().enumerate() {
            s.schedule("q", i as u32, at, i as u32).unwrap();
        }
        let frozen = s.freeze_queue(&"q");
        for reference in [0u64, 1, u64::MAX / 2, u64::MAX - 1, u64::MAX] {
            let local = Instant::now();
            let snap = Snapshot::export("q", frozen.pending.clone(), local, reference);
            let json = serde_json::to_string(&snap).unwrap();
            let back: Snapshot<String, u32, u32> = serde_json::from_str(&json).unwrap();
            assert_eq!(back.version, SNAPSHOT_VERSION);
            let local2 = Instant::now();
            let entries = back.into_entries(reference, local2).unwrap();
            assert_eq!(entries.len(), frozen.pending.len());
            for (a, b) in frozen.pending.iter().zip(&entries) {
                assert_eq!((a.id, a.value), (b.id, b.value));
                if a.at == latest_instant(t0) {
                    continue; // clamped at the latest Instant on both sides
                }
                // Never earlier (left relative to the reading).
                let left_a = a.at.saturating_duration_since(local);
                let left_b = b.at.saturating_duration_since(local2);
                // At u64::MAX the reference saturates: the time left collapses to zero.
                // That makes a future deadline due NOW on the target: earlier.
                assert!(
                    left_b >= left_a,
                    "reference {reference}: id {} left {left_a:?} before, {left_b:?} after",
                    a.id
                );
            }
        }
    }

    #[test]
    fn versions() {
        let now = Instant::now();
        for v in [0u32, 2, u32::MAX] {
            let s: Snapshot<&str, u32, ()> = Snapshot {
                version: v,
                queue: "q",
                entries: vec![],
            };
            assert_eq!(
                s.into_entries(0, now),
                Err(SnapshotError::UnknownVersion(v))
            );
        }
        // Missing version field in JSON: refused by serde, not defaulted.
        let r: Result<Snapshot<String, u32, u32>, _> =
            serde_json::from_str(r#"{"queue":"q","entries":[]}"#);
        assert!(r.is_err());
        // Negative / overflowing deadline_us: serde error, not a wrap.
        let r: Result<Snapshot<String, u32, u32>, _> = serde_json::from_str(
            r#"{"version":1,"queue":"q","entries":[{"id":1,"deadline_us":18446744073709551616,"value":1}]}"#,
        );
        assert!(r.is_err());
    }
}
