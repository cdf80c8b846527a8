//! Members as child processes (this test binary run again as `probe_child`), killed with
//! SIGKILL or paused with SIGSTOP past their lease, against real etcd and redis-server.
//!
//! The child prints one line per fact: `ACQUIRED <queue> <token>`, `FENCED`, `REJOINED`,
//! `WRITE <queue> <token> ok|fenced|error` (a token-checked Redis write, `renew` at the token,
//! tried every 100 ms for every token it ever held), `DISPATCH <queue> <token>`.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::*;
use tickwheel_fleet::{FleetEvent, FleetOptions};
use tickwheel_testkit::child::TestChild;
use tickwheel_testkit::etcd::EtcdServer;
use tickwheel_testkit::redis::RedisServer;
use tickwheel_testkit::send_signal;

const PROBE: &str = "TICKWHEEL_FLEET_PROBE";

/// The child member: runs only when the parent set `TICKWHEEL_FLEET_PROBE`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_child() {
    let Some(m) = join_child(PROBE).await else {
        return;
    };
    let mut events = m.events();
    let held: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let h = Arc::clone(&held);
    tokio::spawn(async move {
        while let Ok(e) = events.recv().await {
            match e {
                FleetEvent::Acquired { queue, token, .. } => {
                    println!("ACQUIRED {queue} {token}");
                    h.lock().map(|mut h| h.insert(queue, token)).ok();
                }
                FleetEvent::Fenced => println!("FENCED"),
                FleetEvent::Rejoined { .. } => println!("REJOINED"),
                _ => {}
            }
        }
    });
    let mut last: BTreeMap<(String, u64), &str> = BTreeMap::new();
    loop {
        for d in m.pop_due(Instant::now(), 100) {
            println!("DISPATCH {} {}", d.due.queue(), d.token);
        }
        let tokens: Vec<(String, u64)> = held
            .lock()
            .map(|h| h.iter().map(|(q, t)| (q.clone(), *t)).collect())
            .unwrap_or_default();
        for (q, t) in tokens {
            let token = tickwheel_redis::Token::generate();
            let r = m.custody().protocol().renew(q.as_bytes(), t, &token).await;
            let what = match r {
                Ok(_) => "ok",
                Err(e) if e.is_fenced() => "fenced",
                Err(_) => "error",
            };
            if last.insert((q.clone(), t), what) != Some(what) {
                println!("WRITE {q} {t} {what}");
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A child member process (`probe_child`) and the lines it printed.
type Probe = TestChild;

/// Member `name` as a child process.
fn spawn_probe(etcd: &str, redis: &str, name: &str) -> Probe {
    TestChild::spawn("probe_child", PROBE, &format!("{etcd} {redis} {name}"))
}

/// A fleet of `n` queues ([`fleet_with`]) and the probe `p` once it acquired every one;
/// `None` where etcd or redis-server is missing, and in the probe's own run.
async fn probe_owning(
    n: usize,
) -> Option<(EtcdServer, RedisServer, FleetOptions, Vec<String>, Probe)> {
    if std::env::var_os(PROBE).is_some() {
        return None;
    }
    let (etcd, redis, opts, qs) = fleet_with(n).await?;
    let probe = spawn_probe(&etcd.url(), &redis.url(), "p");
    wait_for(Duration::from_secs(30), "p owns every queue", || async {
        acquired(&probe).len() == qs.len()
    })
    .await;
    Some((etcd, redis, opts, qs, probe))
}

/// What `probe` acquired: queue → token.
fn acquired(probe: &Probe) -> BTreeMap<String, u64> {
    probe
        .lines()
        .iter()
        .filter_map(|l| {
            let mut p = l.strip_prefix("ACQUIRED ")?.split(' ');
            Some((p.next()?.to_owned(), p.next()?.parse().ok()?))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_member_is_adopted_within_lease_and_grace() {
    let Some((_etcd, _redis, opts, qs, mut probe)) = probe_owning(6).await else {
        return;
    };
    let s = join(&opts, "s", 3).await;
    let killed = Instant::now();
    probe.kill9();
    wait_for(Duration::from_secs(30), "s owns every queue", || async {
        s.owned().len() == qs.len()
    })
    .await;
    let took = killed.elapsed();
    let bound = opts.lease_ttl + opts.grace;
    eprintln!(
        "adopted {} queues {took:?} after the kill (lease + grace = {bound:?})",
        qs.len()
    );
    // Every timer came back through the recovery hook, each token above p's.
    let total: usize = qs.iter().map(|q| s.scheduler().queue_len(q)).sum();
    assert_eq!(total, qs.len() * 3);
    let before = acquired(&probe);
    for (q, token) in s.owned() {
        assert!(
            before.get(&q).is_some_and(|t| *t < token),
            "{q}: {token} vs {before:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_member_is_fenced_and_its_writes_are_rejected_when_it_wakes() {
    let Some((_etcd, _redis, opts, qs, probe)) = probe_owning(4).await else {
        return;
    };
    let before = acquired(&probe);
    for (q, t) in &before {
        let line = format!("WRITE {q} {t} ok");
        wait_for(Duration::from_secs(10), &line, || async {
            probe.has(&line)
        })
        .await;
    }
    if let Err(e) = send_signal(probe.pid(), "STOP") {
        panic!("SIGSTOP: {e}");
    }
    let s = join(&opts, "s", 3).await;
    wait_for(Duration::from_secs(30), "s adopts every queue", || async {
        s.owned().len() == qs.len()
    })
    .await;
    if let Err(e) = send_signal(probe.pid(), "CONT") {
        panic!("SIGCONT: {e}");
    }
    // Awake: it fences itself, and Redis refuses every write under its old tokens.
    wait_for(Duration::from_secs(20), "p fenced and refused", || async {
        probe.has("FENCED")
            && before
                .iter()
                .all(|(q, t)| probe.has(&format!("WRITE {q} {t} fenced")))
    })
    .await;
    // Under the old tokens nothing was dispatched after s took over (nothing was due at
    // all: the store's timers are an hour out) and no write was accepted after the first
    // refusal.
    let lines = probe.lines();
    for (q, t) in &before {
        let refused = lines
            .iter()
            .position(|l| *l == format!("WRITE {q} {t} fenced"));
        let ok_after =
            refused.is_some_and(|i| lines[i..].iter().any(|l| *l == format!("WRITE {q} {t} ok")));
        assert!(!ok_after, "{q}: a write at {t} accepted after the refusal");
    }
    // It rejoins under the same name and gets its share back by handoff.
    wait_for(Duration::from_secs(30), "p rejoined", || async {
        probe.has("REJOINED")
    })
    .await;
    wait_for(
        Duration::from_secs(30),
        "queues split between p and s",
        || async {
            let now = acquired(&probe);
            let p_has: BTreeSet<_> = now
                .iter()
                .filter(|(q, t)| before.get(*q) != Some(t))
                .map(|(q, _)| q.clone())
                .collect();
            let s_has: BTreeSet<_> = s.owned().into_iter().map(|(q, _)| q).collect();
            let want_p: BTreeSet<_> = qs
                .iter()
                .filter(|q| tickwheel_fleet::assign::desired(["p", "s"], q.as_bytes()) == Some("p"))
                .cloned()
                .collect();
            want_p.is_subset(&p_has)
                && s_has.is_disjoint(&want_p)
                && s_has.len() + want_p.len() == qs.len()
        },
    )
    .await;
}
