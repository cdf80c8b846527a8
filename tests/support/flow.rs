//! What the flow-control tests share: a scheduler over `u8` queues and `u64` ids (each
//! timer's value its id), filled and limited in one call.

use std::time::{Duration, Instant};

use tickwheel::sync::{RateLimit, Scheduler};

/// Queues `u8`, ids `u64`, values `u64`.
pub type Sched = Scheduler<u8, u64, u64>;

/// A scheduler of `shards` shards whose origin is `t0`.
pub fn sched(shards: usize, t0: Instant) -> Sched {
    Scheduler::builder().shards(shards).origin(t0).build()
}

/// `n` milliseconds.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Schedules ids `0..n` on `queue`, all due at `at`, each with its id as its value.
/// Panics if one is refused (a test's setup).
pub fn fill(s: &Sched, queue: u8, n: u64, at: Instant) {
    for id in 0..n {
        s.schedule(queue, id, at, id).unwrap();
    }
}

/// One hand-out per `per`, bursts of up to `burst`.
pub fn every(per: Duration, burst: u32) -> RateLimit {
    RateLimit {
        count: 1,
        per,
        burst,
    }
}

/// A scheduler of `shards` shards at origin `t0` whose queue 1 is limited to `limit` and
/// holds ids `0..n`, all due at `t0`.
pub fn rated(shards: usize, t0: Instant, limit: RateLimit, n: u64) -> Sched {
    let s = sched(shards, t0);
    s.set_rate(&1, Some(limit));
    fill(&s, 1, n, t0);
    s
}

/// A scheduler of `shards` shards at origin `t0` whose queue 1 is limited to `limit` timers
/// in flight and holds ids `0..n`, all due at `t0`.
pub fn limited(shards: usize, t0: Instant, limit: usize, n: u64) -> Sched {
    let s = sched(shards, t0);
    s.set_concurrency(&1, Some(limit));
    fill(&s, 1, n, t0);
    s
}
