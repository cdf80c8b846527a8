//! One shard: the state behind one of the scheduler's mutexes.
//!
//! A shard owns the ids that hash to it. Each of its timers lives in one **entry** of a
//! slab (`entries`), found by id through `ids`, the shard's only id-keyed map; the entry
//! records where the timer is (its [`Place`]):
//!
//! - `Wheel` — **pending**, waiting for its deadline in `wheel`, which holds entry indexes;
//! - `Staged` — **pending** and already due: taken out of the wheel by a `pop_due` that
//!   looked at it but stopped at its limit, or put back by a dropped `DueBatch`; listed in
//!   `staged`, ordered by `(deadline tick, seq)` so it merges with the wheel in delivery
//!   order;
//! - `Polled` — out of the wheel, held by the cursor of the `pop_due` running now (which
//!   holds this shard's lock): taken next, or staged when that `pop_due` ends;
//! - `InFlight` — popped; its `Due` is not done yet. The entry keeps the id, deadline and
//!   `seq` (for drains); the `Due` carries the queue name and the value;
//! - `Forwarded` — came back from the dispatcher (`Due::retry_at`, or a dropped `DueBatch`)
//!   while its queue is frozen here: held with its value, in no store, never due, until
//!   `take_forwarded` takes it or `unfreeze_queue` makes it pending again (see `freeze.rs`).
//!
//! `frozen` lists the queues frozen in this shard. A frozen queue has no `Wheel` or `Staged`
//! member here: the freeze took them under this lock, and nothing files one while the mark
//! stays (`schedule` refuses, a returning timer is forwarded).
//!
//! So a timer's life costs two hash lookups of its id (insert at `schedule`, remove when it
//! ends) plus one of its queue name at `schedule`: popping it, putting it back and
//! finishing it go by entry index.
//!
//! Queues: `queue_ids` maps a queue name to a queue record in `queue_recs`, which counts the
//! queue's pending and in-flight members here and heads a doubly linked list of their
//! entries (`prev`/`next` entry indexes, [`NIL`] at the ends), so a drain visits its members
//! only. Entries store their queue record's index. A queue record is freed as soon as its
//! queue has no member here, and entries are reused through a free list, so memory follows
//! the live timers and queues.
//!
//! Everything here runs under the shard's lock; nothing here calls back into the scheduler
//! or takes another lock, and nothing here drops an id, a queue name or a value: what an
//! operation removes of those goes to the caller's [`Trash`] (ids and queue names) or back
//! to the caller (values), to be dropped after the lock.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Instant;

use hashbrown::{HashMap, HashSet};

use super::flow::QueueFlow;
use super::trash::Trash;
use super::types::{Cancel, RescheduleError};
use crate::wheel::{TimerKey, Wheel, WheelStats};
use ids::{IdMap, Slot};

#[cfg(test)]
mod check;
mod done_list;
mod flow;
mod freeze;
mod ids;
mod inspect;
mod memory;
mod pop;
mod queues;

pub(crate) use done_list::DoneList;
pub(crate) use freeze::{Ordered, Refusal};
pub(crate) use queues::Mark;

/// "No entry": the end of a queue's list.
const NIL: u32 = u32::MAX;

/// A scheduled timer, as handed to `schedule` and carried while in flight.
#[derive(Debug)]
pub(crate) struct Timer<Q, T> {
    pub(crate) queue: Q,
    /// The instant the caller asked for (before rounding up to a tick).
    pub(crate) at: Instant,
    /// Global schedule order: ties between equal deadline ticks go to the lower `seq`.
    pub(crate) seq: u64,
    pub(crate) value: T,
}

/// A timer out of its store: in a `DueBatch`, or being put back.
#[derive(Debug)]
pub(crate) struct Popped<Q, K, T> {
    pub(crate) id: K,
    /// Its entry in the shard, which stays `InFlight` until the `Due` is done (and keeps
    /// the deadline tick and `seq`, which the batch does not carry).
    pub(crate) entry: u32,
    pub(crate) queue: Q,
    /// The deadline as given (see [`Timer::at`]).
    pub(crate) at: Instant,
    pub(crate) value: T,
    /// The queue's flow record if the timer holds one of its slots.
    pub(crate) flow: Option<Arc<QueueFlow<Q>>>,
}

