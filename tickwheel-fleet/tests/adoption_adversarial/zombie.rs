//! A zombie owner (SIGSTOPped past its lease) that goes on journaling after a survivor
//! adopted its queues: the survivor's load ran under its larger token, so every put Redis
//! acknowledged to the zombie ran before it and comes out at the survivor, and no put after
//! it is acknowledged.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use tickwheel_testkit::child::send_signal;

use crate::common::*;
use crate::support::*;

const ZOMBIE: &str = "TICKWHEEL_FLEET_ADOPTION_ZOMBIE_CHILD";
const QUEUES: usize = 4;

/// Owns the 4 queues, then journals a new timer every 2 ms round the queues (id `k`, due
/// 300 ms later, value `"<queue>:<k>"`), printing `ACK <queue> <k> <token>` once Redis
/// acknowledged it, `NACK <queue> <k>` when refused, until killed. Dispatches nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zombie_child() {
    let Some((m, qs)) = join_child_journaling(ZOMBIE, QUEUES).await else {
        return;
    };
    println!("OWNS");
    let m = std::sync::Arc::new(m);
    for k in 0u64.. {
        let q = qs[k as usize % QUEUES].clone();
        let at = Instant::now() + Duration::from_millis(300);
        let token = m.fence().token(q.as_bytes()).unwrap_or(0);
        match m.journal_put(&q, &k, at, &format!("{q}:{k}")) {
            Ok(w) => {
                tokio::spawn(async move {
                    match w.await {
                        Ok(_) => println!("ACK {q} {k} {token}"),
                        Err(_) => println!("NACK {q} {k}"),
                    }
                });
            }
            Err(_) => println!("NACK {q} {k}"),
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The zombie journals for a while, is stopped (SIGSTOP) for its lease and more; a survivor
/// adopts its 4 queues, and only once they are all owned and loaded is the zombie let go
/// (SIGCONT) for 2 s, then killed. Every put acknowledged to the zombie, before or after the
/// stop, must be handed out by the survivor; none twice under one token.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_zombie_owner_journaling_after_the_adoption_loses_no_acknowledged_put() {
    let Some((etcd, redis, opts, qs)) = parent_fleet_with(ZOMBIE, QUEUES).await else {
        return;
    };
    let test = ("zombie::zombie_child", ZOMBIE);
    let mut child = child_member_ready(
        test,
        (&etcd, &redis, "z"),
        Duration::from_secs(60),
        ("ACK ", 200),
    )
    .await;
    send_signal(child.pid(), "STOP").expect("SIGSTOP");
    let stopped_acks = child.count("ACK ");
    let m = join_journaling(&opts, "s", true).await;
    owns(&m, QUEUES).await;
    let mut ledger = Ledger::default();
    let none = Default::default();
    let settle = Instant::now() + Duration::from_millis(500);
    while Instant::now() < settle {
        ledger.drain(&[&m], &none).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    send_signal(child.pid(), "CONT").expect("SIGCONT");
    let resumed = Instant::now() + Duration::from_secs(2);
    while Instant::now() < resumed {
        ledger.drain(&[&m], &none).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    child.kill9();
    let acked: BTreeSet<Key> = printed(&child, "ACK ");
    let nacked = printed(&child, "NACK ").len();
    ledger
        .collect(&[&m], &none, Duration::from_secs(20), |l| {
            acked.is_subset(&l.ids())
        })
        .await;
    eprintln!(
        "{} puts acknowledged to the zombie ({stopped_acks} before the stop), {nacked} refused; \
         {} hand-outs",
        acked.len(),
        ledger.dispatches.len()
    );
    let got = ledger.ids();
    let missing: Vec<_> = acked.difference(&got).take(5).collect();
    assert!(
        missing.is_empty(),
        "{} puts acknowledged to the zombie never handed out, e.g. {missing:?}",
        acked.difference(&got).count()
    );
    let twice = ledger.twice_under_one_token();
    assert!(twice.is_empty(), "twice under one token: {twice:?}");
    assert!(exactly_one(&[&m], &qs));
}
