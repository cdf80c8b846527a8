//! Freezing a queue: `freeze_queue`, `take_forwarded`, `unfreeze_queue`, `import` and
//! `Due::retry_at`, each operation and its edges.

use super::interleave::{alternating, id_on};
use crate::sync::{Cancel, FrozenEntry, RescheduleError, Retried, RetryError, ScheduleError};

use super::{ms, one_on_each, two_shards};

fn ids_values(entries: &[FrozenEntry<u64, u64>]) -> Vec<(u64, u64)> {
    entries.iter().map(|e| (e.id, e.value)).collect()
}

#[test]
fn freeze_takes_every_pending_member_in_delivery_order_and_reports_in_flight() {
    let (s, t0) = two_shards();
    let [a, b, c, d, e] = alternating();
    s.schedule(0, a, ms(t0, 5), 10).unwrap();
    s.schedule(0, b, ms(t0, 3), 11).unwrap();
    s.schedule(0, c, ms(t0, 3), 12).unwrap(); // same tick as b, scheduled after it
    s.schedule(0, d, ms(t0, 1), 13).unwrap();
    s.schedule(1, e, ms(t0, 2), 14).unwrap(); // another queue: untouched
    // d goes in flight; a pop that stops at its limit leaves a due timer staged.
    let mut batch = s.pop_due(ms(t0, 4), 1);
    let due = batch.next().unwrap();
    assert_eq!(*due.id(), d);
    drop(batch);
    assert!(s.stats().due_waiting > 0, "a staged timer is taken too");

    let frozen = s.freeze_queue(&0);
    assert_eq!(ids_values(&frozen.pending), [(b, 11), (c, 12), (a, 10)]);
    assert_eq!(frozen.pending[2].at, ms(t0, 5), "the deadline as given");
    assert_eq!(frozen.in_flight, [d]);
    assert_eq!((s.len(), s.queue_len(&0), s.queue_len(&1)), (1, 0, 1));
    s.check_invariants();

    // Idempotent: nothing pending any more, the in-flight id reported again.
    let again = s.freeze_queue(&0);
    assert!(again.pending.is_empty());
    assert_eq!(again.in_flight, [d]);
    drop(due); // delivered
    assert!(s.freeze_queue(&0).in_flight.is_empty());
    assert_eq!(
        s.pop_due(ms(t0, 100), 10)
            .map(|d| d.into_value())
            .collect::<Vec<_>>(),
        [14]
    );
    s.check_invariants();
}

#[test]
fn a_frozen_queue_refuses_schedule_and_import_with_the_value_back() {
    let (s, t0) = two_shards();
    s.freeze_queue(&0);
    assert!(s.is_frozen(&0) && !s.is_frozen(&1));
    for id in alternating::<2>() {
        assert_eq!(s.schedule(0, id, t0, 7), Err(ScheduleError::Frozen(7)));
    }
    assert_eq!(ScheduleError::Frozen(7).into_value(), 7);
    assert_eq!(
        format!("{:?}", ScheduleError::Frozen(7)),
        "ScheduleError::Frozen(..)"
    );
    assert!(
        s.schedule(1, id_on(0, 0), t0, 8).is_ok(),
        "other queues are open"
    );
    // The id is pending in queue 1: scheduling it into the frozen queue is Frozen first.
    assert_eq!(
        s.schedule(0, id_on(0, 0), t0, 9),
        Err(ScheduleError::Frozen(9))
    );

    let entries = vec![
        FrozenEntry {
            id: 50,
            at: t0,
            value: 1,
        },
        FrozenEntry {
            id: 51,
            at: t0,
            value: 2,
        },
    ];
    let imported = s.import(0, entries.clone());
    assert_eq!((imported.imported, imported.present.len()), (0, 0));
    assert_eq!(imported.refused, entries);
    assert_eq!(s.len(), 1);
    s.check_invariants();
}

