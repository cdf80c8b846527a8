//! A done `Due` (dropped or consumed) ends its timer's in-flight state at once, although the
//! shard finishes it lazily (`src/sync/core.rs`): whatever looks at the id or its queue next
//! — schedule, reschedule, cancel, drain, the counts, `queues`, `stats` — must see it gone,
//! with no `pop_due` in between, in the same thread and across threads.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tickwheel::sync::{Cancel, RescheduleError, Scheduler};

const MS: Duration = Duration::from_millis(1);

fn popped(shards: usize, n: u32) -> (Scheduler<u8, u32, u32>, Instant, Vec<u32>) {
    let t0 = Instant::now();
    let s = Scheduler::builder().shards(shards).origin(t0).build();
    for id in 0..n {
        s.schedule((id % 2) as u8, id, t0, id).unwrap();
    }
    let values = s
        .pop_due(t0 + MS, n as usize)
        .map(|d| d.into_value())
        .collect();
    (s, t0, values)
}

#[test]
fn every_observer_sees_done_dues_gone_without_a_pop_in_between() {
    for shards in [1, 2, 3] {
        let (s, t0, values) = popped(shards, 6);
        assert_eq!(values, [0, 1, 2, 3, 4, 5]);
        assert_eq!((s.len(), s.in_flight_len()), (0, 0));
        assert_eq!(s.stats().in_flight, 0);
        assert!(s.queues().is_empty(), "no member left in any queue");
        assert_eq!(s.cancel(&0), Cancel::NotFound);
        assert_eq!(s.reschedule(&1, t0), Err(RescheduleError::NotFound));
        let drained = s.drain_queue(&0);
        assert!(drained.cancelled.is_empty() && drained.in_flight.is_empty());
        for id in 0..6 {
            s.schedule(7, id, t0, id)
                .expect("a delivered id is free at once");
        }
        assert_eq!(s.queues(), [7]);
    }
}

#[test]
fn a_drain_reports_only_the_dues_not_yet_done() {
    let t0 = Instant::now();
    let s = Scheduler::builder().shards(2).origin(t0).build();
    for id in 0..4u32 {
        s.schedule(0u8, id, t0, id).unwrap();
    }
    let mut batch = s.pop_due(t0 + MS, 4);
    let first = batch.next().unwrap();
    let second = batch.next().unwrap();
    drop(first);
    let drained = s.drain_queue(&0);
    assert_eq!(
        drained.in_flight,
        [1, 2, 3],
        "0 is done; 1 is held; 2, 3 are in the batch"
    );
    drop(second);
    drop(batch); // 2 and 3 go back: pending and due
    let drained = s.drain_queue(&0);
    assert_eq!(drained.cancelled, [(2, 2), (3, 3)]);
    assert!(drained.in_flight.is_empty());
    assert_eq!((s.len(), s.in_flight_len()), (0, 0));
}

#[test]
fn a_due_outliving_its_scheduler_is_harmless() {
    let (s, t0, _) = popped(2, 0);
    s.schedule(0, 1, t0, 1).unwrap();
    let due = s.pop_due(t0 + MS, 1).next().unwrap();
    drop(s);
    assert_eq!(due.into_value(), 1);
}

/// The dispatcher hands each delivered id to another thread, which schedules it again at
/// once: every such schedule must be accepted (the `Due` was done before the id was sent).
#[test]
fn an_id_sent_after_its_due_is_done_is_free_in_the_receiving_thread() {
    let t0 = Instant::now();
    let s = Arc::new(Scheduler::builder().shards(2).origin(t0).build());
    const N: u32 = 20_000;
    for id in 0..N {
        s.schedule(id % 3, id, t0, ()).unwrap();
    }
    let (tx, rx) = mpsc::channel::<u32>();
    let producer = {
        let s = Arc::clone(&s);
        std::thread::spawn(move || {
            for id in rx {
                s.schedule(id % 3, id + N, t0, ()).unwrap();
                s.schedule(id % 3, id, t0 + MS * 1000, ())
                    .expect("done before sent");
                assert_eq!(s.cancel(&id), Cancel::Cancelled(()));
            }
        })
    };
    let (mut delivered, mut resent) = (0, 0);
    while delivered < N {
        for due in s.pop_due(t0 + MS, 64) {
            let id = *due.id();
            drop(due);
            if id < N {
                tx.send(id).unwrap();
                delivered += 1;
            } else {
                resent += 1;
            }
        }
    }
    drop(tx);
    producer.join().unwrap();
    let rest = s.pop_due(t0 + MS, usize::MAX).count() as u32;
    assert_eq!(
        resent + rest,
        N,
        "each id the producer scheduled is delivered once"
    );
    assert_eq!((s.len(), s.in_flight_len()), (0, 0));
}
