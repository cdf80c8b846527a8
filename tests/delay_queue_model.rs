//! `tokio::DelayQueue` under the paused clock against the reference model and a model of
//! the waiting task (`support/delay_queue_model.rs`): random sequences of inserts (timeouts
//! and instants, past, far, `Duration::MAX`), removes, resets, clock advances, polls by two
//! tasks, peeks, clears and compactions — what comes out, when, in what order, and no lost
//! wakeups. The fuzz target `tokio_delay_queue` runs the same harness.
//! `PROPTEST_CASES` raises the case count.
#![cfg(feature = "tokio")]

mod support;
use support::delay_queue_model;

use delay_queue_model::{DqAt, DqHarness, DqOp, Dur};
use proptest::prelude::*;

fn cases() -> u32 {
    support::cases_or(64)
}

/// Mostly short (the levels of a few ms to a few s), sometimes long or "never".
fn dur() -> impl Strategy<Value = Dur> {
    prop_oneof![
        6 => (0u8..=3, any::<u64>(), any::<u32>()).prop_map(|(level, ms, nanos)| Dur { level, ms, nanos }),
        2 => (0u8..=6, any::<u64>(), any::<u32>()).prop_map(|(level, ms, nanos)| Dur { level, ms, nanos }),
        1 => Just(Dur { level: 7, ms: 0, nanos: 0 }),
    ]
}

fn at() -> impl Strategy<Value = DqAt> {
    prop_oneof![
        6 => dur().prop_map(DqAt::Ahead),
        2 => dur().prop_map(DqAt::Behind),
        1 => any::<u16>().prop_map(|ms| DqAt::BeforeOrigin { ms }),
        1 => (0u8..64).prop_map(|shift| DqAt::Far { shift }),
    ]
}

fn op() -> impl Strategy<Value = DqOp> {
    prop_oneof![
        6 => dur().prop_map(DqOp::Insert),
        3 => at().prop_map(DqOp::InsertAt),
        3 => any::<u16>().prop_map(DqOp::Remove),
        2 => (any::<u16>(), dur()).prop_map(|(k, d)| DqOp::Reset(k, d)),
        2 => (any::<u16>(), at()).prop_map(|(k, a)| DqOp::ResetAt(k, a)),
        5 => (0u8..=3, any::<u64>(), any::<u32>())
            .prop_map(|(level, ms, nanos)| DqOp::Advance(Dur { level, ms, nanos })),
        5 => any::<bool>().prop_map(|task| DqOp::Poll { task }),
        2 => any::<bool>().prop_map(|task| DqOp::Drain { task }),
        2 => Just(DqOp::Peek),
        1 => prop_oneof![Just(DqOp::Clear), Just(DqOp::Compact), Just(DqOp::ShrinkToFit)],
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn delay_queue_matches_model(ops in prop::collection::vec(op(), 1..120)) {
        DqHarness::run(&ops);
    }
}
