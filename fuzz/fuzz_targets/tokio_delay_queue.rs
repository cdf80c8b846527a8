//! `tickwheel::tokio::DelayQueue` on a current-thread runtime with a paused clock: an
//! arbitrary sequence of inserts, removes, resets, clock advances, polls by two tasks and
//! peeks, against the reference model and a model of the waiting task — what comes out,
//! when, in what order, and no lost wakeups (see `tests/support/delay_queue_model.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickwheel_fuzz::DelayQueueInput;
use tickwheel_fuzz::delay_queue_model::DqHarness;

fuzz_target!(|input: DelayQueueInput| {
    DqHarness::run(&input.ops);
});
