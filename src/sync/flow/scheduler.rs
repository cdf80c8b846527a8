//! The scheduler's flow-control operations: hold and release.

use std::borrow::Borrow;
use std::hash::Hash;

use crate::sync::scheduler::Scheduler;
use crate::sync::trash::Trash;

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> Scheduler<Q, K, T> {
    /// Holds `queue`: from now on none of its timers is handed out (by
    /// [`pop_due`](Self::pop_due), and so by the dispatcher thread and the async stream),
    /// until [`release_queue`](Self::release_queue). Unlike a freeze, a held queue keeps
    /// accepting `schedule`, `reschedule` and `import`, and its timers stay pending: `cancel`,
    /// `drain_queue` and `freeze_queue` take them, `len` and `queue_len` count them. Timers
    /// already in flight are not recalled. Returns `true` if the queue was not held.
    ///
    /// Cost: O(shards), locks one shard at a time in ascending order and sets a mark there;
    /// it never walks the queue. A held queue's timers stay in the wheel until they are
    /// due; the first `pop_due` that meets one due **parks** it (out of the wheel, onto the
    /// queue's parked list in its shard), so each costs one look, once, not one per poll.
    /// [`queue_counts`](Self::queue_counts) shows `held` and `parked`.
    ///
    /// A hold is a mark per shard: a `pop_due` running while `hold_queue` runs may still
    /// hand out a timer of the queue from a shard not yet marked (as if it had run just
    /// before); none after `hold_queue` returns. Holding an empty queue is allowed (the
    /// mark stays). `queue` may be any borrowed form of `Q` that can make an owned `Q`
    /// (`&str` for a `String`): each shard keeps a copy.
    ///
    /// ```
    /// use std::time::Instant;
    /// use tickwheel::sync::Scheduler;
    ///
    /// let now = Instant::now();
    /// let sched = Scheduler::builder().origin(now).build();
    /// sched.hold_queue("example.com");
    /// sched.schedule(String::from("example.com"), 1, now, 'a').unwrap();
    /// assert_eq!(sched.pop_due(now, 10).len(), 0, "held: nothing handed out");
    /// let counts = sched.queue_counts("example.com");
    /// assert_eq!((counts.pending, counts.parked, counts.held), (1, 1, true));
    /// assert_eq!(sched.release_queue("example.com"), 1);
    /// assert_eq!(sched.pop_due(now, 10).next().map(|d| d.into_value()), Some('a'));
    /// ```
    pub fn hold_queue<B>(&self, queue: &B) -> bool
    where
        B: Hash + Eq + ToOwned<Owned = Q> + ?Sized,
        Q: Borrow<B>,
    {
        let mut newly = false;
        for index in 0..self.inner.shards.len() {
            newly |= self.hold_shard(index, queue);
        }
        newly
    }

    /// One shard's part of [`hold_queue`](Self::hold_queue) (a step of its own for the
    /// interleaving harness): `true` if the mark is new there.
    pub(crate) fn hold_shard<B>(&self, index: usize, queue: &B) -> bool
    where
        B: Hash + Eq + ToOwned<Owned = Q> + ?Sized,
        Q: Borrow<B>,
    {
        // The mark's copy is made under the lock; nothing is dropped there.
        self.inner
            .shards
            .get(index)
            .is_some_and(|shard| shard.lock_unsettled().hold(queue))
    }

    /// Releases `queue`: lifts its hold, and its parked timers (due while it was held)
    /// become due at once, in delivery order (deadline, then schedule order) among
    /// everything else due. Returns how many parked timers were released; 0, changing
    /// nothing, if the queue was not held. Wakes a poller that sleeps past them.
    ///
    /// Cost: O(shards + parked × log due): it moves the parked timers, never walks the
    /// queue's other members. Locks one shard at a time, in ascending order. `queue` may be
    /// any borrowed form of `Q`.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use tickwheel::sync::Scheduler;
    ///
    /// let t0 = Instant::now();
    /// let sched = Scheduler::builder().origin(t0).build();
    /// sched.hold_queue("q");
    /// for (id, ms) in [(1, 3), (2, 1), (3, 2)] {
    ///     sched.schedule("q", id, t0 + Duration::from_millis(ms), ()).unwrap();
    /// }
    /// let later = t0 + Duration::from_millis(5);
    /// assert!(sched.pop_due(later, 10).is_empty());
    /// assert_eq!(sched.release_queue("q"), 3);
    /// let ids: Vec<u32> = sched.pop_due(later, 10).map(|d| *d.id()).collect();
    /// assert_eq!(ids, [2, 3, 1], "deadline order");
    /// assert_eq!(sched.release_queue("q"), 0, "not held any more");
    /// ```
    pub fn release_queue<B: Hash + Eq + ?Sized>(&self, queue: &B) -> usize
    where
        Q: Borrow<B>,
    {
        let mut count = 0;
        let mut earliest = None::<u64>;
        for index in 0..self.inner.shards.len() {
            let (n, tick) = self.release_shard(index, queue);
            count += n;
            earliest = match (earliest, tick) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        if let Some(tick) = earliest {
            self.inner.signal.deadline_added(tick);
        }
        count
    }

    /// One shard's part of [`release_queue`](Self::release_queue), without the wake-up:
    /// how many parked timers were released there, and the earliest tick among them.
    pub(crate) fn release_shard<B: Hash + Eq + ?Sized>(
        &self,
        index: usize,
        queue: &B,
    ) -> (usize, Option<u64>)
    where
        Q: Borrow<B>,
    {
        let Some(shard) = self.inner.shards.get(index) else {
            return (0, None);
        };
        let mut trash = Trash::new();
        let mut state = shard.lock_unsettled();
        let result = state.release(queue, &mut trash);
        drop(state);
        drop(trash);
        result
    }

    /// Whether `queue` is held: `true` from the moment a [`hold_queue`](Self::hold_queue)
    /// marked its first shard until a [`release_queue`](Self::release_queue) cleared its
    /// last one. O(shards); locks one shard at a time. `queue` may be any borrowed form of
    /// `Q`.
    ///
    /// ```
    /// use tickwheel::sync::Scheduler;
    ///
    /// let sched: Scheduler<String, u32, ()> = Scheduler::new();
    /// assert!(!sched.is_held("q"));
    /// assert!(sched.hold_queue("q"));
    /// assert!(!sched.hold_queue("q"), "already held");
    /// assert!(sched.is_held("q"));
    /// ```
    pub fn is_held<B: Hash + Eq + ?Sized>(&self, queue: &B) -> bool
    where
        Q: Borrow<B>,
    {
        (self.inner.shards.iter()).any(|shard| shard.lock_unsettled().is_held(queue))
    }
}
