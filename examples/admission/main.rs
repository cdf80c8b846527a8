//! A simulated server admitting requests under a global and per-connection limits, on
//! `tickwheel::admission` and then, on the same workload, on `tokio::sync::Semaphore`
//! with `tokio::time::timeout`.
//!
//! ```text
//! cargo run --release --features tokio --example admission
//! cargo run --release --features tokio --example admission -- --waiters 100000 --connections 1000
//! ```
//!
//! The workload: `--connections` connections, each with a local limit of `--local` KiB, all
//! under a global limit of `--global` KiB. Messages in flight hold the whole global limit at
//! the start. Then `--waiters` requests (one task each) ask for 1–64 KiB on a random
//! connection, with a deadline 20–120 ms after they are made; one in ten gives up at a random moment
//! (its future is dropped: cancelled). At 60 ms the messages in flight finish — a burst of
//! releases — and the waiters granted then keep their capacity until the end (long
//! messages), so most of the others expire.
//!
//! Printed: grants, expiries, cancellations; how late the expiries were seen by their tasks
//! (whole ticks of 1 ms past the deadline: p50, p99, max); peak memory; then the two sides:
//! CPU time per waiter (all threads, from /proc/self/task/*/schedstat) and heap bytes per
//! waiter at the peak (a counting allocator), with their ratio. Beside them, the harness
//! alone: the same tasks (spawn, the give-up `Sleep`, `select!`, join), each admitted at
//! once. The last two rows are each side's CPU and bytes above the harness: what its
//! admission costs. The last line is
//! `admission: OK (…)` — no limit ever over-granted, every request resolved exactly once,
//! all capacity back at the end — or `admission: FAILED …` with exit status 1. Bad options
//! exit with status 2. `--only tickwheel` (or `tokio`, `harness`) runs that side alone, for a
//! profiler: its counts, CPU and heap bytes per waiter, and `admission: OK` or `FAILED`.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use clap::Parser;
use rand::{Rng, SeedableRng, rngs::StdRng};
use tickwheel::admission::{AcquireError, AdmissionQueue, Limit, Order};
use tokio::sync::Semaphore;

// ---------------------------------------------------------------------------------------------
// Counting allocator: live heap bytes and their peak (as in tickwheel-bench/examples/compare)
// ---------------------------------------------------------------------------------------------

#[path = "../../tests/support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::Counting;

mod sides;
use sides::{harness_side, tickwheel_side, tokio_side};

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

fn count(delta: isize) {
    let live = LIVE.fetch_add(delta, Relaxed) + delta;
    PEAK.fetch_max(live, Relaxed);
}

#[global_allocator]
static ALLOCATOR: Counting = Counting(count);

// ---------------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------------

#[derive(Parser, Debug, Clone)]
#[command(
    about = "A simulated server admitting requests: tickwheel's wait queue vs tokio's Semaphore"
)]
struct Args {
    /// Connections, each with its own local limit.
    #[arg(long, default_value_t = 200)]
    connections: usize,
    /// Requests that wait for capacity (one task each).
    #[arg(long, default_value_t = 20_000)]
    waiters: usize,
    /// Local limit per connection, KiB (at least 64: the largest request).
    #[arg(long, default_value_t = 256)]
    local: u64,
    /// Global limit, KiB (at least 64).
    #[arg(long, default_value_t = 8192)]
    global: u64,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Run one side only (for a profiler): its counts and CPU are printed, no comparison.
    #[arg(long, value_parser = ["tickwheel", "tokio", "harness"])]
    only: Option<String>,
}

const MAX_AMOUNT: u64 = 64;
const BURST_AT: Duration = Duration::from_millis(60);
const TICK: Duration = Duration::from_millis(1);

impl Args {
    fn check(&self) -> Result<(), String> {
        if self.connections == 0 || self.waiters == 0 {
            return Err("--connections and --waiters must be at least 1".into());
        }
        if self.local < MAX_AMOUNT || self.global < MAX_AMOUNT {
            return Err(format!(
                "--local and --global must be at least {MAX_AMOUNT} KiB"
            ));
        }
        if self.local > u64::from(u32::MAX) || self.global > u64::from(u32::MAX) {
            return Err("--local and --global must fit tokio's u32 permit counts".into());
        }
        // The messages in flight hold the whole global limit, spread over the connections.
        let room = (self.connections as u64).saturating_mul(self.local);
        if room < self.global {
            return Err(format!(
                "--connections × --local ({} × {} = {room} KiB) must be at least --global ({} \
                 KiB): the messages in flight hold the whole global limit",
                self.connections, self.local, self.global
            ));
        }
        Ok(())
    }
}

