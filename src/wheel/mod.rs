//! The core: a hierarchical timer wheel over `u64` ticks.
//!
//! A hierarchical wheel (Varghese & Lauck, "Hashed and Hierarchical Timing Wheels", SOSP
//! 1987) keeps timers in buckets by how far away they are: level 0 has one slot per tick for
//! the next 64 ticks, level 1 one slot per 64 ticks for the next 4 096, and so on. Insert and
//! cancel are O(1); a timer is touched once per level it *cascades* through on its way down,
//! at most 11 times, and usually once or twice. What it trades away is order *inside* a
//! higher-level slot (found only when the slot cascades) and exact `next_expiration` above
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
//! tokio's wheel stops at level 5 and clamps later deadlines; here eleven levels of 64 slots
//! cover every `u64` exactly (the top level uses 16 slots), so no deadline is clamped and no
//! level wraps around. See `level.rs` for the arithmetic and a worked example.
//!
//! What differs from tokio's wheel, and why:
//! - **Entries live in a generation-stamped arena; slots hold references, not links.** A
//!   key names (index, generation), so a stale key is rejected instead of aliasing the next
//!   timer at its index (the `DelayQueue` bug class), and a timer can never be "already
//!   linked" twice (the MTA drain bug). Cancel leaves the slot's reference behind and
//!   decrements the slot's live count; see `slots.rs` for why stale references stay bounded.
//! - **Moving a deadline later is free.** The timer stays in its slot with the new deadline;
//!   when the slot is processed it is filed again by its real deadline (as Ratas does for
//!   cheap reschedules). Only a reset to an *earlier* slot moves it.
//! - **A due queue** (`due.rs`) holds due timers between polls, so `poll` returns one at a
//!   time and `poll_into` can stop at `limit` and resume without losing order.
//!
//! Ordering contract: timers come out in deadline order; timers with equal deadlines come
//! out in insertion order if they were never reset. Nothing depends on hashing.

mod arena;
mod due;
mod key;
pub(crate) mod level;
mod slots;

pub use key::{Expired, TimerKey, WheelStats};

use arena::{Arena, POS_DUE, POS_UNFILED, TOUCH_BATCH, TOUCH_MIN, position_slot, slot_position};
use due::DueQueue;
use level::{filed_slot_start, level_for, slot_for, slot_start};
use slots::Levels;

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
#[derive(Debug)]
pub struct Wheel<T> {
    arena: Arena<T>,
    levels: Levels,
    due: DueQueue,
    /// The tick the wheel has advanced to: every slot due at or before it has been
    /// processed. Only [`Wheel::poll`] and [`Wheel::poll_into`] move it, never backwards.
    elapsed: u64,
    /// A poll at a tick below this finds nothing to do: no due timer waits, and it is no
    /// later than the start of every occupied slot. Inserts and moves lower it, a poll that
    /// comes up empty sets it exactly, cancels leave it (a lower bound stays a lower bound).
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
    /// An empty wheel at `elapsed() == 0`. Allocates the level table (about 18 KiB) only.
    pub fn new() -> Self {
        Self::with_capacity(0)
    }

