//! `sync::Scheduler` through random interleavings of its phases — schedule, reschedule,
//! `pop_due` with limits, taking some items of a batch, dropping a batch half-taken,
//! finishing `Due`s in any order, cancel, `drain_queue`, re-scheduling drained and in-flight
//! ids — on several queues and shard counts, against a model of each id's lifecycle (see
//! `support/scheduler_model.rs`): every answer as the model says, and every timer ends
//! exactly once. The fuzz target `scheduler_races` runs the same harness.
//! `PROPTEST_CASES` raises the case count.

mod support;
use support::scheduler_model;

use proptest::prelude::*;
use scheduler_model::{At, SchedHarness, SchedOp};

fn cases() -> u32 {
    support::cases_or(96)
}

fn at() -> impl Strategy<Value = At> {
    prop_oneof![
        6 => (0u32..8, any::<u32>()).prop_map(|(ticks, sub)| At::Ahead { ticks, sub }),
        2 => (0u32..5000, any::<u32>()).prop_map(|(ticks, sub)| At::Ahead { ticks, sub }),
        2 => (0u32..8).prop_map(|ticks| At::Behind { ticks }),
        1 => any::<u32>().prop_map(|ns| At::BeforeOrigin { ns }),
        1 => (0u8..64).prop_map(|shift| At::Far { shift }),
    ]
}

fn op() -> impl Strategy<Value = SchedOp> {
    prop_oneof![
        8 => (any::<u8>(), any::<u8>(), at()).prop_map(|(queue, id, at)| SchedOp::Schedule { queue, id, at }),
        3 => (any::<u8>(), at()).prop_map(|(id, at)| SchedOp::Reschedule { id, at }),
        3 => any::<u8>().prop_map(SchedOp::Cancel),
        2 => any::<u8>().prop_map(SchedOp::Drain),
        4 => (at(), prop_oneof![0u8..4, Just(u8::MAX)]).prop_map(|(now, limit)| SchedOp::PopDue { now, limit }),
        4 => (any::<u8>(), 0u8..4).prop_map(|(batch, n)| SchedOp::Take { batch, n }),
        2 => any::<u8>().prop_map(SchedOp::DropBatch),
        4 => (any::<u8>(), any::<bool>()).prop_map(|(due, consume)| SchedOp::Finish { due, consume }),
        1 => any::<u8>().prop_map(SchedOp::Hold),
        1 => any::<u8>().prop_map(SchedOp::Release),
        1 => (any::<u8>(), prop_oneof![0u8..4, Just(u8::MAX)]).prop_map(|(queue, limit)| SchedOp::Limit { queue, limit }),
        1 => (any::<u8>(), at()).prop_map(|(queue, now)| SchedOp::Flush { queue, now }),
        2 => (any::<u8>(), at(), 0u8..4).prop_map(|(queue, now, limit)| SchedOp::PopQueue { queue, now, limit }),
        1 => (any::<u8>(), prop_oneof![0u8..4, Just(u8::MAX)], 0u8..3).prop_map(|(queue, interval, burst)| SchedOp::Rate { queue, interval, burst }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn scheduler_phases_match_the_lifecycle_model(
        shards in 0u8..8,
        resolution in 0u8..4,
        ops in prop::collection::vec(op(), 1..120),
    ) {
        SchedHarness::run(shards, resolution, &ops);
    }
}
