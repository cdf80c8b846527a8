//! Adversarial checks of the per-queue rate limit (`set_rate`, `rate`, `RateLimit`) against its
//! documented behaviour, through `pop_due`, `pop_due_queue`, `queue_counts` and the async
//! stream. Time is simulated: every `now` is an explicit `Instant` (the stream's is tokio's
//! paused clock).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use tickwheel::sync::RateLimit;

mod support;

use support::flow::{Sched, every, expect_pops, fill, fill_with, ms, rated, sched};

/// Rate limit with a simulated clock: no window of the period sees more hand-outs than the
/// GCRA allows, none is lost, and `next_deadline` names an instant at which one is permitted.
#[test]
fn rate_limit_by_simulated_clock() {
    for shards in [1, 2, 64] {
        let t0 = Instant::now();
        let s = sched(shards, t0);
        let limit = RateLimit::per_second(10).with_burst(3);
        s.set_rate(&1, Some(limit));
        let n = 60u64;
        fill_with(&s, 1, n, |id| t0 + ms(id * 7));
        let mut times: Vec<Duration> = Vec::new();
        let mut seen = HashSet::new();
        let mut now = t0;
        let mut steps = 0;
        loop {
            steps += 1;
            assert!(
                steps < 100_000,
                "shards {shards}: throttled timers lost: {}",
                seen.len()
            );
            for d in s.pop_due(now, 7) {
                assert!(seen.insert(*d.id()));
                assert!(d.deadline() <= now);
                times.push(now - t0);
            }
            if seen.len() as u64 == n {
                break;
            }
            // Jump to what the scheduler says is next (the permitted instant), or step.
            match s.next_deadline() {
                Some(next) if next > now => {
                    // Nothing is handed out before it.
                    if next - now > Duration::from_nanos(1) {
                        assert_eq!(
                            s.pop_due(next - Duration::from_nanos(1), 100).len(),
                            0,
                            "shards {shards}: hand-out before next_deadline"
                        );
                    }
                    now = next;
                }
                Some(_) => {}
                None => panic!(
                    "shards {shards}: {} left but no next_deadline",
                    n - seen.len() as u64
                ),
            }
        }
        // In any window of one second: at most burst + count hand-outs (GCRA bound:
        // burst - 1 + ceil(window / interval)), checked as at most 3 + 10.
        for (i, &a) in times.iter().enumerate() {
            let in_window = times[i..]
                .iter()
                .take_while(|&&b| b < a + Duration::from_secs(1))
                .count();
            assert!(
                in_window <= 12,
                "shards {shards}: {in_window} in one second from {a:?}"
            );
        }
        // Sustained: the last hand-out is no earlier than (n - burst) intervals.
        assert!(*times.last().unwrap() >= ms(100) * (n as u32 - 3));
        assert_eq!((s.len(), s.in_flight_len()), (0, 0));
    }
}

/// Drives `pop_due` by `next_deadline` (a simulated clock) until `want` came out or
/// `steps` polls passed; returns how many came out.
fn drive(s: &Sched, t0: Instant, steps: usize) -> (usize, Vec<Instant>) {
    let mut now = t0;
    let mut out = 0;
    let mut stuck = Vec::new();
    for _ in 0..steps {
        let got = s.pop_due(now, 100).count();
        out += got;
        match s.next_deadline() {
            None => break,
            Some(next) if next > now => now = next,
            Some(next) => {
                if got == 0 {
                    // Due by next_deadline, yet nothing came out.
                    stuck.push(next);
                }
            }
        }
    }
    (out, stuck)
}

#[test]
fn rate_limit_edge_values_do_not_panic() {
    let t0 = Instant::now();
    let cases = [
        RateLimit {
            count: 0,
            per: Duration::from_secs(1),
            burst: 0,
        },
        RateLimit {
            count: u32::MAX,
            per: Duration::ZERO,
            burst: u32::MAX,
        },
        RateLimit {
            count: u32::MAX,
            per: Duration::from_nanos(1),
            burst: 1,
        },
        RateLimit::per_second(u32::MAX).with_burst(u32::MAX),
        every(Duration::from_secs(86_400 * 365 * 100), 2),
    ];
    for (i, limit) in cases.into_iter().enumerate() {
        let s = rated(2, t0, limit, 5);
        let _ = s.queue_counts(&1);
        let _ = s.rate(&1);
        let (out, stuck) = drive(&s, t0, 50);
        assert!(
            stuck.len() < 3,
            "case {i}: next_deadline due but nothing handed out: {stuck:?}"
        );
        assert_eq!(out, 5, "case {i}");
        assert_eq!(s.len(), 0, "case {i}");
    }
}

