//! `Wheel<u64>` against the reference model: an arbitrary op sequence from an arbitrary
//! start, every observable checked after every step (see `tests/support/model.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickwheel_fuzz::WheelInput;
use tickwheel_fuzz::model::{Harness, OrderRule};

fuzz_target!(|input: WheelInput| {
    let mut harness = Harness::new(input.start, OrderRule::Documented);
    harness.stats_stride = 8;
    Harness::run_with(harness, &input.ops);
});
