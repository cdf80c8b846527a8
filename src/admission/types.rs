//! The small public types of the wait queue: tickets, outcomes, options and errors.

use std::fmt;

/// A handle to one request registered in a [`WaitQueue`](super::WaitQueue): which queue,
/// which slot, and the generation that slot had when the ticket was handed out.
///
/// A ticket is 16 bytes and `Copy`. Once its request has ended (cancelled, expired, or
/// granted and then cancelled or detached) the slot's generation moves on, so the ticket is
/// *stale*: every operation through it answers `None` / [`Cancel::NotFound`] and never
/// touches the request that reuses the slot. A ticket from another queue is *foreign*: the
/// queue id differs, and it is answered the same way.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ticket {
    pub(crate) queue: u64,
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

impl Ticket {
    /// The id of the queue that handed the ticket out (unique in the process).
    pub const fn queue_id(self) -> u64 {
        self.queue
    }
}

impl fmt::Debug for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Ticket(q{}:{}v{})",
            self.queue, self.index, self.generation
        )
    }
}

/// Whether a request that fits may pass a waiting one that does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// The default: grants go strictly in registration order. A head that does not fit
    /// blocks every ticket behind it, however small, until enough capacity comes back, so a
    /// large request is never starved by a stream of small ones (Cassandra's rule).
    #[default]
    Strict,
    /// A waiting ticket that fits is granted even if an earlier one does not (still in
    /// registration order among those that fit). Better use of capacity; a large request
    /// may wait until its deadline while smaller ones keep passing it. A grant pass may
    /// visit every waiting ticket: O(waiting) instead of O(granted + 1).
    Passing,
}

/// How a ticket ended, as reported in a [`Resolved`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The ticket holds its amount of capacity (of the local and, if any, the global
    /// limit). It must be given back ([`WaitQueue::cancel`](super::WaitQueue::cancel)) or
    /// handed over ([`WaitQueue::detach`](super::WaitQueue::detach)).
    Granted,
    /// Its deadline passed while it waited. `at` is the tick of the `advance` that found it:
    /// `at - deadline` is how late (0 if time is advanced every tick).
    Expired {
        /// The ticket's deadline tick.
        deadline: u64,
        /// The tick at which it was found expired.
        at: u64,
    },
}

/// One resolution of a waiting ticket, pushed to the caller's `out` vector by the
/// operations that resolve tickets, in the order they happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved<W> {
    /// The ticket. After `Granted` it still names the grant; after `Expired` it is stale.
    pub ticket: Ticket,
    /// The amount it asked for.
    pub amount: u64,
    /// Granted or expired (cancellations are the answer of `cancel` itself).
    pub outcome: Outcome,
    /// The waiter value given at registration, handed back.
    pub waiter: W,
}

/// The answer of [`WaitQueue::cancel`](super::WaitQueue::cancel).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cancel<W> {
    /// The ticket was waiting: it is cancelled, and its waiter value is handed back.
    Cancelled(W),
    /// The ticket had been granted: its amount went back to the limits (and may have been
    /// granted to tickets behind, reported in `out`).
    Released(u64),
    /// Stale (already expired, cancelled or detached) or foreign: nothing changed.
    NotFound,
}

/// Why [`WaitQueue::register`](super::WaitQueue::register) refused a request. Nothing
/// changed in the queue or the limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegisterError {
    /// An amount of zero: there is nothing to wait for.
    ZeroAmount,
    /// More than a limit's whole capacity: it could never be granted (and, in strict
    /// order, would block the queue forever).
    TooLarge {
        /// The amount asked for.
        amount: u64,
        /// The smallest capacity of the limits it needs.
        limit: u64,
    },
    /// The deadline tick is not after the queue's current tick, and the request could not
    /// be granted at once (a past deadline still gets an immediate grant when one is
    /// possible, as a try-acquire).
    DeadlinePassed {
        /// The deadline tick given.
        deadline: u64,
        /// The queue's current tick.
        now: u64,
    },
    /// [`DeadlinePassed`](RegisterError::DeadlinePassed) as
    /// [`AdmissionQueue`](super::AdmissionQueue) reports it: in the `Instant`s its caller
    /// gives, not in ticks. The deadline's tick (rounded up) had begun at `now`, so
    /// `deadline <= now`; the message says how long ago it passed.
    DeadlinePassedAt {
        /// The deadline given.
        deadline: std::time::Instant,
        /// When the queue found it passed.
        now: std::time::Instant,
    },
    /// The queue holds `u32::MAX - 1` tickets already.
    Full,
}

impl fmt::Display for RegisterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegisterError::ZeroAmount => write!(f, "an amount of zero was requested"),
            RegisterError::TooLarge { amount, limit } => {
                write!(
                    f,
                    "{amount} requested, more than the limit's capacity {limit}"
                )
            }
            RegisterError::DeadlinePassed { deadline, now } => {
                write!(
                    f,
                    "deadline tick {deadline} is not after the current tick {now}"
                )
            }
            RegisterError::DeadlinePassedAt { deadline, now } => {
                let ago = now.saturating_duration_since(*deadline);
                write!(f, "the deadline passed {ago:?} ago")
            }
            RegisterError::Full => write!(f, "the wait queue is full"),
        }
    }
}

impl std::error::Error for RegisterError {}

/// Why [`WaitQueue::release`](super::WaitQueue::release) refused to take capacity back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReleaseError {
    /// The amount offered.
    pub amount: u64,
    /// The amount handed over by `detach` and not yet given back.
    pub detached: u64,
}

impl fmt::Display for ReleaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "release of {} refused: only {} is detached and outstanding",
            self.amount, self.detached
        )
    }
}

impl std::error::Error for ReleaseError {}

/// Where a live ticket stands, from [`WaitQueue::state`](super::WaitQueue::state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TicketState {
    /// Waiting in the queue for `amount`, until tick `deadline`.
    Waiting {
        /// The amount asked for.
        amount: u64,
        /// The deadline tick.
        deadline: u64,
    },
    /// Granted and holding `amount`.
    Granted {
        /// The amount held.
        amount: u64,
    },
}
