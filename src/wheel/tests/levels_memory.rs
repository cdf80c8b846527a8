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
