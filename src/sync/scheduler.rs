//! [`Scheduler`]: the public face of the sharded scheduler (its shared state is in
//! `core.rs`).

use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, BuildHasherDefault, Hash};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hashbrown::HashSet;

use super::core::{Inner, Shard};
use super::hash::shard_of_hash;
use super::observe::Observer;
use super::order::in_order;
use super::padded::Padded;
use super::shard::{Ordered, ShardState, Timer};
use super::signal::Signal;
use super::trash::Trash;
use super::types::{Cancel, Drained, RescheduleError, ScheduleError, SchedulerStats};
use crate::clock::TickClock;
use crate::loom::AtomicU64;
use crate::wheel::WheelStats;

/// A thread-safe timer scheduler with named queues, two-phase dispatch, and drains that
/// reconcile with in-flight dispatch. See the [module documentation](super) for the states,
/// the lock order and the exactly-once guarantee.
///
/// `Send + Sync` when `Q`, `K` and `T` are `Send`; share it in an `Arc`.
///
/// # Example
///
/// ```
/// use std::time::{Duration, Instant};
/// use tickwheel::sync::{Cancel, Scheduler};
///
/// let sched = Scheduler::new();
/// let t0 = Instant::now();
/// sched.schedule("example.com", 1, t0 + Duration::from_millis(10), "msg 1").unwrap();
/// sched.schedule("example.com", 2, t0 + Duration::from_millis(20), "msg 2").unwrap();
/// sched.schedule("example.org", 3, t0 + Duration::from_millis(30), "msg 3").unwrap();
///
/// // Phase one: take what is due. Message 1 is now in flight.
/// let mut batch = sched.pop_due(t0 + Duration::from_millis(15), 100);
/// let due = batch.next().unwrap();
/// assert_eq!(*due.id(), 1);
///
/// // A drain meanwhile takes the pending member and reports the in-flight one.
/// let drained = sched.drain_queue(&"example.com");
/// assert_eq!(drained.cancelled, vec![(2, "msg 2")]);
/// assert_eq!(drained.in_flight, vec![1]);
/// assert_eq!(sched.cancel(&1), Cancel::InFlight);
///
/// // Phase two: deliver outside any lock; done when the Due is consumed or dropped.
/// assert_eq!(due.into_value(), "msg 1");
/// assert_eq!((sched.len(), sched.in_flight_len()), (1, 0));
/// ```
pub struct Scheduler<Q, K, T> {
    pub(super) inner: Arc<Inner<Q, K, T>>,
}

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> Scheduler<Q, K, T> {
    /// A scheduler with `shards` shards (already validated) and this clock.
    pub(crate) fn with_settings(shards: usize, clock: TickClock, name: Option<Arc<str>>) -> Self {
        let observer = Observer::new(name.as_deref());
        // Cyclic: each shard's done list links back (weakly) for `Due::retry_at`.
        let inner = Arc::new_cyclic(|owner| Inner {
            shards: (0..shards)
                .map(|index| Padded(Shard::new(owner.clone(), index, observer.clone())))
                .collect(),
            signal: Arc::new(Signal::default()),
            hasher: BuildHasherDefault::default(),
            clock,
            name,
            observer,
            flows: crate::sync::flow::FlowTable::new(),
            seq: Padded(AtomicU64::new(0)),
        });
        Scheduler { inner }
    }

    /// Adds a timer: `id`, in `queue`, due at `at`, carrying `value`. O(1) expected; locks the
    /// id's shard once.
    ///
    /// `at` may be in the past (due at once). The timer fires no earlier than `at` and about
    /// one resolution after it at most (plus however late the poller runs): `at` rounds up
    /// to a tick boundary (see [`crate::clock`] for the rounding rules). If a poller sleeps
    /// until a later deadline, it is woken.
    ///
    /// Any `at` is accepted. One at or before the clock origin is due from the origin on. One
    /// so far ahead that its tick saturates — `u64::MAX` ticks or more after the origin:
    /// 584 years at 1 ns resolution, 584 million years at 1 ms — **never fires**
    /// (`pop_due`'s `now` saturates one tick lower); it stays pending until cancelled,
    /// drained or rescheduled, [`next_deadline`](Self::next_deadline) leaves it out, and
    /// [`lookup`](Self::lookup) reports its deadline as given. This is the rule of every
    /// layer with a clock (see [`crate::clock`]).
    ///
    /// # Errors
    ///
    /// Gives the value back in [`ScheduleError`] when the id already has a pending timer
    /// ([`Pending`](ScheduleError::Pending)), when its previous timer is in flight
    /// ([`InFlight`](ScheduleError::InFlight)), or when its shard is full.
    ///
    /// ```
    /// use std::time::Instant;
    /// use tickwheel::sync::{ScheduleError, Scheduler};
    ///
    /// let sched = Scheduler::new();
    /// let at = Instant::now();
    /// assert!(sched.schedule("q", 1, at, 'a').is_ok());
    /// assert_eq!(sched.schedule("q", 1, at, 'b'), Err(ScheduleError::Pending('b')));
    /// ```
    pub fn schedule(&self, queue: Q, id: K, at: Instant, value: T) -> Result<(), ScheduleError<T>> {
        let tick = self.schedule_locked(queue, id, at, value)?;
        self.inner.observer.scheduled(1);
        self.inner.signal.deadline_added(tick);
        Ok(())
    }

    /// The part of [`schedule`](Self::schedule) under the shard lock; returns the deadline
    /// tick, which the caller then announces to the signal (a separate step for the
    /// interleaving harness).
    pub(crate) fn schedule_locked(
        &self,
        queue: Q,
        id: K,
        at: Instant,
        value: T,
    ) -> Result<u64, ScheduleError<T>> {
        let tick = self.inner.clock.deadline_tick(at);
        // Declared before the guard, so dropped after it (also on `?`): see `trash.rs`.
        let mut trash = Trash::new();
        let (mut shard, done) = self.shard_of(&id).lock_lazy();
        let seq = self.next_seq();
        let timer = Timer {
            queue,
            at,
            seq,
            value,
        };
        let result = shard.insert(id, tick, timer, done, &mut trash);
        drop(shard);
        // A refused timer's id and queue name go to `trash`; its value comes back.
        let result = result.map(|()| tick).map_err(|(refusal, id, timer)| {
            trash.id(id);
            trash.queue(timer.queue);
            refusal.error(timer.value)
        });
        drop(trash);
        result
    }

    /// Moves a pending timer to `at`, as if scheduled anew (it goes behind other timers of
    /// the same tick). O(1) expected; locks the id's shard once. Wakes a poller that sleeps
    /// past the new deadline. `at` is taken as by [`schedule`](Self::schedule): rounded up
    /// to a tick, and never firing if its tick saturates.
    ///
    /// # Errors
    ///
    /// [`RescheduleError::InFlight`] when the dispatcher already has the timer,
    /// [`RescheduleError::Frozen`] when it is forwarded (its queue is frozen),
    /// [`RescheduleError::NotFound`] when the id has no timer. Nothing changes then.
    ///
    /// `id` may be any borrowed form of `K` (`&str` for a `String` id), as with
    /// `HashMap::get`.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use tickwheel::sync::{RescheduleError, Scheduler};
    ///
    /// let t0 = Instant::now();
    /// let sched = Scheduler::builder().origin(t0).build();
    /// sched.schedule("q", String::from("msg-1"), t0 + Duration::from_secs(60), ()).unwrap();
    /// sched.reschedule("msg-1", t0).unwrap();
    /// assert_eq!(sched.pop_due(t0, 10).count(), 1); // delivered: each Due dropped
    /// assert_eq!(sched.reschedule("msg-9", t0), Err(RescheduleError::NotFound));
    /// ```
    pub fn reschedule<B: Hash + Eq + ?Sized>(
        &self,
        id: &B,
        at: Instant,
    ) -> Result<(), RescheduleError>
    where
        K: Borrow<B>,
    {
        let tick = self.inner.clock.deadline_tick(at);
        let mut trash = Trash::new();
        let result = {
            let (mut shard, done) = self.shard_of(id).lock_lazy();
            let seq = self.next_seq();
            shard.reschedule(id, tick, at, seq, done, &mut trash)
        };
        drop(trash);
        result?;
        self.inner.signal.deadline_added(tick);
        Ok(())
    }

    /// Cancels the timer of `id` if it is still pending. O(1) expected; locks one shard.
    ///
    /// [`Cancel::Cancelled`] gives the value back (the timer will not fire);
    /// [`Cancel::InFlight`] means the dispatcher has it and will deliver it;
    /// [`Cancel::NotFound`] means no timer has this id. `id` may be any borrowed form of
    /// `K` (`&str` for a `String` id), as with `HashMap::get`.
    ///
    /// ```
    /// use std::time::Instant;
    /// use tickwheel::sync::{Cancel, Scheduler};
    ///
    /// let sched = Scheduler::new();
    /// sched.schedule("q", String::from("msg-1"), Instant::now(), "v").unwrap();
    /// assert_eq!(sched.cancel("msg-1"), Cancel::Cancelled("v"));
    /// assert_eq!(sched.cancel("msg-1"), Cancel::NotFound);
    /// ```
    pub fn cancel<B: Hash + Eq + ?Sized>(&self, id: &B) -> Cancel<T>
    where
        K: Borrow<B>,
    {
        let mut trash = Trash::new();
        let (mut shard, done) = self.shard_of(id).lock_lazy();
        let result = shard.cancel(id, done, &mut trash);
        drop(shard);
        drop(trash);
        if let Cancel::Cancelled(_) = result {
            self.inner.observer.cancelled();
        }
        result
    }

    /// Takes every pending timer of `queue` out (they will not fire) and lists the queue's
    /// in-flight timers, which stay the dispatcher's. Every drained id can be scheduled again
    /// at once. O(members + shards); locks one shard at a time.
    ///
    /// Both lists are in delivery order (deadline tick, then schedule order). The drain is
    /// atomic per shard: a timer scheduled into the queue while the drain runs may or may
    /// not be taken, but no timer is both drained and delivered.
    ///
    /// `queue` may be any borrowed form of `Q` (`&str` for a `String` queue name), as with
    /// `HashMap::get`; an unknown queue drains nothing.
    ///
    /// ```
    /// use std::time::Instant;
    /// use tickwheel::sync::Scheduler;
    ///
    /// let sched = Scheduler::new();
    /// let now = Instant::now();
    /// sched.schedule(String::from("example.com"), 1, now, 'x').unwrap();
    /// sched.schedule(String::from("example.org"), 2, now, 'y').unwrap();
    /// let drained = sched.drain_queue("example.com");
    /// assert_eq!(drained.cancelled, vec![(1, 'x')]);
    /// assert!(drained.in_flight.is_empty());
    /// assert_eq!((sched.queue_len("example.com"), sched.queue_len("example.org")), (0, 1));
    /// ```
    pub fn drain_queue<B: Hash + Eq + ?Sized>(&self, queue: &B) -> Drained<K, T>
    where
        Q: Borrow<B>,
    {
        let (mut cancelled, mut in_flight) = (Vec::new(), Vec::new());
        for index in 0..self.inner.shards.len() {
            self.drain_shard(index, queue, &mut cancelled, &mut in_flight);
        }
        self.inner
            .observer
            .drained(cancelled.len(), in_flight.len());
        Drained {
            cancelled: in_order(cancelled),
            in_flight: in_order(in_flight),
        }
    }

    /// One shard's part of a drain (a separate step so the interleaving harness can interleave it).
    pub(crate) fn drain_shard<B: Hash + Eq + ?Sized>(
        &self,
        index: usize,
        queue: &B,
        cancelled: &mut Vec<Ordered<(K, T)>>,
        in_flight: &mut Vec<Ordered<K>>,
    ) where
        Q: Borrow<B>,
    {
        if let Some(shard) = self.inner.shards.get(index) {
            let mut trash = Trash::new();
            let (mut state, done) = shard.lock_lazy();
            state.drain(queue, cancelled, in_flight, done, &mut trash);
            drop(state);
            drop(trash);
        }
    }

    /// The earliest instant at which [`pop_due`](Self::pop_due) may find a timer due;
    /// `None` when no pending timer will ever be due: nothing is pending, or every pending
    /// timer is *never due* (its deadline saturated: see [`schedule`](Self::schedule)); a
    /// never-due timer never sets the answer. Locks one shard at a time: O(shards × levels),
    /// plus a look at the timers of one slot in a shard whose earliest slot holds a
    /// never-due timer.
    ///
    /// Never later than the earliest pending deadline (rounded up to its tick). It can be
    /// earlier when the earliest timer is still far away (more than 64 ticks): then it is
    /// when that timer's wheel slot cascades, and a `pop_due` then returns nothing and
    /// sharpens the answer. Timers in flight do not count.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use tickwheel::sync::Scheduler;
    ///
    /// let t0 = Instant::now();
    /// let sched = Scheduler::builder().origin(t0).build();
    /// assert_eq!(sched.next_deadline(), None);
    /// sched.schedule("q", 1, t0 + Duration::from_millis(20), ()).unwrap();
    /// assert_eq!(sched.next_deadline(), Some(t0 + Duration::from_millis(20)));
    /// ```
    pub fn next_deadline(&self) -> Option<Instant> {
        self.earliest_tick()
            .filter(|&tick| tick != u64::MAX)
            .and_then(|tick| self.inner.clock.instant_of(tick))
    }

    /// [`next_deadline`](Self::next_deadline) in ticks.
    pub(crate) fn earliest_tick(&self) -> Option<u64> {
        // A slot came free for a parked timer: the next `pop_due` makes it due.
        if self.inner.flows.any_freed() {
            return Some(0);
        }
        // A throttled queue's next permitted hand-out is a wake-up like a deadline.
        let wake = self.inner.flows.next_wake();
        let wake = (wake != crate::sync::flow::NEVER).then(|| self.ns_tick(wake));
        (0..self.inner.shards.len())
            .filter_map(|i| self.shard_earliest(i))
            .chain(wake)
            .min()
    }

    /// One shard's part of [`earliest_tick`](Self::earliest_tick).
    pub(crate) fn shard_earliest(&self, index: usize) -> Option<u64> {
        self.inner
            .shards
            .get(index)
            .and_then(|s| s.with(|state| state.earliest()))
    }

    /// A snapshot of occupancy and memory. O(shards × slots + queues).
    ///
    /// [`SchedulerStats::bytes_held`] counts the memory of the whole scheduler; see
    /// [`shrink_to_fit`](Self::shrink_to_fit) to give back what it does not use.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use tickwheel::sync::Scheduler;
    ///
    /// let t0 = Instant::now();
    /// let sched = Scheduler::builder().shards(2).origin(t0).build();
    /// let empty = sched.stats().bytes_held;
    /// for id in 0..10_000u32 {
    ///     sched.schedule(id % 10, id, t0 + Duration::from_secs(60), id).unwrap();
    /// }
    /// let full = sched.stats();
    /// assert_eq!((full.pending, full.queues), (10_000, 10));
    /// assert!(full.bytes_held > empty + 10_000 * 4, "entries and the wheel are counted");
    /// ```
    pub fn stats(&self) -> SchedulerStats {
        let mut stats = SchedulerStats {
            shards: self.inner.shards.len(),
            bytes_held: std::mem::size_of::<Inner<Q, K, T>>()
                + self.inner.shards.len() * std::mem::size_of::<Padded<Shard<Q, K, T>>>(),
            ..SchedulerStats::default()
        };
        for shard in self.inner.shards.iter() {
            shard.with(|shard| {
                stats.pending += shard.pending_len() + shard.forwarded_len();
                stats.forwarded += shard.forwarded_len();
                stats.due_waiting += shard.staged_len();
                stats.parked += shard.parked_len();
                stats.in_flight += shard.in_flight_len();
                add_wheel_stats(&mut stats.wheel, shard.wheel_stats());
            });
            stats.bytes_held += shard.bytes_held();
        }
        stats.bytes_held += self.inner.flows.bytes_held();
        stats.queues = self.queue_count();
        stats
    }

    /// Gives back memory the scheduler does not use, one shard at a time (each shard is
    /// locked once; other threads may go on using the others meanwhile). O(capacity) per
    /// shard: the capacity of its entry slab, wheel, maps and queue records.
    ///
    /// In each shard it settles the done `Due`s, then shrinks the wheel (stale references
    /// and unused storage, see [`Wheel::shrink_to_fit`](crate::Wheel::shrink_to_fit)), the
    /// id and queue maps, the done list and its buffer, and the entry slab and queue
    /// records down to their highest used slot.
    ///
    /// What it cannot give back: a timer's entry never moves, because its index is held
    /// outside the shard while it is in flight (by its `Due`, or its untaken `DueBatch`
    /// item) — so the slab keeps every slot up to the highest entry in use, pending or in
    /// flight, including vacant slots below it (reused first afterwards, lowest first, so a
    /// later call can give back more). The same holds for queue records. It does not touch
    /// what `K`, `Q` and `T` own themselves. Timers, their order and every answer are
    /// unchanged; in-flight `Due`s stay valid and are finished as usual.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use tickwheel::sync::Scheduler;
    ///
    /// let t0 = Instant::now();
    /// let sched = Scheduler::builder().shards(2).origin(t0).build();
    /// for id in 0..10_000u32 {
    ///     sched.schedule(id % 10, id, t0 + Duration::from_secs(60), id).unwrap();
    /// }
    /// let full = sched.stats().bytes_held;
    /// for queue in 0..10 {
    ///     sched.drain_queue(&queue);
    /// }
    /// assert!(sched.stats().bytes_held >= full, "draining keeps the capacity");
    /// sched.shrink_to_fit();
    /// assert!(sched.stats().bytes_held < full / 4, "shrinking gives it back");
    /// ```
    pub fn shrink_to_fit(&self) {
        for shard in self.inner.shards.iter() {
            shard.shrink_to_fit();
        }
    }

    /// Distinct queues with a member, without ordering them. O(queues); one shard at a time.
    fn queue_count(&self) -> usize {
        let mut names = Vec::new();
        for shard in self.inner.shards.iter() {
            shard.with(|state| state.queue_names_into(&mut names));
        }
        // Counted outside the locks: the set drops the duplicates.
        names.into_iter().collect::<HashSet<Q>>().len()
    }

    /// The name given to [`SchedulerBuilder::name`](super::SchedulerBuilder::name), if any.
    pub fn name(&self) -> Option<&str> {
        self.inner.name.as_deref()
    }

    /// Number of shards.
    pub fn shards(&self) -> usize {
        self.inner.shards.len()
    }

    /// Length of one tick.
    pub fn resolution(&self) -> Duration {
        self.inner.clock.resolution()
    }

    pub(crate) fn signal(&self) -> &Arc<Signal> {
        &self.inner.signal
    }

    /// The shard of `id`, by any borrowed form of it: `Borrow` requires `B` to hash as `K`
    /// does, and [`ShardHasher`](super::hash::ShardHasher) sees only what `Hash` writes, so both pick the same shard.
    pub(crate) fn shard_index<B: Hash + ?Sized>(&self, id: &B) -> usize {
        shard_of_hash(self.inner.hasher.hash_one(id), self.inner.shards.len())
    }

    pub(crate) fn shard_of<B: Hash + ?Sized>(&self, id: &B) -> &Shard<Q, K, T> {
        &self.inner.shards[self.shard_index(id)]
    }

    pub(crate) fn next_seq(&self) -> u64 {
        self.inner.next_seq()
    }

    fn sum(&self, f: impl Fn(&ShardState<Q, K, T>) -> usize) -> usize {
        self.inner
            .shards
            .iter()
            .map(|s| s.with(|state| f(state)))
            .sum()
    }

    #[cfg(test)]
    pub(crate) fn check_invariants(&self) {
        for shard in self.inner.shards.iter() {
            shard.inspect(|state, done| state.check_invariants(done));
            assert!(
                shard.bound_published(),
                "a shard's published due bound is stale"
            );
        }
    }

    /// `(pending, in flight, pending in queue)` counted without settling the done lists, so
    /// a test can look without finishing done `Due`s (only the operations should): an
    /// entry on a done list is delivered already, not in flight.
    #[cfg(test)]
    pub(crate) fn counts_unsettled(&self, queue: &Q) -> (usize, usize, usize) {
        let count = |s: &ShardState<Q, K, T>, done: &[u32]| {
            (
                s.pending_len() + s.forwarded_len(),
                s.in_flight_len() - done.len(),
                s.queue_len(queue),
            )
        };
        let each = self.inner.shards.iter().map(|shard| shard.inspect(count));
        each.fold((0, 0, 0), |a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2))
    }

    /// Runs `op` on shard `index`'s state, locked without settling, with a trash for what
    /// it removes (emptied after the unlock, see `trash.rs`): one shard's part of an
    /// operation [`each_shard`](Self::each_shard) sums, without the wake-up (the release of
    /// a hold, the lift of a freeze). `(0, None)` for an index past the last shard.
    pub(crate) fn in_shard(
        &self,
        index: usize,
        op: impl FnOnce(&mut ShardState<Q, K, T>, &mut Trash<Q, K>) -> (usize, Option<u64>),
    ) -> (usize, Option<u64>) {
        let Some(shard) = self.inner.shards.get(index) else {
            return (0, None);
        };
        let mut trash = Trash::new();
        let result = op(&mut shard.lock_unsettled(), &mut trash);
        drop(trash);
        result
    }

    /// Runs `per_shard` on each shard index in ascending order (one shard lock at a time, as
    /// the lock order asks) and sums what it moved back to pending: the count, and the
    /// earliest tick among them, for the caller's one wake-up.
    pub(crate) fn each_shard(
        &self,
        mut per_shard: impl FnMut(usize) -> (usize, Option<u64>),
    ) -> (usize, Option<u64>) {
        let mut count = 0;
        let mut earliest = None::<u64>;
        for index in 0..self.inner.shards.len() {
            let (n, tick) = per_shard(index);
            count += n;
            earliest = match (earliest, tick) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        (count, earliest)
    }
}

fn add_wheel_stats(sum: &mut WheelStats, s: WheelStats) {
    sum.live += s.live;
    sum.stale += s.stale;
    sum.capacity += s.capacity;
    sum.bytes_held += s.bytes_held;
}

impl<Q, K, T> fmt::Debug for Scheduler<Q, K, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scheduler")
            .field("name", &self.inner.name)
            .field("shards", &self.inner.shards.len())
            .field("resolution", &self.inner.clock.resolution())
            .field("origin", &self.inner.clock.origin())
            .finish_non_exhaustive()
    }
}

mod hooks;
mod inspect;
mod pop;
