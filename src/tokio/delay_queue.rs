//! [`DelayQueue`]: a queue of values that come out once their deadline has passed, with the
//! API of `tokio_util::time::DelayQueue` on the core wheel, and its [`Key`] and [`Expired`].
//! [`DelayQueue`] lists where it differs from tokio-util; the [`tokio`](super) module docs
//! compare the two in a table and say how the queue is built.

use tokio::time::{Duration, Instant};

pub use super::key::{Expired, Key};
use super::one_sleep::OneSleep;
use super::peek::PeekCache;
use super::ticks;
use super::waiter::Waiter;
use crate::Wheel;
use crate::parts::{self, Parts};

mod poll;
mod size;

/// A queue of delayed values: each comes out of the queue once its deadline has passed.
/// A drop-in for `tokio_util::time::DelayQueue`.
///
/// Insert a value with a timeout ([`insert`](Self::insert)) or a deadline
/// ([`insert_at`](Self::insert_at)) and keep the [`Key`] to [`remove`](Self::remove) it or
/// [`reset`](Self::reset) its deadline. Expired values come out of
/// [`poll_expired`](Self::poll_expired) or, equivalently, the [`Stream`](futures_core::Stream)
/// implementation (`StreamExt::next`).
///
/// - **Resolution** 1 ms. A deadline rounds up to the next whole millisecond after the
///   queue was created, so a value never comes out early.
/// - **Order**: by deadline; equal deadlines (same millisecond) in insertion order, for
///   entries never reset.
/// - **Range**: any `Instant` and any `Duration` (`Duration::MAX` included); deadlines in the
///   past come out on the next poll. No deadline panics, however far, and a queue that has
///   existed for years behaves like a new one. A deadline `u64::MAX` ms (584 million years)
///   or more after the queue was created, or one past the end of `Instant`'s range
///   (`Duration::MAX`), is *never due*, by the rule every layer with a clock keeps (see
///   [`crate::clock`]): the entry never comes out (a poll's clock saturates one tick
///   lower) until removed or reset. Its [`deadline`](Self::deadline) is the instant its
///   saturated tick would begin, `origin + u64::MAX` ms, or the last representable instant
///   before it: this API has no "never" value, and the entry does not come out then either.
/// - **Cost**: insert, remove and reset are O(1) amortised; a poll costs O(1) amortised per
///   value it yields, plus, when nothing is due, a [`peek`](Self::peek) (O(1) while its
///   answer is cached). Memory per value: one wheel entry; 2 KiB of wheel levels per level
///   in use (up to 22 KiB);
///   one `Sleep`, allocated the first time a poll has to wait, then reset.
/// - **One consumer**: only the task that polled last is woken.
///
/// # Where it differs from tokio-util
///
/// - **Stale keys are harmless.** A key whose entry expired or was removed never names
///   another entry, even one stored in the same slot later. (tokio-util's key is a bare
///   slab index: once the slot is reused, a stale key silently removes, resets or reads the
///   entry now stored there.) See below for which methods panic on it. A key of another
///   queue is answered the same way, but for a stated small chance (see [`Key`]).
/// - **No lost wakeups.** A task waiting in `poll_expired` is woken when an insert or reset
///   makes the next deadline earlier (or past), and when `remove`, `try_remove` or `clear`
///   empties the queue. A reset or removal of the entry its sleep waits for wakes it once, at
///   once, to re-arm (tokio-util's suite checks that wake-up); it is never woken at the old
///   deadline, nor at the ticks where a far deadline's wheel slot cascades.
/// - **No range panics**, see above; tokio-util panics past about 2.2 years.
/// - **Past deadlines are kept as asked.** tokio-util raises a deadline that lies before
///   the point its internal wheel has been polled up to (see [`Expired::deadline`]); here
///   [`Expired::deadline`] and [`deadline`](Self::deadline) report the instant asked for (an
///   instant before the queue was created reads as its creation instant).
/// - **Keys never move**, so [`compact`](Self::compact) cannot renumber entries into a
///   smaller slab: it gives back what [`shrink_to_fit`](Self::shrink_to_fit) can.
///
/// # Panics on stale keys, as in tokio-util
///
/// [`remove`](Self::remove), [`reset`](Self::reset), [`reset_at`](Self::reset_at) and
/// [`deadline`](Self::deadline) panic when the key names no entry of the queue, as
/// tokio-util documents for its own ("panics if `key` is not contained by the queue"): the
/// queue is a drop-in, and code that only passes keys of entries still in the queue never
/// sees a panic, here or there. The one difference is the case tokio-util gets wrong: for
/// a stale key whose slot has been reused, tokio-util acts on the new entry without
/// panicking; here the key is still stale, and they panic with a message naming it.
///
/// The `try_*` alternatives never panic, whatever the key, and change nothing for a stale
/// or foreign one: [`try_remove`](Self::try_remove) (also in tokio-util) and
/// [`try_deadline`](Self::try_deadline) answer `None`, [`try_reset`](Self::try_reset) and
/// [`try_reset_at`](Self::try_reset_at) answer `false`.
///
/// # Example: idle timeouts
///
/// ```
/// use std::collections::HashMap;
/// use std::time::Duration;
///
/// use futures_util::StreamExt;
/// use tickwheel::tokio::{DelayQueue, Key};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// const IDLE: Duration = Duration::from_secs(30);
/// let mut timeouts = DelayQueue::new();
/// let mut connections: HashMap<u32, Key> = HashMap::new();
/// for id in [1, 2, 3] {
///     connections.insert(id, timeouts.insert(id, IDLE));
/// }
///
/// tokio::time::sleep(Duration::from_secs(20)).await;
/// // Connection 2 saw traffic: it is idle again only 30 s from now.
/// timeouts.reset(&connections[&2], IDLE);
///
/// let start = tokio::time::Instant::now();
/// let mut closed = Vec::new();
/// while let Some(idle) = timeouts.next().await {
///     connections.remove(idle.get_ref());
///     closed.push((idle.into_inner(), start.elapsed().as_secs()));
/// }
/// assert_eq!(closed, [(1, 10), (3, 10), (2, 30)]);
/// assert!(connections.is_empty());
/// # }
/// ```
pub struct DelayQueue<T> {
    /// The entries, by deadline in ticks: milliseconds since `origin`, rounded up.
    wheel: Wheel<T>,
    /// Tick 0: the instant the queue was created.
    origin: Instant,
    /// `origin` as read by [`Parts::read`], for converting deadlines without std's
    /// subtraction; `None` where this platform's `Instant` does not read back (`parts.rs`).
    origin_parts: Option<Parts>,
    /// Armed by `poll_expired` only, for the tick it recorded in `waiter`. Created on the first
    /// `Pending` (creating a `Sleep` needs a runtime; creating a queue does not), then reset.
    sleep: OneSleep,
    waiter: Waiter,
    /// The instant of the tick the sleep is armed for, while the waiter is
    /// [`armed`](Waiter::armed): no entry is due before it, so until the driver ends that
    /// sleep a poll answers `Pending` without reading the clock or looking at the wheel.
    /// `None` when that tick lies past the end of `Instant`'s range (then nothing can become
    /// due until the queue changes). Meaningless while the waiter is not armed.
    quiet_until: Option<Instant>,
    /// The tick of the `now` the last `Ready(Some)` of `poll_expired` was judged at, until
    /// a poll finds nothing due at it: a caller drains the queue in a loop, and each call
    /// after the first takes what is due at that tick before reading the clock again. Never
    /// ahead of the clock, so nothing comes out early; the clock is read again before any
    /// `Pending`, so nothing due is left behind.
    drain_now: Option<u64>,
    /// The latest tick a sleep of the queue was armed for and the timer driver ended: every
    /// entry due by it is due (see `poll_expired`).
    fired: u64,
    peek: PeekCache,
}

