//! tickwheel — placeholder crate docs, replaced below.
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod clock;
pub mod wheel;

pub use clock::TimerWheel;
pub use wheel::{CapacityError, Expired, TimerKey, Wheel, WheelStats};
