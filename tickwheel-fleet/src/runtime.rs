//! The member's driver: one tokio task that rejoins after a lost lease, places queues and
//! moves them. Every etcd or Redis failure is logged and retried on the next round; nothing
//! here panics.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use etcd_client::Client;
use parking_lot::Mutex;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tickwheel::sync::Scheduler;
use tickwheel_redis::{Custody, Outcome, State};
use tokio::sync::{Notify, Semaphore, broadcast, oneshot};
use tokio::task::{JoinHandle, JoinSet};

use crate::assign::{self, OwnerKey};
use crate::crossqueue::{Claim, later_wins_across};
use crate::keys::Keys;
use crate::lease::{self, LeaseState, Timing};
use crate::membership;
use crate::owners_watch::OwnersWatch;
use crate::{Acquisition, Error, Fence, FleetEvent, FleetOptions, QueueName, Recovery};

/// Most adoptions loading from Redis and importing at once in a placement round. Their owner
/// keys are created one transaction after another; the Redis `adopt`, the journal load and
/// the import of different queues overlap (the load of one while the next is decoded, on as
/// many runtime threads as there are); the recovery hooks run outside this bound.
const ADOPTIONS_AT_ONCE: usize = 4;

/// What the driver and the `Member` handle share.
pub(crate) struct Shared<Q: QueueName, K, T> {
    pub options: FleetOptions,
    pub keys: Keys,
    pub name: String,
    pub boot: String,
    pub scheduler: Arc<Scheduler<Q, K, T>>,
    pub recovery: Arc<dyn Recovery<Q, K, T>>,
    pub custody: Custody,
    /// The journal of the owned queues' live timers, with its clock anchor (`None`: off).
    pub journal: Option<Arc<crate::journal::MemberJournal>>,
    pub fence: Fence,
    pub events: broadcast::Sender<FleetEvent<Q>>,
    /// Queue → token, for the queues this member owns (dispatching or not).
    pub owned: Mutex<BTreeMap<Q, u64>>,
    pub lease: Arc<LeaseState>,
    pub leaving: AtomicBool,
    pub stop: AtomicBool,
    /// The etcd client now in use: replaced on rejoin, because a restarted etcd with
    /// authentication forgets the old client's token ("invalid auth token").
    pub etcd: Mutex<Client>,
}

pub(crate) struct Driver<Q: QueueName, K, T> {
    pub shared: Arc<Shared<Q, K, T>>,
    pub client: Client,
    pub lease_id: i64,
    pub keep_alive: Option<JoinHandle<()>>,
    /// When each unowned queue was first seen without an owner key.
    pub absent_since: HashMap<Q, Instant>,
    /// Queues this member offered away (sealed in Redis at the token it held), until the
    /// outcome is known.
    pub offered: HashMap<Q, u64>,
    /// When `leave` was asked for.
    pub leave_started: Option<Instant>,
    /// The last placement round, made while leaving, found no other live member that could
    /// take a queue: waiting for the handoff timeout would hand nothing over.
    pub no_successor: bool,
    pub left: Option<oneshot::Sender<Result<(), Error>>>,
    /// Rejoin attempts failed in a row (backs the retry off).
    pub rejoin_failures: u32,
    /// When the grace of a queue this member is to adopt ends: the placement loop wakes then
    /// rather than at its next period.
    pub grace_ends: Option<Instant>,
    /// The watch on the owner keys (through `client`; restarted after a rejoin or its end).
    pub owners_watch: Option<OwnersWatch>,
    /// Woken by the watch when an owner key is deleted.
    pub wake: Arc<Notify>,
}

impl<Q: QueueName, K, T> Shared<Q, K, T> {
    pub fn emit(&self, e: FleetEvent<Q>) {
        tracing::info!(member = %self.name, event = ?crate::event::DebugEvent(&e), "fleet event");
        let _ = self.events.send(e);
    }

    pub fn timing(&self) -> Timing {
        Timing {
            period: self.options.keep_alive,
            margin: self.options.margin,
            timeout: self.options.etcd_timeout,
        }
    }
}

