//! Phase two of dispatch: [`DueBatch`] and [`Due`], and how they end the in-flight state.
//!
//! A `pop_due` marks every timer it returns in flight. From then on the batch and its items
//! own that state:
//!
//! - a [`Due`] ends its id's in-flight state when it is dropped or consumed by
//!   [`Due::into_value`] — that is the moment the timer counts as delivered. It takes no
//!   shard lock for that: it puts its entry on the shard's done list, which the shard
//!   settles before anything can tell (see `core.rs`);
//! - a [`DueBatch`] dropped with items not yet taken (a handler panicked, the dispatcher
//!   stopped) puts them back: pending again, due, deadline and order unchanged — or
//!   forwarded, if their queue is frozen (see `Scheduler::freeze_queue`);
//! - [`Due::retry_at`] puts its timer back as pending with a new deadline (or forwarded),
//!   in one critical section of its shard.
//!
//! A batch holds an `Arc` of the scheduler's shared state, and a `Due` one of its shard's
//! done list, so both stay valid after the `Scheduler` handle itself is dropped.

use std::collections::VecDeque;
use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Instant;

use super::core::{DoneHome, Inner};
use super::flow::QueueFlow;
use super::freeze::{Retried, RetryError};
use super::padded::Padded;
use super::shard::Popped;
use super::trash::Trash;

/// The timers one [`Scheduler::pop_due`](super::Scheduler::pop_due) took, in delivery order:
/// deadline tick, then schedule order. An [`Iterator`] of [`Due`] items.
///
/// Every timer in the batch is in flight until its `Due` is done. Dropping the batch before
/// taking every item puts the untaken ones back as pending and due, so nothing is lost when
/// a handler panics halfway. While the batch is open, a handler may call any scheduler
/// method (the batch holds no lock): `cancel` and `drain_queue` report the batch's timers
/// as in flight, and `schedule` refuses their ids.
///
/// # Example
///
/// ```
/// use std::time::{Duration, Instant};
/// use tickwheel::sync::Scheduler;
///
/// let sched = Scheduler::new();
/// let t0 = Instant::now();
/// sched.schedule("q", 1, t0, "one").unwrap();
/// sched.schedule("q", 2, t0, "two").unwrap();
/// let mut batch = sched.pop_due(t0 + Duration::from_millis(5), 10);
/// assert_eq!(batch.len(), 2);
/// let first = batch.next().unwrap();
/// assert_eq!((*first.id(), first.into_value()), (1, "one"));
/// drop(batch); // item 2 was not taken: it goes back, pending and due
/// assert_eq!((sched.len(), sched.in_flight_len()), (1, 0));
/// ```
#[must_use = "dropping the batch puts its timers back, pending and undelivered"]
pub struct DueBatch<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> {
    inner: Arc<Inner<Q, K, T>>,
    /// `(shard, timer)`, in delivery order; all in flight.
    items: VecDeque<(usize, Popped<Q, K, T>)>,
}

/// One due timer handed to the dispatcher. Its id stays in flight until this is dropped or
/// [`into_value`](Due::into_value) consumes it: meanwhile `schedule` of the id is refused,
/// `cancel` answers [`InFlight`](super::Cancel::InFlight), and a drain of its queue lists it
/// in `in_flight`.
pub struct Due<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> {
    at: Instant,
    value: T,
    id: K,
    queue: Q,
    flight: FlightGuard<Q, K, T>,
}

