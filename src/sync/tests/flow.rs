//! Flow control: `hold_queue` and `release_queue`, each with the operations a held queue
//! keeps answering.

use std::time::{Duration, Instant};

use super::interleave::{alternating, id_on};
use crate::sync::{Cancel, IdState, RateLimit, Retried, Scheduler};

use super::{Sched, ms, one_on_each, two_shards};

fn values(s: &Sched, now: Instant, limit: usize) -> Vec<u64> {
    s.pop_due(now, limit).map(|d| d.into_value()).collect()
}

#[test]
fn a_held_queue_accepts_parks_its_due_timers_once_and_releases_them_in_order() {
    let (s, t0) = two_shards();
    let [a, b, c, d, e] = alternating();
    s.schedule(0, a, ms(t0, 5), 10).unwrap();
    assert!(s.hold_queue(&0));
    s.schedule(0, b, ms(t0, 3), 11).unwrap(); // accepted while held
    s.schedule(0, c, ms(t0, 3), 12).unwrap();
    s.schedule(0, d, ms(t0, 50), 13).unwrap(); // not due yet
    s.schedule(1, e, ms(t0, 4), 14).unwrap(); // another queue: unaffected
    assert_eq!(values(&s, ms(t0, 10), 10), [14]);
    let counts = s.queue_counts(&0);
    assert_eq!((counts.pending, counts.parked, counts.held), (4, 3, true));
    // Parked: out of the wheel and the staged set, so the next poll finds nothing to look at.
    let stats = s.stats();
    assert_eq!((stats.parked, stats.due_waiting, stats.pending), (3, 0, 4));
    assert_eq!(s.lookup(&b).map(|i| i.state), Some(IdState::Pending));
    assert!(values(&s, ms(t0, 20), 10).is_empty());
    assert_eq!(s.stats().parked, 3, "parked once, not re-filed");
    s.check_invariants();

    assert_eq!(s.release_queue(&0), 3);
    assert!(!s.is_held(&0));
    assert_eq!(s.queue_counts(&0).parked, 0);
    assert_eq!(values(&s, ms(t0, 20), 10), [11, 12, 10], "delivery order");
    assert_eq!(values(&s, ms(t0, 60), 10), [13]);
    assert!(s.is_empty());
    s.check_invariants();
}

#[test]
fn parked_timers_are_pending_for_cancel_drain_reschedule_and_freeze() {
    let (s, t0) = two_shards();
    let ids: Vec<u64> = (0..4).map(|n| id_on(n % 2, n / 2)).collect();
    s.hold_queue(&0);
    for (n, &id) in ids.iter().enumerate() {
        s.schedule(0, id, ms(t0, 1), n as u64).unwrap();
    }
    assert!(values(&s, ms(t0, 2), 10).is_empty());
    assert_eq!(s.stats().parked, 4);
    // Cancel from the middle of a parked list: the last one takes its place.
    assert_eq!(s.cancel(&ids[0]), Cancel::Cancelled(0));
    s.check_invariants();
    // Reschedule a parked timer later: it leaves the list, and is parked again when due.
    s.reschedule(&ids[1], ms(t0, 5)).unwrap();
    assert_eq!(s.stats().parked, 2);
    s.check_invariants();
    let frozen = s.freeze_queue(&0);
    let taken: Vec<u64> = frozen.pending.iter().map(|e| e.value).collect();
    assert_eq!(
        taken,
        [2, 3, 1],
        "a freeze takes parked timers too, in order"
    );
    assert_eq!((s.len(), s.stats().parked), (0, 0));
    s.unfreeze_queue(&0);
    assert!(s.is_held(&0), "a freeze leaves the hold");
    s.schedule(0, ids[0], ms(t0, 1), 20).unwrap();
    assert!(values(&s, ms(t0, 6), 10).is_empty());
    let drained = s.drain_queue(&0);
    assert_eq!(drained.cancelled, [(ids[0], 20)]);
    assert_eq!(s.stats().parked, 0);
    s.check_invariants();
}

