//! The core `Wheel<T>` against a `BTreeMap` reference model (`support/model.rs`): random op
//! sequences — insert, cancel, reset, poll, poll until empty, `poll_into` with limits and
//! resumption, `get_mut`, `clear`, `shrink_to_fit`, stale and foreign keys, huge jumps and
//! time going backwards — fire exactly what the model fires, in the model's order, with
//! every observable checked after every step (see the model's module doc for the list).
//!
//! Deadlines and poll times are drawn level-uniformly (a level 0..=10 first, then a
//! distance in that level's range), at level boundaries (64^k, 64^k ± 1, aligned and not),
//! at the top of the `u64` range, and equal to other timers' deadlines. Wheels start at 0 and
//! at long-uptime ticks near 2^30, 2^32, 2^36, 2^63 and the top of the range.
//!
//! `PROPTEST_CASES` raises the case count (default 96 per property, a few seconds).

mod support;
use support::{model, strategies};

use model::{Harness, KeyPick, Op, OrderRule, When};
use proptest::prelude::*;
use strategies::{limit, model_proptests};

fn key() -> impl Strategy<Value = KeyPick> {
    prop_oneof![
        8 => any::<u16>().prop_map(KeyPick::Issued),
        2 => (any::<u16>(), -2i8..=2).prop_map(|(pick, dgen)| KeyPick::Skewed { pick, dgen }),
        1 => (0u32..8, 0u32..4).prop_map(|(index, generation)| KeyPick::Raw { index, generation }),
        1 => (any::<u32>(), any::<u32>()).prop_map(|(index, generation)| KeyPick::Raw { index, generation }),
    ]
}

fn op(deadline: BoxedStrategy<When>, now: BoxedStrategy<When>) -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => deadline.clone().prop_map(Op::Insert),
        4 => key().prop_map(Op::Cancel),
        4 => (key(), deadline).prop_map(|(k, d)| Op::Reset(k, d)),
        3 => now.clone().prop_map(Op::Poll),
        2 => now.clone().prop_map(Op::PollAll),
        3 => (now, limit(), 0u8..3).prop_map(|(now, limit, prefill)| Op::PollInto { now, limit, prefill }),
        1 => key().prop_map(Op::GetMut),
        1 => (0u16..300, 0u8..=3, any::<u8>())
            .prop_map(|(times, level, window)| Op::Churn { times, level, window }),
        1 => Just(Op::ShrinkToFit),
        1 => prop_oneof![9 => Just(Op::ShrinkToFit), 1 => Just(Op::Clear)],
    ]
}

model_proptests!(
    Harness,
    op,
    wheel_matches_model,
    wheel_matches_model_on_crowded_ticks
);

/// Timers at every level boundary (64^k, 64^k ± 1, aligned to the start) and the top of the
/// range, from each long-uptime start, polled tick by tick around every boundary.
#[test]
fn every_boundary_from_every_start_in_model_order() {
    let starts = [
        0u64,
        (1 << 30) - 1,
        1 << 32,
        (1 << 36) + 1,
        1 << 63,
        u64::MAX - 70,
    ];
    for start in starts {
        let mut h = Harness::new(start, OrderRule::FreshInsert);
        let mut deadlines = Vec::new();
        for k in 0..10u8 {
            for delta in -1..=1 {
                for aligned in [false, true] {
                    let when = When::Boundary { k, delta, aligned };
                    deadlines.push(h.resolve(when));
                }
            }
        }
        for back in 0..4 {
            deadlines.push(h.resolve(When::Top { back }));
        }
        for &d in &deadlines {
            h.insert(d);
            h.check();
        }
        deadlines.sort_unstable();
        deadlines.dedup();
        for &d in &deadlines {
            for now in [d.saturating_sub(1), d] {
                h.poll_into(now, usize::MAX, 0);
                h.check();
            }
        }
        assert!(h.is_empty(), "start {start}: everything fired");
        h.finish();
    }
}

/// `poll_into` with limit 1, then 2, … resumes where it stopped, through equal deadlines,
/// past deadlines and a cascade, and matches the model throughout.
#[test]
fn poll_into_with_small_limits_resumes_in_order() {
    let mut h = Harness::new(4000, OrderRule::FreshInsert);
    for d in [4096u64, 4095, 4096, 4097, 4000, 10, 4096, 8191, 8192, 4097] {
        h.insert(d);
    }
    let mut limit = 0;
    while !h.is_empty() {
        h.poll_into(8192, limit, 1);
        h.check();
        limit += 1;
    }
    h.finish();
}
