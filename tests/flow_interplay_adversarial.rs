//! Adversarial sequences of flow control with the scheduler's other operations: a throttle
//! wake-up or a freed slot meeting a hold, reschedules, drains, cancels and retries of
//! parked and in-flight timers, frozen queues. Each ends by counting every timer once.
//! Time is simulated: every `now` is an explicit `Instant`.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use tickwheel::sync::{Cancel, RateLimit, Retried, Scheduler};

mod support;

use support::flow::{
    Sched, at_limit, every, expect_pops, fill, held, limited, ms, rated, sched, take_batch,
};

/// Pops at `now` until nothing comes out, finishing each; the ids handed out.
fn pop_all(s: &Sched, now: Instant) -> Vec<u64> {
    let mut out = Vec::new();
    loop {
        let batch: Vec<u64> = s.pop_due(now, usize::MAX).map(|d| *d.id()).collect();
        if batch.is_empty() {
            return out;
        }
        out.extend(batch);
    }
}

/// Pops one batch of up to `limit` at `now`, holding all of it at once, and asserts it has
/// `first` timers; drops it, then asserts that [`pop_all`] hands out `rest` more and the
/// scheduler is left empty.
#[track_caller]
fn batch_then_rest(s: &Sched, now: Instant, limit: usize, first: usize, rest: usize, why: &str) {
    let batch = take_batch(s, now, limit, first, why);
    drop(batch);
    assert_eq!(pop_all(s, now).len(), rest);
    assert_eq!(s.len(), 0);
}

/// A throttle wake-up that comes due while the queue is held hands out nothing.
#[test]
fn a_throttle_wake_up_during_a_hold_hands_out_nothing() {
    let t0 = Instant::now();
    let s = rated(4, t0, RateLimit::per_second(1), 3);
    assert_eq!(s.pop_due(t0, 10).count(), 1);
    assert!(s.queue_counts(&1).throttled);
    s.hold_queue(&1);
    assert_eq!(
        s.pop_due(t0 + ms(1000), 10).count(),
        0,
        "held at the wake-up"
    );
    assert_eq!(s.pop_due(t0 + ms(5000), 10).count(), 0);
    assert_eq!(s.pop_due_queue(&1, t0 + ms(5000), 10).count(), 0);
    assert_eq!(s.queue_counts(&1).pending, 2);
    assert_eq!(s.release_queue(&1), 2);
    // Released at 5 s: the rate's next hand-out was permitted from 1 s, one now, the
    // other a second later.
    expect_pops(&s, t0, &[(5000, 1), (5999, 0), (6000, 1)]);
    assert_eq!(s.len(), 0);
}

/// A slot freed while the queue is held (a `Due` dropped after the hold) hands out
/// nothing; the release hands out one per free slot.
#[test]
fn a_freed_slot_during_a_hold_hands_out_nothing() {
    let t0 = Instant::now();
    let (s, first) = at_limit(3, t0, 1, 4);
    s.hold_queue(&1);
    drop(first);
    assert_eq!(s.pop_due(t0, 10).count(), 0, "held");
    assert_eq!(s.pop_due(t0 + ms(10), 10).count(), 0, "held");
    assert_eq!(s.queue_counts(&1).in_flight, 0);
    assert_eq!(s.release_queue(&1), 3);
    batch_then_rest(&s, t0 + ms(10), 10, 1, 2, "one slot");
}

/// A parked timer rescheduled into the future leaves the parked count, and comes out at its
/// new deadline once released, not before.
#[test]
fn a_parked_timer_rescheduled_waits_for_its_new_deadline() {
    let t0 = Instant::now();
    let s = held(2, t0);
    fill(&s, 1, 3, t0);
    assert_eq!(s.pop_due(t0, 10).count(), 0);
    assert_eq!(s.queue_counts(&1).parked, 3);
    s.reschedule(&1, t0 + ms(100)).unwrap();
    let c = s.queue_counts(&1);
    assert_eq!((c.pending, c.parked), (3, 2));
    assert_eq!(s.release_queue(&1), 2);
    let early: HashSet<u64> = pop_all(&s, t0 + ms(99)).into_iter().collect();
    assert_eq!(early, HashSet::from([0, 2]));
    assert_eq!(pop_all(&s, t0 + ms(100)), [1]);
    assert_eq!(s.len(), 0);
}

