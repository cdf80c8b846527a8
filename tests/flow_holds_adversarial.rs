//! Adversarial checks of holds (`hold_queue`, `release_queue`, `is_held`), the parking of
//! held timers and `flush_queue` against their documented behaviour. Time is simulated: every
//! `now` is an explicit `Instant`.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tickwheel::sync::{Cancel, Scheduler};

mod support;

use support::flow::{Sched, fill, fill_with, held, ms, sched};

/// A scheduler of 4 shards at origin `t0` holding one timer: id 1 (value 1) on queue 1,
/// due at `t0`.
fn one_due(t0: Instant) -> Sched {
    let s = sched(4, t0);
    s.schedule(1, 1, t0, 1).unwrap();
    s
}

#[test]
fn held_queue_hands_out_nothing_then_release_in_deadline_order() {
    for shards in [1, 2, 64] {
        let t0 = Instant::now();
        let s = sched(shards, t0);
        assert!(s.hold_queue(&1));
        // Reverse deadlines, many ids across shards, plus another queue.
        for id in 0..200u64 {
            s.schedule(1, id, t0 + ms(200 - id), id).unwrap();
            s.schedule(2, 1000 + id, t0 + ms(200 - id), id).unwrap();
        }
        let later = t0 + ms(500);
        assert_eq!(
            s.pop_due_queue(&1, later, usize::MAX).len(),
            0,
            "shards {shards}"
        );
        let others: Vec<u8> = s.pop_due(later, usize::MAX).map(|d| *d.queue()).collect();
        assert_eq!(others.len(), 200);
        assert!(others.iter().all(|&q| q == 2));
        assert_eq!(s.pop_due(later, usize::MAX).len(), 0);
        let c = s.queue_counts(&1);
        assert_eq!(
            (c.pending, c.parked, c.held, c.in_flight),
            (200, 200, true, 0)
        );
        assert_eq!(s.len(), 200);
        assert_eq!(s.release_queue(&1), 200);
        let ids: Vec<u64> = s.pop_due(later, usize::MAX).map(|d| *d.id()).collect();
        let want: Vec<u64> = (0..200).rev().collect();
        assert_eq!(ids, want, "deadline order, shards {shards}");
        assert_eq!(s.len(), 0);
    }
}

#[test]
fn held_queue_pop_due_queue_and_limit_zero() {
    let t0 = Instant::now();
    let s = one_due(t0);
    assert_eq!(s.pop_due_queue(&1, t0, 0).len(), 0, "limit 0");
    assert_eq!(s.pop_due(t0, 0).len(), 0);
    s.hold_queue(&1);
    assert_eq!(s.pop_due_queue(&1, t0, 10).len(), 0);
    // Release of a queue never held changes nothing.
    assert_eq!(s.release_queue(&9), 0);
    s.release_queue(&1);
    assert_eq!(s.pop_due_queue(&1, t0, 10).count(), 1);
    assert_eq!(s.len(), 0);
}

/// `pop_due_queue` documents "a member refused is parked, as by `pop_due`", and
/// `release_queue` returns "how many parked timers were released".
#[test]
fn pop_due_queue_parks_a_held_member() {
    let t0 = Instant::now();
    let s = one_due(t0);
    s.hold_queue(&1);
    assert_eq!(s.pop_due_queue(&1, t0, 10).len(), 0);
    assert_eq!(s.queue_counts(&1).parked, 1, "parked by pop_due_queue");
    assert_eq!(s.release_queue(&1), 1);
}

#[test]
fn held_not_yet_due_members_come_out_at_their_deadline_after_release() {
    let t0 = Instant::now();
    let s = held(2, t0);
    s.schedule(1, 1, t0 + ms(10), 1).unwrap();
    s.schedule(1, 2, t0 + ms(100), 2).unwrap();
    assert_eq!(s.pop_due(t0 + ms(50), 10).len(), 0);
    assert_eq!(s.release_queue(&1), 1, "only the due one was parked");
    assert_eq!(
        s.pop_due(t0 + ms(50), 10)
            .map(|d| *d.id())
            .collect::<Vec<_>>(),
        [1]
    );
    assert_eq!(s.pop_due(t0 + ms(99), 10).len(), 0);
    assert_eq!(s.next_deadline(), Some(t0 + ms(100)));
    assert_eq!(s.pop_due(t0 + ms(100), 10).len(), 1);
}

