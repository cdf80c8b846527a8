//! What the `metrics` feature costs the scheduler: one workload, timed per timer, to run
//! from builds with and without the feature and compare.
//!
//! ```text
//! cargo run --release --example observe_cost                              # feature off
//! cargo run --release --features metrics --example observe_cost           # on, no recorder
//! cargo run --release --features metrics --example observe_cost -- --record  # on, recording
//! ```
//!
//! The workload, single-threaded on 2 shards: 100 000 timers over 1 000 queues, deadlines
//! spread over 1 000 ticks; one in ten is cancelled, then the clock advances tick by tick
//! with `pop_due` (each `Due` dropped: delivered), and one queue in a hundred is drained on
//! the way. Prints the median over 31 repetitions, after one warm-up, of ns per timer
//! (every operation on it included), in thread CPU time (`CLOCK_THREAD_CPUTIME_ID`: on a
//! shared machine time spent descheduled is noise, not work). `--record` installs a recorder
//! that keeps every counter and gauge in an atomic, so the handles do real work.

use std::time::{Duration, Instant};

use tickwheel::sync::Scheduler;

// The benchmarks' clock: one copy, in the bench crate.
#[path = "../tickwheel-bench/benches/peers/cpu_time.rs"]
mod cpu_time;
use cpu_time::thread_cpu_ns;

const TIMERS: u32 = 100_000;
const QUEUES: u32 = 1_000;
const TICKS: u64 = 1_000;
const REPS: usize = 31;

fn main() {
    let record = std::env::args().any(|a| a == "--record");
    if record {
        install_recorder();
    }
    let mut samples: Vec<f64> = (0..=REPS).map(|_| run()).collect();
    samples.remove(0); // warm-up
    samples.sort_by(f64::total_cmp);
    let mode = match (cfg!(feature = "metrics"), record) {
        (false, _) => "metrics off",
        (true, false) => "metrics on, no recorder",
        (true, true) => "metrics on, recording",
    };
    println!("{mode}: median {:.1} ns per timer", samples[REPS / 2]);
}

/// One run: ns per timer.
fn run() -> f64 {
    let t0 = Instant::now();
    let sched: Scheduler<u32, u32, u64> = Scheduler::builder()
        .name("bench")
        .shards(2)
        .origin(t0)
        .build();
    let tick = Duration::from_millis(1);
    let started = thread_cpu_ns();
    for id in 0..TIMERS {
        let at = t0 + tick * (id.wrapping_mul(7919) % TICKS as u32);
        sched.schedule(id % QUEUES, id, at, u64::from(id)).ok();
    }
    for id in (0..TIMERS).step_by(10) {
        sched.cancel(&id);
    }
    for now in 0..=TICKS {
        if now % 10 == 0 {
            sched.drain_queue(&((now / 10) as u32 * 10 % QUEUES));
        }
        for due in sched.pop_due(t0 + tick * now as u32, 1024) {
            drop(due);
        }
    }
    assert!(sched.is_empty(), "every timer ended");
    (thread_cpu_ns() - started) as f64 / f64::from(TIMERS)
}

#[cfg(feature = "metrics")]
fn install_recorder() {
    use std::sync::Arc;
    use std::sync::atomic::AtomicU64;

    use metrics::{
        Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
    };

    /// Every counter and gauge an atomic of its own; histograms sum into one.
    struct Atomics;
    struct Sum(AtomicU64);
    impl metrics::HistogramFn for Sum {
        fn record(&self, value: f64) {
            self.0
                .fetch_add(value as u64, std::sync::atomic::Ordering::Relaxed);
        }
    }
    impl Recorder for Atomics {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
            Counter::from_arc(Arc::new(AtomicU64::new(0)))
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::from_arc(Arc::new(AtomicU64::new(0)))
        }
        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::from_arc(Arc::new(Sum(AtomicU64::new(0))))
        }
    }
    metrics::set_global_recorder(Atomics).expect("the first recorder");
}

#[cfg(not(feature = "metrics"))]
fn install_recorder() {
    eprintln!("--record needs the metrics feature; measuring without it");
}
