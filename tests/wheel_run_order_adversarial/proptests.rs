//! Random operations around a run: inserts near its digit edges, cancels, resets,
//! re-inserts into reused entries, limited polls, `shrink_to_fit` and `clear`.

use proptest::prelude::*;
use tickwheel::TimerKey;

use super::harness::Harness;
use super::support;
use super::{offset, starts};

#[derive(Clone, Debug)]
enum Op {
    Insert(u8, u16),
    Cancel(u16),
    Reset(u16, u8, u16),
    Poll(u8, u16),
    PollInto(u8, u16, u8),
    CancelAndReuse(u16, u8, u16),
    /// Resets the model's next few timers to one deadline.
    ResetNext(u8, u8, u16),
    Shrink,
    Clear,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (any::<u8>(), any::<u16>()).prop_map(|(k, x)| Op::Insert(k, x)),
        3 => any::<u16>().prop_map(Op::Cancel),
        3 => (any::<u16>(), any::<u8>(), any::<u16>()).prop_map(|(p, k, x)| Op::Reset(p, k, x)),
        2 => (any::<u8>(), any::<u16>()).prop_map(|(k, x)| Op::Poll(k, x)),
        5 => (any::<u8>(), any::<u16>(), any::<u8>()).prop_map(|(k, x, l)| Op::PollInto(k, x, l)),
        2 => (any::<u16>(), any::<u8>(), any::<u16>()).prop_map(|(p, k, x)| Op::CancelAndReuse(p, k, x)),
        2 => (any::<u8>(), any::<u8>(), any::<u16>()).prop_map(|(c, k, x)| Op::ResetNext(c, k, x)),
        1 => Just(Op::Shrink),
        1 => prop_oneof![7 => Just(Op::Shrink), 1 => Just(Op::Clear)],
    ]
}

/// A deadline near the run: in the slot (by digit edges), at or behind `elapsed`, equal to
/// the model's earliest, past the slot, or at the top of the range.
fn deadline(h: &Harness, block: u64, kind: u8, x: u16) -> u64 {
    let x = x as u64;
    let e = h.elapsed;
    match kind % 9 {
        0..=2 => block + offset(x),
        3 => block + (x % 64) * 64,
        4 => e.saturating_sub(x % 3),
        5 => h.earliest().unwrap_or(e).saturating_add(x % 2),
        6 => e.saturating_add(1 + x % 70),
        7 => block.saturating_add(4096 + x % 9000),
        _ => u64::MAX - x % 2,
    }
}

fn now(h: &Harness, block: u64, kind: u8, x: u16) -> u64 {
    let x = x as u64;
    let e = h.elapsed;
    let next = h.earliest().unwrap_or(e);
    match kind % 8 {
        0 => e.saturating_sub(1 + x % 5000),
        1 => e,
        2 | 3 => next,
        4 => next.saturating_sub(1),
        5 => block + x % 4096,
        6 => next.saturating_add(x % 4),
        _ => {
            if x % 32 == 0 {
                u64::MAX
            } else {
                e.saturating_add(x % 300)
            }
        }
    }
}

fn limit(h: &Harness, l: u8) -> usize {
    let run = h.queue.len();
    match l % 8 {
        0 => 0,
        1 | 2 => 1,
        3 => 2,
        4 => run.saturating_sub(1).max(1),
        5 => run,
        6 => run + 1,
        _ => 1 + l as usize % 30,
    }
}

fn pick(h: &Harness, p: u16) -> Option<(u64, TimerKey)> {
    if h.ids.is_empty() {
        return None;
    }
    // Mostly the model's next timers (the run's head and its neighbours).
    if p % 3 != 0 {
        if let Some(id) = h.queue.values().nth(p as usize % 5) {
            return Some((*id, h.timers[id].key));
        }
    }
    Some(h.ids[p as usize % h.ids.len()])
}

fn run_ops(start: u64, block: u64, n: u64, scramble: u64, ops: &[Op]) {
    let mut h = Harness::new(start);
    for i in 0..n {
        h.insert(block + offset(i.wrapping_add(scramble)));
    }
    h.check("setup");
    for op in ops {
        match *op {
            Op::Insert(k, x) => {
                let d = deadline(&h, block, k, x);
                h.insert(d);
                h.check("insert");
            }
            Op::Cancel(p) => {
                if let Some((id, key)) = pick(&h, p) {
                    h.cancel_id(id, key);
                    h.check("cancel");
                }
            }
            Op::Reset(p, k, x) => {
                if let Some((id, key)) = pick(&h, p) {
                    let d = deadline(&h, block, k, x);
                    h.reset_id(id, key, d);
                    h.check("reset");
                }
            }
            Op::Poll(k, x) => {
                let t = now(&h, block, k, x);
                h.poll(t);
            }
            Op::PollInto(k, x, l) => {
                let t = now(&h, block, k, x);
                let l = limit(&h, l);
                h.poll_into(t, l);
            }
            Op::CancelAndReuse(p, k, x) => {
                if let Some((id, key)) = pick(&h, p) {
                    h.cancel_id(id, key);
                    let d = deadline(&h, block, k, x);
                    h.insert(d);
                    h.check("cancel and reuse");
                }
            }
            Op::ResetNext(c, k, x) => {
                let d = deadline(&h, block, k, x);
                let next = h.next(1 + c as usize % 40);
                for (id, key) in next {
                    h.reset_id(id, key, d);
                }
                h.check("reset next");
            }
            Op::Shrink => h.shrink(),
            Op::Clear => h.clear(),
        }
    }
    h.drain(u64::MAX, 3);
    assert!(h.wheel.is_empty(), "everything fired at u64::MAX");
}

fn cases() -> u32 {
    support::cases_or(64)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// A run of a threshold size, then random edits and limited polls through it.
    #[test]
    fn run_matches_model_under_limited_polls_and_edits(
        s in 0usize..6,
        n in prop::sample::select(vec![20u64, 23, 24, 25, 40, 510, 511, 512, 513, 600]),
        scramble in any::<u64>(),
        ops in prop::collection::vec(op(), 1..120),
    ) {
        let (start, block) = starts()[s];
        run_ops(start, block, n, scramble, &ops);
    }
}
