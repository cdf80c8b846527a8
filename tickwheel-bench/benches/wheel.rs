//! Criterion benches: tickwheel side by side with tokio and the other timer wheels, one group
//! per benchmark workload (see `benches/peers/mod.rs` for the peers and what each figure
//! includes). `examples/compare/` prints the same workloads as one table. Workload 7 is the
//! `scheduler` group (see `benches/peers/scheduler.rs`); workload 8 measures memory, not
//! time, and is in `examples/compare/` only.
//!
//! ```text
//! cargo bench -p tickwheel-bench --bench wheel                                  # 1 000 and 100 000 timers
//! TICKWHEEL_BENCH_SIZES=1000000 cargo bench -p tickwheel-bench --bench wheel    # other sizes
//! cargo bench -p tickwheel-bench --bench wheel -- churn                         # one workload
//! cargo bench -p tickwheel-bench --features tokio --bench wheel                 # with tickwheel's DelayQueue
//! ```
//!
//! Each criterion iteration is one whole workload run on a fresh structure; only the
//! workload's timed region is counted (`iter_custom`), and the throughput is in operations
//! as the workload defines them (inserts, cancels, timers expired, ...). In the `scheduler`
//! group an iteration is one whole concurrent run, in wall time, and the throughput is in
//! timers scheduled (each also ends once: delivered or drained).

#[path = "peers/mod.rs"]
mod peers;

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

#[cfg(feature = "tokio")]
use peers::TickwheelDelayQueue;
use peers::scheduler::{self as sched, Contender};
use peers::{
    BTree, Hhwt, Input, LazyHeap, NexusTimer, Peer, Tickwheel, TimerQueue, TimerWheelPeer,
    TokioDelayQueue, TokioSleep, Workload,
};

/// No budget: a criterion sample must be a whole run.
const NO_BUDGET: Duration = Duration::from_secs(3600);

fn sizes() -> Vec<usize> {
    std::env::var("TICKWHEEL_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1_000, 100_000])
}

fn bench_peer<P: Peer>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    workload: Workload,
    input: &Input,
) {
    // Nothing runs here: criterion calls the closure only for benchmarks its filter selects,
    // and the throughput is known without a run.
    group.throughput(Throughput::Elements(workload.ops(input)));
    group.bench_with_input(BenchmarkId::new(P::NAME, input.n), input, |b, input| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let outcome = peers::run::<P>(workload, input, NO_BUDGET);
                assert_eq!(
                    outcome.tally,
                    outcome.expected,
                    "{} on {workload:?}",
                    P::NAME
                );
                assert_eq!(
                    outcome.ops,
                    workload.ops(input),
                    "{} on {workload:?}",
                    P::NAME
                );
                total += Duration::from_nanos(outcome.nanos as u64);
            }
            total
        });
    });
}

fn workloads(c: &mut Criterion) {
    for n in sizes() {
        let input = Input::new(n);
        for workload in Workload::ALL {
            let mut group = c.benchmark_group(workload.short());
            group.sample_size(10);
            group.warm_up_time(Duration::from_millis(500));
            group.measurement_time(Duration::from_secs(3));
            bench_peer::<Tickwheel>(&mut group, workload, &input);
            bench_peer::<TimerWheelPeer>(&mut group, workload, &input);
            #[cfg(feature = "tokio")]
            bench_peer::<TickwheelDelayQueue>(&mut group, workload, &input);
            bench_peer::<TokioDelayQueue>(&mut group, workload, &input);
            bench_peer::<TokioSleep>(&mut group, workload, &input);
            bench_peer::<NexusTimer>(&mut group, workload, &input);
            bench_peer::<TimerQueue>(&mut group, workload, &input);
            bench_peer::<Hhwt>(&mut group, workload, &input);
            bench_peer::<BTree>(&mut group, workload, &input);
            bench_peer::<LazyHeap>(&mut group, workload, &input);
            group.finish();
        }
    }
}

/// Workload 7 on one contender: each iteration a whole run of `n` timers, which must end
/// exactly once each.
fn bench_contender<C: Contender>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    n: usize,
    make: fn() -> C,
) {
    group.bench_with_input(BenchmarkId::new(C::NAME, n), &n, |b, &n| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let run = sched::run(n as u64, make);
                assert!(run.exact, "{}: every timer ends exactly once", C::NAME);
                total += Duration::from_nanos(run.nanos as u64);
            }
            total
        });
    });
}

fn scheduler(c: &mut Criterion) {
    for n in sizes() {
        let mut group = c.benchmark_group("scheduler");
        group.sample_size(10);
        group.warm_up_time(Duration::from_millis(500));
        group.measurement_time(Duration::from_secs(3));
        group.throughput(Throughput::Elements(n as u64));
        bench_contender(&mut group, n, sched::TickwheelScheduler::new);
        bench_contender(&mut group, n, sched::MutexDelayQueue::new);
        bench_contender(&mut group, n, sched::MutexBTreeMap::default);
        group.finish();
    }
}

criterion_group!(benches, workloads, scheduler);
criterion_main!(benches);
