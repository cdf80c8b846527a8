//! Workload 7's operations in one thread, for instruction counts (`valgrind --tool=callgrind`):
//! the threaded `compare --scheduler-only` figure is wall time, which a shared machine makes
//! noisy; this one counts the scheduler's own work per operation, without threads.
//!
//! `cargo run --release -p tickwheel-bench --example sched_ops -- [n]` (default 100 000):
//! schedules `n` timers (ids unique, one of 64 queues, deadline uniform over the next 10 ms
//! of a virtual clock that advances 140 ns per schedule, about the pace of `compare`'s two
//! producers at 1 M timers, so that as many timers are live), pops what is due every 64 schedules
//! (up to 1 024 at a time) and ends each `Due`, drains a queue every 1 000 schedules, then
//! pops the rest. Prints the operations (schedules, drains, timers ended) and checks that
//! every timer ended exactly once.

use std::time::{Duration, Instant};

use tickwheel::sync::Scheduler;

const QUEUES: u64 = 64;
const SPREAD_US: u64 = 10_000;
const DRAIN_EVERY: u64 = 1000;
const POP_EVERY: u64 = 64;
/// Virtual nanoseconds per schedule.
const STEP_NS: u64 = 140;
const BATCH: usize = 1024;

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("n: a count of timers"))
        .unwrap_or(100_000);
    let t0 = Instant::now();
    let sched: Scheduler<u32, u64, u64> = Scheduler::builder().origin(t0).build();
    // xorshift64: deterministic, no dependency.
    let mut rng = 0x5c4e_d000_u64 | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let (mut ended, mut drained, mut drains) = (0u64, 0u64, 0u64);
    let pop = |now: Instant, ended: &mut u64| loop {
        let batch = sched.pop_due(now, BATCH);
        if batch.is_empty() {
            return;
        }
        for due in batch {
            std::hint::black_box(due.into_value());
            *ended += 1;
        }
    };
    for id in 0..n {
        let now = t0 + Duration::from_nanos(id * STEP_NS);
        let at = now + Duration::from_micros(next() % SPREAD_US);
        sched
            .schedule((id % QUEUES) as u32, id, at, id)
            .expect("fresh id");
        if (id + 1) % DRAIN_EVERY == 0 {
            let queue = ((id / DRAIN_EVERY) % QUEUES) as u32;
            drained += sched.drain_queue(&queue).cancelled.len() as u64;
            drains += 1;
        }
        if (id + 1) % POP_EVERY == 0 {
            pop(now, &mut ended);
        }
    }
    pop(
        t0 + Duration::from_nanos(n * STEP_NS) + Duration::from_micros(2 * SPREAD_US),
        &mut ended,
    );
    assert_eq!(ended + drained, n, "every timer ended exactly once");
    println!(
        "n={n} ended={ended} drained={drained} drains={drains} ops={}",
        n + drains + ended + drained
    );
}
