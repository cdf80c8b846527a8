//! The scheduler's flow-control operations: hold and release, the concurrency limit, and
//! `pop_due`'s part: making parked timers due when a slot comes free.

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::Arc;

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

    /// Sets the most timers of `queue` in flight at once (`None`: no limit). A timer is in
    /// flight from the `pop_due` that hands it out until its `Due` is done (dropped or
    /// consumed), retried ([`Due::retry_at`](crate::sync::Due::retry_at)) or put back (a
    /// [`DueBatch`](crate::sync::DueBatch) dropped with it untaken). A due timer of a queue
    /// at its limit is **parked** in its shard, as a held queue's are; when an in-flight one
    /// ends, the next `pop_due` makes the earliest parked one due (in delivery order). A
    /// limit of 0 hands nothing out. Changes take effect at once: a raised or lifted limit
    /// makes parked timers due for the new slots (and wakes a sleeping dispatcher); a
    /// lowered one hands out nothing more until the queue is under it.
    ///
    /// The first limit set on a queue gives it a flow record shared by the shards, kept
    /// until the scheduler is dropped (`None` lifts the limit, not the record); timers
    /// already in flight when it was made do not count against it. Costs: this call
    /// O(shards), one shard lock at a time; a `pop_due` handing out a timer of a limited
    /// queue, two atomic operations; the end of one while a member is parked, a short list
    /// push and a wake-up, and the next `pop_due` locks every shard once to pick the parked
    /// timers to make due: O(shards × made due). Queues without a record cost nothing.
    /// `queue` may be any borrowed form of `Q` that can make an owned `Q`.
    ///
    /// The idea is Postfix's destination concurrency (qmgr) and KumoMTA's ready-queue
    /// connection limit, per scheduler queue.
    ///
    /// ```
    /// use std::time::Instant;
    /// use tickwheel::sync::Scheduler;
    ///
    /// let now = Instant::now();
    /// let sched = Scheduler::builder().origin(now).build();
    /// sched.set_concurrency("q", Some(1));
    /// for id in 0..3 {
    ///     sched.schedule("q", id, now, ()).unwrap();
    /// }
    /// let first: Vec<_> = sched.pop_due(now, 10).collect();
    /// assert_eq!(first.len(), 1, "one in flight at most");
    /// assert_eq!(sched.queue_counts("q").parked, 2);
    /// drop(first); // done: its slot comes free
    /// assert_eq!(sched.pop_due(now, 10).map(|d| *d.id()).collect::<Vec<_>>(), [1]);
    /// ```
    pub fn set_concurrency<B>(&self, queue: &B, limit: Option<usize>)
    where
        B: Hash + Eq + ToOwned<Owned = Q> + ?Sized,
        Q: Borrow<B>,
    {
        let flow = match self.inner.flows.get(queue) {
            Some(flow) => flow,
            None if limit.is_none() => return,
            None => self.inner.flows.record(&queue.to_owned()),
        };
        flow.set_limit(limit);
        for shard in self.inner.shards.iter() {
            shard.lock_unsettled().limit(&flow);
        }
        // Slots may have come free for parked timers (always try: cheap, and it also
        // covers a raise racing a pop that parked).
        self.inner.flows.freed(&flow);
        self.inner.signal.deadline_added(0);
    }

    /// The concurrency limit of `queue` (`None`: none). O(1) expected; takes the flow
    /// table's lock. `queue` may be any borrowed form of `Q`.
    ///
    /// ```
    /// use tickwheel::sync::Scheduler;
    ///
    /// let sched: Scheduler<String, u32, ()> = Scheduler::new();
    /// assert_eq!(sched.concurrency("q"), None);
    /// sched.set_concurrency("q", Some(4));
    /// assert_eq!(sched.concurrency("q"), Some(4));
    /// ```
    pub fn concurrency<B: Hash + Eq + ?Sized>(&self, queue: &B) -> Option<usize>
    where
        Q: Borrow<B>,
    {
        self.inner.flows.get(queue).and_then(|flow| flow.limit())
    }

    /// `pop_due`'s first step: for every queue listed freed (a slot came free while a
    /// member was parked), makes its earliest parked timers due, one per free slot, in
    /// delivery order across shards. Nothing, without a lock, while nothing was listed.
    /// Locks every shard, in ascending order, and releases them before the merge.
    pub(crate) fn unpark_freed(&self) {
        let mut freed = self.inner.flows.take_freed();
        if freed.is_empty() {
            return;
        }
        freed.sort_unstable_by_key(|flow| Arc::as_ptr(flow) as usize);
        freed.dedup_by(|a, b| Arc::ptr_eq(a, b));
        let mut trash = Trash::new();
        let mut states: Vec<_> = (self.inner.shards.iter())
            .map(|shard| shard.lock_settled(&mut trash))
            .collect();
        let mut earliest = None::<u64>;
        for flow in &freed {
            for _ in 0..flow.free() {
                let first = (states.iter().enumerate())
                    .filter_map(|(index, state)| state.first_parked(flow).map(|key| (key, index)))
                    .min();
                let Some((_, index)) = first else {
                    break;
                };
                if let Some(tick) = states[index].unpark_first(flow) {
                    earliest = Some(earliest.map_or(tick, |e| e.min(tick)));
                }
            }
        }
        drop(states);
        drop(trash);
        drop(freed);
        if let Some(tick) = earliest {
            self.inner.signal.deadline_added(tick);
        }
    }
}
