//! [`TimerWheel<T>`]: the core [`Wheel`] behind a [`TickClock`].

use std::time::{Duration, Instant};

use super::TickClock;
use crate::wheel::{Expired, TimerKey, Wheel};

/// A [`Wheel`] with an `Instant` clock: deadlines are instants, ticks are `resolution` long.
///
/// Deadlines round up to the next tick and `now` rounds down (see the [module
/// docs](super)), so a timer never fires before its deadline instant. Every operation costs
/// what the same [`Wheel`] operation costs plus one conversion of an `Instant` (a subtraction
/// from the origin and a multiply-shift, see [`TickClock`]). A poll that finds nothing due
/// remembers the instant of the wheel's next expiration; until then, or until an insert or
/// reset before it, a poll is one comparison of instants.
///
/// Keys are the [`Wheel`]'s: stale ones touch nothing, and foreign ones (from another
/// wheel) almost never do; [`TimerKey`] says exactly when they may.
///
/// # Example
///
/// ```
/// use std::time::{Duration, Instant};
/// use tickwheel::TimerWheel;
///
/// let origin = Instant::now();
/// let mut timers = TimerWheel::with_origin(origin, Duration::from_millis(1));
/// let key = timers.insert_at(origin + Duration::from_millis(250), "retry");
/// assert!(timers.poll(origin + Duration::from_millis(249)).is_none());
/// let fired = timers.poll(origin + Duration::from_secs(1)).unwrap();
/// assert_eq!((fired.key, fired.value), (key, "retry"));
/// ```
pub struct TimerWheel<T> {
    clock: TickClock,
    wheel: Wheel<T>,
    /// A tick at or before every pending deadline, and the instant it begins: a poll at an
    /// earlier `now` has nothing to return, and returns `None` without converting `now`.
    /// Set by a poll that leaves nothing due; cleared (unknown) by an insert or reset
    /// before it and by [`wheel_mut`](TimerWheel::wheel_mut). Cancels only raise the
    /// earliest deadline, so they keep it.
    quiet: Option<(u64, Instant)>,
}

/// A summary: `TimerWheel { resolution, wheel }`, the second the core [`Wheel`]'s `Debug`
/// (`len`, and `elapsed`, `next_expiration` in ticks, `stale`).
impl<T> std::fmt::Debug for TimerWheel<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimerWheel")
            .field("resolution", &self.clock.resolution())
            .field("wheel", &self.wheel)
            .finish()
    }
}

impl<T> TimerWheel<T> {
    /// An empty wheel with ticks of `resolution`, starting now.
    ///
    /// # Panics
    ///
    /// If `resolution` is zero or longer than `Instant` can represent after the origin
    /// (see [`TickClock::new`]).
    #[track_caller]
    pub fn new(resolution: Duration) -> Self {
        Self::with_origin(Instant::now(), resolution)
    }

    /// An empty wheel with ticks of `resolution` counted from `origin`.
    ///
    /// # Panics
    ///
    /// If `resolution` is zero or longer than `Instant` can represent after the origin
    /// (see [`TickClock::new`]).
    #[track_caller]
    pub fn with_origin(origin: Instant, resolution: Duration) -> Self {
        TimerWheel {
            clock: TickClock::new(origin, resolution),
            wheel: Wheel::new(),
            quiet: None,
        }
    }

    /// An empty wheel with ticks of `resolution`, starting now, with room for `n` timers
    /// before its arena reallocates (see [`Wheel::with_capacity`]): one allocation of `n`
    /// entries up front instead of O(log n) as the wheel grows. For a chosen origin as well,
    /// use [`with_origin`](TimerWheel::with_origin) and then
    /// [`reserve`](TimerWheel::reserve).
    ///
    /// # Panics
    ///
    /// If `resolution` is zero or longer than `Instant` can represent after now (see
    /// [`TickClock::new`]), or if `n` entries exceed
    /// `isize::MAX` bytes (as [`Vec::with_capacity`]).
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use tickwheel::TimerWheel;
    ///
    /// let mut timers = TimerWheel::with_capacity(1_000, Duration::from_millis(1));
    /// let room = timers.capacity();
    /// assert!(room >= 1_000);
    /// for i in 0..1_000 {
    ///     timers.insert(Duration::from_millis(i), i);
    /// }
    /// assert_eq!(timers.capacity(), room); // no reallocation
    /// ```
    #[track_caller]
    pub fn with_capacity(n: usize, resolution: Duration) -> Self {
        TimerWheel {
            clock: TickClock::new(Instant::now(), resolution),
            wheel: Wheel::with_capacity(n),
            quiet: None,
        }
    }

