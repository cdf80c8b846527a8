//! Where a timer's reference lives: filing it by deadline into a level slot or the due
//! queue, unlinking it (the reference goes stale; its slot's count drops), and the sweeps
//! that keep stale references bounded (see `slots.rs` and `due.rs`).

use super::LEVEL_POSITIONS;
use super::Wheel;
use super::arena::{POS_DUE, POS_UNFILED, slot_position};
use super::level::{filed_slot_start, level_for, slot_for};

impl<T> Wheel<T> {
    /// Files the live entry `index` by its deadline: a level slot, or the due queue.
    #[inline]
    pub(super) fn file(&mut self, index: u32, deadline: u64) {
        if deadline <= self.elapsed {
            self.file_due(index, deadline);
            return;
        }
        let level = level_for(self.elapsed, deadline);
        let slot = slot_for(deadline, level);
        if let Some(r) = self.arena.refile(index, slot_position(level, slot)) {
            if self.levels.push(level, slot, r) {
                lower_quiet_until(&mut self.quiet_until, deadline, level);
            }
        }
    }

    /// Pushes reference `r` of a timer due at `deadline` into `slot` of `level`, and lowers
    /// `quiet_until` to the slot's start if the slot was empty.
    ///
    /// Only a slot's first timer can lower it: `quiet_until` is raised only when a poll
    /// ends, to the start of the first slot whose occupancy bit is set or earlier
    /// (`next_event`), so it is no later than the start of every such slot, also one whose
    /// live timers all have pending unlinks. Most inserts file into a slot that already has
    /// timers; they skip computing the slot's start (90.5 → 87.8 instructions an insert,
    /// callgrind at 1 000 timers). The lowering runs inside the push, before the slot's
    /// vector may grow, so that the level and deadline need not outlive that call: they
    /// were kept on the stack through every insert (87.9 → 82.9 instructions at 1 000
    /// timers, 92.7 → 87.8 into reused entries).
    ///
    /// For inserts only: [`file`](Self::file) (resets, and run timers moved later) lowers
    /// it after the push. Through this function the reset-heavy workload of
    /// `tickwheel-bench/examples/compare` at 1 M timers ran 12 % slower (six alternated
    /// runs, every one slower) for 1 % fewer instructions; why was not found.
    #[inline(always)]
    pub(super) fn push_filed(&mut self, level: usize, slot: usize, r: u64, deadline: u64) {
        let quiet_until = &mut self.quiet_until;
        self.levels.push_then(level, slot, r, || {
            lower_quiet_until(quiet_until, deadline, level);
        });
    }

    /// Files a live entry whose deadline has been reached into the due queue (rare: an
    /// insert or reset into the past).
    #[cold]
    #[inline(never)]
    pub(super) fn file_due(&mut self, index: u32, deadline: u64) {
        if let Some(r) = self.arena.refile(index, POS_DUE) {
            self.due.push_past(deadline, r);
            self.quiet_until = 0;
        }
    }

    /// Removes every stale reference if some epoch asked for it (see `arena.rs`: this is what
    /// keeps a wrapped epoch from making a stale reference look current). Called before each
    /// operation that files timers returns.
    #[inline]
    pub(super) fn sweep_if_due(&mut self) {
        if self.arena.take_sweep_due() {
            self.sweep_stale();
        }
    }

    #[cold]
    #[inline(never)]
    pub(super) fn sweep_stale(&mut self) {
        let arena = &self.arena;
        self.levels.compact_all(|refs| arena.retain_current(refs));
        self.due.compact(|r| arena.resolve(r).is_some());
        self.due.compact_run(|run| arena.retain_current(run));
    }

    /// Compacts the slots with more stale than live references (see `slots.rs`).
    #[cold]
    #[inline(never)]
    pub(super) fn sweep_levels(&mut self) {
        let arena = &self.arena;
        self.levels.sweep(|refs| arena.retain_current(refs));
    }

