//! A member with `FleetOptions::journal` on, killed with SIGKILL, loses none of its queues'
//! timers although the survivor's recovery hook returns nothing: the survivor adopts each
//! queue under a larger token, loads its journal from Redis and dispatches every timer the
//! dead member had been told was durable.
//!
//! The child (this test binary run again as `journaling_child`) joins alone, owns every
//! queue, schedules timers and journals each (`Member::journal_put`), printing `ACK <queue>
//! <id> <token>` once its `Pending` resolved, cancels every fifth and journals its end
//! (`Member::journal_end`, `END <queue> <id>`), then prints `DONE`, and dispatches nothing.

mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use support::*;
use tickwheel_testkit::child::TestChild;

const CHILD: &str = "TICKWHEEL_FLEET_JOURNALING_CHILD";
const QUEUES: usize = 4;
const PER_QUEUE: u64 = 50;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journaling_child() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    let (opts, name) = child_spec(&spec);
    let m = join_journaling(&opts, &name, true).await;
    let qs = queues(QUEUES);
    wait_until(
        Duration::from_secs(30),
        "the child owns every queue",
        || m.owned().len() == qs.len(),
    )
    .await;
    let mut pending = Vec::new();
    for (n, q) in qs.iter().enumerate() {
        let token = m
            .owned()
            .iter()
            .find(|(o, _)| o == q)
            .map(|(_, t)| *t)
            .unwrap_or(0);
        for i in 0..PER_QUEUE {
            let id = n as u64 * 1000 + i;
            let at = Instant::now() + Duration::from_millis(500 + 10 * i);
            let value = format!("{q}:{id}");
            m.scheduler()
                .schedule(q.clone(), id, at, value.clone())
                .expect("schedule");
            let w = m.journal_put(q, &id, at, &value).expect("journal");
            pending.push((q.clone(), id, token, w));
        }
    }
    for (q, id, token, w) in pending {
        match w.await {
            Ok(_) => println!("ACK {q} {id} {token}"),
            Err(e) => println!("ERR {q} {id} {e}"),
        }
    }
    // Every fifth timer cancelled, and its end journaled: it must not come back.
    for (n, q) in qs.iter().enumerate() {
        for i in (0..PER_QUEUE).step_by(5) {
            let id = n as u64 * 1000 + i;
            let _ = m.scheduler().cancel(&id);
            match m.journal_end(q, &id).expect("journal").await {
                Ok(_) => println!("END {q} {id}"),
                Err(e) => println!("ERR {q} {id} {e}"),
            }
        }
    }
    println!("DONE");
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Every timer the child saw acknowledged: (queue, id, its token).
fn acked(child: &TestChild) -> Vec<(String, u64, u64)> {
    child
        .lines()
        .iter()
        .filter_map(|l| {
            let mut p = l.strip_prefix("ACK ")?.split(' ');
            Some((
                p.next()?.to_owned(),
                p.next()?.parse().ok()?,
                p.next()?.parse().ok()?,
            ))
        })
        .collect()
}

async fn survivor_dispatches_every_acknowledged_timer(journal: bool) {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let Some((etcd, redis, opts)) = fleet() else {
        return;
    };
    let qs = queues(QUEUES);
    register(&opts, &qs).await;
    let mut child = TestChild::spawn(
        "journaling_child",
        CHILD,
        &format!("{} {} w", etcd.url(), redis.url()),
    );
    let started = Instant::now();
    while !child.has("DONE") {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the child did not finish: {:?}",
            child.lines()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child.kill9();
    let acked = acked(&child);
    assert_eq!(
        acked.len(),
        QUEUES * PER_QUEUE as usize,
        "{:?}",
        child.lines()
    );
    let s = join_journaling(&opts, "s", journal).await;
    wait_until(Duration::from_secs(30), "s owns every queue", || {
        s.owned().len() == qs.len()
    })
    .await;
    let ended: BTreeSet<(String, u64)> = child
        .lines()
        .iter()
        .filter_map(|l| {
            let mut p = l.strip_prefix("END ")?.split(' ');
            Some((p.next()?.to_owned(), p.next()?.parse().ok()?))
        })
        .collect();
    assert_eq!(ended.len(), QUEUES * PER_QUEUE as usize / 5);
    let want: BTreeSet<(String, u64)> = acked
        .iter()
        .map(|(q, id, _)| (q.clone(), *id))
        .filter(|k| !ended.contains(k))
        .collect();
    let mut got = BTreeSet::new();
    let until = Instant::now() + Duration::from_secs(10);
    while got.len() < want.len() && Instant::now() < until {
        for d in s.pop_due(Instant::now(), 1000) {
            let dead = acked
                .iter()
                .find(|(q, _, _)| q == d.due.queue())
                .map(|(_, _, t)| *t)
                .unwrap_or(0);
            assert!(
                d.token > dead,
                "dispatched under {} after the dead owner's {dead}",
                d.token
            );
            assert_eq!(d.due.value(), &format!("{}:{}", d.due.queue(), d.due.id()));
            got.insert((d.due.queue().clone(), *d.due.id()));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let missing: Vec<_> = want.difference(&got).take(5).collect();
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged timers never dispatched, e.g. {missing:?}",
        want.len() - got.len().min(want.len()),
        want.len()
    );
    // Nothing ended came back, nothing else appeared (one more poll for late ones).
    for d in s.pop_due(Instant::now(), 1000) {
        got.insert((d.due.queue().clone(), *d.due.id()));
    }
    assert_eq!(got, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_journaling_member_loses_no_timer() {
    survivor_dispatches_every_acknowledged_timer(true).await;
}
