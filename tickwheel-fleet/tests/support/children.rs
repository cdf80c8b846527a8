//! Members in child processes (this test binary run again by `TestChild`), joined from the
//! [`child_spec`] the parent put in the environment.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use tickwheel_fleet::{FleetEvent, FleetOptions};
use tickwheel_testkit::child::TestChild;
use tickwheel_testkit::etcd::EtcdServer;
use tickwheel_testkit::redis::RedisServer;
use tokio::sync::broadcast::Receiver;

use super::{
    FleetMember, join, join_journaling, owns, parent_fleet_with, pop_due_into, queues,
    schedule_journaled,
};

/// In a child process: the member named by the [`child_spec`] the parent put in the
/// environment variable `env`, joined with 3 timers a queue; `None` in the parent's own run
/// of the child test.
pub async fn join_child(env: &str) -> Option<FleetMember> {
    let spec = std::env::var(env).ok()?;
    let (opts, name) = child_spec(&spec);
    Some(join(&opts, &name, 3).await)
}

/// In a child process: the member named by the [`child_spec`] in the environment variable
/// `env`, joined with the journal on and a recovery that finds nothing, and its name; `None`
/// in the parent's own run of the child test.
pub async fn join_child_journaled(env: &str) -> Option<(FleetMember, String)> {
    let spec = std::env::var(env).ok()?;
    let (opts, name) = child_spec(&spec);
    Some((join_journaling(&opts, &name, true).await, name))
}

/// As [`join_child_journaled`], once the member owns the `n` queues [`queues`]`(n)`.
pub async fn join_child_journaling(env: &str, n: usize) -> Option<(FleetMember, Vec<String>)> {
    let (m, _) = join_child_journaled(env).await?;
    owns(&m, n).await;
    Some((m, queues(n)))
}

/// Prints `ACQ <queue> <token>` for each acquisition `events` (a member's) reports, for good
/// (a child killed by its parent).
pub async fn print_acquisitions(mut events: Receiver<FleetEvent<String>>) -> ! {
    loop {
        if let Ok(FleetEvent::Acquired { queue, token, .. }) = events.recv().await {
            println!("ACQ {queue} {token}");
        }
    }
}

/// In a child process: [`schedule_journaled`] at `m`, then each put awaited in turn and
/// printed as `ACK <queue> <id> <token>` (the token `m` held the queue under before) or
/// `ERR <queue> <id> <error>`.
pub async fn schedule_printing_acks(
    m: &FleetMember,
    qs: &[String],
    per: u64,
    at: impl FnMut(u64) -> Instant,
) {
    let tokens: BTreeMap<String, u64> = m.owned().into_iter().collect();
    for (q, id, w) in schedule_journaled(m, qs, per, at) {
        let token = tokens.get(&q).copied().unwrap_or(0);
        match w.await {
            Ok(_) => println!("ACK {q} {id} {token}"),
            Err(e) => println!("ERR {q} {id} {e}"),
        }
    }
}

/// In a child process: journals the end of `q`'s timer `id` at `m` and prints the outcome,
/// `END <queue> <id>` or `ERR <queue> <id> <error>`.
///
/// # Panics
/// If `m` refuses the end before sending it (see `Member::journal_end`).
pub async fn end_printing(m: &FleetMember, q: &String, id: u64) {
    match m.journal_end(q, &id).expect("journal").await {
        Ok(_) => println!("END {q} {id}"),
        Err(e) => println!("ERR {q} {id} {e}"),
    }
}

/// A fleet of the test's own with `n` queues, after the child test `test` (run with its
/// spec in the environment variable `env`) joined it as member `name`, printed `DONE` within
/// `limit` and was killed ([`killed_when_done`]): its servers (keep them: dropping one stops
/// it), options, queues and what the child printed. `None`: skip (see [`parent_fleet_with`]),
/// or the child's own run.
pub async fn after_killed_child(
    (test, env): (&str, &str),
    name: &str,
    n: usize,
    limit: Duration,
) -> Option<(EtcdServer, RedisServer, FleetOptions, Vec<String>, Printed)> {
    let (etcd, redis, opts, qs) = parent_fleet_with(env, n).await?;
    let child = killed_when_done((test, env), (&etcd, &redis, name), limit).await;
    Some((etcd, redis, opts, qs, child))
}

