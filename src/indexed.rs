//! Layer 3: [`IndexedWheel<K, T>`], a wheel addressed by the caller's own id.
//!
//! A [`Wheel`] hands out [`TimerKey`]s; a program that thinks in its own ids ("message 42",
//! "connection 7") would have to keep an id → key map beside it and keep that map true on
//! every fire, cancel and reset. `IndexedWheel` is that map done once: a hashbrown index
//! from id to key, next to a wheel whose entries carry their id, so a fired timer removes
//! its own index entry.
//!
//! ```text
//!   index: HashMap<K, TimerKey>          wheel: Wheel<(K, T)>
//!   +-----------+-----------+            +------------------------------+
//!   | "msg-42"  | 17v3      | ---------> | arena[17] gen 3: ("msg-42",v) |
//!   | "msg-43"  | 4v0       | ---------> | arena[4]  gen 0: ("msg-43",v) |
//!   +-----------+-----------+            +------------------------------+
//! ```
//!
//! Invariant: an id is in the index exactly when the wheel holds a pending timer carrying
//! that id, and the index maps it to that timer's key. Every method keeps it before it
//! returns; nothing in between can observe the map.
//!
//! Ordering is the wheel's: deadline order, and insertion order for equal deadlines among
//! timers never [`reset`](IndexedWheel::reset). An [`insert`](IndexedWheel::insert) that
//! replaces a pending timer counts as a fresh insertion (it goes to the back of its tick).
//! Nothing depends on the hash map's iteration order: it is never iterated.

use std::borrow::Borrow;
use std::hash::Hash;

use hashbrown::HashMap;

use crate::wheel::{CapacityError, TimerKey, Wheel, WheelStats};

/// A timer wheel addressed by the caller's id `K` instead of a [`TimerKey`]: O(1) insert,
/// cancel, reset and lookup by id, over `u64` ticks like [`Wheel`].
///
/// At most one timer is pending per id: inserting an id that is already pending replaces
/// that timer. An id whose timer fired or was cancelled is simply absent; using it again is
/// harmless (`None`/`false`) and it can be inserted again at once.
///
/// Ticks are taken as given, as by [`Wheel`]: every `u64` deadline is accepted and nothing
/// saturates; [`poll`](Self::poll) at `u64::MAX` fires a timer at `u64::MAX`. The layers
/// with a clock use that tick for *never due* and never poll it (see [`crate::clock`]); a
/// caller wanting the same polls at most `u64::MAX - 1`.
///
/// Each timer stores its id twice (index and wheel entry), hence `K: Clone`; small ids
/// (integers, short strings, `Arc`s) suit it best.
///
/// Lookups ([`cancel`](Self::cancel), [`reset`](Self::reset), [`deadline`](Self::deadline),
/// [`get`](Self::get), [`get_mut`](Self::get_mut), [`contains`](Self::contains)) take any
/// borrowed form of the id, as `HashMap::get` does: `&str` for a `String` id, `&[u8]` for
/// a `Vec<u8>`. `Borrow` requires the borrowed form to hash and compare as the owned one.
///
/// # Example
///
/// ```
/// use tickwheel::IndexedWheel;
///
/// let mut wheel = IndexedWheel::new();
/// wheel.insert("msg-42", 100, "retry example.com");
/// wheel.insert("conn-7", 30, "idle timeout");
/// assert_eq!(wheel.cancel(&"conn-7"), Some("idle timeout"));
/// assert!(wheel.reset(&"msg-42", 120));
/// assert_eq!(wheel.poll(119), None, "never early");
/// assert_eq!(wheel.poll(150), Some(("msg-42", "retry example.com")));
/// assert!(!wheel.contains(&"msg-42"), "a fired id is gone");
/// ```
#[derive(Debug)]
pub struct IndexedWheel<K, T> {
    /// Pending timers, each carrying its id so that firing can clean the index.
    wheel: Wheel<(K, T)>,
    /// Id → key of its pending timer; holds exactly the ids pending in `wheel`.
    index: HashMap<K, TimerKey>,
}

