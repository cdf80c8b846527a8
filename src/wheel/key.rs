//! Keys, expired timers and statistics: the small public types of the core wheel.

use std::fmt;

/// A handle to one timer in a [`Wheel`](crate::Wheel), returned by
/// [`Wheel::insert`](crate::Wheel::insert).
///
/// A key names one arena index *and* the generation that index had when the timer was
/// inserted. The generation changes every time a timer at that index ends (fires or is
/// cancelled), so a key outlives its timer harmlessly: once the timer has ended, every
/// operation through the key answers `None`/`false` and never touches the timer that reuses
/// the index afterwards. This is the difference from `tokio_util::time::DelayQueue`, whose
/// keys are bare slab indexes.
///
/// Generations are 32 bits; an index whose generation would wrap is retired instead of
/// reused, so no key ever aliases a later timer of its own wheel.
///
/// A key is 8 bytes, `Copy`, and only meaningful for the wheel that issued it. Its `Ord`
/// orders by (index, generation) so keys can sit in sorted maps; it says nothing about when
/// timers fire.
///
/// # Foreign keys
///
/// A key from another wheel is *foreign*. Keys carry no wheel id (that would make them 12 or
/// 16 bytes); instead each wheel starts the generations of every index at its own *offset*:
/// the number of wheels the process created before it, through murmur3's 32-bit finalizer,
/// a bijection that spreads consecutive numbers over the whole `u32` range. What holds:
///
/// - A foreign key names a timer here only if this wheel's timer at its index has exactly
///   the key's generation, that is, only if the two wheels' offsets differ by exactly the
///   difference between the numbers of timers each has ended at that index.
/// - So it **never** does between two of the first 2^32 wheels of a process when both have
///   ended the same number of timers at that index (two wheels driven alike, e.g. fresh
///   ones: without offsets, the first key of one named the first timer of the other), nor
///   between two wheels made one after the other among the first 4 096 while each index has
///   ended fewer than 65 536 timers (their offsets are further apart; tested).
/// - Otherwise it can, for wheels whose offsets happen to lie closer than those counts: for
///   offsets spread like random ones and indexes that ended fewer than `R` timers, a pair
///   of wheels has a chance of about `R / 2^31` to be one (2^-21 for `R = 1 024`).
///
/// Where the answer must be certain, keep keys with their wheel. The offset costs nothing
/// on the hot paths: a key is still checked with one comparison, and the offset is read only
/// when a timer ends (to see whether its index is exhausted) and at construction.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimerKey {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

impl TimerKey {
    /// Builds a key from its raw parts, for callers that store keys in their own packed form.
    ///
    /// A key built this way is checked like any other: if no pending timer has this index and
    /// generation, every operation through it answers `None`/`false`. The generation must be
    /// one the wheel handed out ([`TimerKey::generation`]): generations start at the
    /// wheel's own offset, not at 0 (see [Foreign keys](#foreign-keys)).
    pub const fn from_raw_parts(index: u32, generation: u32) -> Self {
        TimerKey { index, generation }
    }

    /// The arena index this key points at.
    pub const fn index(self) -> u32 {
        self.index
    }

    /// The generation the timer had when it was inserted: its wheel's offset plus the number
    /// of timers that ended at this index before it (wrapping).
    pub const fn generation(self) -> u32 {
        self.generation
    }

    /// The key packed into one `u64`: index in the high 32 bits, generation in the low 32.
    pub const fn to_u64(self) -> u64 {
        ((self.index as u64) << 32) | self.generation as u64
    }

    /// The inverse of [`TimerKey::to_u64`].
    pub const fn from_u64(raw: u64) -> Self {
        TimerKey {
            index: (raw >> 32) as u32,
            generation: raw as u32,
        }
    }
}

impl fmt::Debug for TimerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TimerKey({}v{})", self.index, self.generation)
    }
}

/// A timer that [`Wheel::poll`](crate::Wheel::poll) found due and took out of the wheel.
///
/// After it is returned the timer is no longer pending: its key is stale.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired<T> {
    /// The key the timer had; now stale.
    pub key: TimerKey,
    /// The deadline the timer had, in ticks: never later than `max(now, elapsed)` of the
    /// poll that returned it (see [`Wheel::poll`](crate::Wheel::poll)).
    pub deadline: u64,
    /// The value that was inserted with the timer.
    pub value: T,
}

/// A snapshot of a wheel's occupancy and memory, from [`Wheel::stats`](crate::Wheel::stats).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct WheelStats {
    /// Pending timers (the same as `len()`).
    pub live: usize,
    /// References in slots and in the due queue that no longer name a pending timer there.
    /// Cancels leave them, and so do resets that moved a timer earlier. Three bounds apply:
    /// - the levels are swept once their stale references outnumber their live timers by more
    ///   than 8 × 704;
    /// - the due queue is compacted once its stale references outnumber its timers by more
    ///   than 8;
    /// - its sorted run (a level-2 slot being drained) is compacted once they outnumber twice
    ///   its timers by more than 8.
    ///
    /// So this is at most `live + run + 8 × 706` (704 slots, the due queue and the run), below
    /// `2 × live + 8 × 706`; `run` ≤ `live` is the timers in the run. Stale references also go
    /// when their slot is processed or emptied, and all of them on
    /// [`shrink_to_fit`](crate::Wheel::shrink_to_fit).
    pub stale: usize,
    /// Entries the arena can hold without reallocating.
    pub capacity: usize,
    /// Heap bytes the wheel holds: arena, slot references and the due queue, by capacity.
    pub bytes_held: usize,
}
