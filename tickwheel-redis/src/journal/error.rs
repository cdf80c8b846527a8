//! The journal's errors.

use crate::error::Error;

/// Why a journal call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// The queue's owner record does not hold `token` as its epoch: another holder took the
    /// queue (with a larger token), or the queue has no owner record. The script checked
    /// this before anything else and wrote nothing of the refused batch, nor read anything.
    #[error(
        "fenced: queue {queue:?} is at epoch {current:?}, not the writer's token {token}; nothing written"
    )]
    Fenced {
        /// The queue's raw name.
        queue: Vec<u8>,
        /// The token the caller wrote or read under.
        token: u64,
        /// The owner record's epoch when the script ran; `None` if the queue has no owner
        /// record.
        current: Option<u64>,
    },
    /// A Redis error from the underlying connection, as the handoff calls report them:
    /// [`Error::Unavailable`] (the batch may or may not have been applied: the caller may send
    /// the same ops again, see [`crate::journal`] on retries), [`Error::Redis`],
    /// [`Error::UnsafeServer`] (the server lost `appendonly yes` / `appendfsync always`:
    /// nothing of the batch was sent), [`Error::UnexpectedReply`].
    #[error(transparent)]
    Redis(#[from] Error),
    /// A stored record or a typed id or value could not be read or written: a record shorter
    /// than its deadline, a MessagePack id or value of another type. Names the queue.
    #[error("corrupt journal record in queue {queue:?}: {message}")]
    Corrupt {
        /// The queue's raw name (empty for an encoding error before any queue was known).
        queue: Vec<u8>,
        /// What could not be read.
        message: String,
    },
    /// An op's id is longer than [`MAX_ID_BYTES`](crate::journal::MAX_ID_BYTES): the scripts
    /// hash every id byte by byte, again at each split of its bucket, and a long one would
    /// hold Redis (and every other client of it) for seconds. Nothing of the request was sent.
    #[error("journal id of {len} bytes is over the limit of {max}; nothing sent")]
    IdTooLong {
        /// The id's length in bytes.
        len: usize,
        /// The limit, [`MAX_ID_BYTES`](crate::journal::MAX_ID_BYTES).
        max: usize,
    },
    /// The journal's batching task is gone (its tokio runtime shut down); nothing of this call
    /// was sent, or its answer was lost with the task.
    #[error("the journal's batching task has stopped")]
    Closed,
    /// [`Journal::start`](crate::journal::Journal::start) was called outside a tokio runtime.
    #[error("the journal needs a tokio runtime to start its batching task")]
    NoRuntime,
}

impl JournalError {
    /// Whether the call was refused because the caller's token is stale.
    pub fn is_fenced(&self) -> bool {
        matches!(self, JournalError::Fenced { .. })
    }

    /// Whether sending the same ops again may succeed ([`Error::Unavailable`]).
    pub fn is_retryable(&self) -> bool {
        matches!(self, JournalError::Redis(e) if e.is_retryable())
    }
}
