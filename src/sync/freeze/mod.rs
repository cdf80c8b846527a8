//! The public types of freezing a queue and handing it over: what
//! [`Scheduler::freeze_queue`](super::Scheduler::freeze_queue) takes out, what
//! [`Scheduler::import`](super::Scheduler::import) accepts and hands back, and what
//! [`Due::retry_at`](super::Due::retry_at) did.

mod scheduler;

use std::fmt;
use std::time::Instant;

/// One timer taken out of a scheduler (by a freeze or
/// [`take_forwarded`](super::Scheduler::take_forwarded)) or to be put into one
/// ([`import`](super::Scheduler::import)): its id, its deadline exactly as it was given
/// (not rounded to a tick), and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrozenEntry<K, T> {
    /// The timer's id.
    pub id: K,
    /// Its deadline, on this host's monotonic clock.
    pub at: Instant,
    /// Its value.
    pub value: T,
}

/// What [`Scheduler::freeze_queue`](super::Scheduler::freeze_queue) took out of the queue
/// and what it had to leave to the dispatcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frozen<K, T> {
    /// Every member that was pending, in delivery order (deadline tick, then schedule
    /// order): out of the scheduler, now the caller's.
    pub pending: Vec<FrozenEntry<K, T>>,
    /// Members in flight (popped, their `Due` not done), in delivery order. Each one either
    /// ends as delivered, or comes back through `Due::retry_at` or a dropped `DueBatch` and
    /// is then forwarded (see [`take_forwarded`](super::Scheduler::take_forwarded)).
    pub in_flight: Vec<K>,
}

/// What [`Scheduler::import`](super::Scheduler::import) did with its entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported<K, T> {
    /// How many entries were scheduled.
    pub imported: usize,
    /// Entries whose id already has a timer in the scheduler (pending, forwarded or in
    /// flight), handed back untouched, in input order: the id is not doubled.
    pub present: Vec<FrozenEntry<K, T>>,
    /// Entries refused because the queue is frozen (or, never in practice, because the id's
    /// shard holds `u32::MAX - 1` timers), handed back in input order.
    pub refused: Vec<FrozenEntry<K, T>>,
}

/// Where [`Due::retry_at`](super::Due::retry_at) put the timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retried {
    /// Pending again in its queue, with the new deadline.
    Pending,
    /// Its queue is frozen: the timer waits, with the new deadline, for
    /// [`Scheduler::take_forwarded`](super::Scheduler::take_forwarded) (or for
    /// [`unfreeze_queue`](super::Scheduler::unfreeze_queue), which makes it pending).
    Forwarded,
}

/// Why [`Due::retry_at`](super::Due::retry_at) could not put the timer back. Gives the
/// value back; the timer has then ended (as delivered).
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetryError<T> {
    /// The scheduler is gone: every `Scheduler` handle and `DueBatch` of it was dropped.
    Closed(T),
}

impl<T> RetryError<T> {
    /// The value that was not put back.
    ///
    /// ```
    /// use tickwheel::sync::RetryError;
    /// assert_eq!(RetryError::Closed(3).into_value(), 3);
    /// ```
    pub fn into_value(self) -> T {
        match self {
            RetryError::Closed(value) => value,
        }
    }
}

impl<T> fmt::Debug for RetryError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RetryError::Closed(_) => f.write_str("RetryError::Closed(..)"),
        }
    }
}

impl<T> fmt::Display for RetryError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RetryError::Closed(_) => f.write_str("cannot retry: the scheduler is gone"),
        }
    }
}

impl<T> std::error::Error for RetryError<T> {}

/// A queue name as [`Scheduler::import`](super::Scheduler::import) takes it: the name itself
/// (`Q`), as [`schedule`](super::Scheduler::schedule) takes it — `"q"` when `Q` is
/// `&'static str` — or a reference that clones into one: `&Q`, `&str` for a `String` name,
/// `&[T]` for a `Vec<T>` one.
pub trait IntoQueue<Q> {
    /// The owned name.
    fn into_queue(self) -> Q;
}

impl<Q> IntoQueue<Q> for Q {
    fn into_queue(self) -> Q {
        self
    }
}

impl<Q: Clone> IntoQueue<Q> for &Q {
    fn into_queue(self) -> Q {
        self.clone()
    }
}

impl IntoQueue<String> for &str {
    fn into_queue(self) -> String {
        self.to_owned()
    }
}

impl<T: Clone> IntoQueue<Vec<T>> for &[T] {
    fn into_queue(self) -> Vec<T> {
        self.to_vec()
    }
}