impl<K: Hash + Eq + Clone, T> Default for IndexedWheel<K, T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Hash + Eq + Clone, T> IndexedWheel<K, T> {
    /// An empty wheel at `elapsed() == 0`.
    ///
    /// ```
    /// let wheel: tickwheel::IndexedWheel<u64, ()> = tickwheel::IndexedWheel::new();
    /// assert!(wheel.is_empty());
    /// ```
    pub fn new() -> Self {
        IndexedWheel {
            wheel: Wheel::new(),
            index: HashMap::new(),
        }
    }

    /// An empty wheel with room for `n` timers before the arena or the index reallocates.
    pub fn with_capacity(n: usize) -> Self {
        IndexedWheel {
            wheel: Wheel::with_capacity(n),
            index: HashMap::with_capacity(n),
        }
    }

    /// An empty wheel whose `elapsed()` starts at `tick`; see [`Wheel::starting_at`].
    pub fn starting_at(tick: u64) -> Self {
        IndexedWheel {
            wheel: Wheel::starting_at(tick),
            index: HashMap::new(),
        }
    }

    /// The tick the wheel has advanced to; see [`Wheel::elapsed`].
    pub fn elapsed(&self) -> u64 {
        self.wheel.elapsed()
    }

    /// Pending timers. O(1).
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether no timer is pending. O(1).
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Adds a timer for `id` due at tick `deadline`. If `id` already has a pending timer,
    /// that timer is replaced (its old value is returned) and the new one counts as freshly
    /// inserted. O(1) expected.
    ///
    /// Any `u64` is a valid deadline; one at or before [`elapsed`](Self::elapsed) fires on
    /// the next poll.
    ///
    /// # Panics
    ///
    /// If `u32::MAX - 1` timers are pending already and `id` is new;
    /// [`try_insert`](Self::try_insert) returns an error instead.
    ///
    /// # Example
    ///
    /// ```
    /// let mut wheel = tickwheel::IndexedWheel::new();
    /// assert_eq!(wheel.insert(42, 100, "first"), None);
    /// assert_eq!(wheel.insert(42, 50, "second"), Some("first"), "replaced");
    /// assert_eq!(wheel.len(), 1);
    /// assert_eq!(wheel.deadline(&42), Some(50));
    /// ```
    #[track_caller]
    pub fn insert(&mut self, id: K, deadline: u64, value: T) -> Option<T> {
        match self.try_insert(id, deadline, value) {
            Ok(old) => old,
            Err(_) => panic!(
                "tickwheel: indexed wheel is full ({} timers pending)",
                u32::MAX - 1
            ),
        }
    }

    /// [`insert`](Self::insert) that gives the value back in [`CapacityError`] when the
    /// wheel is full and `id` is new. A replacement never fails: it frees the slot it uses.
    ///
    /// ```
    /// let mut wheel = tickwheel::IndexedWheel::new();
    /// assert_eq!(wheel.try_insert("a", 7, 1), Ok(None));
    /// assert_eq!(wheel.try_insert("a", 8, 2), Ok(Some(1)));
    /// ```
    pub fn try_insert(
        &mut self,
        id: K,
        deadline: u64,
        value: T,
    ) -> Result<Option<T>, CapacityError<T>> {
        // Cancel first: a replacement frees the entry the new timer then takes.
        let old = self.cancel(&id);
        match self.wheel.try_insert(deadline, (id.clone(), value)) {
            Ok(key) => {
                self.index.insert(id, key);
                Ok(old)
            }
            Err(CapacityError((_, value))) => Err(CapacityError(value)),
        }
    }