/// A drain of a limited queue with parked members takes them; the queue then keeps its
/// limit for new members and no stale parked count wakes anything.
#[test]
fn a_drain_of_parked_members_leaves_the_limit_working() {
    let t0 = Instant::now();
    let (s, held) = at_limit(4, t0, 2, 10);
    assert_eq!(s.queue_counts(&1).parked, 8);
    let drained = s.drain_queue(&1);
    assert_eq!(drained.cancelled.len(), 8);
    assert_eq!(drained.in_flight.len(), 2);
    let c = s.queue_counts(&1);
    assert_eq!((c.pending, c.parked, c.in_flight), (0, 0, 2));
    for id in 10..15 {
        s.schedule(1, id, t0, id).unwrap();
    }
    assert_eq!(s.pop_due(t0, 100).count(), 0, "two still in flight");
    drop(held);
    batch_then_rest(&s, t0, 100, 2, 3, "the limit of two");
}

/// Cancelling a parked member works like any pending one; cancelling an in-flight one
/// reports it in flight and its slot stays taken until its `Due` ends.
#[test]
fn cancel_of_parked_and_in_flight_members_under_a_limit() {
    let t0 = Instant::now();
    let s = limited(2, t0, 1, 3);
    let due = s.pop_due(t0, 10).next().expect("one");
    let out = *due.id();
    assert!(matches!(s.cancel(&out), Cancel::InFlight));
    let parked: Vec<u64> = (0..3).filter(|&i| i != out).collect();
    assert!(matches!(s.cancel(&parked[0]), Cancel::Cancelled(v) if v == parked[0]));
    assert_eq!(s.queue_counts(&1).parked, 1);
    assert_eq!(s.pop_due(t0, 10).count(), 0, "the slot is still taken");
    drop(due);
    assert_eq!(pop_all(&s, t0), [parked[1]]);
    assert_eq!(s.len(), 0);
}

/// A retry of a limited queue's `Due` into a frozen queue is forwarded and gives its slot
/// back; after `take_forwarded` and an unfreeze, new members use the full limit.
#[test]
fn a_retry_into_a_frozen_limited_queue_gives_its_slot_back() {
    let t0 = Instant::now();
    let s = limited(3, t0, 1, 3);
    let due = s.pop_due(t0, 10).next().expect("one");
    let frozen = s.freeze_queue(&1);
    assert_eq!(
        frozen.pending.len(),
        2,
        "parked ones are pending: frozen away"
    );
    assert_eq!(frozen.in_flight.len(), 1);
    assert_eq!(due.retry_at(t0), Ok(Retried::Forwarded));
    let forwarded = s.take_forwarded(&1);
    assert_eq!(forwarded.len(), 1);
    assert_eq!(s.queue_counts(&1), Default::default());
    assert_eq!(s.unfreeze_queue(&1), 0);
    assert_eq!(s.import(1u8, frozen.pending).imported, 2);
    assert_eq!(s.import(1u8, forwarded).imported, 1);
    batch_then_rest(&s, t0, 10, 1, 2, "the slot came back");
}

/// A lowered concurrency limit under many in flight hands out nothing until the queue is
/// under it, then one per slot.
#[test]
fn a_lowered_limit_waits_until_the_queue_is_under_it() {
    let t0 = Instant::now();
    let (s, mut flying) = at_limit(4, t0, 5, 10);
    s.set_concurrency(&1, Some(2));
    for expect_none in [true, true, true, false] {
        flying.pop();
        let n = s.pop_due(t0, 100).count();
        if expect_none {
            assert_eq!(n, 0, "{} in flight, limit 2", flying.len());
        } else {
            // 1 in flight (the batch above was dropped at once): one slot.
            assert_eq!(n, 1);
        }
    }
    drop(flying);
    assert_eq!(pop_all(&s, t0).len(), 4);
    assert_eq!(s.len(), 0);
}

/// A flush of a throttled queue moves its future members to now; they still come out at
/// the rate, not at once.
#[test]
fn a_flush_of_a_throttled_queue_keeps_the_rate() {
    let t0 = Instant::now();
    let s = sched(2, t0);
    s.set_rate(&1, Some(RateLimit::per_second(10)));
    fill(&s, 1, 5, t0 + Duration::from_secs(3600));
    assert_eq!(s.flush_queue(&1, t0), 5);
    expect_pops(&s, t0, &[(0, 1), (99, 0), (100, 1)]);
    assert_eq!(s.len(), 3);
}

