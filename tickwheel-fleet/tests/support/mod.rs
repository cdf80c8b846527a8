//! Shared by the fleet tests, included by each as `mod support;`: servers of the test's own,
//! members, bounded waits, the `fleet` example.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::process::Output;
use tickwheel::sync::{FrozenEntry, Scheduler};
use tickwheel_fleet::{FleetEvent, FleetOptions, Member, RecoveryError};

use tickwheel_testkit::etcd::EtcdServer;
use tickwheel_testkit::example::{Example, last_line, text};
use tickwheel_testkit::redis::RedisServer;

/// The `fleet` example (the ownership proof), built with the test's profile.
pub const FLEET: Example = Example::new("tickwheel-fleet", "fleet");

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

/// A child member's options and name from its spec, `"<etcd url> <redis url> <name>"`: a
/// 2 s lease, polls every 100 ms, custody retries for 2 s.
///
/// # Panics
/// If the spec has fewer than three words.
pub fn child_spec(spec: &str) -> (FleetOptions, String) {
    let mut parts = spec.split(' ');
    let (Some(etcd), Some(redis), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
        panic!("bad child spec {spec:?}");
    };
    let mut opts = FleetOptions::new(etcd, redis).with_lease_ttl(Duration::from_secs(2));
    opts.poll_interval = Duration::from_millis(100);
    opts.custody.retry_for = Duration::from_secs(2);
    (opts, name.to_owned())
}

/// In a child process: the member named by the [`child_spec`] the parent put in the
/// environment variable `env`, joined with 3 timers a queue; `None` in the parent's own run
/// of the child test.
pub async fn join_child(env: &str) -> Option<FleetMember> {
    let spec = std::env::var(env).ok()?;
    let (opts, name) = child_spec(&spec);
    Some(join(&opts, &name, 3).await)
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
