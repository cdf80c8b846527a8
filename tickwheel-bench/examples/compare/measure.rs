//! The child's side: measuring one size (workloads 1–6 and the idle poll, workload 7,
//! workload 8) and printing each cell as one line of the protocol in `child.rs`.

use std::time::{Duration, Instant};

use crate::child::Line;
use crate::floor;
use crate::peers::scheduler::{self as sched, Contender};
use crate::peers::{Input, Peer, Tickwheel, Workload, median};
use crate::{Entry, Plan, counting, live_heap};

/// The samples of one cell: ns per operation of each repetition, in repetition order.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    pub ns: Vec<f64>,
    /// A run stopped at its budget (the figure is an estimate).
    pub estimate: bool,
    /// A run fired or cancelled the wrong timers.
    pub mismatch: bool,
    /// A tokio peer's figure is mostly the paused clock's overhead, subtracted (see
    /// [`clock_bound`]).
    pub clock_bound: bool,
}

/// Above this share of a sample's measured time, the tokio clock's overhead subtracted from
/// it leaves a figure that the overhead's own drift decides.
pub const CLOCK_BOUND_SHARE: f64 = 0.75;

/// Whether a sample that took `measured_ns` of CPU and is `net_ns` once the tokio clock's
/// overhead is subtracted is clock-bound: the overhead was more than [`CLOCK_BOUND_SHARE`]
/// of it. The overhead is calibrated once per size, on an empty runtime (`tokio.rs` in the
/// peers), and its cost inside a run can differ from that by several percent; past three
/// quarters, a drift of 3 % in it moves the figure by 9 % or more. The tokio peers' cells
/// that poll at every tick at 1 000 timers, and their idle polls at every size, are 79–92 %
/// overhead, and came out up to 10 times apart between runs on the same machine.
pub fn clock_bound(measured_ns: f64, net_ns: f64) -> bool {
    measured_ns > 0.0 && measured_ns - net_ns > CLOCK_BOUND_SHARE * measured_ns
}

impl Cell {
    pub fn median(&self) -> f64 {
        median(&mut self.ns.clone())
    }

    /// The median over repetitions of this cell's sample ÷ `base`'s sample of the same
    /// repetition (pairwise: both ran back to back, so they saw the same machine).
    pub fn ratio_to(&self, base: &Cell) -> f64 {
        let mut ratios: Vec<f64> = self.ns.iter().zip(&base.ns).map(|(a, b)| a / b).collect();
        median(&mut ratios)
    }
}

/// Workload 8 for one peer, raw: the table's text is made from it by the parent.
#[derive(Debug, Clone, PartialEq)]
pub struct Memory {
    /// Heap bytes per pending timer after `n` inserts.
    pub per_timer: f64,
    /// `Wheel::stats().bytes_held` per timer, for tickwheel only.
    pub stats: Option<f64>,
    /// Churn heap bytes (all lanes) after the prefill, half-way and at the end.
    pub churn: [isize; 3],
}

/// The contenders of workload 7, in the order of their cells.
pub const CONTENDERS: [&str; 3] = [
    sched::TickwheelScheduler::NAME,
    sched::MutexDelayQueue::NAME,
    sched::MutexBTreeMap::NAME,
];