/// A freeze and unfreeze of a held queue keeps the hold: imported members are parked until
/// the release.
#[test]
fn a_hold_outlives_a_freeze_and_unfreeze() {
    let t0 = Instant::now();
    let s = held(4, t0);
    fill(&s, 1, 5, t0);
    let frozen = s.freeze_queue(&1);
    assert!(s.is_held(&1));
    assert_eq!(s.unfreeze_queue(&1), 0);
    assert_eq!(s.import(1u8, frozen.pending).imported, 5);
    assert!(s.is_held(&1));
    assert_eq!(s.pop_due(t0 + ms(5), 10).count(), 0);
    assert_eq!(s.release_queue(&1), 5);
    assert_eq!(pop_all(&s, t0 + ms(5)).len(), 5);
}

/// Threads race: pollers pop and hand each `Due` to finishers that drop or retry it on
/// other threads, while an operator toggles the hold and moves the concurrency limit
/// between 1 and 3 and the rate between none and a generous one. At no instant are more
/// than 3 in flight (counted by the finishers), and once everything is lifted every timer
/// comes out exactly once.
#[test]
fn racing_holds_limits_and_finishers_keep_exactly_once() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Mutex, mpsc};

    let t0 = Instant::now();
    let s = &sched(8, t0);
    let n = 3000u64;
    s.set_concurrency(&1, Some(3));
    fill(s, 1, n, t0);
    let in_flight = &AtomicUsize::new(0);
    let most = &AtomicUsize::new(0);
    let stop = &AtomicBool::new(false);
    let seen = &Mutex::new(Vec::new());
    let (tx, rx) = mpsc::channel::<tickwheel::sync::Due<u8, u64, u64>>();
    let rx = &Mutex::new(rx);
    std::thread::scope(|threads| {
        for p in 0..2u64 {
            let tx = tx.clone();
            threads.spawn(move || {
                let mut step = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    step += 1;
                    let now = t0 + ms(step * 2 + p);
                    for due in s.pop_due(now, 4) {
                        let n = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(n, Ordering::SeqCst);
                        if tx.send(due).is_err() {
                            return;
                        }
                    }
                    std::thread::yield_now();
                }
            });
        }
        drop(tx);
        for f in 0..2u64 {
            threads.spawn(move || {
                let mut k = f;
                loop {
                    let due = match rx.lock().map(|r| r.recv()) {
                        Ok(Ok(due)) => due,
                        _ => return,
                    };
                    k += 1;
                    // Counted out before the slot is given back.
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    if k % 7 == 0 {
                        let _ = due.retry_at(t0);
                    } else {
                        seen.lock().expect("seen").push(*due.id());
                        drop(due);
                    }
                }
            });
        }
        threads.spawn(move || {
            for i in 0..400u32 {
                match i % 6 {
                    0 => {
                        s.hold_queue(&1);
                    }
                    1 => {
                        s.release_queue(&1);
                    }
                    2 => s.set_concurrency(&1, Some(1)),
                    3 => s.set_concurrency(&1, Some(3)),
                    4 => s.set_rate(&1, Some(RateLimit::per_second(100_000).with_burst(50))),
                    _ => s.set_rate(&1, None),
                }
                std::thread::yield_now();
            }
            s.release_queue(&1);
            s.set_rate(&1, None);
            // Keep the limit of 3 to the end: it is what the count checks.
            s.set_concurrency(&1, Some(3));
            let until = Instant::now() + Duration::from_secs(15);
            while s.len() + s.in_flight_len() > 0 && Instant::now() < until {
                std::thread::sleep(ms(1));
            }
            stop.store(true, Ordering::SeqCst);
        });
    });
    let mut seen = seen.lock().expect("seen").clone();
    seen.sort_unstable();
    let len = seen.len();
    seen.dedup();
    assert_eq!(seen.len(), len, "a timer delivered twice");
    assert_eq!(len as u64, n, "timers lost: {} left pending", s.len());
    assert!(
        most.load(Ordering::SeqCst) <= 3,
        "{} in flight",
        most.load(Ordering::SeqCst)
    );
}

