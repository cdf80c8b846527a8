//! `Instant` ↔ tick arithmetic for the `DelayQueue`: one tick is one millisecond after the
//! queue's *origin*, the `Instant` captured when the queue was created.
//!
//! - A deadline rounds **up** to the next whole millisecond, so a timer never fires early.
//! - `now` rounds **down**, for the same reason.
//! - An instant before the origin is tick 0 (already due).
//! - A deadline `u64::MAX` ms (584 million years) or more after the origin saturates to
//!   `u64::MAX`, the *never due* tick, and `now` saturates at `u64::MAX - 1`, so such an
//!   entry never comes out rather than early (the rule of `crate::clock`). The core wheel
//!   accepts every `u64`, so no instant is ever rejected, and tokio's 2.2-year limit does
//!   not apply.
//!
//! Going back from a tick to an `Instant` can overflow only at the far end of `Instant`'s
//! range, far beyond `origin + u64::MAX ms` on every tier-1 platform; the two ways back
//! ([`tick_instant`] and [`saturating_instant`]) say what happens then.

use tokio::time::{Duration, Instant};

use crate::parts::Parts;

const NANOS_PER_MS: u32 = 1_000_000;
const MS_PER_SEC: u64 = 1_000;

/// Whole milliseconds in `d`, rounded up; saturates at `u64::MAX`.
#[inline]
fn ms_up(d: Duration) -> u64 {
    ms_up_parts(d.as_secs(), d.subsec_nanos())
}

/// Whole milliseconds in `secs` seconds and `nanos` nanoseconds (below 10^9), rounded up;
/// saturates at `u64::MAX`.
#[inline]
fn ms_up_parts(secs: u64, nanos: u32) -> u64 {
    let sub = nanos.div_ceil(NANOS_PER_MS);
    secs.saturating_mul(MS_PER_SEC)
        .saturating_add(u64::from(sub))
}

/// Whole milliseconds in `d`, rounded down; saturates at `u64::MAX`.
#[inline]
fn ms_down(d: Duration) -> u64 {
    d.as_secs()
        .saturating_mul(MS_PER_SEC)
        .saturating_add(u64::from(d.subsec_millis()))
}

/// The tick of a deadline: milliseconds from `origin` to `when`, rounded up. An instant at or
/// before the origin is tick 0.
#[inline]
pub(super) fn deadline_tick(origin: Instant, when: Instant) -> u64 {
    ms_up(when.saturating_duration_since(origin))
}

/// [`deadline_tick`], with the origin's [`Parts`] read beforehand (`None`: std's path): the
/// same tick for every `when`, without std's out-of-line subtraction.
#[inline]
pub(super) fn deadline_tick_from(origin: Instant, parts: Option<Parts>, when: Instant) -> u64 {
    if when <= origin {
        return 0;
    }
    match (parts, Parts::read(when)) {
        (Some(o), Some(w)) => {
            let (secs, nanos) = w.since(o);
            ms_up_parts(secs, nanos)
        }
        _ => deadline_tick(origin, when),
    }
}

/// The tick of a deadline `timeout` after `now`; `u64::MAX` when `now + timeout` is past the
/// end of `Instant`'s range (a `Duration::MAX` timeout means "never", not a panic).
/// `parts` as for [`deadline_tick_from`].
#[inline]
pub(super) fn timeout_tick(
    origin: Instant,
    parts: Option<Parts>,
    now: Instant,
    timeout: Duration,
) -> u64 {
    now.checked_add(timeout)
        .map_or(u64::MAX, |when| deadline_tick_from(origin, parts, when))
}

/// The last tick a `now` reaches: one below the never-due tick.
pub(super) const MAX_NOW_TICK: u64 = u64::MAX - 1;

/// The tick the clock has reached at `now`: milliseconds from `origin`, rounded down, at
/// most [`MAX_NOW_TICK`] (so a never-due entry never comes out).
#[inline]
pub(super) fn now_tick(origin: Instant, now: Instant) -> u64 {
    ms_down(now.saturating_duration_since(origin)).min(MAX_NOW_TICK)
}

/// The instant at which `tick` begins, or `None` when it lies past the end of `Instant`'s
/// range: the clock can never reach that tick, so nothing needs to sleep until it.
#[inline]
pub(super) fn tick_instant(origin: Instant, tick: u64) -> Option<Instant> {
    origin.checked_add(Duration::from_millis(tick))
}

