//! A shard's part of looking without taking: an id's state, a queue's members and counts.
//! Nothing here changes the shard; the caller settled its done list first, so a `Due`
//! already done is not reported in flight.

use std::borrow::Borrow;
use std::hash::Hash;

use super::freeze::Ordered;
use super::{Entry, Place, ShardState};
use crate::sync::inspect::{IdInfo, IdState, Member, QueueCounts};

/// The public state of a place.
fn state_of(place: Place) -> IdState {
    match place {
        // `Polled` lives only inside a `pop_due` holding this lock: pending to everyone else.
        Place::Wheel(_) | Place::Staged | Place::Polled => IdState::Pending,
        Place::InFlight => IdState::InFlight,
        Place::Forwarded => IdState::Forwarded,
    }
}

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> ShardState<Q, K, T> {
    /// The entry of `id`, if it has a timer here.
    fn entry_of<B: Hash + Eq + ?Sized>(&self, id: &B) -> Option<&Entry<Q, K, T>>
    where
        K: Borrow<B>,
    {
        self.ids.get(id).map(|index| self.entry(index))
    }

    /// `id`'s queue (cloned), state and deadline. O(1) expected.
    pub(crate) fn lookup<B: Hash + Eq + ?Sized>(&self, id: &B) -> Option<IdInfo<Q>>
    where
        K: Borrow<B>,
    {
        let entry = self.entry_of(id)?;
        Some(IdInfo {
            queue: self.queue_rec(entry.queue).name.clone(),
            state: state_of(entry.place),
            deadline: entry.at,
        })
    }

    /// The value of `id`'s timer; `None` when it has none here or it is in flight (its
    /// `Due` holds the value). O(1) expected.
    pub(crate) fn value_of<B: Hash + Eq + ?Sized>(&self, id: &B) -> Option<&T>
    where
        K: Borrow<B>,
    {
        let entry = self.entry_of(id)?;
        entry.payload.as_ref().map(|(_, value)| value)
    }

    /// Appends every member of `queue` here, with its order key. O(members here).
    pub(crate) fn members_of<B: Hash + Eq + ?Sized>(
        &self,
        queue: &B,
        out: &mut Vec<Ordered<Member<K>>>,
    ) where
        Q: Borrow<B>,
    {
        if let Some(&rec) = self.queue_ids.get(queue) {
            out.extend(self.members(self.queue_rec(rec).head).map(|e| {
                let member = Member {
                    id: e.id.clone(),
                    state: state_of(e.place),
                    deadline: e.at,
                };
                (e.tick, e.seq, member)
            }));
        }
    }

    /// The counts of `queue` here, from its record. O(1) expected.
    pub(crate) fn counts_of<B: Hash + Eq + ?Sized>(&self, queue: &B) -> QueueCounts
    where
        Q: Borrow<B>,
    {
        self.queue_ids
            .get(queue)
            .map_or(QueueCounts::default(), |&rec| {
                let rec = self.queue_rec(rec);
                QueueCounts {
                    pending: rec.pending + rec.forwarded,
                    in_flight: rec.in_flight,
                    forwarded: rec.forwarded,
                }
            })
    }
}
