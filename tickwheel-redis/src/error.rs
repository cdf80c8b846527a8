//! Errors and refusals.

use crate::record::Record;

/// Why a script refused a step. Every refusal changed nothing in Redis, and carries the record
/// as the script saw it (in the same atomic step) where there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// The queue has no owner record (never acquired).
    Absent,
    /// `acquire`/`recover`: another member (or, for `acquire`, another boot) holds the record.
    Taken(Record),
    /// The caller's (name, boot, epoch) is no longer the record's: another member or boot has
    /// taken over. `taken_chunks` is how many chunks of the offer the caller made under its
    /// epoch were taken by someone else (`Some(0)`: none); `None` if it made no offer that was
    /// taken. A source hands back the values of every chunk from `taken_chunks` on, and every
    /// value it never appended.
    Fenced {
        /// The current record.
        record: Record,
        /// Chunks of the caller's epoch taken by another member.
        taken_chunks: Option<u64>,
    },
    /// The step does not apply in the record's state (e.g. `seal` when not preparing).
    WrongState(Record),
    /// `claim`: nothing is offered, or the offer is meant for another member and its deadline
    /// has not passed.
    NotOffered(Record),
    /// `reclaim`: the holder's deadline has not passed.
    NotExpired(Record),
    /// `append`: chunks go in order; `expected` is the next index.
    OutOfOrder {
        /// The next index the offer accepts.
        expected: u64,
        /// The current record.
        record: Record,
    },
    /// `append`: a chunk with this index is in Redis with different bytes.
    ChunkConflict {
        /// The index.
        index: u64,
        /// The current record.
        record: Record,
    },
    /// `seal`: the chunk or entry count given is not what Redis holds.
    CountMismatch {
        /// Chunks in Redis.
        chunks_in_redis: u64,
        /// The current record.
        record: Record,
    },
    /// `fetch`: the claimed offer has no chunk with this index.
    MissingChunk {
        /// The index.
        index: u64,
        /// The current record.
        record: Record,
    },
    /// The record under this queue's key names another queue (its raw name is in the record).
    OtherQueue(Record),
    /// The token was last used by this member for another step (`step`): a token names one
    /// call, and its retries. Nothing was done.
    TokenReused {
        /// The step the token was used for.
        step: String,
        /// The current record.
        record: Record,
    },
}

/// An error of a protocol call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The script ran and refused the step; nothing changed. Boxed: a rejection carries the
    /// record, and errors travel by value.
    #[error("refused: {0:?}")]
    Rejected(Box<Rejection>),
    /// Redis could not be reached, or did not answer in time, or is loading its data. The step
    /// may or may not have run: retry it with the same token.
    #[error("redis unavailable at {url}: {message}")]
    Unavailable {
        /// The server URL, password redacted.
        url: String,
        /// What failed (password redacted).
        message: String,
    },
    /// Redis answered with an error that a retry will not fix (e.g. a denied command).
    #[error("redis error at {url}: {message}")]
    Redis {
        /// The server URL, password redacted.
        url: String,
        /// The error (password redacted).
        message: String,
    },
    /// A reply of a shape the scripts never send (a different script under the same keys?).
    #[error("unexpected reply: {0}")]
    UnexpectedReply(String),
    /// The server is not configured for the guarantee (see the crate docs) and
    /// [`Options::allow_unsafe_durability`](crate::Options::allow_unsafe_durability) is off.
    #[error("refusing unsafe redis at {url}: {problems}")]
    UnsafeServer {
        /// The server URL, password redacted.
        url: String,
        /// What is unsafe.
        problems: String,
    },
    /// The URL does not parse. It is shown as typed, its password redacted
    /// ([`redact_url`](crate::redact_url)).
    #[error("invalid redis URL {url}: {message}")]
    Url {
        /// The URL, password redacted.
        url: String,
        /// Why (password redacted).
        message: String,
    },
    /// `prepare` was given `Some("")` as its target: an offer is meant for a named member, or
    /// (`None`) for anyone; an empty name is neither.
    #[error("empty target member name: pass None to offer to any member")]
    EmptyTarget,
    /// The key prefix is invalid.
    #[error(transparent)]
    Prefix(#[from] crate::keys::PrefixError),
}

impl Error {
    /// Whether retrying the same call (same token) may succeed: only [`Error::Unavailable`].
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Unavailable { .. })
    }

    /// Whether the script refused because the caller's epoch is no longer the record's
    /// ([`Rejection::Fenced`]): another holder, with a newer epoch, exists.
    pub fn is_fenced(&self) -> bool {
        matches!(self.rejection(), Some(Rejection::Fenced { .. }))
    }

    /// The refusal, if the script refused.
    pub fn rejection(&self) -> Option<&Rejection> {
        match self {
            Error::Rejected(r) => Some(r.as_ref()),
            _ => None,
        }
    }
}
