//! Unlinks held back by `Levels::unlink` read as if applied at once.

use super::*;

/// Cancels lower their slot's live count later (`Levels::unlink`): whatever reads the levels
/// in between, with a few, exactly `PENDING` or many more unlinks held back, sees the counts
/// and the occupancy bitmap as if each cancel had lowered them at once.
#[test]
fn held_back_unlinks_read_as_applied() {
    for cancels in [1usize, 63, 64, 65, 129, 300] {
        let mut wheel: Wheel<u64> = Wheel::new();
        // Slot of tick 10 (level 0) holds `cancels` timers; later slots hold one each.
        let early: Vec<TimerKey> = (0..cancels as u64).map(|i| wheel.insert(10, i)).collect();
        let later = [(20u64, 1000u64), (100, 1001), (5000, 1002), (70_000, 1003)];
        for &(deadline, value) in &later {
            wheel.insert(deadline, value);
        }
        for (i, &key) in early.iter().enumerate() {
            assert_eq!(wheel.cancel(key), Some(i as u64));
            // `next_expiration` reads the bitmap through `&self`, unlinks pending.
            let expected = if i + 1 == cancels { 20 } else { 10 };
            assert_eq!(
                wheel.next_expiration(),
                Some(expected),
                "after {} of {cancels} cancels",
                i + 1
            );
        }
        wheel.check_invariants();
        assert_eq!(wheel.len(), later.len());
        // A cancelled key stays cancelled, whether or not its unlink was applied.
        assert_eq!(wheel.cancel(early[0]), None);
        assert_eq!(
            drain(&mut wheel, 100_000),
            later.to_vec(),
            "{cancels} cancels"
        );
        assert!(wheel.is_empty());
        assert_eq!(
            wheel.stats().stale,
            0,
            "emptied slots dropped their references"
        );
    }
}

/// Held-back unlinks spread over many slots and levels, with resets moving timers between
/// slots and polls in between: the structural checker and the fired sequence agree with
/// what a cancel applied at once would give.
#[test]
fn held_back_unlinks_across_slots_and_moves() {
    let mut wheel: Wheel<u64> = Wheel::new();
    let mut keys = Vec::new();
    for i in 0..2000u64 {
        keys.push((wheel.insert(1 + (i * 7919) % 300_000, i), i));
    }
    let mut expected: Vec<(u64, u64)> = Vec::new();
    for (n, &(key, value)) in keys.iter().enumerate() {
        match n % 5 {
            0..=2 => assert_eq!(wheel.cancel(key), Some(value)),
            3 => {
                let deadline = 1 + (value * 104_729) % 300_000;
                assert!(wheel.reset(key, deadline));
                expected.push((deadline, value));
            }
            _ => expected.push((wheel.deadline(key).expect("pending"), value)),
        }
        if n % 97 == 0 {
            wheel.check_invariants();
        }
    }
    wheel.check_invariants();
    expected.sort();
    let mut fired = Vec::new();
    for now in (0..=300_000).step_by(777) {
        fired.extend(drain(&mut wheel, now));
    }
    fired.extend(drain(&mut wheel, 300_001));
    fired.sort();
    assert_eq!(fired, expected);
}

/// The stale bound holds when the pending unlinks never fill their list: each poll applies
/// them before 64 wait (here 63 cancels, then a poll that takes out one timer from the due
/// queue and processes no slot), and that flush must check the bound too. One live timer
/// keeps the slot, and with it every cancelled timer's reference, from being emptied.
#[test]
fn polls_that_flush_unlinks_check_the_stale_bound() {
    let mut wheel: Wheel<u64> = Wheel::new();
    let keep = wheel.insert(1_000, u64::MAX);
    let cancels = 3 * slots::STALE_SLACK * 704;
    let keys: Vec<TimerKey> = (0..cancels as u64)
        .map(|i| wheel.insert(1_000, i))
        .collect();
    for (round, chunk) in keys.chunks(63).enumerate() {
        for &key in chunk {
            assert!(wheel.cancel(key).is_some());
        }
        let past = wheel.insert(0, round as u64);
        let fired = wheel.poll(0).expect("the timer filed in the past is due");
        assert_eq!((fired.key, fired.value), (past, round as u64));
        wheel.check_invariants();
    }
    // One live timer; the due queue's stale references went with its polls.
    assert!(
        wheel.stats().stale <= 1 + slots::STALE_SLACK * 704,
        "stale references: {}",
        wheel.stats().stale
    );
    assert_eq!(drain(&mut wheel, 1_000), vec![(1_000, u64::MAX)]);
    assert_eq!(wheel.cancel(keep), None);
}

/// A reset to an earlier slot unlinks its timer before filing it anew. When that unlink
/// fills the pending list, its flush can take the levels over their bound, and the sweep
/// then compacts the timer's old slot while the old reference is still current: it stays,
/// and must go on counting as stale once the timer is filed elsewhere. The cancel counts
/// around the sweep's threshold put the reset's unlink at every place in the pending list,
/// so one of them lands exactly on the sweep.
#[test]
fn a_sweep_inside_a_resets_unlink_keeps_the_old_reference_stale() {
    const TIMERS: u64 = 6_000;
    for cancels in 5_700..5_840u64 {
        let mut wheel: Wheel<u64> = Wheel::new();
        // One level-2 slot (ticks 4096..8191) holds every timer, the one reset among them.
        let keys: Vec<TimerKey> = (0..TIMERS)
            .map(|i| wheel.insert(4096 + i % 4096, i))
            .collect();
        let moved = wheel.insert(8000, u64::MAX);
        for &key in &keys[..cancels as usize] {
            assert!(wheel.cancel(key).is_some());
        }
        // To a level-1 slot: filed anew, so its old reference goes stale.
        assert!(wheel.reset(moved, 100));
        wheel.check_invariants();
        let fired = drain(&mut wheel, 100);
        assert_eq!(fired, vec![(100, u64::MAX)], "{cancels} cancels");
        let rest = drain(&mut wheel, 10_000);
        assert_eq!(rest.len() as u64, TIMERS - cancels, "{cancels} cancels");
        assert!(wheel.is_empty());
    }
}
