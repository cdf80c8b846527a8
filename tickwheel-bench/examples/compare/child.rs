//! One process per size: the parent re-runs this program with its own arguments plus the
//! hidden `--child-size N`; the child measures that size alone (`measure.rs`) and prints
//! one line per cell on its standard output, tab-separated, in the order it measured them:
//!
//! ```text
//! cell    <section>  <name>  <estimate 0|1>  <mismatch 0|1>  <clock-bound 0|1>  <ns of each repetition, comma-separated>
//! memory  <name>  <bytes per timer>  <stats bytes per timer, or ->  <churn heap: prefill>  <half-way>  <end>
//! done    <n>
//! ```
//!
//! `section` is a workload's short name (`insert`, `cancel`, …) or `scheduler` (workload 7);
//! `name` is the column's. Numbers are written with Rust's shortest round-trip formatting,
//! so the parent computes medians and ratios from exactly the child's values. The child's
//! standard error (the `MISMATCH` lines) is collected and passed on once it has exited.
//! A child that exits unsuccessfully, or whose output does not parse, or comes in another
//! order than the plan's, or ends without its `done` line, is an error naming the size and
//! quoting the child's standard error.

use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::thread;

use crate::measure::{CONTENDERS, Cell, Memory};
use crate::peers::Workload;
use crate::{Plan, heap};

/// One line of a child's output.
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    /// A cell of a workload's row or of workload 7's.
    Cell {
        section: String,
        name: String,
        cell: Cell,
    },
    /// Workload 8 for one peer.
    Memory { name: String, memory: Memory },
    /// The last line: the child measured everything it was asked to for `n` timers.
    Done { n: usize },
}

impl Line {
    /// The section of workload 7's cells.
    pub const SCHEDULER: &'static str = "scheduler";

    /// The section of workload 7's cells with `producers` producer threads (`--producers`).
    pub fn scaling(producers: usize) -> String {
        format!("scaling-{producers}")
    }

    pub fn parse(text: &str) -> Result<Line, String> {
        let fields: Vec<&str> = text.split('\t').collect();
        match fields[..] {
            ["cell", section, name, estimate, mismatch, clock_bound, ns] => Ok(Line::Cell {
                section: section.to_string(),
                name: name.to_string(),
                cell: Cell {
                    ns: if ns.is_empty() {
                        Vec::new()
                    } else {
                        ns.split(',').map(number).collect::<Result<_, _>>()?
                    },
                    estimate: flag(estimate)?,
                    mismatch: flag(mismatch)?,
                    clock_bound: flag(clock_bound)?,
                },
            }),
            ["memory", name, per_timer, stats, start, half, end] => Ok(Line::Memory {
                name: name.to_string(),
                memory: Memory {
                    per_timer: number(per_timer)?,
                    stats: if stats == "-" {
                        None
                    } else {
                        Some(number(stats)?)
                    },
                    churn: [number(start)?, number(half)?, number(end)?],
                },
            }),
            ["done", n] => Ok(Line::Done { n: number(n)? }),
            _ => Err("not a cell, memory or done line".to_string()),
        }
    }
}

impl fmt::Display for Line {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Line::Cell {
                section,
                name,
                cell,
            } => {
                let ns: Vec<String> = cell.ns.iter().map(f64::to_string).collect();
                let (e, m, c) = (
                    cell.estimate as u8,
                    cell.mismatch as u8,
                    cell.clock_bound as u8,
                );
                write!(
                    f,
                    "cell\t{section}\t{name}\t{e}\t{m}\t{c}\t{}",
                    ns.join(",")
                )
            }
            Line::Memory { name, memory } => {
                let [start, half, end] = memory.churn;
                let stats = memory.stats.map_or("-".to_string(), |s| s.to_string());
                let per_timer = memory.per_timer;
                write!(
                    f,
                    "memory\t{name}\t{per_timer}\t{stats}\t{start}\t{half}\t{end}"
                )
            }
            Line::Done { n } => write!(f, "done\t{n}"),
        }
    }
}

fn number<T: std::str::FromStr>(text: &str) -> Result<T, String> {
    text.parse()
        .map_err(|_| format!("`{text}` is not a number"))
}

fn flag(text: &str) -> Result<bool, String> {
    match text {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(format!("`{text}` is not 0 or 1")),
    }
}