#[test]
fn timers_coming_back_from_flight_into_a_held_queue_are_parked_when_due() {
    let (s, t0, _) = one_on_each([1, 1]);
    let mut batch = s.pop_due(ms(t0, 1), 10);
    let first = batch.next().unwrap();
    s.hold_queue(&0);
    assert_eq!(
        s.queue_counts(&0).in_flight,
        2,
        "a hold recalls nothing in flight"
    );
    drop(batch); // b goes back, due
    assert_eq!(first.retry_at(ms(t0, 2)), Ok(Retried::Pending));
    assert!(values(&s, ms(t0, 3), 10).is_empty());
    assert_eq!(s.queue_counts(&0).parked, 2);
    s.release_queue(&0);
    assert_eq!(values(&s, ms(t0, 3), 10), [2, 1]);
}

#[test]
fn a_hold_outlives_its_queue_and_a_release_of_an_unheld_queue_changes_nothing() {
    let (s, t0) = two_shards();
    assert_eq!(s.release_queue(&0), 0);
    s.hold_queue(&0);
    s.schedule(0, 1, ms(t0, 1), 1).unwrap();
    assert!(values(&s, ms(t0, 1), 10).is_empty());
    assert_eq!(s.cancel(&1), Cancel::Cancelled(1)); // the queue has no member left
    assert!(s.is_held(&0));
    s.schedule(0, 2, ms(t0, 1), 2).unwrap(); // a new record, held from the mark
    assert!(values(&s, ms(t0, 1), 10).is_empty());
    assert_eq!(s.queue_counts(&0).parked, 1);
    assert_eq!(s.release_queue(&0), 1);
    assert_eq!(values(&s, ms(t0, 1), 10), [2]);
    s.check_invariants();
}

#[test]
fn a_pop_that_stops_at_its_limit_parks_only_what_it_looked_at() {
    let (s, t0) = two_shards();
    for n in 0..6u64 {
        s.schedule(
            (n % 2) as u8,
            id_on((n % 2) as usize, n as usize / 2),
            ms(t0, n + 1),
            n,
        )
        .unwrap();
    }
    s.hold_queue(&1);
    assert_eq!(values(&s, ms(t0, 10), 2), [0, 2]);
    s.check_invariants();
    assert_eq!(values(&s, ms(t0, 10), 10), [4]);
    assert_eq!(s.queue_counts(&1).parked, 3);
    s.release_queue(&1);
    assert_eq!(values(&s, ms(t0, 10), 10), [1, 3, 5]);
    s.check_invariants();
}

#[test]
fn a_concurrency_limit_parks_at_the_limit_and_frees_a_slot_per_ended_timer_in_order() {
    let (s, t0) = two_shards();
    s.set_concurrency(&0, Some(2));
    assert_eq!(s.concurrency(&0), Some(2));
    let ids: Vec<u64> = (0..6).map(|n| id_on(n % 2, n / 2)).collect();
    for (n, &id) in ids.iter().enumerate() {
        s.schedule(0, id, ms(t0, n as u64 + 1), n as u64).unwrap();
    }
    s.schedule(1, id_on(0, 9), ms(t0, 1), 100).unwrap(); // unlimited queue
    let mut batch = s.pop_due(ms(t0, 10), 10);
    let taken: Vec<_> = batch.by_ref().collect();
    let values: Vec<u64> = taken.iter().map(|d| *d.value()).collect();
    assert_eq!(values, [0, 100, 1]);
    let counts = s.queue_counts(&0);
    assert_eq!((counts.in_flight, counts.parked, counts.pending), (2, 4, 4));
    assert!(values_of(&s, ms(t0, 10)).is_empty(), "at the limit");
    s.check_invariants();
    let mut taken = taken.into_iter();
    drop(taken.next()); // done: one slot
    assert_eq!(values_of(&s, ms(t0, 10)), [2], "the earliest parked one");
    // Delivered at once: its slot is free again. A retry gives its slot back too (and
    // the timer is pending again, later): two slots.
    let second = taken.nth(1).unwrap();
    assert_eq!(second.retry_at(ms(t0, 50)), Ok(Retried::Pending));
    assert_eq!(values_of(&s, ms(t0, 10)), [3, 4]);
    drop(batch);
    // A dropped batch gives the slots of its untaken items back.
    let batch2 = s.pop_due(ms(t0, 10), 10);
    assert_eq!(batch2.len(), 1);
    s.set_concurrency(&0, Some(1)); // lowered: the one in flight fills it
    s.schedule(0, id_on(1, 7), ms(t0, 1), 6).unwrap();
    assert!(values_of(&s, ms(t0, 10)).is_empty());
    drop(batch2);
    s.check_invariants();
    assert_eq!(values_of(&s, ms(t0, 10)), [6], "earlier deadline first");
    assert_eq!(values_of(&s, ms(t0, 10)), [5]);
    // Lifting the limit: nothing parked stays.
    s.schedule(0, id_on(1, 8), ms(t0, 1), 7).unwrap();
    s.schedule(0, id_on(0, 8), ms(t0, 1), 8).unwrap();
    let held = s.pop_due(ms(t0, 10), 10);
    assert_eq!(s.queue_counts(&0).parked, 1);
    s.set_concurrency(&0, None);
    assert_eq!(s.concurrency(&0), None);
    assert_eq!(values_of(&s, ms(t0, 10)), [8]);
    drop(held);
    assert_eq!(values_of(&s, ms(t0, 60)), [7, 1]);
    assert!(s.is_empty());
    s.check_invariants();
}

