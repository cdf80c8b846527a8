//! The `DelayQueue`'s public handle and result types: [`Key`] and [`Expired`].

use std::fmt;

use tokio::time::Instant;

use crate::TimerKey;

/// A handle to one entry of a [`DelayQueue`](super::DelayQueue), returned by
/// [`insert`](super::DelayQueue::insert) and [`insert_at`](super::DelayQueue::insert_at).
///
/// It has the shape of `tokio_util::time::delay_queue::Key`: `Copy`, `Eq`, `Hash`, `Debug`,
/// and no public constructor (tokio-util exposes none either, so there is no raw `usize` to
/// map). Unlike tokio-util's key, which is a bare slab index, it also carries a
/// *generation*: once its entry has expired, been removed or been cleared, the key is
/// **stale** and never names another entry, even one that reuses the same storage slot.
/// The `try_*` methods answer `None`/`false` for it; the panicking ones
/// ([`remove`](super::DelayQueue::remove), [`reset`](super::DelayQueue::reset),
/// [`deadline`](super::DelayQueue::deadline)) panic with a message that names it.
///
/// A key is only meaningful for the queue that issued it. A key from another queue is
/// *foreign*: each queue starts its generations at its own offset, so a foreign key is
/// answered like a stale one (the `try_*` methods: `None`/`false`; the others panic). It can
/// name an entry only if the other queue issued the same (slot, generation) pair, which never
/// happens between queues driven alike and otherwise about once in `2^31 / R` pairs of queues
/// whose slots were reused fewer than `R` times; [`TimerKey`] states
/// exactly what holds.
///
/// `Debug` prints `Key(slot v generation)`, e.g. `Key(3v2654435769)`: generations start at
/// the queue's offset, not at 0.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(pub(super) TimerKey);

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({}v{})", self.0.index(), self.0.generation())
    }
}

/// An entry that left the [`DelayQueue`](super::DelayQueue): yielded by
/// [`poll_expired`](super::DelayQueue::poll_expired) (and the `Stream`) once its deadline was
/// reached, or returned by [`remove`](super::DelayQueue::remove) /
/// [`try_remove`](super::DelayQueue::try_remove).
///
/// The same accessors as `tokio_util::time::delay_queue::Expired`. `Debug` and `==` see the
/// value, the [`deadline`](Expired::deadline) and the key, as the fields of tokio-util's.
#[derive(Clone)]
pub struct Expired<T> {
    pub(super) data: T,
    /// The queue's creation instant and the entry's deadline tick (ms after it): the
    /// deadline `Instant` is made only when asked for. An `Instant` addition is a call into
    /// std, and on every `remove` it slowed a loop of removals at 1 M entries threefold (the
    /// processor overlapped fewer of their cache misses).
    pub(super) origin: Instant,
    pub(super) tick: u64,
    pub(super) key: Key,
}

impl<T: fmt::Debug> fmt::Debug for Expired<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Expired")
            .field("data", &self.data)
            .field("deadline", &self.deadline())
            .field("key", &self.key)
            .finish()
    }
}

impl<T: PartialEq> PartialEq for Expired<T> {
    fn eq(&self, other: &Self) -> bool {
        self.data == other.data && self.key == other.key && self.deadline() == other.deadline()
    }
}

impl<T: Eq> Eq for Expired<T> {}

impl<T> Expired<T> {
    /// The value that was inserted.
    pub fn get_ref(&self) -> &T {
        &self.data
    }

    /// The value that was inserted, mutably.
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.data
    }

    /// Consumes the entry and returns the value that was inserted.
    pub fn into_inner(self) -> T {
        self.data
    }

    /// The deadline the entry had: the instant asked for, rounded up to the queue's 1 ms
    /// resolution. An instant before the queue was created reads as its creation instant.
    ///
    /// tokio-util can report a later one: it raises a deadline given to `insert_at` or
    /// `reset_at` to the point its internal wheel has been polled up to, when the deadline
    /// lies before that point. That point advances only when the queue is polled — to the
    /// deadline of the sleep it last woke from, not to the current time — so a past deadline
    /// that is still after it is kept, and one before it is moved up. This queue always keeps
    /// the deadline that was asked for.
    pub fn deadline(&self) -> Instant {
        super::ticks::saturating_instant(self.origin, self.tick)
    }

    /// The key the entry had. It is stale now: the entry has left the queue.
    pub fn key(&self) -> Key {
        self.key
    }
}
