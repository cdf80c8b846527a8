//! [`Wheel::peek`]: which timer a poll returns next, without taking it out.
//!
//! The wheel keeps no ordered index of its timers, so `peek` searches. It looks in the order a
//! poll would hand timers out, and only as far as a timer could still be earlier than the best
//! one found:
//! - the due queue: its due part, then its sorted run while the deadlines the run's references
//!   carry are no later than the best;
//! - then the occupied slots, in the order of their start ticks. It stops at the first slot
//!   that starts at or after the best deadline. Every timer filed in a slot is due no earlier
//!   than the slot's start, also a timer whose deadline was moved later while it stayed there.
//!   In a level-2 slot (4 096 ticks, the busiest at a million timers over a minute) each
//!   reference carries the deadline it was filed for, which the timer's is never before: only
//!   the references filed no later than the best found so far load their entries, about
//!   ln(n) of n in a slot filed in random order, plus the stale ones met among them.
//!
//! When the earliest timer is due within 64 ticks, this is one level-0 slot: the timers of one
//! tick.

use super::arena::filed_deadline;
use super::level::slot_start;
use super::poll::RUN_LEVELS;
use super::{TimerKey, Wheel};

impl<T> Wheel<T> {
    /// The key and deadline (in ticks) of the pending timer with the earliest deadline, or
    /// `None` when the wheel is empty. Takes nothing out and changes nothing.
    ///
    /// Among timers with that deadline it names the one [`poll`](Wheel::poll) returns first
    /// when none of them was reset (insertion order); among reset ones, one of them. Its
    /// deadline may be at or before [`elapsed`](Wheel::elapsed) (due, not yet polled).
    ///
    /// Cost: O(timers in the earliest occupied slot, plus the stale references met on the
    /// way), in a level-2 slot reading the references only and loading the entries of about
    /// ln(timers) of them; a level-0 slot holds the timers of one tick. It reads the slots'
    /// references as they are, so cancels since the last poll cost no extra work here. Unlike
    /// [`next_expiration`](Wheel::next_expiration), which is O(levels) and may answer the
    /// tick a slot cascades, this is the exact next deadline.
    ///
    /// # Example
    ///
    /// ```
    /// use tickwheel::Wheel;
    ///
    /// let mut wheel = Wheel::new();
    /// wheel.insert(5_000, "later");
    /// let soon = wheel.insert(300, "soon");
    /// let tie = wheel.insert(300, "also soon");
    /// assert_eq!(wheel.peek(), Some((soon, 300)));
    /// assert_eq!(wheel.next_expiration(), Some(256), "the tick its slot cascades");
    /// wheel.cancel(soon);
    /// assert_eq!(wheel.peek(), Some((tie, 300)));
    /// assert_eq!(wheel.poll(300).map(|e| e.key), Some(tie));
    /// ```
    pub fn peek(&self) -> Option<(TimerKey, u64)> {
        if self.is_empty() {
            return None;
        }
        let best = std::cell::Cell::new(None::<(TimerKey, u64)>);
        // A strictly earlier deadline replaces the best: equal ones keep the first found,
        // which is the order a poll hands them out.
        let offer = |r: u64| {
            if let Some((key, deadline)) = self.arena.resolve_key(r) {
                if best.get().is_none_or(|(_, d)| deadline < d) {
                    best.set(Some((key, deadline)));
                }
            }
        };
        self.due.visit_in_order(
            self.elapsed,
            |r| self.arena.resolve_deadline(r).map(|(_, deadline)| deadline),
            offer,
            || best.get().map(|(_, deadline)| deadline),
        );
        for (level, slot, refs) in self.levels.occupied_in_order() {
            let start = slot_start(self.elapsed, level, slot);
            if best.get().is_some_and(|(_, deadline)| start >= deadline) {
                break;
            }
            // The skip holds only where a timer reset earlier is filed again: the run's
            // levels (see `Wheel::reset`), and only at level 2 do the digits fill a slot.
            if level == 2 && RUN_LEVELS.contains(&level) {
                // Tens of thousands of timers at a million: a reference filed later than
                // the best found names a timer no earlier, so its entry is not loaded.
                for &r in refs {
                    let filed = filed_deadline(r, start);
                    if best.get().is_none_or(|(_, deadline)| filed <= deadline) {
                        offer(r);
                    }
                }
            } else {
                refs.iter().for_each(|&r| offer(r));
            }
        }
        best.get()
    }

    /// [`next_expiration`](Wheel::next_expiration), but `u64::MAX` when every pending timer
    /// has its deadline at `u64::MAX`: the tick the clock layers file a *never due* timer at
    /// (see [`crate::clock`]). `None` when the wheel is empty.
    ///
    /// A timer at `u64::MAX` holds `next_expiration` at the tick its slot cascades: all ones
    /// above the digits of its level, zeros below. Only for such an answer can the earliest
    /// timer be never due, and only then does this [`peek`](Wheel::peek) (its cost);
    /// otherwise O(levels), as `next_expiration`.
    pub(crate) fn next_expiration_or_never(&self) -> Option<u64> {
        let tick = self.next_expiration()?;
        let below = !tick;
        let cascade_of_max = tick != 0 && below & below.wrapping_add(1) == 0;
        if cascade_of_max && tick != u64::MAX && self.peek()?.1 == u64::MAX {
            return Some(u64::MAX);
        }
        Some(tick)
    }
}

/// A summary, not the structure (which is tens of kilobytes of slots):
/// `Wheel { len, elapsed, next_expiration, stale }`. O(slots), as
/// [`stats`](Wheel::stats).
///
/// ```
/// use tickwheel::Wheel;
///
/// let mut wheel = Wheel::new();
/// wheel.insert(100, "retry");
/// assert_eq!(
///     format!("{wheel:?}"),
///     "Wheel { len: 1, elapsed: 0, next_expiration: Some(64), stale: 0 }"
/// );
/// ```
impl<T> std::fmt::Debug for Wheel<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wheel")
            .field("len", &self.len())
            .field("elapsed", &self.elapsed)
            .field("next_expiration", &self.next_expiration())
            .field("stale", &self.stats().stale)
            .finish()
    }
}