/// One hand-out per `Duration::MAX`: the next permitted instant cannot be represented.
/// No panic; the rest stay pending and come out once the rate is lifted.
#[test]
fn rate_limit_with_duration_max_period() {
    let t0 = Instant::now();
    let s = rated(2, t0, every(Duration::MAX, 1), 5);
    assert_eq!(s.pop_due(t0, 100).count(), 1);
    let year = Duration::from_secs(86_400 * 365);
    // The interval saturates (documented: `interval_nanos` saturates at u64::MAX ns, about
    // 584 years); nothing more within a century, and next_deadline says so.
    assert_eq!(s.pop_due(t0 + year * 100, 100).count(), 0);
    if let Some(next) = s.next_deadline() {
        assert!(
            next >= t0 + year * 500,
            "next_deadline {:?} after t0",
            next - t0
        );
    }
    assert_eq!(s.len(), 4);
    assert_eq!(s.queue_counts(&1).pending, 4);
    s.set_rate(&1, None);
    let late = t0 + Duration::from_secs(3600);
    assert_eq!(
        s.pop_due(late, 100).count(),
        4,
        "lifting the rate frees them"
    );
}

#[cfg(feature = "tokio")]
mod stream {
    use std::sync::Arc;

    use futures_util::StreamExt;
    use tickwheel::sync::{RateLimit, Scheduler};
    use tokio::time::{Duration, Instant};

    /// The async stream hands out nothing of a held queue, wakes for a release, and
    /// sleeps until a throttle wake-up rather than polling (paused clock: time jumps to
    /// the next timer; a missed wake-up shows as a hand-out at the far marker).
    #[tokio::test(start_paused = true)]
    async fn due_stream_respects_hold_and_rate() {
        let t0 = Instant::now().into_std();
        let s: Arc<Scheduler<u8, u64, u64>> = Arc::new(Scheduler::builder().origin(t0).build());
        s.hold_queue(&1);
        s.set_rate(&2, Some(RateLimit::per_second(10)));
        for id in 0..5 {
            s.schedule(1, id, t0, id).unwrap();
            s.schedule(2, 10 + id, t0, id).unwrap();
        }
        // A far marker: if a wake-up is missed, the next hand-out is at 1 h.
        s.schedule(3, 99, t0 + std::time::Duration::from_secs(3600), 0)
            .unwrap();
        let mut stream = s.due_stream();
        let mut got = Vec::new();
        for _ in 0..5 {
            let due = stream.next().await.unwrap();
            got.push((*due.queue(), *due.id(), Instant::now().into_std() - t0));
        }
        for (k, (q, id, at)) in got.iter().enumerate() {
            assert_eq!((*q, *id), (2, 10 + k as u64), "{got:?}");
            assert!(*at >= Duration::from_millis(100) * k as u32, "{got:?}");
            assert!(
                *at < Duration::from_millis(100) * k as u32 + Duration::from_millis(20),
                "no poll wait: {got:?}"
            );
        }
        let s2 = Arc::clone(&s);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(10)).await;
            s2.release_queue(&1);
        });
        let mut ones = Vec::new();
        for _ in 0..5 {
            let due = stream.next().await.unwrap();
            assert_eq!(*due.queue(), 1, "held queue before its release");
            ones.push(*due.id());
            let at = Instant::now().into_std() - t0;
            assert!(
                at >= Duration::from_secs(10) && at < Duration::from_secs(11),
                "{at:?}"
            );
        }
        assert_eq!(ones, [0, 1, 2, 3, 4]);
    }
}

/// Documented: "Changes take effect at once": a raised rate frees a throttled queue at
/// the new rate, not at the old rate's next permitted instant.
#[test]
fn raising_the_rate_takes_effect_at_once() {
    let t0 = Instant::now();
    let s = rated(2, t0, every(Duration::from_secs(3600), 1), 4);
    assert_eq!(s.pop_due(t0, 10).count(), 1);
    s.set_rate(&1, Some(RateLimit::per_second(1000).with_burst(10)));
    // Documented: changes take effect at once. Within a second at the
    // new rate, the remaining three must be permitted, not wait out the hour.
    let late = s.next_deadline();
    let out = s.pop_due(t0 + Duration::from_secs(1), 10).count();
    assert_eq!(
        out,
        3,
        "still throttled by the old rate; next_deadline {:?}",
        late.map(|l| l - t0)
    );
}

