//! The due queue: timers whose deadline is at or before `elapsed`, waiting to be returned. It
//! also holds the *sorted run*: the timers of one processed slot, put in deadline order ahead
//! of time.
//!
//! Three sources feed it, and it hands them out in deadline order:
//! - `ready`, the batch of timers a processed level-0 slot found due. They all have
//!   `deadline == elapsed` at the time. They arrive in slot order, which is insertion order, so
//!   no sorting is needed. The batch *is* the slot's vector of references, filtered in place
//!   and handed over whole; the slot gets the previous batch's emptied vector back. So a timer
//!   that fires is not copied between the slot and the queue.
//! - `run`, the timers of one processed level-2 slot, sorted by deadline. The sort is a stable
//!   counting sort over the slot's 4 096 ticks, or for a smaller slot a stable radix sort over
//!   the two base-64 digits. Equal deadlines keep slot order, which is insertion order. The
//!   sort reads the deadline digits each reference carries, so it loads no arena entry. A timer
//!   that would have cascaded through level 1 and level 0 (a visit to a random arena entry at
//!   each) is next visited when it fires. The run's timers come out one deadline after another
//!   as `elapsed` reaches each. Only the front of the run (deadline ≤ `elapsed`) is due; the
//!   rest waits. The wheel advances `elapsed` to the run's head as it would to an occupied
//!   slot.
//! - `past`, a min-heap of timers inserted or reset to a deadline already reached (rare).
//!
//! Order between them, for one `elapsed`: every `ready` timer and every due `run` timer has
//! `deadline == elapsed`, because the queue's due part is emptied before `elapsed` advances.
//! The run was made before the batch, since a run is made only when nothing is due. Every run
//! and batch timer was inserted before any `past` timer of the same deadline, which was
//! inserted once its deadline had been reached. So the order is: `past` timers due before
//! `elapsed`, then the due `run`, then `ready`, then `past` timers due at `elapsed` in insert
//! order.
//!
//! The wheel keeps the run's head current (see `Wheel::settle_run_head`), so the head's
//! deadline is the run's earliest live deadline. A timer whose deadline was moved later while
//! it waited in the slot or the run keeps its old place. It is filed again by its new deadline
//! when the run reaches it.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::slots::STALE_SLACK;

/// How far ahead of the run's head its entries are prefetched, in references, and how many
/// at a time. Measured at 1 M timers (half of them cancelled, so half the references stale):
/// 32/4 and 24/4 took 4-8 % less time per fired timer than bursts of 16 every 16 pops;
/// distances from 16 to 48 and steps from 2 to 16 all came within 5 % of each other.
const RUN_AHEAD: usize = 32;
const RUN_AHEAD_STEP: usize = 4;

/// A run of fewer than `width / COUNTING_SORT_SHARE` references is sorted by radix (or by
/// comparison, under [`COMPARISON_SORT_BELOW`]), the rest by counting over the slot's ticks.
const COUNTING_SORT_SHARE: usize = 8;

/// A run of fewer references than this is sorted by comparison.
const COMPARISON_SORT_BELOW: usize = 24;

