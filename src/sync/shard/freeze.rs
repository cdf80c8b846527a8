//! A shard's part of freezing a queue: the frozen marks, the `Forwarded` place, and the
//! operations that move timers into and out of it (see the `shard` module doc and
//! `Scheduler::freeze_queue`).
//!
//! Rule kept here: while a queue is frozen in this shard, none of its members here is
//! pending (in the wheel or staged). `freeze` takes them all under the lock that sets the
//! mark; afterwards `insert` refuses the queue, and a timer of it coming back from the
//! dispatcher (`retry`, `put_back`) is forwarded. `lift(Mark::Frozen)` lifts the mark and
//! makes the forwarded members pending in the same critical section, so a `Forwarded` entry
//! always belongs to a queue frozen here.

use std::borrow::Borrow;
use std::hash::Hash;
use std::time::Instant;

use super::{Entry, NIL, Place, ShardState};
use crate::sync::freeze::{FrozenEntry, Retried};
use crate::sync::trash::Trash;
use crate::sync::types::ScheduleError;

/// Why `ShardState::insert` refused a timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    Pending,
    InFlight,
    Full,
    Frozen,
}

impl Refusal {
    pub(crate) fn error<T>(self, value: T) -> ScheduleError<T> {
        match self {
            Refusal::Pending => ScheduleError::Pending(value),
            Refusal::InFlight => ScheduleError::InFlight(value),
            Refusal::Full => ScheduleError::Full(value),
            Refusal::Frozen => ScheduleError::Frozen(value),
        }
    }
}