    /// Timers the wheel holds without reallocating. O(1).
    pub fn capacity(&self) -> usize {
        self.wheel.capacity()
    }

    /// Makes room for `additional` timers beyond those pending, without reallocating while
    /// they are inserted; does nothing when there is room already. As [`Wheel::reserve`]:
    /// O(capacity) when it reallocates, else O(1). Unlike a `reserve` through
    /// [`wheel_mut`](TimerWheel::wheel_mut), keeps the remembered next expiration.
    ///
    /// # Panics
    ///
    /// If the new capacity exceeds `isize::MAX` bytes (as [`Vec::reserve`]).
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use tickwheel::TimerWheel;
    ///
    /// let mut timers = TimerWheel::with_origin(Instant::now(), Duration::from_millis(1));
    /// timers.insert(Duration::from_secs(1), "first");
    /// timers.reserve(10);
    /// assert!(timers.capacity() >= 11);
    /// ```
    #[track_caller]
    pub fn reserve(&mut self, additional: usize) {
        self.wheel.reserve(additional);
    }

    /// The tick clock: origin, resolution and conversions.
    pub fn clock(&self) -> &TickClock {
        &self.clock
    }

    /// The underlying tick wheel, for tick-level inspection.
    pub fn wheel(&self) -> &Wheel<T> {
        &self.wheel
    }

    /// The underlying tick wheel, mutably: every tick-level operation
    /// ([`Wheel::reset`] to a tick, [`Wheel::reserve`], [`Wheel::stats`],
    /// [`Wheel::shrink_to_fit`], …) is available through it.
    pub fn wheel_mut(&mut self) -> &mut Wheel<T> {
        self.quiet = None;
        &mut self.wheel
    }

    /// Adds a timer due at `deadline`; an instant already passed fires on the next poll.
    /// O(1) amortised.
    ///
    /// # Panics
    ///
    /// As [`Wheel::insert`]: only with `u32::MAX - 1` timers pending.
    #[track_caller]
    pub fn insert_at(&mut self, deadline: Instant, value: T) -> TimerKey {
        let tick = self.clock.deadline_tick(deadline);
        self.insert_tick(tick, value)
    }

    /// Adds a timer due `delay` from now (`Instant::now()`); O(1) amortised.
    ///
    /// # Panics
    ///
    /// As [`Wheel::insert`].
    #[track_caller]
    pub fn insert(&mut self, delay: Duration, value: T) -> TimerKey {
        let tick = self.delay_tick(delay);
        self.insert_tick(tick, value)
    }

    #[track_caller]
    fn insert_tick(&mut self, tick: u64, value: T) -> TimerKey {
        self.deadline_added(tick);
        self.wheel.insert(tick, value)
    }

    /// A timer may now be due at `tick`: forget a quiet tick after it.
    fn deadline_added(&mut self, tick: u64) {
        if self.quiet.is_some_and(|(quiet, _)| tick < quiet) {
            self.quiet = None;
        }
    }

    /// Cancels a pending timer; `None` for a stale key or (but for the chance [`TimerKey`]
    /// states) a foreign one. O(1) amortised.
    pub fn cancel(&mut self, key: TimerKey) -> Option<T> {
        self.wheel.cancel(key)
    }

    /// Moves a pending timer to `deadline`; `false` for a stale key or (but for the chance
    /// [`TimerKey`] states) a foreign one. O(1) amortised.
    pub fn reset_at(&mut self, key: TimerKey, deadline: Instant) -> bool {
        let tick = self.clock.deadline_tick(deadline);
        let reset = self.wheel.reset(key, tick);
        if reset {
            self.deadline_added(tick);
        }
        reset
    }

