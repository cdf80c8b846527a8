//! The saturation rule (README, "One saturation rule") at its edges: resolutions of 1 ns,
//! 1 ms, 1 s and 1 h; deadlines at the end of `Instant`'s range and just inside it; never-due
//! timers mixed with due ones, across shards, after polls and cascades. `next_deadline`
//! leaves a never-due timer out (`None` when nothing else is pending) and is never later than
//! the earliest due deadline.

use std::time::{Duration, Instant};

use tickwheel::TimerWheel;
use tickwheel::sync::Scheduler;

const RESOLUTIONS: [Duration; 4] = [
    Duration::from_nanos(1),
    Duration::from_millis(1),
    Duration::from_secs(1),
    Duration::from_secs(3600),
];

/// The last instant `Instant` can represent after `t0` (binary search on `checked_add`).
fn last_instant(t0: Instant) -> Instant {
    let (mut lo, mut hi) = (0u128, u128::from(u64::MAX) * 1_000_000_000);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if add_nanos(t0, mid).is_some() {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    add_nanos(t0, lo).unwrap_or(t0)
}

fn add_nanos(t: Instant, nanos: u128) -> Option<Instant> {
    let secs = u64::try_from(nanos / 1_000_000_000).ok()?;
    let sub = u32::try_from(nanos % 1_000_000_000).ok()?;
    t.checked_add(Duration::new(secs, sub))
}

/// Whether `at` is never due on a clock of `resolution` from `origin`, from the rule's own
/// words: its tick (rounded up) is `u64::MAX` or more, or begins past `Instant`'s end.
fn never_due(origin: Instant, resolution: Duration, at: Instant) -> bool {
    let nanos = at.saturating_duration_since(origin).as_nanos();
    let tick = nanos.div_ceil(resolution.as_nanos());
    tick >= u128::from(u64::MAX) || add_nanos(origin, tick * resolution.as_nanos()).is_none()
}

#[test]
fn the_last_instant_is_never_due_or_answered_at_every_resolution() {
    let t0 = Instant::now();
    let end = last_instant(t0);
    for resolution in RESOLUTIONS {
        for back in [
            Duration::ZERO,
            Duration::from_nanos(1),
            resolution,
            resolution * 2,
        ] {
            let Some(at) = end.checked_sub(back) else {
                continue;
            };
            let never = never_due(t0, resolution, at);
            let mut wheel = TimerWheel::with_origin(t0, resolution);
            let key = wheel.insert_at(at, ());
            assert_eq!(
                wheel.deadline(key).is_none(),
                never,
                "{resolution:?}, end - {back:?}"
            );
            let answer = wheel.next_deadline();
            if never {
                assert_eq!(answer, None, "{resolution:?}, end - {back:?}");
            } else {
                assert!(
                    answer.is_some_and(|a| a <= wheel.deadline(key).unwrap_or(a)),
                    "{resolution:?}, end - {back:?}: {answer:?}"
                );
            }
            // Polling at the end of time fires only a due timer, never a never-due one.
            let fired = wheel.poll(end).is_some();
            assert_eq!(fired, !never, "{resolution:?}, end - {back:?}");
        }
    }
}

/// At 1 ns, tick `u64::MAX - 1` is a due tick and `u64::MAX` is never due.
#[test]
fn one_nanosecond_ticks_just_below_and_at_the_bound() {
    let t0 = Instant::now();
    let res = Duration::from_nanos(1);
    let (Some(below), Some(at)) = (
        add_nanos(t0, u128::from(u64::MAX - 1)),
        add_nanos(t0, u128::from(u64::MAX)),
    ) else {
        return; // `Instant` cannot hold 584 years here: nothing to test.
    };
    let mut wheel = TimerWheel::with_origin(t0, res);
    let never = wheel.insert_at(at, "never");
    assert_eq!(wheel.deadline(never), None);
    assert_eq!(wheel.next_deadline(), None);
    let due = wheel.insert_at(below, "due");
    assert_eq!(wheel.deadline(due), Some(below));
    let answer = wheel.next_deadline();
    assert!(answer.is_some_and(|a| a <= below), "{answer:?}");
    assert_eq!(wheel.poll(below).map(|e| e.value), Some("due"));
    assert_eq!(wheel.next_deadline(), None);
    assert!(
        wheel.poll(last_instant(t0)).is_none(),
        "never due never fires"
    );
}

/// Never-due timers in one slot with due ones and on other levels, walked through with polls
/// that cascade: every answer is `Some` and not later than the earliest due deadline while
/// a due timer is pending, then `None`.
#[test]
fn mixed_never_due_and_due_timers_through_cascades() {
    for resolution in RESOLUTIONS {
        let t0 = Instant::now();
        let end = last_instant(t0);
        let mut wheel = TimerWheel::with_origin(t0, resolution);
        for i in 0..5u64 {
            wheel.insert_at(end, i);
        }
        let mut due = Vec::new();
        for ticks in [1u32, 63, 64, 65, 4095, 4097, 300_000] {
            let at = t0 + resolution * ticks;
            if never_due(t0, resolution, at) {
                continue;
            }
            wheel.insert_at(at, 100);
            due.push(at);
        }
        due.sort();
        let mut fired = 0;
        for (i, &at) in due.iter().enumerate() {
            let answer = wheel.next_deadline();
            assert!(
                answer.is_some_and(|a| a <= at),
                "{resolution:?}: before #{i} at {at:?}: {answer:?}"
            );
            // Step to the answer, as a poller would, until the timer fires.
            let mut steps = 0;
            loop {
                let next = wheel.next_deadline().unwrap_or(at);
                let mut got = false;
                while let Some(e) = wheel.poll(next.min(at)) {
                    assert_eq!(e.value, 100, "{resolution:?}: a never-due timer fired");
                    fired += 1;
                    got = true;
                }
                if got {
                    break;
                }
                steps += 1;
                assert!(steps < 64, "{resolution:?}: no progress towards {at:?}");
            }
        }
        assert_eq!(fired, due.len());
        assert_eq!(
            wheel.next_deadline(),
            None,
            "{resolution:?}: only never-due left"
        );
        assert_eq!(wheel.len(), 5);
    }
}

/// Many shards, never-due timers in each, one due timer in one of them.
#[test]
fn scheduler_with_many_shards_leaves_never_due_timers_out() {
    for resolution in RESOLUTIONS {
        let t0 = Instant::now();
        let end = last_instant(t0);
        let sched: Scheduler<&'static str, u64, ()> = Scheduler::builder()
            .origin(t0)
            .resolution(resolution)
            .shards(64)
            .build();
        for id in 0..500 {
            sched.schedule("never", id, end, ()).unwrap();
        }
        assert_eq!(sched.next_deadline(), None, "{resolution:?}");
        let at = t0 + resolution * 70;
        sched.schedule("due", 10_000, at, ()).unwrap();
        let answer = sched.next_deadline();
        assert!(
            answer.is_some_and(|a| a <= at),
            "{resolution:?}: {answer:?}"
        );
        let mut popped = 0;
        for _ in 0..64 {
            let now = sched.next_deadline().unwrap_or(at).min(at);
            // Each `Due` taken and dropped ends as delivered.
            popped += sched.pop_due(now, 1000).count();
            if popped > 0 {
                break;
            }
        }
        assert_eq!(popped, 1, "{resolution:?}");
        assert_eq!(sched.next_deadline(), None, "{resolution:?}");
        assert_eq!(sched.pop_due(end, 1000).count(), 0, "{resolution:?}");
        assert_eq!(sched.len(), 500);
    }
}
