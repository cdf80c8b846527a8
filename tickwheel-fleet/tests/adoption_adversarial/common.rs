//! What the adoption tests share: seeding a member's journal with uneven queues, the ledger
//! of hand-outs (each followed by an acknowledged `journal_end`, as a user confirms a
//! delivery), the checks at the end.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::checks::assert_none;
pub(crate) use crate::support::handouts::Collect;
use crate::support::*;
use tickwheel::sync::{FrozenEntry, Scheduler};
use tickwheel_fleet::{Acquisition, FleetEvent, FleetOptions, Member, RecoveryError};
use tickwheel_redis::journal::JournalOptions;
use tickwheel_testkit::etcd::EtcdServer;
use tickwheel_testkit::redis::RedisServer;

/// How far before its deadline a hand-out still counts as on time: the journal keeps
/// deadlines in microseconds of Redis `TIME`, and a child's deadlines cross processes as
/// wall-clock readings taken beside the `Instant`.
pub(crate) const SLACK: Duration = Duration::from_millis(2);

/// (queue, id).
pub(crate) type Key = (String, u64);

/// What `first` gives, with what `second` gives when there is one: the two run at once (two
/// members joining together, say).
pub(crate) async fn beside<A, B>(
    first: impl Future<Output = A>,
    second: Option<impl Future<Output = B>>,
) -> (A, Option<B>) {
    match second {
        Some(second) => {
            let (a, b) = tokio::join!(first, second);
            (a, Some(b))
        }
        None => (first.await, None),
    }
}

/// The id of the `i`-th timer of the `n`-th queue.
pub(crate) fn id_of(n: usize, i: u64) -> u64 {
    n as u64 * 100_000 + i
}

/// What a seeding left in the journal: each timer's deadline, and which ends were
/// acknowledged.
#[derive(Default)]
pub(crate) struct Seeded {
    pub(crate) intended: HashMap<Key, Instant>,
    pub(crate) ended: BTreeSet<Key>,
}

impl Seeded {
    /// Journaled and not ended: what the survivors must hand out.
    pub(crate) fn must(&self) -> BTreeSet<Key> {
        self.intended
            .keys()
            .filter(|k| !self.ended.contains(*k))
            .cloned()
            .collect()
    }

    /// How many timers of `q` must come back.
    pub(crate) fn must_in(&self, q: &str) -> usize {
        self.must().iter().filter(|(o, _)| o == q).count()
    }
}

/// The timers a seeding journals: `sizes[n]` in the `n`-th queue of `qs`, due `first` after
/// `t0` plus a spread of up to `spread` (ids interleaved over it); every timer with
/// `i % 7 == 3` ended.
pub(crate) fn plan(
    qs: &[String],
    sizes: &[u64],
    t0: Instant,
    first: Duration,
    spread: Duration,
) -> Seeded {
    let spread_ms = spread.as_millis().max(1) as u64;
    let mut s = Seeded::default();
    for (n, (q, size)) in qs.iter().zip(sizes).enumerate() {
        for i in 0..*size {
            let at = t0 + first + Duration::from_millis(i.wrapping_mul(7919) % spread_ms);
            s.intended.insert((q.clone(), id_of(n, i)), at);
            if i % 7 == 3 {
                s.ended.insert((q.clone(), id_of(n, i)));
            }
        }
    }
    s
}

/// `m` journals every timer of `s` (not scheduled: `m` never dispatches them), then the end
/// of each of `s.ended`; awaits every acknowledgement.
pub(crate) async fn seed(m: &FleetMember, s: &Seeded) {
    let mut puts = Vec::new();
    for ((q, id), at) in &s.intended {
        let w = m.journal_put(q, id, *at, &format!("{q}:{id}"));
        puts.push(w.expect("journal_put"));
    }
    for w in puts {
        w.await.expect("put acknowledged");
    }
    let mut ends = Vec::new();
    for (q, id) in &s.ended {
        ends.push(m.journal_end(q, id).expect("journal_end"));
    }
    for w in ends {
        w.await.expect("end acknowledged");
    }
}

