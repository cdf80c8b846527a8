//! A stale reference is never taken for current, however often its entry is filed again: the
//! epoch a reference carries has 20 bits, and the sweeps at epoch multiples remove every
//! stale reference before the epoch comes round.

use super::*;

#[test]
fn a_stale_reference_outlives_no_epoch_wrap_through_inserts_into_its_reused_entry() {
    let mut wheel = Wheel::new();
    // `y` keeps level 2's slot from 8 192 occupied, so `x`'s reference stays there once `x`
    // is cancelled: stale, at the epoch of `x`'s filing (the entry's first).
    wheel.insert(8_200, 1);
    let x = wheel.insert(8_201, 2);
    assert_eq!(wheel.cancel(x), Some(2));
    // Every insert reuses `x`'s entry, one epoch further on, into a level-0 slot that its
    // cancel empties at once: the stale reference by `y` stays the only one.
    for _ in 0..(1 << 20) - 1 {
        let key = wheel.insert(10, 3);
        wheel.cancel(key);
    }
    // 2^20 filings after `x`'s, back at its epoch, into the same slot.
    wheel.insert(8_201, 4);
    assert_eq!(drain(&mut wheel, 10_000), [(8_200, 1), (8_201, 4)]);
}