/// Measures size `n` as `plan` says and prints one protocol line per cell, then the end
/// line. Runs in the child process.
pub fn child(plan: &Plan, n: usize) {
    crate::heap::prefault_heap(n);
    let emit = |section: &str, name: &str, cell: Cell| {
        let (section, name) = (section.to_string(), name.to_string());
        println!(
            "{}",
            Line::Cell {
                section,
                name,
                cell
            }
        );
    };
    let input = Input::new(n);
    for &w in &plan.workloads {
        let floor = plan.floor_at(w);
        let mut cells = measure(&plan.peers, w, &input, plan.reps, plan.budget, floor);
        let floor = floor.then(|| cells.pop()).flatten();
        for (peer, cell) in plan.peers.iter().zip(cells) {
            emit(w.short(), peer.name, cell);
        }
        if let Some(cell) = floor {
            emit(w.short(), floor::NAME, cell);
        }
    }
    if plan.scheduler_at(n) {
        let cells = scheduler(n as u64, sched::PRODUCERS, plan.scheduler_reps);
        for (name, cell) in CONTENDERS.iter().zip(cells) {
            emit(Line::SCHEDULER, name, cell);
        }
        for &producers in &plan.producers {
            let cells = scheduler(n as u64, producers as u64, plan.scheduler_reps);
            for (name, cell) in CONTENDERS.iter().zip(cells) {
                emit(&Line::scaling(producers), name, cell);
            }
        }
    }
    if plan.memory {
        for (peer, memory) in plan.peers.iter().zip(memory(&plan.peers, &input)) {
            let name = peer.name.to_string();
            println!("{}", Line::Memory { name, memory });
        }
    }
    println!("{}", Line::Done { n });
}

/// The budget of the unmeasured warm-up run of each cell.
const WARM_UP_BUDGET: Duration = Duration::from_millis(300);

/// One sample repeats a workload (on a fresh structure each time, setup untimed) until the
/// timed regions add up to this much: one run on 1 000 timers is ~15 µs, and reading the
/// thread's CPU clock costs ~0.2 µs.
const MIN_SAMPLE: Duration = Duration::from_millis(10);

/// A sample stops repeating once it has taken this much wall time, setup included, even
/// short of [`MIN_SAMPLE`]: the idle poll's timed region is ~30 µs whatever `n`, and at
/// 100 000 timers each of its runs first inserts them all, untimed.
const MAX_SAMPLE_WALL: Duration = Duration::from_millis(200);

/// One sample of `workload` on `peer`: as many runs as it takes to reach [`MIN_SAMPLE`] of
/// timed region or [`MAX_SAMPLE_WALL`] of wall time (or one run that stopped at its budget),
/// summed into one outcome. Reports a
/// run whose result does not match the expected one.
fn sample(peer: &Entry, workload: Workload, input: &Input, budget: Duration) -> Sample {
    let (mut nanos, mut ops, mut timed) = (0.0, 0u64, 0u64);
    let mut mismatch = false;
    let started = Instant::now();
    loop {
        let o = (peer.run)(workload, input, budget);
        if o.tally != o.expected && !mismatch {
            mismatch = true;
            eprintln!(
                "MISMATCH: {} on {} at n={}{}: got {:?}, expected {:?}",
                peer.name,
                workload.label(),
                input.n,
                if o.partial {
                    " (stopped at the budget)"
                } else {
                    ""
                },
                o.tally,
                o.expected
            );
        }
        nanos += o.nanos;
        ops += o.ops;
        timed += o.timed_ns;
        if o.partial
            || Duration::from_nanos(timed) >= MIN_SAMPLE
            || started.elapsed() >= MAX_SAMPLE_WALL
        {
            return Sample {
                ns: nanos / ops.max(1) as f64,
                partial: o.partial,
                mismatch,
                clock_bound: clock_bound(timed as f64, nanos),
            };
        }
    }
}

/// One sample's figure (ns per operation) and what marks it.
struct Sample {
    ns: f64,
    /// The last run stopped at its budget.
    partial: bool,
    mismatch: bool,
    clock_bound: bool,
}

