//! Snapshots of a frozen queue for moving it to another host (feature `serde`), and the
//! conversion of deadlines between this host's monotonic clock and a **reference clock**
//! that both hosts read (for a Redis handoff, Redis `TIME`).
//!
//! An `Instant` means nothing on another host, and wall clocks disagree between hosts. So a
//! deadline crosses as an absolute time on the reference clock, in µs since the Unix epoch:
//! each host converts it with its own pair of readings (its `Instant` and the reference
//! clock, read one right after the other), so the hosts' skew cancels out.
//!
//! **Rounding can only make a deadline later**, never earlier:
//! - on export ([`to_reference`]) `local_now` is read *before* the reference clock, so the
//!   time left is over-estimated by however long the reading took; the time left is rounded
//!   up to whole µs, and 1 µs is added for a future deadline because a reference reading is
//!   truncated to whole µs (the reference time when it was read may be up to 1 µs later);
//! - on import ([`from_reference`]) `local_now` is read *after* the reference clock, so the
//!   time left is again over-estimated;
//! - a deadline already past on export maps to the reference reading itself, and one past
//!   on import maps to `local_now`: due now, never dropped;
//! - all arithmetic saturates: no input panics.
//!
//! So across a move a deadline is late by at most the time between each pair of readings
//! plus 2 µs (and by the reference clock's own error between the two readings).
//!
//! ```
//! use std::time::{Duration, Instant};
//! use tickwheel::sync::FrozenEntry;
//! use tickwheel::sync::snapshot::Snapshot;
//!
//! // Source: local clock first, then the reference clock.
//! let local = Instant::now();
//! let reference_us = 1_700_000_000_000_000;
//! let entries = vec![FrozenEntry { id: 7u64, at: local + Duration::from_secs(60), value: "m" }];
//! let snapshot = Snapshot::export("example.com", entries, local, reference_us);
//! let json = serde_json::to_string(&snapshot).unwrap();
//!
//! // Target, 5 s later by the reference clock: reference first, then its local clock.
//! let snapshot: Snapshot<String, u64, String> = serde_json::from_str(&json).unwrap();
//! let target_now = Instant::now();
//! let entries = snapshot.into_entries(reference_us + 5_000_000, target_now).unwrap();
//! let left = entries[0].at - target_now;
//! assert!(left >= Duration::from_secs(55) && left <= Duration::from_micros(55_000_002));
//! ```

use std::fmt;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::freeze::FrozenEntry;

/// The version [`Snapshot::export`] writes and [`Snapshot::into_entries`] reads.
pub const SNAPSHOT_VERSION: u32 = 1;

/// A queue's timers on their way to another host: the queue name, and the entries in
/// delivery order with their deadlines on the reference clock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot<Q, K, T> {
    /// [`SNAPSHOT_VERSION`] when written by this version of the crate.
    pub version: u32,
    /// The queue's name.
    pub queue: Q,
    /// The timers, in delivery order.
    pub entries: Vec<SnapshotEntry<K, T>>,
}

/// One timer of a [`Snapshot`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotEntry<K, T> {
    /// The timer's id.
    pub id: K,
    /// Its deadline: µs since the Unix epoch, on the reference clock.
    pub deadline_us: u64,
    /// Its value.
    pub value: T,
}

impl<K, T> SnapshotEntry<K, T> {
    /// This timer as an entry for `Scheduler::import`, its deadline converted to this host's
    /// clock with [`from_reference`] (read the reference clock first, then `local_now`: a
    /// deadline can then only come out later). O(1); never panics (a deadline past the range
    /// of `Instant` saturates).
    pub fn into_frozen(self, reference_now_us: u64, local_now: Instant) -> FrozenEntry<K, T> {
        FrozenEntry {
            id: self.id,
            at: from_reference(self.deadline_us, reference_now_us, local_now),
            value: self.value,
        }
    }
}

/// Why [`Snapshot::into_entries`] refused a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SnapshotError {
    /// Written in a version this crate does not read; holds it.
    UnknownVersion(u32),
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnapshotError::UnknownVersion(v) => write!(
                f,
                "unknown snapshot version {v} (this version reads {SNAPSHOT_VERSION})"
            ),
        }
    }
}

impl std::error::Error for SnapshotError {}

/// A deadline on this host's monotonic clock → µs since the Unix epoch on the reference
/// clock. `local_now` must be read **before** the reference clock was read as
/// `reference_now_us`, so the time left is over-estimated (only later). The time left is
/// rounded up to whole µs, plus 1 µs for the reference reading's truncation; a deadline at
/// or before `local_now` maps to `reference_now_us` (due now). Saturates at `u64::MAX`, which
/// [`from_reference`] reads as "never due" (a saturated deadline cannot come back earlier).
/// O(1); never panics.
///
/// ```
/// use std::time::{Duration, Instant};
/// use tickwheel::sync::snapshot::to_reference;
///
/// let now = Instant::now();
/// assert_eq!(to_reference(now + Duration::from_nanos(1_500), now, 1_000), 1_003);
/// assert_eq!(to_reference(now, now + Duration::from_secs(1), 1_000), 1_000, "past: now");
/// assert_eq!(to_reference(now + Duration::from_secs(1), now, u64::MAX - 5), u64::MAX);
/// ```
pub fn to_reference(at: Instant, local_now: Instant, reference_now_us: u64) -> u64 {
    let left = at.saturating_duration_since(local_now);
    if left.is_zero() {
        return reference_now_us;
    }
    let micros = left.as_nanos().div_ceil(1_000);
    let micros = u64::try_from(micros).unwrap_or(u64::MAX);
    reference_now_us.saturating_add(micros).saturating_add(1)
}