/// What the parent has received from one size's child, checked against the plan line by line.
pub struct Received<'a> {
    plan: &'a Plan,
    n: usize,
    /// Workloads whose rows are complete.
    rows: usize,
    /// The cells of the row in progress.
    row: Vec<Cell>,
    pub scheduler: Vec<Cell>,
    /// Workload 7's cells per producer count of `--producers`, in its order.
    pub scaling: Vec<Vec<Cell>>,
    pub memory: Vec<Memory>,
    done: bool,
}

impl<'a> Received<'a> {
    pub fn new(plan: &'a Plan, n: usize) -> Self {
        Received {
            plan,
            n,
            rows: 0,
            row: Vec::new(),
            scheduler: Vec::new(),
            scaling: Vec::new(),
            memory: Vec::new(),
            done: false,
        }
    }

    /// What the plan says comes next: (section, column name); `done` has no column.
    fn expected(&self) -> (String, &'static str) {
        let plan = self.plan;
        let scaled = self.scaling.iter().map(Vec::len).sum::<usize>();
        let scaling = plan.producers.len() * CONTENDERS.len();
        if let Some(&w) = plan.workloads.get(self.rows) {
            let name = match plan.peers.get(self.row.len()) {
                Some(peer) => peer.name,
                None => crate::floor::NAME, // the floor comes after the peers
            };
            (w.short().to_string(), name)
        } else if plan.scheduler_at(self.n) && self.scheduler.len() < CONTENDERS.len() {
            (
                Line::SCHEDULER.to_string(),
                CONTENDERS[self.scheduler.len()],
            )
        } else if plan.scheduler_at(self.n) && scaled < scaling {
            let producers = plan.producers[scaled / CONTENDERS.len()];
            (
                Line::scaling(producers),
                CONTENDERS[scaled % CONTENDERS.len()],
            )
        } else if plan.memory && self.memory.len() < plan.peers.len() {
            ("memory".to_string(), plan.peers[self.memory.len()].name)
        } else {
            ("done".to_string(), "")
        }
    }

    /// Takes the next line; returns a workload's row once its last cell is in: the peers'
    /// cells in the plan's order, then the floor's where the plan measures it.
    pub fn take(&mut self, line: Line) -> Result<Option<(Workload, Vec<Cell>)>, String> {
        if self.done {
            return Err("a line after the done line".to_string());
        }
        let plan = self.plan;
        let (section, name) = self.expected();
        match line {
            Line::Cell {
                section: s,
                name: c,
                cell,
            } if s == section && c == name && self.rows < plan.workloads.len() => {
                self.row.push(cell);
                let w = plan.workloads[self.rows];
                if self.row.len() < plan.peers.len() + usize::from(plan.floor_at(w)) {
                    return Ok(None);
                }
                self.rows += 1;
                Ok(Some((w, std::mem::take(&mut self.row))))
            }
            Line::Cell {
                section: s,
                name: c,
                cell,
            } if s == section && c == name && section == Line::SCHEDULER => {
                self.scheduler.push(cell);
                Ok(None)
            }
            Line::Cell {
                section: s,
                name: c,
                cell,
            } if s == section && c == name && section.starts_with("scaling-") => {
                match self.scaling.last_mut() {
                    Some(row) if row.len() < CONTENDERS.len() => row.push(cell),
                    _ => self.scaling.push(vec![cell]),
                }
                Ok(None)
            }
            Line::Memory { name: c, memory } if section == "memory" && c == name => {
                self.memory.push(memory);
                Ok(None)
            }
            Line::Done { n } if section == "done" && n == self.n => {
                self.done = true;
                Ok(None)
            }
            other => {
                let got = match other {
                    Line::Cell { section, name, .. } => format!("the {section} cell of {name}"),
                    Line::Memory { name, .. } => format!("the memory line of {name}"),
                    Line::Done { n } => format!("the done line of n = {n}"),
                };
                let of = if name.is_empty() {
                    String::new()
                } else {
                    format!(" of {name}")
                };
                Err(format!("expected the {section} line{of}, got {got}"))
            }
        }
    }
}

