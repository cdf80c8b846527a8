//! Side-by-side comparison of tickwheel with tokio and the other timer wheels, on the benchmark workloads.
//!
//! ```text
//! cargo run --release -p tickwheel-bench --features tokio --example compare -- --quick     # 100 000 timers, under a minute
//! cargo run --release -p tickwheel-bench --features tokio --example compare                # 1 000, 100 000 and 1 000 000
//! cargo run --release -p tickwheel-bench --features tokio --example compare -- --markdown  # tables for PERFORMANCE.md
//! ```
//!
//! Without `--features tokio` the `tickwheel DelayQueue` column (tickwheel's drop-in for
//! tokio-util's `DelayQueue`) is left out, and the output says so.
//!
//! Each size runs in a process of its own: this program re-runs itself once per size with
//! the same arguments plus a hidden `--child-size N`; the child measures that size (workloads
//! 1–6 and the idle poll, then workload 7, then workload 8) and prints each cell as a line of
//! text (`child.rs`), and this process prints each size's table once its child is done (a
//! plain-text table's column widths come from all its cells) and, at the end, the slowest
//! cells over all sizes. A size's figures therefore no longer depend on the sizes
//! measured before it (heap and allocator state, page tables, tokio's clock calibration);
//! within one size, workloads and peers still run one after another in one process. A child
//! that fails, or whose output does not parse or comes out of order, stops the run: exit
//! status 1 and a message naming the size and quoting the child's standard error.
//!
//! Every workload runs once per peer per repetition, peers interleaved (so noise on a shared
//! machine hits them alike). One repetition's sample repeats the workload, on a fresh
//! structure each time with the setup untimed, until its timed regions add up to 10 ms (or
//! the sample has taken 0.2 s of wall time, setup included, which only the idle poll at large
//! sizes reaches): at 1 000 timers one run is ~15 µs, too close to the ~0.2 µs cost of
//! reading the CPU clock and to scheduler noise to stand alone. A sample's figure is its
//! total time over its total operations.
//!
//! The table shows, per peer, the median over repetitions of ns per operation and, in
//! parentheses, the median over repetitions of the pairwise ratio peer ÷ tickwheel
//! (repetition i of the peer over repetition i of tickwheel, measured in the same pass; above 1:
//! tickwheel is faster), tickwheel being the core `Wheel<u64>`. The peers, what each figure
//! includes and the workloads are described in `benches/peers/mod.rs`.
//!
//! After a size's table, when the run has the drop-in, tokio-util's `DelayQueue` and the bare
//! `tokio Sleep`, a second table shows the two queues above tokio's own timer, for the
//! workloads that poll every tick and whose cells that timer bounds (`bound.rs`): each
//! queue's cost above the bare `Sleep` of the same repetition, and their ratio, or "bound by
//! tokio's timer" when the drop-in's cost above it is within 5 % of it.
//!
//! Beside the core wheel, for insert, cancel and the two expiry workloads, the `floor` column
//! (`floor.rs`): a bare random read-modify-write loop over an array as large as the wheel's
//! entries at that size, measured in the same rotation, with the ratio core ÷ floor; the
//! summary lists those ratios per size (`--no-floor` leaves it out).
//!
//! The last lines (`summary.rs`) name the slowest ratio of each comparison over every
//! workload and size run: tokio-util's `DelayQueue` ÷ tickwheel's drop-in `DelayQueue` (API
//! for API, workloads 1–6 and the idle poll), each workload-7 contender ÷ tickwheel's
//! scheduler, tokio-util's `DelayQueue` ÷ the drop-in in bytes per timer (workload 8), then
//! the cell and the ratio against the core wheel. The very last line has a fixed format for
//! scripts, `slowest ratio vs tokio DelayQueue: X.XX` (`n/a` when `DelayQueue` was filtered
//! out).
//!
//! Memory (workload 8) is measured with a counting global allocator: the one `unsafe` of this
//! example, a thin wrapper around `std::alloc::System` that counts live heap bytes while
//! counting is switched on (only during the memory workload, so timings pay one relaxed load
//! per allocation). For tickwheel the figure is cross-checked against `Wheel::stats()`.
//!
//! Modules: `args` (the command line, each value checked while parsing), `bound` (the
//! table above tokio's timer), `measure` (the child's side: samples, workloads 7 and 8),
//! `child` (running a child, the lines it prints, the parent's check of their order), `heap`
//! (the malloc settings and the block touched first that spare every timed region
//! first-touch page faults), `floor` (the floor column).

#[path = "../../benches/peers/mod.rs"]
mod peers;

mod args;
mod bound;
mod chart;
mod child;
mod floor;
mod flow;
mod heap;
mod measure;
mod scaling;
mod summary;
mod table;

