//! Freezing a queue for a handoff: [`Scheduler::freeze_queue`], `queue_in_flight`,
//! `take_forwarded`, `unfreeze_queue`, `import`, and the scheduler's side of
//! `Due::retry_at`. The shard's side is in `shard/freeze.rs`.

use std::borrow::Borrow;
use std::hash::Hash;
use std::time::Instant;

use super::{Frozen, FrozenEntry, Imported, IntoQueue, Retried, RetryError};
use crate::sync::core::Inner;
use crate::sync::order::in_order;
use crate::sync::scheduler::Scheduler;
use crate::sync::shard::{Mark, Ordered, Refusal, ShardState, Timer};
use crate::sync::trash::Trash;

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> Scheduler<Q, K, T> {
    /// What `part` puts out of each shard (locked one at a time, in ascending order), in
    /// delivery order. O(items × log items + shards).
    pub(crate) fn gather_in_order<E>(
        &self,
        mut part: impl FnMut(&ShardState<Q, K, T>, &mut Vec<Ordered<E>>),
    ) -> Vec<E> {
        let mut items = Vec::new();
        for shard in self.inner.shards.iter() {
            shard.with(|state| part(state, &mut items));
        }
        in_order(items)
    }

    /// Freezes `queue`: marks it frozen in every shard and takes its pending timers out
    /// (due ones included), in delivery order; lists its in-flight timers, which stay the
    /// dispatcher's. O(members + shards); locks one shard at a time, in ascending order, and
    /// each shard's part is atomic (under its lock, the mark is set and the pending members
    /// leave together).
    ///
    /// While frozen, `schedule` into the queue and `import` into it are refused with the value
    /// handed back ([`ScheduleError::Frozen`](crate::sync::ScheduleError::Frozen)); nothing
    /// of it is pending, so `pop_due` delivers none of it and `drain_queue` finds only
    /// in-flight and forwarded members. A member in flight may still be delivered. One that
    /// comes back instead — [`Due::retry_at`](crate::sync::Due::retry_at), or a
    /// [`DueBatch`](crate::sync::DueBatch) dropped with it untaken — is **forwarded**: held,
    /// never due, until [`take_forwarded`](Self::take_forwarded) takes it or
    /// [`unfreeze_queue`](Self::unfreeze_queue) makes it pending again.
    ///
    /// A timer scheduled into the queue while the freeze runs is either refused or taken
    /// (it lands on a shard before or after the freeze reached it), never left pending.
    /// Idempotent: freezing a frozen queue takes whatever is pending (nothing, once a freeze
    /// has finished) and reports the in-flight ids again. Forwarded timers are not taken.
    ///
    /// `queue` may be any borrowed form of `Q` that can make an owned `Q`
    /// (`ToOwned<Owned = Q>`: `&str` for a `String` name): each shard that had no mark for
    /// the queue keeps one, made with `to_owned` under that shard's lock.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use tickwheel::sync::{ScheduleError, Scheduler};
    ///
    /// let t0 = Instant::now();
    /// let sched = Scheduler::builder().origin(t0).build();
    /// let q = || String::from("example.com");
    /// sched.schedule(q(), 1, t0 + Duration::from_secs(2), 'a').unwrap();
    /// sched.schedule(q(), 2, t0 + Duration::from_secs(1), 'b').unwrap();
    /// let frozen = sched.freeze_queue("example.com");
    /// let taken: Vec<_> = frozen.pending.iter().map(|e| (e.id, e.value)).collect();
    /// assert_eq!(taken, [(2, 'b'), (1, 'a')], "delivery order");
    /// assert!(sched.is_frozen("example.com"));
    /// assert_eq!(sched.schedule(q(), 3, t0, 'c'), Err(ScheduleError::Frozen('c')));
    /// ```
    pub fn freeze_queue<B>(&self, queue: &B) -> Frozen<K, T>
    where
        B: Hash + Eq + ToOwned<Owned = Q> + ?Sized,
        Q: Borrow<B>,
    {
        let (mut pending, mut in_flight) = (Vec::new(), Vec::new());
        for index in 0..self.inner.shards.len() {
            self.freeze_shard(index, queue, &mut pending, &mut in_flight);
        }
        self.inner.observer.frozen(pending.len(), in_flight.len());
        Frozen {
            pending: in_order(pending),
            in_flight: in_order(in_flight),
        }
    }

    /// One shard's part of a freeze (a separate step for the interleaving harness).
    pub(crate) fn freeze_shard<B>(
        &self,
        index: usize,
        queue: &B,
        pending: &mut Vec<Ordered<FrozenEntry<K, T>>>,
        in_flight: &mut Vec<Ordered<K>>,
    ) where
        B: Hash + Eq + ToOwned<Owned = Q> + ?Sized,
        Q: Borrow<B>,
    {
        if let Some(shard) = self.inner.shards.get(index) {
            let mut trash = Trash::new();
            let mut state = shard.lock_settled(&mut trash);
            state.freeze(queue, pending, in_flight, &mut trash);
            drop(state);
            drop(trash);
        }
    }

    /// Whether `queue` is frozen: `true` from the moment a
    /// [`freeze_queue`](Self::freeze_queue) marked its first shard until an
    /// [`unfreeze_queue`](Self::unfreeze_queue) cleared its last one. O(shards); locks one
    /// shard at a time. `queue` may be any borrowed form of `Q`.
    ///
    /// ```
    /// use tickwheel::sync::Scheduler;
    ///
    /// let sched: Scheduler<String, u32, ()> = Scheduler::new();
    /// assert!(!sched.is_frozen("q"));
    /// sched.freeze_queue("q");
    /// assert!(sched.is_frozen("q"));
    /// ```
    pub fn is_frozen<B: Hash + Eq + ?Sized>(&self, queue: &B) -> bool
    where
        Q: Borrow<B>,
    {
        (self.inner.shards.iter()).any(|shard| shard.lock_unsettled().is_frozen(queue))
    }

    /// The ids of `queue` in flight now (popped, their `Due` not done), in delivery order.
    /// Done `Due`s are finished first, so an id whose `Due` was dropped before this call is
    /// not listed. O(members of the queue + shards); locks one shard at a time.
    ///
    /// A handoff waits until this is empty before its last
    /// [`take_forwarded`](Self::take_forwarded): then every member has been delivered,
    /// taken or forwarded. `queue` may be any borrowed form of `Q`.
    ///
    /// ```
    /// use std::time::Instant;
    /// use tickwheel::sync::Scheduler;
    ///
    /// let now = Instant::now();
    /// let sched = Scheduler::builder().origin(now).build();
    /// sched.schedule(String::from("q"), 1, now, ()).unwrap();
    /// let due = sched.pop_due(now, 10).next().unwrap();
    /// assert_eq!(sched.queue_in_flight("q"), [1]);
    /// drop(due);
    /// assert!(sched.queue_in_flight("q").is_empty());
    /// ```
    pub fn queue_in_flight<B: Hash + Eq + ?Sized>(&self, queue: &B) -> Vec<K>
    where
        Q: Borrow<B>,
    {
        self.gather_in_order(|state, out| state.in_flight_of(queue, out))
    }

    /// Takes out the timers of `queue` that were forwarded while it was frozen — each came
    /// back from the dispatcher through [`Due::retry_at`](crate::sync::Due::retry_at) or a
    /// [`DueBatch`](crate::sync::DueBatch) dropped with it untaken — in delivery order
    /// (deadline tick, then order of scheduling or retry). They are the caller's now.
    /// Empty when the queue is not frozen. O(members of the queue + shards); locks one
    /// shard at a time. `queue` may be any borrowed form of `Q`.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use tickwheel::sync::{Retried, Scheduler};
    ///
    /// let now = Instant::now();
    /// let sched = Scheduler::builder().origin(now).build();
    /// sched.schedule(String::from("q"), 1, now, "v").unwrap();
    /// let due = sched.pop_due(now, 10).next().unwrap();
    /// let frozen = sched.freeze_queue("q");
    /// assert_eq!(frozen.in_flight, [1]);
    /// let later = now + Duration::from_secs(5);
    /// assert_eq!(due.retry_at(later), Ok(Retried::Forwarded));
    /// let forwarded = sched.take_forwarded("q");
    /// assert_eq!((forwarded[0].id, forwarded[0].at, forwarded[0].value), (1, later, "v"));
    /// assert!(sched.is_empty());
    /// ```
    pub fn take_forwarded<B: Hash + Eq + ?Sized>(&self, queue: &B) -> Vec<FrozenEntry<K, T>>
    where
        Q: Borrow<B>,
    {
        let mut out = Vec::new();
        for index in 0..self.inner.shards.len() {
            self.take_forwarded_shard(index, queue, &mut out);
        }
        self.inner.observer.forwarded_taken(out.len());
        in_order(out)
    }

    /// One shard's part of [`take_forwarded`](Self::take_forwarded).
    pub(crate) fn take_forwarded_shard<B: Hash + Eq + ?Sized>(
        &self,
        index: usize,
        queue: &B,
        out: &mut Vec<Ordered<FrozenEntry<K, T>>>,
    ) where
        Q: Borrow<B>,
    {
        if let Some(shard) = self.inner.shards.get(index) {
            let mut trash = Trash::new();
            let mut state = shard.lock_unsettled();
            state.take_forwarded(queue, out, &mut trash);
            drop(state);
            drop(trash);
        }
    }

    /// Unfreezes `queue`: it accepts `schedule` and `import` again, and its forwarded timers
    /// not taken go back to pending with their deadline and order (they never left the
    /// scheduler). Returns how many went back; 0, changing nothing, if the queue is not
    /// frozen. O(members of the queue + shards); locks one shard at a time, in ascending
    /// order. Wakes a poller that sleeps past a deadline that went back. `queue` may be any
    /// borrowed form of `Q`.
    ///
    /// ```
    /// use std::time::Instant;
    /// use tickwheel::sync::Scheduler;
    ///
    /// let now = Instant::now();
    /// let sched = Scheduler::builder().origin(now).build();
    /// sched.schedule(String::from("q"), 1, now, ()).unwrap();
    /// let batch = sched.pop_due(now, 10);
    /// sched.freeze_queue("q");
    /// drop(batch); // untaken: forwarded, not pending
    /// assert_eq!(sched.unfreeze_queue("q"), 1);
    /// assert_eq!(sched.pop_due(now, 10).len(), 1);
    /// ```
    pub fn unfreeze_queue<B: Hash + Eq + ?Sized>(&self, queue: &B) -> usize
    where
        Q: Borrow<B>,
    {
        let (count, earliest) = self.each_shard(|index| {
            self.in_shard(index, |state, trash| state.lift(Mark::Frozen, queue, trash))
        });
        self.inner.observer.unfrozen(count);
        if let Some(tick) = earliest {
            self.inner.signal.deadline_added(tick);
        }
        count
    }

    /// Schedules each entry into `queue`, in the order given (equal deadlines are delivered
    /// in that order), idempotent by id: an entry whose id already has a timer here —
    /// pending, forwarded or in flight, in any queue — is handed back in
    /// [`Imported::present`] and the existing timer is left alone, never doubled. If the
    /// queue is frozen every entry is handed back in [`Imported::refused`] (a shard's
    /// freeze and the entries landing there are ordered by its lock: during a concurrent
    /// freeze some entries may be scheduled, and that freeze takes them). Deadlines are taken
    /// as by [`schedule`](Self::schedule). O(entries) expected; locks the id's shard once
    /// per entry. Wakes a poller that sleeps past the earliest deadline imported.
    ///
    /// `queue` is taken as [`schedule`](Self::schedule) takes it (`"q"` for a `&'static str`
    /// name), or by reference ([`IntoQueue`]: `&name`, or `"q"` for a `String` name). Each
    /// entry gets its own clone, made before its shard is locked.
    ///
    /// ```
    /// use std::time::Instant;
    /// use tickwheel::sync::{FrozenEntry, Scheduler};
    ///
    /// let at = Instant::now();
    /// let sched: Scheduler<String, u32, char> = Scheduler::new();
    /// let entries = vec![FrozenEntry { id: 1, at, value: 'a' }, FrozenEntry { id: 2, at, value: 'b' }];
    /// assert_eq!(sched.import("q", entries.clone()).imported, 2);
    /// let again = sched.import("q", entries.clone());
    /// assert_eq!((again.imported, again.present), (0, entries));
    /// assert_eq!(sched.len(), 2);
    /// ```
    pub fn import(
        &self,
        queue: impl IntoQueue<Q>,
        entries: impl IntoIterator<Item = FrozenEntry<K, T>>,
    ) -> Imported<K, T> {
        let queue: Q = queue.into_queue();
        let mut out = Imported {
            imported: 0,
            present: Vec::new(),
            refused: Vec::new(),
        };
        let mut earliest = None::<u64>;
        for FrozenEntry { id, at, value } in entries {
            let tick = self.inner.clock.deadline_tick(at);
            let name = queue.clone();
            let mut trash = Trash::new();
            let (mut shard, done) = self.shard_of(&id).lock_lazy();
            let timer = Timer {
                queue: name,
                at,
                seq: self.next_seq(),
                value,
            };
            let result = shard.insert(id, tick, timer, done, &mut trash);
            drop(shard);
            match result {
                Ok(()) => {
                    out.imported += 1;
                    earliest = Some(earliest.map_or(tick, |e| e.min(tick)));
                }
                Err((refusal, id, timer)) => {
                    let entry = FrozenEntry {
                        id,
                        at,
                        value: timer.value,
                    };
                    trash.queue(timer.queue);
                    match refusal {
                        Refusal::Pending | Refusal::InFlight => out.present.push(entry),
                        Refusal::Frozen | Refusal::Full => out.refused.push(entry),
                    }
                }
            }
            drop(trash);
        }
        (self.inner.observer).imported(out.imported, out.present.len(), out.refused.len());
        if let Some(tick) = earliest {
            self.inner.signal.deadline_added(tick);
        }
        out
    }
}

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> Inner<Q, K, T> {
    /// `Due::retry_at`: in-flight entry `entry` of shard `shard` (of `id`, in `queue`,
    /// carrying `value`) back to pending at `at`, or forwarded if its queue is frozen there.
    #[allow(clippy::too_many_arguments)] // a Due's parts, moved in
    pub(crate) fn retry(
        &self,
        shard: usize,
        entry: u32,
        id: K,
        queue: Q,
        value: T,
        at: Instant,
    ) -> Result<Retried, RetryError<T>> {
        let Some(mutex) = self.shards.get(shard) else {
            return Err(RetryError::Closed(value));
        };
        let tick = self.clock.deadline_tick(at);
        let mut trash = Trash::new();
        let mut state = mutex.lock_unsettled();
        let seq = self.next_seq();
        let result = state.retry(entry, id, (queue, value), tick, at, seq, &mut trash);
        drop(state);
        drop(trash);
        match result {
            Ok(Retried::Pending) => {
                self.observer.retried();
                self.signal.deadline_added(tick);
                Ok(Retried::Pending)
            }
            Ok(Retried::Forwarded) => {
                self.observer.retried();
                Ok(Retried::Forwarded)
            }
            Err((queue, value)) => {
                // Never (see `ShardState::retry`): the timer ends here, as delivered.
                self.observer.delivered(1);
                drop(queue);
                Err(RetryError::Closed(value))
            }
        }
    }
}
