//! The scheduler's own `Instant` ↔ tick conversion.
//!
//! Tick `n` is the instant `origin + n × resolution`. Two roundings keep every timer from
//! firing early:
//! - a **deadline** rounds *up* to the first tick at or after it
//!   ([`TickClock::deadline_tick`]);
//! - **now** rounds *down* to the last tick at or before it ([`TickClock::now_tick`]).
//!
//! A timer fires when `deadline_tick ≤ now_tick`, so
//! `at ≤ origin + deadline_tick·res ≤ origin + now_tick·res ≤ now`: never before `at`, and
//! at most one resolution after it (plus however late the poller runs).
//!
//! Edges, none of which panics:
//! - a deadline before the origin is tick 0 (due on the first poll at or after the origin);
//! - a `now` before the origin is no tick at all (`None`): nothing can be due then, since
//!   even tick 0 is the origin itself;
//! - far instants saturate: deadlines at `u64::MAX`, `now` at `u64::MAX - 1`. So a deadline
//!   `u64::MAX` or more ticks after the origin never fires (585 years at 1 ns resolution,
//!   585 million years at 1 ms) — the saturation cannot make a far timer fire early.
//!
//! Arithmetic is done in `u128` nanoseconds, which holds any `Duration`.

use std::time::{Duration, Instant};

/// The largest tick a `now` converts to: one below the saturated deadline tick, so a
/// saturated deadline never fires (see the module doc).
pub(crate) const MAX_NOW_TICK: u64 = u64::MAX - 1;

/// An origin and a resolution: converts instants to ticks and back.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TickClock {
    origin: Instant,
    /// Nanoseconds per tick, at least 1.
    resolution_ns: u128,
    resolution: Duration,
}

impl TickClock {
    /// A clock whose tick 0 is `origin`. A zero `resolution` is the caller's bug; the
    /// builder rejects it before this point, and here it is treated as 1 ns.
    pub(crate) fn new(origin: Instant, resolution: Duration) -> Self {
        let resolution_ns = resolution.as_nanos().max(1);
        TickClock {
            origin,
            resolution_ns,
            resolution,
        }
    }

    pub(crate) fn origin(&self) -> Instant {
        self.origin
    }

    pub(crate) fn resolution(&self) -> Duration {
        self.resolution
    }

    /// The tick a timer due at `at` files under: the first tick at or after `at`.
    /// Before the origin: 0. Beyond the range: `u64::MAX` (never fires).
    pub(crate) fn deadline_tick(&self, at: Instant) -> u64 {
        let since = at.saturating_duration_since(self.origin).as_nanos();
        let ticks = since.div_ceil(self.resolution_ns);
        u64::try_from(ticks).unwrap_or(u64::MAX)
    }

    /// The last tick at or before `now`; `None` when `now` is before the origin. Saturates at
    /// [`MAX_NOW_TICK`].
    pub(crate) fn now_tick(&self, now: Instant) -> Option<u64> {
        let since = now.checked_duration_since(self.origin)?.as_nanos();
        let ticks = since / self.resolution_ns;
        Some(u64::try_from(ticks).map_or(MAX_NOW_TICK, |t| t.min(MAX_NOW_TICK)))
    }

    /// The instant tick `tick` starts at: `origin + tick × resolution`, or the latest
    /// instant this platform can represent on the way there if that overflows.
    pub(crate) fn instant(&self, tick: u64) -> Instant {
        let nanos = (tick as u128).checked_mul(self.resolution_ns);
        match nanos.and_then(nanos_to_duration) {
            Some(d) => saturating_add(self.origin, d),
            None => saturating_add(self.origin, Duration::MAX),
        }
    }
}

/// A `Duration` of `nanos` nanoseconds, if it fits.
fn nanos_to_duration(nanos: u128) -> Option<Duration> {
    let secs = u64::try_from(nanos / 1_000_000_000).ok()?;
    Some(Duration::new(secs, (nanos % 1_000_000_000) as u32))
}

