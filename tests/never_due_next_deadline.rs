//! `next_deadline` of `TimerWheel` and `Scheduler` leaves *never due* timers out (README,
//! "One saturation rule"): a deadline whose tick saturates at `u64::MAX` gives no instant,
//! also when the instant its wheel slot cascades at is representable (1 ns and 600 years,
//! 1 ms and 600 million years), and `None` when nothing else is pending.

use std::time::{Duration, Instant};

use tickwheel::TimerWheel;
use tickwheel::sync::Scheduler;

const YEAR: u64 = 365 * 24 * 3600;

/// `origin + years`, or `None` where `Instant` cannot hold it (then the case is not testable
/// on this platform: such a deadline has no instant to give).
fn years_after(origin: Instant, years: u64) -> Option<Instant> {
    origin.checked_add(Duration::from_secs(years * YEAR))
}

/// (resolution, years): deadlines past `u64::MAX` ticks, so never due.
const CASES: [(Duration, u64); 2] = [
    (Duration::from_nanos(1), 600),
    (Duration::from_millis(1), 600_000_000),
];

/// Each case as (resolution, years, origin now, its never-due deadline), those this
/// platform's `Instant` can hold.
fn cases() -> impl Iterator<Item = (Duration, u64, Instant, Instant)> {
    CASES.into_iter().filter_map(|(resolution, years)| {
        let t0 = Instant::now();
        years_after(t0, years).map(|far| (resolution, years, t0, far))
    })
}

#[test]
fn timer_wheel_leaves_a_never_due_timer_out_of_next_deadline() {
    for (resolution, years, t0, far) in cases() {
        let mut wheel = TimerWheel::with_origin(t0, resolution);
        let never = wheel.insert_at(far, "never");
        assert_eq!(wheel.deadline(never), None, "{resolution:?}: never due");
        assert_eq!(wheel.next_deadline(), None, "{resolution:?}, {years} years");
        // A due timer sets the answer (never later than its deadline: earlier when its slot
        // cascades first); the never-due one still does not.
        let soon = t0 + Duration::from_secs(5);
        wheel.insert_at(soon, "soon");
        let answer = wheel.next_deadline();
        assert!(
            answer.is_some_and(|at| at <= soon),
            "{resolution:?}: {answer:?}"
        );
        assert!(wheel.poll(soon).is_some());
        assert_eq!(
            wheel.next_deadline(),
            None,
            "{resolution:?}: only the never-due one"
        );
        assert_eq!(wheel.len(), 1);
    }
}

/// A timer in the same top-level slot as the never-due one, but due (550 years at 1 ns, below
/// `u64::MAX` ticks), still sets the answer: only never-due timers are left out.
#[test]
fn timer_wheel_answers_for_a_due_timer_sharing_the_never_due_slot() {
    let t0 = Instant::now();
    let (Some(far), Some(late)) = (years_after(t0, 600), years_after(t0, 550)) else {
        return;
    };
    let mut wheel = TimerWheel::with_origin(t0, Duration::from_nanos(1));
    wheel.insert_at(far, "never");
    let key = wheel.insert_at(late, "late");
    assert!(wheel.deadline(key).is_some(), "550 years at 1 ns is a tick");
    let answer = wheel.next_deadline();
    assert!(
        answer.is_some_and(|at| at <= late),
        "never later than the due timer: {answer:?}"
    );
}

#[test]
fn scheduler_leaves_a_never_due_timer_out_of_next_deadline() {
    for (resolution, years, t0, far) in cases() {
        let sched: Scheduler<&'static str, u32, ()> = Scheduler::builder()
            .shards(2)
            .resolution(resolution)
            .origin(t0)
            .build();
        if let Err(e) = sched.schedule("q", 1, far, ()) {
            panic!("schedule: {e}");
        }
        assert_eq!(sched.next_deadline(), None, "{resolution:?}, {years} years");
        let soon = t0 + Duration::from_secs(5);
        if let Err(e) = sched.schedule("q", 2, soon, ()) {
            panic!("schedule: {e}");
        }
        let answer = sched.next_deadline();
        assert!(
            answer.is_some_and(|at| at <= soon),
            "{resolution:?}: {answer:?}"
        );
        assert_eq!(sched.pop_due(soon, 10).count(), 1);
        assert_eq!(
            sched.next_deadline(),
            None,
            "{resolution:?}: only the never-due one"
        );
        assert_eq!(sched.len(), 1);
    }
}