/// A summary: `DelayQueue { len, elapsed_ms, next_expiration_ms }`, in milliseconds since
/// the queue was created (the wheel's ticks); the next expiration is the wheel's (O(levels):
/// the tick the earliest entry's slot is processed, never later than its deadline).
impl<T> std::fmt::Debug for DelayQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelayQueue")
            .field("len", &self.wheel.len())
            .field("elapsed_ms", &self.wheel.elapsed())
            .field("next_expiration_ms", &self.wheel.next_expiration())
            .finish()
    }
}

// `T` is never pinned: `poll_expired` takes `&mut self`.
impl<T> Unpin for DelayQueue<T> {}

impl<T> Default for DelayQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> DelayQueue<T> {
    /// An empty queue whose clock starts now. Allocates the wheel's level table and the
    /// waiter's waker slot only; needs no runtime (the first poll does).
    ///
    /// # Examples
    ///
    /// ```
    /// use tickwheel::tokio::DelayQueue;
    ///
    /// let queue: DelayQueue<u32> = DelayQueue::new();
    /// assert!(queue.is_empty());
    /// ```
    pub fn new() -> Self {
        Self::with_capacity(0)
    }

    /// An empty queue with room for `capacity` entries before it reallocates.
    ///
    /// # Panics
    ///
    /// If `capacity` entries exceed `isize::MAX` bytes (as [`Vec::with_capacity`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use tickwheel::tokio::DelayQueue;
    ///
    /// let queue: DelayQueue<u32> = DelayQueue::with_capacity(10);
    /// assert!(queue.capacity() >= 10);
    /// ```
    pub fn with_capacity(capacity: usize) -> Self {
        let origin = Instant::now();
        DelayQueue {
            wheel: Wheel::with_capacity(capacity),
            origin,
            origin_parts: parts::origin_parts(origin),
            sleep: OneSleep::default(),
            waiter: Waiter::default(),
            quiet_until: None,
            drain_now: None,
            fired: 0,
            peek: PeekCache::default(),
        }
    }

