//! Layer 1, the core: a hierarchical timer wheel over `u64` ticks.
//!
//! A hierarchical wheel (Varghese & Lauck, "Hashed and Hierarchical Timing Wheels", SOSP 1987)
//! keeps timers in buckets by how far away they are. Level 0 has one slot per tick for the next
//! 64 ticks, level 1 one slot per 64 ticks for the next 4 096, and so on. Insert and cancel are
//! O(1). A timer is touched once per level it *cascades* through on its way down: at most 11
//! times, usually once or twice. The wheel trades away two things: order *inside* a
//! higher-level slot, found only when the slot cascades, and an exact `next_expiration` above
//! level 0.
//!
//! | level | slot width (1 ms ticks) | range |
//! |------:|------------------------:|------:|
//! | 0 | 1 ms | 64 ms |
//! | 1 | 64 ms | 4.1 s |
//! | 2 | 4.1 s | 4.5 min |
//! | 3 | 4.5 min | 4.8 h |
//! | 4 | 4.8 h | 12.7 days |
//! | 5 | 12.7 days | 2.2 years |
//! | 6–10 | … | the rest of `u64`: 585 million years |
//!
//! tokio's wheel stops at level 5 and clamps later deadlines. Here eleven levels of 64 slots
//! cover every `u64` exactly (the top level uses 16 slots). No deadline is clamped and no level
//! wraps around.
//!
//! What differs from tokio's wheel, and why:
//! - **Entries live in a generation-stamped arena; slots hold references, not links.** A key
//!   names (index, generation), so a stale key is rejected instead of aliasing the next timer
//!   at its index (the `DelayQueue` bug class). A timer can never be "already linked" twice
//!   (the MTA drain bug). Cancel leaves the slot's reference behind and decrements the slot's
//!   live count. Stale references stay bounded ([`Wheel::stats`]).
//! - **Moving a deadline later is free.** The timer stays in its slot with the new deadline.
//!   When the slot is processed, the timer is filed again by its real deadline (as Ratas does
//!   for cheap reschedules). Only a reset to an *earlier* slot moves it.
//! - **A due queue** holds due timers between polls. So `poll` returns one at a time, and
//!   `poll_into` can stop at `limit` and resume without losing order.
//! - **A level-2 slot is sorted, not cascaded.** When such a slot is processed and no sorted
//!   run is pending, the slot becomes the due queue's *run*. A stable counting sort over its
//!   4 096 ticks makes it, or a radix sort when it holds few references; both read the deadline
//!   digits each reference carries. The run hands its timers out deadline by deadline as
//!   `elapsed` reaches them. Making the run loads no entry: a timer is next visited when it
//!   fires, not once per level it would cascade through. Those visits are what a poll costs. At
//!   1 M timers over a minute most sit in level 2, so three visits to a random 24-byte arena
//!   entry become one. Timers inserted later go to the levels as usual. The wheel advances
//!   `elapsed` to the earlier of the run's head and the first occupied slot. A timer in the run
//!   is cancelled and reset in O(1) like any other; its entry's stamp says it is in the run.
//!
//! Ordering contract: timers come out in deadline order. Timers with equal deadlines come out
//! in insertion order if they were never reset. Nothing depends on hashing.

mod arena;
mod due;
mod filing;
mod key;
pub(crate) mod level;
mod peek;
mod poll;
mod slots;

pub use key::{Expired, TimerKey, WheelStats};

use arena::{Arena, position_slot, slot_position};
use due::DueQueue;
use level::{level_for, slot_for, slot_start};
use slots::Levels;

/// Position codes of the level slots are `1..=LEVEL_POSITIONS` (see `arena.rs`).
const LEVEL_POSITIONS: u32 = (level::LEVELS * level::SLOTS) as u32;

/// The error of [`Wheel::try_insert`]: the wheel holds `u32::MAX - 1` timers already.
/// Carries the value back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapacityError<T>(pub T);

impl<T> std::fmt::Display for CapacityError<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "timer wheel is full: {} timers are pending",
            u32::MAX - 1
        )
    }
}

impl<T: std::fmt::Debug> std::error::Error for CapacityError<T> {}