/// Where `pop_due`'s merge stands in one shard: the entry of the wheel's next due timer,
/// already polled out (`Polled`) but not yet taken, with its delivery-order key (kept here
/// so that the merge compares without looking the entry up again), and whether the wheel
/// has no more due timers.
#[derive(Debug, Default)]
pub(crate) struct Cursor {
    wheel_head: Option<(u32, (u64, u64))>,
    wheel_done: bool,
}

/// Where an entry's timer is; see the module doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Wheel(TimerKey),
    Polled,
    Staged,
    InFlight,
    Forwarded,
    /// Due, of a held queue or one at its concurrency limit: on its queue record's
    /// `parked` set.
    Parked,
}

/// One timer of this shard.
#[derive(Debug)]
struct Entry<Q, K, T> {
    id: K,
    tick: u64,
    seq: u64,
    at: Instant,
    place: Place,
    /// Index of its queue record.
    queue: u32,
    /// Neighbours in its queue's list.
    prev: u32,
    next: u32,
    /// The queue name and the value; `None` while in flight (the `Due` has them).
    payload: Option<(Q, T)>,
}

impl<Q, K, T> Entry<Q, K, T> {
    /// The delivery-order key.
    fn order(&self) -> (u64, u64) {
        (self.tick, self.seq)
    }
}

/// A queue with at least one member in this shard.
#[derive(Debug)]
struct QueueRec<Q> {
    name: Q,
    /// First entry of its members' list.
    head: u32,
    pending: usize,
    in_flight: usize,
    forwarded: usize,
    /// Whether the queue is held here (its name is in `held`), copied into the record so
    /// that `pop_due` tells by index, not by hashing the name.
    held: bool,
    /// Its due members met by `pop_due` while held or at its limit (`Place::Parked`), by
    /// delivery order.
    parked: BTreeMap<(u64, u64), u32>,
    /// The queue's shared flow record, while it has one (a concurrency limit was set).
    flow: Option<Arc<QueueFlow<Q>>>,
}