    /// Inserts `value`, to come out once `when` has passed, and returns its key. O(1)
    /// amortised.
    ///
    /// `when` rounds up to the queue's next whole millisecond. A `when` already passed
    /// (before the queue was created included) comes out on the next poll. Any instant is
    /// accepted, however far ahead. Wakes the task waiting in
    /// [`poll_expired`](Self::poll_expired) if `value` is now the first to come out.
    ///
    /// # Panics
    ///
    /// If the queue already holds `u32::MAX - 1` entries (tokio-util's limit is 2^30 − 1).
    ///
    /// # Examples
    ///
    /// ```
    /// use tickwheel::tokio::DelayQueue;
    /// use tokio::time::{Duration, Instant};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let mut queue = DelayQueue::new();
    /// let when = Instant::now() + Duration::from_secs(5);
    /// let key = queue.insert_at("foo", when);
    /// assert_eq!(queue.deadline(&key), when);
    /// # }
    /// ```
    #[track_caller]
    pub fn insert_at(&mut self, value: T, when: Instant) -> Key {
        self.insert_tick(value, self.deadline_tick(when))
    }

    /// Inserts `value`, to come out once `timeout` has elapsed from now, and returns its key.
    /// O(1) amortised.
    ///
    /// The same as [`insert_at`](Self::insert_at) with `Instant::now() + timeout`, except that
    /// a timeout too large for an `Instant` (such as `Duration::MAX`) means "never" instead of
    /// a panic. A zero timeout comes out on the next poll.
    ///
    /// # Panics
    ///
    /// If the queue already holds `u32::MAX - 1` entries.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use futures_util::StreamExt;
    /// use tickwheel::tokio::DelayQueue;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let mut queue = DelayQueue::new();
    /// queue.insert("later", Duration::from_secs(10));
    /// queue.insert("sooner", Duration::from_secs(5));
    /// assert_eq!(queue.next().await.unwrap().into_inner(), "sooner");
    /// assert_eq!(queue.next().await.unwrap().into_inner(), "later");
    /// # }
    /// ```
    #[track_caller]
    pub fn insert(&mut self, value: T, timeout: Duration) -> Key {
        let tick = ticks::timeout_tick(self.origin, self.origin_parts, Instant::now(), timeout);
        self.insert_tick(value, tick)
    }

    /// The tick of a deadline `when` (milliseconds since the origin, rounded up).
    #[inline]
    fn deadline_tick(&self, when: Instant) -> u64 {
        ticks::deadline_tick_from(self.origin, self.origin_parts, when)
    }

    #[track_caller]
    fn insert_tick(&mut self, value: T, tick: u64) -> Key {
        let key = self.wheel.insert(tick, value);
        self.peek.filed(key, tick, &self.wheel);
        self.waiter.deadline_added(tick);
        Key(key)
    }