/// [`plan`] from now, journaled by `m`.
pub(crate) async fn seeded(
    m: &FleetMember,
    qs: &[String],
    sizes: &[u64],
    first: Duration,
    spread: Duration,
) -> Seeded {
    let s = plan(qs, sizes, Instant::now(), first, spread);
    seed(m, &s).await;
    s
}

/// A member `a` joins, owns every queue of `qs`, journals [`seeded`] timers (`sizes`, due
/// from `first` over `spread`) and is dropped; returns once etcd deleted its owner keys.
pub(crate) async fn dead_member(
    opts: &FleetOptions,
    qs: &[String],
    sizes: &[u64],
    first: Duration,
    spread: Duration,
) -> Seeded {
    let a = join_journaling(opts, "a", true).await;
    owns(&a, qs.len()).await;
    let s = seeded(&a, qs, sizes, first, spread).await;
    drop(a);
    keys_gone(opts, qs).await;
    s
}

/// Due from 1 s on, over 4 s: a `(first, spread)` of [`dead_fleet`].
pub(crate) const FROM_1S: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(4));

/// Due at once (over 1 ms): a `(first, spread)` of [`dead_fleet`].
pub(crate) const AT_ONCE: (Duration, Duration) = (Duration::ZERO, Duration::from_millis(1));

/// The servers, options and queues of [`fleet_with`]`(sizes.len())`, after a
/// [`dead_member`] journaled `sizes` timers there (due from `first` over `spread`); `None`
/// where etcd or redis-server is missing.
pub(crate) async fn dead_fleet(
    sizes: &[u64],
    (first, spread): (Duration, Duration),
) -> Option<(EtcdServer, RedisServer, FleetOptions, Vec<String>, Seeded)> {
    let (etcd, redis, opts, qs) = fleet_with(sizes.len()).await?;
    let s = dead_member(&opts, &qs, sizes, first, spread).await;
    Some((etcd, redis, opts, qs, s))
}

/// [`dead_fleet`] for the parent of a child test: `None` also in the child's own run (the
/// environment variable `env` set).
pub(crate) async fn parent_dead_fleet(
    env: &str,
    sizes: &[u64],
    due: (Duration, Duration),
) -> Option<(EtcdServer, RedisServer, FleetOptions, Vec<String>, Seeded)> {
    if std::env::var_os(env).is_some() {
        return None;
    }
    dead_fleet(sizes, due).await
}

/// Journal sizes of `n` queues: the first `huge`, the others 0 to 4 (uneven, some empty).
pub(crate) fn uneven(n: usize, huge: u64) -> Vec<u64> {
    (0..n)
        .map(|i| {
            if i == 0 {
                huge
            } else {
                [0, 1, 2, 3, 4, 1, 2][i % 7]
            }
        })
        .collect()
}

/// Every (queue, id) of `s` that was never ended: what may be handed out.
pub(crate) fn may(s: &Seeded) -> BTreeSet<Key> {
    s.must()
}

/// Every hand-out seen, and what it broke.
#[derive(Default)]
pub(crate) struct Ledger {
    /// (member, queue, id, token) in the order seen.
    pub(crate) dispatches: Vec<(String, String, u64, u64)>,
    /// (member, queue, id, token, how early).
    pub(crate) early: Vec<(String, String, u64, u64, Duration)>,
    /// Ends acknowledged so far (the dead member's included).
    pub(crate) ended: BTreeSet<Key>,
    /// Hand-outs of a timer whose end had been acknowledged before: (member, queue, id, token).
    pub(crate) after_end: Vec<(String, String, u64, u64)>,
}

impl Ledger {
    pub(crate) fn new(ended: &BTreeSet<Key>) -> Self {
        Ledger {
            ended: ended.clone(),
            ..Ledger::default()
        }
    }

