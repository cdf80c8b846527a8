#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod clock;
pub mod indexed;
mod loom;
pub mod sync;
#[cfg(feature = "tokio")]
pub mod tokio;
pub mod wheel;

pub use clock::TimerWheel;
pub use indexed::IndexedWheel;

pub use wheel::{CapacityError, Expired, TimerKey, Wheel, WheelStats};