/// A member taken out with its order key: `(tick, seq, entry)`.
pub(crate) type Ordered<E> = (u64, u64, E);

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> ShardState<Q, K, T> {
    /// Whether `queue` is frozen in this shard. O(1) expected.
    pub(crate) fn is_frozen<B: Hash + Eq + ?Sized>(&self, queue: &B) -> bool
    where
        Q: Borrow<B>,
    {
        !self.frozen.is_empty() && self.frozen.contains(queue)
    }

    /// Whether the queue of record `rec` is frozen here.
    pub(super) fn is_frozen_rec(&self, rec: u32) -> bool {
        !self.frozen.is_empty() && self.frozen.contains(&self.queue_rec(rec).name)
    }

    /// Marks `queue` frozen here (if it is not), takes its pending members into `pending`
    /// and lists its in-flight members in `in_flight`. Forwarded members stay. The caller
    /// settled the done list (so a done `Due` is not reported in flight). O(members here).
    pub(crate) fn freeze<B: Hash + Eq + ToOwned<Owned = Q> + ?Sized>(
        &mut self,
        queue: &B,
        pending: &mut Vec<Ordered<FrozenEntry<K, T>>>,
        in_flight: &mut Vec<Ordered<K>>,
        trash: &mut Trash<Q, K>,
    ) where
        Q: Borrow<B>,
    {
        if !self.frozen.contains(queue) {
            self.frozen.insert(queue.to_owned());
        }
        let Some(&rec) = self.queue_ids.get(queue) else {
            return;
        };
        let mut index = self.queue_rec(rec).head;
        while index != NIL {
            let entry = self.entry(index);
            let next = entry.next;
            match entry.place {
                Place::InFlight => in_flight.push((entry.tick, entry.seq, entry.id.clone())),
                Place::Forwarded => {}
                Place::Wheel(_) | Place::Staged | Place::Polled | Place::Parked => {
                    pending.push(self.take_out(index, trash));
                }
            }
            index = next;
        }
    }

    /// Lists the in-flight members of `queue` here. The caller settled. O(members here).
    pub(crate) fn in_flight_of<B: Hash + Eq + ?Sized>(&self, queue: &B, out: &mut Vec<Ordered<K>>)
    where
        Q: Borrow<B>,
    {
        if let Some(&rec) = self.queue_ids.get(queue) {
            let members = self.members(self.queue_rec(rec).head);
            let flying = members.filter(|e| e.place == Place::InFlight);
            out.extend(flying.map(|e| (e.tick, e.seq, e.id.clone())));
        }
    }

    /// Takes the forwarded members of `queue` out into `out`. O(members here).
    pub(crate) fn take_forwarded<B: Hash + Eq + ?Sized>(
        &mut self,
        queue: &B,
        out: &mut Vec<Ordered<FrozenEntry<K, T>>>,
        trash: &mut Trash<Q, K>,
    ) where
        Q: Borrow<B>,
    {
        let Some(&rec) = self.queue_ids.get(queue) else {
            return;
        };
        if self.queue_rec(rec).forwarded == 0 {
            return;
        }
        let mut index = self.queue_rec(rec).head;
        while index != NIL {
            let entry = self.entry(index);
            let next = entry.next;
            if entry.place == Place::Forwarded {
                out.push(self.take_out(index, trash));
            }
            index = next;
        }
    }

    /// For `lift(Mark::Frozen)`, the freeze of queue record `rec` already lifted: makes its
    /// forwarded members pending again, deadline and order unchanged. Returns how many,
    /// and the earliest tick among them. O(members here).
    pub(super) fn unfreeze_forwarded(&mut self, rec: u32) -> (usize, Option<u64>) {
        let (mut count, mut earliest) = (0, None::<u64>);
        let mut index = self.queue_rec(rec).head;
        while index != NIL {
            let entry = self.entry(index);
            let next = entry.next;
            if entry.place == Place::Forwarded {
                let tick = entry.tick;
                earliest = Some(earliest.map_or(tick, |e| e.min(tick)));
                self.forwarded -= 1;
                let q = self.queue_rec_mut(rec);
                q.forwarded -= 1;
                q.pending += 1;
                // Staged, not filed: it keeps its old `seq`, and the wheel gives equal ticks
                // in insertion order, which for it would not be `seq` order (the staged set
                // is ordered by `(tick, seq)` and takes any deadline).
                self.stage(index);
                count += 1;
            }
            index = next;
        }
        (count, earliest)
    }

    /// `Due::retry_at`: in-flight entry `index` (of `id`) becomes pending with the new
    /// deadline and `seq`, or forwarded if its queue is frozen here. The `Due`'s copy of the
    /// id goes to `trash`. Gives the queue name and value back if the entry is not in flight
    /// (never: only its `Due` ends that state), for the caller to drop after the lock.
    #[allow(clippy::too_many_arguments)] // one timer's parts, moved in
    pub(crate) fn retry(
        &mut self,
        index: u32,
        id: K,
        (queue, value): (Q, T),
        tick: u64,
        at: Instant,
        seq: u64,
        trash: &mut Trash<Q, K>,
    ) -> Result<Retried, (Q, T)> {
        let in_flight = self.is_in_flight(index, &id);
        trash.id(id);
        if !in_flight {
            debug_assert!(false, "a Due's entry is in flight until the Due ends");
            return Err((queue, value));
        }
        self.in_flight -= 1;
        let entry = self.entry_mut(index);
        (entry.tick, entry.at, entry.seq) = (tick, at, seq);
        entry.payload = Some((queue, value));
        let rec = entry.queue;
        self.queue_rec_mut(rec).in_flight -= 1;
        if self.is_frozen_rec(rec) {
            self.forward(index);
            return Ok(Retried::Forwarded);
        }
        self.queue_rec_mut(rec).pending += 1;
        self.file(index);
        Ok(Retried::Pending)
    }

    /// An entry just out of flight (payload restored, in-flight counts lowered) becomes
    /// forwarded.
    pub(super) fn forward(&mut self, index: u32) {
        let entry = self.entry_mut(index);
        entry.place = Place::Forwarded;
        let rec = entry.queue;
        self.queue_rec_mut(rec).forwarded += 1;
        self.forwarded += 1;
    }

    /// Files a timer that is in no store into the wheel at its tick; into the staged set if
    /// the wheel is full (it takes any deadline, so the timer is never lost).
    fn file(&mut self, index: u32) {
        let tick = self.entry(index).tick;
        match self.wheel.try_insert(tick, index) {
            Ok(key) => self.entry_mut(index).place = Place::Wheel(key),
            Err(_) => self.stage(index),
        }
    }

    /// Takes a pending or forwarded member out of the shard: `(tick, seq, entry)`. The
    /// shard's copies of the id and the queue name go to `trash`.
    fn take_out(&mut self, index: u32, trash: &mut Trash<Q, K>) -> Ordered<FrozenEntry<K, T>> {
        // Field by field, so the id map can be changed while the entry is read.
        let entry: Option<&Entry<Q, K, T>> = self.entries[index as usize].as_ref();
        let entry = entry.expect("an index held by the shard names a used entry");
        let (tick, seq, at) = (entry.tick, entry.seq, entry.at);
        if let Some(key) = self.ids.remove(&entry.id) {
            trash.id(key);
        }
        let (id, value) = self.remove_pending(index, trash);
        (tick, seq, FrozenEntry { id, at, value })
    }
}
