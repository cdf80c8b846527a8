//! One process: ids and values of odd sizes, queues this member does not own, cancels racing
//! hand-outs, a Redis restart under a stream of writes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tickwheel::sync::Cancel;
use tickwheel_fleet::Error;
use tickwheel_redis::journal::JournalError;
use tickwheel_testkit::etcd::EtcdServer;
use tickwheel_testkit::redis::RedisServer;

use super::common::*;
use super::support::*;

/// A fleet of one queue and member `a` (string ids and values, the journal on) owning it:
/// the servers, the member and the queue's name. `None` where the servers may be missing.
async fn a_owning_one() -> Option<(
    EtcdServer,
    RedisServer,
    tickwheel_fleet::Member<String, String, String>,
    String,
)> {
    let (etcd, redis, opts, mut qs) = fleet_with(1).await?;
    let m = join_strings(&opts, "a").await;
    wait_until(Duration::from_secs(30), "a owns q0", || {
        m.owned().len() == 1
    })
    .await;
    Some((etcd, redis, m, qs.remove(0)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn empty_and_kilobyte_ids_and_values() {
    let Some((_etcd, redis, m, q)) = a_owning_one().await else {
        return;
    };
    let q = &q;
    let token = m.owned()[0].1;
    let at = Instant::now() + HOUR;
    let big_value = "v".repeat(1 << 20);
    // MessagePack adds 3 bytes to a string of 256 bytes or more: 1021 chars encode to 1024.
    let ok = [
        (String::new(), String::new()),
        ("x".repeat(1021), "y".to_owned()),
        ("\0é\u{1F600}".to_owned(), big_value.clone()),
    ];
    for (id, v) in &ok {
        match m.schedule(q.clone(), id.clone(), at, v.clone()) {
            Ok(Ok(p)) => p
                .await
                .unwrap_or_else(|e| panic!("{} bytes: {e}", id.len())),
            other => panic!("{} bytes: {other:?}", id.len()),
        };
    }
    let stored: BTreeMap<String, String> = records(&redis, q, token)
        .await
        .iter()
        .map(|r| {
            let e = r.entry::<String, String>().expect("decodes");
            (e.id, e.value)
        })
        .collect();
    let want: BTreeMap<String, String> = ok.iter().cloned().collect();
    assert!(
        stored == want,
        "journal ids {:?}",
        stored.keys().map(String::len).collect::<Vec<_>>()
    );
    // The empty id is an id like any other: reschedule and cancel it through the front.
    match m.reschedule(&String::new(), at + HOUR) {
        Ok(Ok(p)) => p.await.expect("moved"),
        other => panic!("reschedule \"\": {other:?}"),
    };
    let (c, p) = m.cancel(&String::new()).expect("front");
    assert!(
        matches!(c, Cancel::Cancelled(ref v) if v.is_empty()),
        "{c:?}"
    );
    p.expect("end").await.expect("ended");
    let after = records(&redis, q, token).await;
    assert!(
        after
            .iter()
            .all(|r| !r.entry::<String, String>().expect("decodes").id.is_empty()),
        "the empty id's end was not applied"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_id_over_the_journals_limit_is_refused_with_nothing_scheduled() {
    let Some((_etcd, _redis, m, q)) = a_owning_one().await else {
        return;
    };
    let q = &q;
    let at = Instant::now() + HOUR;
    // MessagePack adds 3 bytes to a string of 256 bytes or more: 1022 chars encode to 1025 bytes, over MAX_ID_BYTES: never written, so the timer must
    // not be left in the scheduler as if accepted (nothing scheduled on a refusal).
    let long = "x".repeat(1022);
    let r = m.schedule(q.clone(), long.clone(), at, "z".to_owned());
    let outcome = match r {
        Err(e) => format!("outer Err: {e}"),
        Ok(Err(e)) => format!("scheduler refused: {e:?}"),
        Ok(Ok(p)) => format!("pending: {:?}", p.await),
    };
    let left = m.scheduler().lookup(&long);
    assert!(
        left.is_none() || outcome.contains("Ok(Written"),
        "a 1022-char id: {outcome}; yet the scheduler holds it ({:?}), to fire here and be \
         lost at the next owner",
        left.map(|i| i.state)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_front_refuses_queues_it_does_not_own_and_a_journal_that_is_off() {
    let Some((_etcd, _redis, opts, qs)) = fleet_with(4).await else {
        return;
    };
    let a = join_journaling(&opts, "a", true).await;
    let b = join_journaling(&opts, "b", true).await;
    shares(&a, &b, &qs).await;
    let theirs = queue_of(&b, &qs);
    let at = Instant::now() + HOUR;
    for q in [theirs.clone(), "never-registered".to_owned()] {
        let r = a.schedule(q.clone(), 7, at, value(&q, 7));
        assert!(matches!(r, Err(Error::NotOwned)), "schedule on {q}: {r:?}");
        assert!(
            a.scheduler().lookup(&7).is_none(),
            "{q}: scheduled after a refusal"
        );
        let r = a.drain_queue(&q);
        assert!(matches!(r, Err(Error::NotOwned)), "drain of {q}: {r:?}");
    }
    // Absent ids: answered, nothing written.
    assert!(matches!(a.reschedule(&9999, at), Ok(Err(_))));
    assert!(matches!(a.cancel(&9999), Ok((Cancel::NotFound, None))));
    // A hand-out is not moved or cancelled by the front; its own calls end it.
    let mine = queue_of(&a, &qs);
    sched(&a, mine, 1, Instant::now()).await.expect("durable");
    let d = due_within(&a, 1, Duration::from_secs(10))
        .await
        .pop()
        .expect("due");
    assert!(d.is_journaled());
    assert!(
        matches!(a.reschedule(&1, at), Ok(Err(_))),
        "reschedule in flight"
    );
    assert!(
        matches!(a.cancel(&1), Ok((Cancel::InFlight, None))),
        "cancel in flight"
    );
    d.done().1.expect("journaled").await.expect("ended");
    // A member without the journal: the front refuses, hand-outs are not journaled.
    let (_etcd2, _redis2, opts2, qs2) = fleet_with(1).await.expect("servers");
    let off = join_journaling(&opts2, "off", false).await;
    owns(&off, 1).await;
    let r = off.schedule(qs2[0].clone(), 5, Instant::now(), value(&qs2[0], 5));
    assert!(matches!(r, Err(Error::JournalOff)), "{r:?}");
    assert!(
        off.scheduler().lookup(&5).is_none(),
        "scheduled after JournalOff"
    );
    off.scheduler()
        .schedule(qs2[0].clone(), 5, Instant::now(), "v".into())
        .expect("direct");
    let d = due_within(&off, 1, Duration::from_secs(10))
        .await
        .pop()
        .expect("due");
    assert!(!d.is_journaled());
    assert!(d.done().1.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancels_racing_hand_outs_end_each_timer_once_and_the_journal_agrees() {
    const N: u64 = 3000;
    let Some((_etcd, redis, a, q, token)) = journaled_one().await else {
        return;
    };
    let q = &q;
    let start = Instant::now();
    front_schedule_durably(&a, q, 0..N, start).await;
    let barrier = Barrier::new(2);
    let stop = AtomicBool::new(false);
    let (cancelled, ended, retried, pending) = tokio::task::block_in_place(|| {
        std::thread::scope(|sc| {
            let popper = sc.spawn(|| {
                barrier.wait();
                let (mut done, mut retried, mut ps) = (Vec::new(), Vec::new(), Vec::new());
                loop {
                    let last = stop.load(Ordering::Acquire);
                    for d in a.pop_due(Instant::now(), 64) {
                        let id = *d.due.id();
                        if id % 3 == 0 {
                            let (r, p) = d.retry_at(start + HOUR);
                            r.expect("retried");
                            retried.push(id);
                            ps.push(p.expect("journaled"));
                        } else {
                            ps.push(d.done().1.expect("journaled"));
                            done.push(id);
                        }
                    }
                    if last {
                        return (done, retried, ps);
                    }
                }
            });
            let canceller = sc.spawn(|| {
                barrier.wait();
                let (mut out, mut ps) = (Vec::new(), Vec::new());
                // From the top down, while the popper takes them from the bottom up.
                for id in (0..N).rev() {
                    if let (Cancel::Cancelled(_), p) = a.cancel(&id).expect("front") {
                        out.push(id);
                        ps.push(p.expect("a cancel's end"));
                    }
                }
                (out, ps)
            });
            let (cancelled, mut ps) = canceller.join().expect("canceller");
            // Let the rest come due, then stop the popper.
            std::thread::sleep(Duration::from_millis(400));
            stop.store(true, Ordering::Release);
            let (done, retried, more) = popper.join().expect("popper");
            ps.extend(more);
            (cancelled, done, retried, ps)
        })
    });
    for p in pending {
        p.await.expect("durable");
    }
    // Exactly once: each id cancelled, done, or retried (and then maybe cancelled).
    let c: BTreeSet<u64> = cancelled.iter().copied().collect();
    let d: BTreeSet<u64> = ended.iter().copied().collect();
    assert_eq!(c.len(), cancelled.len(), "an id cancelled twice");
    assert!(
        c.is_disjoint(&d),
        "cancelled and done: {:?}",
        c.intersection(&d).take(5).collect::<Vec<_>>()
    );
    let live: BTreeSet<u64> = ids_held(&a, q);
    for id in 0..N {
        let n = [c.contains(&id), d.contains(&id), live.contains(&id)]
            .iter()
            .filter(|b| **b)
            .count();
        assert_eq!(
            n,
            1,
            "id {id}: cancelled {} done {} live {}",
            c.contains(&id),
            d.contains(&id),
            live.contains(&id)
        );
    }
    assert!(live.iter().all(|id| retried.contains(id)));
    let journal: BTreeSet<u64> = records(&redis, q, token)
        .await
        .iter()
        .map(|r| r.entry::<u64, String>().expect("decodes").id)
        .collect();
    assert_eq!(journal, live, "the journal against the scheduler");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redis_restart_mid_stream_loses_no_acknowledged_write_and_says_so() {
    let Some((_etcd, mut redis, a, q, token)) = journaled_one().await else {
        return;
    };
    let q = &q;
    let at = Instant::now() + HOUR;
    let mut acked = BTreeSet::new();
    let mut errors = Vec::new();
    let mut outstanding = Vec::new();
    for id in 0..600u64 {
        if id == 300 {
            tokio::task::block_in_place(|| redis.restart()).expect("restart");
        }
        match a.schedule(q.clone(), id, at, value(q, id)) {
            Ok(Ok(p)) => outstanding.push((id, p)),
            other => panic!("{id}: {other:?}"),
        }
        // Writes 250..300 are still outstanding when Redis is killed.
        if id % 50 == 49 && id != 299 {
            for (id, p) in outstanding.drain(..) {
                match p.await {
                    Ok(_) => {
                        acked.insert(id);
                    }
                    Err(e) => errors.push((id, e)),
                }
            }
        }
    }
    eprintln!(
        "{} acknowledged, {} refused across the restart, e.g. {:?}",
        acked.len(),
        errors.len(),
        errors.first()
    );
    let unsaid: Vec<_> = errors
        .iter()
        .filter(|(_, e)| !matches!(e, JournalError::Redis(_)) || e.is_fenced())
        .collect();
    assert!(
        unsaid.is_empty(),
        "errors that do not name Redis: {unsaid:?}"
    );
    assert!(
        acked.len() >= 300,
        "{} acknowledged; errors {:?}",
        acked.len(),
        &errors[..errors.len().min(3)]
    );
    // The member goes on: a write after the restart is acknowledged within 10 s.
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let p = a.reschedule(&0, at + MIN).expect("front").expect("pending");
        match p.await {
            Ok(_) => break,
            Err(e) if Instant::now() < until => {
                eprintln!("after restart: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("no write acknowledged 10 s after the restart: {e}"),
        }
    }
    let journal: BTreeSet<u64> = records(&redis, q, token)
        .await
        .iter()
        .map(|r| r.entry::<u64, String>().expect("decodes").id)
        .collect();
    let applied = errors.iter().filter(|(id, _)| journal.contains(id)).count();
    eprintln!(
        "{applied} of the {} refused writes were applied all the same",
        errors.len()
    );
    let lost: Vec<_> = acked.difference(&journal).take(10).collect();
    assert!(
        lost.is_empty(),
        "acknowledged, not in the journal after the restart: {lost:?}"
    );
}
