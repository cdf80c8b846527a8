//! The due queue: timers whose deadline is at or before `elapsed`, waiting to be returned,
//! and the *sorted run*, timers of one processed slot put in deadline order ahead of time.
//!
//! Three sources feed it, and it hands them out in deadline order:
//! - `ready`, the batch of timers a processed level-0 slot found due. They all have
//!   `deadline == elapsed` at the time and arrive in slot order, which is insertion order, so
//!   no sorting is needed. The batch *is* the slot's vector of references, filtered in place
//!   and handed over whole (the slot gets the previous batch's emptied vector back): a timer
//!   that fires is not copied between the slot and the queue;
//! - `run`, the timers of one processed level-1 or level-2 slot, sorted by deadline with a
//!   stable counting sort over the slot's 64 or 4 096 ticks (equal deadlines keep slot
//!   order, which is insertion order). A slot that would cascade each timer through level 1
//!   and level 0 (two more visits to a random arena entry per timer) is visited once; its
//!   timers then come out one deadline after another as `elapsed` reaches each. Only the
//!   front of the run (deadline ≤ `elapsed`) is due; the rest waits, and the wheel advances
//!   `elapsed` to the run's head as it would to an occupied slot;
//! - `past`, a min-heap of timers inserted or reset to a deadline already reached (rare).
//!
//! Order between them, for one `elapsed`: every `ready` timer and every due `run` timer has
//! `deadline == elapsed` (the queue's due part is emptied before `elapsed` advances). The run
//! was made before the batch (a run is made only when nothing is due), and every run and
//! batch timer was inserted before any `past` timer of the same deadline (that one was
//! inserted once its deadline had been reached). So: `past` timers due before `elapsed`,
//! then the due `run`, then `ready`, then `past` timers due at `elapsed` in insert order.
//!
//! The wheel keeps the run's head current (see `Wheel::settle_run_head`), so the head's
//! deadline is the run's earliest live deadline.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::arena::TOUCH_BATCH;
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
    past: BinaryHeap<Reverse<DueRef>>,
    /// Timers really in `ready` and `past`; the rest of their references are stale.
    live: usize,
    seq: u64,
    /// The sorted run: (deadline, reference), by deadline, then slot order. Those before
    /// `run_head` were handed out (or were stale and skipped).
    run: Vec<(u64, u64)>,
    run_head: usize,
    /// Timers really in `run[run_head..]`. The run is emptied when it reaches 0.
    run_live: usize,
    /// Scratch of the counting sort: one counter per tick of the slot, and one more.
    counts: Vec<u32>,
    /// Scratch of the wheel while it makes a run: each timer's deadline less the slot's start.
    offsets: Vec<u32>,
}

