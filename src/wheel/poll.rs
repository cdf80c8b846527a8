//! Polling: taking due timers out, advancing `elapsed` to the next occupied slot or the next
//! deadline of the sorted run, and processing slots (cascading, batching, making runs).

use super::arena::{POS_DUE, PREFETCH_BATCH, PREFETCH_MIN, TakeDue, slot_position};
use super::level::{SLOT_BITS, filed_slot_start, level_for, slot_for, slot_start};
use super::{Expired, Wheel};

/// Levels whose slots become the due queue's sorted run when processed (if no run is
/// pending): a counting sort over a level-2 slot's 4 096 ticks replaces two cascades per
/// timer. A level-3 slot spans 262 144 ticks: its counters would outweigh what they save, so
/// it cascades into level 2 first. Level-1 runs (64 ticks) were tried: they save one
/// cascade, but in a cancel-heavy churn a run made every 64 ticks cost more than it saved
/// (see the commit log).
pub(super) const RUN_LEVELS: std::ops::RangeInclusive<usize> = 2..=2;

/// The earlier of two optional ticks.
#[inline]
fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl<T> Wheel<T> {
    /// The next tick at which something becomes due, after a poll found nothing due: the
    /// start of the first occupied slot or the run's next deadline, whichever comes first.
    ///
    /// What `quiet_until` is raised to, so the slot is the first whose bit is set: then
    /// `quiet_until` is no later than any such slot's start, which lets a push into a slot
    /// that already has timers leave it alone (see `lower_quiet_until`). A poll applies the
    /// pending unlinks first, so this is the first occupied slot.
    #[inline]
    fn next_event(&self) -> Option<u64> {
        let slot = self
            .levels
            .first_marked()
            .map(|(level, slot)| slot_start(self.elapsed, level, slot));
        earliest(slot, self.due.run_head().map(|(deadline, _)| deadline))
    }

    /// The tick the first occupied slot starts at (it is processed when `elapsed` gets
    /// there); `None` when every slot is empty.
    #[inline]
    fn first_slot_start(&self) -> Option<u64> {
        self.levels
            .first_occupied()
            .map(|(level, slot)| slot_start(self.elapsed, level, slot))
    }

    /// Sets `quiet_until` exactly, after a poll found nothing more.
    pub(super) fn settle_quiet_until(&mut self) {
        self.quiet_until = if self.due.live() > 0 {
            0
        } else {
            self.next_event().unwrap_or(u64::MAX)
        };
    }

    /// After a timer was taken out for a poll at `now`: when nothing else is due by `now`,
    /// sets `quiet_until` to the next event, as
    /// [`settle_quiet_until`](Self::settle_quiet_until) does for a poll that comes up empty.
    /// Without it, a driver polling every tick would make one more full poll after each
    /// tick's last timer. The run's head is looked at first: while more of the run is due,
    /// that is the whole cost.
    #[inline]
    pub(super) fn quiet_if_done(&mut self, now: u64) {
        // A `now` behind `elapsed` polls at `elapsed`.
        let now = now.max(self.elapsed);
        if self.due.run_head().is_some_and(|(at, _)| at <= now) || self.due.live() > 0 {
            return;
        }
        let next = self.next_event().unwrap_or(u64::MAX);
        if next > now {
            self.quiet_until = next;
        }
    }

    /// See [`Wheel::next_expiration`]. A run timer is reported at the tick its slot would be
    /// processed had it been filed in the levels (its deadline once within 64 ticks), so the
    /// answer does not depend on where the timer waits.
    pub(super) fn next_expiration_tick(&self) -> Option<u64> {
        if let Some(deadline) = self.due.min_deadline() {
            return Some(deadline);
        }
        let slot = self.first_slot_start();
        let run = self.due.run_head().map(|(deadline, _)| {
            if deadline <= self.elapsed {
                deadline
            } else {
                filed_slot_start(deadline, level_for(self.elapsed, deadline))
            }
        });
        earliest(slot, run)
    }

    /// The run's head reference if it is the next timer a poll at `now` takes: due by
    /// `elapsed` with no `past` timer before it, or due by `now` with nothing else due and no
    /// occupied slot starting at or before it. In the second case `elapsed` moves to its
    /// tick, as [`advance_one_slot`](Self::advance_one_slot) would have moved it. The head is
    /// current (`settle_run_head` keeps it so), but its deadline may have been moved later.
    #[inline]
    fn run_head_next(&mut self, now: u64) -> Option<u64> {
        if let Some(r) = self.due.run_head_due(self.elapsed) {
            return Some(r);
        }
        let (at, r) = self.due.run_head()?;
        if at <= self.elapsed || at > now || self.due.live() > 0 {
            return None;
        }
        if self.first_slot_start().is_some_and(|start| start <= at) {
            return None;
        }
        self.elapsed = at;
        Some(r)
    }

    /// Returns the earliest live timer due by `now` (at `elapsed`, or at the run's head when
    /// that comes next: see [`run_head_next`](Self::run_head_next)), skipping stale
    /// references; `None` when a slot must be processed first or nothing is due.
    #[inline]
    pub(super) fn pop_due(&mut self, now: u64) -> Option<Expired<T>> {
        // Fast path: the run's head is the next timer, and current.
        if let Some(r) = self.run_head_next(now) {
            if let TakeDue::Taken(key, live) = self.arena.take_if_due(r, self.elapsed) {
                self.due.skip_run_head();
                self.due.unlink(true);
                self.settle_after_take(); // checks the run's bound
                return Some(Expired {
                    key,
                    deadline: live.deadline,
                    value: live.value,
                });
            }
            // Moved later while it waited: the general path files it again.
        }
        loop {
            self.prefetch_run_ahead();
            let r = self.due.pop(self.elapsed)?;
            match self.arena.take_if_due(r, self.elapsed) {
                TakeDue::Taken(key, live) => {
                    let pos = live.position();
                    let from_run = pos == self.due.run_pos();
                    self.unlink(key.index, pos);
                    if from_run {
                        self.settle_run_head();
                    }
                    return Some(Expired {
                        key,
                        deadline: live.deadline,
                        value: live.value,
                    });
                }
                TakeDue::Stale => {} // cancelled or moved after it became due
                TakeDue::Later(index, deadline) => {
                    // A run timer whose deadline was moved later while it waited there.
                    let pos = self.due.run_pos();
                    self.file(index, deadline);
                    self.unlink(index, pos);
                    self.settle_run_head();
                    self.sweep_if_due();
                }
            }
        }
    }

    /// The run's entries are scattered over the arena: prefetches the next few, about
    /// `RUN_AHEAD` references ahead of the pops that take them (see `DueQueue::run_ahead`).
    #[inline]
    fn prefetch_run_ahead(&mut self) {
        if let Some(ahead) = self.due.run_ahead() {
            self.arena.prefetch(ahead);
        }
    }

    /// [`settle_run_head`](Self::settle_run_head) after the run's head was taken out, inline
    /// for its usual work: drop the stale references at the head (cancelled timers) until a
    /// current one that is due or not yet due. A head whose deadline was moved past
    /// `elapsed` (rare), and the end of the run, go to the full version. In one poll past a
    /// run, the call and the loop's checks per reference took about a third of the
    /// instructions per fired timer.
    #[inline]
    fn settle_after_take(&mut self) {
        self.prefetch_run_ahead();
        while let Some((at, r)) = self.due.run_head() {
            match self.arena.resolve_deadline(r) {
                None => self.due.skip_run_head(),
                Some((_, deadline)) if at > self.elapsed || deadline <= self.elapsed => {
                    // Nothing was filed, so no epoch sweep can be due: only the run's bound.
                    if self.due.run_over_bound() {
                        self.compact_run();
                    }
                    return;
                }
                Some(_) => break,
            }
        }
        self.settle_run_head();
    }

    /// Keeps the run's head current: drops stale references at the head, and files again a
    /// due head whose deadline was moved past `elapsed`. Afterwards the head's deadline is
    /// the run's earliest live deadline, and it is due only if its timer is.
    ///
    /// Each head filed again leaves the run one timer fewer and one stale reference more, so
    /// the run's bound is checked here too (many heads moved later, all filed again at once,
    /// took a run of one live timer past it), and so is an epoch sweep that a filing asked for.
    pub(super) fn settle_run_head(&mut self) {
        while let Some((at, r)) = self.due.run_head() {
            self.prefetch_run_ahead();
            let Some((index, deadline)) = self.arena.resolve_deadline(r) else {
                self.due.skip_run_head();
                continue;
            };
            if at > self.elapsed || deadline <= self.elapsed {
                break;
            }
            self.due.skip_run_head();
            self.file(index, deadline);
            self.due.unlink(true);
        }
        if self.due.run_over_bound() {
            self.compact_run();
        }
        self.sweep_if_due();
    }

    /// Processes the next occupied slot or run deadline if it is due by `now`. Returns false
    /// when nothing is due by `now`; `elapsed` then moves to `now` (never backwards).
    ///
    /// Out of line: it runs once per slot, not per timer, and inlined into `poll_busy` its
    /// loops' field addresses were set up on every poll, the run head's fast path included
    /// (8 instructions a fired timer in a one-poll expiry, callgrind).
    #[inline(never)]
    pub(super) fn advance_one_slot(&mut self, now: u64) -> bool {
        let first = self.levels.first_occupied();
        let start = first.map(|(level, slot)| slot_start(self.elapsed, level, slot));
        let next = earliest(start, self.due.run_head().map(|(deadline, _)| deadline));
        let Some(next) = next.filter(|&next| next <= now) else {
            self.elapsed = self.elapsed.max(now);
            return false;
        };
        debug_assert!(
            next > self.elapsed,
            "occupied slots and the run lie ahead: {first:?} at {start:?}, run at {:?}, elapsed {}",
            self.due.run_head(),
            self.elapsed
        );
        self.elapsed = next;
        if let (Some((level, slot)), true) = (first, start == Some(next)) {
            self.process_slot(level, slot);
        }
        true
    }

    /// Starts loading the arena entries of the batch of references starting at `at` (see
    /// `Arena::prefetch`), if the slot is big enough to gain from it.
    #[inline]
    fn prefetch_batch(&self, refs: &[u64], at: usize) {
        if refs.len() >= PREFETCH_MIN && at < refs.len() {
            let end = refs.len().min(at + PREFETCH_BATCH);
            self.arena.prefetch(&refs[at..end]);
        }
    }

    /// Empties a slot that `elapsed` has reached: its due timers become the due queue's
    /// batch (filtered in place in the slot's own vector), the others are filed lower down;
    /// or, for a slot of [`RUN_LEVELS`] while no run is pending, the slot becomes the run.
    fn process_slot(&mut self, level: usize, slot: usize) {
        if RUN_LEVELS.contains(&level) && self.due.run_is_empty() {
            self.run_slot(level, slot);
            return;
        }
        let (mut refs, _) = self.levels.take(level, slot);
        let elapsed = self.elapsed;
        let mut due = 0;
        // The entries are scattered over the arena: each batch's entries are prefetched
        // together one batch ahead of the batch being processed.
        let len = refs.len();
        self.prefetch_batch(&refs, 0);
        for start in (0..len).step_by(PREFETCH_BATCH) {
            let end = len.min(start + PREFETCH_BATCH);
            self.prefetch_batch(&refs, end);
            for i in start..end {
                // One lookup per reference: check it is current, read the deadline, refile.
                let placed = self.arena.refile_current(refs[i], |deadline| {
                    if deadline <= elapsed {
                        POS_DUE
                    } else {
                        let level = level_for(elapsed, deadline);
                        slot_position(level, slot_for(deadline, level))
                    }
                });
                let Some((deadline, r)) = placed else {
                    continue; // stale: cancelled, or moved to an earlier slot
                };
                if deadline <= elapsed {
                    refs[due] = r;
                    due += 1;
                } else {
                    // A cascade, or a timer whose deadline was moved later while it sat
                    // here. (`quiet_until` is 0 during a poll and set when it ends.)
                    let level = level_for(elapsed, deadline);
                    let _first = self.levels.push(level, slot_for(deadline, level), r);
                }
            }
        }
        refs.truncate(due);
        let spare = if due > 0 {
            self.due.push_batch(elapsed, refs)
        } else {
            refs
        };
        self.levels.restore(level, slot, spare);
        self.after_processing();
    }

    /// Makes a processed slot the due queue's sorted run (see `due.rs`) without loading any
    /// of its entries: they stay filed at the slot's position, which now means the run.
    fn run_slot(&mut self, level: usize, slot: usize) {
        let (refs, live) = self.levels.take(level, slot);
        let width = 1usize << (level as u32 * SLOT_BITS);
        let pos = slot_position(level, slot);
        let spare = self.due.start_run(self.elapsed, width, pos, live, refs);
        self.levels.restore(level, slot, spare);
        if self.due.run_over_bound() {
            self.compact_run();
        }
        self.settle_run_head();
        self.after_processing();
    }

    /// The bounds a processed slot may have crossed: stale references in the levels (the
    /// slot's timers left the levels and their count with them) and epoch sweeps.
    #[inline]
    fn after_processing(&mut self) {
        if self.over_bound() {
            self.sweep_levels();
        }
        self.sweep_if_due();
    }
}