    /// The deadline of a pending timer, rounded up to its tick: a [`poll`](Self::poll) at
    /// this instant or later returns the timer. `None` for a stale key or (but for the chance
    /// [`TimerKey`] states) a foreign one, and for a timer that is *never due* (its deadline
    /// saturated, see the [module docs](super); check [`contains`](Self::contains) to tell
    /// them apart). O(1).
    pub fn deadline(&self, key: TimerKey) -> Option<Instant> {
        self.wheel
            .deadline(key)
            .filter(|&tick| tick != u64::MAX)
            .and_then(|tick| self.clock.instant_of(tick))
    }

    /// The value of a pending timer; `None` for a stale key or (but for the chance [`TimerKey`]
    /// states) a foreign one.
    pub fn get(&self, key: TimerKey) -> Option<&T> {
        self.wheel.get(key)
    }

    /// The value of a pending timer, mutably; `None` for a stale key or (but for the chance
    /// [`TimerKey`] states) a foreign one.
    pub fn get_mut(&mut self, key: TimerKey) -> Option<&mut T> {
        self.wheel.get_mut(key)
    }

    /// Whether the key names a pending timer.
    pub fn contains(&self, key: TimerKey) -> bool {
        self.wheel.contains(key)
    }

    /// Takes out the next timer due by `now`, as [`Wheel::poll`] does at `now`'s tick
    /// (rounded down); `None` for a `now` before the origin. The returned [`Expired::deadline`] is in ticks; convert it with
    /// [`TickClock::instant_of`].
    pub fn poll(&mut self, now: Instant) -> Option<Expired<T>> {
        if self.is_quiet(now) {
            return None;
        }
        let expired = self.wheel.poll(self.clock.now_tick(now)?);
        if expired.is_none() {
            self.quiet = self.next_quiet();
        }
        expired
    }

    /// Up to `limit` due timers into `out`, as [`Wheel::poll_into`]; returns how many.
    pub fn poll_into(&mut self, now: Instant, limit: usize, out: &mut Vec<Expired<T>>) -> usize {
        if self.is_quiet(now) {
            return 0;
        }
        let Some(tick) = self.clock.now_tick(now) else {
            return 0;
        };
        let taken = self.wheel.poll_into(tick, limit, out);
        // Fewer than `limit`: nothing due is left at `tick`.
        self.quiet = if taken < limit {
            self.next_quiet()
        } else {
            None
        };
        taken
    }

    /// Whether `now` is before the quiet tick: nothing can be due.
    #[inline]
    fn is_quiet(&self, now: Instant) -> bool {
        self.quiet.is_some_and(|(_, until)| now < until)
    }

    /// The quiet tick after a poll left nothing due: the wheel's next expiration (never
    /// later than the earliest deadline), if `Instant` can represent its start.
    fn next_quiet(&self) -> Option<(u64, Instant)> {
        let tick = self.wheel.next_expiration()?;
        Some((tick, self.clock.instant_of(tick)?))
    }

    /// When the next poll may return something, never later than the earliest deadline
    /// (earlier when that deadline is more than 64 ticks away: then it is when its wheel
    /// slot cascades). `None` when no pending timer will ever fire: none is pending, or
    /// every pending one is *never due* (see the [module docs](super)); check
    /// [`is_empty`](TimerWheel::is_empty) to tell the two apart. A never-due timer never
    /// sets the answer, also where the instant its slot cascades at is representable.
    ///
    /// O(levels), plus a [`Wheel::peek`] when the answer would be a tick at which a
    /// never-due timer's slot cascades.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.wheel
            .next_expiration_or_never()
            .filter(|&tick| tick != u64::MAX)
            .and_then(|tick| self.clock.instant_of(tick))
    }

    /// Pending timers.
    pub fn len(&self) -> usize {
        self.wheel.len()
    }

    /// Whether no timer is pending.
    pub fn is_empty(&self) -> bool {
        self.wheel.is_empty()
    }

    /// Cancels every pending timer; all keys become stale.
    pub fn clear(&mut self) {
        self.quiet = None;
        self.wheel.clear();
    }

    /// Removes stale references and gives unused memory back, as [`Wheel::shrink_to_fit`].
    pub fn shrink_to_fit(&mut self) {
        self.wheel.shrink_to_fit();
    }

    fn delay_tick(&self, delay: Duration) -> u64 {
        match Instant::now().checked_add(delay) {
            Some(deadline) => self.clock.deadline_tick(deadline),
            None => u64::MAX,
        }
    }
}
