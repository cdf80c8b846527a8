//! Looking without taking: counts, [`Scheduler::queues`], and what [`Scheduler::lookup`],
//! [`Scheduler::queue_members`] and [`Scheduler::queue_counts`] report of one id or one
//! queue (for an operator's `mailq`). Nothing here changes a timer. The shard's side is in
//! `shard/inspect.rs`.
//!
//! Every method here locks one shard at a time and first finishes the `Due`s done since
//! that shard was last settled (see `core.rs`), so a `Due` dropped before the call is never
//! reported in flight. Of the user's code, only `Clone` of `K` or `Q` (and the closure of
//! [`Scheduler::with_value`]) runs under the lock. Under concurrent use, an answer over
//! several shards is a per-shard snapshot (shards are read one after another).

use std::borrow::Borrow;
use std::hash::Hash;

use hashbrown::HashSet;

use super::Scheduler;
use crate::sync::inspect::{IdInfo, Member, QueueCounts};
use crate::sync::shard::ShardState;

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> Scheduler<Q, K, T> {
    /// Pending timers, due ones included, and forwarded ones (timers of frozen queues that
    /// came back from the dispatcher, waiting for [`take_forwarded`](Self::take_forwarded):
    /// they are in the scheduler's custody); not those in flight. O(shards).
    pub fn len(&self) -> usize {
        self.sum(|s| s.pending_len() + s.forwarded_len())
    }

    /// Whether no timer is pending or forwarded (timers may still be in flight). O(shards).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Pending timers in `queue`, forwarded ones included (see [`len`](Self::len)), not
    /// counting those in flight; 0 for an unknown queue. O(shards); locks one shard at a
    /// time. `queue` may be any borrowed form of `Q` (see
    /// [`drain_queue`](Self::drain_queue)'s example).
    pub fn queue_len<B: Hash + Eq + ?Sized>(&self, queue: &B) -> usize
    where
        Q: Borrow<B>,
    {
        self.sum(|s| s.queue_len(queue))
    }

    /// Timers popped by `pop_due` whose `Due` is not done yet. O(shards).
    pub fn in_flight_len(&self) -> usize {
        self.sum(ShardState::in_flight_len)
    }

    /// The queues that have at least one pending or in-flight timer, each once, ordered by
    /// their **oldest current member**: the queue whose member has the lowest `seq` comes
    /// first, where a member's `seq` is the position of the `schedule` (or, after a
    /// [`reschedule`](Self::reschedule), of the last reschedule) that gave it its current
    /// deadline, counted over the whole scheduler. A member in flight counts with the `seq`
    /// it was popped with until its `Due` is done; cancelled, drained and delivered timers
    /// no longer count. So the order follows the calls alone: it depends neither on hashing
    /// nor on the shard count.
    ///
    /// Cost: O(members + queues × log queues) — every pending and in-flight timer is
    /// visited once — plus locking one shard at a time. Under concurrent use the answer is
    /// a per-shard snapshot (shards are read one after another).
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use tickwheel::sync::Scheduler;
    ///
    /// let t0 = Instant::now();
    /// let sched = Scheduler::builder().origin(t0).build();
    /// for (id, q) in ["b", "a", "b", "c"].into_iter().enumerate() {
    ///     sched.schedule(q, id, t0 + Duration::from_secs(1), ()).unwrap();
    /// }
    /// assert_eq!(sched.queues(), ["b", "a", "c"]);
    /// sched.cancel(&0); // "b" keeps id 2, scheduled after "a"'s id 1
    /// assert_eq!(sched.queues(), ["a", "b", "c"]);
    /// ```
    pub fn queues(&self) -> Vec<Q> {
        let mut all = Vec::new();
        for shard in self.inner.shards.iter() {
            shard.with(|state| state.queues_into(&mut all));
        }
        // `seq`s are unique, so no two entries tie; a queue's first entry is its oldest.
        all.sort_unstable_by_key(|&(oldest, _)| oldest);
        let mut seen = HashSet::with_capacity(all.len());
        all.into_iter()
            .filter_map(|(_, q)| seen.insert(q.clone()).then_some(q))
            .collect()
    }

    /// Where the timer of `id` is: its queue, its [`IdState`](crate::sync::IdState)
    /// (pending, in flight or forwarded) and its deadline; `None` when the id has no timer
    /// (never scheduled, or delivered, cancelled, drained, frozen out or taken). The value
    /// is not cloned: see [`with_value`](Self::with_value).
    ///
    /// Cost: O(1) expected; locks the id's shard once (settling its done list: O(`Due`s
    /// done since), and clones the queue name under that lock. `id` may be any borrowed
    /// form of `K`.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use tickwheel::sync::{IdState, Scheduler};
    ///
    /// let t0 = Instant::now();
    /// let sched = Scheduler::builder().origin(t0).build();
    /// let later = t0 + Duration::from_secs(60);
    /// sched.schedule(String::from("example.com"), String::from("msg-1"), later, ()).unwrap();
    /// let info = sched.lookup("msg-1").unwrap();
    /// assert_eq!((info.queue.as_str(), info.state), ("example.com", IdState::Pending));
    /// assert_eq!(info.deadline, later);
    ///
    /// sched.reschedule("msg-1", t0).unwrap();
    /// let due = sched.pop_due(t0, 10).next().unwrap();
    /// assert_eq!(sched.lookup("msg-1").map(|i| i.state), Some(IdState::InFlight));
    /// drop(due); // delivered
    /// assert_eq!(sched.lookup("msg-1"), None);
    /// ```
    pub fn lookup<B: Hash + Eq + ?Sized>(&self, id: &B) -> Option<IdInfo<Q>>
    where
        K: Borrow<B>,
    {
        self.shard_of(id).with(|state| state.lookup(id))
    }

    /// Runs `f` on the value of `id`'s timer and returns what it returns; `None` when the
    /// id has no pending or forwarded timer — absent, or in flight (its `Due` holds the
    /// value: see [`Due::value`](crate::sync::Due::value)). Clones nothing.
    ///
    /// `f` runs **under the id's shard lock**: keep it short, and do not call the scheduler
    /// from it (the lock is not reentrant: that deadlocks). A panic in `f` leaves the
    /// scheduler consistent (nothing is changed here) and is passed on. Cost: O(1) expected
    /// plus `f`; locks one shard once. `id` may be any borrowed form of `K`.
    ///
    /// ```
    /// use std::time::Instant;
    /// use tickwheel::sync::Scheduler;
    ///
    /// let sched = Scheduler::new();
    /// sched.schedule("q", String::from("msg-1"), Instant::now(), vec![1u8; 1000]).unwrap();
    /// assert_eq!(sched.with_value("msg-1", |body| body.len()), Some(1000));
    /// assert_eq!(sched.with_value("msg-2", |body| body.len()), None);
    /// ```
    pub fn with_value<B, R>(&self, id: &B, f: impl FnOnce(&T) -> R) -> Option<R>
    where
        B: Hash + Eq + ?Sized,
        K: Borrow<B>,
    {
        self.shard_of(id).with(|state| state.value_of(id).map(f))
    }

    /// Every member of `queue` — pending, in flight and forwarded — with its state and
    /// deadline, in delivery order (deadline tick, then schedule order; an in-flight member
    /// by the deadline and order it was popped with). Empty for a queue with no member.
    /// Values are not cloned.
    ///
    /// Cost: O(m log m + shards) for a queue of m members — only its members are visited,
    /// never the rest of the scheduler — plus one clone of each id, made under its shard's
    /// lock; locks one shard at a time. `queue` may be any borrowed form of `Q`.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use tickwheel::sync::{IdState, Scheduler};
    ///
    /// let t0 = Instant::now();
    /// let sched = Scheduler::builder().origin(t0).build();
    /// let q = || String::from("example.com");
    /// sched.schedule(q(), 1, t0 + Duration::from_secs(5), ()).unwrap();
    /// sched.schedule(q(), 2, t0, ()).unwrap();
    /// sched.schedule(q(), 3, t0 + Duration::from_secs(1), ()).unwrap();
    /// let due = sched.pop_due(t0, 1).next().unwrap(); // id 2, in flight
    /// let members = sched.queue_members("example.com");
    /// let states: Vec<_> = members.iter().map(|m| (m.id, m.state)).collect();
    /// assert_eq!(states, [(2, IdState::InFlight), (3, IdState::Pending), (1, IdState::Pending)]);
    /// # drop(due);
    /// ```
    pub fn queue_members<B: Hash + Eq + ?Sized>(&self, queue: &B) -> Vec<Member<K>>
    where
        Q: Borrow<B>,
    {
        self.gather_in_order(|state, out| state.members_of(queue, out))
    }

    /// How many members `queue` has pending, in flight and forwarded; all zero for a queue
    /// with no member. Cheap: O(shards), reading one counter record per shard, no member
    /// visited; locks one shard at a time. `queue` may be any borrowed form of `Q`.
    ///
    /// `pending` (forwarded members included) is [`queue_len`](Self::queue_len);
    /// `in_flight` is the length of [`queue_in_flight`](Self::queue_in_flight).
    ///
    /// ```
    /// use std::time::Instant;
    /// use tickwheel::sync::{QueueCounts, Scheduler};
    ///
    /// let now = Instant::now();
    /// let sched = Scheduler::builder().origin(now).build();
    /// for id in 0..3 {
    ///     sched.schedule(String::from("q"), id, now, ()).unwrap();
    /// }
    /// let due = sched.pop_due(now, 1).next().unwrap();
    /// let counts = sched.queue_counts("q");
    /// assert_eq!((counts.pending, counts.in_flight, counts.forwarded), (2, 1, 0));
    /// drop(due);
    /// assert_eq!(sched.queue_counts("q").in_flight, 0);
    /// assert_eq!(sched.queue_counts("absent"), QueueCounts::default());
    /// ```
    pub fn queue_counts<B: Hash + Eq + ?Sized>(&self, queue: &B) -> QueueCounts
    where
        Q: Borrow<B>,
    {
        let mut sum = QueueCounts::default();
        for shard in self.inner.shards.iter() {
            let counts = shard.with(|state| state.counts_of(queue));
            sum.pending += counts.pending;
            sum.in_flight += counts.in_flight;
            sum.forwarded += counts.forwarded;
            sum.parked += counts.parked;
            sum.held |= counts.held;
        }
        sum.throttled = self.is_throttled(queue);
        sum
    }
}
