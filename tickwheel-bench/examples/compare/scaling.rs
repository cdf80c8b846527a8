//! The scaling figure of workload 7 (`--producers`): throughput by producer count, the three
//! contenders side by side, so a reader sees how each degrades as producers are added and
//! when the threads outnumber the cores.

use crate::measure::{CONTENDERS, Cell};
use crate::peers::scheduler as sched;
use crate::table::Table;
use crate::{Plan, fmt_ns};

/// Workload 7 at one size, as received from its child: the size, the cells with the
/// default producer count, and the cells of each `--producers` count, in its order.
pub type Row = (usize, Vec<Cell>, Vec<Vec<Cell>>);

/// Prints the scaling table: one row per size and producer count, a cell per contender with
/// its throughput (millions of operations per second of wall time: schedules, drains and
/// timers ended), the min–max spread over repetitions, and the ratio to tickwheel.
pub fn print(markdown: bool, plan: &Plan, rows: &[Row]) {
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    println!();
    println!(
        "7 scaling: throughput in M ops/s (schedules + drains + timers ended per second of wall time) with P producer threads + 1 dispatcher on {cores} cores (std::thread::available_parallelism); rows marked oversubscribed have more threads than cores, so their threads take turns on the cores; drains every {} schedules of each producer; median [min–max] of {} repetitions; (r×) = median pairwise tickwheel ÷ contender throughput, above 1 means tickwheel is ahead",
        sched::DRAIN_EVERY,
        plan.scheduler_reps
    );
    let mut table = Table::new(markdown, "scaling", &CONTENDERS);
    for (n, _, scaling) in rows {
        for (&producers, cells) in plan.producers.iter().zip(scaling) {
            let texts = cells
                .iter()
                .enumerate()
                .map(|(i, cell)| throughput(cell, &cells[0], i == 0))
                .collect();
            let over = if producers + 1 > cores {
                ", oversubscribed"
            } else {
                ""
            };
            let plural = if producers == 1 { "" } else { "s" };
            let label = format!("n={n}, {producers} producer{plural}{over}");
            table.row(&label, texts);
        }
    }
    table.print();
}

/// `cell` as throughput: median [min–max] in M ops/s, then the ratio to `base` unless it is
/// the base; `!` first if a run lost or doubled a timer.
fn throughput(cell: &Cell, base: &Cell, is_base: bool) -> String {
    let per_second = |ns: f64| 1000.0 / ns;
    let (lo, hi) = cell.ns.iter().fold((f64::INFINITY, 0f64), |(lo, hi), &ns| {
        (lo.min(ns), hi.max(ns))
    });
    let mark = if cell.mismatch { "!" } else { "" };
    let text = format!(
        "{mark}{} [{}–{}]",
        fmt_ns(per_second(cell.median())),
        fmt_ns(per_second(hi)),
        fmt_ns(per_second(lo))
    );
    if is_base {
        text
    } else {
        format!("{text} ({:.1}×)", cell.ratio_to(base))
    }
}
