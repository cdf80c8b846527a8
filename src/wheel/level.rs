//! Bucket arithmetic: which level and slot a deadline files into, and when a slot is due.
//!
//! Each level is one base-64 digit of the tick: level `L` looks at bits `6L..6L+6`. A timer
//! files into the level of the highest digit in which its deadline differs from `elapsed`. Its
//! slot there is that digit of the deadline. Eleven levels cover all 64 bits; the top level
//! uses only 16 of its slots (bits 60..63). So no level is ever a ring and no deadline is
//! clamped. This is where the design departs from tokio's six-level wheel, which caps deadlines
//! at about 2^36 ms.
//!
//! Worked example, as in timer-queue: `elapsed = 7342`, `deadline = 7361`. In base 64,
//! 7342 = (1, 50, 46) and 7361 = (1, 51, 1). The highest differing digit is digit 1, so the
//! timer files into level 1, slot 51. That slot is due when `elapsed` reaches
//! 64·(64·1 + 51) = 7360. The timer then cascades to level 0, slot 1, and fires at 7361.

/// log2 of the slots per level.
pub(crate) const SLOT_BITS: u32 = 6;
/// Slots per level: one `u64` occupancy bitmap covers a level.
pub(crate) const SLOTS: usize = 1 << SLOT_BITS;
/// Levels needed to cover every `u64` deadline: 11 × 6 = 66 ≥ 64 bits.
pub(crate) const LEVELS: usize = 11;

/// The level a deadline later than `elapsed` files into.
///
/// A deadline that differs from `elapsed` only in the low digit counts as level 0:
/// `| (SLOTS - 1)` sees to that.
#[inline]
pub(crate) fn level_for(elapsed: u64, deadline: u64) -> usize {
    debug_assert!(
        deadline > elapsed,
        "only future deadlines are filed: {deadline} <= {elapsed}"
    );
    let masked = (elapsed ^ deadline) | (SLOTS as u64 - 1);
    let significant = 63 - masked.leading_zeros();
    (significant / SLOT_BITS) as usize
}

/// The slot of `level` that holds `deadline`: that level's digit of the deadline.
#[inline]
pub(crate) fn slot_for(deadline: u64, level: usize) -> usize {
    ((deadline >> (level as u32 * SLOT_BITS)) & (SLOTS as u64 - 1)) as usize
}

/// The tick at which `slot` of `level` is due: `elapsed` with that level's digit replaced by
/// `slot` and every lower digit zeroed.
///
/// The top level spans more than 64 bits, so its mask keeps nothing of `elapsed`.
#[inline]
pub(crate) fn slot_start(elapsed: u64, level: usize, slot: usize) -> u64 {
    let low_bits = level as u32 * SLOT_BITS;
    let span_bits = low_bits + SLOT_BITS;
    let keep = u64::MAX.checked_shl(span_bits).unwrap_or(0);
    (elapsed & keep) | ((slot as u64) << low_bits)
}

/// The tick at which the slot that holds `deadline` at `level` is due: the deadline with every
/// digit below `level` zeroed. Equal to `slot_start(elapsed, level, slot_for(deadline, level))`
/// when `level == level_for(elapsed, deadline)`: `elapsed` and the deadline share every digit
/// above that level (that is what chose it), so only the slot digit and the zeros remain.
#[inline]
pub(crate) fn filed_slot_start(deadline: u64, level: usize) -> u64 {
    deadline & (u64::MAX << (level as u32 * SLOT_BITS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn level_boundaries_at_every_power_of_64() {
        for level in 1..LEVELS {
            let edge = 1u64 << (level as u32 * SLOT_BITS);
            assert_eq!(level_for(0, edge - 1), level - 1, "0 -> {:#b}", edge - 1);
            assert_eq!(level_for(0, edge), level, "0 -> {edge:#b}");
            assert_eq!(level_for(0, edge + 1), level, "0 -> {:#b}", edge + 1);
            assert_eq!(
                level_for(edge - 1, edge),
                level,
                "{:#b} -> {edge:#b}",
                edge - 1
            );
        }
        assert_eq!(level_for(0, 1), 0);
        assert_eq!(level_for(0, 63), 0);
        assert_eq!(level_for(0, u64::MAX), LEVELS - 1);
        assert_eq!(level_for(u64::MAX - 1, u64::MAX), 0);
        assert_eq!(level_for(1 << 63, u64::MAX), LEVELS - 1);
        assert_eq!(level_for(1 << 59, (1 << 60) - 1), 9);
    }

    #[test]
    fn slot_digits() {
        assert_eq!(slot_for(7361, 0), 1);
        assert_eq!(slot_for(7361, 1), 51);
        assert_eq!(slot_for(7361, 2), 1);
        assert_eq!(slot_for(u64::MAX, LEVELS - 1), 15);
        assert_eq!(slot_for(1 << 60, LEVELS - 1), 1);
    }

    #[test]
    fn worked_example_from_module_doc() {
        assert_eq!(level_for(7342, 7361), 1);
        assert_eq!(slot_for(7361, 1), 51);
        assert_eq!(slot_start(7342, 1, 51), 7360);
        assert_eq!(level_for(7360, 7361), 0);
        assert_eq!(slot_start(7360, 0, 1), 7361);
    }

    /// Elapsed ticks at the edges of the first two levels.
    const EDGES: [u64; 6] = [0, 1, 63, 64, 4095, 4096];

    /// Runs `check(elapsed, deadline, level)` for every elapsed tick of `samples` and
    /// deadline `extra` ticks later (those that do not saturate), at the level the wheel
    /// files that deadline in.
    fn each_filing(samples: &[u64], extra: &[u64], mut check: impl FnMut(u64, u64, usize)) {
        for &e in samples {
            for &d in extra {
                let deadline = e.saturating_add(d);
                if deadline > e {
                    check(e, deadline, level_for(e, deadline));
                }
            }
        }
    }

    #[test]
    fn slot_start_is_never_before_elapsed_for_the_filed_slot() {
        let samples = [&EDGES[..], &[1 << 30, (1 << 32) + 7, (1 << 36) - 1]].concat();
        let extra = [1u64, 2, 63, 64, 65, 4096, 1 << 20, 1 << 40, u64::MAX];
        each_filing(&samples, &extra, |e, deadline, level| {
            let start = slot_start(e, level, slot_for(deadline, level));
            assert!(start > e, "slot start {start:#b} not after elapsed {e:#b}");
            assert!(
                start <= deadline,
                "slot start {start:#b} after deadline {deadline:#b}"
            );
        });
    }

    #[test]
    fn filed_slot_start_matches_slot_start() {
        let samples = [&EDGES[..], &[7342, 1 << 30, (1 << 36) - 1, 1 << 63]].concat();
        let extra = [1u64, 2, 19, 63, 64, 65, 4096, 1 << 20, 1 << 40, u64::MAX];
        each_filing(&samples, &extra, |e, deadline, level| {
            assert_eq!(
                filed_slot_start(deadline, level),
                slot_start(e, level, slot_for(deadline, level)),
                "elapsed {e:#b}, deadline {deadline:#b}, level {level}"
            );
        });
    }

    #[test]
    fn top_level_slot_start_ignores_elapsed() {
        assert_eq!(slot_start(12345, LEVELS - 1, 15), 15 << 60);
        assert_eq!(slot_start(u64::MAX, LEVELS - 1, 0), 0);
    }
}