#[test]
fn dispatcher_delivers_nothing_of_a_held_queue_until_release() {
    let s: Arc<Sched> = Arc::new(Scheduler::builder().shards(4).build());
    s.hold_queue(&1);
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = Arc::clone(&got);
    let (tx, rx) = std::sync::mpsc::channel();
    let d = s.spawn_dispatcher(move |due| {
        g.lock().unwrap().push((*due.queue(), *due.id()));
        let _ = tx.send(());
    });
    let now = Instant::now();
    fill(&s, 1, 20, now);
    // A marker in another queue: once it is delivered, the dispatcher has polled past the
    // held ones.
    s.schedule(2, 99, now, 0).unwrap();
    rx.recv_timeout(Duration::from_secs(30)).unwrap();
    // Give the dispatcher further polls (not a pass/fail timing: only more chances to fail).
    for k in 0..5 {
        s.schedule(2, 100 + k, Instant::now(), 0).unwrap();
        rx.recv_timeout(Duration::from_secs(30)).unwrap();
    }
    assert!(
        got.lock().unwrap().iter().all(|&(q, _)| q == 2),
        "{:?}",
        got.lock().unwrap()
    );
    assert_eq!(s.queue_counts(&1).pending, 20);
    assert_eq!(s.release_queue(&1), 20);
    for _ in 0..20 {
        rx.recv_timeout(Duration::from_secs(30)).unwrap();
    }
    d.shutdown();
    let got = got.lock().unwrap();
    let ones: Vec<u64> = got.iter().filter(|p| p.0 == 1).map(|p| p.1).collect();
    assert_eq!(
        ones,
        (0..20).collect::<Vec<_>>(),
        "schedule order at equal deadlines"
    );
}

#[test]
fn flush_held_in_flight_and_before_origin() {
    let t0 = Instant::now() + Duration::from_secs(10);
    let s = sched(4, t0);
    fill_with(&s, 1, 6, |id| t0 + Duration::from_secs(100 - id));
    // Before the origin: documented as nothing for pop_due_queue; flush must not panic.
    let before = t0 - Duration::from_secs(5);
    let _ = s.flush_queue(&1, before);
    assert_eq!(s.pop_due_queue(&1, before, 10).len(), 0);
    assert_eq!(s.len(), 6);
    // In flight: flush one id, hand it out, then flush again; in flight one is left alone.
    assert_eq!(s.flush_queue(&1, t0), 6);
    let first: Vec<_> = s.pop_due(t0, 1).collect();
    assert_eq!(*first[0].id(), 5, "deadline order");
    s.hold_queue(&1);
    assert_eq!(s.flush_queue(&1, t0), 0, "already due");
    assert_eq!(s.pop_due(t0, 10).len(), 0, "held after flush");
    let c = s.queue_counts(&1);
    assert_eq!((c.pending, c.in_flight, c.parked), (5, 1, 5));
    first
        .into_iter()
        .next()
        .unwrap()
        .retry_at(t0 + Duration::from_secs(500))
        .unwrap();
    assert_eq!(s.release_queue(&1), 5);
    let ids: Vec<u64> = s.pop_due(t0, 10).map(|d| *d.id()).collect();
    assert_eq!(ids, [4, 3, 2, 1, 0]);
    assert_eq!(
        s.queue_counts(&1).pending,
        1,
        "retried one at its own deadline"
    );
}

#[test]
fn flush_of_held_queue_releases_in_flush_order() {
    let t0 = Instant::now();
    let s = held(8, t0);
    fill_with(&s, 1, 30, |id| t0 + Duration::from_secs(1000 - id));
    assert_eq!(s.flush_queue(&1, t0 + ms(3)), 30);
    assert_eq!(s.pop_due(t0 + ms(3), 100).len(), 0);
    assert_eq!(s.release_queue(&1), 30);
    let ids: Vec<u64> = s.pop_due(t0 + ms(3), 100).map(|d| *d.id()).collect();
    assert_eq!(ids, (0..30).rev().collect::<Vec<_>>());
}

