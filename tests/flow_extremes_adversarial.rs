//! Adversarial checks of per-queue flow control at the edges: saturated rate arithmetic,
//! rate changes after a burst, retries and put-backs under holds and limits, freeze and
//! import of held or limited queues, a release of many parked timers. Time is simulated:
//! every `now` is an explicit `Instant`.

use std::time::{Duration, Instant};

use tickwheel::sync::{FrozenEntry, RateLimit, Retried};

mod support;

use support::flow::{
    every, expect_pops, fill, fill_with, held, limited, ms, rated, sched, take_batch,
};

const YEAR: Duration = Duration::from_secs(86_400 * 365);

/// A burst of 3 per 300 years: three at once, then nothing for centuries. The tolerance
/// `interval × (burst − 1)` is over `u64::MAX` ns and saturates; a saturated tolerance
/// must still refuse the fourth.
#[test]
fn burst_with_a_saturated_tolerance_still_limits() {
    let t0 = Instant::now();
    let s = rated(2, t0, every(YEAR * 300, 3), 10);
    let out = s.pop_due(t0, 100).count();
    assert_eq!(out, 3, "burst of 3, then one per 300 years");
}

/// The same with `Duration::MAX` as the period and a burst of 2.
#[test]
fn duration_max_period_with_a_burst_still_limits() {
    let t0 = Instant::now();
    let s = rated(1, t0, every(Duration::MAX, 2), 10);
    assert_eq!(s.pop_due(t0, 100).count(), 2);
}

/// Below saturation the burst is exact: interval a century, burst 5 (tolerance 400 years,
/// under the 584 of `u64::MAX` ns).
#[test]
fn a_long_period_below_saturation_limits_to_its_burst() {
    let t0 = Instant::now();
    let s = rated(2, t0, every(YEAR * 100, 5), 10);
    assert_eq!(s.pop_due(t0, 100).count(), 5);
    assert_eq!(s.pop_due(t0 + YEAR * 99, 100).count(), 0);
    assert_eq!(s.pop_due(t0 + YEAR * 100, 100).count(), 1);
    assert_eq!(s.len(), 4);
}

/// Documented on `set_rate`: a change is "as if its last hand-out had been made under it
/// (the next one is permitted one new interval, less the new burst's tolerance, after it:
/// sooner for a raised rate, later for a lowered one)". After a burst of 10 at 1/s, the
/// old rate permits the next at 1 s; raised a thousandfold (same burst), the next must
/// not be later than that.
#[test]
fn raising_the_rate_after_a_burst_is_never_later() {
    let t0 = Instant::now();
    let s = rated(2, t0, RateLimit::per_second(1).with_burst(10), 20);
    assert_eq!(s.pop_due(t0, 100).count(), 10, "the burst");
    assert_eq!(s.pop_due(t0 + ms(999), 100).count(), 0);
    // Unchanged, the old rate hands one out at 1 s; the raised one must not be later.
    s.set_rate(&1, Some(RateLimit::per_second(1000).with_burst(10)));
    let at_1s = s.pop_due(t0 + ms(1000), 100).count();
    assert!(
        at_1s >= 1,
        "raised rate: nothing at 1 s; next_deadline {:?}",
        s.next_deadline().map(|d| d - t0)
    );
}

/// The same burst with the rate left alone: one at 1 s (pins the baseline of the test
/// above).
#[test]
fn the_old_rate_after_a_burst_permits_one_a_second() {
    let t0 = Instant::now();
    let s = rated(2, t0, RateLimit::per_second(1).with_burst(10), 20);
    assert_eq!(s.pop_due(t0, 100).count(), 10);
    assert_eq!(s.pop_due(t0 + ms(999), 100).count(), 0);
    assert_eq!(s.pop_due(t0 + ms(1000), 100).count(), 1);
    assert_eq!(s.pop_due(t0 + ms(2000), 100).count(), 1);
}

/// Setting the very same rate again must change nothing (an idempotent operator command).
#[test]
fn setting_the_same_rate_again_changes_nothing() {
    let t0 = Instant::now();
    let s = sched(2, t0);
    let limit = RateLimit::per_second(1).with_burst(10);
    s.set_rate(&1, Some(limit));
    fill(&s, 1, 20, t0);
    assert_eq!(s.pop_due(t0, 100).count(), 10);
    s.set_rate(&1, Some(limit));
    s.set_rate(&1, Some(limit));
    assert_eq!(s.pop_due(t0 + ms(999), 100).count(), 0);
    assert_eq!(
        s.pop_due(t0 + ms(1000), 100).count(),
        1,
        "next_deadline {:?}",
        s.next_deadline().map(|d| d - t0)
    );
}

