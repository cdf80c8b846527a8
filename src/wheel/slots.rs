//! The levels: per slot a vector of references and a count of the live ones, per level an
//! occupancy bitmap.
//!
//! Cancel leaves its reference where it is (O(1), no search); the slot's live count drops
//! instead. A slot whose live count reaches zero is emptied at once, and one whose stale
//! references outnumber its live ones by more than [`STALE_SLACK`] is compacted; both keep
//! stale references below `live + STALE_SLACK` per slot, and compaction costs at most twice
//! the cancels that caused it, so cancel stays amortised O(1).

use super::level::{LEVELS, SLOTS};

/// Stale references a slot may hold beyond its live count before it is compacted.
pub(crate) const STALE_SLACK: usize = 8;

/// A slot keeps an emptied vector only up to this capacity, so a burst does not pin memory.
const KEEP_CAPACITY: usize = 1024;

/// Makes room in a full slot vector: doubling while small (as `Vec::push` would), by half
/// again from [`KEEP_CAPACITY`] references on. A slot of a big wheel holds a large share of
/// its timers (at 1 M timers over a minute, each of the 15 busy level-2 slots holds 68 000),
/// and doubling would leave those vectors up to half empty: 8 bytes of slack per timer on
/// top of its 24-byte entry. Growing by half keeps the slack under a third; the copies stay
/// amortised O(1) per push (about 3 instead of 2).
#[cold]
#[inline(never)]
fn grow(refs: &mut Vec<u64>) {
    let capacity = refs.capacity();
    let more = if capacity < KEEP_CAPACITY {
        capacity.max(4)
    } else {
        capacity / 2
    };
    refs.reserve_exact(more);
}

#[derive(Debug, Default)]
pub(crate) struct Slot {
    pub(crate) refs: Vec<u64>,
    /// References in `refs` that name a timer filed here. Bit set in the bitmap iff > 0.
    pub(crate) live: u32,
}

#[derive(Debug)]
pub(crate) struct Level {
    pub(crate) slots: [Slot; SLOTS],
}

impl Level {
    fn new() -> Self {
        Level {
            slots: std::array::from_fn(|_| Slot::default()),
        }
    }
}

/// All levels of a wheel.
#[derive(Debug)]
pub(crate) struct Levels {
    /// Occupancy bitmaps, one per level, kept together (and apart from the slots) so that
    /// finding the next occupied slot reads one or two cache lines: bit `s` of `occupied[l]`
    /// is set iff slot `s` of level `l` holds at least one live timer.
    occupied: [u64; LEVELS],
    /// Bit `l` set iff `occupied[l] != 0`: the lowest occupied level in one instruction.
    levels_occupied: u16,
    levels: Box<[Level; LEVELS]>,
}

impl Levels {
    pub(crate) fn new() -> Self {
        let levels: Vec<Level> = (0..LEVELS).map(|_| Level::new()).collect();
        let levels: Box<[Level; LEVELS]> = match levels.into_boxed_slice().try_into() {
            Ok(levels) => levels,
            Err(_) => unreachable!("exactly LEVELS levels were built"),
        };
        Levels {
            occupied: [0; LEVELS],
            levels_occupied: 0,
            levels,
        }
    }

    #[inline]
    fn mark_occupied(&mut self, level: usize, slot: usize) {
        self.occupied[level] |= 1 << slot;
        self.levels_occupied |= 1 << level;
    }

    #[inline]
    fn mark_empty(&mut self, level: usize, slot: usize) {
        self.occupied[level] &= !(1 << slot);
        if self.occupied[level] == 0 {
            self.levels_occupied &= !(1 << level);
        }
    }

    #[inline]
    pub(crate) fn push(&mut self, level: usize, slot: usize, r: u64) {
        let s = &mut self.levels[level].slots[slot];
        if s.refs.len() == s.refs.capacity() {
            grow(&mut s.refs);
        }
        s.refs.push(r);
        s.live += 1;
        self.mark_occupied(level, slot);
    }

