//! `IndexedWheel<u8, u64>` against the reference model keyed by id: an arbitrary op sequence
//! over colliding ids from an arbitrary start, checked after every step (see
//! `tests/support/indexed_model.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickwheel_fuzz::IndexedInput;
use tickwheel_fuzz::indexed_model::IndexedHarness;
use tickwheel_fuzz::model::OrderRule;

fuzz_target!(|input: IndexedInput| {
    let mut harness = IndexedHarness::new(input.start, OrderRule::Documented);
    harness.stats_stride = 8;
    IndexedHarness::run_with(harness, &input.ops);
});
