//! The journal across a handoff: a queue's records are the queue's, not the writer's.
//!
//! `a_handed_over_queue_keeps_its_journal`: member `a` journals its timers; `b` joins and
//! takes some queues by handoff (it writes nothing for them) and journals the ends of a few;
//! both go (dropped: leases revoked, nothing handed over); `c`, whose recovery hook finds
//! nothing, adopts every queue and dispatches exactly the timers not ended.
//!
//! `a_handoff_target_loads_the_journal`: `a` journals timers it then no longer holds without
//! ending them (a delivery that failed while the queue was frozen for the handoff could not
//! be scheduled again); `b` joins and takes queues by handoff: it dispatches those too, beside
//! the offer's, and none whose end `a` had journaled.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use support::*;
use tickwheel_fleet::{Acquisition, FleetEvent};

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

/// What `a` did with a timer of a queue before the handoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Scheduled and journaled: in the offer and in the journal.
    Held,
    /// Journaled, then taken out of the scheduler without an end: only in the journal.
    Orphaned,
    /// Journaled, taken out, and its end journaled: in neither.
    Ended,
}

fn fate(i: u64) -> Fate {
    match i % 3 {
        0 => Fate::Held,
        1 => Fate::Orphaned,
        _ => Fate::Ended,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_handoff_target_loads_the_journal() {
    let Some((_etcd, _redis, opts, qs, a)) = journaled_a(8).await else {
        return;
    };
    let mut fates: BTreeMap<(String, u64), Fate> = BTreeMap::new();
    for (n, q) in qs.iter().enumerate() {
        for i in 0..PER_QUEUE {
            let id = n as u64 * 1000 + i;
            let at = Instant::now() + Duration::from_millis(300);
            let value = format!("{q}:{id}");
            a.scheduler()
                .schedule(q.clone(), id, at, value.clone())
                .expect("schedule");
            a.journal_put(q, &id, at, &value)
                .expect("journal")
                .await
                .expect("put journaled");
            let f = fate(i);
            if f != Fate::Held {
                assert!(
                    matches!(
                        a.scheduler().cancel(&id),
                        tickwheel::sync::Cancel::Cancelled(_)
                    ),
                    "{id} was scheduled"
                );
            }
            if f == Fate::Ended {
                a.journal_end(q, &id)
                    .expect("journal")
                    .await
                    .expect("end journaled");
            }
            fates.insert((q.clone(), id), f);
        }
    }
    let mut released = a.events();
    let b = join_journaling(&opts, "b", true).await;
    let mut acquired = b.events();
    wait_until(
        Duration::from_secs(30),
        "b took some queues by handoff",
        || !b.owned().is_empty() && exactly_one(&[&a, &b], &qs),
    )
    .await;
    // The timers b should dispatch: those of the queues it holds (more may still arrive)
    // that a had not ended.
    let want_of = |mine: &BTreeSet<String>| -> BTreeSet<(String, u64)> {
        fates
            .iter()
            .filter(|((q, _), f)| mine.contains(q) && **f != Fate::Ended)
            .map(|(k, _)| k.clone())
            .collect()
    };
    let owned_by_b = || -> BTreeSet<String> { b.owned().into_iter().map(|(q, _)| q).collect() };
    let mut got = BTreeSet::new();
    let until = Instant::now() + Duration::from_secs(10);
    while got != want_of(&owned_by_b()) && Instant::now() < until {
        for d in b.pop_due(Instant::now(), 1000) {
            assert_eq!(d.due.value(), &format!("{}:{}", d.due.queue(), d.due.id()));
            got.insert((d.due.queue().clone(), *d.due.id()));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Anything more (an ended timer) would be due by now too.
    tokio::time::sleep(Duration::from_millis(100)).await;
    for d in b.pop_due(Instant::now(), 1000) {
        got.insert((d.due.queue().clone(), *d.due.id()));
    }
    let mine = owned_by_b();
    // Every queue b holds came from a by handoff (a saw b commit), not by an adoption, which
    // loads the journal anyway.
    let mut handed = BTreeSet::new();
    wait_until(Duration::from_secs(5), "a released b's queues", || {
        while let Ok(e) = released.try_recv() {
            if let FleetEvent::Released { queue, to } = e {
                assert_eq!(to, "b");
                handed.insert(queue);
            }
        }
        handed == mine
    })
    .await;
    let want = want_of(&mine);
    assert!(want.iter().any(|k| fates[k] == Fate::Orphaned));
    assert_eq!(got, want);
    // Each handover counted the journal's timers apart from the offer's.
    let orphans_per_queue = (0..PER_QUEUE)
        .filter(|i| fate(*i) == Fate::Orphaned)
        .count();
    while let Ok(e) = acquired.try_recv() {
        if let FleetEvent::Acquired { how, .. } = e {
            let held = (0..PER_QUEUE).filter(|i| fate(*i) == Fate::Held).count();
            assert_eq!(
                how,
                Acquisition::HandedOver {
                    imported: held,
                    journaled: orphans_per_queue,
                }
            );
        }
    }
}