/// One waiter's request, drawn once and replayed on both sides.
#[derive(Debug, Clone, Copy)]
struct Request {
    conn: usize,
    amount: u64,
    deadline_after: Duration,
    give_up_after: Option<Duration>,
}

fn requests(args: &Args) -> Vec<Request> {
    let mut rng = StdRng::seed_from_u64(args.seed);
    (0..args.waiters)
        .map(|_| Request {
            conn: rng.gen_range(0..args.connections),
            amount: rng.gen_range(1..=MAX_AMOUNT),
            deadline_after: Duration::from_micros(rng.gen_range(20_000..120_000)),
            give_up_after: rng
                .gen_bool(0.1)
                .then(|| Duration::from_micros(rng.gen_range(5_000..100_000))),
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// What each side reports
// ---------------------------------------------------------------------------------------------

/// What a side's run gives back: how each request ended (in request order), whether a
/// grant ever took a connection past its local limit or all past the global one, and the
/// capacity not given back at the end, if any.
type Outcome = (Vec<End>, bool, Option<String>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Granted,
    Expired { late_ticks: u64 },
    Cancelled,
}

/// Units in use per connection and in all, as the waiters see their grants: a grant that
/// takes one past its limit is an over-grant.
struct InUse {
    conns: Vec<AtomicU64>,
    global: AtomicU64,
    over: AtomicBool,
    local_limit: u64,
    global_limit: u64,
}

impl InUse {
    fn new(args: &Args) -> Self {
        InUse {
            conns: (0..args.connections).map(|_| AtomicU64::new(0)).collect(),
            global: AtomicU64::new(0),
            over: AtomicBool::new(false),
            local_limit: args.local,
            global_limit: args.global,
        }
    }

    fn take(&self, conn: usize, amount: u64) {
        let local = self.conns[conn].fetch_add(amount, Relaxed) + amount;
        let global = self.global.fetch_add(amount, Relaxed) + amount;
        if local > self.local_limit || global > self.global_limit {
            self.over.store(true, Relaxed);
        }
    }

    fn give(&self, conn: usize, amount: u64) {
        self.conns[conn].fetch_sub(amount, Relaxed);
        self.global.fetch_sub(amount, Relaxed);
    }
}

struct Side {
    name: &'static str,
    ends: Vec<End>,
    cpu: Duration,
    wall: Duration,
    peak_heap: usize,
    over_granted: bool,
    /// Capacity not back at the end, if any: a description.
    leak: Option<String>,
}

impl Side {
    fn counts(&self) -> (usize, usize, usize) {
        let g = self.ends.iter().filter(|e| **e == End::Granted).count();
        let x = self
            .ends
            .iter()
            .filter(|e| matches!(e, End::Expired { .. }))
            .count();
        (g, x, self.ends.len() - g - x)
    }

    fn lateness(&self) -> (u64, u64, u64) {
        let mut late: Vec<u64> = self
            .ends
            .iter()
            .filter_map(|e| match e {
                End::Expired { late_ticks } => Some(*late_ticks),
                _ => None,
            })
            .collect();
        late.sort_unstable();
        let at = |q: f64| {
            late.get(((late.len() as f64 - 1.0) * q).round() as usize)
                .copied()
                .unwrap_or(0)
        };
        (at(0.5), at(0.99), late.last().copied().unwrap_or(0))
    }
}

fn late_ticks(deadline: Instant) -> u64 {
    let late = Instant::now().saturating_duration_since(deadline);
    (late.as_nanos() / TICK.as_nanos()) as u64
}

/// CPU time of every thread of the process so far (Linux; zero elsewhere).
fn process_cpu() -> Duration {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    let nanos: u64 = tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(nanos)
}

/// Runs `body` measuring CPU, wall time and the heap's peak above where it started.
async fn measured<F: std::future::Future<Output = Outcome>>(name: &'static str, body: F) -> Side {
    let base = LIVE.load(Relaxed);
    PEAK.store(base, Relaxed);
    let (cpu0, wall0) = (process_cpu(), Instant::now());
    let (ends, over_granted, leak) = body.await;
    let (cpu, wall) = (process_cpu().saturating_sub(cpu0), wall0.elapsed());
    let peak_heap = (PEAK.load(Relaxed) - base).max(0) as usize;
    Side {
        name,
        ends,
        cpu,
        wall,
        peak_heap,
        over_granted,
        leak,
    }
}

/// Messages in flight hold the whole global limit, spread over the connections: `take(conn,
/// amount)` for pieces of at most `MAX_AMOUNT`, round robin from connection 0. The pieces
/// taken, or the first refusal's message.
fn in_flight<P>(
    args: &Args,
    mut take: impl FnMut(usize, u64) -> Result<P, String>,
) -> Result<Vec<P>, String> {
    let mut in_flight = Vec::new();
    let (mut left, mut conn) = (args.global, 0);
    while left > 0 {
        let amount = left.min(MAX_AMOUNT);
        in_flight.push(take(conn, amount)?);
        left -= amount;
        conn = (conn + 1) % args.connections;
    }
    Ok(in_flight)
}

/// `wait`, unless request `r` gives up first (after `r.give_up_after`): `None` then.
async fn unless_given_up<F: std::future::Future>(r: Request, wait: F) -> Option<F::Output> {
    let give_up = tokio::time::sleep(r.give_up_after.unwrap_or(Duration::MAX / 4));
    tokio::select! {
        result = wait => Some(result),
        _ = give_up => None,
    }
}

/// At `start + BURST_AT` drops `in_flight` (the burst of releases), then awaits every waiter
/// task (task `i` for `reqs[i]`): how each ended. A granted waiter gives `amount` of its
/// connection back to `in_use`; its permit is held until every task has ended.
async fn burst_then_ends<H, P>(
    start: Instant,
    in_flight: H,
    tasks: Vec<tokio::task::JoinHandle<(End, Option<P>)>>,
    reqs: &[Request],
    in_use: &InUse,
    amount: impl Fn(&Request, &P) -> u64,
) -> Vec<End> {
    tokio::time::sleep_until((start + BURST_AT).into()).await;
    drop(in_flight);
    let mut ends = Vec::with_capacity(tasks.len());
    let mut permits = Vec::new();
    for (task, r) in tasks.into_iter().zip(reqs.iter()) {
        let (end, permit) = task.await.expect("waiter task");
        ends.push(end);
        if let Some(p) = permit {
            in_use.give(r.conn, amount(r, &p));
            permits.push(p);
        }
    }
    drop(permits);
    ends
}

// ---------------------------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------------------------

fn print_side(side: &Side) {
    let (g, x, c) = side.counts();
    let (p50, p99, max) = side.lateness();
    println!(
        "{:<10} granted {g:>7}  expired {x:>7}  cancelled {c:>7}  expiry lateness p50 {p50} / p99 {p99} / max {max} ticks (1 ms)",
        side.name
    );
}

/// `--only`: one side, its counts, CPU and bytes per waiter; status 1 if its run failed.
fn run_only(
    runtime: &tokio::runtime::Runtime,
    only: &str,
    args: &Args,
    reqs: &Arc<Vec<Request>>,
) -> ExitCode {
    let side = match only {
        "tickwheel" => runtime.block_on(measured(
            "tickwheel",
            tickwheel_side(args.clone(), reqs.clone()),
        )),
        "tokio" => runtime.block_on(measured("tokio", tokio_side(args.clone(), reqs.clone()))),
        _ => runtime.block_on(measured(
            "harness",
            harness_side(args.clone(), reqs.clone()),
        )),
    };
    print_side(&side);
    let n = args.waiters as f64;
    println!(
        "{}: CPU {:.0} ns, heap {:.0} B per waiter",
        side.name,
        side.cpu.as_nanos() as f64 / n,
        side.peak_heap as f64 / n
    );
    let ok = !side.over_granted && side.ends.len() == args.waiters && side.leak.is_none();
    println!("admission: {}", if ok { "OK" } else { "FAILED" });
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    if let Err(e) = args.check() {
        eprintln!("admission: {e}");
        return ExitCode::from(2);
    }
    let reqs = Arc::new(requests(&args));
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("admission: FAILED to start a runtime: {e}");
            return ExitCode::from(1);
        }
    };
    println!(
        "{} waiters on {} connections (local {} KiB each, global {} KiB), 1-{MAX_AMOUNT} KiB each, \
         deadlines 20-120 ms, 10% give up, burst of releases at {} ms, seed {}",
        args.waiters,
        args.connections,
        args.local,
        args.global,
        BURST_AT.as_millis(),
        args.seed
    );
    if let Some(only) = args.only.as_deref() {
        return run_only(&runtime, only, &args, &reqs);
    }
    let ours = runtime.block_on(measured(
        "tickwheel",
        tickwheel_side(args.clone(), reqs.clone()),
    ));
    let theirs = runtime.block_on(measured("tokio", tokio_side(args.clone(), reqs.clone())));
    let harness = runtime.block_on(measured(
        "harness",
        harness_side(args.clone(), reqs.clone()),
    ));
    print_side(&ours);
    print_side(&theirs);
    match tickwheel_testkit::memory::peak_rss() {
        Some(b) => println!(
            "peak memory: {:.1} MiB resident (VmHWM, whole run)",
            b as f64 / (1 << 20) as f64
        ),
        None => println!("peak memory: VmHWM not available"),
    }
    let per = |d: Duration| d.as_nanos() as f64 / args.waiters as f64;
    let bytes = |s: &Side| s.peak_heap as f64 / args.waiters as f64;
    println!();
    println!(
        "{:<42} {:>12} {:>12} {:>8} {:>12}",
        "per waiter", "tickwheel", "tokio", "ratio", "harness"
    );
    let row = |name: &str, a: f64, b: f64, h: Option<f64>, unit: &str| {
        let harness = h.map_or(String::new(), |h| format!(" {h:>9.0} {unit}"));
        // A run too short for the CPU clock can read 0: no ratio then.
        let ratio = if a > 0.0 && b > 0.0 {
            format!("{:>7.2}x", a / b)
        } else {
            format!("{:>8}", "–")
        };
        println!("{name:<42} {a:>9.0} {unit:<2} {b:>9.0} {unit:<2} {ratio}{harness}");
    };
    let (cpu, heap) = (per(harness.cpu), bytes(&harness));
    row(
        "CPU time, all threads (register..resolve)",
        per(ours.cpu),
        per(theirs.cpu),
        Some(cpu),
        "ns",
    );
    row(
        "heap bytes at the peak (task included)",
        bytes(&ours),
        bytes(&theirs),
        Some(heap),
        "B",
    );
    row(
        "CPU time above the harness",
        per(ours.cpu) - cpu,
        per(theirs.cpu) - cpu,
        None,
        "ns",
    );
    row(
        "heap bytes above the harness",
        bytes(&ours) - heap,
        bytes(&theirs) - heap,
        None,
        "B",
    );
    println!(
        "{:<42} {:>9.0} ms {:>9.0} ms",
        "wall time of the run",
        ours.wall.as_secs_f64() * 1e3,
        theirs.wall.as_secs_f64() * 1e3
    );

    let mut failures = Vec::new();
    for side in [&ours, &theirs] {
        if side.over_granted {
            failures.push(format!("{}: a limit was over-granted", side.name));
        }
        if side.ends.len() != args.waiters {
            failures.push(format!(
                "{}: {} of {} requests resolved",
                side.name,
                side.ends.len(),
                args.waiters
            ));
        }
        if let Some(leak) = &side.leak {
            failures.push(format!("{}: capacity not back: {leak}", side.name));
        }
    }
    let (g, x, c) = ours.counts();
    if failures.is_empty() {
        println!(
            "admission: OK ({} requests = {g} granted + {x} expired + {c} cancelled, each once; \
             no limit over-granted; all capacity back)",
            args.waiters
        );
        ExitCode::SUCCESS
    } else {
        println!("admission: FAILED {}", failures.join("; "));
        ExitCode::from(1)
    }
}