#[test]
fn retry_at_puts_the_timer_back_pending_behind_equal_deadlines() {
    let (s, t0, [a, b]) = one_on_each([1, 9]);
    let due = s.pop_due(ms(t0, 1), 10).next().unwrap();
    assert_eq!(*due.id(), a);
    assert_eq!(s.schedule(0, a, t0, 3), Err(ScheduleError::InFlight(3)));
    assert_eq!(due.retry_at(ms(t0, 9)), Ok(Retried::Pending));
    assert_eq!((s.len(), s.in_flight_len(), s.queue_len(&0)), (2, 0, 2));
    assert_eq!(
        s.schedule(0, a, t0, 4),
        Err(ScheduleError::Pending(4)),
        "never absent"
    );
    // a now has b's deadline tick and a later place: b comes first.
    let order: Vec<u64> = s.pop_due(ms(t0, 9), 10).map(|d| *d.id()).collect();
    assert_eq!(order, [b, a]);
    s.check_invariants();
}

#[test]
fn retry_at_into_a_frozen_queue_forwards_and_take_forwarded_hands_it_over() {
    let (s, t0) = two_shards();
    let (a, b, c) = (id_on(0, 0), id_on(1, 0), id_on(1, 1));
    for (id, v) in [(a, 1), (b, 2), (c, 3)] {
        s.schedule(0, id, ms(t0, 1), v).unwrap();
    }
    let mut batch = s.pop_due(ms(t0, 1), 10);
    let (da, db, dc) = (
        batch.next().unwrap(),
        batch.next().unwrap(),
        batch.next().unwrap(),
    );
    let frozen = s.freeze_queue(&0);
    assert_eq!(frozen.in_flight, [a, b, c]);
    assert_eq!(s.queue_in_flight(&0), [a, b, c]);
    assert_eq!(dc.retry_at(ms(t0, 30)), Ok(Retried::Forwarded));
    assert_eq!(da.retry_at(ms(t0, 20)), Ok(Retried::Forwarded));
    drop(db); // delivered
    assert_eq!(s.queue_in_flight(&0), Vec::<u64>::new());
    // Forwarded: counted, held, never due, not reschedulable; the ids stay taken.
    let stats = s.stats();
    assert_eq!(
        (s.len(), s.queue_len(&0), stats.forwarded, stats.pending),
        (2, 2, 2, 2)
    );
    assert_eq!(s.pop_due(ms(t0, 1_000), 10).len(), 0);
    assert_eq!(s.next_deadline(), None);
    assert_eq!(s.reschedule(&a, t0), Err(RescheduleError::Frozen));
    assert_eq!(s.schedule(1, a, t0, 9), Err(ScheduleError::Pending(9)));
    s.check_invariants();

    let taken = s.take_forwarded(&0);
    assert_eq!(
        ids_values(&taken),
        [(a, 1), (c, 3)],
        "delivery order of the new deadlines"
    );
    assert_eq!(taken[1].at, ms(t0, 30));
    assert!(s.take_forwarded(&0).is_empty());
    assert_eq!((s.len(), s.stats().forwarded), (0, 0));
    assert_eq!(s.queues(), Vec::<u8>::new());
    s.check_invariants();
}

#[test]
fn a_half_taken_batch_of_a_frozen_queue_is_forwarded_and_other_queues_go_back_pending() {
    let (s, t0) = two_shards();
    let [a, b, c, d] = alternating();
    s.schedule(0, a, ms(t0, 1), 1).unwrap();
    s.schedule(0, b, ms(t0, 2), 2).unwrap();
    s.schedule(1, c, ms(t0, 3), 3).unwrap();
    s.schedule(0, d, ms(t0, 4), 4).unwrap();
    let mut batch = s.pop_due(ms(t0, 5), 10);
    let first = batch.next().unwrap();
    assert_eq!(*first.id(), a);
    assert_eq!(s.freeze_queue(&0).in_flight, [a, b, d]);
    drop(batch); // b and d (queue 0) forwarded, c (queue 1) pending again
    drop(first); // a delivered
    assert_eq!((s.len(), s.queue_len(&0), s.stats().forwarded), (3, 2, 2));
    let popped: Vec<u64> = s.pop_due(ms(t0, 5), 10).map(|d| *d.id()).collect();
    assert_eq!(popped, [c]);
    assert_eq!(ids_values(&s.take_forwarded(&0)), [(b, 2), (d, 4)]);
    s.check_invariants();
}

