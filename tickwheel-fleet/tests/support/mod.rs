//! Shared by the fleet tests, included by each as `mod support;`: servers of the test's own,
//! members, bounded waits, the `fleet` example.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::process::Output;
use tickwheel::sync::{FrozenEntry, Scheduler};
use tickwheel_fleet::{FencedDue, FleetEvent, FleetOptions, Member, RecoveryError};
use tickwheel_redis::journal::Pending;

use tickwheel_testkit::etcd::EtcdServer;
use tickwheel_testkit::example::{Example, last_line, text};
use tickwheel_testkit::redis::RedisServer;

pub mod checks;
pub mod children;
pub mod handouts;

#[allow(unused_imports)] // not every test binary starts children
pub use children::*;

/// The `fleet` example (the ownership proof), built with the test's profile.
pub const FLEET: Example = Example::new("tickwheel-proofs", "fleet");

/// Example options small enough for a debug build; a lease of 1 s keeps a pause short.
pub const SMALL: &[&str] = &[
    "--members",
    "3",
    "--queues",
    "24",
    "--rate",
    "300",
    "--max-delay-ms",
    "300",
    "--lease-ms",
    "1000",
];

/// The servers the example starts: (binary, Debian package).
pub const SERVERS: &[(&str, &str)] = &[("etcd", "etcd-server"), ("redis-server", "redis-server")];

