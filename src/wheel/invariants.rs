//! The structural checker the unit tests run after every step that could break the wheel:
//! occupancy bitmaps against live counts, live counts against current references, every
//! pending timer filed once, `quiet_until` a true lower bound, the stale-reference bounds.

use super::Wheel;
use super::level::slot_start;

impl<T> Wheel<T> {
    pub(crate) fn check_invariants(&self) {
        use super::level::{LEVELS, SLOTS};
        let mut live_filed = 0usize;
        for level in 0..LEVELS {
            let occupied = self.levels.occupied(level);
            for slot in 0..SLOTS {
                let live = self.levels.live_in(level, slot);
                assert_eq!(
                    occupied >> slot & 1 == 1,
                    live > 0,
                    "bitmap bit iff live timers: L{level} S{slot}"
                );
                let current = self
                    .levels
                    .refs_in(level, slot)
                    .iter()
                    .filter(|&&r| self.arena.resolve(r).is_some())
                    .count();
                assert_eq!(
                    current, live as usize,
                    "live count matches current references: L{level} S{slot}"
                );
                if live > 0 {
                    assert!(
                        slot_start(self.elapsed, level, slot) > self.elapsed,
                        "occupied slot L{level} S{slot} lies ahead of {}",
                        self.elapsed
                    );
                }
                live_filed += live as usize;
            }
        }
        assert_eq!(
            live_filed + self.due.live() + self.due.run_live(),
            self.len(),
            "every pending timer is filed once"
        );
        if let Some((at, r)) = self.due.run_head() {
            let index = self.arena.resolve(r);
            assert!(index.is_some(), "the run's head {r:#x} at {at} is current");
            if at <= self.elapsed {
                assert_eq!(self.quiet_until, 0, "a due run head makes every poll look");
            } else {
                assert!(
                    self.quiet_until <= at,
                    "quiet_until {} is no later than the run's head at {at}",
                    self.quiet_until
                );
            }
        }
        self.levels.check_counts();
        assert!(
            !self.due.run_over_bound(),
            "the run's stale references {} stay within 2 x {} + slack",
            self.due.run_stale(),
            self.due.run_live()
        );
        if self.due.live() > 0 {
            assert_eq!(self.quiet_until, 0, "due timers wait, so every poll looks");
        }
        // Stronger than the check below, and what an insert relies on to skip lowering
        // `quiet_until` when its slot already has timers: it holds for every slot whose bit
        // is set, also one whose live timers all have pending unlinks.
        for (level, slot, _) in self.levels.occupied_in_order() {
            let start = slot_start(self.elapsed, level, slot);
            assert!(
                self.quiet_until <= start,
                "quiet_until {} is no later than the start {start} of L{level} S{slot}, whose bit is set",
                self.quiet_until
            );
        }
        if let Some((level, slot)) = self.levels.first_occupied() {
            let start = slot_start(self.elapsed, level, slot);
            assert!(
                self.quiet_until <= start,
                "quiet_until {} is no later than the first occupied slot L{level} S{slot} at {start}",
                self.quiet_until
            );
        }
    }
}