    /// The deadline of the entry `key` names: the instant asked for, rounded up to the queue's
    /// 1 ms resolution. O(1). A deadline past the last tick the queue can reach (never due,
    /// as the README's saturation rule says) shows the instant that last tick begins at,
    /// about 585 million years after the queue's origin, which is earlier than an instant
    /// asked for beyond it.
    ///
    /// # Panics
    ///
    /// If `key` is stale (its entry expired, was removed or cleared) or from another queue;
    /// [`try_deadline`](Self::try_deadline) returns `None` instead.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use tickwheel::tokio::DelayQueue;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let mut queue = DelayQueue::new();
    /// let foo = queue.insert("foo", Duration::from_secs(5));
    /// let bar = queue.insert("bar", Duration::from_secs(10));
    /// assert!(queue.deadline(&foo) < queue.deadline(&bar));
    /// # }
    /// ```
    #[track_caller]
    pub fn deadline(&self, key: &Key) -> Instant {
        match self.try_deadline(key) {
            Some(deadline) => deadline,
            None => absent("deadline", key),
        }
    }

    /// The deadline of the entry `key` names, or `None` when `key` is stale or from another
    /// queue. O(1). Not in tokio-util.
    pub fn try_deadline(&self, key: &Key) -> Option<Instant> {
        let tick = self.wheel.deadline(key.0)?;
        Some(ticks::saturating_instant(self.origin, tick))
    }

    /// Whether `key` names an entry in the queue: `false` for a stale key, and for a
    /// foreign one but for the chance [`Key`] states. O(1). Not in
    /// tokio-util.
    pub fn contains(&self, key: &Key) -> bool {
        self.wheel.contains(key.0)
    }

    /// Removes the entry `key` names and returns it with its deadline. O(1) amortised.
    ///
    /// Wakes the task waiting in [`poll_expired`](Self::poll_expired) if the queue is now
    /// empty, so that it sees `Ready(None)`.
    ///
    /// # Panics
    ///
    /// If `key` is stale (its entry expired, was removed or cleared) or from another queue;
    /// the message names the key. [`try_remove`](Self::try_remove) returns `None` instead.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use tickwheel::tokio::DelayQueue;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let mut queue = DelayQueue::new();
    /// let key = queue.insert("foo", Duration::from_secs(5));
    /// let item = queue.remove(&key);
    /// assert_eq!(*item.get_ref(), "foo");
    /// # }
    /// ```
    #[track_caller]
    pub fn remove(&mut self, key: &Key) -> Expired<T> {
        match self.try_remove(key) {
            Some(expired) => expired,
            None => absent("remove", key),
        }
    }

    /// Removes the entry `key` names and returns it with its deadline, or `None` when `key` is
    /// stale or from another queue: then no entry is touched. O(1) amortised.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use tickwheel::tokio::DelayQueue;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let mut queue = DelayQueue::new();
    /// let foo = queue.insert("foo", Duration::from_secs(5));
    /// assert_eq!(queue.try_remove(&foo).unwrap().into_inner(), "foo");
    /// assert!(queue.try_remove(&foo).is_none());
    ///
    /// // The stale key does not reach the entry that took over its storage slot.
    /// let bar = queue.insert("bar", Duration::from_secs(5));
    /// assert!(queue.try_remove(&foo).is_none());
    /// assert!(queue.contains(&bar));
    /// # }
    /// ```
    pub fn try_remove(&mut self, key: &Key) -> Option<Expired<T>> {
        let tick = self.wheel.deadline(key.0)?;
        let data = self.wheel.cancel(key.0)?;
        self.peek.removed(key.0);
        self.waiter.deadline_removed(tick, self.wheel.is_empty());
        Some(Expired {
            data,
            origin: self.origin,
            tick,
            key: *key,
        })
    }

    /// Moves the entry `key` names to the deadline `when`. O(1) amortised.
    ///
    /// Afterwards the entry behaves as if inserted at `when` (rounded up to 1 ms): a past
    /// `when` makes it come out on the next poll, also if it had already been due but not
    /// yet polled; a future one makes it wait again. Wakes the task waiting in
    /// [`poll_expired`](Self::poll_expired) if the entry now comes out first.
    ///
    /// # Panics
    ///
    /// If `key` is stale or from another queue; [`try_reset_at`](Self::try_reset_at) returns
    /// `false` instead.
    ///
    /// # Examples
    ///
    /// ```
    /// use tickwheel::tokio::DelayQueue;
    /// use tokio::time::{Duration, Instant};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let mut queue = DelayQueue::new();
    /// let key = queue.insert("foo", Duration::from_secs(5));
    /// let later = Instant::now() + Duration::from_secs(10);
    /// queue.reset_at(&key, later);
    /// assert_eq!(queue.deadline(&key), later);
    /// # }
    /// ```
    #[track_caller]
    pub fn reset_at(&mut self, key: &Key, when: Instant) {
        if !self.try_reset_at(key, when) {
            absent("reset_at", key);
        }
    }

