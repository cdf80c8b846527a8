//! The journal's error type.

use std::fmt;
use std::sync::Arc;

/// Why a journal call failed.
///
/// Every variant but [`Decode`](Error::Decode) means the record of the call may not be on
/// disk: the call is not acknowledged, and recovery brings back the state before it (or,
/// for records that reached the engine before the failure, after it). After an
/// [`Engine`](Error::Engine) error or [`Closed`](Error::Closed) the journal refuses every
/// later change: re-open it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Error {
    /// The storage engine failed (an I/O error, a full disk, a corrupt file). The message is
    /// the engine's.
    Engine(Arc<str>),
    /// A record could not be encoded or decoded with postcard (a `Serialize` impl failed, or
    /// a stored record does not decode as the types given to `open`).
    Decode(Arc<str>),
    /// The journal's writer thread is gone (the journal was closed, or an earlier write
    /// failed: the message says which).
    Closed(Arc<str>),
}

impl Error {
    pub(crate) fn engine(e: impl fmt::Display) -> Self {
        Error::Engine(e.to_string().into())
    }

    pub(crate) fn decode(e: impl fmt::Display) -> Self {
        Error::Decode(e.to_string().into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Engine(m) => write!(f, "journal engine error: {m}"),
            Error::Decode(m) => write!(f, "journal record encoding error: {m}"),
            Error::Closed(m) => write!(f, "journal closed: {m}"),
        }
    }
}

impl std::error::Error for Error {}

/// The journal's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
