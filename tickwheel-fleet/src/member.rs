//! The member runtime's handle: joins, filters dispatch, registers queues, leaves.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use etcd_client::{Client, ConnectOptions};
use parking_lot::Mutex;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tickwheel::sync::{DispatcherHandle, Scheduler};
use tickwheel_redis::{Custody, Member as RedisMember};
use tokio::sync::{broadcast, oneshot};
use tokio::task::JoinHandle;

use crate::keys::Keys;
use crate::lease::LeaseState;
use crate::runtime::{Driver, Shared, grant};
use crate::{
    Error, Fence, FencedDue, FleetEvent, FleetOptions, QueueName, Recovery, assign, membership,
};

/// One process's membership in a fleet: it owns some of the fleet's queues in its
/// `scheduler` and dispatches only those, each `Due` with its queue's fencing token.
///
/// A background tokio task (spawned by [`Member::join`]) keeps the lease alive, places the
/// catalogue's queues by rendezvous hashing every [`FleetOptions::poll_interval`], adopts
/// unowned queues (recovery hook + leftover offer), hands misplaced ones to their desired
/// owner through Redis, and after a lost lease fences itself and rejoins. Dropping the
/// `Member` stops that task and revokes the lease (its queues are then adopted by others
/// after the grace); [`Member::leave`] hands them over first.
#[must_use = "dropping the member stops its dispatch and revokes its lease at once"]
pub struct Member<Q: QueueName, K, T> {
    pub(crate) shared: Arc<Shared<Q, K, T>>,
    task: Option<JoinHandle<()>>,
    left: Option<oneshot::Receiver<Result<(), Error>>>,
}

impl<Q: QueueName, K, T> std::fmt::Debug for Member<Q, K, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member")
            .field("name", &self.shared.name)
            .field("boot", &self.shared.boot)
            .field("options", &self.shared.options)
            .finish_non_exhaustive()
    }
}

/// Connects to etcd with the options' credentials and TLS, checking it answers.
pub(crate) async fn connect(options: &FleetOptions) -> Result<Client, Error> {
    let mut co = ConnectOptions::new()
        .with_connect_timeout(options.etcd_timeout)
        .with_timeout(options.etcd_timeout);
    if let Some((user, password)) = &options.etcd_user {
        co = co.with_user(user.clone(), password.clone());
    }
    if let Some(tls) = &options.etcd_tls {
        co = co.with_tls(tls.clone());
    }
    let unreachable = |source| Error::EtcdUnreachable {
        endpoints: options.etcd_endpoints.clone(),
        source,
    };
    let mut client = Client::connect(&options.etcd_endpoints, Some(co))
        .await
        .map_err(unreachable)?;
    // Connecting is lazy for some transports: one request proves the endpoint answers.
    client.status().await.map_err(unreachable)?;
    Ok(client)
}