#[test]
fn unfreeze_puts_forwarded_timers_back_pending_with_their_order() {
    let (s, t0, _) = one_on_each([2, 1]);
    let batch = s.pop_due(ms(t0, 2), 10);
    s.freeze_queue(&0);
    drop(batch);
    assert_eq!(s.unfreeze_queue(&1), 0, "not frozen: nothing");
    assert_eq!(s.unfreeze_queue(&0), 2);
    assert!(!s.is_frozen(&0));
    assert_eq!(s.unfreeze_queue(&0), 0, "twice: nothing");
    assert_eq!(s.stats().forwarded, 0);
    assert_eq!(s.next_deadline(), Some(ms(t0, 1)));
    s.check_invariants();
    let order: Vec<u64> = s.pop_due(ms(t0, 2), 10).map(|d| d.into_value()).collect();
    assert_eq!(order, [2, 1]);
    assert!(s.schedule(0, 99, t0, 5).is_ok(), "open again");
    s.check_invariants();
}

#[test]
fn cancel_and_drain_return_forwarded_timers() {
    let (s, t0, [a, b]) = one_on_each([0, 0]);
    let batch = s.pop_due(t0, 10);
    s.freeze_queue(&0);
    drop(batch);
    assert_eq!(s.cancel(&a), Cancel::Cancelled(1));
    let drained = s.drain_queue(&0);
    assert_eq!(
        (drained.cancelled, drained.in_flight),
        (vec![(b, 2)], vec![])
    );
    assert!(s.is_frozen(&0), "a drain does not unfreeze");
    assert_eq!(s.len(), 0);
    s.check_invariants();
}

#[test]
fn import_is_idempotent_by_id_and_hands_present_values_back() {
    let (s, t0) = two_shards();
    let [a, b, c, d] = alternating();
    s.schedule(1, a, ms(t0, 1), 100).unwrap(); // pending in another queue
    s.schedule(1, b, ms(t0, 1), 101).unwrap();
    let due_b = s.pop_due(ms(t0, 1), 10).nth(1).unwrap(); // a delivered, b in flight
    assert_eq!(*due_b.id(), b);
    s.schedule(1, a, ms(t0, 1), 102).unwrap();
    let entry = |id, n: u64, value| FrozenEntry {
        id,
        at: ms(t0, n),
        value,
    };
    let entries = vec![
        entry(a, 7, 1),
        entry(b, 5, 2),
        entry(c, 5, 3),
        entry(d, 5, 4),
    ];
    let out = s.import(0, entries.clone());
    assert_eq!(out.imported, 2);
    assert_eq!(
        out.present,
        vec![entries[0].clone(), entries[1].clone()],
        "values back"
    );
    assert!(out.refused.is_empty());
    let again = s.import(0, entries.clone());
    assert_eq!(
        (again.imported, again.present.len()),
        (0, 4),
        "nothing doubled"
    );
    assert_eq!((s.len(), s.queue_len(&0)), (3, 2));
    drop(due_b);
    // Equal deadlines in input order.
    let order: Vec<u64> = s.pop_due(ms(t0, 10), 10).map(|d| d.into_value()).collect();
    assert_eq!(order, [102, 3, 4]);
    s.check_invariants();
}

#[test]
fn retry_at_after_the_scheduler_is_gone_gives_the_value_back() {
    let (s, t0) = two_shards();
    s.schedule(0, 1, t0, 5).unwrap();
    let due = s.pop_due(t0, 10).next().unwrap();
    drop(s);
    assert_eq!(due.retry_at(t0), Err(RetryError::Closed(5)));
}

#[test]
fn a_freeze_finds_done_dues_delivered_not_in_flight() {
    let (s, t0) = two_shards();
    s.schedule(0, 1, t0, 5).unwrap();
    drop(s.pop_due(t0, 10).next()); // done, on the done list, not settled
    let frozen = s.freeze_queue(&0);
    assert!(frozen.pending.is_empty() && frozen.in_flight.is_empty());
    assert_eq!(s.unfreeze_queue(&0), 0);
    assert!(
        !s.is_frozen(&0),
        "the mark is lifted even with nothing forwarded"
    );
    s.check_invariants();
}
