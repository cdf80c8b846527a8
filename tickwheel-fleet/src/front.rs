//! The journaled front: scheduler changes that write the queue's journal in Redis themselves
//! ([`FleetOptions::journal`]), so a user never pairs a scheduler call with
//! [`Member::journal_put`] or [`Member::journal_end`] by hand. The method names and argument
//! order are those of `tickwheel_journal::Durable`, the local journal: the fleet's Redis
//! journal is a second backend behind the same interface.
//!
//! **Record order.** Records of one id must reach Redis in the order of the changes they
//! describe, or a put could land after the end that followed it (a cancelled timer back at
//! the next owner). Each call submits its record while nothing else of the front can change
//! that id: a call on one id holds the id's stripe lock across the scheduler change and the
//! submit; [`Member::drain_queue`] holds every stripe; and a hand-out submits its record while
//! its timer is still in flight (which no other call can change), under its stripe too, so
//! that a reschedule whose timer was popped before its put went out submits first. The
//! journal applies one handle's submits of a queue in order.
//!
//! [`FleetOptions::journal`]: crate::FleetOptions::journal

use std::hash::Hash;
use std::time::Instant;

use serde::Serialize;
use tickwheel::sync::{
    Cancel, Drained, Due, IdState, RescheduleError, Retried, RetryError, ScheduleError,
};
use tickwheel_redis::journal::{JournalError, Op, Pending};

use crate::journal::MemberJournal;
use crate::{Error, FencedDue, Member, QueueName};