/// A hierarchical timer wheel over `u64` ticks: O(1) insert, cancel and reset, generation-
/// checked keys, and a poll that costs what it returns plus what it cascades.
///
/// The wheel has no clock: time is whatever the caller passes to [`poll`](Wheel::poll) as
/// `now`. [`TimerWheel`](crate::TimerWheel) puts an `Instant` clock on top.
///
/// Ticks are taken as given: every `u64` deadline is accepted, nothing saturates, and a
/// [`poll`](Wheel::poll) at `u64::MAX` fires a timer at `u64::MAX`. The layers with a clock
/// use that tick for *never due* and never poll it (see [`crate::clock`]).
///
/// Keys are checked by generation: a stale key answers `None`/`false` and touches nothing.
/// A key of another wheel (*foreign*) almost always does too; [`TimerKey`] says exactly when
/// it may not.
///
/// # Example
///
/// ```
/// use tickwheel::Wheel;
///
/// let mut wheel = Wheel::new();
/// let retry = wheel.insert(100, "retry example.com");
/// let idle = wheel.insert(30, "idle timeout");
/// wheel.cancel(idle);
/// assert!(wheel.poll(99).is_none(), "never early");
/// let fired = wheel.poll(150).unwrap();
/// assert_eq!((fired.key, fired.deadline, fired.value), (retry, 100, "retry example.com"));
/// assert_eq!(wheel.cancel(retry), None, "a fired key is stale");
/// ```
pub struct Wheel<T> {
    arena: Arena<T>,
    levels: Levels,
    due: DueQueue,
    /// The tick the wheel has advanced to: every slot due at or before it has been
    /// processed. Only [`Wheel::poll`] and [`Wheel::poll_into`] move it, never backwards.
    elapsed: u64,
    /// A poll at a tick below this finds nothing to do: no due timer waits, and it is no
    /// later than the start of every occupied slot. Inserts and moves lower it, a poll that
    /// comes up empty or takes out the last timer due by its `now` sets it exactly, cancels
    /// leave it (a lower bound stays a lower bound).
    /// It makes an idle poll one comparison. The start of an occupied slot does not move
    /// while `elapsed` advances towards it (they share every digit above the slot's level).
    quiet_until: u64,
}

impl<T> Default for Wheel<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Wheel<T> {
    /// An empty wheel at `elapsed() == 0`. Allocates nothing: the level table grows by a
    /// level (64 slots × 32 bytes, 2 KiB) the first time a timer files into it, up to 11
    /// levels (22 KiB) — two levels for deadlines within 4 096 ticks of `elapsed`.
    pub fn new() -> Self {
        Self::with_capacity(0)
    }

    /// An empty wheel with room for `n` timers before its arena reallocates. Allocates `n`
    /// arena entries (24 bytes each for `T = u64`) up front, untouched, and empty slot
    /// vectors, which slots take as they fill and grow: one of 4 references (32 bytes) per
    /// 24 timers of `n`, one of 16 and one of 64 references (128 and 512 bytes) per 64
    /// timers, at most 64 of each size (42 KiB), so the first `n` inserts allocate less.
    /// O(min(n / 24, 64)) allocations.
    ///
    /// # Panics
    ///
    /// If `n` entries exceed `isize::MAX` bytes (as [`Vec::with_capacity`]). More than
    /// `u32::MAX - 1` timers never fit in a wheel (see [`try_insert`](Wheel::try_insert)),
    /// so an `n` beyond that only reserves memory that cannot be used.
    pub fn with_capacity(n: usize) -> Self {
        Wheel {
            arena: Arena::with_capacity(n),
            levels: Levels::with_capacity(n),
            due: DueQueue::default(),
            elapsed: 0,
            quiet_until: u64::MAX,
        }
    }

    /// An empty wheel whose `elapsed()` starts at `tick`, as if it had already run that long.
    /// A wheel started at any tick, 2^63 included, behaves like one started at 0.
    pub fn starting_at(tick: u64) -> Self {
        let mut wheel = Self::new();
        wheel.elapsed = tick;
        wheel
    }