/// A raised rate counts the last hand-out as made under it: no more than the new rate's
/// allowance (interval 100 ms, burst 2) from there, whatever the old rate was.
#[test]
fn a_raised_rate_hands_out_no_more_than_its_allowance() {
    let t0 = Instant::now();
    let s = sched(2, t0);
    let hourly = every(Duration::from_secs(3600), 1);
    s.set_rate(&1, Some(hourly));
    fill(&s, 1, 6, t0);
    assert_eq!(s.pop_due(t0, 10).count(), 1);
    s.set_rate(&1, Some(RateLimit::per_second(10).with_burst(2)));
    assert_eq!(
        s.pop_due(t0, 10).count(),
        1,
        "the burst's second, with the first"
    );
    assert_eq!(s.pop_due(t0 + ms(99), 10).count(), 0);
    assert!(s.queue_counts(&1).throttled);
    assert_eq!(s.next_deadline(), Some(t0 + ms(100)));
    assert_eq!(s.pop_due(t0 + ms(100), 10).count(), 1);
}

/// A lowered rate applies to the next hand-out at once; a lift then a new limit counts
/// from the last hand-out under the earlier one.
#[test]
fn lowering_the_rate_takes_effect_at_once() {
    let t0 = Instant::now();
    let s = rated(2, t0, RateLimit::per_second(1000), 4);
    assert_eq!(s.pop_due(t0, 10).count(), 1);
    s.set_rate(&1, Some(RateLimit::per_second(1)));
    assert_eq!(
        s.pop_due(t0 + ms(2), 10).count(),
        0,
        "the old rate's next instant"
    );
    assert_eq!(s.next_deadline(), Some(t0 + ms(1000)));
    assert_eq!(s.pop_due(t0 + ms(1000), 10).count(), 1);
    s.set_rate(&1, None);
    s.set_rate(&1, Some(RateLimit::per_second(1000)));
    assert_eq!(
        s.pop_due(t0 + ms(1000), 10).count(),
        0,
        "1 ms after the last"
    );
    expect_pops(&s, t0, &[(1001, 1), (1001, 0), (1002, 1)]);
    assert_eq!(s.len(), 0);
}

#[test]
fn counts_of_unknown_queue_and_rate_through_pop_due_queue() {
    let t0 = Instant::now();
    let s = sched(4, t0);
    let c = s.queue_counts(&42);
    assert_eq!(
        (c.pending, c.in_flight, c.parked, c.held, c.throttled),
        (0, 0, 0, false, false)
    );
    s.set_rate(&1, Some(RateLimit::per_second(10)));
    s.set_rate(&2, Some(RateLimit::per_second(4)));
    for id in 0..3 {
        s.schedule(1, id, t0, id).unwrap();
        s.schedule(2, 10 + id, t0, id).unwrap();
    }
    assert_eq!(
        s.pop_due_queue(&1, t0, 10).count(),
        1,
        "rate applies to pop_due_queue"
    );
    assert_eq!(s.pop_due_queue(&2, t0, 10).count(), 1);
    // (pop_due_queue leaves the refused ones due, see below; a pop_due parks them.)
    assert_eq!(s.pop_due(t0, 10).count(), 0);
    // The earliest permitted instant of the two throttled queues.
    assert_eq!(s.next_deadline(), Some(t0 + ms(100)));
    assert_eq!(
        s.pop_due(t0 + ms(100), 10)
            .map(|d| *d.id())
            .collect::<Vec<_>>(),
        [1]
    );
    assert_eq!(
        s.pop_due(t0 + ms(250), 10)
            .map(|d| *d.id())
            .collect::<Vec<_>>(),
        [11, 2],
        "schedule order at one deadline"
    );
    // Far future flush and release of an empty held queue: no panic, counts hold.
    s.hold_queue(&3);
    assert_eq!(
        s.flush_queue(&3, t0 + Duration::from_secs(86_400 * 365 * 50)),
        0
    );
    assert_eq!(s.release_queue(&3), 0);
    s.schedule(1, 100, t0 + Duration::from_secs(86_400 * 365 * 30), 0)
        .unwrap();
    assert_eq!(
        s.flush_queue(&1, t0 + Duration::from_secs(86_400 * 365 * 50)),
        0,
        "already due then"
    );
    assert_eq!(s.flush_queue(&1, t0 + Duration::from_secs(1)), 1);
    assert_eq!(
        s.pop_due(t0 + Duration::from_secs(1), 10)
            .map(|d| *d.id())
            .collect::<Vec<_>>(),
        [12, 100]
    );
}

/// `pop_due_queue`: "a member refused is parked, as by `pop_due`"; `set_rate`: the queue
/// gets a wake-up at the permitted instant and `queue_counts` shows `throttled`.
#[test]
fn pop_due_queue_parks_a_throttled_member() {
    let t0 = Instant::now();
    let s = rated(4, t0, RateLimit::per_second(10), 3);
    assert_eq!(s.pop_due_queue(&1, t0, 10).count(), 1);
    let c = s.queue_counts(&1);
    assert_eq!((c.parked, c.throttled), (2, true));
    assert_eq!(s.next_deadline(), Some(t0 + ms(100)));
}
