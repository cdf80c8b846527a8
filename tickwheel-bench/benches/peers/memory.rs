//! Memory (workload 8).

use std::time::Duration;

use super::Peer;
use super::input::{Input, OP_CANCEL, OP_INSERT, OP_TAG};
use super::workloads::{Clock, Tally, poll_at};

/// Heap bytes per pending timer after inserting `n` timers into a structure built without a
/// capacity hint, as `heap()` (a counting allocator) sees it. Includes the keys' own heap (a
/// `Box<Sleep>` for tokio), not the vector the harness keeps them in.
pub fn bytes_per_timer<P: Peer>(input: &Input, heap: &dyn Fn() -> isize) -> f64 {
    P::with_context(|| {
        let deadlines: Vec<u64> = input.deadlines.clone();
        let mut keys: Vec<Option<P::Key>> = Vec::with_capacity(input.n);
        let mut peer = P::new(input.n, 0);
        let before = heap();
        for (lane, &d) in deadlines.iter().enumerate() {
            let d = peer.deadline(d);
            keys.push(Some(peer.insert(d, lane as u64)));
        }
        let after = heap();
        let per = (after - before) as f64 / input.n as f64;
        drop(keys);
        drop(peer);
        per
    })
}

/// Heap held by a peer during the churn workload, as growth since before the first insert:
/// after the prefill, half-way through the script and at its end. Flat means the second
/// half adds nothing: whatever the structure keeps for stale references and spare capacity
/// has reached its steady state.
pub fn churn_heap<P: Peer>(input: &Input, heap: &dyn Fn() -> isize) -> [isize; 3] {
    let script = input.churn();
    let n = input.n;
    P::with_context(|| {
        let mut keys: Vec<Option<P::Key>> = Vec::with_capacity(n);
        let mut fired = Vec::with_capacity(n);
        let mut peer = P::new(n, 0);
        let base = heap();
        for (lane, &d) in script.deadlines[..n].iter().enumerate() {
            let d = peer.deadline(d);
            keys.push(Some(peer.insert(d, lane as u64)));
        }
        let start = heap() - base;
        let mut half = start;
        let mut next_deadline = n;
        let mut tally = Tally::default();
        let mut clock = Clock::new(Duration::MAX);
        let middle = script.ops.len() / 2;
        for (i, &op) in script.ops.iter().enumerate() {
            let arg = op & !OP_TAG;
            match op & OP_TAG {
                OP_INSERT => {
                    let d = peer.deadline(script.deadlines[next_deadline]);
                    keys[arg as usize] = Some(peer.insert(d, arg));
                    next_deadline += 1;
                }
                OP_CANCEL => {
                    let key = keys[arg as usize].take().expect("pending key");
                    peer.cancel(key);
                }
                _ => poll_at(
                    &mut peer, arg, &mut keys, &mut fired, &mut tally, &mut clock,
                ),
            }
            if i == middle {
                half = heap() - base;
            }
        }
        [start, half, heap() - base]
    })
}
