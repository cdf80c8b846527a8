//! The floor of the core workloads: what one random access to memory as large as the wheel's
//! costs on this machine, with nothing else around it.
//!
//! A bare loop over an array of `n` entries, each of the size of the core wheel's arena entry
//! for `Wheel<u64>` (24 bytes: deadline, value, stamp and generation), that does one
//! read-modify-write (load, add, store) of one entry per operation, at an index drawn from a
//! fixed-seed xorshift. The iterations are independent, so the processor overlaps their
//! misses as far as it can: the figure is the memory system's throughput for random accesses
//! to that working set, the floor under any structure that touches one random entry per
//! insert, cancel or expiry. The array's pages are written before the timed region (a wheel
//! built inside it also pays first-touch page faults; the floor does not).
//!
//! It is measured interleaved with the peers (one sample per repetition, in the rotation of
//! `measure.rs`) for insert, cancel and both expiry workloads only, and shown as a column
//! beside the core wheel with the ratio core ÷ floor; the summary lists those ratios per size.

use std::hint::black_box;
use std::time::{Duration, Instant};

use crate::peers::{Workload, thread_cpu_ns};

/// The column's name.
pub const NAME: &str = "floor";

/// One entry of the array: as large as a `Wheel<u64>` arena entry.
type Entry = [u64; 3];

/// Operations per timed pass: enough that the two clock reads (~0.2 µs) stay under 1 % of
/// the pass even where every access hits L1.
const PASS: usize = 1 << 16;

/// The workloads the floor is measured beside.
pub fn applies(w: Workload) -> bool {
    matches!(
        w,
        Workload::Insert | Workload::Cancel | Workload::ExpireOnce | Workload::ExpireTicks
    )
}

/// The xorshift64 step (Marsaglia): a full-period generator of non-zero `u64`s.
#[inline(always)]
fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

/// `PASS` read-modify-writes at random indices of `entries`, continuing the xorshift stream
/// from `x`; returns where the stream stopped. An index is the high half of `x · len` (a
/// multiply, no division).
#[inline(never)]
fn pass(entries: &mut [Entry], mut x: u64) -> u64 {
    let len = entries.len() as u128;
    for _ in 0..PASS {
        x = xorshift(x);
        let i = ((u128::from(x) * len) >> 64) as usize;
        entries[i][0] = entries[i][0].wrapping_add(x);
    }
    x
}

/// One sample at `n` entries: ns per read-modify-write over timed passes adding up to at
/// least `min` (or `max_wall` of wall time, array setup included), on a fresh array.
pub fn sample(n: usize, min: Duration, max_wall: Duration) -> f64 {
    let started = Instant::now();
    // `vec!` of zeros may map untouched pages: write every entry now, outside the timed region.
    let mut entries: Vec<Entry> = (0..n.max(1) as u64).map(|i| [i, 0, 0]).collect();
    let mut x = 0x9E37_79B9_7F4A_7C15;
    x = pass(&mut entries, x); // warm the caches and the TLB as the peers' warm-up does
    let (mut spent, mut ops) = (0u64, 0u64);
    while Duration::from_nanos(spent) < min && started.elapsed() < max_wall {
        let t = thread_cpu_ns();
        x = pass(&mut entries, x);
        spent += thread_cpu_ns() - t;
        ops += PASS as u64;
    }
    black_box(&entries);
    black_box(x);
    spent as f64 / ops.max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every pass touches entries all over the array (a stuck or short-cycled index would make
    /// the floor an L1 figure at every size).
    #[test]
    fn a_pass_spreads_over_the_array() {
        let mut entries = vec![[0u64; 3]; 1000];
        pass(&mut entries, 1);
        let touched = entries.iter().filter(|e| e[0] != 0).count();
        assert!(touched > 990, "{touched} of 1000 entries touched");
    }

    #[test]
    fn a_sample_is_a_positive_figure() {
        let ns = sample(1000, Duration::from_millis(1), Duration::from_millis(200));
        assert!(ns.is_finite() && ns > 0.0, "{ns}");
    }
}
