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

/// Bytes of one spare slot vector of `refs` references: its references and its place in the
/// list of spares of that size.
const fn spare(refs: usize) -> usize {
    refs * 8 + std::mem::size_of::<Vec<u64>>()
}

/// Bytes of one spare slot vector of the first size (4 references).
const SPARE: usize = spare(4);

/// Bytes of the spares of sizes 16 and 64 that `with_capacity(n)` makes: one of each per 64
/// timers, at most 64.
const fn larger_spares(n: usize) -> usize {
    let count = if n / 64 < 64 { n / 64 } else { 64 };
    count * (spare(16) + spare(64))
}

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
    let larger = larger_spares(n);
    assert_eq!(hinted.capacity(), plain.capacity(), "the same arena");
    assert_eq!(
        held(&hinted),
        held(&plain) + 64 * SPARE + larger,
        "64 spares of 4, and those of 16 and 64, counted"
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
        held(&plain) + list + larger,
        "every spare of 4 handed to a slot"
    );
    // A 65th slot finds no spare left and allocates as the plain wheel's does.
    hinted.insert(64 * 64 + 1, 64);
    plain.insert(64 * 64 + 1, 64);
    assert_eq!(held(&hinted), held(&plain) + list + larger);
    let fired: Vec<u64> = std::iter::from_fn(|| hinted.poll(u64::MAX).map(|e| e.value)).collect();
    assert_eq!(fired, (0..=64).collect::<Vec<_>>());
}

#[test]
fn spares_of_4_one_per_24_expected_timers_of_16_and_64_one_per_64_at_most_64_each() {
    let base = held(&plain(0));
    // (n, spares of 4, spares of 16 and of 64 each)
    for (n, small, larger) in [
        (0, 0, 0),
        (23, 0, 0),
        (24, 1, 0),
        (63, 2, 0),
        (64, 2, 1),
        (1000, 41, 15),
        (1 << 20, 64, 64),
    ] {
        let hinted = Wheel::<u64>::with_capacity(n);
        let arena = held(&plain(n)) - base;
        assert_eq!(
            held(&hinted) - base - arena,
            small * SPARE + larger * (spare(16) + spare(64)),
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
        held(&plain) + 64 * SPARE + larger_spares(n) - 16 * 8,
        "the spare of 4 came back, and the slot holds a spare of 16 (its list keeps its room)"
    );
    // 64 more slots fill, in level 2 (deadlines from 4 096): all 64 spares are taken again.
    for k in 1..=64u64 {
        hinted.insert(4096 * k, k);
        plain.insert(4096 * k, k);
    }
    let list = 64 * std::mem::size_of::<Vec<u64>>();
    assert_eq!(
        held(&hinted),
        held(&plain) + list + larger_spares(n) - 16 * 8
    );
}

#[test]
fn a_growing_slot_takes_the_spares_of_16_and_64_and_gives_each_back() {
    let n = 64 * 64;
    let mut hinted = Wheel::with_capacity(n);
    let mut plain = plain(n);
    let start = held(&hinted) - held(&plain);
    // 17 timers in level 1's slot 1: its vector goes from 4 to 16 to 64 references. The
    // hinted wheel takes a spare of each larger size and gives back the one it outgrew, so
    // it holds what it held, beside a plain wheel holding the same vector of 64.
    for k in 0..17u64 {
        hinted.insert(65 + k, k);
        plain.insert(65 + k, k);
    }
    assert_eq!(
        held(&hinted) - held(&plain),
        start - 64 * 8,
        "a spare of 64 taken (its list keeps its room); those of 4 and 16 back in theirs"
    );
    // The slot's timers fire, in deadline order, from the spares.
    let fired: Vec<u64> = std::iter::from_fn(|| hinted.poll(200).map(|e| e.deadline)).collect();
    assert_eq!(fired, (65..82).collect::<Vec<u64>>());
}