/// Takes every due timer and delivers it (the `Due`s are dropped at once, freeing slots).
fn values_of(s: &Sched, now: Instant) -> Vec<u64> {
    values(s, now, 100)
}

#[test]
fn a_limit_of_zero_hands_nothing_out_and_a_held_limited_queue_stays_parked() {
    let (s, t0) = two_shards();
    s.set_concurrency(&0, Some(0));
    s.schedule(0, 1, ms(t0, 1), 1).unwrap();
    s.schedule(0, 2, ms(t0, 1), 2).unwrap();
    assert!(values_of(&s, ms(t0, 1)).is_empty());
    assert_eq!(s.queue_counts(&0).parked, 2);
    s.hold_queue(&0);
    s.set_concurrency(&0, Some(1));
    assert!(
        values_of(&s, ms(t0, 1)).is_empty(),
        "held wins over a free slot"
    );
    s.release_queue(&0);
    let mut batch = s.pop_due(ms(t0, 1), 10);
    assert_eq!(batch.len(), 1, "released, but one slot");
    let due = batch.next().unwrap();
    assert_eq!(s.cancel(&2), Cancel::Cancelled(2), "a parked timer cancels");
    drop(due);
    assert!(s.is_empty());
    s.check_invariants();
}

#[test]
fn a_rate_limit_spaces_hand_outs_wakes_at_the_next_permitted_instant_and_allows_its_burst() {
    let (s, t0) = two_shards();
    s.set_rate(&0, Some(RateLimit::per_second(10).with_burst(2)));
    assert_eq!(s.rate(&0), Some((Duration::from_millis(100), 2)));
    for n in 0..6u64 {
        s.schedule(0, id_on((n % 2) as usize, n as usize / 2), ms(t0, 0), n)
            .unwrap();
    }
    s.schedule(1, id_on(0, 9), ms(t0, 0), 100).unwrap();
    assert_eq!(values_of(&s, ms(t0, 0)), [0, 1, 100], "a burst of two");
    let counts = s.queue_counts(&0);
    assert!(counts.throttled);
    assert_eq!((counts.parked, counts.pending), (4, 4));
    // The wake-up is a deadline: the next permitted instant, 100 ms after the first.
    assert_eq!(s.next_deadline(), Some(ms(t0, 100)));
    assert!(values_of(&s, ms(t0, 99)).is_empty());
    assert_eq!(values_of(&s, ms(t0, 100)), [2]);
    assert_eq!(s.next_deadline(), Some(ms(t0, 200)));
    assert_eq!(values_of(&s, ms(t0, 250)), [3]);
    // GCRA: after hand-outs at 0, 0, 100 and 250 ms the theoretical arrival time is 400 ms,
    // and a burst of two tolerates 100 ms of it: the next is permitted at 300 ms.
    assert_eq!(s.next_deadline(), Some(ms(t0, 300)));
    assert!(values_of(&s, ms(t0, 299)).is_empty());
    assert_eq!(values_of(&s, ms(t0, 300)), [4]);
    s.check_invariants();
    // Lifting the limit makes the rest due at once.
    s.set_rate(&0, None);
    assert_eq!(s.rate(&0), None);
    assert_eq!(values_of(&s, ms(t0, 351)), [5]);
    assert!(!s.queue_counts(&0).throttled || s.is_empty());
    assert!(s.is_empty());
}

