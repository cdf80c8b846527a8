//! `Scheduler::import` takes the queue as `schedule` does, for `String`, `&'static str` and
//! `Arc<str>` names and their borrowed forms; `QueueCounts::pending` counts forwarded members
//! as `len()`, `queue_len` and `SchedulerStats::pending` do, through freeze, retry,
//! `take_forwarded` and `unfreeze_queue`, on one shard and on many.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tickwheel::sync::{FrozenEntry, QueueCounts, Retried, Scheduler};

fn entries(ids: std::ops::Range<u32>, at: Instant) -> Vec<FrozenEntry<u32, u32>> {
    ids.map(|id| FrozenEntry { id, at, value: id }).collect()
}

#[test]
#[allow(clippy::needless_borrows_for_generic_args)] // the borrowed form is what is tested
fn import_takes_static_str_queues_as_schedule_does() {
    let t0 = Instant::now();
    let sched: Scheduler<&'static str, u32, u32> = Scheduler::builder().origin(t0).build();
    sched.schedule("q", 100, t0, 100).unwrap();
    assert_eq!(sched.import("q", entries(0..2, t0)).imported, 2);
    assert_eq!(sched.import(&"q", entries(2..4, t0)).imported, 2);
    let name: &'static str = "q";
    assert_eq!(sched.import(name, entries(4..5, t0)).imported, 1);
    assert_eq!(sched.queue_len("q"), 6);
    assert_eq!(sched.queues(), vec!["q"]);
}

#[test]
#[allow(clippy::needless_borrows_for_generic_args)] // the borrowed form is what is tested
fn import_takes_string_queues_owned_and_borrowed() {
    let t0 = Instant::now();
    let sched: Scheduler<String, u32, u32> = Scheduler::builder().origin(t0).shards(8).build();
    assert_eq!(sched.import("q", entries(0..2, t0)).imported, 2);
    assert_eq!(
        sched.import(String::from("q"), entries(2..4, t0)).imported,
        2
    );
    let owned = String::from("q");
    assert_eq!(sched.import(&owned, entries(4..6, t0)).imported, 2);
    assert_eq!(sched.import(owned.as_str(), entries(6..7, t0)).imported, 1);
    // Idempotent by id across forms.
    let again = sched.import("q", entries(0..7, t0));
    assert_eq!((again.imported, again.present.len()), (0, 7));
    assert_eq!(sched.queue_len("q"), 7);
}

#[test]
#[allow(clippy::needless_borrows_for_generic_args)] // the borrowed form is what is tested
fn import_takes_arc_str_queues_owned_and_borrowed() {
    let t0 = Instant::now();
    let sched: Scheduler<Arc<str>, u32, u32> = Scheduler::builder().origin(t0).build();
    let q: Arc<str> = Arc::from("q");
    assert_eq!(sched.import(Arc::clone(&q), entries(0..2, t0)).imported, 2);
    assert_eq!(sched.import(&q, entries(2..3, t0)).imported, 1);
    sched.schedule(Arc::clone(&q), 10, t0, 10).unwrap();
    assert_eq!(sched.queue_len("q"), 4);
    // Frozen: every entry refused, none lost.
    // freeze_queue needs a borrowed form that makes an owned `Arc<str>`: `&q`, not `"q"`.
    let frozen = sched.freeze_queue(&q);
    assert_eq!(frozen.pending.len(), 4);
    let refused = sched.import(&q, entries(20..23, t0));
    assert_eq!((refused.imported, refused.refused.len()), (0, 3));
}

fn check(sched: &Scheduler<String, u32, u32>, q: &str, want: (usize, usize, usize)) {
    let counts: QueueCounts = sched.queue_counts(q);
    let stats = sched.stats();
    assert_eq!(
        (counts.pending, counts.in_flight, counts.forwarded),
        want,
        "{counts:?}"
    );
    assert_eq!(counts.pending, sched.queue_len(q), "{counts:?}");
    assert_eq!(counts.total(), counts.pending + counts.in_flight);
    // One queue only: the scheduler's figures are the queue's.
    assert_eq!(stats.pending, counts.pending, "{stats:?}");
    assert_eq!(stats.forwarded, counts.forwarded, "{stats:?}");
    assert_eq!(stats.in_flight, counts.in_flight, "{stats:?}");
    assert_eq!(sched.len(), counts.pending, "len()");
    assert!(counts.forwarded <= counts.pending);
}

#[test]
fn queue_counts_through_freeze_retry_take_and_unfreeze() {
    for shards in [1, 64] {
        let t0 = Instant::now();
        let sched: Scheduler<String, u32, u32> =
            Scheduler::builder().origin(t0).shards(shards).build();
        for id in 0..10 {
            let at = if id < 4 {
                t0
            } else {
                t0 + Duration::from_secs(60)
            };
            sched.schedule("q".into(), id, at, id).unwrap();
        }
        check(&sched, "q", (10, 0, 0));
        let mut batch = sched.pop_due(t0, 100);
        assert_eq!(batch.len(), 4);
        check(&sched, "q", (6, 4, 0));
        let frozen = sched.freeze_queue("q");
        assert_eq!(frozen.pending.len(), 6);
        check(&sched, "q", (0, 4, 0));
        // Two retried (forwarded), one done, one left in the batch and dropped (forwarded).
        let later = t0 + Duration::from_secs(5);
        for _ in 0..2 {
            let due = batch.next().unwrap();
            assert_eq!(due.retry_at(later), Ok(Retried::Forwarded));
        }
        drop(batch.next().unwrap());
        check(&sched, "q", (2, 1, 2));
        drop(batch);
        check(&sched, "q", (3, 0, 3));
        // Freezing again takes nothing forwarded.
        assert!(sched.freeze_queue("q").pending.is_empty());
        check(&sched, "q", (3, 0, 3));
        if shards == 1 {
            assert_eq!(sched.take_forwarded("q").len(), 3);
            check(&sched, "q", (0, 0, 0));
            assert_eq!(sched.unfreeze_queue("q"), 0);
            assert_eq!(sched.queue_counts("q"), QueueCounts::default());
        } else {
            assert_eq!(sched.unfreeze_queue("q"), 3);
            check(&sched, "q", (3, 0, 0));
            // Each `Due` taken and dropped ends as delivered.
            assert_eq!(sched.pop_due(later, 100).count(), 3);
            check(&sched, "q", (0, 0, 0));
        }
    }
}
