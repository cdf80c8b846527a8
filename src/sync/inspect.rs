//! The public types of looking without taking: what
//! [`Scheduler::lookup`](super::Scheduler::lookup),
//! [`queue_members`](super::Scheduler::queue_members) and
//! [`queue_counts`](super::Scheduler::queue_counts) answer.

use std::time::Instant;

/// The state of a timer the scheduler knows (see the states in the
/// [module documentation](super)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IdState {
    /// Waiting for its deadline, or due and not yet popped: `cancel`, `drain_queue` and
    /// `freeze_queue` take it, `pop_due` delivers it.
    Pending,
    /// Popped by `pop_due`, its `Due` not done: the dispatcher's. `cancel` answers
    /// `InFlight`, `drain_queue` lists it in `in_flight`.
    InFlight,
    /// Came back from the dispatcher while its queue is frozen: held, never due, until
    /// `take_forwarded` hands it over or `unfreeze_queue` makes it pending.
    Forwarded,
}

/// What [`Scheduler::lookup`](super::Scheduler::lookup) found for one id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdInfo<Q> {
    /// The queue the timer is in (a clone of the scheduler's copy of its name).
    pub queue: Q,
    /// Where the timer is.
    pub state: IdState,
    /// Its deadline exactly as given to `schedule`, `reschedule`, `import` or
    /// `Due::retry_at` (not rounded to a tick). For an in-flight timer, the deadline it
    /// was popped at.
    pub deadline: Instant,
}

/// One member of a queue, as listed by
/// [`Scheduler::queue_members`](super::Scheduler::queue_members).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member<K> {
    /// The timer's id (a clone of the scheduler's copy).
    pub id: K,
    /// Where the timer is.
    pub state: IdState,
    /// Its deadline, as in [`IdInfo::deadline`].
    pub deadline: Instant,
}

/// How many members a queue has in each state, as counted by
/// [`Scheduler::queue_counts`](super::Scheduler::queue_counts). All zero for a queue with no
/// member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct QueueCounts {
    /// Pending members (due ones included), forwarded ones included: "pending" as
    /// [`Scheduler::len`](super::Scheduler::len) and
    /// [`SchedulerStats::pending`](super::SchedulerStats::pending) count it (in the
    /// scheduler's custody, not in flight). It is
    /// [`Scheduler::queue_len`](super::Scheduler::queue_len).
    pub pending: usize,
    /// Members in flight (popped, their `Due` not done).
    pub in_flight: usize,
    /// Of the `pending` members, those forwarded (the queue is frozen; see
    /// [`IdState::Forwarded`]), as
    /// [`SchedulerStats::forwarded`](super::SchedulerStats::forwarded) counts them.
    pub forwarded: usize,
}

impl QueueCounts {
    /// Every member: `pending + in_flight` (`forwarded` is part of `pending`).
    ///
    /// ```
    /// use tickwheel::sync::QueueCounts;
    /// let mut counts = QueueCounts::default();
    /// (counts.pending, counts.in_flight, counts.forwarded) = (3, 1, 2);
    /// assert_eq!(counts.total(), 4);
    /// ```
    pub fn total(&self) -> usize {
        self.pending + self.in_flight
    }
}
