//! Redis stalled, paused or killed while queues move.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common::owner_of;
use crate::common::*;
use crate::support::*;
use tickwheel_testkit::child::send_signal;

// ---------------------------------------------------------------------------------------
// The target's clock anchor read through a stalled Redis.

/// `a` holds four queues of timers due 8 s later (held and orphaned ones). While `b` joins,
/// redis-server is stopped for 150 ms out of every 152 (SIGSTOP/SIGCONT), so whatever `b`
/// reads from Redis at its join (its reference-clock anchor among it) takes up to 150 ms,
/// until `b` acquired its first queue by handoff. No timer may be handed out before its
/// deadline, by `a` or by `b`, and every held timer and every orphan of a moved queue comes
/// out.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_target_joined_through_a_stalled_redis_fires_nothing_early() {
    let Some((_etcd, redis, opts, qs, a)) = journaled_a(4).await else {
        return;
    };
    let (fates, intended, initial) = seed_owned(&a, &qs, 30, Duration::from_secs(8)).await;
    let pid = redis.pid().expect("redis runs");
    let stop = Arc::new(AtomicBool::new(false));
    let pauser = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                send_signal(pid, "STOP").expect("SIGSTOP");
                std::thread::sleep(Duration::from_millis(150));
                send_signal(pid, "CONT").expect("SIGCONT");
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let joining = Instant::now();
    let b = join_journaling(&opts, "b", true).await;
    let joined = joining.elapsed();
    first_acquisition(&b).await;
    stop.store(true, Ordering::SeqCst);
    pauser.join().expect("pauser");
    eprintln!(
        "b joined in {joined:.1?}, acquired its first queue {:.1?} after the join began",
        joining.elapsed()
    );
    wait_until(Duration::from_secs(30), "b took queues", || {
        !b.owned().is_empty() && exactly_one(&[&a, &b], &qs)
    })
    .await;
    // The deadlines b imported, against those meant: none may be earlier.
    let mut offsets = Vec::new();
    for (q, _) in b.owned() {
        for m in b.scheduler().queue_members(&q) {
            let want = intended[&m.id];
            let ms = if m.deadline >= want {
                (m.deadline - want).as_secs_f64() * 1e3
            } else {
                -(want - m.deadline).as_secs_f64() * 1e3
            };
            offsets.push((q.clone(), m.id, ms));
        }
    }
    let min = offsets.iter().map(|o| o.2).fold(f64::INFINITY, f64::min);
    let max = offsets
        .iter()
        .map(|o| o.2)
        .fold(f64::NEG_INFINITY, f64::max);
    eprintln!(
        "{} deadlines at b, {min:.3} to {max:.3} ms off those meant",
        offsets.len()
    );
    let early: Vec<_> = offsets
        .iter()
        .filter(|o| o.2 < -(SLACK.as_secs_f64() * 1e3))
        .collect();
    assert!(
        early.is_empty(),
        "deadlines imported earlier than meant (queue, id, ms): {:?}",
        &early[..early.len().min(5)]
    );
    let mut ledger = Ledger::default();
    let last = intended.values().max().copied().expect("timers");
    let (must, may) = expected(&fates, &initial, &[&a, &b]);
    ledger
        .collect_all(
            &[&a, &b],
            &intended,
            &must,
            last.saturating_duration_since(Instant::now()) + Duration::from_secs(10),
        )
        .await;
    check(&ledger, &fates, &must, &may);
}

// ---------------------------------------------------------------------------------------
// Redis faults in the middle of a move.

#[derive(Debug, Clone, Copy)]
enum RedisFault {
    /// SIGKILL, 1 s down, restarted from its append-only file.
    Restart,
    /// SIGSTOP for 3 s, then SIGCONT.
    Pause,
    /// SIGSTOP for 8 s (past the handoff timeout of 5 s), then SIGCONT.
    LongPause,
}

