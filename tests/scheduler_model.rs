//! `sync::Scheduler` through random interleavings of its phases — schedule, reschedule,
//! `pop_due` with limits, taking some items of a batch, dropping a batch half-taken,
//! finishing `Due`s in any order, cancel, `drain_queue`, re-scheduling drained and in-flight
//! ids — on several queues and shard counts, against a model of each id's lifecycle (see
//! `support/scheduler_model/`): every answer as the model says, and every timer ends
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

/// Found by the fuzz target `scheduler_races` (its input, as ops): a rate-limited queue's
/// parked timers got a throttle wake-up computed at one `now`; a later `pop_due` with an
/// earlier `now` then took rate permits at that earlier time, and at the next `pop_due` the
/// model handed out a timer the scheduler still kept parked for the wake-up. The rate's
/// clock now ignores a `now` that goes backwards (the latest pop's counts), as the wheel
/// does, in the scheduler and the model alike.
#[test]
fn rate_limited_pop_after_a_limited_batch_matches_the_model() {
    // The input as the fuzzer wrote it repeats two runs of steps: each is spelled once.
    use At::*;
    use SchedOp::*;
    #[rustfmt::skip]
    let ahead_run = [
        Schedule { queue: 255, id: 255, at: Ahead { ticks: 7, sub: 2550202384 } },
        Schedule { queue: 9, id: 63, at: Ahead { ticks: 0, sub: 16842755 } },
        Schedule { queue: 0, id: 0, at: Ahead { ticks: 0, sub: 4127195400 } },
        Schedule { queue: 0, id: 0, at: Ahead { ticks: 1, sub: 1074204677 } },
        Finish { due: 238, consume: false },
        Take { batch: 19, n: 3 },
        Schedule { queue: 16, id: 7, at: Far { shift: 30 } },
        Flush { queue: 132, now: BeforeOrigin { ns: 33606298 } },
        Schedule { queue: 5, id: 60, at: Ahead { ticks: 2, sub: 1 } },
        Take { batch: 19, n: 4 },
    ];
    #[rustfmt::skip]
    let drop_run = [
        &[DropBatch(145); 11][..],
        &[
            Schedule { queue: 19, id: 19, at: Far { shift: 15 } },
            PopDue { now: Far { shift: 58 }, limit: 4 },
            Schedule { queue: 3, id: 20, at: Far { shift: 19 } },
            DropBatch(232),
            DropBatch(139),
            Schedule { queue: 0, id: 0, at: Ahead { ticks: 0, sub: 772014080 } },
            Finish { due: 232, consume: false },
            PopDue { now: Far { shift: 19 }, limit: 4 },
            PopDue { now: Far { shift: 58 }, limit: 4 },
            Schedule { queue: 1, id: 2, at: Far { shift: 57 } },
            Hold(162),
        ],
    ]
    .concat();
    #[rustfmt::skip]
    let ops = [
        &[
            Rate { queue: 0, interval: 236, burst: 237 },
            Rate { queue: 236, interval: 236, burst: 32 },
            Rate { queue: 23, interval: 203, burst: 19 },
        ][..],
        &ahead_run,
        &[
            Rate { queue: 236, interval: 32, burst: 236 },
            Take { batch: 203, n: 4 },
        ],
        &ahead_run,
        &[
            DropBatch(232),
            Schedule { queue: 139, id: 46, at: Ahead { ticks: 37352, sub: 2442236305 } },
        ],
        &drop_run,
        &[PopDue { now: Ahead { ticks: 59578, sub: 2442236305 }, limit: 1 }],
        &drop_run,
        &[
            PopDue { now: Ahead { ticks: 4922, sub: 3399105043 }, limit: 1 },
            Schedule { queue: 19, id: 185, at: Ahead { ticks: 2, sub: 3904515723 } },
            Schedule { queue: 19, id: 19, at: Ahead { ticks: 2, sub: 3267543746 } },
            Limit { queue: 194, limit: 255 },
            PopDue { now: Behind { ticks: 3 }, limit: 1 },
            PopDue { now: Ahead { ticks: 2, sub: 320017411 }, limit: 255 },
            Hold(162),
            PopDue { now: Ahead { ticks: 0, sub: 3305 }, limit: 0 },
            PopDue { now: Ahead { ticks: 7, sub: 268498434 }, limit: 2 },
            PopDue { now: Far { shift: 19 }, limit: 1 },
            Limit { queue: 115, limit: 2 },
            Rate { queue: 117, interval: 117, burst: 117 },
            Rate { queue: 117, interval: 194, burst: 194 },
        ],
        &[Limit { queue: 194, limit: 255 }; 5],
        &[
            PopDue { now: Behind { ticks: 0 }, limit: 1 },
            Drain(19),
            PopDue { now: Ahead { ticks: 0, sub: 0 }, limit: 0 },
        ],
    ]
    .concat();
    SchedHarness::run(7, 3, &ops);
}
