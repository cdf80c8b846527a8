//! An `Instant`'s seconds and nanoseconds, read without calling into std, for the deadline
//! conversions of [`TickClock`](crate::clock::TickClock) and of the `DelayQueue`.
//!
//! Why: converting a deadline to its tick subtracts the origin from it, and std's
//! `Instant` subtraction is an out-of-line call (two, on Linux) of about 55 instructions:
//! a fifth of a `DelayQueue::insert_at` (callgrind, 1 000 inserts), and about 4 % of the
//! sync scheduler's instructions per operation in compare's workload 7. std offers no other way to read an
//! `Instant`, but its derived `Hash` hands a hasher the platform's representation, field by
//! field, in code generic over the hasher and so inlined here: on Linux, macOS and Windows
//! a whole-seconds integer (`write_i64` or `write_u64`) then the nanoseconds (`write_u32`).
//! [`Recorder`] reads those two back.
//!
//! That representation is no documented contract, so nothing relies on it unchecked: the
//! first queue of a process checks ([`usable`]) that what is read is exactly one seconds
//! integer and one nanoseconds value below 10^9, and that the difference of two readings is
//! the `Duration` std computes, for offsets that cross every carry (a nanosecond, a second
//! less a nanosecond, a second and a half, days, decades, 2^40 seconds). Where any check
//! fails, [`Parts::read`] of the origin is `None` and every conversion takes std's path.

use std::hash::{Hash, Hasher};
use std::sync::OnceLock;

use std::time::{Duration, Instant};

const NANOS_PER_SEC: u32 = 1_000_000_000;

/// An instant as the platform holds it: whole seconds (of an unspecified epoch; only
/// differences mean anything) and nanoseconds below 10^9.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Parts {
    secs: u64,
    nanos: u32,
}

/// A `Hasher` that keeps what an `Instant`'s `Hash` writes instead of hashing it: the first
/// 64-bit integer as the seconds, then one `u32` as the nanoseconds; anything else (another
/// width, a byte slice, a third value) marks the reading unusable.
#[derive(Default)]
struct Recorder {
    secs: Option<u64>,
    nanos: Option<u32>,
    other: bool,
}

impl Recorder {
    #[inline]
    fn seconds(&mut self, v: u64) {
        match self.secs {
            None if self.nanos.is_none() => self.secs = Some(v),
            _ => self.other = true,
        }
    }
}

impl Hasher for Recorder {
    fn finish(&self) -> u64 {
        0
    }
    #[inline]
    fn write(&mut self, _bytes: &[u8]) {
        self.other = true;
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.seconds(v);
    }
    #[inline]
    fn write_i64(&mut self, v: i64) {
        // Two's complement: the difference of two readings wraps to the right `u64`.
        self.seconds(v as u64);
    }
    #[inline]
    fn write_u32(&mut self, v: u32) {
        match (self.secs, self.nanos) {
            (Some(_), None) => self.nanos = Some(v),
            _ => self.other = true,
        }
    }
}

impl Parts {
    /// What `at`'s `Hash` writes, when it is one seconds integer and then nanoseconds below
    /// 10^9; `None` otherwise. Only [`usable`] makes it mean seconds and nanoseconds. `at` is
    /// a std `Instant` or tokio's, whose derived `Hash` writes the std one it wraps.
    #[inline]
    pub(crate) fn read(at: impl Hash) -> Option<Parts> {
        let mut r = Recorder::default();
        at.hash(&mut r);
        match (r.secs, r.nanos, r.other) {
            (Some(secs), Some(nanos), false) if nanos < NANOS_PER_SEC => {
                Some(Parts { secs, nanos })
            }
            _ => None,
        }
    }

