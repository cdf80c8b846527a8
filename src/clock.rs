//! Layer 2: the clock adapter, [`TimerWheel<T>`]: a [`Wheel`] addressed by `Instant`.
//!
//! Ticks count whole `resolution`s since an origin `Instant`. The two roundings are chosen so
//! that a timer is never early:
//!
//! ```text
//! origin        tick 1        tick 2        tick 3
//!   |-------------|-------------|-------------|
//!                      ^ deadline            -> tick 2 (rounded up)
//!                      ^ now                 -> tick 1 (rounded down)
//! ```
//!
//! A deadline rounds *up* to the next tick boundary and `now` rounds *down*, so a timer fires
//! when `deadline_tick ≤ now_tick`, that is when
//! `at ≤ origin + deadline_tick·res ≤ origin + now_tick·res ≤ now`: never before its
//! instant, and at most one resolution after it plus however late the caller polls.
//!
//! Edges, none of which panics:
//! - a deadline before the origin is tick 0 (due on the first poll at or after the origin);
//! - a `now` before the origin is no tick at all (`None`): even tick 0 is the origin itself,
//!   so nothing can be due yet;
//! - far instants saturate, by the one rule every layer with a clock keeps (README,
//!   "Whole range"): a deadline whose tick would not fit below `u64::MAX`, or whose tick
//!   `Instant` cannot represent, is *never due* and files at tick `u64::MAX`; `now` saturates
//!   at `u64::MAX - 1`, so a never-due timer never fires rather than firing early, and every
//!   other timer fires once `now` reaches the instant its tick begins. Deadlines are
//!   reported the same way: a never-due timer has no deadline instant (`None`).
//!
//! The one error: a resolution that is zero, or so long that `origin + resolution` (tick 1)
//! is past what `Instant` can represent, is rejected ([`TickClock::try_new`] answers `None`,
//! the constructors panic): with it no timer could ever fire and every deadline would read
//! as `None`.

use std::time::{Duration, Instant};

use crate::parts::{self, Parts};
#[cfg(doc)]
use crate::wheel::Wheel;

mod timer_wheel;

pub use timer_wheel::TimerWheel;

/// Converts between `Instant` and ticks of a fixed resolution since an origin.
///
/// Converting an instant costs a subtraction from the origin, a multiplication and a
/// multiply-shift (no division) as long as the instant lies within 584 years of the origin
/// and the resolution is shorter than that; beyond, an exact `u128` division.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TickClock {
    origin: Instant,
    /// Nanoseconds per tick, at least 1; `u128` so that any `Duration` fits.
    resolution_nanos: u128,
    /// `resolution_nanos` as a divisor prepared for `u64` dividends; `None` when the
    /// resolution does not fit in a `u64` of nanoseconds (over 584 years).
    divisor: Option<Reciprocal>,
    /// `origin` as read by `Parts::read`, to subtract it from an instant without std's
    /// out-of-line subtraction; `None` where this platform's `Instant` does not read back
    /// (see `parts.rs`): then std's subtraction is used.
    origin_parts: Option<Parts>,
}

impl TickClock {
    /// The largest tick a `now` converts to: one below the saturated deadline tick, so a
    /// deadline too far to represent never fires.
    pub const MAX_NOW_TICK: u64 = u64::MAX - 1;

    /// A clock with ticks of `resolution` counted from `origin`.
    ///
    /// # Panics
    ///
    /// If `resolution` is zero, or so long that `origin + resolution` cannot be represented
    /// as an `Instant` (e.g. `Duration::MAX`): see [`try_new`](TickClock::try_new).
    #[track_caller]
    pub fn new(origin: Instant, resolution: Duration) -> Self {
        match Self::try_new(origin, resolution) {
            Some(clock) => clock,
            None => panic!(
                "tickwheel: resolution must be longer than zero and short enough that \
                 origin + resolution is a representable Instant, got {resolution:?}"
            ),
        }
    }

    /// [`TickClock::new`] that returns `None` instead of panicking: for a zero resolution,
    /// and for one so long that tick 1 (`origin + resolution`) is not a representable
    /// `Instant`, so that no timer could ever fire.
    pub fn try_new(origin: Instant, resolution: Duration) -> Option<Self> {
        let nanos = Some(resolution.as_nanos()).filter(|&n| n > 0)?;
        origin.checked_add(resolution)?;
        Some(TickClock {
            origin,
            resolution_nanos: nanos,
            divisor: u64::try_from(nanos).ok().map(Reciprocal::new),
            origin_parts: parts::origin_parts(origin),
        })
    }