/// The run must end `ownership: FAILED overlap on queue …` with exit status 1.
pub fn overlap_caught(out: &Output) {
    let last = last_line(out);
    assert!(
        last.starts_with("ownership: FAILED overlap on queue"),
        "last line: {last}\nstderr:\n{}",
        text(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{last}");
}

/// The run must end `ownership: OK (…)`; that line.
pub fn ownership_ok(out: &Output) -> String {
    let last = last_line(out);
    assert!(
        last.starts_with("ownership: OK ("),
        "last line: {last}\nstderr:\n{}",
        text(&out.stderr)
    );
    last
}

pub type Sched = Scheduler<String, u64, String>;
pub type FleetMember = Member<String, u64, String>;

/// etcd and redis-server of this test; `None` (skip) outside CI when one is missing.
pub fn servers() -> Option<(EtcdServer, RedisServer)> {
    let etcd = tickwheel_testkit::etcd::start_for_test()?;
    let redis = tickwheel_testkit::redis::start_for_test()?;
    Some((etcd, redis))
}

/// [`servers`] and their [`options`].
pub fn fleet() -> Option<(EtcdServer, RedisServer, FleetOptions)> {
    let (etcd, redis) = servers()?;
    let opts = options(&etcd, &redis);
    Some((etcd, redis, opts))
}

/// [`fleet`] with `n` queues ([`queues`]) registered.
pub async fn fleet_with(n: usize) -> Option<(EtcdServer, RedisServer, FleetOptions, Vec<String>)> {
    let (etcd, redis, opts) = fleet()?;
    let qs = queues(n);
    register(&opts, &qs).await;
    Some((etcd, redis, opts, qs))
}

/// [`fleet_with`] for the parent of a child test: `None` also in the child's own run
/// (the environment variable `env` set).
pub async fn parent_fleet_with(
    env: &str,
    n: usize,
) -> Option<(EtcdServer, RedisServer, FleetOptions, Vec<String>)> {
    if std::env::var_os(env).is_some() {
        return None;
    }
    fleet_with(n).await
}

pub fn options(etcd: &EtcdServer, redis: &RedisServer) -> FleetOptions {
    let mut o = FleetOptions::new(etcd.url(), redis.url()).with_lease_ttl(Duration::from_secs(2));
    o.poll_interval = Duration::from_millis(100);
    o.handoff_timeout = Duration::from_secs(5);
    o.custody.retry_for = Duration::from_secs(3);
    o
}

/// The "durable store" of the tests: every queue has `per_queue` timers far in the future,
/// ids `queue_index * 1000 + i`.
pub fn store_entries(queue: &str, per_queue: u64) -> Vec<FrozenEntry<u64, String>> {
    let base: u64 = queue.trim_start_matches('q').parse().unwrap_or(0) * 1000;
    let at = Instant::now() + Duration::from_secs(3600);
    (0..per_queue)
        .map(|i| FrozenEntry {
            id: base + i,
            at,
            value: format!("{queue}:{i}"),
        })
        .collect()
}

pub async fn join(opts: &FleetOptions, name: &str, per_queue: u64) -> FleetMember {
    let sched: Arc<Sched> = Arc::new(Scheduler::new());
    let r = Member::join(opts.clone(), name, sched, move |q: String| async move {
        Ok::<_, RecoveryError>(store_entries(&q, per_queue))
    })
    .await;
    match r {
        Ok(m) => m,
        Err(e) => panic!("join {name}: {e}"),
    }
}

/// [`Member::join`] with a fresh scheduler and a recovery that restores nothing: the join's
/// own result (a test of what `join` refuses).
pub async fn try_join(
    opts: &FleetOptions,
    name: &str,
) -> Result<FleetMember, tickwheel_fleet::Error> {
    Member::join(
        opts.clone(),
        name,
        Arc::new(Sched::new()),
        |_q: String| async { Ok::<_, RecoveryError>(Vec::new()) },
    )
    .await
}

/// Registers `n` queues and joins members `a` and `b`, `per_queue` timers a queue: the
/// queues and the two members (who owns what is not waited for).
pub async fn a_and_b(
    opts: &FleetOptions,
    n: usize,
    per_queue: u64,
) -> (Vec<String>, FleetMember, FleetMember) {
    let qs = queues(n);
    register(opts, &qs).await;
    let a = join(opts, "a", per_queue).await;
    let b = join(opts, "b", per_queue).await;
    (qs, a, b)
}

/// Waits up to `limit` for `cond`, polling every 50 ms; panics with `what` if it never holds.
pub async fn wait_for<F, Fut>(limit: Duration, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let until = Instant::now() + limit;
    loop {
        if cond().await {
            return;
        }
        if Instant::now() > until {
            panic!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Queue → owners among `members` (by name).
pub fn ownership(members: &[&FleetMember]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for m in members {
        for (q, _) in m.owned() {
            out.entry(q).or_default().push(m.name().to_owned());
        }
    }
    out
}

pub fn queues(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("q{i}")).collect()
}

/// [`wait_for`] with a plain condition.
pub async fn wait_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let until = Instant::now() + limit;
    while !cond() {
        if Instant::now() > until {
            panic!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits up to `limit` until every queue of `qs` has exactly one owner among `members` and
/// the members hold `total` of its timers together; panics if that never holds.
pub async fn owned_once(members: &[&FleetMember], qs: &[String], total: usize, limit: Duration) {
    let names: Vec<&str> = members.iter().map(|m| m.name()).collect();
    let what = format!("every queue owned once among {names:?}, {total} timers held");
    wait_until(limit, &what, || {
        exactly_one(members, qs) && timers_in(members, qs) == total
    })
    .await;
}

/// Whether every queue of `qs` has exactly one owner among `members`.
pub fn exactly_one(members: &[&FleetMember], qs: &[String]) -> bool {
    let own = ownership(members);
    qs.iter().all(|q| own.get(q).is_some_and(|o| o.len() == 1))
}

/// How many timers of `qs` the members' schedulers hold, together.
pub fn timers_in(members: &[&FleetMember], qs: &[String]) -> usize {
    members
        .iter()
        .map(|m| qs.iter().map(|q| m.scheduler().queue_len(q)).sum::<usize>())
        .sum()
}

/// Registers `qs`; panics if etcd refuses.
pub async fn register(opts: &FleetOptions, qs: &[String]) {
    if let Err(e) = tickwheel_fleet::register_queues(opts, qs).await {
        panic!("register: {e}");
    }
}

/// A fleet's start: registers `n` queues, joins member `a` with `per` timers a queue, and
/// waits up to `limit` until `a` owns every queue once and, with `all_timers`, holds every
/// timer. The queues, the number of timers (`n * per`) and `a`.
pub async fn start_with_a(
    opts: &FleetOptions,
    n: usize,
    per: u64,
    limit: Duration,
    all_timers: bool,
) -> (Vec<String>, usize, FleetMember) {
    let qs = queues(n);
    register(opts, &qs).await;
    let total = qs.len() * per as usize;
    let a = join(opts, "a", per).await;
    wait_for(limit, "a owns every queue", || async {
        exactly_one(&[&a], &qs) && (!all_timers || timers_in(&[&a], &qs) == total)
    })
    .await;
    (qs, total, a)
}

/// Waits (at most 20 s) until `m` acquires its first queue: the moment the other queues it
/// will take are mid-handoff.
pub async fn first_acquisition(m: &FleetMember) {
    let mut events = m.events();
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        match tokio::time::timeout(Duration::from_millis(100), events.recv()).await {
            Ok(Ok(FleetEvent::Acquired { .. })) => return,
            _ if Instant::now() > until => panic!("{} acquired nothing", m.name()),
            _ => {}
        }
    }
}

/// A fleet of the test's own (its servers: keep them, dropping one stops it), its options,
/// its queues and member `a`.
pub type FleetWithA = (
    EtcdServer,
    RedisServer,
    FleetOptions,
    Vec<String>,
    FleetMember,
);

/// A fleet of the test's own: its servers and options, `n` queues registered ([`queues`]),
/// and member `a` with the journal on, owning them all (`None`: skip, see [`servers`]).
/// Keep the servers: dropping one stops it.
pub async fn journaled_a(n: usize) -> Option<FleetWithA> {
    let (etcd, redis, opts, qs) = fleet_with(n).await?;
    let a = join_journaling(&opts, "a", true).await;
    owns(&a, qs.len()).await;
    Some((etcd, redis, opts, qs, a))
}

/// [`journaled_a`] for the parent of a child test: `None` also in the child's own run (the
/// environment variable `env` set).
pub async fn parent_journaled_a(env: &str, n: usize) -> Option<FleetWithA> {
    if std::env::var_os(env).is_some() {
        return None;
    }
    journaled_a(n).await
}

/// [`journaled_a`] with one queue: the servers (keep them), `a`, the queue and `a`'s token
/// for it.
///
/// # Panics
/// If `a` owns the queue under no token.
pub async fn journaled_one() -> Option<(EtcdServer, RedisServer, FleetMember, String, u64)> {
    let (etcd, redis, _opts, mut qs, a) = journaled_a(1).await?;
    let q = qs.remove(0);
    let token = token_of(&a, &q).expect("owned");
    Some((etcd, redis, a, q, token))
}

/// A queue of `qs` that `m` owns now.
///
/// # Panics
/// If `m` owns none of them.
pub fn queue_of<'a>(m: &FleetMember, qs: &'a [String]) -> &'a String {
    qs.iter()
        .find(|q| token_of(m, q).is_some())
        .unwrap_or_else(|| panic!("{} owns none of {qs:?}", m.name()))
}

/// Turns etcd authentication on at `url`: a `root` user with `password` and the root role,
/// then `auth_enable`; connecting with `connect` (TLS, say). Panics on any refusal.
pub async fn enable_etcd_auth(
    url: &str,
    password: &str,
    connect: Option<tickwheel_fleet::etcd_client::ConnectOptions>,
) {
    let mut c = match tickwheel_fleet::etcd_client::Client::connect([url], connect).await {
        Ok(c) => c,
        Err(e) => panic!("connect: {e}"),
    };
    let steps = async {
        c.user_add("root", password, None).await?;
        c.user_grant_role("root", "root").await?;
        c.auth_enable().await
    };
    if let Err(e) = steps.await {
        panic!("enable etcd auth: {e}");
    }
}

/// A member with the journal on (or off) and a recovery hook that finds nothing: what it
/// holds after an adoption came from the journal (or from nowhere).
pub async fn join_journaling(opts: &FleetOptions, name: &str, journal: bool) -> FleetMember {
    let mut opts = opts.clone();
    opts.journal = journal.then(tickwheel_redis::journal::JournalOptions::default);
    let sched: Arc<Sched> = Arc::new(Scheduler::new());
    let r = Member::join(opts, name, sched, |_q: String| async move {
        Ok::<Vec<FrozenEntry<u64, String>>, RecoveryError>(Vec::new())
    })
    .await;
    match r {
        Ok(m) => m,
        Err(e) => panic!("join {name}: {e}"),
    }
}

pub type Due = FencedDue<String, u64, String>;

/// Waits (at most 30 s) until `m` owns `n` queues.
pub async fn owns(m: &FleetMember, n: usize) {
    let what = format!("{} owns {n} queues", m.name());
    wait_until(Duration::from_secs(30), &what, || m.owned().len() == n).await;
}

/// Schedules `per` timers in each queue of `qs` on `m` and journals each
/// (`Member::journal_put`): in the `n`-th queue ids `n * 1000 + i` for `i` in `0..per`, due
/// at `at(i)`, value `"<queue>:<id>"`. Each put's queue, id and [`Pending`], in that order.
///
/// # Panics
/// If `m` refuses to schedule or to journal a timer.
pub fn schedule_journaled(
    m: &FleetMember,
    qs: &[String],
    per: u64,
    mut at: impl FnMut(u64) -> Instant,
) -> Vec<(String, u64, Pending)> {
    let mut pending = Vec::new();
    for (n, q) in qs.iter().enumerate() {
        for i in 0..per {
            let id = n as u64 * 1000 + i;
            let at = at(i);
            let value = format!("{q}:{id}");
            m.scheduler()
                .schedule(q.clone(), id, at, value.clone())
                .expect("schedule");
            let w = m.journal_put(q, &id, at, &value).expect("journal");
            pending.push((q.clone(), id, w));
        }
    }
    pending
}

/// Schedules the timers `ids` of `q`, due at `at` (value `"<q>:<id>"`), through `m`'s
/// journaled front ([`Member::schedule`]), then awaits every put.
///
/// # Panics
/// If the front or the scheduler refuses a timer, or a put is not durable.
pub async fn front_schedule_durably(
    m: &FleetMember,
    q: &str,
    ids: std::ops::Range<u64>,
    at: Instant,
) {
    let mut puts = Vec::new();
    for id in ids {
        match m.schedule(q.to_owned(), id, at, format!("{q}:{id}")) {
            Ok(Ok(p)) => puts.push(p),
            Ok(Err(e)) => panic!("scheduler refused {q}/{id}: {e:?}"),
            Err(e) => panic!("front refused {q}/{id}: {e}"),
        }
    }
    for p in puts {
        p.await.expect("durable");
    }
}

/// Deadlines for [`schedule_journaled`]: the first `due` timers of each queue at `now`, the
/// others an hour later.
pub fn first_due_at(due: u64, now: Instant) -> impl Fn(u64) -> Instant {
    move |i| {
        if i < due {
            now
        } else {
            now + Duration::from_secs(3600)
        }
    }
}

/// [`schedule_journaled`] at `m`, `per` timers a queue, the first `due` of each due now and
/// the others an hour later ([`first_due_at`]), each put awaited ([`durable`]): the (queue,
/// id) of every timer.
pub async fn schedule_durably(
    m: &FleetMember,
    qs: &[String],
    per: u64,
    due: u64,
) -> BTreeSet<(String, u64)> {
    let pending = schedule_journaled(m, qs, per, first_due_at(due, Instant::now()));
    let all = pending.iter().map(|(q, id, _)| (q.clone(), *id)).collect();
    durable(pending).await;
    all
}

/// Awaits every put of [`schedule_journaled`]; panics unless each is durable.
pub async fn durable(pending: Vec<(String, u64, Pending)>) {
    for (q, id, w) in pending {
        if let Err(e) = w.await {
            panic!("the put of {q}/{id}: {e}");
        }
    }
}

/// Pops `m`'s due timers (up to 1000 a call, every 10 ms) into `take` with `state`, while
/// `done(state)` is false and `limit` has not passed since the call.
pub async fn pop_due_into<S>(
    m: &FleetMember,
    limit: Duration,
    state: &mut S,
    done: impl Fn(&S) -> bool,
    mut take: impl FnMut(&mut S, Due),
) {
    let until = Instant::now() + limit;
    while !done(state) && Instant::now() < until {
        for d in m.pop_due(Instant::now(), 1000) {
            take(state, d);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The due timers `m` hands out within `limit`: popped until there are at least `n` (more
/// if the last call gave more), or fewer when `limit` passes. Held, so in flight.
pub async fn due_within(m: &FleetMember, n: usize, limit: Duration) -> Vec<Due> {
    let mut out = Vec::new();
    pop_due_into(m, limit, &mut out, |o| o.len() >= n, |o, d| o.push(d)).await;
    out
}

/// Waits (at most 30 s each) until `b` owns some queue, then until every queue of `qs` has
/// one owner among `a` and `b`.
pub async fn shares(a: &FleetMember, b: &FleetMember, qs: &[String]) {
    wait_until(Duration::from_secs(30), "b owns some queue", || {
        !b.owned().is_empty()
    })
    .await;
    wait_until(Duration::from_secs(30), "one owner each", || {
        exactly_one(&[a, b], qs)
    })
    .await;
}

/// `m`'s token for queue `q`, if it owns it.
pub fn token_of(m: &FleetMember, q: &str) -> Option<u64> {
    m.owned().iter().find(|(o, _)| o == q).map(|(_, t)| *t)
}

/// The first of `members` that owns `q`, and its token; panics if none does.
pub fn owner_of<'a>(members: &[&'a FleetMember], q: &str) -> (&'a FleetMember, u64) {
    members
        .iter()
        .find_map(|m| token_of(m, q).map(|t| (*m, t)))
        .unwrap_or_else(|| panic!("no owner of {q}"))
}

/// The ids of the timers of queue `q` in `m`'s scheduler.
pub fn ids_held(m: &FleetMember, q: &String) -> BTreeSet<u64> {
    let members = m.scheduler().queue_members(q);
    members.into_iter().map(|t| t.id).collect()
}

/// The (queue, id) of every timer of the queues `qs` in `m`'s scheduler.
pub fn held(m: &FleetMember, qs: &[String]) -> BTreeSet<(String, u64)> {
    let mut out = BTreeSet::new();
    for q in qs {
        out.extend(ids_held(m, q).into_iter().map(|id| (q.clone(), id)));
    }
    out
}

/// Journals timer `id` of `q` on `m`, due at `at` with `value`: whether it was acknowledged
/// durable (`false` if `m` refused it or the put failed).
pub async fn journal_one(
    m: &FleetMember,
    q: &String,
    id: u64,
    at: Instant,
    value: &String,
) -> bool {
    match m.journal_put(q, &id, at, value) {
        Ok(w) => w.await.is_ok(),
        Err(_) => false,
    }
}

/// A journal handle of the test's own on `redis`, as member `name` (a reader, or a writer of
/// another build). Panics if Redis does not answer.
pub async fn own_journal(redis: &RedisServer, name: &str) -> tickwheel_redis::journal::Journal {
    let p = tickwheel_redis::Protocol::connect(
        &redis.url(),
        tickwheel_redis::Member::new_boot(name),
        tickwheel_redis::Options::default(),
    )
    .await
    .expect("connect");
    tickwheel_redis::journal::Journal::start(p, tickwheel_redis::journal::JournalOptions::default())
        .expect("journal")
}

/// Now on Redis's clock's scale: µs since the Unix epoch (this host's wall clock).
pub fn unix_now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_micros() as u64
}

/// The id of the record [`write_undecodable`] writes: MessagePack u32 999 999.
pub const UNDECODABLE_ID: [u8; 5] = [0xce, 0x00, 0x0f, 0x42, 0x3f];

/// From a journal writer of its own on `redis` (another build of the program in a rolling
/// upgrade, encoding values differently), writes into the journal of each `(queue, token)` of
/// `records`, one after the other, a put of [`UNDECODABLE_ID`] due an hour from now whose
/// value (0xc1, never used in MessagePack) decodes as no `String`. Panics if a write fails.
pub async fn write_undecodable(redis: &RedisServer, records: &[(&str, u64)]) {
    let j = own_journal(redis, "writer").await;
    let far_us = unix_now_us() + 3_600_000_000;
    for &(q, token) in records {
        j.write(
            q.as_bytes(),
            token,
            vec![tickwheel_redis::journal::Op::Put {
                id: UNDECODABLE_ID.to_vec(),
                deadline_us: far_us,
                value: vec![0xc1],
            }],
        )
        .await
        .expect("poison record written under a's token");
    }
}
