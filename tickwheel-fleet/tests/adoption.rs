//! Adoption timing that is the fleet's own: several queues adopted at once (one that fails
//! does not hold the others back, and gives its owner key and what it imported back at once),
//! and an owner key's deletion seen when etcd makes it, not at the next placement period.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tickwheel::sync::{FrozenEntry, Scheduler};
use tickwheel_fleet::{FleetOptions, Member, RecoveryError};
use tickwheel_redis::journal::JournalOptions;
use tokio::sync::Notify;

use support::{Sched, fleet, register, wait_until};

/// Timers journaled per queue by the first owner.
const PER_QUEUE: u64 = 50;

/// Whether etcd holds an owner key for `queue` (default prefix).
async fn owner_key_exists(opts: &FleetOptions, queue: &str) -> bool {
    let hex: String = queue.bytes().map(|b| format!("{b:02x}")).collect();
    let mut c =
        match tickwheel_fleet::etcd_client::Client::connect(&opts.etcd_endpoints, None).await {
            Ok(c) => c,
            Err(e) => panic!("etcd: {e}"),
        };
    match c.get(format!("{}o/{hex}", opts.prefix), None).await {
        Ok(r) => !r.kvs().is_empty(),
        Err(e) => panic!("etcd get: {e}"),
    }
}

/// The failing queue sorts first, so its adoption starts before the others'. Its recovery
/// hook waits for the test, then fails: meanwhile the other queues are adopted, and its
/// journal is already imported. Once it failed, its owner key is deleted and its timers are
/// gone from the scheduler without waiting for another placement round (the period is a
/// minute here; a round runs at a grace's end only).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_adoption_among_several_gives_its_queue_back_and_the_others_complete() {
    let Some((_etcd, _redis, mut opts)) = fleet() else {
        return;
    };
    opts.journal = Some(JournalOptions::default());
    let qs: Vec<String> = ["a-bad", "q1", "q2", "q3"].map(String::from).to_vec();
    register(&opts, &qs).await;

    // A first owner journals the timers, then goes (its lease revoked: its keys go at once).
    let first = support::join_journaling(&opts, "first", true).await;
    wait_until(Duration::from_secs(20), "the first member owns all", || {
        first.owned().len() == qs.len()
    })
    .await;
    let at = Instant::now() + Duration::from_secs(3600);
    for (n, q) in (0u64..).zip(&qs) {
        // Ids are the scheduler's, across queues: each queue its own.
        for i in n * 1000..n * 1000 + PER_QUEUE {
            let put = first.journal_put(q, &i, at, &format!("{q}:{i}"));
            match put {
                Ok(p) => p.await.expect("journaled"),
                Err(e) => panic!("journal_put: {e}"),
            };
        }
    }
    drop(first);
    for q in &qs {
        let until = Instant::now() + Duration::from_secs(20);
        while owner_key_exists(&opts, q).await {
            assert!(
                Instant::now() < until,
                "the first member's key of {q} stayed"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    opts.poll_interval = Duration::from_secs(60);
    let gate = Arc::new(Notify::new());
    let entered = Arc::new(Notify::new());
    let (g, e) = (Arc::clone(&gate), Arc::clone(&entered));
    let sched: Arc<Sched> = Arc::new(Scheduler::new());
    let hook = move |q: String| {
        let (g, e) = (Arc::clone(&g), Arc::clone(&e));
        async move {
            if q == "a-bad" {
                e.notify_one();
                g.notified().await;
                return Err::<Vec<FrozenEntry<u64, String>>, RecoveryError>(
                    "the store of a-bad is down".into(),
                );
            }
            Ok(Vec::new())
        }
    };
    let s = match Member::join(opts.clone(), "survivor", sched, hook).await {
        Ok(m) => m,
        Err(e) => panic!("join: {e}"),
    };
    tokio::time::timeout(Duration::from_secs(20), entered.notified())
        .await
        .expect("the adoption of a-bad reached its hook");
    wait_until(
        Duration::from_secs(20),
        "the other queues adopted while a-bad's hook waits",
        || s.owned().len() == 3,
    )
    .await;
    assert!(s.owned().iter().all(|(q, _)| q != "a-bad"));
    for q in &qs[1..] {
        assert_eq!(s.scheduler().queue_len(q), PER_QUEUE as usize, "{q}");
    }
    assert_eq!(s.scheduler().queue_len("a-bad"), PER_QUEUE as usize);
    assert!(owner_key_exists(&opts, "a-bad").await);

    gate.notify_one();
    let until = Instant::now() + Duration::from_secs(10);
    while owner_key_exists(&opts, "a-bad").await || s.scheduler().queue_len("a-bad") > 0 {
        assert!(
            Instant::now() < until,
            "a-bad's key or timers stayed after its adoption failed (key: {}, timers: {})",
            owner_key_exists(&opts, "a-bad").await,
            s.scheduler().queue_len("a-bad")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(s.owned().len(), 3);
}

/// A member whose placement period is a minute adopts a dead member's queues about a grace
/// after etcd deleted their keys: the watch on the owner keys wakes its loop. The queues are
/// ones the rendezvous gives to the first member while both live, so the second takes them
/// only once the first is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_owner_key_wakes_the_placement_loop() {
    let Some((_etcd, _redis, opts)) = fleet() else {
        return;
    };
    let qs: Vec<String> = (0..200)
        .map(|i| format!("w{i}"))
        .filter(|q| {
            tickwheel_fleet::assign::desired(["first", "second"], q.as_bytes()) == Some("first")
        })
        .take(3)
        .collect();
    assert_eq!(qs.len(), 3);
    register(&opts, &qs).await;
    let first = support::join_journaling(&opts, "first", false).await;
    wait_until(Duration::from_secs(20), "the first member owns all", || {
        first.owned().len() == qs.len()
    })
    .await;
    let mut slow = opts.clone();
    slow.poll_interval = Duration::from_secs(60);
    let second = support::join_journaling(&slow, "second", false).await;
    // Its first round, at join, finds every key held by the first member.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(second.owned().is_empty());
    drop(first);
    wait_until(
        Duration::from_secs(15),
        "the second member adopts the queues well before its next period",
        || second.owned().len() == qs.len(),
    )
    .await;
}