    /// The instant of tick 0.
    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// The length of one tick.
    pub fn resolution(&self) -> Duration {
        nanos_to_duration(self.resolution_nanos).unwrap_or(Duration::MAX)
    }

    /// The first tick at or after `instant` (rounds up): the tick a deadline files at.
    /// Instants at or before the origin give 0. A far instant saturates at `u64::MAX`, the
    /// *never due* tick (see the [module docs](self)): one whose tick would be `u64::MAX` or
    /// more, or whose tick begins past what `Instant` can represent.
    ///
    /// O(1): a multiply-shift when `instant` is within 584 years of the origin (see
    /// [`TickClock`]), else a `u128` division and one `Instant` addition.
    #[inline]
    pub fn deadline_tick(&self, instant: Instant) -> u64 {
        if let (Some(nanos), Some(divisor)) = (self.nanos_after_origin(instant), self.divisor) {
            // As below, without std's subtraction.
            return divisor.div_ceil(nanos);
        }
        self.deadline_tick_std(instant)
    }

    /// [`deadline_tick`](Self::deadline_tick) through std's subtraction (out of line: the
    /// common case above stays small enough to inline).
    #[cold]
    #[inline(never)]
    fn deadline_tick_std(&self, instant: Instant) -> u64 {
        let since = instant.saturating_duration_since(self.origin);
        if let (Some(nanos), Some(divisor)) = (nanos_u64(since), self.divisor) {
            // No saturation: the quotient is at most `nanos`, which is below `u64::MAX`, and
            // the tick begins less than 1 169 years after the origin (584 years, rounded up
            // by less than a resolution under 584 years): representable wherever the
            // origin is more than that before the end of `Instant`'s range.
            return divisor.div_ceil(nanos);
        }
        let ticks = since.as_nanos().div_ceil(self.resolution_nanos);
        match u64::try_from(ticks) {
            Ok(tick) if tick < u64::MAX && self.instant_of(tick).is_some() => tick,
            _ => u64::MAX,
        }
    }

    /// The last tick at or before `instant` (rounds down): the tick a `now` polls at.
    /// `None` before the origin; saturates at [`TickClock::MAX_NOW_TICK`]. O(1), as
    /// [`deadline_tick`](TickClock::deadline_tick).
    #[inline]
    pub fn now_tick(&self, instant: Instant) -> Option<u64> {
        if instant >= self.origin {
            if let (Some(nanos), Some(divisor)) = (self.nanos_after_origin(instant), self.divisor) {
                // As below, without std's subtraction.
                return Some(divisor.div_floor(nanos).min(Self::MAX_NOW_TICK));
            }
        }
        self.now_tick_std(instant)
    }

    /// [`now_tick`](Self::now_tick) through std's subtraction (out of line, as
    /// `deadline_tick_std`).
    #[cold]
    #[inline(never)]
    fn now_tick_std(&self, instant: Instant) -> Option<u64> {
        let since = instant.checked_duration_since(self.origin)?;
        let ticks = match (nanos_u64(since), self.divisor) {
            (Some(nanos), Some(divisor)) => u128::from(divisor.div_floor(nanos)),
            _ => since.as_nanos() / self.resolution_nanos,
        };
        Some(u64::try_from(ticks).map_or(Self::MAX_NOW_TICK, |t| t.min(Self::MAX_NOW_TICK)))
    }

    /// Nanoseconds from the origin to `instant`, 0 for an instant before the origin, as
    /// `instant.saturating_duration_since(origin)` gives them, read through the instants'
    /// parts (see `parts.rs`); `None` when this platform's instants do not read back or the
    /// count does not fit in a `u64` (over 584 years): the caller takes std's path then.
    #[inline]
    pub(crate) fn nanos_after_origin(&self, instant: Instant) -> Option<u64> {
        if instant <= self.origin {
            return self.origin_parts.map(|_| 0);
        }
        let (secs, nanos) = Parts::read(instant)?.since(self.origin_parts?);
        secs.checked_mul(1_000_000_000)?
            .checked_add(u64::from(nanos))
    }

    /// The instant at which `tick` begins, or `None` if it is too far ahead for `Instant`.
    /// This is plain arithmetic: for tick `u64::MAX`, the never-due tick, it answers the
    /// instant that tick would begin at, if representable (no `now` ever reaches it).
    pub fn instant_of(&self, tick: u64) -> Option<Instant> {
        // Within 584 years of the origin: `u64` nanoseconds, no `u128` division.
        if let Some(nanos) = self.divisor.and_then(|d| tick.checked_mul(d.divisor)) {
            return self.origin.checked_add(Duration::from_nanos(nanos));
        }
        let nanos = u128::from(tick).checked_mul(self.resolution_nanos)?;
        self.origin.checked_add(nanos_to_duration(nanos)?)
    }

