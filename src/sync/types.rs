//! The scheduler's small public types: outcomes, errors and statistics.

use std::fmt;
use std::time::Duration;

use crate::wheel::WheelStats;

/// The most shards a scheduler may have.
pub const MAX_SHARDS: usize = 1024;

/// What [`Scheduler::cancel`](super::Scheduler::cancel) found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cancel<T> {
    /// The timer was pending; it is gone, and its value is returned. It will not fire.
    Cancelled(T),
    /// The dispatcher has popped the timer and not finished with it yet: it stays the
    /// dispatcher's and will be (or is being) delivered. Nothing changed.
    InFlight,
    /// No timer with this id is pending or in flight.
    NotFound,
}

impl<T> Cancel<T> {
    /// The value, if the timer was cancelled.
    ///
    /// ```
    /// use tickwheel::sync::Cancel;
    /// assert_eq!(Cancel::Cancelled(5).into_cancelled(), Some(5));
    /// assert_eq!(Cancel::<u8>::InFlight.into_cancelled(), None);
    /// ```
    pub fn into_cancelled(self) -> Option<T> {
        match self {
            Cancel::Cancelled(value) => Some(value),
            Cancel::InFlight | Cancel::NotFound => None,
        }
    }
}

/// What [`Scheduler::drain_queue`](super::Scheduler::drain_queue) took out of a queue, and
/// what it had to leave to the dispatcher.
///
/// Both lists are in the order the dispatcher delivers: deadline tick, then schedule order
/// (a reschedule counts as scheduling anew). They never depend on hashing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drained<K, T> {
    /// Every member that was pending: cancelled, with its value. Each id is free at once.
    pub cancelled: Vec<(K, T)>,
    /// Members the dispatcher had popped and not finished: they stay the dispatcher's.
    pub in_flight: Vec<K>,
}

impl<K, T> Default for Drained<K, T> {
    fn default() -> Self {
        Drained {
            cancelled: Vec::new(),
            in_flight: Vec::new(),
        }
    }
}

/// Why [`Scheduler::schedule`](super::Scheduler::schedule) refused a timer. Every variant
/// gives the value back.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScheduleError<T> {
    /// The id already has a pending timer. Use `reschedule` to move it, or `cancel` first.
    Pending(T),
    /// The id's previous timer has been popped and its `Due` is not done yet; scheduling it
    /// again now would deliver the id twice at once. Retry once the `Due` is dropped.
    InFlight(T),
    /// The id's shard already holds `u32::MAX - 1` pending timers.
    Full(T),
    /// The queue is frozen ([`Scheduler::freeze_queue`](super::Scheduler::freeze_queue)):
    /// it accepts no timer until [`unfreeze_queue`](super::Scheduler::unfreeze_queue).
    Frozen(T),
}

impl<T> ScheduleError<T> {
    /// The value that was not scheduled.
    ///
    /// ```
    /// use tickwheel::sync::ScheduleError;
    /// assert_eq!(ScheduleError::Pending("v").into_value(), "v");
    /// ```
    pub fn into_value(self) -> T {
        match self {
            ScheduleError::Pending(value)
            | ScheduleError::InFlight(value)
            | ScheduleError::Full(value)
            | ScheduleError::Frozen(value) => value,
        }
    }
}

impl<T> fmt::Debug for ScheduleError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            ScheduleError::Pending(_) => "Pending",
            ScheduleError::InFlight(_) => "InFlight",
            ScheduleError::Full(_) => "Full",
            ScheduleError::Frozen(_) => "Frozen",
        };
        write!(f, "ScheduleError::{name}(..)")
    }
}

impl<T> fmt::Display for ScheduleError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ScheduleError::Pending(_) => "cannot schedule: this id already has a pending timer",
            ScheduleError::InFlight(_) => {
                "cannot schedule: this id's previous timer is in flight (popped by the dispatcher, its Due not yet done)"
            }
            ScheduleError::Full(_) => "cannot schedule: the id's shard holds the maximum number of pending timers",
            ScheduleError::Frozen(_) => "cannot schedule: the queue is frozen",
        })
    }
}

impl<T> std::error::Error for ScheduleError<T> {}

/// Why [`Scheduler::reschedule`](super::Scheduler::reschedule) changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RescheduleError {
    /// The id's timer is in flight: the dispatcher has it, it can no longer be moved.
    InFlight,
    /// The id has no pending timer.
    NotFound,
    /// The id's timer was forwarded out of its frozen queue (see
    /// [`Scheduler::take_forwarded`](super::Scheduler::take_forwarded)): it can no longer
    /// be moved here.
    Frozen,
}