impl<Q, K, T> Member<Q, K, T>
where
    Q: QueueName,
    K: Hash + Eq + Clone + Send + Sync + Serialize + DeserializeOwned + 'static,
    T: Send + Sync + Serialize + DeserializeOwned + 'static,
{
    /// Joins the fleet as `name` with a fresh boot id: connects to etcd and Redis, grants a
    /// lease of [`FleetOptions::lease_ttl`], registers `P m/<hex(name)>` under it
    /// (create-if-absent), starts the keep-alive and the placement task. Returns once
    /// registered; queues arrive over the next rounds (watch [`Member::events`]). Must be
    /// called inside a tokio runtime.
    ///
    /// # Errors
    /// - [`Error::Options`]: the timing options are inconsistent;
    /// - [`Error::EtcdUnreachable`]: no endpoint answered within `etcd_timeout` (also a
    ///   wrong password or TLS setup: the source says which);
    /// - [`Error::NameTaken`]: another live process holds `name`, still after
    ///   [`FleetOptions::join_wait`] (the lease this call was granted is revoked again);
    /// - [`Error::Redis`]: Redis unreachable or unsafe (see `tickwheel_redis::Protocol::connect`);
    /// - [`Error::Etcd`]: a later etcd request failed.
    pub async fn join<R: Recovery<Q, K, T>>(
        options: FleetOptions,
        name: &str,
        scheduler: Arc<Scheduler<Q, K, T>>,
        recovery: R,
    ) -> Result<Self, Error> {
        options.validate()?;
        let mut client = connect(&options).await?;
        let rm = RedisMember::new_boot(name);
        let boot = rm.boot_id.clone();
        let custody = Custody::connect(
            &options.redis_url,
            rm,
            options.redis.clone(),
            options.custody.clone(),
        )
        .await?;
        let journal = match &options.journal {
            Some(o) => {
                let before = Instant::now();
                let reference = custody.reference_now_us().await?;
                let journal = tickwheel_redis::journal::Journal::start(
                    custody.protocol().clone(),
                    o.clone(),
                )?;
                Some(Arc::new(crate::journal::MemberJournal::new(
                    journal,
                    (before, reference),
                )))
            }
            None => None,
        };
        let (events, _) = broadcast::channel(1024);
        let shared = Arc::new(Shared {
            keys: Keys::new(options.prefix.clone()),
            options,
            name: name.to_owned(),
            boot,
            scheduler,
            recovery: Arc::new(recovery),
            custody,
            fence: Fence::journaled(journal.clone()),
            journal,
            events,
            owned: Mutex::new(BTreeMap::new()),
            lease: Arc::new(LeaseState::default()),
            leaving: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            etcd: Mutex::new(client.clone()),
        });
        let (lease_id, keep_alive) = grant(&mut client, &shared).await?;
        let until = Instant::now() + shared.options.join_wait;
        loop {
            match membership::register(&mut client, &shared.keys, name, &shared.boot, lease_id)
                .await
            {
                Ok(()) => break,
                Err(Error::NameTaken { .. }) if Instant::now() < until => {
                    tokio::time::sleep(shared.options.poll_interval).await;
                }
                Err(e) => {
                    keep_alive.abort();
                    let _ = client.lease_revoke(lease_id).await;
                    return Err(e);
                }
            }
        }
        shared.emit(FleetEvent::Joined {
            boot: shared.boot.clone(),
            lease: lease_id,
        });
        let (tx, rx) = oneshot::channel();
        let driver = Driver {
            shared: Arc::clone(&shared),
            client: client.clone(),
            lease_id,
            keep_alive: Some(keep_alive),
            absent_since: HashMap::new(),
            offered: HashMap::new(),
            leave_started: None,
            no_successor: false,
            left: Some(tx),
            rejoin_failures: 0,
            grace_ends: None,
            owners_watch: None,
            wake: Arc::new(tokio::sync::Notify::new()),
        };
        let task = tokio::spawn(driver.run());
        Ok(Member {
            shared,
            task: Some(task),
            left: Some(rx),
        })
    }

    /// Orderly leave: marks this member as leaving (others stop placing queues here), hands
    /// every owned queue to its desired owner among the others (each released only after
    /// its new owner committed: Gazette's orderly release), then revokes the lease. Returns
    /// when all are handed over, or after [`FleetOptions::handoff_timeout`] at the latest:
    /// a queue still offered then stays sealed in Redis and its next owner adopts it as a
    /// leftover; a queue not yet offered is released and rebuilt by the next owner's
    /// recovery hook. Dispatch of a queue stops when its offer starts.
    ///
    /// When no other live member can take a queue (a one-member fleet, or the last member
    /// of a rolling restart), it returns after one placement round (about
    /// [`FleetOptions::poll_interval`]), not after the handoff timeout: the lease is revoked,
    /// so every queue it owned is unowned at once. Those queues' timers stay in this
    /// member's scheduler, never handed out again (the fence is revoked), and in the user's
    /// store; the next member to join adopts each queue after [`FleetOptions::grace`] and
    /// rebuilds its timers with its recovery hook.
    ///
    /// # Errors
    /// [`Error::Etcd`] (marking or revoking); [`Error::Left`] if the background task ended.
    pub async fn leave(mut self) -> Result<(), Error> {
        let s = Arc::clone(&self.shared);
        s.leaving.store(true, Ordering::SeqCst);
        let lease = self.current_lease().await;
        if let Some(lease) = lease {
            let mut client = s.etcd.lock().clone();
            membership::mark_leaving(&mut client, &s.keys, &s.name, &s.boot, lease).await?;
        }
        let Some(rx) = self.left.take() else {
            return Err(Error::Left);
        };
        let r = rx.await.unwrap_or(Err(Error::Left));
        self.task.take();
        r
    }

    async fn current_lease(&mut self) -> Option<i64> {
        let key = self.shared.keys.member(&self.shared.name);
        let mut client = self.shared.etcd.lock().clone();
        let r = client.get(key, None).await.ok()?;
        r.kvs().first().map(|kv| kv.lease())
    }
}

