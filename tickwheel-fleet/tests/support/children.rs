//! Members in child processes (this test binary run again by `TestChild`), joined from the
//! [`child_spec`] the parent put in the environment.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tickwheel_fleet::{FleetEvent, FleetOptions};
use tickwheel_testkit::etcd::EtcdServer;
use tickwheel_testkit::redis::RedisServer;
use tokio::sync::broadcast::Receiver;

use super::{
    FleetMember, Printed, child_spec, join, join_journaling, killed_when_done, owns,
    parent_fleet_with, queues, schedule_journaled,
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