/// A `Due` retried while its queue is held goes back pending and is not handed out until
/// the release; its slot is given back.
#[test]
fn a_retry_into_a_held_limited_queue_stays_held_and_frees_its_slot() {
    let t0 = Instant::now();
    let s = limited(4, t0, 1, 3);
    let due = s.pop_due(t0, 10).next().expect("one in flight");
    assert_eq!(s.queue_counts(&1).in_flight, 1);
    assert!(s.hold_queue(&1));
    assert_eq!(due.retry_at(t0), Ok(Retried::Pending));
    let c = s.queue_counts(&1);
    assert_eq!((c.pending, c.in_flight), (3, 0));
    assert_eq!(s.pop_due(t0 + ms(5), 10).count(), 0, "held");
    assert_eq!(s.pop_due_queue(&1, t0 + ms(5), 10).count(), 0, "held");
    assert_eq!(s.release_queue(&1), 3);
    let first = take_batch(
        &s,
        t0 + ms(5),
        10,
        1,
        "the slot came back: one, not none or two",
    );
    drop(first);
    expect_pops(&s, t0, &[(5, 1), (5, 1)]);
    assert_eq!(s.len(), 0);
}

/// A batch dropped untaken under a concurrency limit puts its timers back and gives their
/// slots back; nothing is lost or handed out twice.
#[test]
fn a_batch_dropped_untaken_gives_its_slots_back() {
    let t0 = Instant::now();
    let s = limited(3, t0, 2, 6);
    let mut batch = s.pop_due(t0, 10);
    assert_eq!(batch.len(), 2);
    let first = batch.next().expect("one");
    drop(batch); // the second put back
    assert_eq!(s.queue_counts(&1).in_flight, 1);
    let again: Vec<u64> = s.pop_due(t0, 10).map(|d| *d.id()).collect();
    assert_eq!(again.len(), 1, "one slot free: {again:?}");
    assert!(!again.contains(first.id()));
    drop(first);
    let mut seen = Vec::new();
    for _ in 0..10 {
        seen.extend(s.pop_due(t0, 10).map(|d| *d.id()));
    }
    seen.extend(again);
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), 5, "{seen:?}");
    assert_eq!(s.len(), 0);
}

/// A frozen held queue: the freeze takes the parked timers too (in custody, not lost),
/// and an import into a held queue of another scheduler hands nothing out until the
/// release, then everything in deadline order.
#[test]
fn freeze_of_a_held_queue_and_import_into_a_held_queue() {
    let t0 = Instant::now();
    let a = sched(4, t0);
    let b = sched(3, t0);
    a.hold_queue(&1);
    for id in 0..50u64 {
        a.schedule(1, id, t0 + ms(50 - id), id).unwrap();
    }
    assert_eq!(a.pop_due(t0 + ms(100), 100).count(), 0);
    assert_eq!(a.queue_counts(&1).parked, 50);
    let frozen = a.freeze_queue(&1);
    let entries: Vec<FrozenEntry<u64, u64>> = frozen.pending;
    assert!(frozen.in_flight.is_empty());
    assert_eq!(entries.len(), 50);
    assert_eq!(a.len(), 0);
    assert_eq!(a.queue_counts(&1).parked, 0);
    b.hold_queue(&1);
    assert_eq!(b.import(1u8, entries).imported, 50);
    assert_eq!(b.pop_due(t0 + ms(100), 100).count(), 0, "held on import");
    assert_eq!(b.pop_due_queue(&1, t0 + ms(100), 100).count(), 0);
    assert_eq!(b.release_queue(&1), 50);
    let ids: Vec<u64> = b.pop_due(t0 + ms(100), 100).map(|d| *d.id()).collect();
    let want: Vec<u64> = (0..50).rev().collect();
    assert_eq!(ids, want);
}