    /// An empty wheel with room for `n` timers before its arena reallocates.
    pub fn with_capacity(n: usize) -> Self {
        Wheel {
            arena: Arena::with_capacity(n),
            levels: Levels::new(),
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
    /// everything due, it equals the largest `now` passed so far. After a `poll_into` stopped
    /// by its `limit`, it is the tick of the last slot processed: timers due then and not yet
    /// returned wait in the due queue and come out first on the next poll.
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

    /// Makes room for `additional` more timers in the arena.
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
    pub fn insert(&mut self, deadline: u64, value: T) -> TimerKey {
        match self.try_insert(deadline, value) {
            Ok(key) => key,
            Err(_) => panic!("tickwheel: wheel is full ({} timers pending)", u32::MAX - 1),
        }
    }

    /// [`insert`](Wheel::insert) that gives the value back in [`CapacityError`] when the
    /// wheel already holds `u32::MAX - 1` timers.
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
        let (key, r) = self
            .arena
            .insert_at(deadline, value, slot_position(level, slot))
            .map_err(CapacityError)?;
        self.levels.push(level, slot, r);
        self.lower_quiet_until(filed_slot_start(deadline, level));
        self.sweep_if_due();
        Ok(key)
    }

    /// Cancels a pending timer and returns its value. O(1) amortised.
    ///
    /// `None` when the key's timer already fired or was cancelled, and for a stale key whose
    /// index now holds another timer: that timer is left alone (the generation differs).
    pub fn cancel(&mut self, key: TimerKey) -> Option<T> {
        let (pos, live) = self.arena.take(key)?;
        self.unlink(pos);
        Some(live.value)
    }

    /// Moves a pending timer to a new deadline, in ticks. O(1) amortised.
    ///
    /// Returns `false` (and changes nothing) for a stale or foreign key. Afterwards the timer
    /// fires as if freshly inserted at `deadline`: a past deadline makes it due on the next
    /// poll; a due, not yet polled timer moved to the future waits again. Among timers with
    /// the same deadline a reset timer's place is unspecified (insertion order is promised
    /// only for timers never reset): it is filed by where its slot's processing puts it, not
    /// by the moment of the reset. Moving a deadline
    /// later allocates nothing and leaves no stale reference: the timer stays in its slot
    /// and is filed again when that slot comes round. Moving it to an earlier slot leaves one
    /// stale reference behind.
    pub fn reset(&mut self, key: TimerKey, deadline: u64) -> bool {
        let Some(live) = self.arena.get_mut(key) else {
            return false;
        };
        let pos = live.position();
        if deadline > self.elapsed {
            if let Some((level, slot)) = position_slot(pos) {
                if slot_start(self.elapsed, level, slot) <= deadline {
                    // Its slot comes round no later than the new deadline: keep it there.
                    live.deadline = deadline;
                    return true;
                }
            }
        }
        live.deadline = deadline;
        self.unlink(pos);
        self.file(key.index, deadline);
        self.sweep_if_due();
        true
    }

    /// The deadline of a pending timer, in ticks; `None` for a stale or foreign key. O(1).
    pub fn deadline(&self, key: TimerKey) -> Option<u64> {
        self.arena.get(key).map(|live| live.deadline)
    }

    /// The value of a pending timer; `None` for a stale or foreign key. O(1).
    pub fn get(&self, key: TimerKey) -> Option<&T> {
        self.arena.get(key).map(|live| &live.value)
    }

    /// The value of a pending timer, mutably; `None` for a stale or foreign key. O(1).
    pub fn get_mut(&mut self, key: TimerKey) -> Option<&mut T> {
        self.arena.get_mut(key).map(|live| &mut live.value)
    }

    /// Whether the key names a pending timer. O(1).
    pub fn contains(&self, key: TimerKey) -> bool {
        self.arena.get(key).is_some()
    }

    /// Takes out the next timer due at or before `now` (in ticks), or `None` when no pending
    /// timer has a deadline ≤ `now`.
    ///
    /// Timers come out in deadline order, equal deadlines in insertion order (for timers
    /// never reset). Advances [`elapsed`](Wheel::elapsed) toward `now`, cascading the slots it
    /// passes; once it returns `None`, `elapsed() == max(elapsed, now)`. A `now` before
    /// `elapsed` is ignored: nothing fires early and nothing panics.
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
        loop {
            if let Some(expired) = self.pop_due() {
                return Some(expired);
            }
            if !self.advance_one_slot(now) {
                self.settle_quiet_until();
                return None;
            }
        }
    }

    /// Sets [`quiet_until`](Wheel::quiet_until) exactly, after a poll found nothing more.
    fn settle_quiet_until(&mut self) {
        self.quiet_until = if self.due.live() > 0 {
            0
        } else {
            self.levels
                .first_occupied()
                .map_or(u64::MAX, |(level, slot)| {
                    slot_start(self.elapsed, level, slot)
                })
        };
    }

