//! A shard's memory: what it holds ([`ShardState::bytes_held`]) and giving back what it
//! does not use ([`ShardState::shrink_to_fit`]).

use std::hash::Hash;
use std::mem::size_of;

use super::{Entry, QueueRec, ShardState};
use crate::wheel::Wheel;

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> ShardState<Q, K, T> {
    /// Gives back what the shard does not use: the wheel's (see `Wheel::shrink_to_fit`), the
    /// maps' spare capacity, the done buffer, and the vacant tails of the entry slab and of
    /// the queue records. O(capacity).
    ///
    /// Only the vacant **tail** of the slab goes: entry indexes are held outside the shard —
    /// by each `Due` and `DueBatch` item, and by the done list — so an entry never moves.
    /// Vacant entries below the highest used one stay allocated, and the free lists are
    /// reordered so that the lowest free index is reused first, which lets a later shrink
    /// give back more. Queue records are treated the same way (entries hold their index).
    pub(crate) fn shrink_to_fit(&mut self) {
        self.wheel.shrink_to_fit();
        self.ids.shrink_to_fit();
        self.queue_ids.shrink_to_fit();
        self.frozen.shrink_to_fit();
        self.held.shrink_to_fit();
        self.limited.shrink_to_fit();
        self.done_buffer = Vec::new();
        shrink_slab(&mut self.entries, &mut self.free_entries);
        shrink_slab(&mut self.queue_recs, &mut self.free_queues);
    }

    /// Bytes the shard state holds on the heap, by capacity (not length): the entry slab
    /// and its free list, the wheel, the id and queue maps, the frozen and hold marks, the
    /// limited queues' map, the queue records, the done buffer, and an estimate of the staged set (a `BTreeMap`: its items' size, nodes'
    /// overhead not counted). Not what `K`, `Q` or `T` themselves own on the heap.
    pub(crate) fn bytes_held(&self) -> usize {
        let wheel_heap = self.wheel.stats().bytes_held - size_of::<Wheel<u32>>();
        self.entries.capacity() * size_of::<Option<Entry<Q, K, T>>>()
            + self.free_entries.capacity() * size_of::<u32>()
            + wheel_heap
            + self.ids.bytes_held()
            + self.queue_ids.allocation_size()
            + self.frozen.allocation_size()
            + self.held.allocation_size()
            + self.limited.allocation_size()
            + self.queue_recs.capacity() * size_of::<Option<QueueRec<Q>>>()
            + self.free_queues.capacity() * size_of::<u32>()
            + self.done_buffer.capacity() * size_of::<u32>()
            + self.staged.len() * size_of::<((u64, u64), u32)>()
    }
}

/// Drops the vacant tail of `slab`, gives its spare capacity back, and rebuilds `free`
/// (indexes of the vacant slots) in descending order, so that `free.pop()` reuses the
/// lowest index first.
fn shrink_slab<E>(slab: &mut Vec<Option<E>>, free: &mut Vec<u32>) {
    while let Some(None) = slab.last() {
        slab.pop();
    }
    slab.shrink_to_fit();
    free.retain(|&index| (index as usize) < slab.len());
    free.sort_unstable_by(|a, b| b.cmp(a));
    free.shrink_to_fit();
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use crate::sync::Scheduler;

    #[test]
    fn a_shrink_keeps_every_invariant_and_reuses_the_lowest_entries_first() {
        let t0 = Instant::now();
        let s = Scheduler::builder().shards(2).origin(t0).build();
        let later = t0 + Duration::from_secs(60);
        for id in 0..1000u32 {
            s.schedule(id % 7, id, if id >= 990 { t0 } else { later }, id)
                .unwrap();
        }
        let mut batch = s.pop_due(t0 + Duration::from_millis(1), 10);
        let held: Vec<_> = batch.by_ref().take(4).collect();
        drop(batch.next()); // done, not settled
        for id in 0..990 {
            if id % 5 != 0 {
                s.cancel(&id);
            }
        }
        s.check_invariants();
        s.shrink_to_fit();
        s.check_invariants();
        for id in 2000..2100u32 {
            s.schedule(1, id, later, id).unwrap();
        }
        s.check_invariants();
        drop((held, batch));
        s.shrink_to_fit();
        s.check_invariants();
        assert_eq!((s.len(), s.in_flight_len()), (198 + 100 + 5, 0));
    }

    #[test]
    fn shrink_slab_drops_the_vacant_tail_and_orders_the_free_list() {
        let mut slab = vec![None, Some(1), None, None, Some(4), None, None];
        let mut free = vec![5, 0, 6, 3, 2];
        super::shrink_slab(&mut slab, &mut free);
        assert_eq!(slab.len(), 5);
        assert_eq!(free, [3, 2, 0], "lowest popped first");
    }
}
