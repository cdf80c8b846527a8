//! Shared by the fleet tests: servers of the test's own, members, bounded waits.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tickwheel::sync::{FrozenEntry, Scheduler};
use tickwheel_fleet::{FleetOptions, Member, RecoveryError};
use tickwheel_testkit::etcd::EtcdServer;
use tickwheel_testkit::redis::RedisServer;

pub type Sched = Scheduler<String, u64, String>;
pub type FleetMember = Member<String, u64, String>;

/// etcd and redis-server of this test; `None` (skip) outside CI when one is missing.
pub fn servers() -> Option<(EtcdServer, RedisServer)> {
    let etcd = tickwheel_testkit::etcd::start_for_test()?;
    let redis = tickwheel_testkit::redis::start_for_test()?;
    Some((etcd, redis))
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