    /// Takes out up to `limit` due timers (deadline ≤ `now`) into `out`, in the order
    /// [`poll`](Wheel::poll) would, and returns how many it added.
    ///
    /// A call that stops at `limit` leaves the rest in place: the next call resumes where it
    /// stopped, and `elapsed()` is the tick of the last slot processed (see
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
        let mut taken = 0;
        while taken < limit {
            if let Some(expired) = self.pop_due() {
                out.push(expired);
                taken += 1;
            } else if !self.advance_one_slot(now) {
                self.settle_quiet_until();
                break;
            }
        }
        taken
    }

    /// The earliest tick at which a poll may return a timer, or `None` when the wheel is
    /// empty. O(levels).
    ///
    /// Never later than the earliest pending deadline. It is that deadline exactly when the
    /// earliest timer is in level 0 (due within 64 ticks of `elapsed`); otherwise it is the
    /// tick its slot cascades, which is earlier. Due timers not yet polled give a tick at or
    /// before `elapsed`. Cancelled timers do not hold it early: slots count live timers.
    pub fn next_expiration(&self) -> Option<u64> {
        if let Some(deadline) = self.due.min_deadline() {
            return Some(deadline);
        }
        self.levels
            .first_occupied()
            .map(|(level, slot)| slot_start(self.elapsed, level, slot))
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

    /// Files the live entry `index` by its deadline: a level slot, or the due queue.
    #[inline]
    fn file(&mut self, index: u32, deadline: u64) {
        if deadline <= self.elapsed {
            self.file_due(index, deadline);
            return;
        }
        let level = level_for(self.elapsed, deadline);
        let slot = slot_for(deadline, level);
        if let Some(r) = self.arena.refile(index, slot_position(level, slot)) {
            self.levels.push(level, slot, r);
            self.lower_quiet_until(filed_slot_start(deadline, level));
        }
    }

    /// A slot starting at `start` became occupied.
    #[inline]
    fn lower_quiet_until(&mut self, start: u64) {
        if start < self.quiet_until {
            self.quiet_until = start;
        }
    }

    /// Files a live entry whose deadline has been reached into the due queue (rare: an
    /// insert or reset into the past).
    #[cold]
    #[inline(never)]
    fn file_due(&mut self, index: u32, deadline: u64) {
        if let Some(r) = self.arena.refile(index, POS_DUE) {
            self.due.push_past(deadline, r);
            self.quiet_until = 0;
        }
    }

    /// Removes every stale reference if some epoch asked for it (see `arena.rs`: this is what
    /// keeps a wrapped epoch from making a stale reference look current). Called before each
    /// operation that files timers returns.
    #[inline]
    fn sweep_if_due(&mut self) {
        if self.arena.take_sweep_due() {
            self.sweep_stale();
        }
    }

    #[cold]
    #[inline(never)]
    fn sweep_stale(&mut self) {
        let arena = &self.arena;
        self.levels
            .compact_all(|refs| refs.retain(|&r| arena.resolve(r).is_some()));
        self.due.compact(|r| arena.resolve(r).is_some());
    }

    /// Compacts the slots with more stale than live references (see `slots.rs`).
    #[cold]
    #[inline(never)]
    fn sweep_levels(&mut self) {
        let arena = &self.arena;
        self.levels
            .sweep(|refs| refs.retain(|&r| arena.resolve(r).is_some()));
    }

    /// Detaches a live entry from where it is filed; its reference there becomes stale.
    fn unlink(&mut self, pos: u32) {
        if pos == POS_DUE {
            if self.due.unlink() {
                let arena = &self.arena;
                self.due.compact(|r| arena.resolve(r).is_some());
            }
        } else if let Some((level, slot)) = position_slot(pos) {
            if self.levels.unlink(level, slot) {
                self.sweep_levels();
            }
        } else {
            debug_assert_eq!(pos, POS_UNFILED, "a live entry is filed somewhere");
        }
    }

    /// Returns the earliest live due timer, skipping stale references.
    #[inline]
    fn pop_due(&mut self) -> Option<Expired<T>> {
        while self.due.live() > 0 {
            let r = self.due.pop()?;
            let Some((key, live)) = self.arena.take_current(r) else {
                continue; // cancelled or moved after it became due
            };
            if self.due.unlink() {
                // Pops keep the stale share constant; cancels raised it past the bound.
                let arena = &self.arena;
                self.due.compact(|r| arena.resolve(r).is_some());
            }
            return Some(Expired {
                key,
                deadline: live.deadline,
                value: live.value,
            });
        }
        None
    }

    /// Processes the next occupied slot if it is due by `now`: its due timers go to the due
    /// queue, the others are filed again lower down. Returns false when no slot is due by
    /// `now`; `elapsed` then moves to `now` (never backwards).
    #[inline]
    fn advance_one_slot(&mut self, now: u64) -> bool {
        let Some((level, slot)) = self.levels.first_occupied() else {
            self.elapsed = self.elapsed.max(now);
            return false;
        };
        let start = slot_start(self.elapsed, level, slot);
        debug_assert!(
            start > self.elapsed,
            "occupied slots lie ahead: L{level} S{slot} at {start} <= {}",
            self.elapsed
        );
        if start > now {
            self.elapsed = self.elapsed.max(now);
            return false;
        }
        self.elapsed = start;
        self.process_slot(level, slot);
        true
    }

    /// Empties a slot that `elapsed` has reached: its due timers become the due queue's
    /// batch (filtered in place in the slot's own vector), the others are filed lower down.
    fn process_slot(&mut self, level: usize, slot: usize) {
        let mut refs = self.levels.take(level, slot);
        let elapsed = self.elapsed;
        let mut due = 0;
        // The entries are scattered over the arena: each batch's entries are loaded
        // together (`Arena::touch`) one batch ahead of the batch being processed. A slot of a
        // few references gains nothing from it.
        let len = refs.len();
        let touch = len >= TOUCH_MIN;
        if touch {
            std::hint::black_box(self.arena.touch(&refs[..len.min(TOUCH_BATCH)]));
        }
        let mut start = 0;
        while start < len {
            let end = len.min(start + TOUCH_BATCH);
            if touch {
                std::hint::black_box(self.arena.touch(&refs[end..len.min(end + TOUCH_BATCH)]));
            }
            for i in start..end {
                // One lookup per reference: check it is current, read the deadline, refile.
                let placed = self.arena.refile_current(refs[i], |deadline| {
                    if deadline <= elapsed {
                        POS_DUE
                    } else {
                        let level = level_for(elapsed, deadline);
                        slot_position(level, slot_for(deadline, level))
                    }
                });
                let Some((deadline, r)) = placed else {
                    continue; // stale: cancelled, or moved to an earlier slot
                };
                if deadline <= elapsed {
                    refs[due] = r;
                    due += 1;
                } else {
                    // A cascade, or a timer whose deadline was moved later while it sat
                    // here. (`quiet_until` is 0 during a poll and set when it ends.)
                    let level = level_for(elapsed, deadline);
                    self.levels.push(level, slot_for(deadline, level), r);
                }
            }
            start = end;
        }
        refs.truncate(due);
        let spare = if due > 0 {
            self.due.push_batch(elapsed, refs)
        } else {
            refs
        };
        self.levels.restore(level, slot, spare);
        if self.levels.over_bound() {
            // The due timers left the levels and their count with them.
            self.sweep_levels();
        }
        self.sweep_if_due();
    }

    #[cfg(test)]
    pub(crate) fn check_invariants(&self) {
        use level::{LEVELS, SLOTS};
        let mut live_filed = 0usize;
        for level in 0..LEVELS {
            let occupied = self.levels.occupied(level);
            for slot in 0..SLOTS {
                let live = self.levels.live_in(level, slot);
                assert_eq!(
                    occupied >> slot & 1 == 1,
                    live > 0,
                    "bitmap bit iff live timers: L{level} S{slot}"
                );
                let current = self
                    .levels
                    .refs_in(level, slot)
                    .iter()
                    .filter(|&&r| self.arena.resolve(r).is_some())
                    .count();
                assert_eq!(
                    current, live as usize,
                    "live count matches current references: L{level} S{slot}"
                );
                if live > 0 {
                    assert!(
                        slot_start(self.elapsed, level, slot) > self.elapsed,
                        "occupied slot L{level} S{slot} lies ahead of {}",
                        self.elapsed
                    );
                }
                live_filed += live as usize;
            }
        }
        assert_eq!(
            live_filed + self.due.live(),
            self.len(),
            "every pending timer is filed once"
        );
        self.levels.check_counts();
        if self.due.live() > 0 {
            assert_eq!(self.quiet_until, 0, "due timers wait, so every poll looks");
        }
        if let Some((level, slot)) = self.levels.first_occupied() {
            let start = slot_start(self.elapsed, level, slot);
            assert!(
                self.quiet_until <= start,
                "quiet_until {} is no later than the first occupied slot L{level} S{slot} at {start}",
                self.quiet_until
            );
        }
    }
}

#[cfg(test)]
mod tests;