/// The instant at which `tick` begins, for reporting a deadline; past the end of `Instant`'s
/// range it is the last whole millisecond after `origin` that is representable.
pub(super) fn saturating_instant(origin: Instant, tick: u64) -> Instant {
    if let Some(at) = tick_instant(origin, tick) {
        return at;
    }
    // Binary search: `lo` is always representable (0 is: it is `origin`), `hi` never is.
    let (mut lo, mut hi) = (0u64, tick);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if tick_instant(origin, mid).is_some() {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    origin + Duration::from_millis(lo)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn deadlines_round_up_and_now_rounds_down() {
        let o = Instant::now();
        let ns = Duration::from_nanos;
        assert_eq!(deadline_tick(o, o), 0);
        assert_eq!(
            deadline_tick(o, o + ns(1)),
            1,
            "1 ns after the origin is tick 1, never 0"
        );
        assert_eq!(deadline_tick(o, o + ms(1)), 1);
        assert_eq!(deadline_tick(o, o + ms(1) + ns(1)), 2);
        assert_eq!(now_tick(o, o + ms(1) - ns(1)), 0);
        assert_eq!(now_tick(o, o + ms(1)), 1);
        assert_eq!(now_tick(o, o + ms(2) - ns(1)), 1);
        for n in [0, 1, 999, 1000, 1001, 1 << 36, (1 << 36) + 1] {
            let t = o + ms(n) + ns(1);
            assert!(
                now_tick(o, t) < deadline_tick(o, t),
                "{n}: now {t:?} must not reach its own deadline"
            );
            assert_eq!(
                tick_instant(o, deadline_tick(o, o + ms(n))),
                Some(o + ms(n))
            );
        }
    }

    /// The conversion through the origin's parts rounds as `deadline_tick` does: a deadline
    /// one nanosecond past a millisecond is the next tick, one exactly on it is that tick,
    /// whatever the origin's nanoseconds (every borrow between the two readings), and a
    /// deadline at or before the origin is tick 0.
    #[test]
    fn deadlines_through_parts_round_up() {
        let ns = Duration::from_nanos;
        let base = Instant::now();
        // Origins whose nanoseconds fall all over the second, near its ends included.
        for shift in [0, 1, 333_333_337, 999_999_999, 999_000_001, 500_000_000] {
            let o = base + ns(shift);
            let parts = crate::parts::origin_parts(o);
            assert!(parts.is_some(), "the platform's instants read back");
            let tick = |when| deadline_tick_from(o, parts, when);
            assert_eq!(tick(o), 0);
            assert_eq!(tick(o - ns(1)), 0, "before the origin");
            assert_eq!(
                tick(o + ns(1)),
                1,
                "1 ns after the origin is tick 1, never 0"
            );
            for k in [1u64, 2, 999, 1_000, 1_001, 59_999, 3_600_000, 1 << 36] {
                let at = o + ms(k);
                assert_eq!(tick(at - ns(1)), k, "{shift}: {k} ms less 1 ns");
                assert_eq!(tick(at), k, "{shift}: {k} ms");
                assert_eq!(tick(at + ns(1)), k + 1, "{shift}: {k} ms and 1 ns");
                for when in [
                    at - ns(1),
                    at,
                    at + ns(1),
                    at + ns(999_999),
                    at + ns(999_999_999),
                ] {
                    assert_eq!(tick(when), deadline_tick(o, when), "{shift}: {when:?}");
                }
            }
        }
    }

    #[test]
    fn now_never_reaches_the_never_due_tick() {
        let o = Instant::now();
        let far = Duration::from_millis(u64::MAX);
        let Some(end) = o.checked_add(far) else {
            return; // `Instant` ends before: no `now` can get there at all.
        };
        assert_eq!(deadline_tick(o, end), u64::MAX);
        let parts = crate::parts::origin_parts(o);
        assert_eq!(deadline_tick_from(o, parts, end), u64::MAX);
        assert_eq!(deadline_tick_from(o, parts, end - ms(1)), u64::MAX - 1);
        assert_eq!(now_tick(o, end), MAX_NOW_TICK, "saturates one tick lower");
        if let Some(later) = end.checked_add(Duration::from_secs(3600)) {
            assert_eq!(deadline_tick(o, later), u64::MAX);
            assert_eq!(deadline_tick_from(o, parts, later), u64::MAX, "saturates");
            assert_eq!(now_tick(o, later), MAX_NOW_TICK);
        }
        assert_eq!(now_tick(o, end - ms(1)), MAX_NOW_TICK);
        assert_eq!(now_tick(o, end - ms(2)), MAX_NOW_TICK - 1);
    }

    #[test]
    fn instants_before_the_origin_are_tick_zero() {
        let o = Instant::now() + Duration::from_secs(10);
        assert_eq!(deadline_tick(o, o - ms(5)), 0);
        assert_eq!(now_tick(o, o - ms(5)), 0);
    }

    #[test]
    fn far_deadlines_saturate_instead_of_panicking() {
        let o = Instant::now();
        let three_years = Duration::from_secs(3 * 365 * 86_400);
        assert_eq!(
            deadline_tick(o, o + three_years),
            three_years.as_secs() * 1000
        );
        assert_eq!(timeout_tick(o, None, o, Duration::MAX), u64::MAX);
        assert_eq!(ms_up(Duration::MAX), u64::MAX);
        assert_eq!(ms_down(Duration::MAX), u64::MAX);
        assert_eq!(timeout_tick(o, None, o + ms(7), ms(3)), 10);
        let parts = crate::parts::origin_parts(o);
        assert_eq!(timeout_tick(o, parts, o, Duration::MAX), u64::MAX);
        assert_eq!(timeout_tick(o, parts, o + ms(7), ms(3)), 10);
    }

    #[test]
    fn saturating_instant_stops_at_the_end_of_the_range() {
        // Find (about) the last representable instant, then use it as an origin.
        let base = Instant::now();
        let (mut lo, mut hi) = (0u64, u64::MAX);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if base.checked_add(Duration::from_secs(mid)).is_some() {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let end = base + Duration::from_secs(lo);
        assert_eq!(
            tick_instant(end, 5_000),
            None,
            "one second past the end of the range"
        );
        let reported = saturating_instant(end, 5_000);
        assert!(
            reported
                .checked_duration_since(end)
                .is_some_and(|d| d < ms(1000)),
            "{reported:?} vs {end:?}"
        );
        assert_eq!(saturating_instant(end, 0), end);
    }
}
