//! Moves a [`tickwheel`] scheduled queue between hosts through Redis.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod keys;
pub mod server;
