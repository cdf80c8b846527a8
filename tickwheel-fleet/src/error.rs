//! Errors of the fleet layer.

/// Why a fleet operation failed. No variant's `Display` or `Debug` holds a credential: etcd
/// user names and passwords are never stored in an error, and Redis URLs are redacted by
/// `tickwheel-redis` before they reach one.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No etcd endpoint answered at join (connect or the first request failed). `endpoints`
    /// are the endpoints as given (they must not embed credentials: user and password go in
    /// [`FleetOptions::etcd_user`](crate::FleetOptions::etcd_user)).
    #[error("etcd unreachable at {endpoints:?}: {source}")]
    EtcdUnreachable {
        /// The endpoints tried.
        endpoints: Vec<String>,
        /// The client's error.
        #[source]
        source: etcd_client::Error,
    },
    /// Another live process is registered under this member name (its lease has not
    /// expired). A restarted member whose old process died must wait until that lease expires
    /// (at most the lease TTL after the crash).
    #[error(
        "member name {name:?} is taken by a live process (boot {holder_boot}); if that process \
         died, its lease expires within the lease TTL and the name becomes free"
    )]
    NameTaken {
        /// The name asked for.
        name: String,
        /// The boot id of the process that holds it.
        holder_boot: String,
    },
    /// A Redis step failed (see [`tickwheel_redis::Error`]).
    #[error("redis: {0}")]
    Redis(#[from] tickwheel_redis::Error),
    /// An etcd request failed after the member had joined.
    #[error("etcd: {0}")]
    Etcd(#[from] etcd_client::Error),
    /// An option is out of range (e.g. a zero lease TTL, or a margin not below the TTL).
    #[error("invalid fleet option: {0}")]
    Options(String),
    /// The recovery hook failed for a queue being adopted (the queue is released and tried
    /// again later).
    #[error("recovery hook failed: {0}")]
    Recovery(String),
    /// A handoff step failed (the values stay where the step left them: the scheduler, or
    /// Redis for the next claimer).
    #[error("handoff: {0}")]
    Handoff(String),
    /// A journal call failed (see `tickwheel_redis::journal::JournalError`; `Fenced`: another
    /// member holds the queue now, with a larger token).
    #[error("journal: {0}")]
    Journal(#[from] tickwheel_redis::journal::JournalError),
    /// [`FleetOptions::journal`](crate::FleetOptions::journal) is off: nothing to journal.
    #[error("the journal is off (FleetOptions::journal)")]
    JournalOff,
    /// This member does not own the queue now (never did, or it was handed away or lost).
    #[error("this member does not own the queue")]
    NotOwned,
    /// The member has left (or its background task ended); the call cannot proceed.
    #[error("the member has left the fleet")]
    Left,
    /// A record read from etcd could not be decoded (written by something else).
    #[error("malformed record under etcd key {key}: {reason}")]
    Malformed {
        /// The key, printable (non-UTF-8 bytes escaped).
        key: String,
        /// What was wrong.
        reason: String,
    },
}
