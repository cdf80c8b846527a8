//! The due queue: timers whose deadline is at or before `elapsed`, waiting to be returned.
//!
//! Two sources feed it, and it hands them out merged in `(deadline, seq)` order:
//! - `ready`, the batch of timers a processed slot found due. They all have
//!   `deadline == elapsed` at the time and arrive in slot order, which is insertion order, so
//!   no sorting is needed. The batch *is* the slot's vector of references, filtered in place
//!   and handed over whole (the slot gets the previous batch's emptied vector back): a timer
//!   that fires is not copied between the slot and the queue;
//! - `past`, a min-heap of timers inserted or reset to a deadline already reached (rare).
//!
//! `seq` is taken from one counter for both (a batch takes a run of consecutive numbers), so
//! equal deadlines come out in the order they became due. The queue is always emptied before
//! `elapsed` advances, which is what keeps every `ready` deadline no later than any future
//! one, and what lets one batch replace the last.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::slots::STALE_SLACK;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct DueRef {
    pub(crate) deadline: u64,
    pub(crate) seq: u64,
    pub(crate) r: u64,
}

#[derive(Debug, Default)]
pub(crate) struct DueQueue {
    /// The current batch: references found due by one processed slot, all due at
    /// `ready_deadline`. Those before `ready_head` were handed out already.
    ready: Vec<u64>,
    ready_head: usize,
    ready_deadline: u64,
    /// `seq` of `ready[0]`; `ready[i]` has `ready_seq + i`.
    ready_seq: u64,
    past: BinaryHeap<Reverse<DueRef>>,
    /// Timers really in the queue; the rest of its references are stale.
    live: usize,
    seq: u64,
}

impl DueQueue {
    #[inline]
    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// Takes `refs`, current references to timers a processed slot found due at
    /// `deadline == elapsed`, as the new batch, and returns the previous batch's vector,
    /// emptied, for the slot to reuse. The previous batch must be used up.
    #[inline]
    pub(crate) fn push_batch(&mut self, deadline: u64, refs: Vec<u64>) -> Vec<u64> {
        debug_assert_eq!(
            self.live, 0,
            "a new batch only once the queue is empty: {} due timers wait",
            self.live
        );
        self.live += refs.len();
        self.ready_seq = self.seq + 1;
        self.seq += refs.len() as u64;
        self.ready_deadline = deadline;
        self.ready_head = 0;
        let mut spare = std::mem::replace(&mut self.ready, refs);
        spare.clear();
        spare
    }

    /// Adds a timer whose deadline had already been reached when it was inserted or reset.
    pub(crate) fn push_past(&mut self, deadline: u64, r: u64) {
        let seq = self.next_seq();
        self.past.push(Reverse(DueRef { deadline, seq, r }));
        self.live += 1;
    }

    /// Removes the earliest reference, live or stale, and returns it. The caller resolves it
    /// and calls [`DueQueue::unlink`] when it was live.
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<u64> {
        let take_past = match (self.ready.get(self.ready_head), self.past.peek()) {
            (None, None) => return None,
            (Some(_), None) => false,
            (None, Some(_)) => true,
            (Some(_), Some(Reverse(b))) => {
                (b.deadline, b.seq) < (self.ready_deadline, self.ready_seq + self.ready_head as u64)
            }
        };
        if take_past {
            self.past.pop().map(|Reverse(d)| d.r)
        } else {
            self.ready_head += 1;
            Some(self.ready[self.ready_head - 1])
        }
    }

    /// A live timer was taken out (returned, cancelled or moved away).
    /// Returns true when the queue should be compacted.
    #[inline]
    pub(crate) fn unlink(&mut self) -> bool {
        debug_assert!(self.live > 0, "unlink from an empty due queue");
        self.live -= 1;
        if self.live == 0 {
            self.clear_refs();
            return false;
        }
        self.refs() > 2 * self.live + STALE_SLACK
    }

    fn clear_refs(&mut self) {
        self.ready.clear();
        self.ready_head = 0;
        self.past.clear();
    }

    pub(crate) fn compact(&mut self, current: impl Fn(u64) -> bool) {
        // The handed-out prefix goes first; the rest keep their order and stay inside the
        // batch's run of sequence numbers, so the merge with `past` keeps its order.
        self.ready.drain(..self.ready_head);
        self.ready_seq += self.ready_head as u64;
        self.ready_head = 0;
        self.ready.retain(|&r| current(r));
        self.past.retain(|Reverse(d)| current(d.r));
    }

    /// The smallest deadline of any reference (live or stale): never later than the
    /// earliest live one.
    pub(crate) fn min_deadline(&self) -> Option<u64> {
        if self.live == 0 {
            return None;
        }
        let a = (self.ready_head < self.ready.len()).then_some(self.ready_deadline);
        let b = self.past.peek().map(|Reverse(d)| d.deadline);
        match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub(crate) fn live(&self) -> usize {
        self.live
    }

    pub(crate) fn refs(&self) -> usize {
        self.ready.len() - self.ready_head + self.past.len()
    }

    pub(crate) fn bytes_held(&self) -> usize {
        self.ready.capacity() * std::mem::size_of::<u64>()
            + self.past.capacity() * std::mem::size_of::<DueRef>()
    }

    pub(crate) fn clear(&mut self) {
        self.clear_refs();
        self.live = 0;
    }

    pub(crate) fn shrink_to_fit(&mut self, current: impl Fn(u64) -> bool) {
        self.compact(current);
        self.ready.shrink_to_fit();
        self.past.shrink_to_fit();
    }
}
