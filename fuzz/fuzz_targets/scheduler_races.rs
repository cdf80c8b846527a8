//! `sync::Scheduler` through an arbitrary interleaving of its phases — schedule, reschedule,
//! `pop_due` with limits, taking some items of a batch, dropping a batch half-taken,
//! finishing `Due`s in any order, cancel, `drain_queue`, re-scheduling drained or in-flight
//! ids — on several queues, against a model of each id's lifecycle; every timer ends exactly
//! once (see `tests/support/scheduler_model/`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickwheel_fuzz::SchedInput;
use tickwheel_fuzz::scheduler_model::SchedHarness;

fuzz_target!(|input: SchedInput| {
    SchedHarness::run(input.shards, input.resolution, &input.ops);
});
