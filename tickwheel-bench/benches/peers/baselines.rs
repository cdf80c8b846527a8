//! The `BTreeMap` and lazy `BinaryHeap` baselines.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use super::Peer;

/// `BTreeMap<(deadline, seq), u64>`: the ordered-map baseline.
pub struct BTree {
    map: BTreeMap<(u64, u64), u64>,
    seq: u64,
}

impl Peer for BTree {
    const NAME: &'static str = "BTreeMap";
    type Key = (u64, u64);
    type Deadline = u64;

    fn new(_lanes: usize, _capacity: usize) -> Self {
        BTree {
            map: BTreeMap::new(),
            seq: 0,
        }
    }
    #[inline]
    fn deadline(&self, ms: u64) -> u64 {
        ms
    }
    #[inline]
    fn insert(&mut self, deadline: u64, lane: u64) -> (u64, u64) {
        self.seq += 1;
        self.map.insert((deadline, self.seq), lane);
        (deadline, self.seq)
    }
    #[inline]
    fn cancel(&mut self, key: (u64, u64)) -> bool {
        self.map.remove(&key).is_some()
    }
    #[inline]
    fn reset(&mut self, key: (u64, u64), deadline: u64) -> (u64, u64) {
        let lane = self.map.remove(&key).expect("pending");
        self.insert(deadline, lane)
    }
    #[inline]
    fn poll(&mut self, now: u64, fired: &mut Vec<u64>) {
        while let Some(entry) = self.map.first_entry() {
            if entry.key().0 > now {
                break;
            }
            fired.push(entry.remove());
        }
    }
}

/// `BinaryHeap` with lazy deletion: the heap holds (deadline, seq, slot, generation); values
/// live in a generation-checked slab, so cancel is O(1) and stale heap entries are skipped
/// when they surface. The heap is rebuilt when stale entries outnumber live ones (bounded
/// memory, amortised O(1) per cancel).
pub struct LazyHeap {
    heap: BinaryHeap<Reverse<(u64, u64, u32, u32)>>,
    slots: Vec<(u32, Option<u64>)>,
    free: Vec<u32>,
    live: usize,
    seq: u64,
}

impl LazyHeap {
    #[inline]
    fn push(&mut self, deadline: u64, slot: u32, generation: u32) {
        self.seq += 1;
        self.heap
            .push(Reverse((deadline, self.seq, slot, generation)));
    }

    fn maybe_compact(&mut self) {
        if self.heap.len() > 2 * self.live + 64 {
            let slots = &self.slots;
            self.heap
                .retain(|Reverse((_, _, s, g))| slots[*s as usize].0 == *g);
        }
    }
}

impl Peer for LazyHeap {
    const NAME: &'static str = "BinaryHeap";
    type Key = (u32, u32);
    type Deadline = u64;

    fn new(_lanes: usize, capacity: usize) -> Self {
        LazyHeap {
            heap: BinaryHeap::with_capacity(capacity),
            slots: Vec::with_capacity(capacity),
            free: Vec::with_capacity(capacity),
            live: 0,
            seq: 0,
        }
    }
    #[inline]
    fn deadline(&self, ms: u64) -> u64 {
        ms
    }
    #[inline]
    fn insert(&mut self, deadline: u64, lane: u64) -> (u32, u32) {
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize].1 = Some(lane);
                slot
            }
            None => {
                self.slots.push((0, Some(lane)));
                (self.slots.len() - 1) as u32
            }
        };
        let generation = self.slots[slot as usize].0;
        self.push(deadline, slot, generation);
        self.live += 1;
        (slot, generation)
    }
    #[inline]
    fn cancel(&mut self, (slot, generation): (u32, u32)) -> bool {
        let entry = &mut self.slots[slot as usize];
        if entry.0 != generation || entry.1.is_none() {
            return false;
        }
        entry.0 = entry.0.wrapping_add(1);
        entry.1 = None;
        self.free.push(slot);
        self.live -= 1;
        self.maybe_compact();
        true
    }
    #[inline]
    fn reset(&mut self, (slot, generation): (u32, u32), deadline: u64) -> (u32, u32) {
        let entry = &mut self.slots[slot as usize];
        debug_assert_eq!(entry.0, generation);
        entry.0 = entry.0.wrapping_add(1);
        let generation = entry.0;
        self.push(deadline, slot, generation);
        self.maybe_compact();
        (slot, generation)
    }
    #[inline]
    fn poll(&mut self, now: u64, fired: &mut Vec<u64>) {
        while let Some(&Reverse((deadline, _, slot, generation))) = self.heap.peek() {
            let entry = &mut self.slots[slot as usize];
            if entry.0 != generation {
                self.heap.pop();
                continue;
            }
            if deadline > now {
                break;
            }
            self.heap.pop();
            let lane = entry.1.take().expect("live entry");
            entry.0 = entry.0.wrapping_add(1);
            self.free.push(slot);
            self.live -= 1;
            fired.push(lane);
        }
    }
}