/// A `Due` of a limited queue outliving its scheduler (every handle and batch dropped):
/// retrying it is refused, nothing panics.
#[test]
fn a_limited_due_outliving_its_scheduler() {
    let t0 = Instant::now();
    let s = sched(2, t0);
    s.set_concurrency(&1, Some(1));
    s.set_rate(&1, Some(RateLimit::per_second(1)));
    s.schedule(1, 1, t0, 1).unwrap();
    s.schedule(1, 2, t0, 2).unwrap();
    let mut batch = s.pop_due(t0, 10);
    let due = batch.next().expect("one");
    drop(s);
    drop(batch); // the last handle: puts the second back into a scheduler now gone
    assert!(due.retry_at(t0).is_err());
}

/// `pop_due` with a `now` far in the future, then at the present: the far `now` spends
/// the rate's allowance at that instant only; it must not hand out more than the burst
/// in total, and a lift frees the rest.
#[test]
fn rate_with_now_going_backwards_hands_out_no_extra() {
    let t0 = Instant::now();
    let s = rated(2, t0, RateLimit::per_second(1).with_burst(2), 10);
    assert_eq!(s.pop_due(t0 + YEAR, 100).count(), 2);
    assert_eq!(s.pop_due(t0, 100).count(), 0, "now went backwards");
    assert_eq!(s.pop_due(t0 + ms(500), 100).count(), 0);
    s.set_rate(&1, None);
    assert_eq!(s.pop_due(t0 + ms(500), 100).count(), 8);
}

/// Concurrency `Some(0)` then a rate, then both lifted: everything comes out once.
#[test]
fn zero_concurrency_with_a_rate_then_lifted() {
    let t0 = Instant::now();
    let s = sched(2, t0);
    s.set_concurrency(&1, Some(0));
    s.set_rate(
        &1,
        Some(RateLimit::per_second(u32::MAX).with_burst(u32::MAX)),
    );
    fill(&s, 1, 10, t0);
    assert_eq!(s.pop_due(t0, 100).count(), 0);
    assert_eq!(s.pop_due_queue(&1, t0, 100).count(), 0);
    assert!(
        !s.queue_counts(&1).throttled,
        "the concurrency holds it, not the rate"
    );
    s.set_concurrency(&1, None);
    assert_eq!(s.pop_due(t0, 100).count(), 10);
    assert_eq!(s.len(), 0);
}

/// A release of 200 000 parked timers on 4 shards: every one comes out once, in order.
#[test]
fn release_of_many_parked_timers_hands_each_out_once_in_order() {
    let t0 = Instant::now();
    let s = held(4, t0);
    let n = 200_000u64;
    fill_with(&s, 1, n, |id| t0 + ms(n - id));
    let later = t0 + ms(n + 1);
    assert_eq!(s.pop_due(later, usize::MAX).count(), 0);
    assert_eq!(s.queue_counts(&1).parked, n as usize);
    assert_eq!(s.release_queue(&1), n as usize);
    let mut last = None;
    let mut count = 0u64;
    for d in s.pop_due(later, usize::MAX) {
        if let Some(prev) = last {
            assert!(*d.id() < prev, "order: {} after {prev}", d.id());
        }
        last = Some(*d.id());
        count += 1;
    }
    assert_eq!(count, n);
    assert_eq!(s.len(), 0);
}

/// A queue name never seen: every flow call answers, none panics, and nothing changes for
/// other queues.
#[test]
fn flow_calls_on_a_queue_never_seen() {
    let t0 = Instant::now();
    let s = sched(2, t0);
    s.schedule(2, 1, t0, 1).unwrap();
    assert_eq!(s.release_queue(&9), 0);
    assert!(!s.is_held(&9));
    s.set_concurrency(&9, None);
    s.set_rate(&9, None);
    assert_eq!(s.concurrency(&9), None);
    assert_eq!(s.rate(&9), None);
    assert_eq!(s.flush_queue(&9, t0), 0);
    assert_eq!(s.pop_due_queue(&9, t0, 10).count(), 0);
    assert_eq!(s.queue_counts(&9), Default::default());
    assert_eq!(s.pop_due(t0, 10).count(), 1);
}

/// `rate()` reads back the burst that was set, whatever the interval.
#[test]
fn rate_reads_back_the_burst_set() {
    let s = sched(1, Instant::now());
    for (per, burst) in [(YEAR * 300, 3), (Duration::MAX, 2)] {
        let limit = RateLimit {
            count: 1,
            per,
            burst,
        };
        s.set_rate(&1, Some(limit));
        assert_eq!(s.rate(&1), Some((limit.interval(), u64::from(burst))));
    }
}