/// Parked timers stay in custody: cancel, reschedule, drain, freeze and retry reach them,
/// and the counts follow.
#[test]
fn parked_timers_answer_cancel_reschedule_drain_freeze() {
    let t0 = Instant::now();
    let s = held(4, t0);
    fill_with(&s, 1, 6, |id| t0 + ms(id));
    let now = t0 + ms(10);
    assert_eq!(s.pop_due(now, 10).len(), 0);
    assert_eq!(s.queue_counts(&1).parked, 6);
    assert!(matches!(s.cancel(&0), Cancel::Cancelled(0)));
    assert_eq!(s.queue_counts(&1).parked, 5);
    // Rescheduled into the future: no longer parked, due at its new deadline.
    s.reschedule(&1, t0 + ms(50)).unwrap();
    let c = s.queue_counts(&1);
    assert_eq!(
        (c.pending, c.parked),
        (5, 4),
        "a rescheduled member is not due any more"
    );
    assert_eq!(s.release_queue(&1), 4);
    let ids: Vec<u64> = s.pop_due(now, 10).map(|d| *d.id()).collect();
    assert_eq!(ids, [2, 3, 4, 5]);
    assert_eq!(
        s.pop_due(t0 + ms(50), 10)
            .map(|d| *d.id())
            .collect::<Vec<_>>(),
        [1]
    );

    // Retry of an in-flight timer into a held queue: parked, not handed out.
    s.schedule(1, 10, now, 10).unwrap();
    let due = s.pop_due(now, 10).next().unwrap();
    s.hold_queue(&1);
    due.retry_at(now).unwrap();
    assert_eq!(s.pop_due(now, 10).len(), 0, "retried into a held queue");
    // Drain takes the parked one; the hold stays.
    let d = s.drain_queue(&1);
    assert_eq!(d.cancelled.iter().map(|p| p.0).collect::<Vec<_>>(), [10]);
    assert_eq!(s.queue_counts(&1).parked, 0);
    assert!(s.is_held(&1));
    // Freeze hands parked ones back.
    s.schedule(1, 11, now, 11).unwrap();
    assert_eq!(s.pop_due(now, 10).len(), 0);
    let f = s.freeze_queue(&1);
    assert_eq!(f.pending.iter().map(|e| e.id).collect::<Vec<_>>(), [11]);
    assert_eq!((s.len(), s.queue_counts(&1).parked), (0, 0));
    s.unfreeze_queue(&1);
    assert!(s.is_held(&1), "a freeze does not lift the hold");
}

/// Between `hold_queue` returning and `release_queue` starting, no `pop_due`,
/// `pop_due_queue` or `flush_queue` that started after the hold hands out a timer of the
/// queue, while producers keep scheduling into it.
#[test]
fn hold_is_watertight_while_pollers_and_flushes_run() {
    use std::sync::atomic::AtomicU64;
    for shards in [1, 2, 64] {
        let t0 = Instant::now();
        let s = &sched(shards, t0);
        // Epoch: odd while held (hold returned, release not started).
        let epoch = &AtomicU64::new(0);
        let stop = &std::sync::atomic::AtomicBool::new(false);
        let faults = &Mutex::new(Vec::<String>::new());
        std::thread::scope(|threads| {
            for t in 0..2u64 {
                threads.spawn(move || {
                    let mut k = 0u64;
                    while !stop.load(Ordering::SeqCst) {
                        k += 1;
                        let before = epoch.load(Ordering::SeqCst);
                        let far = t0 + Duration::from_secs(10);
                        let out: Vec<_> = if (k + t) % 3 == 0 {
                            s.flush_queue(&1, t0);
                            s.pop_due_queue(&1, far, 5).collect()
                        } else {
                            s.pop_due(far, 5).collect()
                        };
                        let after = epoch.load(Ordering::SeqCst);
                        for d in &out {
                            if *d.queue() == 1 && before == after && before % 2 == 1 {
                                faults
                                    .lock()
                                    .unwrap()
                                    .push(format!("{} handed out in held epoch {before}", d.id()));
                            }
                        }
                    }
                });
            }
            let mut id = 0u64;
            for round in 0..200 {
                for _ in 0..5 {
                    s.schedule(1, id, t0 + Duration::from_micros(id % 100), id)
                        .unwrap();
                    id += 1;
                }
                if round % 2 == 0 {
                    s.hold_queue(&1);
                    epoch.fetch_add(1, Ordering::SeqCst);
                } else {
                    epoch.fetch_add(1, Ordering::SeqCst);
                    s.release_queue(&1);
                }
                std::thread::yield_now();
            }
            stop.store(true, Ordering::SeqCst);
        });
        let faults = faults.lock().unwrap();
        assert!(
            faults.is_empty(),
            "shards {shards}: {:?}",
            &faults[..faults.len().min(5)]
        );
        let left: usize = s.pop_due(t0 + Duration::from_secs(10), usize::MAX).count();
        assert_eq!(
            s.len(),
            0,
            "shards {shards}: {left} popped at the end, {} pending",
            s.len()
        );
    }
}
