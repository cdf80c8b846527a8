//! `DelayQueue::peek`: the core wheel names its earliest timer ([`Wheel::peek`]), and the
//! queue caches that answer so that repeated peeks, and inserts and resets later than it,
//! cost O(1).
//!
//! # The order `peek` promises
//!
//! tokio-util promises that `peek` names the entry `poll_expired` yields next. The core's
//! answer is the earliest deadline, ties in insertion order, which is the wheel's own order
//! for entries never reset; for reset entries the wheel's order within one tick is its own.
//! So the promise is kept by construction: while a cached answer is valid, `poll_expired`
//! yields exactly that entry once it is due ([`PeekCache::take_due`]). Nothing else can be
//! due before it: it has the smallest deadline.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::{TimerKey, Wheel};

/// No cached answer. `u64::MAX` is never a key: the core never issues index `u32::MAX`.
const NONE: u64 = u64::MAX;

#[derive(Debug)]
pub(super) struct PeekCache {
    /// The earliest entry, packed with `TimerKey::to_u64`, or `NONE` (not known). Valid
    /// until a change that could make another entry the earliest. Atomic only so that
    /// `peek(&self)` can fill it while the queue stays `Sync`; `Relaxed` is enough: writers
    /// through `&self` all store the same answer.
    cached: AtomicU64,
}

impl Default for PeekCache {
    fn default() -> Self {
        PeekCache {
            cached: AtomicU64::new(NONE),
        }
    }
}

impl PeekCache {
    #[inline]
    fn known(&mut self) -> Option<TimerKey> {
        let cached = *self.cached.get_mut();
        (cached != NONE).then(|| TimerKey::from_u64(cached))
    }

    /// `key` was inserted, or reset to `tick`: it is the earliest if it is strictly earlier
    /// than the cached answer (an equal deadline comes out after it). O(1).
    pub(super) fn filed<T>(&mut self, key: TimerKey, tick: u64, wheel: &Wheel<T>) {
        let Some(cached) = self.known() else {
            return;
        };
        if cached == key {
            // A reset of the earliest entry: another may be earliest now.
            self.forget();
        } else if wheel.deadline(cached).is_none_or(|d| tick < d) {
            *self.cached.get_mut() = key.to_u64();
        }
    }

    /// `key` left the queue (removed, or yielded by a poll). O(1).
    #[inline]
    pub(super) fn removed(&mut self, key: TimerKey) {
        if self.known() == Some(key) {
            self.forget();
        }
    }

    /// The cached answer may be wrong: drop it.
    #[inline]
    pub(super) fn forget(&mut self) {
        *self.cached.get_mut() = NONE;
    }

    /// The earliest entry's key and deadline; `None` when the wheel is empty. O(1) when
    /// cached, else [`Wheel::peek`].
    pub(super) fn peek<T>(&self, wheel: &Wheel<T>) -> Option<(TimerKey, u64)> {
        let cached = self.cached.load(Ordering::Relaxed);
        if cached != NONE {
            let key = TimerKey::from_u64(cached);
            if let Some(deadline) = wheel.deadline(key) {
                return Some((key, deadline));
            }
        }
        let (key, deadline) = wheel.peek()?;
        self.cached.store(key.to_u64(), Ordering::Relaxed);
        Some((key, deadline))
    }

    /// The cached answer, if it is due at `now`: `poll_expired` must yield it next.
    pub(super) fn take_due<T>(&mut self, wheel: &Wheel<T>, now: u64) -> Option<TimerKey> {
        let key = self.known()?;
        debug_assert!(
            wheel.contains(key),
            "a cached peek names a pending entry: {key:?}"
        );
        wheel.deadline(key).is_some_and(|d| d <= now).then_some(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smallest_deadline_first_then_insertion_order() {
        let mut wheel = Wheel::new();
        let mut cache = PeekCache::default();
        for (deadline, name) in [(30, "c"), (10, "a1"), (20, "b"), (10, "a2")] {
            let key = wheel.insert(deadline, name);
            cache.filed(key, deadline, &wheel);
        }
        let (first, at) = cache.peek(&wheel).unwrap();
        assert_eq!((wheel.get(first), at), (Some(&"a1"), 10));
        assert_eq!(
            cache.take_due(&wheel, 9),
            None,
            "not due before its deadline"
        );
        assert_eq!(cache.take_due(&wheel, 10), Some(first));
        wheel.cancel(first);
        cache.removed(first);
        assert_eq!(cache.take_due(&wheel, 10), None, "taken once");
        assert_eq!(wheel.get(cache.peek(&wheel).unwrap().0), Some(&"a2"));
    }

    #[test]
    fn earlier_inserts_and_resets_replace_the_answer_later_ones_keep_it() {
        let mut wheel = Wheel::new();
        let mut cache = PeekCache::default();
        let late = wheel.insert(50, ());
        cache.filed(late, 50, &wheel);
        assert_eq!(cache.peek(&wheel), Some((late, 50)));
        let tie = wheel.insert(50, ());
        cache.filed(tie, 50, &wheel);
        assert_eq!(cache.peek(&wheel), Some((late, 50)), "inserted first");
        let early = wheel.insert(5, ());
        cache.filed(early, 5, &wheel);
        assert_eq!(cache.peek(&wheel), Some((early, 5)));
        wheel.reset(early, 500);
        cache.filed(early, 500, &wheel);
        assert_eq!(cache.peek(&wheel), Some((late, 50)));
        wheel.reset(tie, 7);
        cache.filed(tie, 7, &wheel);
        assert_eq!(cache.peek(&wheel), Some((tie, 7)));
    }
}