/// Below saturation, `rate()` reads back exactly what was set.
#[test]
fn rate_reads_back_unsaturated_limits() {
    let s = sched(1, Instant::now());
    for (count, per, burst) in [
        (1, YEAR * 100, 5),
        (7, Duration::from_secs(1), u32::MAX),
        (u32::MAX, Duration::from_nanos(1), u32::MAX),
        (3, Duration::from_millis(10), 1),
    ] {
        let limit = RateLimit { count, per, burst };
        s.set_rate(&1, Some(limit));
        assert_eq!(s.rate(&1), Some((limit.interval(), u64::from(burst))));
    }
}

/// Documented on `set_rate`: "Never more than the new rate allows after the change", and
/// a lowered rate makes the next hand-out "later". After a full burst of 10 at 1/s,
/// lowering the rate to one per 10 s (same burst) must not permit a second burst at the
/// same instant: 18 hand-outs at once under a limit whose burst is 10.
#[test]
fn lowering_the_rate_after_a_burst_permits_no_second_burst() {
    let t0 = Instant::now();
    let s = rated(2, t0, RateLimit::per_second(1).with_burst(10), 30);
    assert_eq!(s.pop_due(t0, 100).count(), 10, "the burst");
    assert_eq!(s.pop_due(t0, 100).count(), 0, "spent");
    let slower = every(Duration::from_secs(10), 10);
    s.set_rate(&1, Some(slower));
    assert_eq!(
        s.pop_due(t0, 100).count(),
        0,
        "a slower rate hands out more than the faster one did"
    );
}

/// docs/design.md's "Whole range": any `u64` deadline is accepted. At 1 ms a tick, 600
/// years is ≈ 2^54 ticks, well inside that range, yet past where a rate clock of `u64`
/// nanoseconds would saturate (584 years): the rate limit must still limit there.
#[test]
fn a_rate_limit_still_limits_after_six_centuries() {
    let t0 = Instant::now();
    let s = sched(2, t0);
    let Some(far) = t0.checked_add(YEAR * 600) else {
        return; // this platform's Instant cannot be that far
    };
    s.set_rate(&1, Some(RateLimit::per_second(1)));
    fill(&s, 1, 10, far);
    assert_eq!(s.pop_due(far, 100).count(), 1);
}

/// The same 500 years on (under the saturation): still limited.
#[test]
fn a_rate_limit_still_limits_after_five_centuries() {
    let t0 = Instant::now();
    let s = sched(2, t0);
    let Some(far) = t0.checked_add(YEAR * 500) else {
        return;
    };
    s.set_rate(&1, Some(RateLimit::per_second(1)));
    fill(&s, 1, 10, far);
    assert_eq!(s.pop_due(far, 100).count(), 1);
    assert_eq!(s.pop_due(far + ms(999), 100).count(), 0);
    assert_eq!(s.pop_due(far + ms(1000), 100).count(), 1);
}

/// `QueueCounts::throttled` is documented "Whether the queue waits for its rate limit:
/// its next hand-out is not permitted yet and its parked timers wait for that instant".
/// Once the rate is lifted and every member handed out, the queue waits for nothing.
#[test]
fn throttled_clears_when_the_rate_is_lifted() {
    let t0 = Instant::now();
    let s = rated(2, t0, every(Duration::from_secs(3600), 1), 3);
    assert_eq!(s.pop_due(t0, 10).count(), 1);
    assert!(s.queue_counts(&1).throttled);
    s.set_rate(&1, None);
    assert_eq!(
        s.pop_due(t0 + ms(1), 10).count(),
        2,
        "lifted: the rest at once"
    );
    assert_eq!(s.len(), 0);
    let c = s.queue_counts(&1);
    assert!(!c.throttled, "{c:?}");
}

/// `next_deadline` after the lift: nothing is pending, so nothing to wake for.
#[test]
fn next_deadline_forgets_a_lifted_rates_wake_up() {
    let t0 = Instant::now();
    let s = rated(2, t0, every(Duration::from_secs(3600), 1), 3);
    assert_eq!(s.pop_due(t0, 10).count(), 1);
    s.set_rate(&1, None);
    assert_eq!(s.pop_due(t0 + ms(1), 10).count(), 2);
    assert_eq!(s.next_deadline(), None);
}
