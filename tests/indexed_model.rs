//! `IndexedWheel` against the shared reference model (`support/indexed_model.rs`): random
//! op sequences over a small id space, so inserts replace pending ids and reuse ids that
//! just fired, with the same level-uniform deadlines, boundaries, long-uptime starts and
//! jumps in time as the core wheel's model test. The fuzz target `indexed_ops` runs the
//! same harness. `PROPTEST_CASES` raises the case count.

mod support;
use support::{indexed_model, model, strategies};

use indexed_model::{COMMON_IDS, IndexedHarness, IxOp, same_id};
use model::When;
use proptest::prelude::*;
use strategies::{limit, model_proptests};

/// Ids: mostly a handful, so they collide; sometimes any byte.
fn id() -> impl Strategy<Value = u8> {
    prop_oneof![4 => 0..COMMON_IDS, 1 => any::<u8>()]
}

fn op(deadline: BoxedStrategy<When>, now: BoxedStrategy<When>) -> impl Strategy<Value = IxOp> {
    let deadline = deadline.prop_map(same_id).boxed();
    let now = now.prop_map(same_id).boxed();
    prop_oneof![
        10 => (id(), deadline.clone()).prop_map(|(id, when)| IxOp::Insert { id, when }),
        4 => id().prop_map(IxOp::Cancel),
        4 => (id(), deadline).prop_map(|(id, when)| IxOp::Reset(id, when)),
        3 => now.clone().prop_map(IxOp::Poll),
        2 => now.clone().prop_map(IxOp::PollAll),
        3 => (now, limit(), 0u8..3)
            .prop_map(|(now, limit, prefill)| IxOp::PollInto { now, limit, prefill }),
        1 => id().prop_map(IxOp::GetMut),
        1 => prop_oneof![4 => Just(IxOp::ShrinkToFit), 1 => Just(IxOp::Clear)],
    ]
}

model_proptests!(
    IndexedHarness,
    op,
    indexed_wheel_matches_model,
    indexed_wheel_matches_model_on_crowded_ticks
);