impl<Q, K, T> Member<Q, K, T>
where
    Q: QueueName,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    T: Send + 'static,
{
    /// The member name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// This process's boot id (128 random bits, hex).
    pub fn boot_id(&self) -> &str {
        &self.shared.boot
    }

    /// The dispatch filter (a cheap clone; see [`Fence`]).
    pub fn fence(&self) -> Fence {
        self.shared.fence.clone()
    }

    /// The Redis handoff connection of this member (its name and boot id): for writes that
    /// must carry the queue's token as the epoch, e.g. `custody().protocol().renew(q, token,
    /// ..)`, which Redis refuses as `Fenced` once another member adopted the queue.
    pub fn custody(&self) -> &tickwheel_redis::Custody {
        &self.shared.custody
    }

    /// The scheduler the member dispatches from.
    pub fn scheduler(&self) -> &Arc<Scheduler<Q, K, T>> {
        &self.shared.scheduler
    }

    /// Up to `max` due timers (`Scheduler::pop_due(now, max)`), each of a queue this member
    /// may dispatch now, with that queue's token. A due timer of any other queue is put
    /// back (retried at its own deadline; forwarded if the queue is frozen) and not returned,
    /// so fewer than `max` may come back while others are due. The scheduler's flow control
    /// holds: nothing of a held queue, no more of a queue than its concurrency and rate limits
    /// permit (a returned `FencedDue` holds its slot until dropped or consumed). O(popped).
    pub fn pop_due(&self, now: Instant, max: usize) -> Vec<FencedDue<Q, K, T>> {
        self.shared
            .scheduler
            .pop_due(now, max)
            .filter_map(|d| self.shared.fence.admit(d))
            .collect()
    }

    /// The scheduler's thread dispatcher (`Scheduler::spawn_dispatcher`) behind the fence:
    /// `handler` sees only fenced-valid timers, with their tokens, within each queue's hold
    /// and limits (as [`Member::pop_due`]).
    pub fn spawn_dispatcher<F>(&self, mut handler: F) -> DispatcherHandle
    where
        F: FnMut(FencedDue<Q, K, T>) + Send + 'static,
    {
        let fence = self.shared.fence.clone();
        self.shared.scheduler.spawn_dispatcher(move |due| {
            if let Some(d) = fence.admit(due) {
                handler(d)
            }
        })
    }

    /// Adds `queue` to the fleet's catalogue (`P q/<hex(queue)>`, idempotent). Its desired
    /// owner adopts it within a placement period plus the grace.
    ///
    /// # Errors
    /// [`Error::Etcd`].
    pub async fn register_queue(&self, queue: &Q) -> Result<(), Error> {
        let mut c = self.shared.etcd.lock().clone();
        assign::register_queue(&mut c, &self.shared.keys, queue.as_ref()).await
    }

    /// The queues this member owns now with their tokens, sorted by queue. A queue being
    /// handed away stays listed until its new owner committed; whether it may be dispatched
    /// now is [`Fence::token`]'s answer.
    pub fn owned(&self) -> Vec<(Q, u64)> {
        self.shared
            .owned
            .lock()
            .iter()
            .map(|(q, t)| (q.clone(), *t))
            .collect()
    }

    /// A receiver of this member's events from now on (capacity 1024; a receiver that falls
    /// behind loses the oldest and is told how many).
    pub fn events(&self) -> broadcast::Receiver<FleetEvent<Q>> {
        self.shared.events.subscribe()
    }
}

impl<Q: QueueName, K, T> Drop for Member<Q, K, T> {
    fn drop(&mut self) {
        // The driver revokes the lease and ends; dispatch stops at once.
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.fence.revoke_all();
        self.shared.lease.notify.notify_waiters();
        let _ = self.task.take();
    }
}

/// Adds `queues` to the catalogue of the fleet `options` names, without joining (a
/// producer or an operator). One round trip a queue.
///
/// # Errors
/// [`Error::EtcdUnreachable`], [`Error::Etcd`].
pub async fn register_queues<I, B>(options: &FleetOptions, queues: I) -> Result<(), Error>
where
    I: IntoIterator<Item = B>,
    B: AsRef<[u8]>,
{
    let mut client = connect(options).await?;
    let keys = Keys::new(options.prefix.clone());
    for q in queues {
        assign::register_queue(&mut client, &keys, q.as_ref()).await?;
    }
    Ok(())
}