    /// The tick the wheel has advanced to, in ticks.
    ///
    /// After a [`poll`](Wheel::poll) or [`poll_into`](Wheel::poll_into) that returned
    /// everything due, it equals the largest `now` passed so far. After a `poll` that returned
    /// a timer, or a `poll_into` stopped by its `limit`, it is the deadline of the last timer
    /// returned: the tick the wheel had to reach to find it. Timers due then and not yet
    /// returned wait in the due queue, and come out first on the next poll.
    pub fn elapsed(&self) -> u64 {
        self.elapsed
    }

    /// Pending timers. O(1).
    pub fn len(&self) -> usize {
        self.arena.len()
    }

    /// Whether no timer is pending. O(1).
    pub fn is_empty(&self) -> bool {
        self.arena.len() == 0
    }

    /// Timers the arena holds without reallocating.
    pub fn capacity(&self) -> usize {
        self.arena.capacity()
    }

    /// Makes room for `additional` more timers in the arena (counting its vacant entries).
    ///
    /// # Panics
    ///
    /// If the new capacity exceeds `isize::MAX` bytes (as [`Vec::reserve`]).
    pub fn reserve(&mut self, additional: usize) {
        self.arena.reserve(additional);
    }

    /// Adds a timer due at tick `deadline`, and returns its key. O(1) amortised.
    ///
    /// Any `u64` is a valid deadline. A deadline at or before [`elapsed`](Wheel::elapsed) is
    /// already due: it comes out on the next poll, in deadline order with other due timers.
    ///
    /// # Panics
    ///
    /// If `u32::MAX - 1` timers are pending already; [`try_insert`](Wheel::try_insert)
    /// returns an error instead.
    #[track_caller]
    #[inline(always)]
    pub fn insert(&mut self, deadline: u64, value: T) -> TimerKey {
        match self.try_insert(deadline, value) {
            Ok(key) => key,
            Err(_) => panic!("tickwheel: wheel is full ({} timers pending)", u32::MAX - 1),
        }
    }

    /// [`insert`](Wheel::insert) that gives the value back in [`CapacityError`] when the
    /// wheel already holds `u32::MAX - 1` timers.
    #[inline(always)]
    pub fn try_insert(&mut self, deadline: u64, value: T) -> Result<TimerKey, CapacityError<T>> {
        if deadline <= self.elapsed {
            let key = self.arena.insert(deadline, value).map_err(CapacityError)?;
            self.file_due(key.index, deadline);
            self.sweep_if_due();
            return Ok(key);
        }
        // The entry is written once, already stamped with its slot.
        let level = level_for(self.elapsed, deadline);
        let slot = slot_for(deadline, level);
        let (key, r, sweep) = self
            .arena
            .insert_at(deadline, value, slot_position(level, slot))
            .map_err(CapacityError)?;
        // What `sweep_if_due` would see: no other step of this insert raises the flag. Before
        // the push (the new reference is current, so the sweep would keep it anyway): the
        // flag then dies here instead of staying in a register through the push, which
        // spilled the level and shift to the stack (4–5 instructions an insert, callgrind).
        if sweep {
            self.sweep_stale();
        }
        self.push_filed(level, slot, r, deadline);
        Ok(key)
    }

    /// Cancels a pending timer and returns its value. O(1) amortised.
    ///
    /// `None` when the key's timer already fired or was cancelled, and for a stale key whose
    /// index now holds another timer: that timer is left alone (the generation differs).
    #[inline]
    pub fn cancel(&mut self, key: TimerKey) -> Option<T> {
        let (pos, live) = self.arena.take(key)?;
        self.unlink(key.index, pos);
        Some(live.value)
    }