    /// Cancels the pending timer of `id` and returns its value; `None` when `id` has no
    /// pending timer (never inserted, fired, or cancelled already). O(1) expected.
    ///
    /// ```
    /// let mut wheel = tickwheel::IndexedWheel::new();
    /// wheel.insert(String::from("msg-7"), 10, "x");
    /// assert_eq!(wheel.cancel("msg-7"), Some("x"), "looked up by &str");
    /// assert_eq!(wheel.cancel("msg-7"), None);
    /// ```
    pub fn cancel<B: Hash + Eq + ?Sized>(&mut self, id: &B) -> Option<T>
    where
        K: Borrow<B>,
    {
        let key = self.index.remove(id)?;
        let cancelled = self.wheel.cancel(key);
        debug_assert!(cancelled.is_some(), "an indexed id names a pending timer");
        cancelled.map(|(_, value)| value)
    }

    /// Moves the pending timer of `id` to tick `deadline`; `false` (and nothing changes)
    /// when `id` has no pending timer. O(1) expected. See [`Wheel::reset`]: a past deadline
    /// fires on the next poll, and a reset timer loses its place among equal deadlines.
    ///
    /// ```
    /// let mut wheel = tickwheel::IndexedWheel::new();
    /// wheel.insert(String::from("t"), 10, ());
    /// assert!(wheel.reset("t", 500));
    /// assert_eq!(wheel.poll(100), None);
    /// assert!(!wheel.reset("absent", 5));
    /// ```
    pub fn reset<B: Hash + Eq + ?Sized>(&mut self, id: &B, deadline: u64) -> bool
    where
        K: Borrow<B>,
    {
        match self.index.get(id) {
            Some(&key) => self.wheel.reset(key, deadline),
            None => false,
        }
    }

    /// The deadline of the pending timer of `id`, in ticks; `None` when it has none. O(1)
    /// expected.
    ///
    /// ```
    /// let mut wheel = tickwheel::IndexedWheel::new();
    /// wheel.insert(String::from("conn-7"), 30, ());
    /// assert_eq!(wheel.deadline("conn-7"), Some(30));
    /// assert_eq!(wheel.deadline("conn-8"), None);
    /// ```
    pub fn deadline<B: Hash + Eq + ?Sized>(&self, id: &B) -> Option<u64>
    where
        K: Borrow<B>,
    {
        self.index.get(id).and_then(|&key| self.wheel.deadline(key))
    }

    /// The value of the pending timer of `id`; `None` when it has none. O(1) expected.
    ///
    /// ```
    /// let mut wheel = tickwheel::IndexedWheel::new();
    /// wheel.insert(1u8, 3, "v");
    /// assert_eq!(wheel.get(&1), Some(&"v"));
    /// assert_eq!(wheel.get(&2), None);
    ///
    /// let mut by_name = tickwheel::IndexedWheel::new();
    /// by_name.insert(String::from("a"), 3, 1);
    /// assert_eq!(by_name.get("a"), Some(&1));
    /// ```
    pub fn get<B: Hash + Eq + ?Sized>(&self, id: &B) -> Option<&T>
    where
        K: Borrow<B>,
    {
        self.index
            .get(id)
            .and_then(|&key| self.wheel.get(key))
            .map(|(_, value)| value)
    }

    /// The value of the pending timer of `id`, mutably; `None` when it has none. O(1)
    /// expected.
    ///
    /// ```
    /// let mut wheel = tickwheel::IndexedWheel::new();
    /// wheel.insert(String::from("a"), 3, 1);
    /// if let Some(v) = wheel.get_mut("a") {
    ///     *v += 1;
    /// }
    /// assert_eq!(wheel.cancel("a"), Some(2));
    /// ```
    pub fn get_mut<B: Hash + Eq + ?Sized>(&mut self, id: &B) -> Option<&mut T>
    where
        K: Borrow<B>,
    {
        let key = *self.index.get(id)?;
        self.wheel.get_mut(key).map(|(_, value)| value)
    }

    /// Whether `id` has a pending timer. O(1) expected.
    ///
    /// ```
    /// let mut wheel = tickwheel::IndexedWheel::new();
    /// wheel.insert(vec![1u8, 2], 3, ());
    /// assert!(wheel.contains(&[1u8, 2][..]), "a Vec<u8> id, looked up by &[u8]");
    /// assert!(!wheel.contains(&[3u8][..]));
    /// ```
    pub fn contains<B: Hash + Eq + ?Sized>(&self, id: &B) -> bool
    where
        K: Borrow<B>,
    {
        self.index.contains_key(id)
    }