#[test]
fn rate_and_concurrency_together_and_a_sleeping_dispatcher_wakes_for_the_rate() {
    use std::sync::{Arc, mpsc};
    let t0 = Instant::now();
    let s: Arc<Sched> = Arc::new(Scheduler::builder().origin(t0).build());
    s.set_rate(&0, Some(RateLimit::per_second(100)));
    s.set_concurrency(&0, Some(1));
    for n in 0..4u64 {
        s.schedule(0, n, t0, n).unwrap();
    }
    let (tx, rx) = mpsc::channel();
    let dispatcher = s.spawn_dispatcher(move |due| {
        let _ = tx.send((Instant::now(), due.into_value()));
    });
    let got: Vec<(Instant, u64)> = (0..4)
        .map(|_| rx.recv_timeout(Duration::from_secs(10)).expect("delivered"))
        .collect();
    dispatcher.shutdown();
    let values: Vec<u64> = got.iter().map(|&(_, v)| v).collect();
    assert_eq!(values, [0, 1, 2, 3], "in delivery order");
    // Hand-out k is permitted from t0 + k × 10 ms on (burst 1), and each is seen after its
    // pop. (The gaps between the sightings prove nothing: a sighting delayed by the thread's
    // preemption after its pop narrows the next gap.)
    for (k, &(seen, _)) in got.iter().enumerate() {
        let permitted = t0 + Duration::from_millis(10) * k as u32;
        assert!(
            seen >= permitted,
            "hand-out {k} seen before t0 + {k} × 10 ms"
        );
    }
    assert!(s.is_empty());
}

#[test]
fn flush_makes_a_queue_due_now_in_deadline_order_and_leaves_in_flight_and_held_alone() {
    let (s, t0) = two_shards();
    let ids: Vec<u64> = (0..5).map(|n| id_on(n % 2, n / 2)).collect();
    s.schedule(0, ids[0], ms(t0, 1), 0).unwrap();
    s.schedule(0, ids[1], ms(t0, 50), 1).unwrap();
    s.schedule(0, ids[2], ms(t0, 30), 2).unwrap();
    s.schedule(0, ids[3], ms(t0, 40), 3).unwrap();
    s.schedule(1, ids[4], ms(t0, 20), 4).unwrap();
    let mut batch = s.pop_due(ms(t0, 5), 10);
    let first = batch.next().unwrap(); // in flight: not flushed
    assert_eq!(s.flush_queue(&0, ms(t0, 5)), 3);
    assert_eq!(s.lookup(&ids[1]).map(|i| i.deadline), Some(ms(t0, 5)));
    s.check_invariants();
    assert_eq!(values_of(&s, ms(t0, 5)), [2, 3, 1], "deadline order, now");
    assert_eq!(s.flush_queue(&0, ms(t0, 5)), 0);
    drop((first, batch));
    // A held queue: flushed, still held; released in the flushed order.
    s.schedule(0, ids[0], ms(t0, 90), 5).unwrap();
    s.schedule(0, ids[1], ms(t0, 80), 6).unwrap();
    s.hold_queue(&0);
    assert_eq!(s.flush_queue(&0, ms(t0, 6)), 2);
    assert!(values_of(&s, ms(t0, 6)).is_empty());
    s.release_queue(&0);
    assert_eq!(values_of(&s, ms(t0, 6)), [6, 5]);
    assert_eq!(values_of(&s, ms(t0, 100)), [4]);
    s.check_invariants();
}

