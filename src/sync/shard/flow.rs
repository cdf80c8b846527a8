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
//! `pop_due`'s merge meets one due; then, instead of taking it, the merge **parks** it: out
//! of the wheel or the staged set, onto its queue record's `parked` list, `Parked(its
//! position)`. So each due timer of a held queue costs the merge one look, once. A parked
//! timer is pending for everyone else (`cancel`, `drain_queue`, `freeze_queue`, `len`,
//! `lookup`), and `release` stages the parked ones (the staged set is ordered by deadline
//! and `seq`, so they come out in delivery order) in the same critical section that lifts
//! the mark: a `Parked` entry always belongs to a queue held here.
//!
//! While nothing is held here, the merge pays one branch (`held.is_empty()`).

use std::borrow::Borrow;
use std::hash::Hash;

use super::{Cursor, Place, ShardState};
use crate::sync::trash::Trash;

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

    /// Lifts the hold of `queue` here (its name goes to `trash`) and stages its parked
    /// members, due at once, deadline and order unchanged. Returns how many, and the
    /// earliest tick among them; `(0, None)` if it was not held. O(parked × log staged).
    pub(crate) fn release<B: Hash + Eq + ?Sized>(
        &mut self,
        queue: &B,
        trash: &mut Trash<Q, K>,
    ) -> (usize, Option<u64>)
    where
        Q: Borrow<B>,
    {
        match self.held.take(queue) {
            Some(name) => trash.queue(name),
            None => return (0, None),
        }
        let Some(&rec) = self.queue_ids.get(queue) else {
            return (0, None);
        };
        let q = self.queue_rec_mut(rec);
        q.held = false;
        let parked = std::mem::take(&mut q.parked);
        let mut earliest = None::<u64>;
        for &index in &parked {
            let tick = self.entry(index).tick;
            earliest = Some(earliest.map_or(tick, |e| e.min(tick)));
            self.stage(index);
        }
        self.parked -= parked.len();
        (parked.len(), earliest)
    }

    /// Parked timers here, of every queue.
    pub(crate) fn parked_len(&self) -> usize {
        self.parked
    }

    /// The merge's candidate `key` (the order key `head` found: the cursor's wheel timer or
    /// the first staged one) if its queue is not held; otherwise parks it and returns
    /// `None`, for `head` to look again. Called only while something is held here.
    pub(super) fn park_if_held(&mut self, key: (u64, u64), cursor: &mut Cursor) -> bool {
        let index = match cursor.wheel_head {
            Some(w) if self.entry(w).order() == key => w,
            _ => match self.staged.get(&key) {
                Some(&index) => index,
                None => return false,
            },
        };
        let rec = self.entry(index).queue;
        if !self.queue_rec(rec).held {
            return false;
        }
        if cursor.wheel_head == Some(index) {
            cursor.wheel_head = None;
        } else {
            self.staged.remove(&key);
        }
        let q = self.queue_rec_mut(rec);
        let position = q.parked.len() as u32;
        q.parked.push(index);
        self.entry_mut(index).place = Place::Parked(position);
        self.parked += 1;
        true
    }

    /// Takes parked entry `index`, at `position` of its queue's list, off that list (it
    /// stays in the slab and its queue), moving the list's last entry into its place. O(1).
    pub(super) fn unpark(&mut self, index: u32, position: u32) {
        let rec = self.entry(index).queue;
        let q = self.queue_rec_mut(rec);
        let Some(&at) = q.parked.get(position as usize) else {
            debug_assert!(false, "a parked entry is on its queue's list");
            return;
        };
        debug_assert_eq!(at, index, "a parked entry knows its position");
        q.parked.swap_remove(position as usize);
        if let Some(&moved) = q.parked.get(position as usize) {
            self.entry_mut(moved).place = Place::Parked(position);
        }
        self.parked -= 1;
    }

    /// The parked members of the queue of record `rec` here.
    pub(super) fn parked_of(&self, rec: u32) -> usize {
        self.queue_rec(rec).parked.len()
    }
}
