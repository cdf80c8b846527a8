//! An MTA's scheduled queues on `tickwheel::sync::Scheduler`, with exactly-once proven at
//! the end.
//!
//! ```text
//! cargo run --release --example mta                    # 1M messages, simulated clock
//! cargo run --release --features tokio --example mta -- --clock real --scale 0.001
//! cargo run --release --example mta -- --help         # every option
//! ```
//!
//! Producers queue messages on Zipf-sized destination queues; one dispatcher pops what is
//! due, "delivers" it, and re-schedules the failures with exponential back-off; an operator
//! drains queues (rebind to another queue, or transfer away), bounces single messages and
//! suspends queues — while the dispatcher has messages in flight. That is the race this
//! crate exists for (see docs/design.md, "The problem").
//!
//! The program keeps its own ledger of every message (`ledger.rs`) and checks at the end
//! that each one ended exactly once: delivered, drained, bounced, or still pending (found by
//! a final drain of every queue). Exit status: 0 when the check passes, 1 when it fails,
//! 2 on bad options.
//!
//! Modules: `args` (options), `workload` (what the seed decides), `sim` (the threads),
//! `real` (the real clock's dispatchers), `ledger` (the independent account), `report`
//! (table, JSON, lateness, memory); with `--journal`, `crash` (the parent that kills and
//! restarts the run, and its reconciliation) and `journal` (one round on the journal).

mod args;
mod crash;
mod flow;
mod journal;
mod ledger;
mod real;
mod report;
mod sim;
mod workload;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use args::{Args, fmt_duration};
use report::{Summary, Sweep};
use sim::{Counts, Sim};
use workload::Workload;

fn main() -> ExitCode {
    let args = Args::parse_and_check();
    let seed = args.seed.unwrap_or_else(rand::random);
    if args.journal.is_some() {
        return crash::main(&args, seed);
    }
    let work = Workload::new(&args, seed);
    let sim = match Sim::new(&args, work) {
        Ok(sim) => Arc::new(sim),
        Err(e) => Args::refuse(format!("--shards or --resolution: {e}")),
    };
    let tick_ns = workload::nanos(sim.sched.resolution());

    let bar = progress_bar(&args);
    let started = Instant::now();
    sim.run(|sim| update(&bar, sim));
    let wall = started.elapsed();
    bar.finish_and_clear();

    let (len, in_flight, found) = sim.sweep(args.queues);
    let summary = Summary {
        args: &args,
        sim: &sim,
        tally: sim.ledger.tally(),
        sweep: Sweep {
            len,
            in_flight,
            found,
        },
        wall,
        peak_memory: tickwheel_testkit::memory::peak_rss(),
        tick_ns,
    };
    if args.json {
        println!("{}", summary.json());
    } else {
        print!("{}", summary.table());
    }
    if summary.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// A bar over MTA time; hidden with `--json` or when stderr is not a terminal.
fn progress_bar(args: &Args) -> ProgressBar {
    if args.json || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(args.duration.as_secs().max(1));
    let style = ProgressStyle::with_template("{elapsed:>3} [{bar:20}] {msg}")
        .expect("valid template")
        .progress_chars("=> ");
    bar.set_style(style);
    bar
}

fn update(bar: &ProgressBar, sim: &Sim) {
    let now = sim.clock.now().min(sim.end);
    bar.set_position(now / 1_000_000_000);
    let c = &sim.counts;
    bar.set_message(format!(
        "MTA time {}, {} attempts, {} drains",
        fmt_duration(Duration::from_secs(now / 1_000_000_000)),
        Counts::get(&c.attempts),
        Counts::get(&c.rebinds) + Counts::get(&c.transfers),
    ));
}
