//! What the flow-control tests share: a scheduler over `u8` queues and `u64` ids (each
//! timer's value its id), filled and limited in one call.

use std::time::{Duration, Instant};

use tickwheel::sync::{Due, RateLimit, Scheduler};

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
    fill_with(s, queue, n, |_| at);
}

/// Schedules ids `0..n` on `queue`, id `i` due at `at(i)`, each with its id as its value.
/// Panics if one is refused (a test's setup).
pub fn fill_with(s: &Sched, queue: u8, n: u64, at: impl Fn(u64) -> Instant) {
    for id in 0..n {
        s.schedule(queue, id, at(id), id).unwrap();
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

/// A scheduler of `shards` shards at origin `t0` whose queue 1 is held (and empty).
pub fn held(shards: usize, t0: Instant) -> Sched {
    let s = sched(shards, t0);
    s.hold_queue(&1);
    s
}

/// For each `(at, n)` in turn: pops up to 10 at `t0 + at` ms, finishing each, and asserts
/// that `n` came out.
#[track_caller]
pub fn expect_pops(s: &Sched, t0: Instant, steps: &[(u64, usize)]) {
    for (k, &(at, n)) in steps.iter().enumerate() {
        let got = s.pop_due(t0 + ms(at), 10).count();
        assert_eq!(got, n, "step {k}: pop at {at} ms");
    }
}

/// Pops one batch of up to `limit` at `now`, takes every timer of it, and asserts there are
/// `n` (`why` says what the count means); they stay in flight until dropped.
#[track_caller]
pub fn take_batch(
    s: &Sched,
    now: Instant,
    limit: usize,
    n: usize,
    why: &str,
) -> Vec<Due<u8, u64, u64>> {
    let batch: Vec<_> = s.pop_due(now, limit).collect();
    assert_eq!(batch.len(), n, "{why}");
    batch
}

/// [`limited`], then one pop at `t0` that could take all `n`, whose timers are all taken:
/// asserted to be `limit` of them, in flight until dropped.
pub fn at_limit(
    shards: usize,
    t0: Instant,
    limit: usize,
    n: u64,
) -> (Sched, Vec<Due<u8, u64, u64>>) {
    let s = limited(shards, t0, limit, n);
    let taken = take_batch(&s, t0, n as usize, limit, "the limit's worth");
    (s, taken)
}
