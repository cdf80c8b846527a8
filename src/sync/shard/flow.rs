//! A shard's part of flow control: the hold marks, the `Parked` place, and parking (see
//! `Scheduler::hold_queue`).
//!
//! A hold is a mark per queue in each shard, as a freeze is: the set `held` (which outlives
//! the queue's records, so a hold of an empty queue stays), copied into the queue's record
//! (`QueueRec::held`) whenever the record exists, so that `pop_due` tells a held timer by
//! the index its entry holds, without hashing the name. Setting or lifting the mark is O(1)
//! expected per shard: it never walks the queue.
//!
//! Rule kept here: a held queue's timers stay where they are (wheel, staged) until
//! `pop_due`'s merge (or `pop_due_queue`) meets one due; then, instead of taking it, it
//! **parks** it: out of the wheel or the staged set, onto its queue record's `parked`
//! list, `Parked(its position)`. So each due timer of a held queue costs the merge one look, once. A parked
//! timer is pending for everyone else (`cancel`, `drain_queue`, `freeze_queue`, `len`,
//! `lookup`), and `lift(Mark::Held)` stages the parked ones (the staged set is ordered by
//! deadline and `seq`, so they come out in delivery order) in the same critical section that
//! lifts the mark: a `Parked` entry always belongs to a queue held here.
//!
//! While nothing is held here, the merge pays one branch (`held.is_empty()`).

use std::borrow::Borrow;
use std::hash::Hash;

use std::sync::Arc;
use std::time::Instant;

