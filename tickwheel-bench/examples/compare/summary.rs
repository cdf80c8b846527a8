//! The run's last lines: the slowest ratio of each comparison, over every workload measured.
//!
//! Workloads 1–6 and the idle poll (every size): tokio-util's `DelayQueue` ÷ tickwheel's
//! drop-in, and tokio-util's `DelayQueue` ÷ the core wheel. Workload 7 (the scheduler, where
//! run): each contender ÷ tickwheel's scheduler. Workload 8 (memory): tokio-util's
//! `DelayQueue` ÷ the drop-in in heap bytes per timer. A comparison that was not run says
//! `n/a`. A clock-bound cell (`≈` in the table: a tokio peer's figure that the paused
//! clock's overhead decides, see `measure::clock_bound`) is left out of these ratios; the
//! table of the `DelayQueue`s above tokio's timer compares those. The very last line keeps
//! its fixed format for scripts:
//! `slowest ratio vs tokio DelayQueue: X.XX`.
//!
//! Before them, where the floor was measured (`floor.rs`), one line per size gives the core
//! wheel ÷ the floor for insert, cancel and the two expiry workloads, after a line naming
//! the targets at 1 M timers.

use crate::measure::{CONTENDERS, Cell, Memory};

/// A ratio and where it comes from: (ratio, workload, timers, a mark for a cell that is an
/// estimate or fired the wrong timers).
pub type Slowest = (f64, &'static str, usize, &'static str);

/// The smallest ratio of each comparison seen so far.
#[derive(Debug, Default)]
pub struct Summary {
    dq_vs_drop_in: Option<Slowest>,
    dq_vs_core: Option<Slowest>,
    /// Per workload-7 contender after tickwheel's own (the order of `CONTENDERS`).
    scheduler: [Option<Slowest>; 2],
    memory: Option<Slowest>,
    /// Core wheel ÷ floor, per size in the order measured: (timers, [(workload, ratio)]).
    floor: Vec<(usize, Vec<(&'static str, f64)>)>,
}

/// The targets of the core wheel against the floor at 1 M timers, by workload: at most this
/// many times the floor.
pub const FLOOR_TARGETS: [(&str, f64); 4] = [
    ("insert", 2.0),
    ("cancel", 2.0),
    ("expire_once", 2.5),
    ("expire_ticks", 2.5),
];

impl Summary {
    /// One row of workloads 1–6 or the idle poll: `cells[0]` is the core wheel; `dq` and
    /// `drop_in` index tokio-util's `DelayQueue` and tickwheel's, where the run has them.
    /// A ratio with a clock-bound cell on either side is left out.
    pub fn row(
        &mut self,
        workload: &'static str,
        n: usize,
        cells: &[Cell],
        dq: Option<usize>,
        drop_in: Option<usize>,
    ) {
        let (Some(dq), Some(base)) = (dq.and_then(|i| cells.get(i)), cells.first()) else {
            return;
        };
        if dq.clock_bound {
            return;
        }
        if !base.clock_bound {
            keep_min(
                &mut self.dq_vs_core,
                (dq.ratio_to(base), workload, n, mark(&[dq, base])),
            );
        }
        if let Some(ours) = drop_in
            .and_then(|i| cells.get(i))
            .filter(|c| !c.clock_bound)
        {
            keep_min(
                &mut self.dq_vs_drop_in,
                (dq.ratio_to(ours), workload, n, mark(&[dq, ours])),
            );
        }
    }

    /// The core wheel's cell `core` of `workload` at `n` timers against the floor measured
    /// beside it: the median of the per-repetition ratios core ÷ floor.
    pub fn floor(&mut self, workload: &'static str, n: usize, core: &Cell, floor: &Cell) {
        let ratio = (workload, core.ratio_to(floor));
        match self.floor.last_mut() {
            Some((m, row)) if *m == n => row.push(ratio),
            _ => self.floor.push((n, vec![ratio])),
        }
    }

    /// Workload 7 at `n` timers: `cells` in the order of `CONTENDERS`, tickwheel first.
    pub fn scheduler(&mut self, n: usize, cells: &[Cell]) {
        let Some(base) = cells.first() else {
            return;
        };
        for (slot, other) in self.scheduler.iter_mut().zip(cells.iter().skip(1)) {
            keep_min(
                slot,
                (other.ratio_to(base), "scheduler", n, mark(&[other, base])),
            );
        }
    }

    /// Workload 8 at `n` timers, indexed as the table's peers.
    pub fn memory(&mut self, n: usize, row: &[Memory], dq: Option<usize>, drop_in: Option<usize>) {
        let (Some(dq), Some(ours)) = (
            dq.and_then(|i| row.get(i)),
            drop_in.and_then(|i| row.get(i)),
        ) else {
            return;
        };
        if ours.per_timer > 0.0 {
            keep_min(
                &mut self.memory,
                (dq.per_timer / ours.per_timer, "memory", n, ""),
            );
        }
    }

    /// The last lines, in print order.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if !self.floor.is_empty() {
            let targets: Vec<String> = FLOOR_TARGETS
                .iter()
                .map(|(w, t)| format!("{w} ≤ {t}"))
                .collect();
            lines.push(format!(
                "tickwheel ÷ floor (targets at 1000000 timers: {})",
                targets.join(", ")
            ));
            for (n, row) in &self.floor {
                let ratios: Vec<String> = row
                    .iter()
                    .map(|(w, r)| {
                        let missed = FLOOR_TARGETS
                            .iter()
                            .any(|(t, most)| t == w && *n == 1_000_000 && r > most);
                        format!("{w} {r:.2}×{}", if missed { " (missed)" } else { "" })
                    })
                    .collect();
                lines.push(format!("  n = {n}: {}", ratios.join(", ")));
            }
        }
        lines.push(format!(
            "slowest ratio, tokio-util DelayQueue vs tickwheel's DelayQueue: {}{}",
            ratio(self.dq_vs_drop_in),
            cell(self.dq_vs_drop_in)
        ));
        for (name, slowest) in CONTENDERS.iter().skip(1).zip(self.scheduler) {
            lines.push(format!(
                "slowest ratio, {name} vs tickwheel's scheduler (workload 7): {}{}",
                ratio(slowest),
                cell(slowest)
            ));
        }
        lines.push(format!(
            "smallest memory ratio, tokio-util DelayQueue vs tickwheel's DelayQueue (bytes per timer): {}{}",
            ratio(self.memory),
            cell(self.memory)
        ));
        lines.push(format!(
            "slowest cell vs tokio DelayQueue (tokio-util DelayQueue ÷ tickwheel):{}",
            match self.dq_vs_core {
                Some(_) => cell(self.dq_vs_core),
                None => " n/a".to_string(),
            }
        ));
        lines.push(format!(
            "slowest ratio vs tokio DelayQueue: {}",
            ratio(self.dq_vs_core)
        ));
        lines
    }
}

