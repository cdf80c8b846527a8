//! Deadlines on disk: `Instant`s live only as long as the process, so records carry
//! wall-clock deadlines, UNIX microseconds, rounded up (a deadline can only get later by
//! the round trip). The mapping uses an anchor pair (an `Instant` and the wall clock read
//! together), re-read by the writer thread about once a second so that drift between the
//! two clocks over a long run does not accumulate.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Maps `Instant`s to wall-clock microseconds and back.
#[derive(Debug)]
pub(crate) struct WallClock {
    base: Instant,
    /// Wall-clock µs at `base`, as last measured.
    offset_us: AtomicI64,
}

fn wall_now_us() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_micros()).unwrap_or(i64::MAX),
    }
}

/// Signed µs from `base` to `at`, rounded up.
fn micros_since(base: Instant, at: Instant) -> i64 {
    match at.checked_duration_since(base) {
        Some(d) => i64::try_from(d.as_nanos().div_ceil(1000)).unwrap_or(i64::MAX),
        // Before `base`: round towards `base` (later).
        None => -i64::try_from(base.duration_since(at).as_micros()).unwrap_or(i64::MAX),
    }
}

impl WallClock {
    pub(crate) fn new() -> Self {
        let clock = WallClock {
            base: Instant::now(),
            offset_us: AtomicI64::new(0),
        };
        clock.refresh();
        clock
    }

    /// Re-reads both clocks.
    pub(crate) fn refresh(&self) {
        let now = Instant::now();
        let wall = wall_now_us();
        self.offset_us.store(
            wall.saturating_sub(micros_since(self.base, now)),
            Ordering::Relaxed,
        );
    }

    /// `at` as UNIX µs, rounded up; saturates at the ends of `u64` (a deadline before 1970
    /// is stored as 0: due at once, which it is).
    pub(crate) fn to_wall(&self, at: Instant) -> u64 {
        let us = self
            .offset_us
            .load(Ordering::Relaxed)
            .saturating_add(micros_since(self.base, at));
        u64::try_from(us).unwrap_or(0)
    }

    /// UNIX µs back to an `Instant` of this process: `now` plus how far the deadline is
    /// ahead of the wall clock now; a deadline already past maps to `now` or earlier (due
    /// at once either way).
    #[cfg(test)]
    pub(crate) fn instant_now_of(&self, wall_us: u64) -> Instant {
        self.instant_of(wall_us, Instant::now())
    }

    /// As `instant_now_of`, with `now` given (the wall clock's reading is this clock's mapping of
    /// it, so a batch of conversions shares one reading).
    pub(crate) fn instant_of(&self, wall_us: u64, now: Instant) -> Instant {
        let wall_now = self.to_wall(now);
        if wall_us >= wall_now {
            let ahead = Duration::from_micros(wall_us - wall_now);
            // Beyond `Instant`'s range: as far as it goes (it never fires then either).
            now.checked_add(ahead).unwrap_or_else(|| far_future(now))
        } else {
            now.checked_sub(Duration::from_micros(wall_now - wall_us))
                .unwrap_or(now)
        }
    }
}

/// The latest `Instant` reachable from `now` by halving steps.
fn far_future(now: Instant) -> Instant {
    let mut at = now;
    let mut step = Duration::from_secs(u64::MAX / 4);
    while step > Duration::from_secs(1) {
        if let Some(next) = at.checked_add(step) {
            at = next;
        } else {
            step /= 2;
        }
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_never_earlier() {
        let clock = WallClock::new();
        let now = Instant::now();
        for ms in [0u64, 1, 999, 60_000, 86_400_000] {
            let at = now + Duration::from_millis(ms) + Duration::from_nanos(1);
            let back = clock.instant_now_of(clock.to_wall(at));
            // The round trip re-reads the clocks: allow their read jitter only upwards.
            assert!(
                back + Duration::from_millis(5) >= at,
                "{ms}: {back:?} < {at:?}"
            );
            assert!(back <= at + Duration::from_millis(50), "{ms}: drifted");
        }
    }

    #[test]
    fn rounds_up_to_the_microsecond() {
        let clock = WallClock::new();
        let at = clock.base + Duration::from_nanos(1_001);
        let base = clock.to_wall(clock.base);
        assert_eq!(clock.to_wall(at), base + 2);
        assert_eq!(
            clock.to_wall(clock.base + Duration::from_micros(1)),
            base + 1
        );
    }

    #[test]
    fn extremes_saturate() {
        let clock = WallClock::new();
        let far = far_future(Instant::now());
        assert!(clock.to_wall(far) > clock.to_wall(Instant::now()));
        assert!(clock.instant_now_of(u64::MAX) > Instant::now() + Duration::from_secs(1 << 40));
        assert!(clock.instant_now_of(0) <= Instant::now());
    }
}