/// The state one shard mutex guards.
#[derive(Debug)]
pub(crate) struct ShardState<Q, K, T> {
    ids: IdMap<K>,
    entries: Vec<Option<Entry<Q, K, T>>>,
    free_entries: Vec<u32>,
    wheel: Wheel<u32>,
    staged: BTreeMap<(u64, u64), u32>,
    in_flight: usize,
    /// Entries `Forwarded`.
    forwarded: usize,
    queue_ids: HashMap<Q, u32>,
    queue_recs: Vec<Option<QueueRec<Q>>>,
    free_queues: Vec<u32>,
    /// Queues frozen in this shard (see the module doc).
    frozen: HashSet<Q>,
    /// Queues held in this shard (see `flow.rs`).
    held: HashSet<Q>,
    /// Queues with a flow record, and the record (see `flow.rs`).
    limited: HashMap<Q, Arc<QueueFlow<Q>>>,
    /// Entries `Parked`.
    parked: usize,
    /// Kept between settles of the done list, so that settling allocates nothing.
    done_buffer: Vec<u32>,
}

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> ShardState<Q, K, T> {
    pub(crate) fn new() -> Self {
        ShardState {
            ids: IdMap::default(),
            entries: Vec::new(),
            free_entries: Vec::new(),
            wheel: Wheel::new(),
            staged: BTreeMap::new(),
            in_flight: 0,
            forwarded: 0,
            queue_ids: HashMap::new(),
            queue_recs: Vec::new(),
            free_queues: Vec::new(),
            frozen: HashSet::new(),
            held: HashSet::new(),
            limited: HashMap::new(),
            parked: 0,
            done_buffer: Vec::new(),
        }
    }

    /// Adds a timer for a new id; refuses an id that is pending, forwarded or in flight,
    /// and a queue frozen here. An id met in flight is looked at again after settling `done`
    /// (its `Due` may be done). A refused timer comes back whole, with why (`schedule`
    /// turns it into a `ScheduleError`, `import` hands the id back too).
    #[inline]
    pub(crate) fn insert(
        &mut self,
        id: K,
        tick: u64,
        timer: Timer<Q, T>,
        done: &DoneList,
        trash: &mut Trash<Q, K>,
    ) -> Result<(), (Refusal, K, Timer<Q, T>)> {
        // One branch, no hashing, while nothing is frozen here.
        if !self.frozen.is_empty() && self.frozen.contains(&timer.queue) {
            return Err((Refusal::Frozen, id, timer));
        }
        let vacant = match self.ids.slot(&id) {
            Slot::Taken(index) => {
                if self.entry(index).place != Place::InFlight {
                    return Err((Refusal::Pending, id, timer));
                }
                if done.settle(self, trash) {
                    return self.insert(id, tick, timer, done, trash);
                }
                return Err((Refusal::InFlight, id, timer));
            }
            Slot::Free(v) => v,
        };
        let index = match self.free_entries.last() {
            Some(&free) => free,
            None => match u32::try_from(self.entries.len()) {
                Ok(next) if next != NIL => next,
                _ => return Err((Refusal::Full, id, timer)),
            },
        };
        let key = match self.wheel.try_insert(tick, index) {
            Ok(key) => key,
            Err(_) => return Err((Refusal::Full, id, timer)),
        };
        let entry_id = id.clone();
        vacant.insert((id, index));
        let queue = self.queue_of(&timer.queue);
        let next = self.link(queue, index);
        // Written once, whole, where it goes (a push, or over the free slot's `None`).
        let entry = Some(Entry {
            id: entry_id,
            tick,
            seq: timer.seq,
            at: timer.at,
            place: Place::Wheel(key),
            queue,
            prev: NIL,
            next,
            payload: Some((timer.queue, timer.value)),
        });
        if self.free_entries.pop().is_some() {
            self.entries[index as usize] = entry;
        } else {
            self.entries.push(entry);
        }
        Ok(())
    }

    /// Moves a pending timer to `tick`/`at`, as if scheduled anew (new `seq`).
    pub(crate) fn reschedule<B: Hash + Eq + ?Sized>(
        &mut self,
        id: &B,
        tick: u64,
        at: Instant,
        seq: u64,
        done: &DoneList,
        trash: &mut Trash<Q, K>,
    ) -> Result<(), RescheduleError>
    where
        K: Borrow<B>,
    {
        let index = self.ids.get(id).ok_or(RescheduleError::NotFound)?;
        let place = self.entry(index).place;
        match place {
            Place::InFlight if done.settle(self, trash) => {
                return self.reschedule(id, tick, at, seq, done, trash);
            }
            Place::InFlight => return Err(RescheduleError::InFlight),
            Place::Forwarded => return Err(RescheduleError::Frozen),
            Place::Wheel(_) | Place::Staged | Place::Polled | Place::Parked => {}
        }
        self.unfile(index);
        let entry = self.entry_mut(index);
        (entry.tick, entry.at, entry.seq) = (tick, at, seq);
        match self.wheel.try_insert(tick, index) {
            Ok(key) => self.entry_mut(index).place = Place::Wheel(key),
            // The wheel is full (u32::MAX - 1 timers): the staged set takes any deadline
            // (`head` and `earliest` read it by tick), so the timer is not lost.
            Err(_) => self.stage(index),
        }
        Ok(())
    }

    /// Cancels a pending timer; an id met in flight is looked at again after settling
    /// `done`. The shard's copies of the id and the queue name go to `trash`.
    pub(crate) fn cancel<B: Hash + Eq + ?Sized>(
        &mut self,
        id: &B,
        done: &DoneList,
        trash: &mut Trash<Q, K>,
    ) -> Cancel<T>
    where
        K: Borrow<B>,
    {
        let Some(index) = self.ids.get(id) else {
            return Cancel::NotFound;
        };
        if self.entry(index).place == Place::InFlight {
            if done.settle(self, trash) {
                return self.cancel(id, done, trash);
            }
            return Cancel::InFlight;
        }
        if let Some(key) = self.ids.remove(id) {
            trash.id(key);
        }
        let (id, value) = self.remove_pending(index, trash);
        trash.id(id);
        Cancel::Cancelled(value)
    }

    /// Takes every pending (or forwarded) member of `queue` into `cancelled` as `(tick, seq, (id, value))`
    /// and lists its in-flight members in `in_flight` as `(tick, seq, id)`. The shard's
    /// other copies of the ids and the queue names go to `trash`.
    pub(crate) fn drain<B: Hash + Eq + ?Sized>(
        &mut self,
        queue: &B,
        cancelled: &mut Vec<Ordered<(K, T)>>,
        in_flight: &mut Vec<Ordered<K>>,
        done: &DoneList,
        trash: &mut Trash<Q, K>,
    ) where
        Q: Borrow<B>,
    {
        let Some(&rec) = self.queue_ids.get(queue) else {
            return;
        };
        // In-flight members may be done: settle, then look the queue up again.
        if self.queue_rec(rec).in_flight > 0 && done.settle(self, trash) {
            return self.drain(queue, cancelled, in_flight, done, trash);
        }
        // Room for every member at once: growing by doubling would copy the lists (and
        // reallocate) with the lock held.
        let q = self.queue_rec(rec);
        cancelled.reserve(q.pending + q.forwarded);
        in_flight.reserve(q.in_flight);
        // Walks the list once, taking the pending members out without unlinking each one:
        // the in-flight members, which stay, are linked anew into the queue's list.
        let mut index = std::mem::replace(&mut self.queue_rec_mut(rec).head, NIL);
        let mut kept = NIL;
        while index != NIL {
            let entry = self.entry(index);
            let next = entry.next;
            if entry.place == Place::InFlight {
                in_flight.push((entry.tick, entry.seq, entry.id.clone()));
                self.entry_mut(index).prev = kept;
                match kept {
                    NIL => self.queue_rec_mut(rec).head = index,
                    _ => self.entry_mut(kept).next = index,
                }
                kept = index;
            } else {
                self.unfile(index);
                let entry = self.free_entry(index);
                if let Some(key) = self.ids.remove(&entry.id) {
                    trash.id(key);
                }
                if entry.place == Place::Forwarded {
                    self.queue_rec_mut(rec).forwarded -= 1;
                    self.forwarded -= 1;
                } else {
                    self.queue_rec_mut(rec).pending -= 1;
                }
                let (queue, value) = entry.payload.expect("a pending entry holds its payload");
                trash.queue(queue);
                cancelled.push((entry.tick, entry.seq, (entry.id, value)));
            }
            index = next;
        }
        match kept {
            // No member left here: the record goes.
            NIL => self.free_queue_rec(rec, trash),
            _ => self.entry_mut(kept).next = NIL,
        }
    }

    /// The earliest tick a `pop_due` may find a timer due here; never later than the
    /// earliest pending deadline (see `Wheel::next_expiration`).
    ///
    /// Never earlier than the shard's due bound either (both are lower bounds of that
    /// deadline): a `pop_due` at the tick returned locks this shard and polls its wheel, so
    /// a waiter that sleeps until it and pops there always makes progress. (The wheel may
    /// name the tick a waiting run timer's slot would have cascaded, below the bound; a
    /// `pop_due` there would pass the shard over, and the waiter would wake again at once.)
    pub(crate) fn earliest(&self) -> Option<u64> {
        let staged = self.staged.first_key_value().map(|(&(tick, _), _)| tick);
        let earliest = match (staged, self.wheel.next_expiration_or_never()) {
            (Some(s), Some(w)) => s.min(w),
            (s, w) => s.or(w)?,
        };
        Some(earliest.max(self.due_from()))
    }

    /// Timers pending here (in the wheel or staged), not counting the forwarded ones.
    pub(crate) fn pending_len(&self) -> usize {
        self.ids.len() - self.in_flight - self.forwarded
    }

    pub(crate) fn forwarded_len(&self) -> usize {
        self.forwarded
    }

    pub(crate) fn staged_len(&self) -> usize {
        self.staged.len()
    }

    pub(crate) fn in_flight_len(&self) -> usize {
        self.in_flight
    }

    pub(crate) fn queue_len<B: Hash + Eq + ?Sized>(&self, queue: &B) -> usize
    where
        Q: Borrow<B>,
    {
        self.queue_ids.get(queue).map_or(0, |&rec| {
            let rec = self.queue_rec(rec);
            rec.pending + rec.forwarded
        })
    }

    /// Appends `(oldest, queue)` for every queue with a member here, where `oldest` is the
    /// lowest `seq` among the queue's members in this shard: the `seq` a pending member
    /// carries, or the one an in-flight member was popped with. O(members here).
    ///
    /// Only current members count, and `seq` is global, so the lowest over all shards is
    /// the same whatever the shard count (`Scheduler::queues` takes it).
    pub(crate) fn queues_into(&self, out: &mut Vec<(u64, Q)>) {
        for rec in self.queue_recs.iter().flatten() {
            let oldest = self.members(rec.head).map(|e| e.seq).min();
            if let Some(oldest) = oldest {
                out.push((oldest, rec.name.clone()));
            }
        }
    }

    /// Appends every queue with a member here (no order). O(queues here). A `Vec`, not a
    /// set: a set would drop a clone it already holds, under the lock.
    pub(crate) fn queue_names_into(&self, out: &mut Vec<Q>) {
        out.extend(self.queue_ids.keys().cloned());
    }

    pub(crate) fn wheel_stats(&self) -> WheelStats {
        self.wheel.stats()
    }

    /// The done list's buffer, to swap with the list (see `DoneList::settle`).
    pub(crate) fn take_done_buffer(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.done_buffer)
    }

    pub(crate) fn return_done_buffer(&mut self, buffer: Vec<u32>) {
        self.done_buffer = buffer;
    }

    // --- entries ---------------------------------------------------------------------------

    fn entry(&self, index: u32) -> &Entry<Q, K, T> {
        self.entries[index as usize]
            .as_ref()
            .expect("an index held by the shard names a used entry")
    }

    fn entry_mut(&mut self, index: u32) -> &mut Entry<Q, K, T> {
        self.entries[index as usize]
            .as_mut()
            .expect("an index held by the shard names a used entry")
    }

    fn is_in_flight(&self, index: u32, id: &K) -> bool {
        self.entries
            .get(index as usize)
            .and_then(Option::as_ref)
            .is_some_and(|e| e.place == Place::InFlight && e.id == *id)
    }

    fn free_entry(&mut self, index: u32) -> Entry<Q, K, T> {
        self.free_entries.push(index);
        self.entries[index as usize]
            .take()
            .expect("a freed entry was used")
    }

    /// Takes a pending timer out of the wheel or the staged set (it stays in the slab).
    fn unfile(&mut self, index: u32) {
        let entry = self.entry(index);
        // A due timer of a limited queue may have been made due for a free slot: if it
        // leaves without taking it, the slot goes to a parked one (one branch while no
        // queue here has a flow record).
        if !self.limited.is_empty() && matches!(entry.place, Place::Wheel(_) | Place::Staged) {
            if let Some(flow) = &self.queue_rec(entry.queue).flow {
                flow.relist();
            }
        }
        match entry.place {
            Place::Wheel(_) | Place::Staged => {
                self.take_from_store(index);
            }
            // Held in no store.
            Place::Forwarded => {}
            Place::Parked => self.unpark(index),
            Place::Polled | Place::InFlight => {
                debug_assert!(false, "only a pending timer is unfiled");
            }
        }
    }

    /// Takes timer `index` out of the wheel or the staged set, whichever holds it; `false`
    /// (nothing changed) if it is in neither. O(1) in the wheel, O(log staged) staged.
    fn take_from_store(&mut self, index: u32) -> bool {
        let entry = self.entry(index);
        match entry.place {
            Place::Wheel(key) => {
                self.wheel.cancel(key);
            }
            Place::Staged => {
                let order = entry.order();
                self.staged.remove(&order);
            }
            _ => return false,
        }
        true
    }

    /// Removes a pending or forwarded timer whose id has already left `ids`: out of its
    /// store and its queue, entry freed. Returns the entry's id and the value; the queue
    /// name goes to `trash`.
    fn remove_pending(&mut self, index: u32, trash: &mut Trash<Q, K>) -> (K, T) {
        self.unfile(index);
        // Out of the slab whole: the rest reads the copy.
        let entry = self.free_entry(index);
        let rec = self.queue_rec_mut(entry.queue);
        if entry.place == Place::Forwarded {
            rec.forwarded -= 1;
            self.forwarded -= 1;
        } else {
            rec.pending -= 1;
        }
        self.unlink(entry.queue, entry.prev, entry.next, trash);
        let (queue, value) = entry.payload.expect("a pending entry holds its payload");
        trash.queue(queue);
        (entry.id, value)
    }

    fn stage(&mut self, index: u32) {
        let entry = self.entry_mut(index);
        entry.place = Place::Staged;
        let order = entry.order();
        self.staged.insert(order, index);
    }

    /// The first staged timer, if it is due by `now`.
    fn staged_head(&self, now: u64) -> Option<(u64, u64)> {
        self.staged
            .first_key_value()
            .map(|(&key, _)| key)
            .filter(|&(tick, _)| tick <= now)
    }
}

impl<Q, K, T> ShardState<Q, K, T> {
    /// A tick before which nothing here is due: no `pop_due` at a `now` below it finds a
    /// timer of this shard (the wheel's quiet bound, or the first staged timer's tick if
    /// earlier). O(1). Published by the shard after every lock (see `core.rs`).
    pub(crate) fn due_from(&self) -> u64 {
        let staged = self
            .staged
            .first_key_value()
            .map_or(u64::MAX, |(&(tick, _), _)| tick);
        self.wheel.quiet_until().min(staged)
    }
}
