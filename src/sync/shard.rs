//! One shard: the state behind one of the scheduler's mutexes.
//!
//! A shard owns the ids that hash to it, and each of its ids is in exactly one of three
//! places (or none, when it has no timer):
//!
//! - `store.wheel` — **pending**, waiting for its deadline;
//! - `store.staged` — **pending** and already due: taken out of the wheel by a `pop_due`
//!   that looked at it but stopped at its limit, or put back by a dropped `DueBatch`;
//!   ordered by `(deadline tick, seq)` so it merges with the wheel in delivery order;
//! - `in_flight` — popped; its `Due` is not done yet.
//!
//! `queues` lists, per queue, which of the shard's ids are pending and which are in flight,
//! so a drain visits its members only. Everything here runs under the shard's lock; nothing
//! here calls back into the scheduler or takes another lock.

use std::collections::BTreeMap;
use std::hash::Hash;
use std::time::Instant;

use hashbrown::{HashMap, HashSet};

use super::types::{Cancel, RescheduleError, ScheduleError};
use crate::indexed::IndexedWheel;
use crate::wheel::WheelStats;

/// A scheduled timer, as stored while pending and carried while in flight.
#[derive(Debug)]
pub(crate) struct Timer<Q, T> {
    pub(crate) queue: Q,
    /// The instant the caller asked for (before rounding up to a tick).
    pub(crate) at: Instant,
    /// Global schedule order: ties between equal deadline ticks go to the lower `seq`.
    pub(crate) seq: u64,
    pub(crate) value: T,
}

/// A timer out of its store: being merged by `pop_due`, in a `DueBatch`, or put back.
#[derive(Debug)]
pub(crate) struct Popped<Q, K, T> {
    pub(crate) id: K,
    pub(crate) tick: u64,
    pub(crate) timer: Timer<Q, T>,
}

impl<Q, K, T> Popped<Q, K, T> {
    /// The delivery-order key.
    pub(crate) fn order(&self) -> (u64, u64) {
        (self.tick, self.timer.seq)
    }
}

/// Where `pop_due`'s merge stands in one shard: the wheel's next due timer, already polled
/// out but not yet taken, and whether the wheel has no more due timers.
#[derive(Debug)]
pub(crate) struct Cursor<Q, K, T> {
    wheel_head: Option<Popped<Q, K, T>>,
    wheel_done: bool,
}

impl<Q, K, T> Default for Cursor<Q, K, T> {
    fn default() -> Self {
        Cursor {
            wheel_head: None,
            wheel_done: false,
        }
    }
}

/// Ids of one queue in this shard.
#[derive(Debug)]
struct Members<K> {
    pending: HashSet<K>,
    in_flight: HashSet<K>,
}

/// What the shard remembers of an in-flight id: enough to order a drain's report.
#[derive(Debug, Clone, Copy)]
struct Flight {
    tick: u64,
    seq: u64,
}

/// The two stores of pending timers (see the module doc).
#[derive(Debug)]
struct Store<Q, K, T> {
    wheel: IndexedWheel<K, Timer<Q, T>>,
    staged: BTreeMap<(u64, u64), K>,
    staged_timers: HashMap<K, (u64, Timer<Q, T>)>,
}

impl<Q, K: Hash + Eq + Clone, T> Store<Q, K, T> {
    fn contains(&self, id: &K) -> bool {
        self.wheel.contains(id) || self.staged_timers.contains_key(id)
    }

    fn len(&self) -> usize {
        self.wheel.len() + self.staged_timers.len()
    }

    /// The `seq` of a pending timer, in whichever store holds it.
    fn seq(&self, id: &K) -> Option<u64> {
        match self.wheel.get(id) {
            Some(timer) => Some(timer.seq),
            None => self.staged_timers.get(id).map(|(_, timer)| timer.seq),
        }
    }

