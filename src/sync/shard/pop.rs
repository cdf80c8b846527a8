//! A shard's part of `pop_due`: the merge (`head`, `take`, `close`) and the end of
//! the in-flight state (`finish`, `put_back`).

use std::hash::Hash;
use std::sync::Arc;

use super::{Cursor, Place, Popped, ShardState};
use crate::sync::flow::QueueFlow;
use crate::sync::trash::Trash;

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> ShardState<Q, K, T> {
    /// The delivery-order key of this shard's next due timer at `now`, polling the wheel
    /// into the cursor if needed; `None` when nothing more is due. A due timer of a held
    /// queue is returned like any other: [`take`](Self::take) parks it (one look at the
    /// timer the merge takes anyway, rather than one more per head).
    pub(crate) fn head(&mut self, now: u64, cursor: &mut Cursor) -> Option<(u64, u64)> {
        if cursor.wheel_head.is_none() && !cursor.wheel_done {
            match self.wheel.poll(now) {
                // The wheel's clock never goes back: after a poll at a later `now` it also
                // returns timers due by then. Keep those for a later `now`: never early.
                Some(expired) if expired.deadline > now => {
                    self.stage(expired.value);
                    cursor.wheel_done = true;
                }
                Some(expired) => {
                    let entry = self.entry_mut(expired.value);
                    entry.place = Place::Polled;
                    cursor.wheel_head = Some((expired.value, entry.order()));
                }
                None => cursor.wheel_done = true,
            }
        }
        let wheel = cursor.wheel_head.map(|(_, order)| order);
        let staged = self.staged_head(now);
        match (wheel, staged) {
            (Some(w), Some(s)) => Some(w.min(s)),
            (w, s) => w.or(s),
        }
    }

    /// Takes the timer whose order key `key` the last [`head`](Self::head) returned, and
    /// marks it in flight. A timer of a held queue, or of a limited queue that finds no
    /// slot or no hand-out of its rate, is parked instead and `None` returned (a throttled one's wake-up goes on `throttles`). `now_ns`:
    /// the `pop_due`'s `now` in nanoseconds since the origin, for the rate limits.
    pub(crate) fn take(
        &mut self,
        key: (u64, u64),
        cursor: &mut Cursor,
        now_ns: u128,
        throttles: &mut Vec<(Arc<QueueFlow<Q>>, u128)>,
    ) -> Option<Popped<Q, K, T>> {
        let index = match cursor.wheel_head {
            Some((w, order)) if order == key => {
                cursor.wheel_head = None;
                w
            }
            _ => {
                let (staged, index) = self.staged.pop_first()?;
                debug_assert_eq!(staged, key, "head named the first staged timer");
                index
            }
        };
        // One branch while no queue here is held or limited.
        let flow = if self.flow_free() {
            None
        } else {
            match self.try_slot(index, now_ns, throttles) {
                Ok(flow) => flow,
                Err(()) => return None,
            }
        };
        self.fly(index, flow)
    }

    /// Marks timer `index`, out of its store, in flight (carrying its queue's flow record
    /// `flow`, if it took a slot) and returns it.
    pub(super) fn fly(
        &mut self,
        index: u32,
        flow: Option<Arc<QueueFlow<Q>>>,
    ) -> Option<Popped<Q, K, T>> {
        let entry = self.entry_mut(index);
        let (queue, value) = entry.payload.take()?;
        entry.place = Place::InFlight;
        let rec = entry.queue;
        let popped = Popped {
            id: entry.id.clone(),
            entry: index,
            queue,
            at: entry.at,
            value,
            flow,
        };
        self.in_flight += 1;
        let rec = self.queue_rec_mut(rec);
        rec.pending -= 1;
        rec.in_flight += 1;
        Some(popped)
    }

    /// Ends a merge: the wheel timer the cursor holds (polled, not taken) is staged, so it
    /// stays pending and keeps its place.
    pub(crate) fn close(&mut self, cursor: Cursor) {
        if let Some((index, _)) = cursor.wheel_head {
            self.stage(index);
        }
    }

    /// The `Due` of in-flight entry `index` is done: the id leaves the shard (its copies go
    /// to `trash`).
    pub(crate) fn finish(&mut self, index: u32, trash: &mut Trash<Q, K>) {
        // Taken out whole at once: its fields are read from the copy, not looked up again.
        let Some(entry) = (self.entries.get_mut(index as usize))
            .and_then(|slot| slot.take_if(|e| e.place == Place::InFlight))
        else {
            debug_assert!(
                false,
                "a done entry is in use, and in flight until finished"
            );
            return;
        };
        self.free_entries.push(index);
        if let Some(key) = self.ids.remove(&entry.id) {
            trash.id(key);
        }
        self.in_flight -= 1;
        self.queue_rec_mut(entry.queue).in_flight -= 1;
        self.unlink(entry.queue, entry.prev, entry.next, trash);
        trash.id(entry.id);
    }

    /// An untaken timer of a dropped batch: in flight again becomes pending (and due), or
    /// forwarded if its queue is frozen here; returns its deadline tick. Its id goes to
    /// `trash` (the entry keeps its own copy). Gives the whole timer back if its entry is
    /// not in flight (never: a bug), for the caller to drop after the lock.
    pub(crate) fn put_back(
        &mut self,
        popped: Popped<Q, K, T>,
        trash: &mut Trash<Q, K>,
    ) -> Result<u64, Popped<Q, K, T>> {
        let index = popped.entry;
        if !self.is_in_flight(index, &popped.id) {
            debug_assert!(
                false,
                "a batch item is in flight until the batch lets it go"
            );
            return Err(popped);
        }
        trash.id(popped.id);
        self.in_flight -= 1;
        let entry = self.entry_mut(index);
        entry.payload = Some((popped.queue, popped.value));
        let (rec, tick) = (entry.queue, entry.tick);
        self.queue_rec_mut(rec).in_flight -= 1;
        if self.is_frozen_rec(rec) {
            // Never pending in a frozen queue: the handoff takes it (`take_forwarded`).
            self.forward(index);
        } else {
            self.queue_rec_mut(rec).pending += 1;
            self.stage(index);
        }
        Ok(tick)
    }
}