/// The cells of one workload, one per peer in order, then the floor's (`floor.rs`) when
/// `with_floor`: every repetition runs each once, the floor in the rotation like a peer.
fn measure(
    peers: &[Entry],
    workload: Workload,
    input: &Input,
    reps: usize,
    budget: Duration,
    with_floor: bool,
) -> Vec<Cell> {
    let columns = peers.len() + usize::from(with_floor);
    let mut cells: Vec<Cell> = (0..columns)
        .map(|_| Cell {
            ns: Vec::new(),
            estimate: false,
            mismatch: false,
            clock_bound: false,
        })
        .collect();
    // One short unmeasured run each first: the allocator's free lists and the page tables
    // then look like a program that has run for a while, not like a fresh process (page
    // faults are expensive on this kind of virtual machine).
    for peer in peers {
        let _ = (peer.run)(workload, input, budget.min(WARM_UP_BUDGET));
    }
    for rep in 0..reps {
        // Rotate the order each repetition so no peer always runs first (warm caches, turbo).
        for k in 0..columns {
            let i = (k + rep) % columns;
            if i == peers.len() {
                let ns = floor::sample(input.n, MIN_SAMPLE, MAX_SAMPLE_WALL);
                cells[i].ns.push(ns);
                continue;
            }
            if cells[i].estimate {
                continue; // one estimate is enough for a run that blows its budget
            }
            // tickwheel is the reference of every ratio: it always runs to the end.
            let budget = if i == 0 { Duration::MAX } else { budget };
            let sample = sample(&peers[i], workload, input, budget);
            let cell = &mut cells[i];
            cell.ns.push(sample.ns);
            cell.estimate |= sample.partial;
            cell.mismatch |= sample.mismatch;
            cell.clock_bound |= sample.clock_bound;
        }
    }
    cells
}

/// Workload 7 with `producers` producer threads on the three contenders, interleaved, `reps`
/// times: wall ns per op of each run.
fn scheduler(n: u64, producers: u64, reps: usize) -> Vec<Cell> {
    let mut samples: [Vec<sched::Throughput>; 3] = Default::default();
    for rep in 0..reps {
        for k in 0..3 {
            let i = (k + rep) % 3;
            let t = match i {
                0 => sched::run_with(n, producers, sched::TickwheelScheduler::new),
                1 => sched::run_with(n, producers, sched::MutexDelayQueue::new),
                _ => sched::run_with(n, producers, sched::MutexBTreeMap::default),
            };
            samples[i].push(t);
        }
    }
    samples
        .iter()
        .map(|runs| Cell {
            ns: runs.iter().map(sched::Throughput::ns_per_op).collect(),
            estimate: false,
            mismatch: runs.iter().any(|t| !t.exact),
            clock_bound: false,
        })
        .collect()
}

fn memory(peers: &[Entry], input: &Input) -> Vec<Memory> {
    // The churn script is built before counting starts: it is the harness's, not a peer's.
    let script = input.churn();
    peers
        .iter()
        .map(|peer| {
            let per_timer = counting(|| (peer.bytes)(input, &live_heap));
            let stats = (peer.name == Tickwheel::NAME).then(|| tickwheel_stats_bytes(input));
            let churn = counting(|| (peer.churn_heap)(input, &live_heap));
            let _ = &script;
            Memory {
                per_timer,
                stats,
                churn,
            }
        })
        .collect()
}

/// `Wheel::stats().bytes_held` per timer for the same inserts as the memory workload.
fn tickwheel_stats_bytes(input: &Input) -> f64 {
    let mut wheel = tickwheel::Wheel::new();
    for (lane, &d) in input.deadlines.iter().enumerate() {
        wheel.insert(d, lane as u64);
    }
    wheel.stats().bytes_held as f64 / input.n as f64
}

#[cfg(test)]
mod tests {
    use super::clock_bound;

    #[test]
    fn clock_bound_past_three_quarters_of_the_time() {
        // (measured, net of the overhead) → clock-bound
        let cases = [
            (1000.0, 1000.0, false), // no overhead: every peer but tokio's
            (1000.0, 260.0, false),  // 74 %
            (1000.0, 240.0, true),   // 76 %
            (7000.0, 330.0, true),   // 95 %
            (1000.0, 10.0, true),    // the floor of 1 % the subtraction keeps
            (0.0, 0.0, false),       // nothing measured
        ];
        for (measured, net, want) in cases {
            assert_eq!(clock_bound(measured, net), want, "{measured} {net}");
        }
    }
}
