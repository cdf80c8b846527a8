//! The one saturation rule, layer by layer (README, "One saturation rule"): the tick layers
//! take ticks as given; the layers with a clock file a deadline past the range at the
//! never-due tick `u64::MAX`, never fire it, leave it out of `next_deadline`, and refuse a
//! resolution whose first tick `Instant` cannot represent.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use tickwheel::sync::{BuildError, Scheduler};
use tickwheel::{IndexedWheel, Wheel};

#[test]
fn the_tick_layers_take_u64_max_as_an_ordinary_tick() {
    let mut wheel = Wheel::new();
    let key = wheel.insert(u64::MAX, "last");
    assert!(wheel.poll(u64::MAX - 1).is_none());
    assert_eq!(wheel.poll(u64::MAX).map(|e| e.key), Some(key));

    let mut indexed = IndexedWheel::new();
    indexed.insert("id", u64::MAX, "last");
    assert_eq!(indexed.deadline(&"id"), Some(u64::MAX));
    assert_eq!(indexed.poll(u64::MAX - 1), None);
    assert_eq!(indexed.poll(u64::MAX), Some(("id", "last")));
}

/// An instant `years` after `from`, if `Instant` reaches it.
fn years_after(from: Instant, years: u64) -> Option<Instant> {
    from.checked_add(Duration::from_secs(years.checked_mul(365 * 86_400)?))
}

#[test]
fn the_scheduler_never_pops_a_saturated_deadline_and_leaves_it_out() {
    let t0 = Instant::now();
    let sched: Scheduler<&str, u32, ()> = Scheduler::builder()
        .origin(t0)
        .resolution(Duration::from_nanos(3))
        .shards(1)
        .build();
    let Some(far) = years_after(t0, 100_000) else {
        return; // `Instant` ends before: nothing to check on this platform.
    };
    sched.schedule("q", 1, far, ()).expect("scheduled");
    assert_eq!(sched.lookup(&1).map(|i| i.deadline), Some(far), "as given");
    for now in [far, years_after(t0, 1_755).unwrap_or(far)] {
        assert_eq!(sched.pop_due(now, 10).count(), 0, "popped at {now:?}");
    }
    // Once the polls have cascaded it to its own tick, `next_deadline` says "never" (before,
    // it may name a lower bound at which nothing pops).
    assert_eq!(sched.next_deadline(), None, "no timer will ever be due");
    assert_eq!(sched.len(), 1);
    sched
        .schedule("q", 2, t0 + Duration::from_millis(5), ())
        .expect("scheduled");
    let next = sched.next_deadline().expect("a timer that will be due");
    assert!(next <= t0 + Duration::from_millis(5) + Duration::from_nanos(3));
    let popped: Vec<u32> = sched.pop_due(far, 10).map(|d| *d.id()).collect();
    assert_eq!(popped, [2]);
}

#[test]
fn an_unrepresentable_resolution_is_refused_everywhere() {
    let r = Scheduler::<u8, u8, ()>::builder()
        .resolution(Duration::MAX)
        .try_build();
    assert_eq!(r.err(), Some(BuildError::Resolution(Duration::MAX)));
    let message = BuildError::Resolution(Duration::MAX).to_string();
    assert!(message.contains("representable"), "{message}");
    assert!(tickwheel::clock::TickClock::try_new(Instant::now(), Duration::MAX).is_none());
    let panicked = std::panic::catch_unwind(|| tickwheel::TimerWheel::<()>::new(Duration::MAX));
    assert!(panicked.is_err());
}

proptest! {
    /// Scheduler: whatever the resolution and deadline, a timer is popped at the instant
    /// `next_deadline` names (once nothing earlier is pending) or that instant is `None` and
    /// no `now` ever pops it.
    #[test]
    fn scheduler_next_deadline_and_pop_due_agree(
        res_nanos in prop_oneof![1u64..10, 1_000_000u64..2_000_000, any::<u64>()],
        years in prop_oneof![0u64..10, 500u64..2_000, 100_000u64..1_000_000],
        nanos in any::<u32>(),
    ) {
        let t0 = Instant::now();
        let res = Duration::from_nanos(res_nanos.max(1));
        let Ok(sched) = Scheduler::<u8, u8, ()>::builder().origin(t0).resolution(res).shards(1).try_build()
        else {
            return Ok(());
        };
        let Some(at) = years_after(t0, years).and_then(|t| t.checked_add(Duration::from_nanos(u64::from(nanos))))
        else {
            return Ok(());
        };
        sched.schedule(0, 1, at, ()).expect("scheduled");
        // `next_deadline` is a lower bound: follow it until it fires the timer or says never.
        let mut steps = 0;
        loop {
            steps += 1;
            prop_assert!(steps < 64, "next_deadline did not converge");
            match sched.next_deadline() {
                Some(next) => {
                    if sched.pop_due(next, 1).count() == 1 {
                        prop_assert!(next >= at, "popped at {:?}, before {:?}", next, at);
                        break;
                    }
                }
                None => {
                    prop_assert_eq!(sched.len(), 1);
                    for now in [Some(at), years_after(at, 1_000)] {
                        let Some(now) = now else { continue };
                        prop_assert_eq!(sched.pop_due(now, 1).count(), 0);
                    }
                    break;
                }
            }
        }
    }
}

#[cfg(feature = "tokio")]
#[tokio::test(start_paused = true)]
async fn the_delay_queue_never_yields_a_saturated_entry() {
    use futures_util::StreamExt;
    use tickwheel::tokio::DelayQueue;

    let mut q = DelayQueue::new();
    let never = q.insert("never", Duration::MAX);
    let soon = q.insert("soon", Duration::from_secs(1));
    assert!(q.deadline(&never) > q.deadline(&soon));
    assert_eq!(q.next().await.map(|e| e.into_inner()), Some("soon"));
    let three_years = Duration::from_secs(3 * 365 * 86_400);
    assert!(
        tokio::time::timeout(three_years, q.next()).await.is_err(),
        "the never-due entry came out"
    );
    assert_eq!(q.len(), 1);
    assert_eq!(q.remove(&never).into_inner(), "never");
}
