//! Looking without taking: `lookup`, `with_value`, `queue_members`, `queue_counts`, and what
//! they and a drain see across a `Due::retry_at`.

use std::time::{Duration, Instant};

use tickwheel::sync::{Cancel, IdState, Member, QueueCounts, Retried, Scheduler};

fn ms(t0: Instant, n: u64) -> Instant {
    t0 + Duration::from_millis(n)
}

fn states(sched: &Scheduler<String, u32, char>, q: &str) -> Vec<(u32, IdState)> {
    let members = sched.queue_members(q);
    members.into_iter().map(|m| (m.id, m.state)).collect()
}

#[test]
fn lookup_follows_an_id_through_every_state() {
    let t0 = Instant::now();
    let sched: Scheduler<String, u32, char> = Scheduler::builder().shards(3).origin(t0).build();
    assert_eq!(sched.lookup(&1), None);
    sched.schedule("a".into(), 1, ms(t0, 5), 'x').unwrap();
    let info = sched.lookup(&1).unwrap();
    assert_eq!(
        (info.queue.as_str(), info.state, info.deadline),
        ("a", IdState::Pending, ms(t0, 5))
    );
    assert_eq!(sched.with_value(&1, |v| *v), Some('x'));

    let due = sched.pop_due(ms(t0, 5), 10).next().unwrap();
    assert_eq!(sched.lookup(&1).map(|i| i.state), Some(IdState::InFlight));
    assert_eq!(
        sched.with_value(&1, |v| *v),
        None,
        "the Due holds the value"
    );

    sched.freeze_queue("a");
    assert_eq!(due.retry_at(ms(t0, 9)), Ok(Retried::Forwarded));
    let info = sched.lookup(&1).unwrap();
    assert_eq!((info.state, info.deadline), (IdState::Forwarded, ms(t0, 9)));
    assert_eq!(sched.with_value(&1, |v| *v), Some('x'));

    assert_eq!(sched.unfreeze_queue("a"), 1);
    assert_eq!(sched.lookup(&1).map(|i| i.state), Some(IdState::Pending));
    assert_eq!(sched.cancel(&1), Cancel::Cancelled('x'));
    assert_eq!(sched.lookup(&1), None);
}

#[test]
fn members_come_in_delivery_order_whatever_the_shard_count() {
    let t0 = Instant::now();
    let mut answers = Vec::new();
    for shards in [1, 2, 7] {
        let sched: Scheduler<String, u32, char> =
            Scheduler::builder().shards(shards).origin(t0).build();
        // Deadlines 30, 10, 20, 10, ...: equal deadlines keep schedule order.
        for id in 0..12u32 {
            let q = if id % 3 == 0 { "other" } else { "q" };
            sched
                .schedule(q.into(), id, ms(t0, [30, 10, 20][id as usize % 3]), 'v')
                .unwrap();
        }
        let mut batch = sched.pop_due(ms(t0, 10), 2);
        let first = batch.next().unwrap();
        drop(batch); // the second goes back, pending
        let members = sched.queue_members("q");
        let ids: Vec<u32> = members.iter().map(|m| m.id).collect();
        assert_eq!(ids, [1, 4, 7, 10, 2, 5, 8, 11], "{shards} shards");
        assert_eq!(
            members[0],
            Member {
                id: 1,
                state: IdState::InFlight,
                deadline: ms(t0, 10)
            }
        );
        assert!(members[1..].iter().all(|m| m.state == IdState::Pending));
        assert_eq!(sched.queue_counts("q"), counts(7, 1, 0));
        assert_eq!(sched.queue_counts("other").total(), 4);
        assert_eq!(sched.queue_counts("absent"), QueueCounts::default());
        assert!(sched.queue_members("absent").is_empty());
        answers.push(states(&sched, "q"));
        drop(first);
        assert_eq!(
            sched.queue_counts("q").in_flight,
            0,
            "a done Due is not in flight"
        );
    }
    assert!(answers.windows(2).all(|w| w[0] == w[1]), "{answers:?}");
}

#[test]
fn counts_agree_with_the_other_views() {
    let t0 = Instant::now();
    let sched: Scheduler<String, u32, char> = Scheduler::builder().shards(4).origin(t0).build();
    for id in 0..40u32 {
        sched
            .schedule(format!("q{}", id % 2), id, ms(t0, u64::from(id)), 'v')
            .unwrap();
    }
    let batch: Vec<_> = sched.pop_due(ms(t0, 9), 100).collect();
    assert_eq!(batch.len(), 10);
    let (a, b) = (sched.queue_counts("q0"), sched.queue_counts("q1"));
    assert_eq!(a, counts(15, 5, 0));
    assert_eq!(a.pending, sched.queue_len("q0"));
    assert_eq!(a.in_flight, sched.queue_in_flight("q0").len());
    assert_eq!(a.pending + b.pending, sched.len());
    assert_eq!(a.in_flight + b.in_flight, sched.in_flight_len());
    let frozen = sched.freeze_queue("q1");
    assert_eq!(frozen.pending.len(), 15);
    for due in batch {
        if due.queue() == "q1" {
            assert_eq!(due.retry_at(t0), Ok(Retried::Forwarded));
        }
    }
    // Forwarded members are pending, as `len` and `stats().pending` count them.
    let q1 = sched.queue_counts("q1");
    assert_eq!(q1, counts(5, 0, 5));
    assert_eq!(q1.total(), 5);
    assert_eq!(q1.pending, sched.queue_len("q1"));
    let q0 = sched.queue_counts("q0");
    assert_eq!(q0.pending + q1.pending, sched.len());
    assert_eq!(q0.pending + q1.pending, sched.stats().pending);
    assert_eq!(q0.forwarded + q1.forwarded, sched.stats().forwarded);
    assert!(
        states(&sched, "q1")
            .iter()
            .all(|&(_, s)| s == IdState::Forwarded)
    );
}

#[test]
fn a_drain_lists_a_timer_in_flight_before_its_retry_and_takes_it_after() {
    let t0 = Instant::now();
    let sched: Scheduler<String, u32, char> = Scheduler::builder().shards(2).origin(t0).build();
    sched.schedule("q".into(), 1, t0, 'a').unwrap();
    sched.schedule("q".into(), 2, ms(t0, 50), 'b').unwrap();
    let due = sched.pop_due(t0, 10).next().unwrap();

    let before = sched.drain_queue("q");
    assert_eq!(
        (before.cancelled, before.in_flight),
        (vec![(2, 'b')], vec![1])
    );
    assert_eq!(
        sched.len() + sched.in_flight_len(),
        1,
        "counted while in flight"
    );

    assert_eq!(due.retry_at(ms(t0, 20)), Ok(Retried::Pending));
    assert_eq!(
        sched.len() + sched.in_flight_len(),
        1,
        "counted after the retry"
    );
    assert_eq!(states(&sched, "q"), [(1, IdState::Pending)]);

    let after = sched.drain_queue("q");
    assert_eq!((after.cancelled, after.in_flight), (vec![(1, 'a')], vec![]));
    assert!(
        sched.is_empty() && sched.pop_due(ms(t0, 100), 10).is_empty(),
        "never doubled"
    );
}

/// The counts as (pending, in flight, forwarded): `QueueCounts` is `#[non_exhaustive]`.
fn counts(pending: usize, in_flight: usize, forwarded: usize) -> QueueCounts {
    let mut c = QueueCounts::default();
    (c.pending, c.in_flight, c.forwarded) = (pending, in_flight, forwarded);
    c
}
