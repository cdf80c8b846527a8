//! The driver's changes of owner: adopting unowned queues, handing a queue off to the member
//! placement wants, settling a handoff, and taking a queue offered to this member.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde::de::DeserializeOwned;
use tickwheel::sync::FrozenEntry;
use tickwheel_redis::{Incoming, Outcome, State};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::Driver;
use crate::assign::{self, OwnerKey};
use crate::crossqueue::{Claim, later_wins_across};
use crate::{Acquisition, Error, FleetEvent, QueueName};

/// Most adoptions loading from Redis and importing at once in a placement round. Their owner
/// keys are created one transaction after another; the Redis `adopt`, the journal load and
/// the import of different queues overlap (the load of one while the next is decoded, on as
/// many runtime threads as there are); the recovery hooks run outside this bound.
const ADOPTIONS_AT_ONCE: usize = 4;

impl<Q, K, T> Driver<Q, K, T>
where
    Q: QueueName,
    K: Hash + Eq + Clone + Send + Sync + Serialize + DeserializeOwned + 'static,
    T: Send + Sync + Serialize + DeserializeOwned + 'static,
{
    /// Takes unowned queues: for each, the owner key (create, one transaction after
    /// another), then [`adopt_at`](crate::adoption::adopt_at) in a task of its own; at most
    /// [`ADOPTIONS_AT_ONCE`] of them load from Redis and import at a time (a slot each, given
    /// back before the recovery hook, so a hook that hangs holds up its own queue only). A
    /// failed adoption gives its key back ([`Self::release_failed`]) while the others go on;
    /// the first error is returned once every started adoption ended. An etcd error creating
    /// a key, or a lost lease, starts no further adoption this round.
    pub(super) async fn adopt_all(&mut self, queues: Vec<Q>) -> Result<(), Error> {
        let s = Arc::clone(&self.shared);
        let slots = Arc::new(Semaphore::new(ADOPTIONS_AT_ONCE));
        let mut running: JoinSet<Result<(), Error>> = JoinSet::new();
        let mut held: HashMap<tokio::task::Id, (Q, u64)> = HashMap::new();
        let mut first: Option<Error> = None;
        for q in queues {
            if first.is_some() || s.lease.lost.load(Ordering::SeqCst) {
                break;
            }
            match self.owner_key(&q, None).await {
                Ok(Some(token)) => {
                    self.absent_since.remove(&q);
                    let task = running.spawn(crate::adoption::adopt_at(
                        Arc::clone(&s),
                        q.clone(),
                        token,
                        Some(Arc::clone(&slots)),
                    ));
                    held.insert(task.id(), (q, token));
                }
                Ok(None) => {}
                Err(e) => first = Some(e),
            }
        }
        while let Some(done) = running.join_next_with_id().await {
            let (id, result) = match done {
                Ok((id, result)) => (id, result),
                // A panic (in the recovery hook, say): the queue goes back as for an error.
                Err(e) => (
                    e.id(),
                    Err(Error::Recovery(format!("the adoption panicked: {e}"))),
                ),
            };
            if let (Some((q, token)), Err(e)) = (held.remove(&id), result) {
                self.release_failed(&q, token, &e).await;
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// The owner key of `q` for this member under its lease: created (`from` is `None`) or
    /// moved from token `from`. The new token; `None` if the key exists (or changed) meanwhile.
    async fn owner_key(&mut self, q: &Q, from: Option<u64>) -> Result<Option<u64>, Error> {
        let s = Arc::clone(&self.shared);
        let (client, lease) = (&mut self.client, self.lease_id);
        match from {
            None => {
                assign::create_owner(client, &s.keys, q.as_ref(), &s.name, &s.boot, lease).await
            }
            Some(from) => {
                assign::move_owner(client, &s.keys, q.as_ref(), from, &s.name, &s.boot, lease).await
            }
        }
    }

    /// [`adopt_at`](crate::adoption::adopt_at); on failure the owner key goes back ([`Self::release_failed`]) so the
    /// next round, here or elsewhere, starts over.
    async fn adopt_or_release(&mut self, q: &Q, token: u64) -> Result<(), Error> {
        let result =
            crate::adoption::adopt_at(Arc::clone(&self.shared), q.clone(), token, None).await;
        if let Err(e) = &result {
            self.release_failed(q, token, e).await;
        }
        result
    }

    /// After a failed adoption of `q` at `token`: whatever it imported is dropped (the queue
    /// frozen here, as a lost one) and the owner key deleted at `token` (an etcd error is
    /// logged: the key then lapses with this member's lease, or the next round releases it).
    async fn release_failed(&mut self, q: &Q, token: u64, e: &Error) {
        let s = Arc::clone(&self.shared);
        tracing::warn!(member = %s.name, error = %e, "adoption failed; releasing the queue");
        s.scheduler.freeze_queue(q);
        s.scheduler.take_forwarded(q);
        if let Err(e) = assign::release_owner(&mut self.client, &s.keys, q.as_ref(), token).await {
            tracing::warn!(member = %s.name, error = %e, "releasing an owner key failed");
        }
    }

    /// Source side of a handoff to `to`: stop dispatching, offer (freeze, prepare for `to`,
    /// append, wait for in-flight timers, seal). The outcome is read by later rounds
    /// ([`Self::settle`]): the key and the queue stay this member's until `to` committed.
    pub(super) async fn hand_off(&mut self, q: &Q, token: u64, to: &str) -> Result<(), Error> {
        let s = Arc::clone(&self.shared);
        s.fence.revoke(q.as_ref());
        match s
            .custody
            .offer(&s.scheduler, q.clone(), token, Some(to))
            .await
        {
            Ok(_) => {
                self.offered.insert(q.clone(), token);
                Ok(())
            }
            Err(tickwheel_redis::CustodyError::Fenced { .. }) => {
                self.lose(q);
                Ok(())
            }
            Err(e) => {
                // The offer was aborted: the values are back; dispatch again.
                s.fence.grant(q.as_ref(), token);
                Err(Error::Handoff(e.to_string()))
            }
        }
    }

    /// Reads the outcome of this member's offer of `q` at `token` (no waiting): committed by
    /// the new owner → released; still open → wait; anything else → lost.
    pub(super) async fn settle(&mut self, q: &Q, token: u64) -> Result<(), Error> {
        let s = Arc::clone(&self.shared);
        match s.custody.outcome(q.as_ref(), token, Duration::ZERO).await? {
            Outcome::Committed { record, .. } => {
                self.offered.remove(q);
                s.owned.lock().remove(q);
                s.scheduler.take_forwarded(q);
                s.emit(FleetEvent::Released {
                    queue: q.clone(),
                    to: record.owner.name,
                });
            }
            Outcome::Pending(_) => {}
            _ => {
                self.offered.remove(q);
                self.lose(q);
            }
        }
        Ok(())
    }

    /// Moves the owner key of `q` from `from` to this member and adopts the queue at the new
    /// token (a sealed offer in Redis becomes this member's leftover).
    pub(super) async fn move_and_adopt(&mut self, q: &Q, from: u64) -> Result<(), Error> {
        let Some(new) = self.owner_key(q, Some(from)).await? else {
            return Ok(());
        };
        self.adopt_or_release(q, new).await
    }

    /// Target side: the queue's owner key is held by `o`; if an offer of its token is open
    /// in Redis, move the key here, claim at the new token, import the offer and then (with
    /// the journal on) the queue's journal, read under the new token.
    pub(super) async fn take_offer(&mut self, q: &Q, o: &OwnerKey) -> Result<(), Error> {
        let s = Arc::clone(&self.shared);
        let view = s.custody.read(q.as_ref(), None).await?;
        let Some(record) = view.record else {
            return Ok(());
        };
        if record.state != State::Offered || record.epoch != o.token {
            return Ok(());
        }
        match record.target.as_deref() {
            None => {}
            Some(t) if t == s.name => {}
            // Meant for another member, and this one is the desired owner: the named target
            // is gone (its claim would wait for the offer's TTL) or no longer desired (the
            // placement changed while the offer was made, e.g. a member rejoined after a
            // lossy link) and so never claims it. Adopting at a new token takes the sealed
            // offer as a leftover at once; the key's transaction and the tokens in Redis fence
            // off a late claim by the named target.
            Some(_) => return self.move_and_adopt(q, o.token).await,
        }
        let Some(new) = self.owner_key(q, Some(o.token)).await? else {
            return Ok(());
        };
        let mut inc = match s.custody.claim_at::<Q, K, T>(q.clone(), new).await {
            Ok(i) => i,
            Err(e) => {
                let _ = assign::release_owner(&mut self.client, &s.keys, q.as_ref(), new).await;
                return Err(e.into());
            }
        };
        // With the journal on, its records are read now, under the new token: the claim
        // fenced the source's later writes, and every write of it that Redis acknowledged
        // ran before the claim, so an end the source was told of is not read back. Read
        // before the commit, so that a failed read leaves the claim to the next adopter (who
        // reads the journal too) rather than a committed queue half imported.
        let journal = match crate::journal::load(&s, q, new).await {
            Ok(entries) => entries,
            Err(e) => {
                let _ = assign::release_owner(&mut self.client, &s.keys, q.as_ref(), new).await;
                return Err(e);
            }
        };
        // The offer is read, and the journal brought up to its later deadlines, before the
        // commit deletes it: a target that dies after its commit leaves the next owner a
        // journal that fires nothing early.
        if let Err(e) = self.offer_into_journal(q, new, &mut inc, &journal).await {
            let _ = assign::release_owner(&mut self.client, &s.keys, q.as_ref(), new).await;
            return Err(e);
        }
        // Whatever an earlier stay here left is dropped (forwarded timers of a lost queue).
        s.scheduler.take_forwarded(q);
        s.scheduler.unfreeze_queue(q);
        let offered = match s.custody.complete(inc, &s.scheduler).await {
            Ok(r) => r.imported,
            Err(e) => {
                // The key goes back; the next adopter (likely this member) takes the claim
                // over as a leftover.
                let _ = assign::release_owner(&mut self.client, &s.keys, q.as_ref(), new).await;
                return Err(Error::Handoff(e.to_string()));
            }
        };
        // The offer first: it holds the source's timers as its scheduler last had them (a
        // retry's later deadline, say), and the import skips the journal's copy of each. What
        // the journal adds is what the source no longer held yet never ended: a delivery that
        // failed while the queue was frozen, a put whose schedule the freeze refused.
        let second: Vec<(K, Instant)> = journal.iter().map(|e| (e.id.clone(), e.at)).collect();
        let from_journal = s.scheduler.import(q.clone(), journal);
        // An id in both keeps the later deadline (the journal's is the later after a put
        // the freeze refused to schedule; the offer's later one is in the journal already).
        crate::journal::later_deadlines_win(&s, q, second);
        // An id of either source with a timer in another queue here: the later deadline wins.
        let claims = Claim::after_handoff(offered.present, from_journal.present);
        let moved = later_wins_across(&s, q, new, claims).await;
        let imported = offered.imported + moved.offer;
        let journaled = from_journal.imported + moved.journal;
        s.owned.lock().insert(q.clone(), new);
        s.fence.grant(q.as_ref(), new);
        s.emit(FleetEvent::Acquired {
            queue: q.clone(),
            token: new,
            how: Acquisition::HandedOver {
                imported,
                journaled,
            },
        });
        Ok(())
    }

    /// The target's steps before its commit: fetches the claimed offer, then brings the
    /// journal (its records `journal`, loaded under `token`) up to the offer's later deadlines
    /// ([`offer_deadlines_first`](crate::journal::offer_deadlines_first)).
    async fn offer_into_journal(
        &self,
        q: &Q,
        token: u64,
        inc: &mut Incoming<'_, Q, K, T>,
        journal: &[FrozenEntry<K, T>],
    ) -> Result<(), Error> {
        let offered = inc
            .fetch()
            .await
            .map_err(|e| Error::Handoff(e.to_string()))?;
        if journal.is_empty() {
            return Ok(());
        }
        let at: HashMap<&K, Instant> = journal.iter().map(|e| (&e.id, e.at)).collect();
        let s = &self.shared;
        crate::journal::offer_deadlines_first(s, q, token, offered, |id| at.get(id).copied()).await
    }
}