/// Bits of a reference's index in a packed sort key: enough for `4 096 / COUNTING_SORT_SHARE`
/// references, leaving 20 bits for the digits of a 4 096-tick slot.
const INDEX_BITS: u32 = 12;

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
    /// The sorted run: references by deadline, then slot order. Those before `run_head` were
    /// handed out (or were stale and skipped). A reference's deadline is
    /// `run_base + (r & run_mask)` (see `arena::make_ref`).
    run: Vec<u64>,
    run_head: usize,
    /// References before this were prefetched by [`DueQueue::run_ahead`].
    run_prefetched: usize,
    run_base: u64,
    run_mask: u64,
    /// Timers really in `run[run_head..]`. The run is emptied when it reaches 0.
    run_live: usize,
    /// The position code of the slot the run was made from: its timers' entries still say
    /// they are filed there (no entry is touched to make a run), and that slot stays empty
    /// while the run is pending. 0 (no position) when there is no run.
    run_pos: u32,
    /// Scratch of the counting sort: one counter per tick of the slot.
    counts: Vec<u32>,
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

    /// Makes the run from the references of the slot at position `pos`, which starts at
    /// `base`, is `width` ticks wide (64 or 4 096) and holds `live` timers (the rest of
    /// `refs` are stale). A stable sort on the deadline digits every reference carries:
    /// equal deadlines keep the order of `refs`. O(refs + width) by counting; when `refs` is
    /// under `width / 8`, O(refs + 128) by radix, or O(refs log refs) by comparison under
    /// 24 references; no arena entry is loaded. Returns `refs`, emptied, for the slot to
    /// reuse.
    pub(crate) fn start_run(
        &mut self,
        base: u64,
        width: usize,
        pos: u32,
        live: usize,
        mut refs: Vec<u64>,
    ) -> Vec<u64> {
        debug_assert!(self.run_is_empty(), "one run at a time");
        if live == 0 {
            refs.clear();
            return refs;
        }
        let mask = width as u64 - 1;
        self.run.clear();
        if refs.len() < COMPARISON_SORT_BELOW {
            // A handful: a stable comparison sort beats clearing and summing counters.
            // Sorted as packed (digits, index) words in the counters' buffer: no allocation,
            // and the index keeps equal deadlines in the order of `refs`.
            let keys = &mut self.counts;
            keys.clear();
            keys.extend(
                refs.iter()
                    .enumerate()
                    .map(|(i, &r)| ((r & mask) as u32) << INDEX_BITS | i as u32),
            );
            keys.sort_unstable();
            let index_mask = (1 << INDEX_BITS) - 1;
            self.run
                .extend(keys.iter().map(|&k| refs[(k & index_mask) as usize]));
        } else if refs.len() < width / COUNTING_SORT_SHARE {
            // Fewer than the slot's ticks: two passes over 64 counters each (at 1 000 timers
            // over a minute, ~70 per level-2 slot, `sort_unstable` of packed keys cost about
            // 55 instructions per reference, as much as handing the timer out).
            self.radix_sort(&mut refs);
        } else {
            self.counting_sort(&refs, width);
        }
        self.run_head = 0;
        self.run_prefetched = 0;
        self.run_base = base;
        self.run_mask = mask;
        self.run_live = live;
        self.run_pos = pos;
        refs.clear();
        refs
    }

    /// Sorts `refs` into the run by their deadline digits, stably: a least-significant-digit
    /// radix sort over the two base-64 digits a reference carries (`width` at most 4 096),
    /// through `refs` and back. O(refs + 128); `refs` is left holding the run's old buffer
    /// (its contents are garbage, the caller clears it).
    fn radix_sort(&mut self, refs: &mut Vec<u64>) {
        const DIGIT: u32 = super::level::SLOT_BITS;
        const DIGIT_MASK: u64 = (1 << DIGIT) - 1;
        let mut low = [0u32; 1 << DIGIT];
        let mut high = [0u32; 1 << DIGIT];
        for &r in refs.iter() {
            low[(r & DIGIT_MASK) as usize] += 1;
            high[(r >> DIGIT & DIGIT_MASK) as usize] += 1;
        }
        let (mut low_at, mut high_at) = (0, 0);
        for (l, h) in low.iter_mut().zip(high.iter_mut()) {
            let (nl, nh) = (*l, *h);
            (*l, *h) = (low_at, high_at);
            low_at += nl;
            high_at += nh;
        }
        self.run.resize(refs.len(), 0);
        for &r in refs.iter() {
            let at = &mut low[(r & DIGIT_MASK) as usize];
            self.run[*at as usize] = r;
            *at += 1;
        }
        for &r in self.run.iter() {
            let at = &mut high[(r >> DIGIT & DIGIT_MASK) as usize];
            refs[*at as usize] = r;
            *at += 1;
        }
        std::mem::swap(&mut self.run, refs);
    }

    /// Sorts `refs` into the run by their deadline digits (`width` values), stably.
    fn counting_sort(&mut self, refs: &[u64], width: usize) {
        let mask = width as u64 - 1;
        let counts = &mut self.counts;
        counts.clear();
        counts.resize(width, 0);
        for &r in refs {
            counts[(r & mask) as usize] += 1;
        }
        // `counts[o]` becomes where the timers due at `base + o` start (an exclusive prefix
        // sum, written as a scan: indexing `counts[i - 1]` cost three times the instructions).
        let mut start = 0;
        for count in counts.iter_mut() {
            let n = *count;
            *count = start;
            start += n;
        }
        self.run.resize(refs.len(), 0);
        for &r in refs {
            let at = &mut counts[(r & mask) as usize];
            self.run[*at as usize] = r;
            *at += 1;
        }
    }

    /// Whether the run's stale references outnumber twice its timers by more than the
    /// slack: time to compact it.
    #[inline]
    pub(crate) fn run_over_bound(&self) -> bool {
        self.run_stale() > 2 * self.run_live + STALE_SLACK
    }

    /// The run's first (deadline, reference) not handed out yet.
    #[inline]
    pub(crate) fn run_head(&self) -> Option<(u64, u64)> {
        let r = *self.run.get(self.run_head)?;
        Some((self.run_base + (r & self.run_mask), r))
    }

    /// The position code the run's timers are filed at (see `run_pos`); 0 without a run.
    #[inline]
    pub(crate) fn run_pos(&self) -> u32 {
        self.run_pos
    }

    /// Stale references in the run: those the slot had, and those cancels and moves left.
    #[inline]
    pub(crate) fn run_stale(&self) -> usize {
        self.run.len() - self.run_head - self.run_live
    }

    /// The next few of the run's references to prefetch (`Arena::prefetch`) while fewer
    /// than [`RUN_AHEAD`] references ahead of the head are: each reference once, about
    /// `RUN_AHEAD` pops before the head reaches it, [`RUN_AHEAD_STEP`] at a time so that the
    /// prefetches spread over the pops instead of coming in bursts that fill the memory
    /// system's queue of outstanding misses.
    #[inline]
    pub(crate) fn run_ahead(&mut self) -> Option<&[u64]> {
        if self.run_head + RUN_AHEAD <= self.run_prefetched || self.run_prefetched >= self.run.len()
        {
            return None;
        }
        let start = self.run_prefetched.max(self.run_head);
        let end = self.run.len().min(start + RUN_AHEAD_STEP);
        self.run_prefetched = end;
        Some(&self.run[start..end])
    }

    /// The run's head reference if it is what [`pop`](Self::pop) would return next: due by
    /// `elapsed`, and no `past` timer to go first. The wheel's fast path for run timers.
    #[inline]
    pub(crate) fn run_head_due(&self, elapsed: u64) -> Option<u64> {
        if !self.past.is_empty() {
            return None;
        }
        let (deadline, r) = self.run_head()?;
        (deadline <= elapsed).then_some(r)
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
        let run_due = matches!(self.run_head(), Some((d, _)) if d <= elapsed);
        let ready = self.ready_head < self.ready.len();
        if let Some(Reverse(top)) = self.past.peek() {
            if top.deadline < elapsed || !(run_due || ready) {
                return self.past.pop().map(|Reverse(d)| d.r);
            }
        }
        if run_due {
            self.run_head += 1;
            return Some(self.run[self.run_head - 1]);
        }
        if ready {
            self.ready_head += 1;
            return Some(self.ready[self.ready_head - 1]);
        }
        None
    }

    /// A live timer was taken out of the run (`run`) or of `ready`/`past`: returned,
    /// cancelled or moved away. Returns true when `ready`/`past` should be compacted (the
    /// run has its own bound, [`DueQueue::run_over_bound`]).
    #[inline]
    pub(crate) fn unlink(&mut self, run: bool) -> bool {
        if run {
            debug_assert!(self.run_live > 0, "unlink from an empty run");
            self.run_live -= 1;
            if self.run_live == 0 {
                self.clear_run();
            }
            return false;
        }
        debug_assert!(self.live > 0, "unlink from an empty due queue");
        self.live -= 1;
        if self.live == 0 {
            self.clear_due_refs();
            return false;
        }
        self.due_refs() > 2 * self.live + STALE_SLACK
    }

    fn clear_run(&mut self) {
        self.run.clear();
        self.run_head = 0;
        self.run_prefetched = 0;
        self.run_live = 0;
        self.run_pos = 0;
    }

    fn clear_due_refs(&mut self) {
        self.ready.clear();
        self.ready_head = 0;
        self.past.clear();
    }

    /// Removes the stale references of `ready` and `past`.
    pub(crate) fn compact(&mut self, current: impl Fn(u64) -> bool) {
        // The handed-out prefix goes first; the rest keep their order.
        self.ready.drain(..self.ready_head);
        self.ready_head = 0;
        self.ready.retain(|&r| current(r));
        self.past.retain(|Reverse(d)| current(d.r));
    }

    /// Removes the stale references of the run with `retain` (which keeps the current
    /// references of a vector, in order); the others keep their order.
    pub(crate) fn compact_run(&mut self, retain: impl FnOnce(&mut Vec<u64>)) {
        self.run.drain(..self.run_head);
        self.run_head = 0;
        self.run_prefetched = 0;
        retain(&mut self.run);
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

    /// Offers the due queue's references to `visit` in the order [`pop`](Self::pop) hands
    /// them out, so that the first current one with the smallest deadline is what a poll
    /// returns first; then the rest of the run, in its order, while its carried deadlines
    /// stay at or below `stop()` (none beyond can be earlier: a run timer's deadline is at
    /// least the one its reference carries). `past` is searched whole for its earliest live
    /// timer (`live` tells a current reference, with its deadline). O(references visited).
    pub(crate) fn visit_in_order(
        &self,
        elapsed: u64,
        live: impl Fn(u64) -> Option<u64>,
        mut visit: impl FnMut(u64),
        stop: impl Fn() -> Option<u64>,
    ) {
        let past = self
            .past
            .iter()
            .filter_map(|Reverse(d)| live(d.r).map(|deadline| (deadline, d.seq, d.r)))
            .min();
        if let Some((_, _, r)) = past.filter(|&(deadline, ..)| deadline < elapsed) {
            visit(r);
        }
        let run = self.run.get(self.run_head..).unwrap_or_default();
        let mut rest = run.len();
        for (i, &r) in run.iter().enumerate() {
            if self.run_base + (r & self.run_mask) > elapsed {
                rest = i;
                break;
            }
            visit(r);
        }
        if let Some(&r) = self
            .ready
            .get(self.ready_head..)
            .unwrap_or_default()
            .iter()
            .find(|&&r| live(r).is_some())
        {
            visit(r);
        }
        if let Some((_, _, r)) = past.filter(|&(deadline, ..)| deadline >= elapsed) {
            visit(r);
        }
        for &r in run.get(rest..).unwrap_or_default() {
            if stop().is_some_and(|best| self.run_base + (r & self.run_mask) > best) {
                break;
            }
            visit(r);
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
        self.due_refs() + self.run.len() - self.run_head
    }

    /// References held in `ready` and `past`, live or stale.
    fn due_refs(&self) -> usize {
        self.ready.len() - self.ready_head + self.past.len()
    }

    pub(crate) fn bytes_held(&self) -> usize {
        self.ready.capacity() * std::mem::size_of::<u64>()
            + self.past.capacity() * std::mem::size_of::<DueRef>()
            + self.run.capacity() * std::mem::size_of::<u64>()
            + self.counts.capacity() * std::mem::size_of::<u32>()
    }

    pub(crate) fn clear(&mut self) {
        self.clear_due_refs();
        self.live = 0;
        self.clear_run();
    }

    pub(crate) fn shrink_to_fit(&mut self, current: impl Fn(u64) -> bool) {
        self.compact(&current);
        self.compact_run(|run| run.retain(|&r| current(r)));
        self.ready.shrink_to_fit();
        self.past.shrink_to_fit();
        self.run.shrink_to_fit();
        self.counts = Vec::new();
    }
}
