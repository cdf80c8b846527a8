//! A shard's queues: a record per queue with a member here, heading a doubly linked list of
//! its members' entries (see the `shard` module doc).

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::hash::Hash;

use super::{Entry, NIL, QueueRec, ShardState};
use crate::sync::trash::Trash;

/// A per-shard mark of a queue name that keeps its members back: a hold (flow control,
/// members `Parked`) or a freeze (hand-off, members `Forwarded`).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Mark {
    Held,
    Frozen,
}

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> ShardState<Q, K, T> {
    /// Lifts `mark` from `queue` here (its name goes to `trash`) and makes the members it
    /// kept back pending again, deadline and order unchanged: parked ones are staged
    /// (`release_parked`), forwarded ones too (`unfreeze_forwarded`). Returns how many,
    /// and the earliest tick among them; `(0, None)` if the mark was not set here or the
    /// queue has no member here. O(1) expected to lift, then as the part called.
    pub(crate) fn lift<B: Hash + Eq + ?Sized>(
        &mut self,
        mark: Mark,
        queue: &B,
        trash: &mut Trash<Q, K>,
    ) -> (usize, Option<u64>)
    where
        Q: Borrow<B>,
    {
        let marks = match mark {
            Mark::Held => &mut self.held,
            Mark::Frozen => &mut self.frozen,
        };
        match marks.take(queue) {
            Some(name) => trash.queue(name),
            None => return (0, None),
        }
        let Some(&rec) = self.queue_ids.get(queue) else {
            return (0, None);
        };
        match mark {
            Mark::Held => self.release_parked(rec),
            Mark::Frozen => self.unfreeze_forwarded(rec),
        }
    }

    /// The record of queue `name`, created (with no member) if it has none here.
    pub(super) fn queue_of(&mut self, name: &Q) -> u32 {
        if let Some(&rec) = self.queue_ids.get(name) {
            return rec;
        }
        let rec = QueueRec {
            name: name.clone(),
            head: NIL,
            pending: 0,
            in_flight: 0,
            forwarded: 0,
            // Hashes the name only while some queue is held here.
            held: !self.held.is_empty() && self.held.contains(name),
            parked: BTreeMap::new(),
            flow: (!self.limited.is_empty())
                .then(|| self.limited.get(name).cloned())
                .flatten(),
        };
        let index = match self.free_queues.pop() {
            Some(free) => {
                self.queue_recs[free as usize] = Some(rec);
                free
            }
            None => {
                self.queue_recs.push(Some(rec));
                (self.queue_recs.len() - 1) as u32
            }
        };
        self.queue_ids.insert(name.clone(), index);
        index
    }

    pub(super) fn queue_rec(&self, rec: u32) -> &QueueRec<Q> {
        self.queue_recs[rec as usize]
            .as_ref()
            .expect("an entry's queue record exists")
    }

    pub(super) fn queue_rec_mut(&mut self, rec: u32) -> &mut QueueRec<Q> {
        self.queue_recs[rec as usize]
            .as_mut()
            .expect("an entry's queue record exists")
    }

    /// Puts pending entry `index`, about to be written, at the head of its queue's list;
    /// returns the entry's `next` (the old head). Its `prev` is [`NIL`].
    pub(super) fn link(&mut self, rec: u32, index: u32) -> u32 {
        let q = self.queue_rec_mut(rec);
        let old_head = std::mem::replace(&mut q.head, index);
        q.pending += 1;
        if old_head != NIL {
            self.entry_mut(old_head).prev = index;
        }
        old_head
    }

    /// Takes an entry, already out of the slab, out of its queue's list by its queue record
    /// `rec` and its neighbours `prev` and `next` (counts already updated); frees the record
    /// when the queue has no member left here (its name goes to `trash`, twice: the
    /// record's and the map's).
    pub(super) fn unlink(&mut self, rec: u32, prev: u32, next: u32, trash: &mut Trash<Q, K>) {
        if next != NIL {
            self.entry_mut(next).prev = prev;
        }
        if prev != NIL {
            // `prev` stays: the list is not empty.
            self.entry_mut(prev).next = next;
            return;
        }
        self.queue_rec_mut(rec).head = next;
        if next == NIL {
            self.free_queue_rec(rec, trash);
        }
    }

    /// Frees the record `rec` of a queue left with no member here (its name goes to `trash`,
    /// twice: the record's and the map's).
    pub(super) fn free_queue_rec(&mut self, rec: u32, trash: &mut Trash<Q, K>) {
        let q = self.queue_rec(rec);
        debug_assert_eq!(
            (q.head, q.pending, q.in_flight, q.forwarded),
            (NIL, 0, 0, 0),
            "an empty list counts none"
        );
        if let Some(q) = self.queue_recs[rec as usize].take() {
            if let Some((key, _)) = self.queue_ids.remove_entry(&q.name) {
                trash.queue(key);
            }
            trash.queue(q.name);
            self.free_queues.push(rec);
        }
    }

    /// The entries of a queue's list, from `head`.
    pub(super) fn members(&self, head: u32) -> impl Iterator<Item = &Entry<Q, K, T>> + '_ {
        let mut index = head;
        std::iter::from_fn(move || {
            if index == NIL {
                return None;
            }
            let entry = self.entry(index);
            index = entry.next;
            Some(entry)
        })
    }
}
