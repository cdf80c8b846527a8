//! What the integration tests share, included by each as `mod support;`: the reference
//! models the proptests (and, by `#[path]`, the fuzz targets) check against, their input
//! strategies, the flow-control tests' scheduler set-ups, and the helpers of the `DelayQueue` and `due_stream` tests (tokio's paused
//! clock; feature `tokio`).
// Each test uses its own subset (the re-exports too).
#![allow(dead_code, unused_imports, unused_macros)]

pub mod admission;
pub mod counting_alloc;
#[cfg(feature = "tokio")]
pub mod delay_queue;
#[cfg(feature = "tokio")]
pub mod delay_queue_model;
#[cfg(feature = "tokio")]
pub mod due_stream;
pub mod flow;
pub mod indexed_model;
pub mod model;
pub mod scheduler_model;
pub mod strategies;
#[path = "../../src/test_tasks.rs"]
pub mod tasks;
pub mod unlinks_model;

/// The longest whole number of seconds `fits` accepts (`fits` accepts zero, and every
/// shorter span than one it accepts): with `fits = |d| t0.checked_add(d).is_some()`, how far
/// past `t0` an `Instant` reaches. A binary search: 64 calls at most.
pub fn last_whole_secs(fits: impl Fn(std::time::Duration) -> bool) -> std::time::Duration {
    let (mut lo, mut hi) = (0u64, u64::MAX);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(std::time::Duration::from_secs(mid)) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    std::time::Duration::from_secs(lo)
}

/// The latest `Instant` at or after `from` that the platform holds, to the nanosecond: the
/// whole seconds by [`last_whole_secs`], then the nanoseconds of the last one by a second
/// binary search (a check independent of the crate's own halving search). 94 additions at
/// most.
pub fn latest_instant(from: std::time::Instant) -> std::time::Instant {
    let at = from + last_whole_secs(|d| from.checked_add(d).is_some());
    let (mut lo, mut hi) = (0u32, 999_999_999u32);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if at
            .checked_add(std::time::Duration::from_nanos(u64::from(mid)))
            .is_some()
        {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    at + std::time::Duration::from_nanos(u64::from(lo))
}

/// Proptest's case count: `PROPTEST_CASES` when set to a number, else `default`.
pub fn cases_or(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}