/// A flush whose `now` is earlier than the `now` that parked the queue's members: the
/// parked members' deadlines are after the flush's tick, yet they are parked, not in the
/// wheel. Each must still come out exactly once after the release.
#[test]
fn a_flush_at_an_earlier_now_than_the_parking_pop() {
    let t0 = Instant::now();
    for shards in [1, 4] {
        let s = held(shards, t0);
        s.set_concurrency(&2, Some(1));
        for id in 0..4 {
            s.schedule(1, id, t0 + ms(10 + id), id).unwrap();
            s.schedule(2, 100 + id, t0 + ms(10 + id), id).unwrap();
        }
        let flying = take_batch(&s, t0 + ms(50), 100, 1, "one of queue 2");
        assert_eq!(s.queue_counts(&1).parked, 4);
        assert_eq!(s.queue_counts(&2).parked, 3);
        // A `now` before the parking pop's (a second thread's older reading).
        let moved = s.flush_queue(&1, t0 + ms(5)) + s.flush_queue(&2, t0 + ms(5));
        let c1 = s.queue_counts(&1);
        let c2 = s.queue_counts(&2);
        assert_eq!(
            (c1.pending, c2.pending + c2.in_flight),
            (4, 4),
            "moved {moved}"
        );
        drop(flying);
        s.release_queue(&1);
        let mut ids = Vec::new();
        for step in 0..20 {
            ids.extend(s.pop_due(t0 + ms(50 + step), 100).map(|d| *d.id()));
        }
        ids.sort_unstable();
        let want: Vec<u64> = (0..4).chain(101..104).collect();
        assert_eq!(
            ids, want,
            "shards {shards}: the in-flight 100 ended; the rest once each"
        );
        assert_eq!(s.len(), 0);
    }
}

/// `SchedulerStats::bytes_held` is documented as "Bytes the whole scheduler holds, by
/// capacity". Holds of 20 000 queue names (each shard keeps a copy of every name in its
/// `held` set) and flow records of 20 000 limited queues must show in it.
#[test]
fn bytes_held_counts_hold_marks_and_flow_records() {
    let t0 = Instant::now();
    let s: Scheduler<String, u64, u64> = Scheduler::builder().shards(4).origin(t0).build();
    let base = s.stats().bytes_held;
    for i in 0..20_000 {
        s.hold_queue(format!("queue-{i}").as_str());
    }
    let held = s.stats().bytes_held;
    for i in 0..20_000 {
        s.set_concurrency(format!("limited-{i}").as_str(), Some(1));
    }
    let limited = s.stats().bytes_held;
    assert!(
        held > base && limited > held,
        "bytes held: {base}, then {held} with 20 000 holds, then {limited} with 20 000 limits"
    );
}

/// Holds of many queue names that never had a timer, all released: the marks go (each
/// name reads back not held) and nothing else is left counted.
#[test]
fn released_holds_of_many_queues_leave_nothing_counted() {
    let t0 = Instant::now();
    let s: Scheduler<String, u64, u64> = Scheduler::builder().shards(4).origin(t0).build();
    s.shrink_to_fit();
    let base = s.stats();
    for i in 0..20_000 {
        s.hold_queue(format!("queue-{i}").as_str());
    }
    for i in 0..20_000 {
        assert_eq!(s.release_queue(format!("queue-{i}").as_str()), 0);
        assert!(!s.is_held(format!("queue-{i}").as_str()));
    }
    s.shrink_to_fit();
    let after = s.stats();
    assert!(
        after.bytes_held <= base.bytes_held,
        "{base:?} then {after:?}"
    );
    assert_eq!(after.queues, base.queues);
}

/// The dispatcher thread sleeps on a throttle wake-up an hour away; lifting the rate, or
/// raising a concurrency limit of 0, wakes it for the parked timers ("a raised or lifted
/// limit makes parked timers due (and wakes a sleeping dispatcher)"). Bounded waits only.
#[test]
fn a_lifted_rate_or_raised_limit_wakes_the_dispatcher_thread() {
    use std::sync::{Arc, mpsc};

    let s: Arc<Sched> = Arc::new(Scheduler::builder().shards(4).build());
    let hourly = every(Duration::from_secs(3600), 1);
    s.set_rate(&1, Some(hourly));
    s.set_concurrency(&2, Some(0));
    let (tx, rx) = mpsc::channel();
    let d = s.spawn_dispatcher(move |due| {
        let _ = tx.send((*due.queue(), *due.id()));
    });
    let now = Instant::now();
    for id in 0..3 {
        s.schedule(1, id, now, id).unwrap();
        s.schedule(2, 10 + id, now, id).unwrap();
    }
    let first = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("one of queue 1");
    assert_eq!(first.0, 1);
    // Queue 1 waits an hour, queue 2 forever: the dispatcher sleeps.
    assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
    s.set_rate(&1, None);
    for _ in 0..2 {
        let got = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("woken by the lift");
        assert_eq!(got.0, 1);
    }
    s.set_concurrency(&2, Some(5));
    for _ in 0..3 {
        let got = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("woken by the raise");
        assert_eq!(got.0, 2);
    }
    d.shutdown();
    assert_eq!(s.len() + s.in_flight_len(), 0);
}
