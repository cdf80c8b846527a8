//! What a per-queue rate limit costs a hand-out: the scheduler's own GCRA beside
//! [`governor`](https://docs.rs/governor)'s, in the hot path.
//!
//! `cargo run --release -p tickwheel-bench --example rate [-- --reps N]`
//!
//! 1 000 queues, 100 timers each, all due; timed: `pop_due` in batches of 1 024 until every
//! timer is handed out (each `Due` taken and dropped). Five variants, alternated, median of
//! `--reps` (default 9), ns per timer handed out:
//!
//! - **none**: no limit (the baseline);
//! - **concurrency**: `set_concurrency(usize::MAX - 1)` on every queue: what a queue's flow
//!   record costs a hand-out without a rate (a slot taken and given back);
//! - **tickwheel**: `set_rate` on every queue (10⁹ per second, burst 1 000: never refuses, so
//!   every hand-out runs the rate check and takes a permit);
//! - **governor direct**: no limit in the scheduler; the caller checks one
//!   `governor::RateLimiter` per queue (found by index, no lookup: the best case of keeping a
//!   governor state in the queue's record) for every timer handed out;
//! - **governor keyed**: one keyed limiter (governor's default `DashMap` store) for all
//!   queues, `check_key(queue)` per timer.
//!
//! Both clocks stand still at the pop's instant (governor's `FakeRelativeClock`), so no
//! variant pays for reading a clock. The cost of the rate check is each variant minus
//! **none**; the last line gives governor's extra cost over tickwheel's.

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use clap::Parser;
use governor::clock::FakeRelativeClock;
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use tickwheel::sync::{RateLimit, Scheduler};

const QUEUES: u32 = 1_000;
const PER_QUEUE: u32 = 100;
const BATCH: usize = 1024;
const RATE: u32 = 1_000_000_000;
const BURST: u32 = 1_000;

#[derive(Parser)]
#[command(
    about = "ns per hand-out with a per-queue rate limit: tickwheel's GCRA beside governor's"
)]
struct Args {
    /// Repetitions per variant (alternated); the figures are medians.
    #[arg(long, default_value_t = 9)]
    reps: usize,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Variant {
    None,
    Concurrency,
    Tickwheel,
    GovernorDirect,
    GovernorKeyed,
}

const VARIANTS: [Variant; 5] = [
    Variant::None,
    Variant::Concurrency,
    Variant::Tickwheel,
    Variant::GovernorDirect,
    Variant::GovernorKeyed,
];

fn quota() -> Quota {
    let rate = NonZeroU32::new(RATE).expect("non-zero rate");
    let burst = NonZeroU32::new(BURST).expect("non-zero burst");
    Quota::per_second(rate).allow_burst(burst)
}

/// One queue's limiter under the fake clock.
type Direct = RateLimiter<NotKeyed, InMemoryState, FakeRelativeClock, NoOpMiddleware<Nanos>>;

/// One repetition: ns per timer handed out.
fn run(variant: Variant) -> f64 {
    let t0 = Instant::now();
    let sched: Scheduler<u32, u32, u32> = Scheduler::builder().origin(t0).build();
    let due_at = t0 + Duration::from_millis(1);
    let clock = FakeRelativeClock::default();
    clock.advance(Duration::from_millis(1));
    let direct: Vec<Direct> = if variant == Variant::GovernorDirect {
        (0..QUEUES)
            .map(|_| RateLimiter::direct_with_clock(quota(), clock.clone()))
            .collect()
    } else {
        Vec::new()
    };
    let keyed = RateLimiter::dashmap_with_clock(quota(), clock.clone());
    for queue in 0..QUEUES {
        match variant {
            Variant::Concurrency => sched.set_concurrency(&queue, Some(usize::MAX - 1)),
            Variant::Tickwheel => {
                sched.set_rate(&queue, Some(RateLimit::per_second(RATE).with_burst(BURST)))
            }
            // Its state is made on a key's first check: made here, untimed, as the
            // scheduler's flow records are made by `set_rate`.
            Variant::GovernorKeyed => assert!(keyed.check_key(&queue).is_ok()),
            _ => {}
        }
    }
    let mut id = 0;
    for queue in 0..QUEUES {
        for _ in 0..PER_QUEUE {
            sched.schedule(queue, id, due_at, 0).expect("a new id");
            id += 1;
        }
    }
    let total = u64::from(QUEUES * PER_QUEUE);
    let mut handed = 0u64;
    let mut permitted = 0u64;
    let start = Instant::now();
    loop {
        let batch = sched.pop_due(due_at, BATCH);
        if batch.is_empty() {
            break;
        }
        for due in batch {
            handed += 1;
            let ok = match variant {
                Variant::None | Variant::Concurrency | Variant::Tickwheel => true,
                Variant::GovernorDirect => direct[*due.queue() as usize].check().is_ok(),
                Variant::GovernorKeyed => keyed.check_key(due.queue()).is_ok(),
            };
            permitted += u64::from(ok);
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / total as f64;
    assert_eq!(handed, total, "{variant:?}: every timer handed out");
    assert_eq!(permitted, total, "{variant:?}: the rate never refuses here");
    ns
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args = Args::parse();
    let reps = args.reps.max(1);
    let mut figures: Vec<Vec<f64>> = vec![Vec::new(); VARIANTS.len()];
    for rep in 0..reps {
        // Alternate the order so drift on a shared machine falls on every variant alike.
        for k in 0..VARIANTS.len() {
            let i = if rep % 2 == 0 {
                k
            } else {
                VARIANTS.len() - 1 - k
            };
            figures[i].push(run(VARIANTS[i]));
        }
        eprint!("\rrepetition {}/{reps}", rep + 1);
    }
    eprintln!();
    let medians: Vec<f64> = figures.iter_mut().map(|f| median(f)).collect();
    let base = medians[0];
    println!(
        "{} queues x {} timers, all due; ns per timer handed out, median of {reps}",
        QUEUES, PER_QUEUE
    );
    println!("{:<18} {:>8} {:>12}", "variant", "ns", "rate check");
    for (v, m) in VARIANTS.iter().zip(&medians) {
        println!("{:<18} {:>8.1} {:>12.1}", format!("{v:?}"), m, m - base);
    }
    let ours = (medians[2] - base).max(0.1);
    println!(
        "governor's check over tickwheel's: direct {:.2}x, keyed {:.2}x (rate-check cost)",
        (medians[3] - base) / ours,
        (medians[4] - base) / ours
    );
}