impl<Q, K, T> Member<Q, K, T>
where
    Q: QueueName,
    K: Hash + Eq + Clone + Send + Sync + Serialize + 'static,
    T: Send + Serialize + 'static,
{
    /// Adds a timer, as `Scheduler::schedule`, and records it in `queue`'s journal under
    /// this member's token for the queue. Treat the timer as accepted once the returned
    /// [`Pending`] resolves `Ok`: it is then durable in Redis, and the queue's next owner
    /// loads it if this member dies. The deadline goes to Redis on the reference clock as
    /// [`Member::journal_put`] describes. O(1) plus the encoding of id and value;
    /// group-committed.
    ///
    /// # Errors
    /// Nothing is scheduled on an outer `Err`: [`Error::JournalOff`] without
    /// [`FleetOptions::journal`](crate::FleetOptions::journal); [`Error::NotOwned`] if this
    /// member does not own `queue` now; [`Error::Journal`] if the id or value does not
    /// serialize (`JournalError::Corrupt`) or the id encodes to over
    /// `tickwheel_redis::journal::MAX_ID_BYTES` (`JournalError::IdTooLong`): both are found
    /// while encoding, before the scheduler is touched. `Ok(Err(..))` is the scheduler's
    /// refusal, with the value back (the id
    /// pending or in flight, the queue frozen by a handoff under way, its shard full):
    /// nothing is recorded then. The [`Pending`] resolves to
    /// `tickwheel_redis::journal::JournalError::Fenced` once another member holds the queue
    /// (the timer stays in this scheduler, never dispatched by this member again), or to
    /// another `JournalError` if Redis failed (see `Journal::submit`).
    pub fn schedule(
        &self,
        queue: Q,
        id: K,
        at: Instant,
        value: T,
    ) -> Result<Result<Pending, ScheduleError<T>>, Error> {
        let (j, token) = self.journal_for(&queue)?;
        let op = Op::put(&id, j.reference_us(at), &value)?;
        let _stripe = j.stripe(&id);
        let name = queue.clone();
        if let Err(e) = self.shared.scheduler.schedule(queue, id, at, value) {
            return Ok(Err(e));
        }
        Ok(Ok(j.journal.submit(name.as_ref(), token, vec![op])))
    }

    /// Moves a pending timer to `at`, as `Scheduler::reschedule`, and records its new
    /// deadline (with its value, read with `Scheduler::with_value`) in its queue's journal.
    /// Moved to a later deadline, it is never due earlier at the queue's next owner once the
    /// [`Pending`] resolved `Ok`. O(1) plus the encoding of id and value, which runs under
    /// the id's shard lock (`with_value` lends the value, it is not cloned);
    /// group-committed.
    ///
    /// # Errors
    /// Nothing changes on an outer `Err`: [`Error::JournalOff`]; [`Error::NotOwned`] if this
    /// member does not own the timer's queue now; [`Error::Journal`] if the id or value does
    /// not serialize or the id is too long for the journal, as [`Member::schedule`]'s (such
    /// an id is in the scheduler only if scheduled there directly: the front refuses it).
    /// `Ok(Err(..))` is the scheduler's refusal (nothing recorded):
    /// [`RescheduleError::NotFound`] (no timer), [`RescheduleError::InFlight`] (handed out:
    /// use [`FencedDue::retry_at`]), [`RescheduleError::Frozen`] (a handoff under way). The
    /// [`Pending`] resolves as [`Member::schedule`]'s.
    pub fn reschedule(
        &self,
        id: &K,
        at: Instant,
    ) -> Result<Result<Pending, RescheduleError>, Error> {
        let j = self.shared.journal.as_deref().ok_or(Error::JournalOff)?;
        let s = &self.shared.scheduler;
        let _stripe = j.stripe(id);
        let Some(info) = s.lookup(id) else {
            return Ok(Err(RescheduleError::NotFound));
        };
        let token = self.token_for(&info.queue)?;
        let deadline_us = j.reference_us(at);
        // Encoded before the move: a pending timer's value does not change; `None` once it is
        // in flight (only a hand-out may change its value) or gone.
        let Some(op) = s.with_value(id, |v| Op::put(id, deadline_us, v)) else {
            return Ok(Err(match info.state {
                IdState::InFlight => RescheduleError::InFlight,
                _ => RescheduleError::NotFound,
            }));
        };
        let op = op?;
        if let Err(e) = s.reschedule(id, at) {
            return Ok(Err(e));
        }
        Ok(Ok(j.journal.submit(info.queue.as_ref(), token, vec![op])))
    }

    /// Cancels a pending timer, as `Scheduler::cancel`, and records its end in its queue's
    /// journal: the [`Pending`] is `Some` exactly when the answer is `Cancel::Cancelled`.
    /// Until it resolves `Ok`, a death of this member lets the next owner fire the timer
    /// (at least once). O(1) plus the encoding of the id; group-committed.
    ///
    /// # Errors
    /// Nothing changes on an `Err`: [`Error::JournalOff`]; [`Error::NotOwned`] if this member
    /// does not own the timer's queue now; [`Error::Journal`] if the id does not serialize
    /// or is too long for the journal, as [`Member::schedule`]'s (the timer stays: one
    /// scheduled on the scheduler directly, which has no record to end; cancel it there).
    /// `Cancel::InFlight` (handed out: its [`FencedDue`] ends it) and `Cancel::NotFound`
    /// come with `None`: nothing recorded. The [`Pending`] resolves as
    /// [`Member::schedule`]'s.
    pub fn cancel(&self, id: &K) -> Result<(Cancel<T>, Option<Pending>), Error> {
        let j = self.shared.journal.as_deref().ok_or(Error::JournalOff)?;
        let s = &self.shared.scheduler;
        let _stripe = j.stripe(id);
        let Some(info) = s.lookup(id) else {
            return Ok((Cancel::NotFound, None));
        };
        let token = self.token_for(&info.queue)?;
        let op = Op::end_id(id)?;
        match s.cancel(id) {
            Cancel::Cancelled(v) => {
                let p = j.journal.submit(info.queue.as_ref(), token, vec![op]);
                Ok((Cancel::Cancelled(v), Some(p)))
            }
            other => Ok((other, None)),
        }
    }

    /// Drains `queue`, as `Scheduler::drain_queue`, and records the end of every pending
    /// timer taken, in one journal request: the [`Pending`] is `None` when none was taken.
    /// The in-flight ones stay their hand-outs' (each [`FencedDue`] ends its own). Blocks
    /// every other call of this journaled front for its duration (it holds every id lock).
    /// O(members of the queue + shards) plus the encoding of the ids; group-committed.
    ///
    /// # Errors
    /// Nothing is drained on an `Err`: [`Error::JournalOff`]; [`Error::NotOwned`] if this
    /// member does not own `queue` now. An id that does not serialize or is too long for the
    /// journal (`JournalError::IdTooLong`: only an id scheduled on the scheduler directly,
    /// as the front refuses it) is drained without an end, logged at warn level: no put of
    /// it can have been written either, so the drain is not refused for it. The
    /// [`Pending`] resolves as [`Member::schedule`]'s.
    pub fn drain_queue(&self, queue: &Q) -> Result<(Drained<K, T>, Option<Pending>), Error> {
        let (j, token) = self.journal_for(queue)?;
        let _stripes = j.all_stripes();
        let drained = self.shared.scheduler.drain_queue(queue);
        let ops: Vec<Op> = drained
            .cancelled
            .iter()
            .filter_map(|(id, _)| match Op::end_id(id) {
                Ok(op) => Some(op),
                Err(e) => {
                    tracing::warn!(member = %self.shared.name, error = %e,
                        "a drained id the journal cannot take (unserializable or too long): no end journaled");
                    None
                }
            })
            .collect();
        let p = (!ops.is_empty()).then(|| j.journal.submit(queue.as_ref(), token, ops));
        Ok((drained, p))
    }
}