    /// One live timer left the slot (cancelled or moved); its reference stays behind.
    /// Returns true when the slot should be compacted.
    #[inline]
    pub(crate) fn unlink(&mut self, level: usize, slot: usize) -> bool {
        let s = &mut self.levels[level].slots[slot];
        debug_assert!(
            s.live > 0,
            "unlink from a slot with no live timers: L{level} S{slot}"
        );
        s.live -= 1;
        if s.live == 0 {
            // Every reference left is stale: drop them all without looking.
            s.refs.clear();
            self.mark_empty(level, slot);
            return false;
        }
        s.refs.len() - s.live as usize > s.live as usize + STALE_SLACK
    }

    /// Keeps only the references for which `current` is true.
    pub(crate) fn compact(&mut self, level: usize, slot: usize, current: impl Fn(u64) -> bool) {
        self.levels[level].slots[slot].refs.retain(|&r| current(r));
    }

    /// Keeps only the references for which `current` is true, in every slot.
    pub(crate) fn compact_all(&mut self, current: impl Fn(u64) -> bool) {
        for (lvl, &bits) in self.levels.iter_mut().zip(self.occupied.iter()) {
            let mut occupied = bits;
            while occupied != 0 {
                let s = &mut lvl.slots[occupied.trailing_zeros() as usize];
                occupied &= occupied - 1;
                s.refs.retain(|&r| current(r));
            }
        }
    }

    /// Takes every reference out of a slot, leaving it empty.
    #[inline]
    pub(crate) fn take(&mut self, level: usize, slot: usize) -> Vec<u64> {
        self.mark_empty(level, slot);
        let s = &mut self.levels[level].slots[slot];
        s.live = 0;
        std::mem::take(&mut s.refs)
    }

    /// Gives an emptied vector back to the slot so its capacity is reused.
    #[inline]
    pub(crate) fn restore(&mut self, level: usize, slot: usize, mut refs: Vec<u64>) {
        let s = &mut self.levels[level].slots[slot];
        if s.refs.capacity() == 0 && refs.capacity() <= KEEP_CAPACITY {
            refs.clear();
            s.refs = refs;
        }
    }

    /// The lowest occupied slot of the lowest occupied level.
    #[inline]
    pub(crate) fn first_occupied(&self) -> Option<(usize, usize)> {
        if self.levels_occupied == 0 {
            return None;
        }
        let level = self.levels_occupied.trailing_zeros() as usize;
        Some((level, self.occupied[level].trailing_zeros() as usize))
    }

    #[cfg(test)]
    pub(crate) fn live_in(&self, level: usize, slot: usize) -> u32 {
        self.levels[level].slots[slot].live
    }

    #[cfg(test)]
    pub(crate) fn refs_in(&self, level: usize, slot: usize) -> &[u64] {
        &self.levels[level].slots[slot].refs
    }

    #[cfg(test)]
    pub(crate) fn occupied(&self, level: usize) -> u64 {
        debug_assert_eq!(
            self.levels_occupied >> level & 1 == 1,
            self.occupied[level] != 0,
            "level bit iff the level has an occupied slot: L{level}"
        );
        self.occupied[level]
    }

    /// References in all slots, live or stale. O(slots).
    pub(crate) fn total_refs(&self) -> usize {
        self.levels
            .iter()
            .flat_map(|l| l.slots.iter())
            .map(|s| s.refs.len())
            .sum()
    }

    pub(crate) fn bytes_held(&self) -> usize {
        let refs: usize = self
            .levels
            .iter()
            .flat_map(|l| l.slots.iter())
            .map(|s| s.refs.capacity() * 8)
            .sum();
        refs + std::mem::size_of::<[Level; LEVELS]>()
    }

    pub(crate) fn clear(&mut self) {
        self.occupied = [0; LEVELS];
        self.levels_occupied = 0;
        for lvl in self.levels.iter_mut() {
            for s in lvl.slots.iter_mut() {
                s.refs.clear();
                s.live = 0;
            }
        }
    }

    /// Compacts every slot with `current` and gives spare capacity back.
    pub(crate) fn shrink_to_fit(&mut self, current: impl Fn(u64) -> bool) {
        for lvl in self.levels.iter_mut() {
            for s in lvl.slots.iter_mut() {
                s.refs.retain(|&r| current(r));
                s.refs.shrink_to_fit();
            }
        }
    }
}
