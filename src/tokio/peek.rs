//! `DelayQueue::peek` on top of a wheel that cannot name its earliest timer.
//!
//! The core [`Wheel`] answers *when* the next timer may be due
//! ([`Wheel::next_expiration`]) but not *which* one, and it has no iterator. So the queue
//! keeps a log of the keys it inserted and `peek` scans it: O(live) per call after a change,
//! O(1) when nothing changed since the last `peek` (the answer is cached). This is an interim
//! design: once the core has a `peek`, this module goes away.
//!
//! # The order `peek` promises
//!
//! tokio-util promises that `peek` names the entry `poll_expired` yields next. The scan picks
//! the smallest deadline, ties broken by insertion order, which is the wheel's own order for
//! entries never reset; for reset entries the wheel's order within one tick is its own. So
//! the promise is kept by construction instead: while a cached answer is valid (no change
//! since the `peek`), `poll_expired` yields exactly that entry once it is due
//! ([`PeekIndex::take_due`]). Nothing else can be due before it: it has the smallest
//! deadline.
//!
//! # Memory
//!
//! The log holds every live key once plus stale keys (entries that expired or were removed).
//! It drops the stale ones when an insert finds it at `2 × live + 64` keys, or a removal at
//! `4 × live + 64`; so it never holds more than `4 × live + 65` keys (8 bytes each), and each
//! compaction is paid for by the inserts or removals since the last one: O(1) amortised.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::{TimerKey, Wheel};

/// No cached answer. `u64::MAX` is never a key: the core never issues index `u32::MAX`.
const NONE: u64 = u64::MAX;

/// Stale log entries tolerated on top of a multiple of `live` before a compaction.
const SLACK: usize = 64;

#[derive(Debug)]
pub(super) struct PeekIndex {
    /// Keys in insertion order; some are stale.
    log: Vec<TimerKey>,
    /// The last answer of `peek`, packed with `TimerKey::to_u64`, or `NONE`. Valid until the
    /// next change to the queue (every `&mut` path calls [`PeekIndex::changed`]). Atomic only
    /// so that `peek(&self)` can fill it while the queue stays `Sync`; `Relaxed` is enough:
    /// writers through `&self` all store the same answer.
    cached: AtomicU64,
}

impl Default for PeekIndex {
    fn default() -> Self {
        PeekIndex {
            log: Vec::new(),
            cached: AtomicU64::new(NONE),
        }
    }
}

impl PeekIndex {
    /// An empty index with room in its log for `capacity` keys.
    pub(super) fn with_capacity(capacity: usize) -> Self {
        PeekIndex {
            log: Vec::with_capacity(capacity),
            ..PeekIndex::default()
        }
    }

    /// Records a new key. O(1) amortised.
    pub(super) fn inserted<T>(&mut self, key: TimerKey, wheel: &Wheel<T>) {
        self.changed();
        if self.log.len() >= 2 * wheel.len() + SLACK {
            self.log.retain(|&k| wheel.contains(k));
        }
        self.log.push(key);
    }

    /// An entry left the queue (removed, or yielded by a poll). O(1) amortised.
    pub(super) fn removed<T>(&mut self, wheel: &Wheel<T>) {
        self.changed();
        if self.log.len() > 4 * wheel.len() + SLACK {
            self.log.retain(|&k| wheel.contains(k));
        }
    }

    /// The queue changed: the cached answer may be wrong.
    pub(super) fn changed(&mut self) {
        *self.cached.get_mut() = NONE;
    }

    /// The key with the smallest deadline, ties in insertion order; `None` when the wheel is
    /// empty. O(1) if cached, else O(length of the log).
    pub(super) fn peek<T>(&self, wheel: &Wheel<T>) -> Option<TimerKey> {
        let cached = self.cached.load(Ordering::Relaxed);
        if cached != NONE {
            return Some(TimerKey::from_u64(cached));
        }
        let mut best: Option<(u64, TimerKey)> = None;
        for &key in &self.log {
            if let Some(deadline) = wheel.deadline(key) {
                if best.is_none_or(|(d, _)| deadline < d) {
                    best = Some((deadline, key));
                }
            }
        }
        let (_, key) = best?;
        self.cached.store(key.to_u64(), Ordering::Relaxed);
        Some(key)
    }

