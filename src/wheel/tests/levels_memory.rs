//! The level table grows level by level, as timers file into higher levels.

use super::*;

/// Bytes of the level table and everything else a wheel holds, as `stats` reports them.
fn held(wheel: &Wheel<u64>) -> usize {
    wheel.stats().bytes_held
}

#[test]
fn the_level_table_grows_with_the_highest_level_used() {
    const LEVEL: usize = 64 * 32; // 64 slots of 32 bytes
    let mut wheel = Wheel::new();
    let empty = held(&wheel);
    assert!(
        empty < LEVEL,
        "an empty wheel holds no level: {empty} bytes"
    );
    // Deadlines within 64² ticks file into levels 0 and 1: two levels.
    wheel.insert(10, 0);
    wheel.insert(4000, 1);
    let near = held(&wheel);
    assert!(near >= empty + 2 * LEVEL, "{empty} -> {near}");
    assert!(
        near < empty + 3 * LEVEL + 1024,
        "{empty} -> {near}: more than two levels"
    );
    // A never-due deadline files into the top level: all eleven.
    wheel.insert(u64::MAX, 2);
    let all = held(&wheel);
    assert!(all >= empty + 11 * LEVEL, "{near} -> {all}");
    // Timers still fire in order across the grown table.
    let fired: Vec<u64> = std::iter::from_fn(|| wheel.poll(5000).map(|e| e.value)).collect();
    assert_eq!(fired, [0, 1]);
}

/// Bytes of one spare slot vector: its 4 references and its place in the list of spares.
const SPARE: usize = 4 * 8 + std::mem::size_of::<Vec<u64>>();

/// A wheel whose arena has room for `n` timers, made without the hint (so no spare vectors).
fn plain(n: usize) -> Wheel<u64> {
    let mut wheel = Wheel::new();
    wheel.reserve(n);
    wheel
}

#[test]
fn with_capacity_counts_its_spare_vectors_and_slots_take_them() {
    let n = 24 * 64;
    let mut hinted = Wheel::with_capacity(n);
    let mut plain = plain(n);
    assert_eq!(hinted.capacity(), plain.capacity(), "the same arena");
    assert_eq!(
        held(&hinted),
        held(&plain) + 64 * SPARE,
        "64 spares, counted"
    );
    // 64 slots fill for the first time (level 1's slot k holds deadline 64k + 1; level 0's
    // slot 1 deadline 1): each takes a spare where the plain wheel allocates 4 references.
    for k in 0..64u64 {
        let deadline = 64 * k + 1;
        hinted.insert(deadline, k);
        plain.insert(deadline, k);
    }
    // The hinted wheel still holds its emptied list of spares.
    let list = 64 * std::mem::size_of::<Vec<u64>>();
    assert_eq!(
        held(&hinted),
        held(&plain) + list,
        "every spare handed to a slot"
    );
    // A 65th slot finds no spare left and allocates as the plain wheel's does.
    hinted.insert(64 * 64 + 1, 64);
    plain.insert(64 * 64 + 1, 64);
    assert_eq!(held(&hinted), held(&plain) + list);
    let fired: Vec<u64> = std::iter::from_fn(|| hinted.poll(u64::MAX).map(|e| e.value)).collect();
    assert_eq!(fired, (0..=64).collect::<Vec<_>>());
}

#[test]
fn spares_one_per_24_expected_timers_at_most_64() {
    let base = held(&plain(0));
    for (n, spares) in [(0, 0), (23, 0), (24, 1), (1000, 41), (1 << 20, 64)] {
        let hinted = Wheel::<u64>::with_capacity(n);
        let arena = held(&plain(n)) - base;
        assert_eq!(
            held(&hinted) - base - arena,
            spares * SPARE,
            "with_capacity({n})"
        );
    }
}

#[test]
fn shrink_to_fit_gives_the_spares_back() {
    let mut hinted = Wheel::<u64>::with_capacity(1000);
    hinted.insert(5, 0);
    let mut plain = plain(1000);
    plain.insert(5, 0);
    hinted.shrink_to_fit();
    plain.shrink_to_fit();
    assert_eq!(held(&hinted), held(&plain));
}

#[test]
fn a_slot_that_outgrows_its_spare_gives_it_back() {
    let n = 24 * 64;
    let mut hinted = Wheel::with_capacity(n);
    let mut plain = plain(n);
    // Five timers in level 1's slot 1: its first vector (4 references) is outgrown.
    for k in 0..5u64 {
        hinted.insert(65 + k, k);
        plain.insert(65 + k, k);
    }
    assert_eq!(
        held(&hinted),
        held(&plain) + 64 * SPARE,
        "the spare came back"
    );
    // 64 more slots fill, in level 2 (deadlines from 4 096): all 64 spares are taken again.
    for k in 1..=64u64 {
        hinted.insert(4096 * k, k);
        plain.insert(4096 * k, k);
    }
    let list = 64 * std::mem::size_of::<Vec<u64>>();
    assert_eq!(held(&hinted), held(&plain) + list);
}