#[test]
fn pop_due_for_one_queue_takes_its_due_timers_in_order_under_its_hold_and_limits() {
    let (s, t0) = two_shards();
    for n in 0..6u64 {
        let queue = (n % 3) as u8;
        s.schedule(
            queue,
            id_on((n % 2) as usize, n as usize / 2),
            ms(t0, 6 - n),
            n,
        )
        .unwrap();
    }
    let taken: Vec<u64> = s
        .pop_due_queue(&0, ms(t0, 10), 10)
        .map(|d| d.into_value())
        .collect();
    assert_eq!(taken, [3, 0], "queue 0 only, deadline order");
    let batch = s.pop_due_queue(&1, ms(t0, 10), 1);
    assert_eq!(batch.len(), 1);
    drop(batch); // untaken: put back
    s.set_concurrency(&1, Some(1));
    let mut batch = s.pop_due_queue(&1, ms(t0, 10), 10);
    assert_eq!(batch.len(), 1, "one slot");
    let due = batch.next().unwrap();
    assert_eq!(*due.value(), 4);
    assert!(
        s.pop_due_queue(&1, ms(t0, 10), 10).is_empty(),
        "at its limit"
    );
    drop(due);
    s.hold_queue(&2);
    assert!(s.pop_due_queue(&2, ms(t0, 10), 10).is_empty(), "held");
    s.check_invariants();
    s.release_queue(&2);
    assert_eq!(values_of(&s, ms(t0, 10)), [5, 2, 1]);
    assert!(s.is_empty());
}

#[test]
fn a_release_merges_its_parked_timers_with_those_already_staged_in_delivery_order() {
    let t0 = Instant::now();
    let s: Sched = Scheduler::builder().shards(1).origin(t0).build();
    for (id, at) in [(21, 2), (22, 4), (23, 6), (24, 8)] {
        s.schedule(1, id, ms(t0, at), id).unwrap();
    }
    s.hold_queue(&0);
    for (id, at) in [(11, 1), (12, 3), (13, 5), (14, 7), (15, 9)] {
        s.schedule(0, id, ms(t0, at), id).unwrap();
    }
    // Pops of one: each parks the held timers it meets and leaves a polled one staged.
    assert_eq!(values(&s, ms(t0, 20), 1), [21]);
    assert_eq!(values(&s, ms(t0, 20), 1), [22]);
    assert_eq!(values(&s, ms(t0, 20), 1), [23]);
    let stats = s.stats();
    assert!(stats.due_waiting >= 1, "something staged: {stats:?}");
    assert!(
        stats.parked > stats.due_waiting,
        "more parked than staged: {stats:?}"
    );
    let parked = stats.parked;
    assert_eq!(s.release_queue(&0), parked);
    s.check_invariants();
    assert_eq!(values(&s, ms(t0, 20), 10), [11, 12, 13, 14, 24, 15]);
}

/// A rate change rescales the backlog as it stands at the latest poll: what is left of the
/// burst then stays left (in hand-outs), and what is spent stays spent.
#[test]
fn a_changed_rate_keeps_the_burst_left_at_the_latest_poll() {
    let (s, t0) = two_shards();
    s.set_rate(&0, Some(RateLimit::per_second(1).with_burst(10)));
    for n in 0..30u64 {
        s.schedule(0, id_on((n % 2) as usize, n as usize / 2), t0, n)
            .unwrap();
    }
    assert_eq!(s.pop_due(t0, 10).count(), 10, "the burst");
    // 5 s on, 5 of the burst are back; take 1: 4 left, a backlog of 6 intervals.
    assert_eq!(s.pop_due(ms(t0, 5000), 1).count(), 1);
    // Ten times slower: the 6 intervals are 60 s of a 90 s tolerance, 4 hand-outs left.
    let slower = RateLimit {
        count: 1,
        per: Duration::from_secs(10),
        burst: 10,
    };
    s.set_rate(&0, Some(slower));
    assert_eq!(s.pop_due(ms(t0, 5000), 100).count(), 4);
    // The next one 10 s after the last permitted instant.
    assert_eq!(s.pop_due(ms(t0, 14_999), 100).count(), 0);
    assert_eq!(s.pop_due(ms(t0, 15_000), 100).count(), 1);
    s.check_invariants();
}