    /// Pops everything due at `members` now and records it; each member then journals the
    /// end of what it handed out (a confirmed delivery) and the ends acknowledged are noted.
    pub(crate) async fn drain(
        &mut self,
        members: &[&FleetMember],
        intended: &HashMap<Key, Instant>,
    ) {
        let mut ends = Vec::new();
        for m in members {
            let now = Instant::now();
            for d in m.pop_due(now, 10_000) {
                let (q, id) = (d.due.queue().clone(), *d.due.id());
                assert_eq!(d.due.value(), &format!("{q}:{id}"), "value of {id}");
                let who = m.name().to_owned();
                if let Some(want) = intended.get(&(q.clone(), id))
                    && now + SLACK < *want
                {
                    let early = *want - now;
                    self.early
                        .push((who.clone(), q.clone(), id, d.token, early));
                }
                if self.ended.contains(&(q.clone(), id)) {
                    self.after_end.push((who.clone(), q.clone(), id, d.token));
                }
                self.dispatches.push((who, q.clone(), id, d.token));
                if let Ok(w) = m.journal_end(&q, &id) {
                    ends.push(((q, id), w));
                }
            }
        }
        for (k, w) in ends {
            if w.await.is_ok() {
                self.ended.insert(k);
            }
        }
    }

    pub(crate) fn ids(&self) -> BTreeSet<Key> {
        crate::support::handouts::handed_out_ids(&self.dispatches)
    }

    /// How often each (queue, id) was handed out, whatever the token.
    pub(crate) fn counts(&self) -> BTreeMap<Key, usize> {
        let mut n = BTreeMap::new();
        for (_, q, id, _) in &self.dispatches {
            *n.entry((q.clone(), *id)).or_default() += 1;
        }
        n
    }

    /// `(queue, id, token)` handed out more than once.
    pub(crate) fn twice_under_one_token(&self) -> Vec<(String, u64, u64, usize)> {
        crate::support::handouts::twice_under_one_token(&self.dispatches)
    }
}

/// Drains `members` every 5 ms; the last round 300 ms after.
impl Collect for Ledger {
    type Intended = HashMap<Key, Instant>;
    const PACE: (Duration, Duration) = (Duration::from_millis(5), Duration::from_millis(300));

    async fn round(&mut self, members: &[&FleetMember], intended: &Self::Intended) {
        self.drain(members, intended).await;
    }

    fn handed_out(&self) -> BTreeSet<Key> {
        self.ids()
    }
}

/// None early, none twice under one token, none after its acknowledged end, every timer of
/// `must` handed out, nothing outside `may`.
pub(crate) fn check(ledger: &Ledger, must: &BTreeSet<Key>, may: &BTreeSet<Key>) {
    assert_none(&ledger.early, "hand-outs before their deadline");
    let twice = ledger.twice_under_one_token();
    assert_none(&twice, "(queue, id, token) handed out more than once");
    assert_none(
        &ledger.after_end,
        "hand-outs after the timer's end was acknowledged",
    );
    let got = ledger.ids();
    let missing: Vec<_> = must.difference(&got).cloned().collect();
    let never = format!(
        "of {} journaled, not ended timers never handed out",
        must.len()
    );
    assert_none(&missing, &never);
    let stray: Vec<_> = got.difference(may).cloned().collect();
    assert_none(&stray, "handed out that were never journaled or were ended");
}

/// With no fault and no move after the adoption: every timer handed out exactly once.
pub(crate) fn exactly_once(ledger: &Ledger) {
    let more: Vec<_> = ledger
        .counts()
        .into_iter()
        .filter(|(_, c)| *c > 1)
        .collect();
    assert_none(&more, "timers handed out more than once");
}