    /// Moves the entry `key` names to `timeout` from now: [`reset_at`](Self::reset_at) with
    /// `Instant::now() + timeout`, where a timeout too large for an `Instant` means "never".
    /// O(1) amortised.
    ///
    /// # Panics
    ///
    /// If `key` is stale or from another queue; [`try_reset`](Self::try_reset) returns `false`
    /// instead.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use tickwheel::tokio::DelayQueue;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let mut queue = DelayQueue::new();
    /// let key = queue.insert("foo", Duration::from_secs(5));
    /// queue.reset(&key, Duration::from_secs(10));
    /// assert_eq!(queue.deadline(&key), tokio::time::Instant::now() + Duration::from_secs(10));
    /// # }
    /// ```
    #[track_caller]
    pub fn reset(&mut self, key: &Key, timeout: Duration) {
        if !self.try_reset(key, timeout) {
            absent("reset", key);
        }
    }

    /// [`reset_at`](Self::reset_at) that returns `false` (and changes nothing) for a stale key
    /// (and a foreign one, but for the rare pair of queues [`Key`] describes). Not in
    /// tokio-util.
    pub fn try_reset_at(&mut self, key: &Key, when: Instant) -> bool {
        self.reset_tick(key, self.deadline_tick(when))
    }

    /// [`reset`](Self::reset) that returns `false` (and changes nothing) for a stale key
    /// (and a foreign one, but for the rare pair of queues [`Key`] describes). Not in
    /// tokio-util.
    pub fn try_reset(&mut self, key: &Key, timeout: Duration) -> bool {
        let tick = ticks::timeout_tick(self.origin, self.origin_parts, Instant::now(), timeout);
        self.reset_tick(key, tick)
    }

    fn reset_tick(&mut self, key: &Key, tick: u64) -> bool {
        let Some(old) = self.wheel.deadline(key.0) else {
            return false;
        };
        if !self.wheel.reset(key.0, tick) {
            return false;
        }
        self.peek.filed(key.0, tick, &self.wheel);
        self.waiter.deadline_removed(old, false);
        self.waiter.deadline_added(tick);
        true
    }

    /// The key of the entry [`poll_expired`](Self::poll_expired) yields next, without taking
    /// it out or waiting for it; `None` when the queue is empty.
    ///
    /// The entry with the earliest deadline, ties in insertion order; as in tokio-util, as long
    /// as the queue does not change, `poll_expired` then yields exactly this entry.
    ///
    /// Cost: O(1) while the answer is cached: repeated calls, and after inserts and resets
    /// no earlier than it or removals of other entries. Otherwise [`Wheel::peek`](crate::Wheel::peek):
    /// O(entries in the earliest occupied wheel slot), as tokio-util's.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use tickwheel::tokio::DelayQueue;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let mut queue = DelayQueue::new();
    /// queue.insert("foo", Duration::from_secs(10));
    /// let bar = queue.insert("bar", Duration::from_secs(5));
    /// queue.insert("baz", Duration::from_secs(15));
    /// assert_eq!(queue.peek(), Some(bar));
    /// # }
    /// ```
    pub fn peek(&self) -> Option<Key> {
        self.peek.peek(&self.wheel).map(|(key, _)| Key(key))
    }

    /// Removes every entry; every key issued so far becomes stale. Keeps the capacity.
    /// O(capacity).
    ///
    /// Afterwards [`poll_expired`](Self::poll_expired) answers `Ready(None)`; a task waiting
    /// in it is woken to see that.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use tickwheel::tokio::DelayQueue;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let mut queue = DelayQueue::new();
    /// let key = queue.insert("foo", Duration::from_secs(5));
    /// queue.clear();
    /// assert!(queue.is_empty());
    /// assert!(!queue.contains(&key));
    /// # }
    /// ```
    pub fn clear(&mut self) {
        let had_entries = !self.wheel.is_empty();
        self.wheel.clear();
        self.peek.forget();
        if had_entries {
            self.waiter.wake();
        }
    }
}

/// Panics for a `key` that names no entry.
#[cold]
#[track_caller]
fn absent(op: &str, key: &Key) -> ! {
    panic!(
        "DelayQueue::{op}: {key:?} is not in the queue (its entry expired, was removed or \
         cleared, or the key is from another queue)"
    )
}
