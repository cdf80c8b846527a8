//! The due queue: timers whose deadline is at or before `elapsed`, waiting to be returned.
//!
//! Two sources feed it, and it hands them out merged in `(deadline, seq)` order:
//! - `ready`, a FIFO of the timers a processed level-0 slot found due. They all have
//!   `deadline == elapsed` at the time and arrive in slot order, which is insertion order, so
//!   no sorting is needed;
//! - `past`, a min-heap of timers inserted or reset to a deadline already reached (rare).
//!
//! `seq` is taken from one counter for both, so equal deadlines come out in the order they
//! became due. The queue is always emptied before `elapsed` advances, which is what keeps
//! every `ready` deadline no later than any future one.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::slots::STALE_SLACK;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct DueRef {
    pub(crate) deadline: u64,
    pub(crate) seq: u64,
    pub(crate) r: u64,
}

#[derive(Debug, Default)]
pub(crate) struct DueQueue {
    ready: VecDeque<DueRef>,
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

    /// Appends a timer that became due when its slot was processed (deadline == elapsed).
    #[inline]
    pub(crate) fn push_ready(&mut self, deadline: u64, r: u64) {
        let seq = self.next_seq();
        self.ready.push_back(DueRef { deadline, seq, r });
        self.live += 1;
    }

    /// Adds a timer whose deadline had already been reached when it was inserted or reset.
    pub(crate) fn push_past(&mut self, deadline: u64, r: u64) {
        let seq = self.next_seq();
        self.past.push(Reverse(DueRef { deadline, seq, r }));
        self.live += 1;
    }

    /// Removes the earliest reference, live or stale. The caller resolves it and calls
    /// [`DueQueue::taken`] when it was live.
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<DueRef> {
        let take_past = match (self.ready.front(), self.past.peek()) {
            (None, None) => return None,
            (Some(_), None) => false,
            (None, Some(_)) => true,
            (Some(a), Some(Reverse(b))) => b < a,
        };
        if take_past {
            self.past.pop().map(|Reverse(d)| d)
        } else {
            self.ready.pop_front()
        }
    }

    /// A live timer was taken out (returned, cancelled or moved away).
    /// Returns true when the queue should be compacted.
    #[inline]
    pub(crate) fn unlink(&mut self) -> bool {
        debug_assert!(self.live > 0, "unlink from an empty due queue");
        self.live -= 1;
        if self.live == 0 {
            self.ready.clear();
            self.past.clear();
            return false;
        }
        self.refs() > 2 * self.live + STALE_SLACK
    }

    pub(crate) fn compact(&mut self, current: impl Fn(u64) -> bool) {
        self.ready.retain(|d| current(d.r));
        self.past.retain(|Reverse(d)| current(d.r));
    }

    /// The smallest deadline of any reference (live or stale): never later than the
    /// earliest live one.
    pub(crate) fn min_deadline(&self) -> Option<u64> {
        if self.live == 0 {
            return None;
        }
        let a = self.ready.front().map(|d| d.deadline);
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
        self.ready.len() + self.past.len()
    }

    pub(crate) fn bytes_held(&self) -> usize {
        (self.ready.capacity() + self.past.capacity()) * std::mem::size_of::<DueRef>()
    }

    pub(crate) fn clear(&mut self) {
        self.ready.clear();
        self.past.clear();
        self.live = 0;
    }

    pub(crate) fn shrink_to_fit(&mut self, current: impl Fn(u64) -> bool) {
        self.compact(current);
        self.ready.shrink_to_fit();
        self.past.shrink_to_fit();
    }
}