/// Runs the child for `n` timers: re-runs this program with the same arguments plus
/// `--child-size n` (and [`heap::MALLOC_TUNABLES`]), hands each line of its output to `take`
/// as it arrives, and passes its standard error on once it has exited. Stops (killing the
/// child) at the first line that does not parse or that `take` rejects.
pub fn run(n: usize, mut take: impl FnMut(Line) -> Result<(), String>) -> Result<(), String> {
    let exe = std::env::current_exe()
        .map_err(|e| format!("size {n}: cannot find this program to re-run it: {e}"))?;
    let mut child = Command::new(&exe)
        .args(std::env::args_os().skip(1))
        .arg("--child-size")
        .arg(n.to_string())
        .env("GLIBC_TUNABLES", heap::tunables())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("size {n}: cannot start {}: {e}", exe.display()))?;
    let (Some(stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(format!("size {n}: the child's output pipes are missing"));
    };
    // Read on its own thread, so a child that writes much to standard error cannot block.
    let errors = thread::spawn(move || {
        let mut bytes = Vec::new();
        let read = stderr.read_to_end(&mut bytes);
        let mut text = String::from_utf8_lossy(&bytes).into_owned();
        if let Err(e) = read {
            text.push_str(&format!("\n(reading the rest failed: {e})"));
        }
        text
    });

    let mut outcome = Ok(());
    let mut done = false;
    for (i, line) in BufReader::new(stdout).lines().enumerate() {
        let step = match line {
            Err(e) => Err(format!("reading its output failed: {e}")),
            Ok(text) => Line::parse(&text)
                .and_then(|line| {
                    done |= matches!(line, Line::Done { .. });
                    take(line)
                })
                .map_err(|e| format!("line {}: {e}: `{text}`", i + 1)),
        };
        if step.is_err() {
            outcome = step;
            break;
        }
    }
    let stopped = outcome.is_err();
    if stopped {
        let _ = child.kill(); // its output is of no use any more; fails if it has exited
    } else if !done {
        outcome = Err("its output ended before the done line".to_string());
    }
    let status = child.wait();
    let errors = errors
        .join()
        .unwrap_or_else(|_| "(the thread reading it panicked)".to_string());
    let quoted = if errors.trim().is_empty() {
        "its standard error was empty".to_string()
    } else {
        format!("its standard error:\n{}", errors.trim_end())
    };
    match status {
        Err(e) => Err(format!(
            "size {n}: waiting for the child failed: {e}; {quoted}"
        )),
        Ok(status) if !stopped && !status.success() => {
            Err(format!("size {n}: the child failed ({status}); {quoted}"))
        }
        Ok(_) => match outcome {
            Err(e) => Err(format!(
                "size {n}: the child's output is unusable: {e}; {quoted}"
            )),
            Ok(()) => {
                eprint!("{errors}");
                Ok(())
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_exactly() {
        let lines = [
            Line::Cell {
                section: "churn".to_string(),
                name: "tokio Sleep".to_string(),
                cell: Cell {
                    ns: vec![0.1 + 0.2, 1e-300, 123456.789, f64::INFINITY],
                    estimate: true,
                    mismatch: false,
                    clock_bound: false,
                },
            },
            Line::Cell {
                section: Line::SCHEDULER.to_string(),
                name: "Mutex<DelayQueue>".to_string(),
                cell: Cell {
                    ns: vec![],
                    estimate: false,
                    mismatch: true,
                    clock_bound: true,
                },
            },
            Line::Memory {
                name: "tickwheel".to_string(),
                memory: Memory {
                    per_timer: 38.4,
                    stats: Some(61.25),
                    churn: [1, -2, isize::MAX],
                },
            },
            Line::Memory {
                name: "BTreeMap".to_string(),
                memory: Memory {
                    per_timer: 0.0,
                    stats: None,
                    churn: [0, 0, 0],
                },
            },
            Line::Done { n: 1_000_000 },
        ];
        for line in lines {
            assert_eq!(Line::parse(&line.to_string()), Ok(line));
        }
    }

    /// A measured cell of 1 ns in `section`, named `name`.
    fn cell(section: &str, name: &str) -> Line {
        Line::Cell {
            section: section.to_string(),
            name: name.to_string(),
            cell: Cell {
                ns: vec![1.0],
                estimate: false,
                mismatch: false,
                clock_bound: false,
            },
        }
    }

    #[test]
    fn lines_are_checked_against_the_plan() {
        use clap::Parser;
        let args = crate::Args::parse_from([
            "compare",
            "--workloads",
            "insert",
            "--peers",
            "BTreeMap",
            "--no-scheduler",
        ]);
        let plan = Plan::new(&args);
        let memory = |name: &str| Line::Memory {
            name: name.to_string(),
            memory: Memory {
                per_timer: 1.0,
                stats: None,
                churn: [0; 3],
            },
        };
        let script = [
            cell("insert", "tickwheel"),
            cell("insert", "BTreeMap"),
            cell("insert", crate::floor::NAME),
            memory("tickwheel"),
            memory("BTreeMap"),
            Line::Done { n: 1000 },
        ];
        let mut received = Received::new(&plan, 1000);
        let rows: Vec<_> = script
            .iter()
            .map(|line| {
                received
                    .take(line.clone())
                    .map(|row| row.map(|(_, r)| r.len()))
            })
            .collect();
        // The row, floor last, once the floor's cell is in.
        assert_eq!(
            rows,
            [
                Ok(None),
                Ok(None),
                Ok(Some(3)),
                Ok(None),
                Ok(None),
                Ok(None)
            ]
        );
        assert_eq!(received.memory.len(), 2);
        assert!(received.take(Line::Done { n: 1000 }).is_err());

        // Each of these, somewhere in the script, is rejected: the row of another workload,
        // a peer out of order, the floor before the peers, memory before the floor, a cell
        // where memory is due, the scheduler (switched off), an early or foreign done line.
        for (at, wrong) in [
            (0, cell("cancel", "tickwheel")),
            (0, cell("insert", "BTreeMap")),
            (1, cell("insert", crate::floor::NAME)),
            (2, memory("tickwheel")),
            (3, cell("memory", "tickwheel")),
            (3, cell("insert", crate::floor::NAME)),
            (3, cell(Line::SCHEDULER, "tickwheel")),
            (1, Line::Done { n: 1000 }),
            (5, Line::Done { n: 100_000 }),
            (5, cell("done", "")),
        ] {
            let mut received = Received::new(&plan, 1000);
            for line in &script[..at] {
                assert!(received.take(line.clone()).is_ok());
            }
            assert!(received.take(wrong.clone()).is_err(), "{wrong:?} at {at}");
        }

        // Without the floor (`--no-floor`, or a workload it does not apply to) the row ends
        // with the last peer, and a floor cell is rejected.
        for extra in [
            ["--no-floor", "--workloads", "insert"],
            ["--workloads", "churn", "--quick"],
        ] {
            let mut argv = vec![
                "compare",
                "--peers",
                "BTreeMap",
                "--no-scheduler",
                "--no-memory",
            ];
            argv.extend(extra);
            let plan = Plan::new(&crate::Args::parse_from(argv));
            let section = plan.workloads[0].short();
            let mut received = Received::new(&plan, 1000);
            assert_eq!(
                received
                    .take(cell(section, "tickwheel"))
                    .map(|r| r.is_some()),
                Ok(false)
            );
            assert_eq!(
                received
                    .take(cell(section, "BTreeMap"))
                    .map(|r| r.is_some()),
                Ok(true)
            );
            assert!(received.take(cell(section, crate::floor::NAME)).is_err());
        }
    }

    #[test]
    fn scaling_cells_follow_workload_7_by_producer_count() {
        use clap::Parser;
        let args = crate::Args::parse_from(["compare", "--scheduler-only", "--producers", "1,4"]);
        let plan = Plan::new(&args);
        let mut script: Vec<Line> = Vec::new();
        for section in [
            Line::SCHEDULER.to_string(),
            Line::scaling(1),
            Line::scaling(4),
        ] {
            script.extend(CONTENDERS.iter().map(|name| cell(&section, name)));
        }
        script.push(Line::Done { n: 100_000 });
        let mut received = Received::new(&plan, 100_000);
        for line in &script {
            assert_eq!(received.take(line.clone()), Ok(None), "{line:?}");
        }
        assert_eq!(received.scheduler.len(), CONTENDERS.len());
        let rows: Vec<usize> = received.scaling.iter().map(Vec::len).collect();
        assert_eq!(rows, [CONTENDERS.len(), CONTENDERS.len()]);

        // A producer count out of order, or the done line before the last scaling cell.
        for (at, wrong) in [
            (3, cell(&Line::scaling(4), CONTENDERS[0])),
            (8, Line::Done { n: 100_000 }),
        ] {
            let mut received = Received::new(&plan, 100_000);
            for line in &script[..at] {
                assert!(received.take(line.clone()).is_ok());
            }
            assert!(received.take(wrong.clone()).is_err(), "{wrong:?} at {at}");
        }
    }

    #[test]
    fn bad_lines_are_errors() {
        for text in [
            "",
            "done",
            "done\tx",
            "done\t1\t2",
            "cell\tinsert\ttickwheel\t0\t2\t1.5",
            "cell\tinsert\ttickwheel\t0\t0\t1.5,,2",
            "memory\ttickwheel\t1\t-\t1\t2",
            "n = 1000 timers",
        ] {
            assert!(Line::parse(text).is_err(), "{text:?}");
        }
    }
}