    /// Takes a pending timer out of whichever store holds it, with its deadline tick.
    fn take(&mut self, id: &K) -> Option<(u64, Timer<Q, T>)> {
        if let Some(tick) = self.wheel.deadline(id) {
            return self.wheel.cancel(id).map(|timer| (tick, timer));
        }
        let (tick, timer) = self.staged_timers.remove(id)?;
        self.staged.remove(&(tick, timer.seq));
        Some((tick, timer))
    }

    fn stage(&mut self, popped: Popped<Q, K, T>) {
        self.staged.insert(popped.order(), popped.id.clone());
        self.staged_timers
            .insert(popped.id, (popped.tick, popped.timer));
    }

    /// The first staged timer, if it is due by `now`.
    fn staged_head(&self, now: u64) -> Option<(u64, u64)> {
        self.staged
            .first_key_value()
            .map(|(&key, _)| key)
            .filter(|&(tick, _)| tick <= now)
    }

    fn pop_staged(&mut self) -> Option<Popped<Q, K, T>> {
        let (_, id) = self.staged.pop_first()?;
        let (tick, timer) = self.staged_timers.remove(&id)?;
        Some(Popped { id, tick, timer })
    }
}

/// The state one shard mutex guards.
#[derive(Debug)]
pub(crate) struct ShardState<Q, K, T> {
    store: Store<Q, K, T>,
    in_flight: HashMap<K, Flight>,
    queues: HashMap<Q, Members<K>>,
}

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> ShardState<Q, K, T> {
    pub(crate) fn new() -> Self {
        ShardState {
            store: Store {
                wheel: IndexedWheel::new(),
                staged: BTreeMap::new(),
                staged_timers: HashMap::new(),
            },
            in_flight: HashMap::new(),
            queues: HashMap::new(),
        }
    }

    /// Adds a timer for a new id; refuses an id that is pending or in flight.
    pub(crate) fn schedule(
        &mut self,
        id: K,
        tick: u64,
        timer: Timer<Q, T>,
    ) -> Result<(), ScheduleError<T>> {
        if self.in_flight.contains_key(&id) {
            return Err(ScheduleError::InFlight(timer.value));
        }
        if self.store.contains(&id) {
            return Err(ScheduleError::Pending(timer.value));
        }
        let queue = timer.queue.clone();
        if let Err(full) = self.store.wheel.try_insert(id.clone(), tick, timer) {
            return Err(ScheduleError::Full(full.0.value));
        }
        let members = self.queues.entry(queue).or_insert_with(|| Members {
            pending: HashSet::new(),
            in_flight: HashSet::new(),
        });
        members.pending.insert(id);
        Ok(())
    }

    /// Moves a pending timer to `tick`/`at`, as if scheduled anew (new `seq`).
    pub(crate) fn reschedule(
        &mut self,
        id: &K,
        tick: u64,
        at: Instant,
        seq: u64,
    ) -> Result<(), RescheduleError> {
        let Some((_, mut timer)) = self.store.take(id) else {
            return Err(if self.in_flight.contains_key(id) {
                RescheduleError::InFlight
            } else {
                RescheduleError::NotFound
            });
        };
        timer.at = at;
        timer.seq = seq;
        // Cannot fail: `take` just freed an entry in this wheel.
        let reinserted = self.store.wheel.try_insert(id.clone(), tick, timer);
        debug_assert!(reinserted.is_ok(), "re-insert after take has room");
        Ok(())
    }

    pub(crate) fn cancel(&mut self, id: &K) -> Cancel<T> {
        if let Some((_, timer)) = self.store.take(id) {
            self.leave_queue(&timer.queue, id, false);
            return Cancel::Cancelled(timer.value);
        }
        if self.in_flight.contains_key(id) {
            Cancel::InFlight
        } else {
            Cancel::NotFound
        }
    }

    /// Takes every pending member of `queue` into `cancelled` as `(tick, seq, id, value)`
    /// and lists its in-flight members in `in_flight` as `(tick, seq, id)`.
    pub(crate) fn drain(
        &mut self,
        queue: &Q,
        cancelled: &mut Vec<(u64, u64, K, T)>,
        in_flight: &mut Vec<(u64, u64, K)>,
    ) {
        let Some(members) = self.queues.get_mut(queue) else {
            return;
        };
        for id in &members.in_flight {
            if let Some(f) = self.in_flight.get(id) {
                in_flight.push((f.tick, f.seq, id.clone()));
            }
        }
        let pending = std::mem::take(&mut members.pending);
        if members.in_flight.is_empty() {
            self.queues.remove(queue);
        }
        for id in pending {
            if let Some((tick, timer)) = self.store.take(&id) {
                cancelled.push((tick, timer.seq, id, timer.value));
            }
        }
    }

    /// The delivery-order key of this shard's next due timer at `now`, polling the wheel
    /// into the cursor if needed; `None` when nothing more is due.
    pub(crate) fn head(&mut self, now: u64, cursor: &mut Cursor<Q, K, T>) -> Option<(u64, u64)> {
        if cursor.wheel_head.is_none() && !cursor.wheel_done {
            match self.store.wheel.poll_with_deadline(now) {
                // The wheel's clock never goes back: after a poll at a later `now` it also
                // returns timers due by then. Keep those for a later `now`: never early.
                Some((id, tick, timer)) if tick > now => {
                    self.store.stage(Popped { id, tick, timer });
                    cursor.wheel_done = true;
                }
                Some((id, tick, timer)) => cursor.wheel_head = Some(Popped { id, tick, timer }),
                None => cursor.wheel_done = true,
            }
        }
        let wheel = cursor.wheel_head.as_ref().map(Popped::order);
        let staged = self.store.staged_head(now);
        match (wheel, staged) {
            (Some(w), Some(s)) => Some(w.min(s)),
            (w, s) => w.or(s),
        }
    }

    /// Takes the timer [`head`](Self::head) names and marks it in flight.
    pub(crate) fn take_head(
        &mut self,
        now: u64,
        cursor: &mut Cursor<Q, K, T>,
    ) -> Option<Popped<Q, K, T>> {
        let key = self.head(now, cursor)?;
        let popped = match cursor.wheel_head.take() {
            Some(w) if w.order() == key => w,
            other => {
                cursor.wheel_head = other;
                self.store.pop_staged()?
            }
        };
        self.in_flight.insert(
            popped.id.clone(),
            Flight {
                tick: popped.tick,
                seq: popped.timer.seq,
            },
        );
        if let Some(members) = self.queues.get_mut(&popped.timer.queue) {
            if let Some(id) = members.pending.take(&popped.id) {
                members.in_flight.insert(id);
            }
        }
        Some(popped)
    }

    /// Ends a merge: the wheel timer the cursor holds (polled, not taken) is staged, so it
    /// stays pending and keeps its place.
    pub(crate) fn close(&mut self, cursor: Cursor<Q, K, T>) {
        if let Some(popped) = cursor.wheel_head {
            self.store.stage(popped);
        }
    }

    /// The dispatcher is done with an in-flight id.
    pub(crate) fn finish(&mut self, id: &K, queue: &Q) {
        if self.in_flight.remove(id).is_some() {
            self.leave_queue(queue, id, true);
        }
    }

    /// An untaken timer of a dropped batch: in flight again becomes pending (and due).
    pub(crate) fn put_back(&mut self, popped: Popped<Q, K, T>) {
        if self.in_flight.remove(&popped.id).is_none() {
            debug_assert!(
                false,
                "a batch item is in flight until the batch lets it go"
            );
            return;
        }
        if let Some(members) = self.queues.get_mut(&popped.timer.queue) {
            if let Some(id) = members.in_flight.take(&popped.id) {
                members.pending.insert(id);
            }
        }
        self.store.stage(popped);
    }

    fn leave_queue(&mut self, queue: &Q, id: &K, in_flight: bool) {
        let Some(members) = self.queues.get_mut(queue) else {
            return;
        };
        if in_flight {
            members.in_flight.remove(id);
        } else {
            members.pending.remove(id);
        }
        if members.pending.is_empty() && members.in_flight.is_empty() {
            self.queues.remove(queue);
        }
    }

    /// The earliest tick a `pop_due` may find a timer due here; never later than the
    /// earliest pending deadline (see `Wheel::next_expiration`).
    pub(crate) fn earliest(&self) -> Option<u64> {
        let staged = self
            .store
            .staged
            .first_key_value()
            .map(|(&(tick, _), _)| tick);
        match (staged, self.store.wheel.next_expiration()) {
            (Some(s), Some(w)) => Some(s.min(w)),
            (s, w) => s.or(w),
        }
    }

    pub(crate) fn pending_len(&self) -> usize {
        self.store.len()
    }

    pub(crate) fn staged_len(&self) -> usize {
        self.store.staged_timers.len()
    }

    pub(crate) fn in_flight_len(&self) -> usize {
        self.in_flight.len()
    }

    pub(crate) fn queue_len(&self, queue: &Q) -> usize {
        self.queues.get(queue).map_or(0, |m| m.pending.len())
    }

    /// Appends `(oldest, queue)` for every queue with a member here, where `oldest` is the
    /// lowest `seq` among the queue's members in this shard: the `seq` a pending member
    /// carries, or the one an in-flight member was popped with. O(members here).
    ///
    /// Only current members count, and `seq` is global, so the lowest over all shards is
    /// the same whatever the shard count (`Scheduler::queues` takes it).
    pub(crate) fn queues_into(&self, out: &mut Vec<(u64, Q)>) {
        for (queue, m) in &self.queues {
            let pending = m.pending.iter().filter_map(|id| self.store.seq(id));
            let in_flight = m
                .in_flight
                .iter()
                .filter_map(|id| self.in_flight.get(id).map(|f| f.seq));
            if let Some(oldest) = pending.chain(in_flight).min() {
                out.push((oldest, queue.clone()));
            }
        }
    }

    /// Appends every queue with a member here (no order). O(queues here).
    pub(crate) fn queue_names_into(&self, out: &mut HashSet<Q>) {
        out.extend(self.queues.keys().cloned());
    }

    pub(crate) fn wheel_stats(&self) -> WheelStats {
        self.store.wheel.stats()
    }

    /// Walks the whole shard and asserts that the stores, the in-flight set and the queue
    /// lists agree. Test-only.
    #[cfg(test)]
    pub(crate) fn check_invariants(&self) {
        assert_eq!(
            self.store.staged.len(),
            self.store.staged_timers.len(),
            "staged order and timers agree"
        );
        for (&(tick, seq), id) in &self.store.staged {
            let entry = self.store.staged_timers.get(id);
            assert!(
                entry.is_some_and(|(t, timer)| *t == tick && timer.seq == seq),
                "staged entry matches its key"
            );
            assert!(
                !self.store.wheel.contains(id),
                "a staged id is not in the wheel too"
            );
        }
        let mut members = 0;
        for m in self.queues.values() {
            assert!(
                !m.pending.is_empty() || !m.in_flight.is_empty(),
                "a listed queue has members"
            );
            for id in &m.pending {
                assert!(self.store.contains(id), "a pending member is in a store");
                assert!(
                    !self.in_flight.contains_key(id),
                    "a pending member is not in flight"
                );
            }
            for id in &m.in_flight {
                assert!(
                    self.in_flight.contains_key(id),
                    "an in-flight member is in flight"
                );
            }
            members += m.pending.len() + m.in_flight.len();
        }
        assert_eq!(
            members,
            self.store.len() + self.in_flight.len(),
            "every id is a member of one queue"
        );
    }
}