impl DueQueue {
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
        self.ready_deadline = deadline;
        self.ready_head = 0;
        let mut spare = std::mem::replace(&mut self.ready, refs);
        spare.clear();
        spare
    }

    /// Adds a timer whose deadline had already been reached when it was inserted or reset.
    pub(crate) fn push_past(&mut self, deadline: u64, r: u64) {
        self.seq += 1;
        let seq = self.seq;
        self.past.push(Reverse(DueRef { deadline, seq, r }));
        self.live += 1;
    }

    /// Whether the run holds no timer: a processed slot may make a new one.
    #[inline]
    pub(crate) fn run_is_empty(&self) -> bool {
        self.run_live == 0
    }

    /// Makes the run from `refs`, current references to timers of a slot starting at `base`
    /// and `width` ticks wide, whose deadlines are `base + offsets[i]` (each below `width`).
    /// A stable counting sort: equal deadlines keep the order of `refs`. O(refs + width).
    pub(crate) fn start_run(&mut self, base: u64, width: usize, refs: &[u64], offsets: Vec<u32>) {
        debug_assert!(self.run_is_empty(), "one run at a time");
        debug_assert_eq!(refs.len(), offsets.len());
        let counts = &mut self.counts;
        counts.clear();
        counts.resize(width + 1, 0);
        for &o in &offsets {
            counts[o as usize + 1] += 1;
        }
        // `counts[o]` becomes where the timers due at `base + o` start.
        for i in 1..=width {
            counts[i] += counts[i - 1];
        }
        self.run.clear();
        self.run.resize(refs.len(), (0, 0));
        for (&r, &o) in refs.iter().zip(&offsets) {
            let at = &mut counts[o as usize];
            self.run[*at as usize] = (base + u64::from(o), r);
            *at += 1;
        }
        self.run_head = 0;
        self.run_live = refs.len();
        self.offsets = offsets;
    }

    /// The scratch vector for the offsets of [`DueQueue::start_run`], emptied.
    pub(crate) fn take_offsets(&mut self) -> Vec<u32> {
        let mut offsets = std::mem::take(&mut self.offsets);
        offsets.clear();
        offsets
    }

    /// The run's first (deadline, reference) not handed out yet.
    #[inline]
    pub(crate) fn run_head(&self) -> Option<(u64, u64)> {
        self.run.get(self.run_head).copied()
    }

    /// The run's references from `TOUCH_BATCH` to `2 × TOUCH_BATCH` past its head when the
    /// head is at a multiple of `TOUCH_BATCH` (once per batch), for `Arena::touch`.
    #[inline]
    pub(crate) fn run_ahead(&self) -> Option<impl Iterator<Item = u64> + '_> {
        if self.run_head % TOUCH_BATCH != 0 {
            return None;
        }
        let start = self.run.len().min(self.run_head + TOUCH_BATCH);
        let end = self.run.len().min(self.run_head + 2 * TOUCH_BATCH);
        Some(self.run[start..end].iter().map(|&(_, r)| r))
    }

    /// Drops the run's head, a stale reference.
    #[inline]
    pub(crate) fn skip_run_head(&mut self) {
        self.run_head += 1;
    }

    /// Removes the earliest due reference, live or stale, and returns it: see the module doc
    /// for the order. The caller resolves it and calls [`DueQueue::unlink`] when it was live.
    #[inline]
    pub(crate) fn pop(&mut self, elapsed: u64) -> Option<u64> {
        let run_due = matches!(self.run.get(self.run_head), Some(&(d, _)) if d <= elapsed);
        let ready = self.ready_head < self.ready.len();
        if let Some(Reverse(top)) = self.past.peek() {
            if top.deadline < elapsed || !(run_due || ready) {
                return self.past.pop().map(|Reverse(d)| d.r);
            }
        }
        if run_due {
            self.run_head += 1;
            return Some(self.run[self.run_head - 1].1);
        }
        if ready {
            self.ready_head += 1;
            return Some(self.ready[self.ready_head - 1]);
        }
        None
    }

    /// A live timer was taken out of the run (`run`) or of `ready`/`past`: returned,
    /// cancelled or moved away. Returns true when the queue should be compacted.
    #[inline]
    pub(crate) fn unlink(&mut self, run: bool) -> bool {
        if run {
            debug_assert!(self.run_live > 0, "unlink from an empty run");
            self.run_live -= 1;
            if self.run_live == 0 {
                self.run.clear();
                self.run_head = 0;
            }
        } else {
            debug_assert!(self.live > 0, "unlink from an empty due queue");
            self.live -= 1;
            if self.live == 0 {
                self.clear_due_refs();
            }
        }
        self.refs() > 2 * (self.live + self.run_live) + STALE_SLACK
    }

    fn clear_due_refs(&mut self) {
        self.ready.clear();
        self.ready_head = 0;
        self.past.clear();
    }

    pub(crate) fn compact(&mut self, current: impl Fn(u64) -> bool) {
        // The handed-out prefixes go first; the rest keep their order.
        self.ready.drain(..self.ready_head);
        self.ready_head = 0;
        self.ready.retain(|&r| current(r));
        self.past.retain(|Reverse(d)| current(d.r));
        self.run.drain(..self.run_head);
        self.run_head = 0;
        self.run.retain(|&(_, r)| current(r));
    }

    /// The smallest deadline of any due reference (in `ready` or `past`, live or stale): never
    /// later than the earliest due timer. `None` when no timer is due there.
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

    /// Timers in `ready` and `past`: due now.
    pub(crate) fn live(&self) -> usize {
        self.live
    }

    /// Timers in the run, due or not.
    #[cfg(test)]
    pub(crate) fn run_live(&self) -> usize {
        self.run_live
    }

    /// References held, live or stale.
    pub(crate) fn refs(&self) -> usize {
        self.ready.len() - self.ready_head + self.past.len() + self.run.len() - self.run_head
    }

    pub(crate) fn bytes_held(&self) -> usize {
        self.ready.capacity() * std::mem::size_of::<u64>()
            + self.past.capacity() * std::mem::size_of::<DueRef>()
            + self.run.capacity() * std::mem::size_of::<(u64, u64)>()
            + (self.counts.capacity() + self.offsets.capacity()) * std::mem::size_of::<u32>()
    }

    pub(crate) fn clear(&mut self) {
        self.clear_due_refs();
        self.live = 0;
        self.run.clear();
        self.run_head = 0;
        self.run_live = 0;
    }

    pub(crate) fn shrink_to_fit(&mut self, current: impl Fn(u64) -> bool) {
        self.compact(current);
        self.ready.shrink_to_fit();
        self.past.shrink_to_fit();
        self.run.shrink_to_fit();
        self.counts = Vec::new();
        self.offsets = Vec::new();
    }
}
