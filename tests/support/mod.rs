//! What the integration tests share, included by each as `mod support;`: the reference
//! models the proptests (and, by `#[path]`, the fuzz targets) check against, their input
//! strategies, and the helpers of the `DelayQueue` and `due_stream` tests (tokio's paused
//! clock; feature `tokio`).
// Each test uses its own subset (the re-exports too).
#![allow(dead_code, unused_imports)]

#[cfg(feature = "tokio")]
pub mod delay_queue;
#[cfg(feature = "tokio")]
pub mod delay_queue_model;
#[cfg(feature = "tokio")]
pub mod due_stream;
pub mod indexed_model;
pub mod model;
pub mod scheduler_model;
pub mod strategies;
pub mod unlinks_model;