    /// Moves a pending timer to a new deadline, in ticks. O(1) amortised.
    ///
    /// Returns `false` (and changes nothing) for a stale key or (but for the chance
    /// [`TimerKey`] states) a foreign one. Afterwards the timer fires as if freshly inserted
    /// at `deadline`: a past deadline makes it due on the next poll; a due, not yet polled timer moved to the future waits again. Among timers with
    /// the same deadline a reset timer's place is unspecified (insertion order is promised
    /// only for timers never reset): it is filed by where its slot's processing puts it, not
    /// by the moment of the reset. Moving a deadline
    /// later allocates nothing and leaves no stale reference: the timer stays in its slot (or
    /// in the due queue's sorted run) and is filed again when that slot (or that place in the
    /// run) comes round. Moving it to an earlier slot leaves one stale reference behind.
    pub fn reset(&mut self, key: TimerKey, deadline: u64) -> bool {
        let Some(live) = self.arena.get_mut(key) else {
            return false;
        };
        let pos = live.position();
        if deadline > self.elapsed {
            let in_run = pos == self.due.run_pos();
            if in_run && deadline >= live.deadline && live.deadline > self.elapsed {
                // It waits in the run, not due yet: it stays there and is filed again by
                // its new deadline when the run reaches it (see `Wheel::pop_due`).
                live.deadline = deadline;
                return true;
            }
            if let Some((level, slot)) = position_slot(pos).filter(|_| !in_run) {
                // A slot that may become the sorted run is sorted by the deadline its
                // references carry, which must not be later than the timer's: there, only a
                // later deadline stays.
                let sorted = poll::RUN_LEVELS.contains(&level) && deadline < live.deadline;
                if slot_start(self.elapsed, level, slot) <= deadline && !sorted {
                    // Its slot comes round no later than the new deadline: keep it there.
                    live.deadline = deadline;
                    return true;
                }
            }
        }
        live.deadline = deadline;
        if pos == self.due.run_pos() {
            // Filed first, so that its run reference is stale when the run's head is settled.
            self.file(key.index, deadline);
            self.unlink_moved(key.index, pos);
        } else {
            self.unlink_moved(key.index, pos);
            self.file(key.index, deadline);
        }
        self.sweep_if_due();
        true
    }

    /// The deadline of a pending timer, in ticks; `None` for a stale key or (but for the chance
    /// [`TimerKey`] states) a foreign one. O(1).
    pub fn deadline(&self, key: TimerKey) -> Option<u64> {
        self.arena.get(key).map(|live| live.deadline)
    }

    /// The value of a pending timer; `None` for a stale key or (but for the chance [`TimerKey`]
    /// states) a foreign one. O(1).
    pub fn get(&self, key: TimerKey) -> Option<&T> {
        self.arena.get(key).map(|live| &live.value)
    }

    /// The value of a pending timer, mutably; `None` for a stale key or (but for the chance
    /// [`TimerKey`] states) a foreign one. O(1).
    pub fn get_mut(&mut self, key: TimerKey) -> Option<&mut T> {
        self.arena.get_mut(key).map(|live| &mut live.value)
    }

    /// Whether the key names a pending timer. O(1).
    pub fn contains(&self, key: TimerKey) -> bool {
        self.arena.get(key).is_some()
    }

    /// Takes out the next timer due at or before `max(now, elapsed())` (in ticks), or `None`
    /// when no pending timer has a deadline ≤ that.
    ///
    /// Timers come out in deadline order, equal deadlines in insertion order (for timers never
    /// reset). Advances [`elapsed`](Wheel::elapsed) toward `now`, cascading the slots it
    /// passes. Once it returns `None`, `elapsed() == max(elapsed, now)`.
    ///
    /// The wheel's time never goes backwards: a `now` before `elapsed` counts as `elapsed`. So
    /// a timer that became due when the wheel reached `elapsed` comes out even with a smaller
    /// `now`. Such a timer waits because an earlier poll stopped after its equal-deadline
    /// neighbour, or because `poll_into` hit its limit. Nothing fires before the wheel has
    /// reached its deadline, and nothing panics.
    ///
    /// Cost: O(levels) to find the next slot, plus O(1) amortised per timer cascaded or
    /// returned. An idle poll (nothing due) is one comparison however many timers are pending.
    #[inline]
    pub fn poll(&mut self, now: u64) -> Option<Expired<T>> {
        if now < self.quiet_until {
            self.elapsed = self.elapsed.max(now);
            return None;
        }
        self.poll_busy(now)
    }

    /// The body of [`poll`](Wheel::poll) once something may be due, out of line so that the
    /// idle check above inlines into the caller's loop.
    #[inline(never)]
    fn poll_busy(&mut self, now: u64) -> Option<Expired<T>> {
        // Until this poll comes up empty, more may be due: the next poll must look too.
        self.quiet_until = 0;
        self.flush_unlinks();
        loop {
            if let Some(expired) = self.pop_due(now) {
                self.quiet_if_done(now);
                return Some(expired);
            }
            if !self.advance_one_slot(now) {
                self.settle_quiet_until();
                return None;
            }
        }
    }