use super::{NIL, Place, Popped, ShardState};
use crate::sync::flow::QueueFlow;

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> ShardState<Q, K, T> {
    /// Marks `queue` held here; `true` if it was not. O(1) expected.
    pub(crate) fn hold<B: Hash + Eq + ToOwned<Owned = Q> + ?Sized>(&mut self, queue: &B) -> bool
    where
        Q: Borrow<B>,
    {
        if self.held.contains(queue) {
            return false;
        }
        self.held.insert(queue.to_owned());
        if let Some(&rec) = self.queue_ids.get(queue) {
            self.queue_rec_mut(rec).held = true;
        }
        true
    }

    /// Whether `queue` is held here. O(1) expected.
    pub(crate) fn is_held<B: Hash + Eq + ?Sized>(&self, queue: &B) -> bool
    where
        Q: Borrow<B>,
    {
        !self.held.is_empty() && self.held.contains(queue)
    }

    /// For `lift(Mark::Held)`, the hold of queue record `rec` already lifted: stages its
    /// parked members, due at once, deadline and order unchanged (a member of a queue at
    /// its concurrency limit is parked again by the next merge that meets it). Returns how
    /// many, and the earliest tick among them. O(parked × log staged), or
    /// O(parked + staged) when more are parked than staged.
    pub(super) fn release_parked(&mut self, rec: u32) -> (usize, Option<u64>) {
        let q = self.queue_rec_mut(rec);
        q.held = false;
        let mut parked = std::mem::take(&mut q.parked);
        if let Some(flow) = &q.flow {
            flow.unparked(parked.len());
        }
        let (count, earliest) = (parked.len(), parked.first_key_value().map(|(&(t, _), _)| t));
        self.parked -= count;
        // The parked set is keyed as the staged one, by each member's order: a release of
        // more members than are staged merges the two sets in O(parked + staged) (a move
        // when nothing is staged) instead of one insertion each.
        debug_assert!(parked.iter().all(|(&key, &i)| key == self.entry(i).order()));
        if count > self.staged.len() {
            for &index in parked.values() {
                self.entry_mut(index).place = Place::Staged;
            }
            self.staged.append(&mut parked);
        } else {
            for &index in parked.values() {
                self.stage(index);
            }
        }
        (count, earliest)
    }

    /// Parked timers here, of every queue.
    pub(crate) fn parked_len(&self) -> usize {
        self.parked
    }

    /// Whether no queue is held or has a flow record here: then the merge looks at nothing
    /// else.
    pub(super) fn flow_free(&self) -> bool {
        self.held.is_empty() && self.limited.is_empty()
    }

    /// For `take` at `now` (ns since the origin): timer `index` (out of its store, about to
    /// go in flight) is parked if its queue is held; else it takes a slot of its queue's
    /// concurrency limit and one hand-out of its rate limit, if the queue has a flow
    /// record: `Ok` with the record to carry (or `None`). Otherwise the timer is parked
    /// and `Err` returned; if the rate refused, `(record, time in ns the
    /// next hand-out is permitted at)` is pushed on `throttles`, for the caller to register.
    /// See `flow/limit.rs` for why it counts itself parked before it tries again.
    pub(super) fn try_slot(
        &mut self,
        index: u32,
        now: u128,
        throttles: &mut Vec<(Arc<QueueFlow<Q>>, u128)>,
    ) -> Result<Option<Arc<QueueFlow<Q>>>, ()> {
        let rec = self.entry(index).queue;
        if self.queue_rec(rec).held {
            if let Some(flow) = &self.queue_rec(rec).flow {
                flow.parking(1);
            }
            self.park(index);
            return Err(());
        }
        let Some(flow) = self.queue_rec(rec).flow.clone() else {
            return Ok(None);
        };
        if !flow.acquire() {
            // Counted parked before the second try (see `flow/limit.rs`): an end between
            // the two tries either left the slot the second takes, or sees this one parked.
            flow.parking(1);
            if !flow.acquire() {
                self.park(index);
                return Err(());
            }
            flow.unparked(1);
        }
        if let Err(from) = flow.take_rate(now) {
            // Its throttle wake-up makes the parked timers due, slots permitting.
            flow.parking(1);
            flow.give_back();
            self.park(index);
            throttles.push((flow, from));
            return Err(());
        }
        Ok(Some(flow))
    }

    /// Puts timer `index`, out of its store, on its queue's parked set (the flow record,
    /// if any, already counts it).
    fn park(&mut self, index: u32) {
        let (order, rec) = (self.entry(index).order(), self.entry(index).queue);
        self.queue_rec_mut(rec).parked.insert(order, index);
        self.entry_mut(index).place = Place::Parked;
        self.parked += 1;
    }

    /// Takes parked entry `index` off its queue's parked set (it stays in the slab and its
    /// queue). O(log parked).
    pub(super) fn unpark(&mut self, index: u32) {
        let (order, rec) = (self.entry(index).order(), self.entry(index).queue);
        let q = self.queue_rec_mut(rec);
        if q.parked.remove(&order).is_none() {
            debug_assert!(false, "a parked entry is on its queue's set");
            return;
        }
        if let Some(flow) = &q.flow {
            flow.unparked(1);
        }
        self.parked -= 1;
    }

    /// The parked members of the queue of record `rec` here.
    pub(super) fn parked_of(&self, rec: u32) -> usize {
        self.queue_rec(rec).parked.len()
    }

    /// Gives `queue` the flow record `flow` here (once; later calls change nothing: the
    /// record is shared, and its limit changes there). O(1) expected.
    pub(crate) fn limit(&mut self, flow: &Arc<QueueFlow<Q>>) {
        let rec = flow.with_name(|name| {
            if self.limited.contains_key(name) {
                return Err(());
            }
            self.limited.insert(name.clone(), Arc::clone(flow));
            Ok(self.queue_ids.get(name).copied())
        });
        if let Ok(Some(rec)) = rec {
            let q = self.queue_rec_mut(rec);
            flow.parking(q.parked.len());
            q.flow = Some(Arc::clone(flow));
        }
    }

    /// The order key of the first parked member of `flow`'s queue here, unless the queue is
    /// held here (a hold keeps them parked whatever the limit).
    pub(crate) fn first_parked(&self, flow: &QueueFlow<Q>) -> Option<(u64, u64)> {
        let rec = flow.with_name(|name| self.queue_ids.get(name).copied())?;
        let q = self.queue_rec(rec);
        if q.held {
            return None;
        }
        q.parked.first_key_value().map(|(&key, _)| key)
    }

    /// Stages the first parked member of `flow`'s queue here (due at once, for a slot that
    /// came free); returns its tick.
    pub(crate) fn unpark_first(&mut self, flow: &QueueFlow<Q>) -> Option<u64> {
        let rec = flow.with_name(|name| self.queue_ids.get(name).copied())?;
        let (&(tick, _), &index) = self.queue_rec(rec).parked.first_key_value()?;
        self.unpark(index);
        self.stage(index);
        Some(tick)
    }

    /// Appends `(tick, seq, entry)` of every pending member of `queue` here (in the wheel,
    /// staged or parked) for `flush` and `pop_due_queue`; with `due_by`, only those due
    /// by that tick. `None` if the queue is held here and `skip_held` is set.
    /// O(members here).
    pub(crate) fn pending_of<B: Hash + Eq + ?Sized>(
        &self,
        queue: &B,
        due_by: Option<u64>,
        out: &mut Vec<(u64, u64, u32)>,
    ) where
        Q: Borrow<B>,
    {
        let Some(&rec) = self.queue_ids.get(queue) else {
            return;
        };
        let mut index = self.queue_rec(rec).head;
        while index != NIL {
            let entry = self.entry(index);
            let pending = matches!(entry.place, Place::Wheel(_) | Place::Staged | Place::Parked);
            if pending && due_by.is_none_or(|now| entry.tick <= now) {
                out.push((entry.tick, entry.seq, index));
            }
            index = entry.next;
        }
    }

    /// For `flush`: pending member `index` becomes due at `tick` (its deadline `at`, its
    /// order `seq`), staged. A member of a held queue is parked again by the next merge.
    pub(crate) fn make_due(&mut self, index: u32, tick: u64, at: Instant, seq: u64) {
        self.unfile(index);
        let entry = self.entry_mut(index);
        (entry.tick, entry.at, entry.seq) = (tick, at, seq);
        self.stage(index);
    }

    /// For `pop_due_queue`: pending member `index` goes in flight, unless its queue is
    /// held here (`Err(false)`: parked, as the merge parks it) or has no slot or rate for
    /// it (`Err(true)`: parked, its throttle wake-up on `throttles`).
    pub(crate) fn take_member(
        &mut self,
        index: u32,
        now_ns: u128,
        throttles: &mut Vec<(Arc<QueueFlow<Q>>, u128)>,
    ) -> Result<Popped<Q, K, T>, bool> {
        if self.queue_rec(self.entry(index).queue).held {
            self.park_member(index);
            return Err(false);
        }
        self.unfile(index);
        let flow = self.try_slot(index, now_ns, throttles).map_err(|()| true)?;
        self.fly(index, flow).ok_or(true)
    }

    /// For `pop_due_queue`: parks due member `index`, which its queue's hold or limits
    /// refuse (the merge would park it on meeting it); one already parked stays. Unlike
    /// `unfile`, it does not list the queue freed: the member leaves no slot behind.
    /// O(log staged + log parked).
    pub(crate) fn park_member(&mut self, index: u32) {
        if !self.take_from_store(index) {
            return;
        }
        if let Some(flow) = &self.queue_rec(self.entry(index).queue).flow {
            flow.parking(1);
        }
        self.park(index);
    }
}