fn ratio(r: Option<Slowest>) -> String {
    match r {
        Some((r, ..)) => format!("{r:.2}"),
        None => "n/a".to_string(),
    }
}

fn cell(r: Option<Slowest>) -> String {
    match r {
        Some((_, w, n, mark)) => format!(" ({w}, {n}{mark})"),
        None => String::new(),
    }
}

/// ", mismatch" or ", estimate" when a cell fired the wrong timers or stopped at its budget.
pub fn mark(cells: &[&Cell]) -> &'static str {
    if cells.iter().any(|c| c.mismatch) {
        ", mismatch"
    } else if cells.iter().any(|c| c.estimate) {
        ", estimate"
    } else {
        ""
    }
}

/// Keeps the smaller ratio (the earlier one on a tie).
fn keep_min(slot: &mut Option<Slowest>, cell: Slowest) {
    match slot {
        Some((r, ..)) if *r <= cell.0 => {}
        _ => *slot = Some(cell),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(ns: f64) -> Cell {
        Cell {
            ns: vec![ns],
            estimate: false,
            mismatch: false,
            clock_bound: false,
        }
    }

    fn clock_bound(ns: f64) -> Cell {
        Cell {
            clock_bound: true,
            ..cell(ns)
        }
    }

    /// A ratio with a clock-bound cell on either side is left out of the slowest ratios: a
    /// row whose tokio cells are clock-bound cannot be the slowest, however small its ratio.
    #[test]
    fn clock_bound_cells_are_left_out() {
        let mut s = Summary::default();
        s.row(
            "insert",
            1000,
            &[cell(10.0), cell(12.0), cell(30.0)],
            Some(2),
            Some(1),
        );
        // tokio-util's figure, decided by the clock's overhead, below both of ours.
        s.row(
            "churn",
            1000,
            &[cell(30.0), cell(20.0), clock_bound(10.0)],
            Some(2),
            Some(1),
        );
        // Only the drop-in's cell clock-bound: the core's ratio still counts.
        s.row(
            "idle_poll",
            1000,
            &[cell(2.0), clock_bound(40.0), cell(5.0)],
            Some(2),
            Some(1),
        );
        let lines = s.lines();
        assert_eq!(
            lines[0],
            "slowest ratio, tokio-util DelayQueue vs tickwheel's DelayQueue: 2.50 (insert, 1000)"
        );
        assert_eq!(
            lines[4],
            "slowest cell vs tokio DelayQueue (tokio-util DelayQueue ÷ tickwheel): (idle_poll, 1000)"
        );
        assert_eq!(lines[5], "slowest ratio vs tokio DelayQueue: 2.50");
    }

    fn memory(per_timer: f64) -> Memory {
        Memory {
            per_timer,
            stats: None,
            churn: [0; 3],
        }
    }

    /// The idle poll, the scheduler and memory each reach the summary: a workload whose ratio
    /// is the slowest is named, whichever it is.
    #[test]
    fn no_workload_is_left_out() {
        let mut s = Summary::default();
        // Peers: core wheel, drop-in, tokio-util's DelayQueue.
        s.row(
            "insert",
            1000,
            &[cell(10.0), cell(20.0), cell(60.0)],
            Some(2),
            Some(1),
        );
        s.row(
            "idle_poll",
            1000,
            &[cell(1.0), cell(7.0), cell(7.7)],
            Some(2),
            Some(1),
        );
        s.scheduler(100_000, &[cell(100.0), cell(150.0), cell(130.0)]);
        s.scheduler(1_000_000, &[cell(100.0), cell(120.0), cell(170.0)]);
        s.memory(
            1000,
            &[memory(38.0), memory(40.0), memory(60.0)],
            Some(2),
            Some(1),
        );
        let lines = s.lines();
        assert_eq!(
            lines[0],
            "slowest ratio, tokio-util DelayQueue vs tickwheel's DelayQueue: 1.10 (idle_poll, 1000)"
        );
        assert!(
            lines[1].ends_with("(workload 7): 1.20 (scheduler, 1000000)"),
            "{}",
            lines[1]
        );
        assert!(
            lines[2].ends_with("(workload 7): 1.30 (scheduler, 100000)"),
            "{}",
            lines[2]
        );
        assert!(lines[3].ends_with("1.50 (memory, 1000)"), "{}", lines[3]);
        assert!(lines[4].ends_with(" (insert, 1000)"), "{}", lines[4]);
        assert_eq!(
            lines.last().map(String::as_str),
            Some("slowest ratio vs tokio DelayQueue: 6.00")
        );
    }

    /// Each size's ratios core ÷ floor get a line of their own, in the order measured, and a
    /// ratio over its target at 1 M timers is marked; the fixed last line stays last.
    #[test]
    fn floor_ratios_by_size() {
        let mut s = Summary::default();
        s.floor("insert", 1000, &cell(6.0), &cell(2.0));
        s.floor("cancel", 1000, &cell(3.0), &cell(2.0));
        s.floor("insert", 1_000_000, &cell(30.0), &cell(10.0));
        s.floor("expire_once", 1_000_000, &cell(20.0), &cell(10.0));
        let lines = s.lines();
        assert!(
            lines[0].starts_with("tickwheel ÷ floor (targets"),
            "{}",
            lines[0]
        );
        assert_eq!(lines[1], "  n = 1000: insert 3.00×, cancel 1.50×");
        assert_eq!(
            lines[2],
            "  n = 1000000: insert 3.00× (missed), expire_once 2.00×"
        );
        assert_eq!(lines.len(), 3 + 6);
        assert_eq!(lines[8], "slowest ratio vs tokio DelayQueue: n/a");
    }

    #[test]
    fn comparisons_not_run_say_so() {
        let lines = Summary::default().lines();
        assert_eq!(lines.len(), 6);
        assert!(lines.iter().all(|l| l.contains("n/a")), "{lines:?}");
        assert_eq!(lines[5], "slowest ratio vs tokio DelayQueue: n/a");
    }
}