impl<Q, K, T> FencedDue<Q, K, T>
where
    Q: Hash + Eq + Clone + AsRef<[u8]>,
    K: Hash + Eq + Clone + Serialize,
    T: Serialize,
{
    /// Ends the timer as delivered: with the journal on, submits its end to the queue's
    /// journal under [`FencedDue::token`] while the timer is still in flight, then frees the
    /// id in the scheduler; returns the value and the end's [`Pending`]. Until that resolves
    /// `Ok`, a death of this member (or an adoption of the queue after a lost lease) lets
    /// the next owner deliver the timer again (at least once). O(1) plus the encoding of
    /// the id; group-committed.
    ///
    /// `None`: the journal is off ([`FleetOptions::journal`](crate::FleetOptions::journal)),
    /// or the id does not serialize or is too long for the journal (logged at warn level; no
    /// put of it can have been written either). Neither happens to a timer scheduled through
    /// the front, which refuses such an id at [`Member::schedule`]: only to one scheduled on
    /// the scheduler directly. The [`Pending`] resolves to `JournalError::Fenced` once another member holds
    /// the queue (its owner delivers the timer again), or to another `JournalError` if Redis
    /// failed.
    pub fn done(self) -> (T, Option<Pending>) {
        self.journaled(
            |_, due| Op::end_id(due.id()),
            "a hand-out whose id the journal cannot take: no end journaled",
            Due::into_value,
        )
    }

    /// Puts the timer back pending at `at`, as `Due::retry_at` (forwarded if its queue is
    /// frozen by a handoff under way, which carries the new deadline), and, with the journal
    /// on, submits the new deadline (with the value) to the queue's journal under
    /// [`FencedDue::token`], before the timer leaves flight. Once the [`Pending`] resolved
    /// `Ok`, the queue's next owner fires it at `at` (on the reference clock, as
    /// [`Member::journal_put`] describes), never earlier. O(1) plus the encoding of id and
    /// value; group-committed.
    ///
    /// The retry's result is `Due::retry_at`'s: `Err(RetryError::Closed(value))` when the
    /// scheduler is gone (the timer then ended as delivered here; the record, with the new
    /// deadline if it was written, brings it back at the next owner). The [`Pending`] is
    /// `None` when the journal is off or the id or value does not serialize (logged at warn
    /// level: the journal keeps the timer's previous deadline, so the next owner may fire it
    /// at that, earlier one); it resolves as [`FencedDue::done`]'s. An id too long for the
    /// journal gives `None` too, but only for a timer scheduled on the scheduler directly
    /// (the front refuses one at [`Member::schedule`], so it has no record).
    pub fn retry_at(self, at: Instant) -> (Result<Retried, RetryError<T>>, Option<Pending>) {
        self.journaled(
            |j, due| Op::put(due.id(), j.reference_us(at), due.value()),
            "a retry that does not serialize: its deadline not journaled",
            |due| due.retry_at(at),
        )
    }

    /// With the journal on, submits `op`'s record under the id's stripe lock while the timer
    /// is still in flight, then ends the hand-out with `finish`; an op that does not encode
    /// is logged at warn level (`refused`) and gives `None`. Without the journal, `finish`
    /// alone.
    fn journaled<R>(
        self,
        op: impl FnOnce(&MemberJournal, &Due<Q, K, T>) -> Result<Op, JournalError>,
        refused: &str,
        finish: impl FnOnce(Due<Q, K, T>) -> R,
    ) -> (R, Option<Pending>) {
        let FencedDue {
            token,
            due,
            journal,
        } = self;
        let Some(j) = journal else {
            return (finish(due), None);
        };
        let stripe = j.stripe(due.id());
        let p = match op(&j, &due) {
            Ok(op) => Some(j.journal.submit(due.queue().as_ref(), token, vec![op])),
            Err(e) => {
                tracing::warn!(error = %e, "{refused}");
                None
            }
        };
        let out = finish(due);
        drop(stripe);
        (out, p)
    }
}
