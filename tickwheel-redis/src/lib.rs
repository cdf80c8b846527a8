//! Moves a [`tickwheel`] scheduled queue between hosts through Redis.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod chunk;
mod connect;
mod error;
pub mod keys;
mod protocol;
mod record;
pub mod server;

pub use connect::redact_url;
pub use error::{Error, Rejection};
pub use protocol::{Applied, Effect, Options, Protocol, STEPS, View};
pub use record::{Member, Record, State, Token};