/// µs since the Unix epoch on the reference clock → a deadline on this host's monotonic
/// clock. `local_now` must be read **after** the reference clock was read as
/// `reference_now_us`, so the time left is over-estimated (only later). A deadline at or
/// before `reference_now_us` maps to `local_now` (due now). `u64::MAX` is the saturated
/// deadline of [`to_reference`]: it maps to the latest `Instant` (below), whatever
/// `reference_now_us` is, so that no saturated deadline comes back earlier than it went out.
/// O(1) (O(128) when saturating); never panics.
///
/// If `local_now` plus the time left is beyond what an `Instant` can hold on this platform,
/// the result is the latest `Instant` it can hold (found by halving steps): a timer with such
/// a deadline is in practice never due — in a `Scheduler` it never fires once its deadline
/// tick saturates (see [`Scheduler::schedule`](super::Scheduler::schedule)).
///
/// ```
/// use std::time::{Duration, Instant};
/// use tickwheel::sync::snapshot::from_reference;
///
/// let now = Instant::now();
/// assert_eq!(from_reference(3_000, 1_000, now), now + Duration::from_micros(2_000));
/// assert_eq!(from_reference(500, 1_000, now), now, "past: due now");
/// assert!(from_reference(u64::MAX, 0, now) > now, "saturates, no panic");
/// // A saturated deadline stays saturated, however late the reference clock reads.
/// assert!(from_reference(u64::MAX, u64::MAX - 1, now) > now + Duration::from_secs(3_600));
/// ```
pub fn from_reference(deadline_us: u64, reference_now_us: u64, local_now: Instant) -> Instant {
    if deadline_us == u64::MAX {
        return latest_after(local_now);
    }
    let left = Duration::from_micros(deadline_us.saturating_sub(reference_now_us));
    local_now
        .checked_add(left)
        .unwrap_or_else(|| latest_after(local_now))
}

/// The latest `Instant` at or after `from` that this platform can represent.
fn latest_after(from: Instant) -> Instant {
    let mut at = from;
    let mut step = Duration::MAX;
    while !step.is_zero() {
        while let Some(later) = at.checked_add(step) {
            at = later;
        }
        step /= 2;
    }
    at
}

impl<Q, K, T> Snapshot<Q, K, T> {
    /// A snapshot of `queue` holding `entries` (keep them in delivery order, as
    /// `freeze_queue` and `take_forwarded` give them), with each deadline converted by
    /// [`to_reference`]: read `local_now` **before** the reference clock. O(entries).
    ///
    /// ```
    /// use std::time::Instant;
    /// use tickwheel::sync::FrozenEntry;
    /// use tickwheel::sync::snapshot::{SNAPSHOT_VERSION, Snapshot};
    ///
    /// let now = Instant::now();
    /// let s = Snapshot::export("q", vec![FrozenEntry { id: 1, at: now, value: () }], now, 42);
    /// assert_eq!((s.version, s.entries[0].deadline_us), (SNAPSHOT_VERSION, 42));
    /// ```
    pub fn export(
        queue: Q,
        entries: Vec<FrozenEntry<K, T>>,
        local_now: Instant,
        reference_now_us: u64,
    ) -> Self {
        let entries = entries
            .into_iter()
            .map(|FrozenEntry { id, at, value }| SnapshotEntry {
                id,
                deadline_us: to_reference(at, local_now, reference_now_us),
                value,
            })
            .collect();
        Snapshot {
            version: SNAPSHOT_VERSION,
            queue,
            entries,
        }
    }

    /// The entries, in the snapshot's order, with each deadline converted by
    /// [`from_reference`]: read the reference clock first, then `local_now`. Ready for
    /// [`Scheduler::import`](super::Scheduler::import). O(entries).
    ///
    /// # Errors
    ///
    /// [`SnapshotError::UnknownVersion`] if `version` is not [`SNAPSHOT_VERSION`].
    ///
    /// ```
    /// use std::time::Instant;
    /// use tickwheel::sync::snapshot::{Snapshot, SnapshotError};
    ///
    /// let s: Snapshot<&str, u32, ()> = Snapshot { version: 9, queue: "q", entries: vec![] };
    /// assert_eq!(s.into_entries(0, Instant::now()), Err(SnapshotError::UnknownVersion(9)));
    /// ```
    pub fn into_entries(
        self,
        reference_now_us: u64,
        local_now: Instant,
    ) -> Result<Vec<FrozenEntry<K, T>>, SnapshotError> {
        if self.version != SNAPSHOT_VERSION {
            return Err(SnapshotError::UnknownVersion(self.version));
        }
        Ok(self
            .entries
            .into_iter()
            .map(|e| e.into_frozen(reference_now_us, local_now))
            .collect())
    }
}
