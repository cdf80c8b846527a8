//! `Scheduler::shrink_to_fit` gives memory back, and `stats().bytes_held` counts what the
//! whole scheduler holds (slab, maps, queue records, wheels), not only its wheels.
//!
//! Regression: 200 000 timers drained to empty left `stats().wheel.bytes_held` at 9.8 MB
//! with nothing to shrink it, and most of the memory (the shards' slabs and maps) was not
//! counted at all.

use std::time::{Duration, Instant};

use tickwheel::sync::{Cancel, ScheduleError, Scheduler};

const MIB: usize = 1 << 20;

/// The reproduction: `n` timers, ids `0..n`, queue `id % 1000`, due in 60 s, 64-byte
/// values.
fn filled(s: &Scheduler<u32, u32, [u8; 64]>, t0: Instant, n: u32) {
    for id in 0..n {
        s.schedule(id % 1000, id, t0 + Duration::from_secs(60), [0u8; 64])
            .unwrap();
    }
}

#[test]
fn a_drained_scheduler_gives_its_memory_back() {
    let t0 = Instant::now();
    let s = Scheduler::builder().origin(t0).build();
    let empty = s.stats().bytes_held;
    filled(&s, t0, 200_000);
    let full = s.stats().bytes_held;
    assert!(
        full > 200_000 * 64,
        "the slab's values are counted: {full} bytes"
    );
    for queue in 0..1000 {
        assert_eq!(s.drain_queue(&queue).cancelled.len(), 200);
    }
    let drained = s.stats();
    assert_eq!((drained.pending, drained.queues), (0, 0));
    assert!(
        drained.bytes_held >= full,
        "capacity stays until shrunk (and the free list grew)"
    );
    s.shrink_to_fit();
    let shrunk = s.stats();
    assert!(
        shrunk.bytes_held < MIB,
        "an empty scheduler ({} shards) holds {} bytes after shrink_to_fit (new: {empty})",
        shrunk.shards,
        shrunk.bytes_held,
    );
    assert!(shrunk.wheel.bytes_held < MIB, "{:?}", shrunk.wheel);
    // Still works, from scratch.
    filled(&s, t0, 1000);
    assert_eq!(s.len(), 1000);
    assert_eq!(s.pop_due(t0 + Duration::from_secs(61), 2000).count(), 1000);
    assert_eq!((s.len(), s.in_flight_len()), (0, 0));
}

#[test]
fn shrinking_keeps_in_flight_dues_and_their_entries() {
    for shards in [1, 3] {
        let t0 = Instant::now();
        let s = Scheduler::builder().shards(shards).origin(t0).build();
        filled(&s, t0, 10_000);
        // The last ids (the highest entries of every slab) come due now.
        for id in 9_900..10_000 {
            s.reschedule(&id, t0).unwrap();
        }
        let mut batch = s.pop_due(t0 + Duration::from_millis(1), 100);
        let held: Vec<_> = batch.by_ref().take(60).collect();
        let done_unsettled: Vec<_> = batch.by_ref().take(20).collect();
        drop(done_unsettled); // done, not settled yet: the shrink settles them first
        // 20 untaken items stay in the open batch.
        for queue in 0..1000 {
            s.drain_queue(&queue);
        }
        assert_eq!((s.len(), s.in_flight_len()), (0, 80));
        let before = s.stats().bytes_held;
        s.shrink_to_fit();
        let after = s.stats();
        assert!(after.bytes_held < before, "{} < {before}", after.bytes_held);
        assert_eq!((after.pending, after.in_flight), (0, 80));

        // Every held Due is still in flight, and ends exactly once.
        for due in &held {
            assert_eq!(s.cancel(due.id()), Cancel::InFlight);
            assert!(matches!(
                s.schedule(0, *due.id(), t0, [1; 64]),
                Err(ScheduleError::InFlight(_))
            ));
        }
        let ids: Vec<u32> = held.iter().map(|d| *d.id()).collect();
        drop(held);
        assert_eq!(s.in_flight_len(), 20, "only the batch's untaken items");
        for &id in &ids {
            s.schedule(0, id, t0, [1; 64])
                .expect("delivered: free again");
            assert!(matches!(
                s.schedule(0, id, t0, [1; 64]),
                Err(ScheduleError::Pending(_))
            ));
        }
        // The untaken items go back, and are delivered once.
        drop(batch);
        assert_eq!((s.len(), s.in_flight_len()), (80, 0));
        s.shrink_to_fit();
        let all: Vec<_> = s.pop_due(t0 + Duration::from_millis(1), 1000).collect();
        assert_eq!(all.len(), 80);
        drop(all);
        s.shrink_to_fit();
        assert_eq!((s.len(), s.in_flight_len(), s.stats().queues), (0, 0, 0));
    }
}