    /// The instant at which `tick` begins, or, when that is too far ahead for `Instant`, the
    /// latest instant the platform can represent on the way there (found by bisection; only
    /// instants centuries past the origin take that path). Never earlier than the origin, so
    /// a sleep until it is never early.
    pub fn instant_saturating(&self, tick: u64) -> Instant {
        let nanos = u128::from(tick).saturating_mul(self.resolution_nanos);
        let fits = |n: u128| nanos_to_duration(n).and_then(|d| self.origin.checked_add(d));
        if let Some(at) = fits(nanos) {
            return at;
        }
        // Invariant: `origin + lo` is representable (0 is the origin), `origin + hi` is not.
        let (mut lo, mut hi) = (0u128, nanos);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if fits(mid).is_some() {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        fits(lo).unwrap_or(self.origin)
    }
}

/// `d` in whole nanoseconds, if that fits in a `u64`: durations under 584 years.
#[inline]
fn nanos_u64(d: Duration) -> Option<u64> {
    const NANOS_PER_SEC: u64 = 1_000_000_000;
    d.as_secs()
        .checked_mul(NANOS_PER_SEC)?
        .checked_add(u64::from(d.subsec_nanos()))
}

/// A `u64` divisor `d ≥ 1` prepared so that dividing by it is a multiply-shift, exact for
/// every `u64` dividend (Granlund & Montgomery, "Division by Invariant Integers using
/// Multiplication", PLDI 1994, theorem 4.2 with N = 64).
///
/// With `ℓ = ⌈log2 d⌉` and the 65-bit multiplier `m = 2^64 + magic`, where
/// `magic = ⌊2^64·(2^ℓ − d) / d⌋ + 1`, every `n < 2^64` has `⌊n / d⌋ = ⌊m·n / 2^(64+ℓ)⌋`.
/// `m·n` takes 129 bits, so it is computed as `(⌊magic·n / 2^64⌋ + n) >> ℓ`: a 64×64→128
/// multiply, an add and a shift, all within `u128`. Example, d = 10^6 (1 ms): ℓ = 20,
/// magic = ⌊2^64·48 576 / 10^6⌋ + 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Reciprocal {
    divisor: u64,
    /// `⌊2^64·(2^shift − divisor) / divisor⌋ + 1`: the multiplier less its 2^64 bit. Below
    /// 2^64 because `2^shift − divisor < divisor` (`shift` is the smallest with `2^shift ≥
    /// divisor`); 1 for a power of two.
    magic: u64,
    /// `⌈log2 divisor⌉`, 0 to 64.
    shift: u32,
}

impl Reciprocal {
    /// Prepares `divisor`, which must be at least 1 (checked in debug builds; 0 would give
    /// wrong quotients, never a panic).
    fn new(divisor: u64) -> Self {
        debug_assert!(divisor >= 1, "a tick is at least 1 ns, got {divisor}");
        // ⌈log2 d⌉: 0 for d = 1, else one more than the highest bit of d − 1.
        let shift = u64::BITS - divisor.saturating_sub(1).leading_zeros();
        let d = u128::from(divisor.max(1));
        // 2^shift − d < d ≤ 2^63 when shift ≤ 64, so `excess << 64` fits in a `u128`.
        let excess = (1u128 << shift) - d;
        let magic = u64::try_from((excess << 64) / d + 1).unwrap_or(u64::MAX);
        Reciprocal {
            divisor,
            magic,
            shift,
        }
    }

    /// `⌊n / divisor⌋`, exactly.
    #[inline]
    fn div_floor(self, n: u64) -> u64 {
        let high = (u128::from(n) * u128::from(self.magic)) >> 64;
        // `high + n < 2^65` and the shift is at least `log2 divisor`: the result fits.
        ((high + u128::from(n)) >> self.shift) as u64
    }

    /// `⌈n / divisor⌉`, exactly: the floor, plus one when the division leaves a remainder.
    #[inline]
    fn div_ceil(self, n: u64) -> u64 {
        let q = self.div_floor(n);
        // `q·divisor ≤ n`: no overflow.
        q + u64::from(q * self.divisor != n)
    }
}

/// A `Duration` of `nanos` nanoseconds, if it fits.
fn nanos_to_duration(nanos: u128) -> Option<Duration> {
    let secs = u64::try_from(nanos / 1_000_000_000).ok()?;
    Some(Duration::new(secs, (nanos % 1_000_000_000) as u32))
}

#[cfg(test)]
mod tests;
