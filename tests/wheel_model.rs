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

#[path = "support/model.rs"]
mod model;

use model::{Harness, KeyPick, Op, OrderRule, When};
use proptest::prelude::*;

/// `TICKWHEEL_MODEL_ORDER=fresh-insert` demands that a reset timer orders among equal
/// deadlines like a fresh insert (more than the wheel promises; see `support/model.rs`).
fn rule() -> OrderRule {
    match std::env::var("TICKWHEEL_MODEL_ORDER").as_deref() {
        Ok("fresh-insert") => OrderRule::FreshInsert,
        _ => OrderRule::Documented,
    }
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(96)
}

/// A deadline: every level equally, plus boundaries, the top, the past and equal deadlines.
fn deadline() -> BoxedStrategy<When> {
    prop_oneof![
        8 => (0u8..=10, any::<u64>()).prop_map(|(level, offset)| When::Ahead { level, offset }),
        2 => (0u8..=10, any::<u64>()).prop_map(|(level, offset)| When::Behind { level, offset }),
        4 => (1u8..=10, -1i8..=1, any::<bool>())
            .prop_map(|(k, delta, aligned)| When::Boundary { k: k - 1, delta, aligned }),
        1 => (0u8..=3).prop_map(|back| When::Top { back }),
        4 => (any::<u16>(), -1i8..=1).prop_map(|(pick, delta)| When::Same { pick, delta }),
        1 => Just(When::Elapsed),
        1 => any::<u64>().prop_map(When::Abs),
    ]
    .boxed()
}

/// A poll time: mostly small steps so timers fire one by one, sometimes huge jumps, the
/// past (time going backwards), exact deadlines and the deadline minus one.
fn now() -> BoxedStrategy<When> {
    prop_oneof![
        8 => (0u8..=2, any::<u64>()).prop_map(|(level, offset)| When::Ahead { level, offset }),
        2 => (0u8..=10, any::<u64>()).prop_map(|(level, offset)| When::Ahead { level, offset }),
        2 => (0u8..=10, any::<u64>()).prop_map(|(level, offset)| When::Behind { level, offset }),
        2 => (1u8..=10, -1i8..=1, any::<bool>())
            .prop_map(|(k, delta, aligned)| When::Boundary { k: k - 1, delta, aligned }),
        4 => (any::<u16>(), -1i8..=1).prop_map(|(pick, delta)| When::Same { pick, delta }),
        1 => (0u8..=3).prop_map(|back| When::Top { back }),
        1 => Just(When::Elapsed),
    ]
    .boxed()
}

fn key() -> impl Strategy<Value = KeyPick> {
    prop_oneof![
        8 => any::<u16>().prop_map(KeyPick::Issued),
        2 => (any::<u16>(), -2i8..=2).prop_map(|(pick, dgen)| KeyPick::Skewed { pick, dgen }),
        1 => (0u32..8, 0u32..4).prop_map(|(index, generation)| KeyPick::Raw { index, generation }),
        1 => (any::<u32>(), any::<u32>()).prop_map(|(index, generation)| KeyPick::Raw { index, generation }),
    ]
}

fn limit() -> impl Strategy<Value = u32> {
    prop_oneof![4 => 0u32..=4, 1 => 5u32..=64, 1 => Just(u32::MAX)]
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

/// Starting ticks: 0, anywhere, and just around long-uptime marks, so that level
/// boundaries of the high levels are crossed early in a sequence.
fn start() -> impl Strategy<Value = u64> {
    let marks = prop_oneof![
        Just(1u64 << 30),
        Just(1 << 32),
        Just(1 << 36),
        Just(1 << 63),
        Just(u64::MAX - (1 << 20))
    ];
    prop_oneof![
        2 => Just(0u64),
        1 => any::<u64>(),
        4 => (marks, 0u64..(1 << 13), any::<bool>())
            .prop_map(|(mark, d, below)| if below { mark - d } else { mark + d }),
    ]
}

/// Ticks of a small window: many timers share a deadline, resets keep colliding, and
/// polls walk through the window slot by slot.
fn small_deadline() -> BoxedStrategy<When> {
    prop_oneof![
        4 => (0u8..=1, 0u64..80).prop_map(|(level, offset)| When::Ahead { level, offset }),
        4 => (any::<u16>(), -1i8..=1).prop_map(|(pick, delta)| When::Same { pick, delta }),
        1 => (0u8..=0, any::<u64>()).prop_map(|(level, offset)| When::Behind { level, offset }),
        1 => Just(When::Elapsed),
    ]
    .boxed()
}

fn small_now() -> BoxedStrategy<When> {
    prop_oneof![
        6 => (0u8..=0, 0u64..8).prop_map(|(level, offset)| When::Ahead { level, offset }),
        3 => (any::<u16>(), -1i8..=1).prop_map(|(pick, delta)| When::Same { pick, delta }),
        1 => (0u8..=0, any::<u64>()).prop_map(|(level, offset)| When::Behind { level, offset }),
    ]
    .boxed()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// The whole range: level-uniform deadlines, boundaries, the top, long-uptime starts.
    #[test]
    fn wheel_matches_model(start in start(), ops in prop::collection::vec(op(deadline(), now()), 1..160)) {
        Harness::run(start, &ops, rule());
    }

    /// A narrow window: many equal deadlines, resets among them, slot-by-slot polling with
    /// limits, so the order of equal deadlines is tested hard.
    #[test]
    fn wheel_matches_model_on_crowded_ticks(
        start in start(),
        ops in prop::collection::vec(op(small_deadline(), small_now()), 1..200),
    ) {
        Harness::run(start, &ops, rule());
    }
}

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
