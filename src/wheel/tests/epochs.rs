//! A stale reference is never taken for current, however often its entry is filed again: the
//! epoch a reference carries has 20 bits, and the sweeps at epoch multiples remove every
//! stale reference before the epoch comes round. Each test files one entry 2^20 times while
//! a stale reference to it waits somewhere else: a level-2 slot, the due queue's sorted run,
//! the due queue's past timers.

use super::*;

/// Filings after which an entry's epoch is back where it was.
const WRAP: u64 = 1 << 20;

/// Runs `step` until it has reported `filings` filings of the entry freed last (each call
/// says how many it made), checking the structure around the wrap.
fn refile(wheel: &mut Wheel<u64>, filings: u64, mut step: impl FnMut(&mut Wheel<u64>, u64) -> u64) {
    let mut done = 0;
    while done < filings {
        done += step(wheel, filings - done);
        if done % (1 << 18) == 0 || (WRAP - 4..WRAP + 4).contains(&done) {
            wheel.check_invariants();
        }
    }
    assert_eq!(done, filings);
}

/// A wheel holding `y` (8 200, value 1) in level 2's slot from 8 192, and there the stale
/// reference of `x` (8 201, cancelled), at the epoch of `x`'s filing, its entry's first: `y`
/// keeps the slot occupied, so the reference stays.
fn stale_beside_a_live_timer_in_level_2() -> Wheel<u64> {
    let mut wheel = Wheel::new();
    wheel.insert(8_200, 1);
    let x = wheel.insert(8_201, 2);
    assert_eq!(wheel.cancel(x), Some(2));
    wheel
}

#[test]
fn a_stale_reference_in_a_level_2_slot_outlives_inserts_into_its_reused_entry() {
    let mut wheel = stale_beside_a_live_timer_in_level_2();
    // Every insert reuses `x`'s entry, one epoch further on, into a level-0 slot that its
    // cancel empties at once: the stale reference by `y` stays the only one.
    refile(&mut wheel, WRAP - 1, |w, _| {
        let key = w.insert(10, 3);
        w.cancel(key);
        1
    });
    // 2^20 filings after `x`'s, back at its epoch, into the same slot.
    wheel.insert(8_201, 4);
    assert_eq!(drain(&mut wheel, 10_000), [(8_200, 1), (8_201, 4)]);
}

#[test]
fn a_stale_reference_in_a_level_2_slot_outlives_resets_of_its_reused_entry() {
    let mut wheel = stale_beside_a_live_timer_in_level_2();
    // An insert and a reset to another slot: two filings of the entry.
    refile(&mut wheel, WRAP - 1, |w, left| {
        let key = w.insert(10, 3);
        if left >= 2 {
            assert!(w.reset(key, 5));
        }
        assert_eq!(w.cancel(key), Some(3));
        left.min(2)
    });
    wheel.insert(8_201, 4);
    assert_eq!(drain(&mut wheel, 10_000), [(8_200, 1), (8_201, 4)]);
}

#[test]
fn a_stale_reference_in_the_sorted_run_outlives_inserts_into_its_reused_entry() {
    // The last filing lands before, in and after the run's slot.
    for last in [8_195u64, 8_201, 8_250, 8_300, 20_000] {
        let mut wheel = Wheel::new();
        wheel.insert(8_200, 1);
        let x = wheel.insert(8_201, 2);
        wheel.insert(8_300, 5);
        assert!(
            wheel.poll(8_192).is_none(),
            "the slot from 8 192 becomes the run"
        );
        assert_eq!(wheel.cancel(x), Some(2));
        refile(&mut wheel, WRAP - 1, |w, _| {
            let key = w.insert(8_194, 3);
            w.cancel(key);
            1
        });
        wheel.insert(last, 4);
        // In deadline order, equal deadlines in the order of their inserts.
        let mut want = vec![(8_200, 1), (8_300, 5), (last, 4)];
        want.sort_by_key(|&(deadline, _)| deadline);
        assert_eq!(drain(&mut wheel, 30_000), want, "last filing at {last}");
    }
}

#[test]
fn a_stale_reference_among_past_due_timers_outlives_inserts_into_its_reused_entry() {
    let mut wheel = Wheel::new();
    wheel.poll(100);
    wheel.insert(40, 1);
    // An insert into the past: two filings (unfiled, then due).
    let x = wheel.insert(50, 2);
    wheel.insert(60, 6);
    assert_eq!(wheel.cancel(x), Some(2));
    refile(&mut wheel, WRAP - 1, |w, _| {
        let key = w.insert(105, 3);
        w.cancel(key);
        1
    });
    wheel.insert(110, 4);
    assert_eq!(drain(&mut wheel, 100), [(40, 1), (60, 6)]);
    assert_eq!(drain(&mut wheel, 200), [(110, 4)]);
}
