//! The two `DelayQueue`s above tokio's own timer: where a cell is bound by the cost of
//! advancing tokio's paused clock and driving its timer (each `DelayQueue` holds one `Sleep`
//! and polls it once per harness poll), the ratio of the whole cells says little about the
//! queues themselves. The bare `tokio Sleep` peer, measured in the same repetitions, gives
//! that bound; this table shows each queue's cost above it and their ratio.
//!
//! A row is shown for a workload that polls every tick (expiry every tick, churn, the idle
//! poll: each harness poll advances tokio's clock and drives its timer once) when the bare
//! `Sleep`'s figure is within a factor [`SHOWN_WITHIN`] of the drop-in's either way: then
//! what both share, tokio's clock and timer per tick, is most of the cell. (Where the bare
//! `Sleep` costs far more, as in churn at large sizes, its own inserts and cancels are what
//! it measures, and it bounds nothing.) When the drop-in's excess is at most
//! [`BOUND_SHARE`] of the bound (or negative), the cell is said to be bound by tokio's timer
//! instead of giving a ratio of two noises; when only tokio-util's is, the table says that.

use crate::measure::Cell;
use crate::peers::{Workload, median};

/// A row appears when the bare `Sleep`'s figure is within this factor of the drop-in's.
const SHOWN_WITHIN: f64 = 2.0;
/// A drop-in excess at most this share of the bound counts as none.
const BOUND_SHARE: f64 = 0.05;

/// The table's column headers after its first.
pub const COLUMNS: [&str; 4] = [
    "tokio Sleep (bound)",
    "tickwheel DelayQueue − bound",
    "DelayQueue − bound",
    "DelayQueue ÷ tickwheel's, above the bound",
];

/// The median over repetitions of `cell − bound`, pairwise (the same repetition of each:
/// both ran in the same pass), in ns per operation.
fn excess(cell: &Cell, bound: &Cell) -> f64 {
    let mut d: Vec<f64> = cell.ns.iter().zip(&bound.ns).map(|(a, b)| a - b).collect();
    median(&mut d)
}

/// The row for workload `w`, or `None` when it does not poll every tick, when the bare
/// `Sleep` is not within [`SHOWN_WITHIN`] of the drop-in's figure, or when a cell has no
/// figure. `sleep`: the bare `tokio Sleep`; `ours`: the drop-in; `theirs`: tokio-util's
/// `DelayQueue`. Cells: the bound's median, each queue's median excess, and tokio-util's
/// excess ÷ the drop-in's, or a note that the drop-in's cell (or only tokio-util's) is at
/// the bound.
pub fn row(w: Workload, sleep: &Cell, ours: &Cell, theirs: &Cell) -> Option<Vec<String>> {
    let per_tick = matches!(
        w,
        Workload::ExpireTicks | Workload::Churn | Workload::IdlePoll
    );
    let bound = sleep.median();
    let whole = ours.median();
    let comparable = bound.is_finite()
        && whole.is_finite()
        && bound * SHOWN_WITHIN >= whole
        && bound <= whole * SHOWN_WITHIN;
    if !(per_tick && comparable) {
        return None;
    }
    let (mine, other) = (excess(ours, sleep), excess(theirs, sleep));
    let at_bound = |excess: f64| excess <= BOUND_SHARE * bound;
    let ratio = if at_bound(mine) {
        format!(
            "bound by tokio's timer (drop-in ≤ {:.0} % above it)",
            BOUND_SHARE * 100.0
        )
    } else if at_bound(other) {
        "DelayQueue at the bound, the drop-in above it".to_string()
    } else {
        format!("{:.2}", other / mine)
    };
    Some(vec![
        crate::fmt_ns(bound),
        signed(mine),
        signed(other),
        ratio,
    ])
}

/// `ns` with its sign, as `fmt_ns` writes a figure.
fn signed(ns: f64) -> String {
    if ns < 0.0 {
        format!("−{}", crate::fmt_ns(-ns))
    } else {
        format!("+{}", crate::fmt_ns(ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(ns: &[f64]) -> Cell {
        Cell {
            ns: ns.to_vec(),
            estimate: false,
            mismatch: false,
            clock_bound: false,
        }
    }

    #[test]
    fn rows_only_where_a_per_tick_workload_is_near_the_bound() {
        let (ours, theirs) = (cell(&[40.0]), cell(&[80.0]));
        let idle = Workload::IdlePoll;
        assert_eq!(row(idle, &cell(&[10.0]), &ours, &theirs), None, "far below");
        assert_eq!(row(idle, &cell(&[90.0]), &ours, &theirs), None, "far above");
        assert!(row(idle, &cell(&[30.0]), &ours, &theirs).is_some());
        let insert = Workload::Insert;
        assert_eq!(
            row(insert, &cell(&[30.0]), &ours, &theirs),
            None,
            "no per-tick poll"
        );
    }

    /// One row per way its last cell can read: (workload, the bare `Sleep`, the drop-in,
    /// tokio-util's) → the row.
    #[test]
    fn rows_near_the_bound() {
        let cases = [
            // Excesses are pairwise (per repetition); the ratio is tokio-util's ÷ the drop-in's.
            (
                Workload::Churn,
                [100.0, 200.0, 150.0],
                [110.0, 210.0, 160.0],
                [130.0, 230.0, 180.0],
                ["150", "+10.0", "+30.0", "3.00"],
            ),
            // No excess of the drop-in: bound by tokio's timer, no ratio.
            (
                Workload::Churn,
                [100.0; 3],
                [98.0, 103.0, 99.0],
                [120.0, 125.0, 119.0],
                [
                    "100",
                    "−1.00",
                    "+20.0",
                    "bound by tokio's timer (drop-in ≤ 5 % above it)",
                ],
            ),
            // Only tokio-util's at the bound: no ratio either.
            (
                Workload::ExpireTicks,
                [100.0; 3],
                [120.0, 125.0, 119.0],
                [90.0, 103.0, 99.0],
                [
                    "100",
                    "+20.0",
                    "−1.00",
                    "DelayQueue at the bound, the drop-in above it",
                ],
            ),
        ];
        for (w, sleep, ours, theirs, want) in cases {
            let r = row(w, &cell(&sleep), &cell(&ours), &cell(&theirs));
            assert_eq!(r, Some(want.map(String::from).to_vec()), "{w:?}");
        }
    }
}