use std::alloc::{GlobalAlloc, Layout, System};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use clap::Parser;

use args::Args;
use measure::{Cell, Memory};
#[cfg(feature = "tokio")]
use peers::TickwheelDelayQueue;
use peers::scheduler as sched;
use peers::{
    BTree, Hhwt, Input, LazyHeap, NexusTimer, Outcome, Peer, Tickwheel, TimerQueue, TimerWheelPeer,
    TokioDelayQueue, TokioSleep, Workload,
};
use table::Table;

// ---------------------------------------------------------------------------------------------
// Counting allocator (workload 8)
// ---------------------------------------------------------------------------------------------

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded unchanged to `System`; the wrapper only adds or subtracts
// the layout's size from a counter, which allocates nothing and cannot unwind.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Relaxed) {
            LIVE_BYTES.fetch_add(layout.size() as isize, Relaxed);
        }
        // SAFETY: the caller's contract for `alloc` is passed on unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Relaxed) {
            LIVE_BYTES.fetch_add(layout.size() as isize, Relaxed);
        }
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if COUNTING.load(Relaxed) {
            LIVE_BYTES.fetch_sub(layout.size() as isize, Relaxed);
        }
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Relaxed) {
            LIVE_BYTES.fetch_add(new_size as isize - layout.size() as isize, Relaxed);
        }
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live_heap() -> isize {
    LIVE_BYTES.load(Relaxed)
}

/// Runs `f` with the counting allocator switched on.
fn counting<R>(f: impl FnOnce() -> R) -> R {
    COUNTING.store(true, Relaxed);
    let out = f();
    COUNTING.store(false, Relaxed);
    out
}

// ---------------------------------------------------------------------------------------------
// The peers, type-erased
// ---------------------------------------------------------------------------------------------

type RunFn = fn(Workload, &Input, Duration) -> Outcome;
type BytesFn = fn(&Input, &dyn Fn() -> isize) -> f64;
type ChurnHeapFn = fn(&Input, &dyn Fn() -> isize) -> [isize; 3];

struct Entry {
    name: &'static str,
    run: RunFn,
    bytes: BytesFn,
    churn_heap: ChurnHeapFn,
}

fn entry<P: Peer>() -> Entry {
    Entry {
        name: P::NAME,
        run: peers::run::<P>,
        bytes: peers::bytes_per_timer::<P>,
        churn_heap: peers::churn_heap::<P>,
    }
}

fn all_peers() -> Vec<Entry> {
    vec![
        entry::<Tickwheel>(),
        entry::<TimerWheelPeer>(),
        #[cfg(feature = "tokio")]
        entry::<TickwheelDelayQueue>(),
        entry::<TokioDelayQueue>(),
        entry::<TokioSleep>(),
        entry::<NexusTimer>(),
        entry::<TimerQueue>(),
        entry::<Hhwt>(),
        entry::<BTree>(),
        entry::<LazyHeap>(),
    ]
}

// ---------------------------------------------------------------------------------------------
// The tables
// ---------------------------------------------------------------------------------------------

fn fmt_ns(ns: f64) -> String {
    if ns >= 100.0 {
        format!("{:.0}", ns)
    } else if ns >= 10.0 {
        format!("{:.1}", ns)
    } else {
        format!("{:.2}", ns)
    }
}

/// A cell's text: its median, and its ratio to the reference unless it is the reference.
fn fmt_cell(cell: &Cell, base: &Cell, is_base: bool) -> String {
    let mark = if cell.mismatch {
        "!"
    } else if cell.estimate {
        "~"
    } else if cell.clock_bound {
        "≈"
    } else {
        ""
    };
    let ns = fmt_ns(cell.median());
    if is_base {
        return format!("{mark}{ns}");
    }
    format!("{mark}{ns} ({:.1}×)", cell.ratio_to(base))
}

// ---------------------------------------------------------------------------------------------
// The plan, the same in the parent and in every child
// ---------------------------------------------------------------------------------------------

/// What the arguments select, in table order: a child derives it from the same arguments
/// as its parent, so both expect the same cells in the same order.
struct Plan {
    peers: Vec<Entry>,
    workloads: Vec<Workload>,
    budget: Duration,
    reps: usize,
    scheduler_reps: usize,
    scheduler: bool,
    /// Producer counts of workload 7's scaling figure (`--producers`).
    producers: Vec<usize>,
    memory: bool,
    /// Whether the floor column (`floor.rs`) is measured beside the workloads it applies to.
    floor: bool,
}