/// Ends the in-flight state when dropped (a `Due` cannot have `Drop` itself, or
/// `into_value` and `retry_at` could not move its fields out): puts the entry on its
/// shard's done list. `retry_at` disarms it (takes `done`) and ends the state itself.
struct FlightGuard<Q, K, T> {
    done: Option<Arc<Padded<DoneHome<Q, K, T>>>>,
    /// The queue's flow record, if the timer holds one of its concurrency slots.
    flow: Option<Arc<QueueFlow<Q>>>,
    /// The timer's entry in its shard.
    entry: u32,
    _values: PhantomData<fn() -> T>,
}

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> DueBatch<Q, K, T> {
    pub(crate) fn new(
        inner: Arc<Inner<Q, K, T>>,
        items: VecDeque<(usize, Popped<Q, K, T>)>,
    ) -> Self {
        DueBatch { inner, items }
    }

    /// Whether no item is left to take.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> Iterator for DueBatch<Q, K, T> {
    type Item = Due<Q, K, T>;

    fn next(&mut self) -> Option<Due<Q, K, T>> {
        let (shard, popped) = self.items.pop_front()?;
        let Popped {
            id,
            entry,
            queue,
            at,
            value,
            flow,
        } = popped;
        Some(Due {
            at,
            value,
            id,
            queue,
            flight: FlightGuard {
                done: Some(self.inner.shards[shard].done_list()),
                flow,
                entry,
                _values: PhantomData,
            },
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.items.len(), Some(self.items.len()))
    }
}

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> ExactSizeIterator for DueBatch<Q, K, T> {}

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> Drop for DueBatch<Q, K, T> {
    /// Puts every untaken timer back: pending, due, with its deadline and place unchanged;
    /// forwarded instead if its queue is frozen in its shard.
    /// Locks one shard at a time, in ascending order; the batch's copies of the ids are
    /// dropped after each lock. Never panics.
    fn drop(&mut self) {
        if self.items.is_empty() {
            return;
        }
        let mut items: Vec<_> = self.items.drain(..).collect();
        let put_back = items.len();
        items.sort_by_key(|(shard, _)| *shard); // stable: keeps delivery order per shard
        let mut earliest: Option<u64> = None;
        let mut items = items.into_iter().peekable();
        while let Some(&(shard, _)) = items.peek() {
            let Some(mutex) = self.inner.shards.get(shard) else {
                return;
            };
            let (mut trash, mut lost) = (Trash::new(), Vec::new());
            let mut state = mutex.lock_unsettled();
            while let Some((_, mut popped)) = items.next_if(|(s, _)| *s == shard) {
                // Its slot is given back: the timer is pending again.
                if let Some(flow) = popped.flow.take() {
                    if flow.end() {
                        self.inner.flows.freed(&flow);
                    }
                }
                match state.put_back(popped, &mut trash) {
                    Ok(tick) => earliest = Some(earliest.map_or(tick, |e| e.min(tick))),
                    Err(popped) => lost.push(popped),
                }
            }
            drop(state);
            drop((trash, lost));
        }
        self.inner.observer.put_back(put_back);
        if let Some(tick) = earliest {
            self.inner.signal.deadline_added(tick);
        }
    }
}

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> fmt::Debug for DueBatch<Q, K, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DueBatch")
            .field("remaining", &self.items.len())
            .finish_non_exhaustive()
    }
}

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> Due<Q, K, T> {
    /// The queue the timer was scheduled in.
    pub fn queue(&self) -> &Q {
        &self.queue
    }

    /// The timer's id (in flight while this `Due` lives).
    pub fn id(&self) -> &K {
        &self.id
    }

    /// The deadline exactly as given to `schedule` or `reschedule` (not rounded to a tick).
    /// The timer was popped no earlier than this.
    pub fn deadline(&self) -> Instant {
        self.at
    }

    /// The timer's value.
    pub fn value(&self) -> &T {
        &self.value
    }

    /// The timer's value, mutably.
    pub fn value_mut(&mut self) -> &mut T {
        &mut self.value
    }

    /// Takes the value and ends the in-flight state: the id can be scheduled again as soon as
    /// this returns.
    ///
    /// ```
    /// use std::time::Instant;
    /// use tickwheel::sync::Scheduler;
    ///
    /// let now = Instant::now();
    /// let sched = Scheduler::builder().origin(now).build();
    /// sched.schedule("q", 7, now, String::from("payload")).unwrap();
    /// let due = sched.pop_due(now, 1).next().unwrap();
    /// assert!(sched.schedule("q", 7, now, String::new()).is_err(), "in flight");
    /// assert_eq!(due.into_value(), "payload");
    /// assert!(sched.schedule("q", 7, now, String::new()).is_ok(), "done: free again");
    /// ```
    pub fn into_value(self) -> T {
        self.value
    }

    /// Retries the timer: puts it back as pending in its queue, due at `at`, in one step
    /// under its shard's lock — so no other operation ever sees it absent (a `schedule` of
    /// the id in between is not possible, as it would be with `into_value` followed by
    /// `schedule`). It gets a new place in schedule order (behind timers already pending
    /// with the same deadline tick), as [`Scheduler::reschedule`](super::Scheduler::reschedule)
    /// gives. `at` is taken as by `schedule`: rounded up to a tick, never firing if its tick
    /// saturates. O(1); locks one shard; wakes a poller that sleeps past `at`.
    ///
    /// If its queue is frozen ([`Scheduler::freeze_queue`](super::Scheduler::freeze_queue)),
    /// the timer is forwarded instead, with the new deadline: [`Retried::Forwarded`], and
    /// [`Scheduler::take_forwarded`](super::Scheduler::take_forwarded) hands it to the
    /// handoff. Either way it stays in the scheduler: never lost, never doubled.
    ///
    /// **What others see.** Until this call, the timer is in flight: a
    /// [`drain_queue`](super::Scheduler::drain_queue) of its queue lists the id in
    /// `Drained::in_flight` and does not get it, `cancel` answers `InFlight`,
    /// [`lookup`](super::Scheduler::lookup) says [`IdState::InFlight`](super::IdState).
    /// From the moment it returns, the timer is pending (or forwarded) with the new
    /// deadline: a drain takes it, with its value, in `Drained::cancelled`; `cancel` returns
    /// it; `lookup` says `Pending` (or `Forwarded`). A drain that ran before the retry and
    /// listed the id in flight therefore did not get it, and a drain after does: the
    /// caller of a drain that must leave the queue empty drains again once
    /// [`queue_in_flight`](super::Scheduler::queue_in_flight) is empty (or freezes the
    /// queue first, so that a retried timer is forwarded, not pending). At no moment is the
    /// timer absent: `len() + in_flight_len()` counts it throughout.
    ///
    /// # Errors
    ///
    /// [`RetryError::Closed`] with the value when the scheduler is gone (every `Scheduler`
    /// handle and `DueBatch` of it dropped); the timer has then ended as delivered.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use tickwheel::sync::{Retried, Scheduler};
    ///
    /// let t0 = Instant::now();
    /// let sched = Scheduler::builder().origin(t0).build();
    /// sched.schedule("q", 7, t0, "try 1").unwrap();
    /// let due = sched.pop_due(t0, 1).next().unwrap();
    /// let backoff = t0 + Duration::from_millis(30);
    /// assert_eq!(due.retry_at(backoff), Ok(Retried::Pending));
    /// assert_eq!((sched.len(), sched.in_flight_len()), (1, 0));
    /// assert_eq!(sched.next_deadline(), Some(backoff));
    /// ```
    pub fn retry_at(mut self, at: Instant) -> Result<Retried, RetryError<T>> {
        let Some(inner) = self.flight.done.as_ref().and_then(|d| d.owner.upgrade()) else {
            // The guard, still armed, ends the in-flight state of a scheduler that is gone.
            return Err(RetryError::Closed(self.value));
        };
        let Some(home) = self.flight.done.take() else {
            return Err(RetryError::Closed(self.value));
        };
        let Due {
            at: _,
            value,
            id,
            queue,
            flight,
        } = self;
        let mut flight = flight;
        let flow = flight.flow.take();
        let result = inner.retry(home.shard, flight.entry, id, queue, value, at);
        // The slot is given back after the timer is pending again (or forwarded).
        if let Some(flow) = flow {
            if flow.end() {
                inner.flows.freed(&flow);
                inner.signal.deadline_added(0);
            }
        }
        drop((home, inner));
        result
    }
}

impl<Q, K, T> fmt::Debug for Due<Q, K, T>
where
    Q: Hash + Eq + Clone + fmt::Debug,
    K: Hash + Eq + Clone + fmt::Debug,
    T: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Due")
            .field("queue", &self.queue)
            .field("id", &self.id)
            .field("deadline", &self.at)
            .field("value", &self.value)
            .finish()
    }
}

impl<Q, K, T> Drop for FlightGuard<Q, K, T> {
    fn drop(&mut self) {
        if let Some(done) = self.done.take() {
            done.list.push(self.entry);
            done.observer.delivered(1);
            // Its concurrency slot comes free; a parked timer of the queue may go.
            if let Some(flow) = self.flow.take() {
                if flow.end() {
                    if let Some(inner) = done.owner.upgrade() {
                        inner.flows.freed(&flow);
                        inner.signal.deadline_added(0);
                    }
                }
            }
        }
    }
}