    /// Takes out up to `limit` due timers (deadline ≤ `now`) into `out`, in the order
    /// [`poll`](Wheel::poll) would, and returns how many it added.
    ///
    /// A call that stops at `limit` leaves the rest in place: the next call resumes where it
    /// stopped, and `elapsed()` is the deadline of the last timer returned (see
    /// [`elapsed`](Wheel::elapsed)). `limit == 0` does nothing. Cost as for `poll`.
    pub fn poll_into(&mut self, now: u64, limit: usize, out: &mut Vec<Expired<T>>) -> usize {
        if limit == 0 {
            return 0;
        }
        if now < self.quiet_until {
            self.elapsed = self.elapsed.max(now);
            return 0;
        }
        self.quiet_until = 0;
        self.flush_unlinks();
        let mut taken = 0;
        while taken < limit {
            if let Some(expired) = self.pop_due(now) {
                out.push(expired);
                taken += 1;
            } else if !self.advance_one_slot(now) {
                self.settle_quiet_until();
                return taken;
            }
        }
        self.quiet_if_done(now);
        taken
    }

    /// A tick before which a poll returns nothing: for every `now` below it (and at or past
    /// `elapsed`), `poll(now)` is `None`. A lower bound, not the next deadline: `0` while
    /// the last poll may have left due timers behind. O(1); it lets a caller holding the
    /// wheel behind a lock publish "nothing due yet" without being asked.
    pub(crate) fn quiet_until(&self) -> u64 {
        self.quiet_until
    }

    /// The earliest tick at which a poll may return a timer, or `None` when the wheel is empty.
    /// O(levels). Up to 64 cancels or moves since the last poll are applied to their slots'
    /// counts only lazily; with such pending, the cost is O(levels + 64 × the slots passed
    /// over). That is at most a few thousand steps, whatever the number of timers.
    ///
    /// Never later than the earliest pending deadline. It is that deadline exactly when both
    /// hold:
    /// - the earliest timer is due within 64 ticks of `elapsed` (same level-1 digit);
    /// - no timer was reset to a later tick from a place before it.
    ///
    /// Otherwise it is earlier. It is then the tick the earliest timer's slot would cascade,
    /// also for a timer waiting in the due queue's sorted run, so the answer does not depend on
    /// where a timer waits. Or it is the old tick of a timer moved later. Such a timer keeps
    /// its place (a level-0 slot, or the run) until a poll reaches it and files it anew. Due
    /// timers not yet polled give a tick at or before `elapsed`. Cancelled timers do not hold
    /// it early: slots count live timers.
    pub fn next_expiration(&self) -> Option<u64> {
        self.next_expiration_tick()
    }

    /// Cancels every pending timer; every key issued so far becomes stale. O(capacity).
    pub fn clear(&mut self) {
        let live: Vec<u32> = self.arena.live_indexes().collect();
        for index in live {
            self.arena.remove(index);
        }
        self.levels.clear();
        self.due.clear();
        self.quiet_until = u64::MAX;
    }

    /// Removes every stale reference and gives unused memory back: arena entries past the
    /// last pending timer, and spare capacity of every slot. O(capacity + references).
    /// Keys stay valid, and stale keys stay stale.
    pub fn shrink_to_fit(&mut self) {
        let arena = &self.arena;
        self.levels.shrink_to_fit(|r| arena.resolve(r).is_some());
        self.due.shrink_to_fit(|r| arena.resolve(r).is_some());
        self.arena.shrink_to_fit();
    }

    /// Occupancy and memory: live timers, stale references, arena capacity and bytes held.
    /// O(slots).
    pub fn stats(&self) -> WheelStats {
        let live = self.arena.len();
        let refs = self.levels.total_refs() + self.due.refs();
        WheelStats {
            live,
            stale: refs - live,
            capacity: self.arena.capacity(),
            bytes_held: std::mem::size_of::<Self>()
                + self.arena.bytes_held()
                + self.levels.bytes_held()
                + self.due.bytes_held(),
        }
    }
}

#[cfg(test)]
mod invariants;
#[cfg(test)]
mod tests;
