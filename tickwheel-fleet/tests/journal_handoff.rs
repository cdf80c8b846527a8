//! The journal across a handoff: a queue's records are the queue's, not the writer's. Member
//! `a` journals its timers; `b` joins and takes some queues by handoff (it writes nothing
//! for them) and journals the ends of a few; both go (dropped: leases revoked, nothing handed
//! over); `c`, whose recovery hook finds nothing, adopts every queue and dispatches exactly
//! the timers not ended.

mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use support::*;

const PER_QUEUE: u64 = 30;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_handed_over_queue_keeps_its_journal() {
    let Some((_etcd, _redis, opts, qs, a)) = journaled_a(6).await else {
        return;
    };
    let at = |_| Instant::now() + Duration::from_millis(200);
    let pending = schedule_journaled(&a, &qs, PER_QUEUE, at);
    let all: BTreeSet<_> = pending.iter().map(|(q, id, _)| (q.clone(), *id)).collect();
    durable(pending).await;
    let b = join_journaling(&opts, "b", true).await;
    wait_until(
        Duration::from_secs(30),
        "b took some queues by handoff",
        || !b.owned().is_empty() && exactly_one(&[&a, &b], &qs),
    )
    .await;
    // b ends every third timer of the queues it got: under its own token, over a's records.
    let mut ended = BTreeSet::new();
    for (q, _) in b.owned() {
        let n: u64 = q.trim_start_matches('q').parse().expect("queue number");
        for i in (0..PER_QUEUE).step_by(3) {
            let id = n * 1000 + i;
            let _ = b.scheduler().cancel(&id);
            b.journal_end(&q, &id)
                .expect("journal")
                .await
                .expect("end journaled");
            ended.insert((q.clone(), id));
        }
    }
    // a may not end b's timers any more: its token is stale in Redis.
    if let Some((q, _)) = b.owned().first() {
        assert!(matches!(
            a.journal_end(q, &0),
            Err(tickwheel_fleet::Error::NotOwned)
        ));
    }
    let tokens_before: Vec<u64> = a
        .owned()
        .iter()
        .chain(b.owned().iter())
        .map(|(_, t)| *t)
        .collect();
    drop(a);
    drop(b);
    let c = join_journaling(&opts, "c", true).await;
    owns(&c, qs.len()).await;
    let highest_before = tokens_before.iter().copied().max().unwrap_or(0);
    assert!(c.owned().iter().all(|(_, t)| *t > highest_before));
    let want: BTreeSet<_> = all.difference(&ended).cloned().collect();
    let mut got = BTreeSet::new();
    let enough = |got: &BTreeSet<_>| got.len() >= want.len();
    pop_due_into(&c, Duration::from_secs(10), &mut got, enough, |got, d| {
        assert_eq!(d.due.value(), &format!("{}:{}", d.due.queue(), d.due.id()));
        got.insert((d.due.queue().clone(), *d.due.id()));
    })
    .await;
    for d in c.pop_due(Instant::now(), 1000) {
        got.insert((d.due.queue().clone(), *d.due.id()));
    }
    assert!(!ended.is_empty());
    assert_eq!(got, want);
}