/// `a` holds 16 queues of held, orphaned and ended timers due 4 s later; `b` joins, and as
/// soon as `b` acquired its first queue (the others mid-handoff) Redis suffers `fault`. Once
/// every queue has one owner again: nothing ended handed out, every held timer handed out and
/// every orphan of a queue whose owner's token changed, none early, none twice under one
/// token.
async fn redis_fault_during_a_move(fault: RedisFault) {
    let Some((_etcd, mut redis, opts, qs, a)) = journaled_a(16).await else {
        return;
    };
    let (fates, intended, initial) = seed_owned(&a, &qs, 30, Duration::from_secs(4)).await;
    let mut a_events = a.events();
    let b = join_journaling(&opts, "b", true).await;
    let mut b_events = b.events();
    first_acquisition(&b).await;
    let at_fault = (a.owned(), b.owned());
    match fault {
        RedisFault::Restart => {
            redis.kill9().expect("kill redis");
            tokio::time::sleep(Duration::from_secs(1)).await;
            redis.restart().expect("restart redis");
        }
        RedisFault::Pause | RedisFault::LongPause => {
            let pid = redis.pid().expect("redis runs");
            send_signal(pid, "STOP").expect("SIGSTOP");
            let secs = if matches!(fault, RedisFault::Pause) {
                3
            } else {
                8
            };
            tokio::time::sleep(Duration::from_secs(secs)).await;
            send_signal(pid, "CONT").expect("SIGCONT");
        }
    }
    settle(&[&a, &b], &qs).await;
    let (must, may) = expected(&fates, &initial, &[&a, &b]);
    let events = events_of_both(&mut a_events, &mut b_events);
    eprintln!(
        "{fault:?}: at the fault a owned {:?}, b {:?}; events since b joined: {events:?}; \
         settled: b owns {:?}",
        at_fault.0,
        at_fault.1,
        b.owned()
    );
    let mut ledger = Ledger::default();
    ledger
        .collect_all(&[&a, &b], &intended, &must, Duration::from_secs(30))
        .await;
    // The fleet may still have been settling: take the ownership again for the orphans.
    let (must_now, _) = expected(&fates, &initial, &[&a, &b]);
    let must: BTreeSet<_> = must.union(&must_now).cloned().collect();
    ledger
        .collect_all(&[&a, &b], &intended, &must, Duration::from_secs(10))
        .await;
    check(&ledger, &fates, &must, &may);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_killed_and_restarted_during_a_move_loses_nothing() {
    redis_fault_during_a_move(RedisFault::Restart).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_paused_during_a_move_loses_nothing() {
    redis_fault_during_a_move(RedisFault::Pause).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_paused_past_the_handoff_timeout_during_a_move_loses_nothing() {
    redis_fault_during_a_move(RedisFault::LongPause).await;
}

/// As [`redis_fault_during_a_move`] with long journals: each of 8 queues also holds 8 000
/// journal-only timers due in an hour, so that each target's load of the journal takes a
/// while; redis-server is SIGKILLed 100 ms after `b`'s first acquisition (a later move is
/// then offering, claiming or loading) and restarted a second later. Once settled: the
/// seeded timers as there, and every journal-only timer of a queue whose token changed is in
/// its owner's scheduler (or was handed out).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_killed_while_targets_load_long_journals_loses_nothing() {
    let Some((_etcd, mut redis, opts, qs, a)) = journaled_a(8).await else {
        return;
    };
    let (fates, intended) = seed(&a, &qs, 30, Duration::from_secs(4)).await;
    let extra = journal_only(&a, &qs, 8_000).await;
    let initial: BTreeMap<String, u64> = a.owned().into_iter().collect();
    let mut a_events = a.events();
    let b = join_journaling(&opts, "b", true).await;
    let mut b_events = b.events();
    first_acquisition(&b).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    redis.kill9().expect("kill redis");
    tokio::time::sleep(Duration::from_secs(1)).await;
    redis.restart().expect("restart redis");
    settle(&[&a, &b], &qs).await;
    let events = events_of_both(&mut a_events, &mut b_events);
    eprintln!("events since b joined: {events:?}; b owns {:?}", b.owned());
    let (must, may) = expected(&fates, &initial, &[&a, &b]);
    let mut ledger = Ledger::default();
    ledger
        .collect_all(&[&a, &b], &intended, &must, Duration::from_secs(30))
        .await;
    let mut may = may;
    for (q, ids) in &extra {
        may.extend(ids.iter().map(|id| (q.clone(), *id)));
    }
    check(&ledger, &fates, &must, &may);
    for (q, ids) in &extra {
        let (owner, token) = owner_of(&[&a, &b], q).expect("an owner");
        if Some(token) == initial.get(q).copied() {
            continue;
        }
        let held = ids_held(owner, q);
        let missing: Vec<_> = ids.iter().filter(|id| !held.contains(id)).collect();
        assert!(
            missing.is_empty(),
            "{q} (now {}'s under {token}): {} of {} journal-only timers not held, e.g. {:?}",
            owner.name(),
            missing.len(),
            ids.len(),
            &missing[..missing.len().min(5)]
        );
    }
}