/// [`check`] against what `s` must and may hand out, then [`exactly_once`].
pub(crate) fn check_once(ledger: &Ledger, must: &BTreeSet<Key>, s: &Seeded) {
    check(ledger, must, &may(s));
    exactly_once(ledger);
}

/// Joins `name` with the journal on, a fresh scheduler and `hook` as its recovery.
pub(crate) async fn join_hooked<F, Fut>(opts: &FleetOptions, name: &str, hook: F) -> FleetMember
where
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Vec<FrozenEntry<u64, String>>, RecoveryError>> + Send + 'static,
{
    join_with(opts, name, JournalOptions::default(), hook).await
}

/// [`join_hooked`] with the journal's settings `journal`.
pub(crate) async fn join_with<F, Fut>(
    opts: &FleetOptions,
    name: &str,
    journal: JournalOptions,
    hook: F,
) -> FleetMember
where
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Vec<FrozenEntry<u64, String>>, RecoveryError>> + Send + 'static,
{
    let mut opts = opts.clone();
    opts.journal = Some(journal);
    let sched: Arc<Sched> = Arc::new(Scheduler::new());
    match Member::join(opts, name, sched, hook).await {
        Ok(m) => m,
        Err(e) => panic!("join {name}: {e}"),
    }
}

/// Every event a receiver still holds.
pub(crate) fn events_of(
    rx: &mut tokio::sync::broadcast::Receiver<FleetEvent<String>>,
) -> Vec<FleetEvent<String>> {
    let mut out = Vec::new();
    while let Ok(e) = rx.try_recv() {
        out.push(e);
    }
    out
}

/// A fresh ledger of `s` collected at `members` until every timer `s` must hand out was
/// handed out (or `limit`); returns those timers ([`Seeded::must`]) and the ledger.
pub(crate) async fn collected(
    members: &[&FleetMember],
    s: &Seeded,
    limit: Duration,
) -> (BTreeSet<Key>, Ledger) {
    let must = s.must();
    let mut ledger = Ledger::new(&s.ended);
    ledger.collect_all(members, &s.intended, &must, limit).await;
    (must, ledger)
}

/// Waits (at most 20 s) until etcd deleted every owner key of `qs` (the dead member's lease
/// revoked or expired).
pub(crate) async fn keys_gone(opts: &FleetOptions, qs: &[String]) {
    let mut c = tickwheel_fleet::etcd_client::Client::connect(&opts.etcd_endpoints, None)
        .await
        .expect("etcd");
    let until = Instant::now() + Duration::from_secs(20);
    for q in qs {
        let hex: String = q.bytes().map(|b| format!("{b:02x}")).collect();
        let key = format!("{}o/{hex}", opts.prefix);
        while !c
            .get(key.clone(), None)
            .await
            .expect("get")
            .kvs()
            .is_empty()
        {
            assert!(Instant::now() < until, "the owner key of {q} stayed");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Nothing: a recovery hook that finds nothing.
pub(crate) async fn nothing(_q: String) -> Result<Vec<FrozenEntry<u64, String>>, RecoveryError> {
    Ok(Vec::new())
}

/// Each queue of `qs` acquired exactly once among `events`, by adoption, with `recovered`
/// its journaled, not-ended timers in `s`.
pub(crate) fn adopted_once_each(events: &[FleetEvent<String>], qs: &[String], s: &Seeded) {
    let mut acquired: BTreeMap<&String, Vec<&Acquisition>> = BTreeMap::new();
    for e in events {
        if let FleetEvent::Acquired { queue, how, .. } = e {
            acquired.entry(queue).or_default().push(how);
        }
    }
    for q in qs {
        let want = s.must_in(q);
        match acquired.get(q).map(Vec::as_slice) {
            Some([Acquisition::Adopted { recovered, .. }]) => {
                assert_eq!(*recovered, want, "{q}: recovered, of {want} not ended")
            }
            other => panic!("{q} acquired as {other:?}, once by adoption expected"),
        }
    }
}