/// `base + d`, or the latest instant `base + x` (`x ≤ d`) that the platform represents.
/// Only absurd durations (centuries past the origin) take the binary search.
fn saturating_add(base: Instant, d: Duration) -> Instant {
    if let Some(at) = base.checked_add(d) {
        return at;
    }
    // Invariant: base + lo fits, base + hi does not.
    let (mut lo, mut hi) = (0u128, d.as_nanos());
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match nanos_to_duration(mid).and_then(|m| base.checked_add(m)) {
            Some(_) => lo = mid,
            None => hi = mid,
        }
    }
    nanos_to_duration(lo)
        .and_then(|m| base.checked_add(m))
        .unwrap_or(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn deadlines_round_up_and_now_rounds_down() {
        let o = Instant::now();
        let c = TickClock::new(o, MS);
        assert_eq!(c.deadline_tick(o), 0);
        assert_eq!(c.deadline_tick(o + Duration::from_nanos(1)), 1);
        assert_eq!(c.deadline_tick(o + MS), 1);
        assert_eq!(c.deadline_tick(o + MS + Duration::from_nanos(1)), 2);
        assert_eq!(c.now_tick(o), Some(0));
        assert_eq!(c.now_tick(o + MS - Duration::from_nanos(1)), Some(0));
        assert_eq!(c.now_tick(o + MS), Some(1));
    }

    #[test]
    fn never_early_across_sub_tick_offsets() {
        let o = Instant::now();
        let c = TickClock::new(o, Duration::from_micros(700));
        for at_ns in (0..5_000_000u64).step_by(37_813) {
            let at = o + Duration::from_nanos(at_ns);
            let tick = c.deadline_tick(at);
            assert!(
                c.instant(tick) >= at,
                "tick {tick} starts before {at_ns} ns"
            );
            for now_ns in (0..5_000_000u64).step_by(41_011) {
                let now = o + Duration::from_nanos(now_ns);
                if c.now_tick(now).is_some_and(|n| n >= tick) {
                    assert!(
                        now >= at,
                        "would fire at {now_ns} ns a timer due at {at_ns} ns"
                    );
                }
            }
        }
    }

    #[test]
    fn before_origin() {
        let o = Instant::now() + Duration::from_secs(10);
        let c = TickClock::new(o, MS);
        let before = o - Duration::from_secs(1);
        assert_eq!(c.deadline_tick(before), 0);
        assert_eq!(c.now_tick(before), None);
    }

    #[test]
    fn far_instants_saturate_and_never_fire() {
        let o = Instant::now();
        let c = TickClock::new(o, Duration::from_nanos(1));
        let far = o + Duration::from_secs(1 << 40);
        assert_eq!(c.deadline_tick(far), u64::MAX);
        assert_eq!(c.now_tick(far), Some(MAX_NOW_TICK));
        assert!(c.now_tick(far).is_some_and(|n| n < c.deadline_tick(far)));
    }

    #[test]
    fn instant_round_trips_and_saturates() {
        let o = Instant::now();
        let c = TickClock::new(o, MS);
        assert_eq!(c.instant(0), o);
        assert_eq!(c.instant(1500), o + Duration::from_millis(1500));
        assert_eq!(c.deadline_tick(c.instant(77)), 77);
        // Far beyond any platform's Instant: must not panic, and must be no earlier than a
        // far but representable instant.
        let top = c.instant(u64::MAX);
        assert!(top >= o + Duration::from_secs(1 << 20));
        let huge = TickClock::new(o, Duration::MAX);
        assert!(huge.instant(u64::MAX) >= o);
    }

    #[test]
    fn zero_resolution_is_one_nanosecond() {
        let o = Instant::now();
        let c = TickClock::new(o, Duration::ZERO);
        assert_eq!(c.deadline_tick(o + Duration::from_nanos(5)), 5);
    }
}