impl fmt::Display for RescheduleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RescheduleError::InFlight => {
                "cannot reschedule: the timer is in flight (already popped by the dispatcher)"
            }
            RescheduleError::NotFound => "cannot reschedule: no pending timer has this id",
            RescheduleError::Frozen => {
                "cannot reschedule: the timer is forwarded out of its frozen queue"
            }
        })
    }
}

impl std::error::Error for RescheduleError {}

/// Why [`SchedulerBuilder::try_build`](super::SchedulerBuilder::try_build) refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildError {
    /// `shards(n)` was 0 or more than [`MAX_SHARDS`]; holds `n`.
    Shards(usize),
    /// `resolution(d)` was zero, or so long that one tick after the origin is not a
    /// representable `Instant` (no timer could ever fire); holds `d`.
    Resolution(Duration),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::Shards(n) => {
                write!(
                    f,
                    "invalid shard count {n}: must be between 1 and {}",
                    MAX_SHARDS
                )
            }
            BuildError::Resolution(d) => {
                write!(
                    f,
                    "invalid resolution {d:?}: must be longer than zero and short enough \
                     that origin + resolution is a representable Instant"
                )
            }
        }
    }
}

impl std::error::Error for BuildError {}

/// A snapshot of a scheduler, from [`Scheduler::stats`](super::Scheduler::stats). Shards are
/// read one after another, so under concurrent use the numbers need not add up exactly.
///
/// Statistics describe how the timers are stored, and that depends on the sharding:
/// `stats()` is exempt from the promise that the same calls give the same results whatever
/// the shard count. `shards`, [`due_waiting`](Self::due_waiting), the `wheel` fields and
/// [`bytes_held`](Self::bytes_held) differ between shard counts; `pending`, `in_flight`
/// and `queues` do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct SchedulerStats {
    /// Number of shards.
    pub shards: usize,
    /// Pending timers (the same as `len()`), including `due_waiting` and `forwarded`.
    pub pending: usize,
    /// Timers of frozen queues that came back from the dispatcher and wait for
    /// [`Scheduler::take_forwarded`](super::Scheduler::take_forwarded) (counted in
    /// `pending` too: they are in the scheduler's custody).
    pub forwarded: usize,
    /// Pending timers held outside the wheels, in the shards' staged sets, where the next
    /// `pop_due` reads them first: put back by a dropped `DueBatch`, or polled out of a
    /// shard's wheel by a `pop_due` that did not take them — because it stopped at its
    /// `limit` (it looks at the next due timer of every shard to merge them, so it leaves up
    /// to one such timer per shard), or because an earlier `pop_due` with a later `now` had
    /// already advanced that wheel past the timer's deadline; and forwarded timers made
    /// pending again by [`Scheduler::unfreeze_queue`](super::Scheduler::unfreeze_queue),
    /// whatever their deadline.
    ///
    /// **Depends on the shard count** (and on the history of `pop_due` calls), not only on
    /// which timers are pending: the same calls on 1 and on 8 shards can give different
    /// values. It is a storage statistic, exempt from the determinism promise; what the
    /// scheduler *delivers* does not depend on it.
    pub due_waiting: usize,
    /// Pending timers parked: due while their queue is held
    /// ([`Scheduler::hold_queue`](super::Scheduler::hold_queue)), waiting for its release
    /// (counted in `pending` too). Not in `due_waiting`.
    pub parked: usize,
    /// Timers popped whose `Due` is not done yet (the same as `in_flight_len()`).
    pub in_flight: usize,
    /// Distinct queues with at least one pending or in-flight timer.
    pub queues: usize,
    /// The shards' wheels, summed field by field. Part of
    /// [`bytes_held`](Self::bytes_held) only: the shards hold more than their wheels.
    pub wheel: WheelStats,
    /// Bytes the whole scheduler holds, by **capacity**, not length: what stays allocated
    /// after timers leave, until [`Scheduler::shrink_to_fit`](super::Scheduler::shrink_to_fit)
    /// gives it back. It counts the scheduler's shared state and shards, and in each shard
    /// the entry slab (every entry holds an id, a queue name and a value inline), its free
    /// list, the wheel (the sum is `wheel.bytes_held` without the wheels' inline size,
    /// counted with the shards), the id and queue maps, the frozen and hold marks, the
    /// queue records, the done list and its buffer; the staged set is estimated from its
    /// length; and the flow records of queues that ever had a concurrency or rate limit
    /// (kept until the scheduler is dropped) with their maps and lists. Not counted: memory
    /// `K`, `Q` and `T` own themselves (a `String`'s bytes), the wake-up signal's wakers, and
    /// the allocator's own overhead. Depends on the shard count and on history.
    pub bytes_held: usize,
}
