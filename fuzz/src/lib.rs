//! Shared by the fuzz targets: the reference model of `tests/support/model.rs` (included, so
//! the proptest and the fuzzer check exactly the same contracts), decoders that turn the
//! fuzzer's bytes into op sequences that keep hitting interesting ticks (a module per target,
//! named after it), and an encoder (the decoders' inverse, [`encode`]) that
//! `examples/write_corpus.rs` uses to write the seed corpora.
//!
//! Each target's input type implements `Arbitrary` and `Debug`, so
//! `cargo fuzz fmt <target> <artifact>` prints a crash as an op list that pastes straight
//! into a regression test.

use arbitrary::{Result, Unstructured};

#[path = "../../tests/support/delay_queue_model.rs"]
pub mod delay_queue_model;
#[path = "../../tests/support/indexed_model.rs"]
pub mod indexed_model;
#[path = "../../tests/support/model.rs"]
pub mod model;
#[path = "../../tests/support/scheduler_model/mod.rs"]
pub mod scheduler_model;

mod indexed_ops;
mod scheduler_races;
mod tokio_delay_queue;
mod wheel_ops;

pub mod encode;

pub use indexed_ops::{IndexedInput, id, ix_op};
pub use scheduler_races::{SchedInput, at, sched_op};
pub use tokio_delay_queue::{DelayQueueInput, dq_at, dq_op, dur};
pub use wheel_ops::{WheelInput, deadline, key, limit, now, op, start};

/// Most ops decoded from one input: bounds the work per run.
pub const MAX_OPS: usize = 1024;

/// Ops decoded by `op` until the input runs out or [`MAX_OPS`] are decoded; an error of `op`
/// is returned as it is.
pub fn ops<'a, T>(
    u: &mut Unstructured<'a>,
    mut op: impl FnMut(&mut Unstructured<'a>) -> Result<T>,
) -> Result<Vec<T>> {
    let mut ops = Vec::new();
    while !u.is_empty() && ops.len() < MAX_OPS {
        ops.push(op(u)?);
    }
    Ok(ops)
}

/// Long-uptime marks a wheel may start near.
pub const START_MARKS: [u64; 6] = [0, 1 << 30, 1 << 32, 1 << 36, 1 << 63, u64::MAX - (1 << 20)];
