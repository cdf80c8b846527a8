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
use tickwheel_redis::Custody;
use tokio::sync::{Notify, broadcast, oneshot};
use tokio::task::JoinHandle;

use crate::assign;
use crate::keys::Keys;
use crate::lease::{self, LeaseState, Timing};
use crate::membership;
use crate::owners_watch::OwnersWatch;
use crate::{Error, Fence, FleetEvent, FleetOptions, QueueName, Recovery};

mod moves;

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
}