/// The wait after `failures` failed rejoins in a row: the placement period doubled per
/// failure, at most 2 s.
fn rejoin_backoff(poll: Duration, failures: u32) -> Duration {
    let factor = 1u32 << failures.min(8);
    poll.saturating_mul(factor).min(Duration::from_secs(2))
}

/// Grants a lease and starts its keep-alive. Returns the lease id and the task.
pub(crate) async fn grant<Q: QueueName, K, T>(
    client: &mut Client,
    shared: &Arc<Shared<Q, K, T>>,
) -> Result<(i64, JoinHandle<()>), Error> {
    let sent = Instant::now();
    let g = client.lease_grant(shared.options.ttl_secs(), None).await?;
    let ttl = std::time::Duration::from_secs(u64::try_from(g.ttl()).unwrap_or(0));
    shared.lease.lost.store(false, Ordering::SeqCst);
    let task = lease::spawn(
        client.clone(),
        g.id(),
        sent,
        ttl,
        shared.timing(),
        shared.fence.clone(),
        Arc::clone(&shared.lease),
    );
    Ok((g.id(), task))
}

impl<Q, K, T> Driver<Q, K, T>
where
    Q: QueueName,
    K: Hash + Eq + Clone + Send + Sync + Serialize + DeserializeOwned + 'static,
    T: Send + Sync + Serialize + DeserializeOwned + 'static,
{
    pub async fn run(mut self) {
        let s = Arc::clone(&self.shared);
        loop {
            if s.stop.load(Ordering::SeqCst) {
                self.shutdown().await;
                return;
            }
            if s.lease.lost.load(Ordering::SeqCst) {
                self.drop_all_local();
                match self.rejoin().await {
                    Ok(()) => self.rejoin_failures = 0,
                    Err(e) => {
                        self.rejoin_failures = self.rejoin_failures.saturating_add(1);
                        let wait = rejoin_backoff(s.options.poll_interval, self.rejoin_failures);
                        tracing::warn!(member = %s.name, error = %e, retry_in = ?wait,
                            "rejoin failed; retrying");
                        tokio::time::sleep(wait).await;
                    }
                }
            } else {
                self.watch_owners();
                if let Err(e) = self.round().await {
                    tracing::warn!(member = %s.name, error = %e, "placement round failed; retrying");
                }
            }
            crate::journal::refresh_anchor(&s).await;
            if s.leaving.load(Ordering::SeqCst) && self.leave_started.is_none() {
                self.leave_started = Some(Instant::now());
            }
            // Leaving: done once every queue went to its new owner, at once when no other
            // live member can take one, or after the handoff timeout (what is still offered
            // stays sealed in Redis for the next adopter).
            let leave_done = self.leave_started.is_some_and(|t| {
                self.no_successor
                    || s.owned.lock().is_empty()
                    || t.elapsed() > s.options.handoff_timeout
            });
            if self.left.is_some() && leave_done {
                let r = self.finish_leave().await;
                if let Some(tx) = self.left.take() {
                    let _ = tx.send(r);
                }
                return;
            }
            // The next period, or the end of a grace if one ends sooner.
            let period = s.options.poll_interval;
            let wait = self.grace_ends.take().map_or(period, |at| {
                period.min(at.saturating_duration_since(Instant::now()))
            });
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = s.lease.notify.notified() => {}
                _ = self.wake.notified() => {}
            }
        }
    }

    /// Starts the watch on the owner keys if none runs (the first round, after a rejoin, or
    /// after etcd ended the last one).
    fn watch_owners(&mut self) {
        if self.owners_watch.as_ref().is_none_or(OwnersWatch::ended) {
            let (client, prefix) = (self.client.clone(), self.shared.keys.owners());
            self.owners_watch = Some(OwnersWatch::start(client, prefix, Arc::clone(&self.wake)));
        }
    }

    async fn shutdown(&mut self) {
        self.owners_watch = None;
        if let Some(k) = self.keep_alive.take() {
            k.abort();
        }
        let _ = self.client.lease_revoke(self.lease_id).await;
        self.shared.fence.revoke_all();
    }

    async fn finish_leave(&mut self) -> Result<(), Error> {
        self.owners_watch = None;
        if let Some(k) = self.keep_alive.take() {
            k.abort();
        }
        self.shared.fence.revoke_all();
        self.client.lease_revoke(self.lease_id).await?;
        Ok(())
    }

    /// The lease is gone: nothing of any queue may be dispatched here, and the local copy of
    /// each is dropped (the next owner rebuilds it from the store and Redis).
    fn drop_all_local(&mut self) {
        let s = &self.shared;
        let queues: Vec<Q> = std::mem::take(&mut *s.owned.lock()).into_keys().collect();
        self.offered.clear();
        if queues.is_empty() && s.fence.valid_until().is_none() && self.keep_alive.is_none() {
            return;
        }
        s.fence.revoke_all();
        for q in queues {
            // Frozen: refused to producers, never due; rebuilt on a later acquisition.
            s.scheduler.freeze_queue(&q);
            s.scheduler.take_forwarded(&q);
            s.emit(FleetEvent::Lost { queue: q });
        }
        if let Some(k) = self.keep_alive.take() {
            k.abort();
            s.emit(FleetEvent::Fenced);
        }
    }

    async fn rejoin(&mut self) -> Result<(), Error> {
        let s = Arc::clone(&self.shared);
        // The old lease (and with it this member's keys) goes now if etcd still has it.
        let _ = self.client.lease_revoke(self.lease_id).await;
        // The next round watches through the new client.
        self.owners_watch = None;
        // A new client logs in again (etcd's auth tokens do not survive its restart).
        self.client = crate::member::connect(&s.options).await?;
        *s.etcd.lock() = self.client.clone();
        let (id, task) = grant(&mut self.client, &s).await?;
        match membership::register(&mut self.client, &s.keys, &s.name, &s.boot, id).await {
            Ok(()) => {}
            Err(e) => {
                task.abort();
                let _ = self.client.lease_revoke(id).await;
                s.fence.revoke_all();
                s.lease.lost.store(true, Ordering::SeqCst);
                return Err(e);
            }
        }
        self.lease_id = id;
        self.keep_alive = Some(task);
        self.absent_since.clear();
        s.emit(FleetEvent::Rejoined { lease: id });
        Ok(())
    }

    /// One placement round: read members, catalogue and owners; drop lost queues, hand off
    /// misplaced ones, take unowned and offered ones.
    async fn round(&mut self) -> Result<(), Error> {
        let s = Arc::clone(&self.shared);
        let members = membership::list(&mut self.client, &s.keys).await?;
        let catalogue = assign::catalogue(&mut self.client, &s.keys).await?;
        let owners = assign::owners(&mut self.client, &s.keys).await?;
        let leaving = s.leaving.load(Ordering::SeqCst);
        let active: Vec<&str> = members
            .iter()
            .filter(|m| {
                // A leaving member takes nothing, this one included once it leaves.
                let out = m.leaving || (leaving && m.name == s.name);
                !out
            })
            .map(|m| m.name.as_str())
            .collect();
        self.no_successor = leaving && active.is_empty();
        self.grace_ends = None;
        // Queues this member holds whose key is no longer its own.
        let mine: Vec<(Q, u64)> = s
            .owned
            .lock()
            .iter()
            .map(|(q, t)| (q.clone(), *t))
            .collect();
        for (q, token) in &mine {
            let still = owners
                .get(q.as_ref())
                .is_some_and(|o| o.token == *token && o.name == s.name && o.boot == s.boot);
            if self.offered.contains_key(q) {
                self.settle(q, *token).await?;
            } else if !still {
                self.lose(q);
            }
        }
        // Unowned queues this member is to adopt now: adopted after the loop, several at once.
        let mut adopt = Vec::new();
        for raw in catalogue {
            if s.lease.lost.load(Ordering::SeqCst) {
                return Ok(());
            }
            let Some(q) = Q::from_bytes(&raw) else {
                continue;
            };
            let want = assign::desired(active.iter().copied(), &raw);
            let owner = owners.get(&raw);
            let held = s.owned.lock().get(&q).copied();
            match (owner, held) {
                (Some(o), Some(token)) => {
                    let here = want == Some(s.name.as_str());
                    if !self.offered.contains_key(&q) {
                        if let Some(to) = want.filter(|w| *w != s.name) {
                            self.hand_off(&q, token, to).await?;
                        }
                    } else if here && o.token == token {
                        // Offered away, and this member is the desired owner again (its
                        // target left): take the sealed offer back under a new token.
                        self.offered.remove(&q);
                        s.owned.lock().remove(&q);
                        self.move_and_adopt(&q, token).await?;
                    }
                }
                (Some(o), None) if o.name == s.name && o.boot == s.boot => {
                    // Its own key, yet not a queue it dispatches: a create or move that ran
                    // in etcd while its answer was lost, or a release that did not get
                    // through. Nobody else may take the queue while this lease lives, so it
                    // would stay without a dispatcher: give the key back (at its token); the
                    // desired owner adopts after `grace`, taking any sealed offer along.
                    tracing::info!(member = %s.name, token = o.token, "releasing an owner key it does not dispatch");
                    assign::release_owner(&mut self.client, &s.keys, q.as_ref(), o.token).await?;
                }
                (Some(o), None) => {
                    self.absent_since.remove(&q);
                    if want == Some(s.name.as_str()) && !leaving {
                        self.take_offer(&q, o).await?;
                    }
                }
                (None, _) => {
                    let since = *self
                        .absent_since
                        .entry(q.clone())
                        .or_insert_with(Instant::now);
                    if want == Some(s.name.as_str()) && !leaving {
                        let ends = since + s.options.grace;
                        if Instant::now() >= ends {
                            adopt.push(q);
                        } else {
                            self.grace_ends = Some(self.grace_ends.map_or(ends, |e| e.min(ends)));
                        }
                    }
                }
            }
        }
        self.adopt_all(adopt).await
    }

    fn lose(&mut self, q: &Q) {
        self.offered.remove(q);
        let s = &self.shared;
        s.fence.revoke(q.as_ref());
        s.owned.lock().remove(q);
        s.scheduler.freeze_queue(q);
        s.scheduler.take_forwarded(q);
        s.emit(FleetEvent::Lost { queue: q.clone() });
    }

    /// Takes unowned queues: for each, the owner key (create, one transaction after
    /// another), then [`adopt_at`](crate::adoption::adopt_at) in a task of its own; at most
    /// [`ADOPTIONS_AT_ONCE`] of them load from Redis and import at a time (a slot each, given
    /// back before the recovery hook, so a hook that hangs holds up its own queue only). A
    /// failed adoption gives its key back ([`Self::release_failed`]) while the others go on;
    /// the first error is returned once every started adoption ended. An etcd error creating
    /// a key, or a lost lease, starts no further adoption this round.
    async fn adopt_all(&mut self, queues: Vec<Q>) -> Result<(), Error> {
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
    async fn hand_off(&mut self, q: &Q, token: u64, to: &str) -> Result<(), Error> {
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
    async fn settle(&mut self, q: &Q, token: u64) -> Result<(), Error> {
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
    async fn move_and_adopt(&mut self, q: &Q, from: u64) -> Result<(), Error> {
        let Some(new) = self.owner_key(q, Some(from)).await? else {
            return Ok(());
        };
        self.adopt_or_release(q, new).await
    }

    /// Target side: the queue's owner key is held by `o`; if an offer of its token is open
    /// in Redis, move the key here, claim at the new token, import the offer and then (with
    /// the journal on) the queue's journal, read under the new token.
    async fn take_offer(&mut self, q: &Q, o: &OwnerKey) -> Result<(), Error> {
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
        let inc = match s.custody.claim_at::<Q, K, T>(q.clone(), new).await {
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
        // the freeze refused to schedule), and the journal learns the offer's later one (a
        // retry at the freeze the source could not journal): else the next owner fires it
        // early. If Redis refuses, the scheduler is right and the journal stays as it was.
        if let Err(e) = crate::journal::later_deadlines_win(&s, q, new, second, true).await {
            tracing::warn!(member = %s.name, error = %e, "journal not brought up to the offer's deadlines");
        }
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
}