impl Plan {
    fn new(args: &Args) -> Plan {
        Plan {
            peers: all_peers()
                .into_iter()
                .filter(|p| {
                    p.name == Tickwheel::NAME
                        || args.peers.is_empty()
                        || args.peers.iter().any(|n| n == p.name)
                })
                .collect(),
            workloads: Workload::ALL
                .into_iter()
                .filter(|w| {
                    !args.scheduler_only
                        && (args.workloads.is_empty()
                            || args.workloads.iter().any(|n| n == w.short()))
                })
                .collect(),
            budget: args
                .budget
                .unwrap_or(Duration::from_secs(if args.quick { 1 } else { 3 })),
            // --quick: 2 repetitions, so it stays under a minute on 2 busy shared cores.
            reps: args.reps.unwrap_or(if args.quick { 2 } else { 3 }),
            scheduler_reps: args.scheduler_reps.unwrap_or(5),
            scheduler: !args.no_scheduler,
            producers: args.producers.clone(),
            memory: !args.no_memory && !args.scheduler_only,
            floor: !args.no_floor,
        }
    }

    /// Whether the floor is measured beside workload `w` (its row has one cell more).
    fn floor_at(&self, w: Workload) -> bool {
        self.floor && floor::applies(w)
    }

    /// Whether any workload of the plan has the floor column.
    fn has_floor(&self) -> bool {
        self.workloads.iter().any(|&w| self.floor_at(w))
    }

