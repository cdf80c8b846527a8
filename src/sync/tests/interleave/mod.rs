//! The exhaustive-interleaving harness (test-only). Not loom: see the `sync` module doc.
//!
//! Two harnesses, both of the same shape: a few "threads", each a short list of steps; every
//! interleaving of those lists is enumerated and replayed from scratch on a real
//! [`Scheduler`] in one OS thread.
//!
//! - **Dispatch phases** (`phases_*`): steps are whole critical sections — schedule,
//!   reschedule, cancel, `pop_due`, taking a `Due` from the batch, dropping it, dropping a
//!   half-taken batch, and one shard's part of a drain (a drain is not atomic across shards,
//!   so each shard is its own step). Every step's answer is compared with a sequential
//!   model of the id states; at the end everything left is popped, and each accepted timer
//!   must have ended exactly once (delivered, or returned by cancel/drain).
//! - **Wake protocol** (`wake_*`): steps are each atomic access of `signal.rs`'s protocol
//!   (arm, read one shard, lower the watermark, decide to sleep; a producer's insert, and its
//!   announce). At the end, a poller that went to sleep and was not woken must not have
//!   slept past any pending deadline. Two deliberately broken pollers (no arm, late arm)
//!   must be caught, which shows the harness can fail.

mod flow;
mod freeze;
mod phases;
mod wake;

use std::time::Duration;

use crate::sync::Scheduler;

pub(super) type Sched = Scheduler<u8, u64, u64>;

pub(super) const MS: Duration = Duration::from_millis(1);

/// Visits every interleaving of threads with `lens[i]` steps: the thread of each step.
pub(super) fn interleavings(lens: &[usize], visit: &mut impl FnMut(&[usize])) {
    fn go<F: FnMut(&[usize])>(left: &mut [usize], order: &mut Vec<usize>, visit: &mut F) {
        if left.iter().all(|&n| n == 0) {
            visit(order);
            return;
        }
        for t in 0..left.len() {
            if left[t] > 0 {
                left[t] -= 1;
                order.push(t);
                go(left, order, visit);
                order.pop();
                left[t] += 1;
            }
        }
    }
    go(&mut lens.to_vec(), &mut Vec::new(), visit);
}

/// Runs `threads` in every interleaving; `run(steps in order)` returns an error to report.
pub(super) fn check_all<S: Copy + std::fmt::Debug>(
    threads: &[Vec<S>],
    mut run: impl FnMut(&[S]) -> Result<(), String>,
) -> usize {
    let lens: Vec<usize> = threads.iter().map(Vec::len).collect();
    let mut count = 0;
    interleavings(&lens, &mut |order| {
        let steps = steps_of(threads, order);
        if let Err(e) = run(&steps) {
            panic!("interleaving {count} failed: {e}\nsteps: {steps:?}");
        }
        count += 1;
    });
    count
}

/// The steps of one interleaving: `order` names the thread of each step.
pub(super) fn steps_of<S: Copy>(threads: &[Vec<S>], order: &[usize]) -> Vec<S> {
    let mut next = vec![0; threads.len()];
    order
        .iter()
        .map(|&t| {
            next[t] += 1;
            threads[t][next[t] - 1]
        })
        .collect()
}

/// The `nth` id (counting from 0) that lands on `shard` of a 2-shard scheduler.
pub(super) fn id_on(shard: usize, nth: usize) -> u64 {
    let probe: Sched = Scheduler::builder().shards(2).build();
    (0u64..)
        .filter(|id| probe.shard_index(id) == shard)
        .nth(nth)
        .unwrap_or(u64::MAX)
}

/// The first `N` ids of the two shards taken in turn: `id_on(0, 0)`, `id_on(1, 0)`,
/// `id_on(0, 1)`, `id_on(1, 1)`, …
pub(super) fn alternating<const N: usize>() -> [u64; N] {
    std::array::from_fn(|k| id_on(k % 2, k / 2))
}
