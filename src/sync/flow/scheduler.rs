//! The scheduler's flow-control operations: hold and release, the concurrency limit, and
//! `pop_due`'s part: making parked timers due when a slot comes free.

use std::borrow::Borrow;
use std::collections::VecDeque;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Instant;

use crate::sync::core::StateGuard;
use crate::sync::due::DueBatch;
use crate::sync::flow::{QueueFlow, RateLimit};
use crate::sync::scheduler::Scheduler;
use crate::sync::shard::{Mark, Popped};
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
    /// Cost: O(shards + parked × log due), or O(shards + parked + due) in a shard where
    /// more are parked than due (the two ordered sets merged): it moves the parked timers,
    /// never walks the queue's other members. Locks one shard at a time, in ascending order. `queue` may be
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
    ///     sched.schedule(String::from("q"), id, t0 + Duration::from_millis(ms), ()).unwrap();
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
        let (count, earliest) = self.each_shard(|index| {
            self.in_shard(index, |state, trash| state.lift(Mark::Held, queue, trash))
        });
        if let Some(tick) = earliest {
            self.inner.signal.deadline_added(tick);
        }
        count
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

    /// Sets the most timers of `queue` in flight at once (`None`: no limit; `Some(usize::MAX)`,
    /// more than can ever be in flight, is no limit too and reads back `None`). A timer is in
    /// flight from the `pop_due` that hands it out until its `Due` is done (dropped or
    /// consumed), retried ([`Due::retry_at`](crate::sync::Due::retry_at)) or put back (a
    /// [`DueBatch`] dropped with it untaken). A due timer of a queue
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
    ///     sched.schedule(String::from("q"), id, now, ()).unwrap();
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
        self.change_flow(queue, limit.is_none(), |flow| flow.set_limit(limit));
    }

    /// The concurrency limit of `queue` (`None`: none, or `usize::MAX` was set, which is
    /// none). O(1) expected; takes the flow
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

    /// `pop_due`'s first step, at `now_ns` (nanoseconds since the origin): for every queue listed freed (a slot came
    /// free while a member was parked) and every throttled queue whose wake-up is due,
    /// makes its earliest parked timers due — as many as both its free slots and its rate
    /// permit — in delivery order across shards; a queue the rate still holds back gets
    /// its next wake-up. Nothing, without a lock, while nothing is listed or due (three
    /// atomic loads: `now` noted for a rate change, the freed flag, the earliest wake-up). Locks every shard, in ascending order, and releases them before the
    /// merge: O(shards × (1 + made due)).
    pub(crate) fn unpark_ready(&self, now_ns: u128) -> u128 {
        let now_ns = self.inner.flows.polled(now_ns);
        let mut ready = self.inner.flows.take_freed();
        self.inner.flows.take_woken(now_ns, &mut ready);
        if ready.is_empty() {
            return now_ns;
        }
        ready.sort_unstable_by_key(|flow| Arc::as_ptr(flow) as usize);
        ready.dedup_by(|a, b| Arc::ptr_eq(a, b));
        let mut trash = Trash::new();
        let mut states: Vec<_> = (self.inner.shards.iter())
            .map(|shard| shard.lock_settled(&mut trash))
            .collect();
        let mut earliest = None::<u64>;
        let mut throttles = Vec::new();
        for flow in &ready {
            let (permits, next) = flow.permits(now_ns);
            let room = flow.free().min(permits);
            let mut made = 0;
            loop {
                let first = (states.iter().enumerate())
                    .filter_map(|(index, state)| state.first_parked(flow).map(|key| (key, index)))
                    .min();
                let Some((_, index)) = first else {
                    break;
                };
                if made == room {
                    // Parked timers stay: if the rate is what holds them, wake at its next
                    // permitted tick (a slot coming free lists the queue freed instead).
                    if permits <= flow.free() {
                        throttles.push((Arc::clone(flow), next));
                    }
                    break;
                }
                if let Some(tick) = states[index].unpark_first(flow) {
                    earliest = Some(earliest.map_or(tick, |e| e.min(tick)));
                }
                made += 1;
            }
        }
        drop(states);
        drop(trash);
        drop(ready);
        if !throttles.is_empty() {
            self.throttle(throttles);
        }
        if let Some(tick) = earliest {
            self.inner.signal.deadline_added(tick);
        }
        now_ns
    }

    /// The end of `pop_due` and `pop_due_queue` at `now`, every shard lock released: drops
    /// the names in `trash`, registers the `throttles` the pop met, tells the observer what
    /// was popped, and makes the batch of `items`.
    #[inline]
    pub(crate) fn hand_out(
        &self,
        trash: Trash<Q, K>,
        throttles: Vec<(Arc<QueueFlow<Q>>, u128)>,
        now: Instant,
        items: VecDeque<(usize, Popped<Q, K, T>)>,
    ) -> DueBatch<Q, K, T> {
        drop(trash);
        if !throttles.is_empty() {
            self.throttle(throttles);
        }
        let deadlines = items.iter().map(|(_, popped)| popped.at);
        self.inner.observer.popped(now, deadlines);
        DueBatch::new(Arc::clone(&self.inner), items)
    }

    /// Registers throttle wake-ups `(queue, time in ns since the origin)` and wakes the
    /// pollers for the earliest (a sleeping poller's target takes the wake-ups into
    /// account, at the first tick at or after them). No lock held.
    pub(crate) fn throttle(&self, throttles: Vec<(Arc<QueueFlow<Q>>, u128)>) {
        let mut earliest = None::<u128>;
        for (flow, ns) in throttles {
            if self.inner.flows.throttle(&flow, ns) {
                earliest = Some(earliest.map_or(ns, |e| e.min(ns)));
            }
        }
        if let Some(ns) = earliest {
            self.inner.signal.deadline_added(self.ns_tick(ns));
        }
    }

    /// The first tick at or after `ns` nanoseconds since the origin.
    pub(crate) fn ns_tick(&self, ns: u128) -> u64 {
        const NS_PER_S: u128 = 1_000_000_000;
        let origin = self.inner.clock.origin();
        let since = u64::try_from(ns / NS_PER_S).ok().map(|secs| {
            // The remainder is under 10^9: it fits.
            let sub = u32::try_from(ns % NS_PER_S).unwrap_or(0);
            std::time::Duration::new(secs, sub)
        });
        match since.and_then(|since| origin.checked_add(since)) {
            Some(at) => self.inner.clock.deadline_tick(at),
            None => u64::MAX,
        }
    }

    /// Sets the rate limit of `queue` (`None`: none): at most `count` hand-outs per `per`,
    /// bursts of up to `burst` (see [`RateLimit`]). It is enforced by GCRA over the `now` given
    /// to [`pop_due`](Self::pop_due), exact and not rounded to ticks. A due timer of a queue
    /// whose rate allows no hand-out now is **parked**. The queue then gets a wake-up at the
    /// instant its next hand-out is permitted: a timer of its own, which the dispatcher sleeps
    /// until like any deadline (no polling). The next `pop_due` after it makes the queue's
    /// earliest parked timers due, as many as the rate and the concurrency limit permit.
    /// `queue_counts` shows `throttled` while a wake-up is pending.
    ///
    /// The arithmetic is exact over the scheduler's whole tick range: nanoseconds in 128
    /// bits, so neither a long interval times a large burst nor a `now` centuries after
    /// the origin saturates (a saturated limit would permit every hand-out).
    ///
    /// Changes take effect at once. The queue's backlog (hand-outs its GCRA still counts
    /// against it, as time) is rescaled to the new interval. It is measured from the latest
    /// `now` a `pop_due` or `pop_due_queue` ran at, rounded up to a nanosecond. A burst spent
    /// under the old rate stays spent: a lowered rate permits no second burst, and the next
    /// hand-out is permitted later; for a raised rate, sooner. Setting the same limit again
    /// changes nothing. A limit set after a lift rescales the backlog left at the lift;
    /// hand-outs while lifted do not count.
    ///
    /// A throttled queue's wake-up is dropped, and the next `pop_due` looks at the queue again.
    /// It registers a wake-up at the new permitted instant if the parked timers still need one.
    /// A lift needs none: `queue_counts` then shows the queue not throttled, and
    /// `next_deadline` no longer counts it. Never more than the new rate allows after the
    /// change.
    ///
    /// The rate's clock is the latest `now` a `pop_due` or `pop_due_queue` ran at. A call with
    /// an earlier `now` counts at that latest one; a `now` that goes backwards is ignored, as
    /// by the wheel. So it never permits more than the rate.
    ///
    /// Costs as [`set_concurrency`](Self::set_concurrency), which shares the queue's flow
    /// record: a hand-out of a limited queue adds one compare-and-swap. The idea is KumoMTA's
    /// `max_message_rate` per ready queue; GCRA is ITU-T I.371's, as in the `governor` crate.
    /// `queue` may be any borrowed form of `Q` that can make an owned `Q`.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use tickwheel::sync::{RateLimit, Scheduler};
    ///
    /// let t0 = Instant::now();
    /// let sched = Scheduler::builder().origin(t0).build();
    /// sched.set_rate("q", Some(RateLimit::per_second(10)));
    /// for id in 0..3 {
    ///     sched.schedule(String::from("q"), id, t0, ()).unwrap();
    /// }
    /// assert_eq!(sched.pop_due(t0, 10).count(), 1); // taken and delivered
    /// assert!(sched.queue_counts("q").throttled);
    /// assert_eq!(sched.next_deadline(), Some(t0 + Duration::from_millis(100)));
    /// assert_eq!(sched.pop_due(t0 + Duration::from_millis(99), 10).count(), 0);
    /// assert_eq!(sched.pop_due(t0 + Duration::from_millis(100), 10).count(), 1);
    /// ```
    pub fn set_rate<B>(&self, queue: &B, limit: Option<RateLimit>)
    where
        B: Hash + Eq + ToOwned<Owned = Q> + ?Sized,
        Q: Borrow<B>,
    {
        self.change_flow(queue, limit.is_none(), |flow| {
            let seen = self.inner.flows.seen();
            match limit {
                Some(limit) => flow.set_rate(limit.interval_ns(), limit.burst, seen),
                None => flow.set_rate(0, 1, seen),
            }
            // A wake-up at the old rate's instant is stale (lifted: none is needed;
            // changed: the next `pop_due`, with the queue listed freed, registers the new
            // one).
            self.inner.flows.unthrottle(flow);
        });
    }

    /// The common part of [`set_concurrency`](Self::set_concurrency) and
    /// [`set_rate`](Self::set_rate): `change`s `queue`'s flow record (made on the first
    /// limit; a `lifting` change of a queue without one changes nothing), then has every
    /// shard take the new limits (one shard lock at a time), lists the queue freed and
    /// wakes a sleeping dispatcher: slots may have come free for parked timers (always
    /// tried: cheap, and it also covers a raise racing a pop that parked). O(shards).
    fn change_flow<B>(&self, queue: &B, lifting: bool, change: impl FnOnce(&Arc<QueueFlow<Q>>))
    where
        B: Hash + Eq + ToOwned<Owned = Q> + ?Sized,
        Q: Borrow<B>,
    {
        let flow = match self.inner.flows.get(queue) {
            Some(flow) => flow,
            None if lifting => return,
            None => self.inner.flows.record(&queue.to_owned()),
        };
        change(&flow);
        for shard in self.inner.shards.iter() {
            shard.lock_unsettled().limit(&flow);
        }
        self.inner.flows.freed(&flow);
        self.inner.signal.deadline_added(0);
    }

    /// The rate limit of `queue`: `(interval between hand-outs, burst)`, the interval as
    /// [`RateLimit::interval`] and the burst as set (0 reads back 1); `None` without one.
    /// O(1) expected. `queue` may be any borrowed form of `Q`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tickwheel::sync::{RateLimit, Scheduler};
    ///
    /// let sched: Scheduler<String, u32, ()> = Scheduler::new();
    /// sched.set_rate("q", Some(RateLimit::per_second(4).with_burst(2)));
    /// assert_eq!(sched.rate("q"), Some((Duration::from_millis(250), 2)));
    /// ```
    pub fn rate<B: Hash + Eq + ?Sized>(&self, queue: &B) -> Option<(std::time::Duration, u64)>
    where
        Q: Borrow<B>,
    {
        let (ns, burst) = self.inner.flows.get(queue)?.rate()?;
        Some((std::time::Duration::from_nanos(ns), burst))
    }

    /// Whether `queue` waits for its rate limit (a throttle wake-up is pending).
    pub(crate) fn is_throttled<B: Hash + Eq + ?Sized>(&self, queue: &B) -> bool
    where
        Q: Borrow<B>,
    {
        self.inner
            .flows
            .get(queue)
            .is_some_and(|flow| flow.throttled())
    }

    /// Flushes `queue` ("deliver this destination now", Postfix's `postqueue -s`): every
    /// pending member not yet due at `now` becomes due at `now`. They come in deadline order
    /// (deadline, then schedule order), after the members already due. Each one's deadline
    /// becomes the start of `now`'s tick, so it is due at any `now` in that tick, never early.
    /// Returns how many were moved.
    ///
    /// Members in flight are left to the dispatcher; one that comes back later, retried or put
    /// back, is pending at its own deadline. A held queue's flushed members are due but stay
    /// held: the next `pop_due` parks them, and they come out in this order when the queue is
    /// released. A limited queue's come out as its limits permit. Wakes a sleeping dispatcher.
    ///
    /// Cost: O(members of the queue × log + shards); locks every shard at once, in
    /// ascending order (as a `pop_due` that finds every shard due), so the new order is
    /// one across shards. `queue` may be any borrowed form of `Q`.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use tickwheel::sync::Scheduler;
    ///
    /// let t0 = Instant::now();
    /// let sched = Scheduler::builder().origin(t0).build();
    /// sched.schedule("q", 1, t0 + Duration::from_secs(30), 'a').unwrap();
    /// sched.schedule("q", 2, t0 + Duration::from_secs(20), 'b').unwrap();
    /// sched.schedule("r", 3, t0 + Duration::from_secs(10), 'c').unwrap();
    /// assert_eq!(sched.flush_queue(&"q", t0), 2);
    /// let values: Vec<char> = sched.pop_due(t0, 10).map(|d| d.into_value()).collect();
    /// assert_eq!(values, ['b', 'a'], "deadline order; the other queue waits");
    /// ```
    pub fn flush_queue<B: Hash + Eq + ?Sized>(&self, queue: &B, now: Instant) -> usize
    where
        Q: Borrow<B>,
    {
        let Some(tick) = self.inner.clock.now_tick(now) else {
            return 0;
        };
        let mut trash = Trash::new();
        let mut states: Vec<_> = (self.inner.shards.iter())
            .map(|shard| shard.lock_settled(&mut trash))
            .collect();
        let mut members = members_of(&states, queue, None);
        members.retain(|&(t, _, _, _)| t > tick);
        // The start of `now`'s tick: due at any `now` in that tick, never early.
        let at = self.inner.clock.instant_saturating(tick);
        for &(_, _, shard, index) in &members {
            let seq = self.next_seq();
            states[shard].make_due(index, tick, at, seq);
        }
        drop(states);
        drop(trash);
        if !members.is_empty() {
            self.inner.signal.deadline_added(tick);
        }
        members.len()
    }

    /// [`pop_due`](Self::pop_due) for one queue: up to `limit` of `queue`'s timers due at
    /// `now`, in delivery order, marked in flight, as a [`DueBatch`]. The queue's hold and
    /// limits apply: nothing of a held queue, and no more than its concurrency slots and
    /// its rate permit (a member refused is parked, as by `pop_due`). Other queues are not
    /// touched. Cost: O(members of the queue × log + shards); locks every shard at once, in
    /// ascending order. Empty for a `now` before the origin or a `limit` of 0. `queue` may
    /// be any borrowed form of `Q`.
    ///
    /// ```
    /// use std::time::Instant;
    /// use tickwheel::sync::Scheduler;
    ///
    /// let now = Instant::now();
    /// let sched = Scheduler::builder().origin(now).build();
    /// sched.schedule("q", 1, now, 'a').unwrap();
    /// sched.schedule("r", 2, now, 'b').unwrap();
    /// let values: Vec<char> = sched.pop_due_queue(&"r", now, 10).map(|d| d.into_value()).collect();
    /// assert_eq!(values, ['b']);
    /// assert_eq!(sched.len(), 1);
    /// ```
    pub fn pop_due_queue<B: Hash + Eq + ?Sized>(
        &self,
        queue: &B,
        now: Instant,
        limit: usize,
    ) -> DueBatch<Q, K, T>
    where
        Q: Borrow<B>,
    {
        let mut items = VecDeque::new();
        let Some(tick) = self.inner.clock.now_tick(now).filter(|_| limit > 0) else {
            return DueBatch::new(Arc::clone(&self.inner), items);
        };
        let now_ns = (now.saturating_duration_since(self.inner.clock.origin())).as_nanos();
        let now_ns = self.unpark_ready(now_ns);
        let mut trash = Trash::new();
        let mut throttles = Vec::new();
        let mut states: Vec<_> = (self.inner.shards.iter())
            .map(|shard| shard.lock_settled(&mut trash))
            .collect();
        let members = members_of(&states, queue, Some(tick));
        let mut refused = false;
        for (_, _, shard, index) in members {
            if items.len() == limit {
                break;
            }
            if refused {
                // At its limits: the rest of its due members are parked, as the merge
                // parks each one it meets (the refused one's wake-up, throttle or freed
                // slot, makes them due again).
                states[shard].park_member(index);
                continue;
            }
            match states[shard].take_member(index, now_ns, &mut throttles) {
                Ok(popped) => items.push_back((shard, popped)),
                // Held in this shard (and parked): go on with the other shards' (a hold
                // is set shard by shard).
                Err(false) => {}
                Err(true) => refused = true,
            }
        }
        drop(states);
        self.hand_out(trash, throttles, now, items)
    }
}

/// `queue`'s pending members in every shard of `states` (all of them, or those due by the
/// tick `due_by`), as `(tick, seq, shard, index)` in delivery order (deadline, then
/// schedule order). O(members × log members).
fn members_of<Q, K, T, B>(
    states: &[StateGuard<'_, Q, K, T>],
    queue: &B,
    due_by: Option<u64>,
) -> Vec<(u64, u64, usize, u32)>
where
    Q: Hash + Eq + Clone + Borrow<B>,
    K: Hash + Eq + Clone,
    B: Hash + Eq + ?Sized,
{
    let mut members = Vec::new();
    for (shard, state) in states.iter().enumerate() {
        let mut found = Vec::new();
        state.pending_of(queue, due_by, &mut found);
        members.extend(found.into_iter().map(|(t, seq, i)| (t, seq, shard, i)));
    }
    members.sort_unstable();
    members
}