    /// Whether workload 7 runs at `n` timers (from 100 000 on).
    fn scheduler_at(&self, n: usize) -> bool {
        self.scheduler && n >= 100_000
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.flow {
        flow::report(args.reps.unwrap_or(7));
        return ExitCode::SUCCESS;
    }
    let plan = Plan::new(&args);
    if let Some(n) = args.child_size {
        measure::child(&plan, n);
        return ExitCode::SUCCESS;
    }
    if let (Some(from), Some(to)) = (&args.chart_from, &args.chart) {
        let drawn = std::fs::read_to_string(from)
            .map_err(|e| format!("--chart-from {from}: {e}"))
            .and_then(|text| chart::Points::from_markdown(&text))
            .and_then(|points| points.write_svg(to));
        return match drawn {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("compare: {e}");
                ExitCode::FAILURE
            }
        };
    }
    match parent(&args, &plan) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("compare: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs one child per size, printing its table of workloads once the child is done, then
/// workload 8's and workload 7's tables and the slowest cells over all sizes.
fn parent(args: &Args, plan: &Plan) -> Result<(), String> {
    let sizes = if !args.sizes.is_empty() {
        args.sizes.clone()
    } else if args.quick {
        vec![100_000]
    } else {
        vec![1_000, 100_000, 1_000_000]
    };
    let peers = &plan.peers;
    let names: Vec<&str> = peers.iter().map(|p| p.name).collect();
    let started = Instant::now();

    println!(
        "tickwheel compare: ns per operation, median of repetitions (each ≥ 10 ms of timed runs or 0.2 s of wall time); (r×) = median of pairwise ratios peer ÷ tickwheel, above 1 means tickwheel is faster"
    );
    println!(
        "~ = stopped at the {} s budget, estimated from the part completed; ! = fired/cancelled the wrong timers; ≈ = a tokio peer's figure of which the paused clock's overhead, subtracted, was over {:.0} % of the time measured (its drift decides the figure: see the DelayQueues above tokio's timer; left out of the slowest ratios)",
        plan.budget.as_secs_f64(),
        measure::CLOCK_BOUND_SHARE * 100.0
    );
    if cfg!(not(feature = "tokio")) {
        println!("(built without --features tokio: the tickwheel DelayQueue column is left out)");
    }
    let position = |name: &str| peers.iter().position(|p| p.name == name);
    let delay_queue = position(TokioDelayQueue::NAME);
    let tickwheel_dq = position("tickwheel DelayQueue");
    let bare_sleep = position(TokioSleep::NAME);
    // The smallest ratio of each comparison, over every workload.
    let mut summary = summary::Summary::default();
    let mut memory_rows = Vec::new();
    let mut scheduler_rows: Vec<scaling::Row> = Vec::new();
    let mut points = chart::Points::default();

    for &n in &sizes {
        println!();
        println!("n = {n} timers, {} repetitions", plan.reps);
        // The floor's column goes beside the core wheel's, in the rows that have it.
        let mut columns = names.clone();
        if plan.has_floor() {
            columns.insert(1, floor::NAME);
        }
        let mut table = Table::new(args.markdown, "workload", &columns);
        let mut received = child::Received::new(plan, n);
        let mut bound_rows = Vec::new();
        let outcome = child::run(n, |line| {
            let Some((w, mut cells)) = received.take(line)? else {
                return Ok(());
            };
            let floor_cell = if plan.floor_at(w) { cells.pop() } else { None };
            let base = &cells[0];
            let mut texts: Vec<String> = cells
                .iter()
                .enumerate()
                .map(|(i, c)| fmt_cell(c, base, i == 0))
                .collect();
            if plan.has_floor() {
                let text = match &floor_cell {
                    Some(f) => {
                        summary.floor(w.short(), n, base, f);
                        format!(
                            "{} (tickwheel {:.1}×)",
                            fmt_ns(f.median()),
                            base.ratio_to(f)
                        )
                    }
                    None => "–".to_string(),
                };
                texts.insert(1, text);
            }
            table.row(w.label(), texts);
            for (peer, cell) in names.iter().zip(&cells) {
                points.add(w.label(), peer, n, cell.median());
            }
            if let (Some(s), Some(ours), Some(dq)) = (bare_sleep, tickwheel_dq, delay_queue) {
                if let Some(row) = bound::row(w, &cells[s], &cells[ours], &cells[dq]) {
                    bound_rows.push((w.label(), row));
                }
            }
            summary.row(w.short(), n, &cells, delay_queue, tickwheel_dq);
            Ok(())
        });
        // The rows received, even when the child failed part-way.
        if !plan.workloads.is_empty() {
            table.print();
        }
        if !bound_rows.is_empty() {
            println!();
            println!(
                "the DelayQueues above tokio's timer at n = {n}: ns per op above the bare tokio Sleep, median of per-repetition differences; workloads that poll every tick, where the Sleep is within 2× of the drop-in"
            );
            let mut above = Table::new(args.markdown, "above tokio Sleep", &bound::COLUMNS);
            for (label, row) in bound_rows {
                above.row(label, row);
            }
            above.print();
        }
        outcome?;
        if let Some(path) = &args.chart {
            // Rewritten after every size, so a run stopped part-way still leaves a chart.
            points.write_svg(path)?;
        }
        if plan.scheduler_at(n) {
            summary.scheduler(n, &received.scheduler);
            scheduler_rows.push((n, received.scheduler, received.scaling));
        }
        if plan.memory {
            summary.memory(n, &received.memory, delay_queue, tickwheel_dq);
            memory_rows.push((n, received.memory));
        }
    }

    if !memory_rows.is_empty() {
        println!();
        println!(
            "8 memory: heap bytes per pending timer after n inserts (no capacity hint); churn heap bytes per lane after the prefill / half-way / at the end of the churn script (10 ops per lane; flat = the last two equal)"
        );
        let mut table = Table::new(args.markdown, "memory", &names);
        for (n, row) in &memory_rows {
            let per_timer = |m: &Memory| match m.stats {
                Some(stats) => format!("{:.1} (stats {stats:.1})", m.per_timer),
                None => format!("{:.1}", m.per_timer),
            };
            let per = |b: isize| b as f64 / *n as f64;
            let churn = |m: &Memory| {
                let [start, half, end] = m.churn;
                format!("{:.0}/{:.0}/{:.0}", per(start), per(half), per(end))
            };
            table.row(
                &format!("bytes/timer, n={n}"),
                row.iter().map(per_timer).collect(),
            );
            table.row(
                &format!("churn heap/lane, n={n}"),
                row.iter().map(churn).collect(),
            );
        }
        table.print();
    }
    println!();
    if !scheduler_rows.is_empty() {
        println!();
        println!(
            "7 scheduler: wall ns per op (schedules + drains + timers ended), 2 producers + 1 dispatcher, drains every {} schedules; median [min–max] of {} repetitions; (r×) = median pairwise contender ÷ tickwheel",
            sched::DRAIN_EVERY,
            plan.scheduler_reps
        );
        let mut table = Table::new(args.markdown, "scheduler", &measure::CONTENDERS);
        for (n, cells, _) in &scheduler_rows {
            let texts: Vec<String> = cells
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let (lo, hi) =
                        c.ns.iter()
                            .fold((f64::INFINITY, 0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
                    let spread = format!(" [{}–{}]", fmt_ns(lo), fmt_ns(hi));
                    let text = fmt_cell(c, &cells[0], i == 0);
                    // The spread goes right after the median, before the ratio.
                    match text.find(" (") {
                        Some(at) => format!("{}{spread}{}", &text[..at], &text[at..]),
                        None => format!("{text}{spread}"),
                    }
                })
                .collect();
            table.row(&format!("7 scheduler, n={n}"), texts);
        }
        table.print();
        if !plan.producers.is_empty() {
            scaling::print(args.markdown, plan, &scheduler_rows);
        }
    }
    println!("total time: {:.0} s", started.elapsed().as_secs_f64());
    for line in summary.lines() {
        println!("{line}");
    }
    Ok(())
}