    /// Removes the due queue's stale references, once they outnumber its timers.
    #[cold]
    #[inline(never)]
    pub(super) fn compact_due(&mut self) {
        let arena = &self.arena;
        self.due.compact(|r| arena.resolve(r).is_some());
    }

    /// Detaches live entry `index` from where it is filed (`pos`); its reference there
    /// becomes stale. The common case, a level slot, is inline: a cancel's work after its
    /// entry's cache miss should be short and branch-light, so that the next cancels' misses
    /// overlap with it.
    #[inline]
    pub(super) fn unlink(&mut self, index: u32, pos: u32) {
        let at = pos.wrapping_sub(1);
        if at < LEVEL_POSITIONS && pos != self.due.run_pos() {
            // The sweep check waits for the flush (at most `PENDING` unlinks later).
            if !self.levels.try_unlink(at as usize) {
                self.unlink_after_flush(at as usize);
            }
            return;
        }
        self.unlink_elsewhere(index, pos);
    }

    /// [`unlink`](Self::unlink) from level slot `at` (an index in all levels) when the
    /// pending unlinks fill their list: they are applied first. The sweep check comes after
    /// this unlink is counted: the timer is already gone from the arena, so a sweep would
    /// drop its reference.
    #[cold]
    #[inline(never)]
    pub(super) fn unlink_after_flush(&mut self, at: usize) {
        let _ = self.levels.flush();
        let held = self.levels.try_unlink(at);
        debug_assert!(held, "a flush empties the pending unlinks");
        if self.over_bound() {
            self.sweep_levels();
        }
    }

    /// Applies the pending unlinks (see `Levels::try_unlink`) and sweeps if they took the
    /// levels over their bound. Every flush that the wheel asks for goes through here, so
    /// that no more than `PENDING` unlinks go unchecked.
    #[inline]
    pub(super) fn flush_unlinks(&mut self) {
        if self.levels.flush() {
            self.sweep_levels();
        }
    }

    /// [`unlink`](Self::unlink) for a reset that moves its timer: out of line, so that
    /// `reset`, whose usual outcome is a timer left where it is, stays small enough to inline
    /// into a caller's loop.
    #[inline(never)]
    pub(super) fn unlink_moved(&mut self, index: u32, pos: u32) {
        self.unlink(index, pos);
    }

    /// [`unlink`](Self::unlink) from the run, the due queue, or nowhere yet.
    #[inline(never)]
    pub(super) fn unlink_elsewhere(&mut self, index: u32, pos: u32) {
        if pos == self.due.run_pos() {
            // Filed in the slot that became the run (see `due.rs`).
            let head = self.due.run_head().map(|(_, r)| (r >> 32) as u32);
            self.due.unlink(true);
            if self.due.run_over_bound() {
                self.compact_run();
            }
            if head == Some(index) {
                // The head went stale: the run's earliest live deadline moved.
                self.settle_run_head();
            }
        } else if pos == POS_DUE {
            if self.due.unlink(false) {
                self.compact_due();
            }
        } else {
            debug_assert_eq!(pos, POS_UNFILED, "a live entry is filed somewhere");
        }
    }

    /// Whether the stale references of the levels call for a sweep.
    #[inline]
    pub(super) fn over_bound(&self) -> bool {
        self.levels.over_bound()
    }

    /// Removes the run's stale references (see `DueQueue::run_over_bound`).
    #[cold]
    #[inline(never)]
    pub(super) fn compact_run(&mut self) {
        let arena = &self.arena;
        self.due.compact_run(|run| arena.retain_current(run));
    }
}

/// Lowers `quiet_until` to the start of the slot of `level` that a timer due at `deadline`
/// was just filed in as its first timer (see [`Wheel::push_filed`]). A free function: the
/// push that calls it holds the levels borrowed.
#[inline(always)]
fn lower_quiet_until(quiet_until: &mut u64, deadline: u64, level: usize) {
    *quiet_until = (*quiet_until).min(filed_slot_start(deadline, level));
}