    /// The cached answer of the last `peek`, if it is due at `now`: `poll_expired` must yield
    /// it next (and then call [`PeekIndex::removed`]).
    pub(super) fn take_due<T>(&mut self, wheel: &Wheel<T>, now: u64) -> Option<TimerKey> {
        let cached = *self.cached.get_mut();
        if cached == NONE {
            return None;
        }
        let key = TimerKey::from_u64(cached);
        debug_assert!(
            wheel.contains(key),
            "a cached peek names a pending entry: {key:?}"
        );
        wheel.deadline(key).is_some_and(|d| d <= now).then_some(key)
    }

    /// Every key became stale.
    pub(super) fn clear(&mut self) {
        self.changed();
        self.log.clear();
    }

    /// Drops stale keys and gives the spare capacity back. Keeps the cache: the order did not
    /// change.
    pub(super) fn shrink_to_fit<T>(&mut self, wheel: &Wheel<T>) {
        self.log.retain(|&k| wheel.contains(k));
        self.log.shrink_to_fit();
    }

    #[cfg(test)]
    fn log_len(&self) -> usize {
        self.log.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smallest_deadline_first_then_insertion_order() {
        let mut wheel = Wheel::new();
        let mut index = PeekIndex::default();
        for (deadline, name) in [(30, "c"), (10, "a1"), (20, "b"), (10, "a2")] {
            let key = wheel.insert(deadline, name);
            index.inserted(key, &wheel);
        }
        let first = index.peek(&wheel).unwrap();
        assert_eq!(wheel.get(first), Some(&"a1"));
        assert_eq!(
            index.take_due(&wheel, 9),
            None,
            "not due before its deadline"
        );
        assert_eq!(index.take_due(&wheel, 10), Some(first));
        wheel.cancel(first);
        index.removed(&wheel);
        assert_eq!(index.take_due(&wheel, 10), None, "taken once");
        assert_eq!(wheel.get(index.peek(&wheel).unwrap()), Some(&"a2"));
    }

    #[test]
    fn a_change_invalidates_the_cached_answer() {
        let mut wheel = Wheel::new();
        let mut index = PeekIndex::default();
        let late = wheel.insert(50, ());
        index.inserted(late, &wheel);
        assert_eq!(index.peek(&wheel), Some(late));
        let early = wheel.insert(5, ());
        index.inserted(early, &wheel);
        assert_eq!(index.peek(&wheel), Some(early));
        wheel.reset(early, 500);
        index.changed();
        assert_eq!(index.peek(&wheel), Some(late));
    }

    #[test]
    fn the_log_stays_bounded_by_live_keys() {
        let mut wheel = Wheel::new();
        let mut index = PeekIndex::default();
        let keep = wheel.insert(1_000_000, ());
        index.inserted(keep, &wheel);
        let mut keys = Vec::new();
        // Waves of inserts then removals, and single insert-remove pairs.
        for wave in 0..6u64 {
            for i in 0..(300 * (wave % 3 + 1)) {
                let key = wheel.insert(i, ());
                index.inserted(key, &wheel);
                keys.push(key);
                let bound = 4 * wheel.len() + SLACK + 1;
                assert!(
                    index.log_len() <= bound,
                    "insert: log {} > {bound}",
                    index.log_len()
                );
            }
            while let Some(key) = keys.pop() {
                wheel.cancel(key);
                index.removed(&wheel);
                let bound = 4 * wheel.len() + SLACK + 1;
                assert!(
                    index.log_len() <= bound,
                    "remove: log {} > {bound}",
                    index.log_len()
                );
            }
        }
        assert_eq!(index.peek(&wheel), Some(keep));
        index.shrink_to_fit(&wheel);
        assert_eq!(index.log_len(), 1);
    }
}