/// [`after_killed_child`] (member `w`, `n` queues), checked to have acknowledged `acked`
/// timers, then a survivor `s` joined ([`join_journaling`], the journal on or off) and owning
/// all `n` queues: the servers (keep them), queues, what the child printed and the survivor.
/// `None`: skip, or the child's own run.
pub async fn survivor_of_killed_child(
    test_env: (&str, &str),
    n: usize,
    limit: Duration,
    acked: usize,
    journal: bool,
) -> Option<(EtcdServer, RedisServer, Vec<String>, Printed, FleetMember)> {
    let (etcd, redis, opts, qs, child) = after_killed_child(test_env, "w", n, limit).await?;
    assert_eq!(child.acked.len(), acked, "{:?}", child.lines);
    let s = join_journaling(&opts, "s", journal).await;
    owns(&s, qs.len()).await;
    Some((etcd, redis, qs, child, s))
}

/// The survivor `s`'s due timers, popped (up to 10 s) until as many came out as `child`
/// acknowledged and did not end: their (queue, id). Each is checked as it comes: under a
/// token larger than the child's for its queue, valued `"<queue>:<id>"`, not twice.
pub async fn redelivered(s: &FleetMember, child: &Printed) -> BTreeSet<(String, u64)> {
    let want = child.not_ended().len();
    let mut got = BTreeSet::new();
    let enough = |got: &BTreeSet<_>| got.len() >= want;
    pop_due_into(s, Duration::from_secs(10), &mut got, enough, |got, d| {
        let dead = child.token(d.due.queue());
        assert!(
            d.token > dead,
            "redelivered under {} after the dead owner's {dead}",
            d.token
        );
        assert_eq!(d.due.value(), &format!("{}:{}", d.due.queue(), d.due.id()));
        let k = (d.due.queue().clone(), *d.due.id());
        assert!(
            got.insert(k.clone()),
            "{k:?} delivered twice by the survivor"
        );
    })
    .await;
    got
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

/// What a journaling child printed: every line, the token of each queue (its first
/// `ACK <queue> <id> <token>`), and the (queue, id) of its `ACK`, `OUT` and `END` lines.
pub struct Printed {
    pub lines: Vec<String>,
    pub tokens: BTreeMap<String, u64>,
    pub acked: BTreeSet<(String, u64)>,
    pub out: BTreeSet<(String, u64)>,
    pub ended: BTreeSet<(String, u64)>,
}

impl Printed {
    /// The timers acknowledged and not ended: what a survivor must hand out again.
    pub fn not_ended(&self) -> BTreeSet<(String, u64)> {
        self.acked.difference(&self.ended).cloned().collect()
    }

    /// The child's token for queue `q` (0 if it acknowledged nothing there).
    pub fn token(&self, q: &str) -> u64 {
        self.tokens.get(q).copied().unwrap_or(0)
    }
}

/// [`child_member_ready`] until the child printed `DONE`, then killed (SIGKILL): what it
/// printed.
pub async fn killed_when_done(
    test_env: (&str, &str),
    servers: (&EtcdServer, &RedisServer, &str),
    limit: Duration,
) -> Printed {
    let mut child = child_member_ready(test_env, servers, limit, ("DONE", 1)).await;
    child.kill9();
    Printed {
        lines: child.lines(),
        tokens: acked_tokens(&child),
        acked: printed(&child, "ACK "),
        out: printed(&child, "OUT "),
        ended: printed(&child, "END "),
    }
}

/// The (queue, id) of every line `child` printed as `<prefix><queue> <id> …`.
pub fn printed(child: &TestChild, prefix: &str) -> BTreeSet<(String, u64)> {
    child
        .lines()
        .iter()
        .filter_map(|l| {
            let mut p = l.strip_prefix(prefix)?.split(' ');
            Some((p.next()?.to_owned(), p.next()?.parse().ok()?))
        })
        .collect()
}

/// Queue → token of the first line `child` printed as `ACK <queue> <id> <token>`.
pub fn acked_tokens(child: &TestChild) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for l in child.lines() {
        let Some(rest) = l.strip_prefix("ACK ") else {
            continue;
        };
        let p: Vec<&str> = rest.split(' ').collect();
        if let [q, _, token] = p[..]
            && let Ok(token) = token.parse()
        {
            out.entry(q.to_owned()).or_insert(token);
        }
    }
    out
}

/// This test binary run again as the test `test`, member `name` of `etcd` and `redis` (its
/// [`child_spec`] in the environment variable `env`), once it printed `n` lines starting with
/// `prefix`; panics with its output if that takes over `limit`.
pub async fn child_member_ready(
    (test, env): (&str, &str),
    (etcd, redis, name): (&EtcdServer, &RedisServer, &str),
    limit: Duration,
    (prefix, n): (&str, usize),
) -> TestChild {
    let child = TestChild::spawn(test, env, &format!("{} {} {name}", etcd.url(), redis.url()));
    let started = Instant::now();
    while child.count(prefix) < n {
        assert!(
            started.elapsed() < limit,
            "the child printed {} lines {prefix:?} of {n}: {:?}",
            child.count(prefix),
            child.lines()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child
}