    /// `self − earlier` as (whole seconds, nanoseconds below 10^9), for `self` at or after
    /// `earlier` (then the seconds never wrap: the result is below `u64::MAX` seconds).
    #[inline]
    pub(crate) fn since(self, earlier: Parts) -> (u64, u32) {
        let secs = self.secs.wrapping_sub(earlier.secs);
        if self.nanos >= earlier.nanos {
            (secs, self.nanos - earlier.nanos)
        } else {
            (
                secs.wrapping_sub(1),
                self.nanos + NANOS_PER_SEC - earlier.nanos,
            )
        }
    }
}

/// The origin's parts for a queue created at `origin`: `None` when this process's `Instant`
/// does not read back as checked in [`usable`] (then std's subtraction is used).
pub(crate) fn origin_parts(origin: impl Hash) -> Option<Parts> {
    if usable() { Parts::read(origin) } else { None }
}

/// Whether [`Parts::read`] gives seconds and nanoseconds in this process: checked once,
/// against std's own subtraction, from `Instant::now()` to offsets across every carry.
fn usable() -> bool {
    static USABLE: OnceLock<bool> = OnceLock::new();
    *USABLE.get_or_init(|| agrees_from(Instant::now()))
}

/// Whether the readings of `base` and of `base + d` differ by `d`, as std says, for each
/// offset `d` that `Instant` can add to `base`, and at least the small ones can.
fn agrees_from(base: Instant) -> bool {
    const OFFSETS: [Duration; 8] = [
        Duration::from_nanos(1),
        Duration::from_nanos(999_999_999),
        Duration::from_millis(1_500),
        Duration::new(1, 999_999_999),
        Duration::new(86_400 * 3 + 7, 123_456_789),
        Duration::new(86_400 * 365 * 40, 1),
        Duration::new(1 << 40, 500_000_000),
        Duration::new(1 << 40, 999_999_999),
    ];
    let Some(b) = Parts::read(base) else {
        return false;
    };
    OFFSETS.iter().enumerate().all(|(i, &d)| {
        let Some(later) = base.checked_add(d) else {
            return i > 3; // the small offsets must fit
        };
        let Some(l) = Parts::read(later) else {
            return false;
        };
        let (secs, nanos) = l.since(b);
        let ours = Duration::new(secs, nanos);
        ours == d && ours == later.saturating_duration_since(base)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On the platforms the crate is tested on, the fast path is taken: a fallback there
    /// would hide a slower conversion behind passing tests.
    #[test]
    fn this_platform_reads_back() {
        assert!(usable());
        assert!(origin_parts(Instant::now()).is_some());
    }

    #[test]
    fn readings_differ_by_the_duration_between() {
        let base = Instant::now();
        let b = Parts::read(base).expect("readable");
        for nanos in [
            0u64,
            1,
            999_999,
            1_000_000,
            999_999_999,
            1_000_000_000,
            1_000_000_001,
        ] {
            for secs in [0u64, 1, 59, 3_600, 1 << 33] {
                let d = Duration::from_secs(secs) + Duration::from_nanos(nanos);
                let later = base + d;
                let (s, n) = Parts::read(later).expect("readable").since(b);
                assert_eq!(Duration::new(s, n), d, "{d:?}");
            }
        }
    }

    /// A hasher that sees other writes than one seconds integer and one `u32` refuses the
    /// reading: the check that keeps a foreign representation off the fast path.
    #[test]
    fn other_shapes_are_refused() {
        let mut r = Recorder::default();
        r.write_u32(5);
        r.write_u64(7);
        assert!(r.other, "nanoseconds before seconds");
        let mut r = Recorder::default();
        r.write_u64(7);
        r.write_u32(5);
        r.write_u32(6);
        assert!(r.other, "a third value");
        let mut r = Recorder::default();
        r.write_u64(7);
        r.write(&[1, 2]);
        assert!(r.other, "bytes");
        let mut r = Recorder::default();
        r.write_i64(-3);
        r.write_u32(5);
        assert!(!r.other);
        assert_eq!((r.secs, r.nanos), (Some((-3i64) as u64), Some(5)));
    }
}