    /// Takes out the next timer due at or before tick `now`, as `(id, value)`; `None` when
    /// none is due. The id is free again at once. Order and cost as [`Wheel::poll`]; a `now`
    /// before [`elapsed`](Self::elapsed) counts as `elapsed` (time never goes backwards;
    /// never early, never a panic).
    ///
    /// ```
    /// let mut wheel = tickwheel::IndexedWheel::new();
    /// wheel.insert("b", 5, 2);
    /// wheel.insert("a", 5, 1);
    /// wheel.insert("c", 3, 0);
    /// assert_eq!(wheel.poll(10), Some(("c", 0)));
    /// assert_eq!(wheel.poll(10), Some(("b", 2)), "equal deadlines: insertion order");
    /// assert_eq!(wheel.poll(10), Some(("a", 1)));
    /// assert_eq!(wheel.poll(10), None);
    /// ```
    pub fn poll(&mut self, now: u64) -> Option<(K, T)> {
        self.poll_with_deadline(now)
            .map(|(id, _, value)| (id, value))
    }

    /// Takes out up to `limit` due timers (deadline ≤ `now`) into `out`, in
    /// [`poll`](Self::poll) order, and returns how many it added. A call stopped by `limit`
    /// resumes where it stopped; `limit == 0` does nothing. Cost as [`Wheel::poll_into`].
    ///
    /// ```
    /// let mut wheel = tickwheel::IndexedWheel::new();
    /// for id in 0..5u32 {
    ///     wheel.insert(id, u64::from(id), ());
    /// }
    /// let mut out = Vec::new();
    /// assert_eq!(wheel.poll_into(10, 3, &mut out), 3);
    /// assert_eq!(wheel.poll_into(10, 3, &mut out), 2);
    /// let ids: Vec<u32> = out.into_iter().map(|(id, ())| id).collect();
    /// assert_eq!(ids, [0, 1, 2, 3, 4]);
    /// ```
    pub fn poll_into(&mut self, now: u64, limit: usize, out: &mut Vec<(K, T)>) -> usize {
        let mut taken = 0;
        while taken < limit {
            let Some((id, _, value)) = self.poll_with_deadline(now) else {
                break;
            };
            out.push((id, value));
            taken += 1;
        }
        taken
    }

    /// [`poll`](Self::poll) that also returns the timer's deadline tick:
    /// `(id, deadline, value)`. The scheduler needs the deadline to merge shards in order.
    pub(crate) fn poll_with_deadline(&mut self, now: u64) -> Option<(K, u64, T)> {
        let expired = self.wheel.poll(now)?;
        let (id, value) = expired.value;
        let removed = self.index.remove(&id);
        debug_assert_eq!(
            removed,
            Some(expired.key),
            "the index named the fired timer"
        );
        Some((id, expired.deadline, value))
    }

    /// The earliest tick at which a poll may return a timer; `None` when empty. Never later
    /// than the earliest pending deadline; see [`Wheel::next_expiration`] for when it is
    /// earlier. O(levels).
    pub fn next_expiration(&self) -> Option<u64> {
        self.wheel.next_expiration()
    }

    /// Cancels every pending timer (dropping their values) and empties the index.
    /// O(capacity).
    pub fn clear(&mut self) {
        self.wheel.clear();
        self.index.clear();
    }

    /// Occupancy and memory of the underlying wheel (the index is not counted in
    /// `bytes_held`). O(slots).
    pub fn stats(&self) -> WheelStats {
        self.wheel.stats()
    }

    /// Gives unused memory of the wheel and the index back; see [`Wheel::shrink_to_fit`].
    pub fn shrink_to_fit(&mut self) {
        self.wheel.shrink_to_fit();
        self.index.shrink_to_fit();
    }
}
