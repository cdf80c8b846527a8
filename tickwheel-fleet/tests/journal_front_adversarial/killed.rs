//! Children that use the front, then die by SIGKILL; a survivor must hold exactly their live
//! timers.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tickwheel::sync::IdState;
use tickwheel_redis::journal::Pending;

use super::common::*;
use super::support::*;

/// Reschedules later and earlier, drops hand-outs, drains with hand-outs in flight, reuses
/// drained and done ids.
pub(crate) async fn moves_child(m: &FleetMember, qs: &[String]) {
    let (q0, q1) = (&qs[0], &qs[1]);
    let now = Instant::now();
    // 0..10: due in 3 s, moved an hour later (must not fire at the old deadline).
    for id in 0..10 {
        ack(sched(m, q0, id, now + Duration::from_secs(3)), "schedule").await;
        resched(m, id, now + HOUR).await;
        println!("AT {q0} {id} {}", unix_ms(now + HOUR));
    }
    // 10..20: an hour, then two, then 20 minutes (earlier than both).
    for id in 10..20 {
        ack(sched(m, q0, id, now + HOUR), "schedule").await;
        resched(m, id, now + 2 * HOUR).await;
        resched(m, id, now + 20 * MIN).await;
        println!("AT {q0} {id} {}", unix_ms(now + 20 * MIN));
    }
    // 20..30: moved back and forth ten times; the last move wins.
    for id in 20..30 {
        ack(sched(m, q0, id, now + HOUR), "schedule").await;
        let mut at = now;
        for k in 0..10u64 {
            at = now + HOUR + Duration::from_secs(if k % 2 == 0 { 3000 } else { 600 + id });
            resched(m, id, at).await;
        }
        println!("AT {q0} {id} {}", unix_ms(at));
    }
    // 30..40: due now, handed out, the `Due` taken out and dropped: its record stays.
    for id in 30..40 {
        ack(sched(m, q0, id, now), "schedule").await;
    }
    for d in due_within(m, 10, Duration::from_secs(20)).await {
        let (q, id) = (d.due.queue().clone(), *d.due.id());
        drop(d.due.into_value());
        println!("DROP {q} {id}");
    }
    // q1: 1000..1010 an hour ahead, 1010..1020 due now and held in flight, then drained.
    for id in 1000..1010 {
        ack(sched(m, q1, id, now + HOUR), "schedule").await;
    }
    for id in 1010..1020 {
        ack(sched(m, q1, id, now), "schedule").await;
    }
    let mut out = due_within(m, 10, Duration::from_secs(20)).await;
    assert_eq!(out.len(), 10, "hand-outs of q1");
    let (d, p) = m.drain_queue(q1).expect("drain");
    assert_eq!(d.cancelled.len(), 10, "{d:?}");
    assert_eq!(d.in_flight.len(), 10, "{d:?}");
    ack(p.expect("ends of the drained"), "drain").await;
    for (id, _) in &d.cancelled {
        println!("END {q1} {id}");
    }
    out.sort_by_key(|d| *d.due.id());
    for mut d in out {
        let id = *d.due.id();
        if id < 1015 {
            let (_, p) = d.done();
            ack(p.expect("journaled"), "done").await;
            println!("END {q1} {id}");
        } else {
            let at = now + HOUR + Duration::from_secs(id);
            // A hand-out may change its value before the retry: the retry records the new one.
            *d.due.value_mut() = format!("retried:{id}");
            let (r, p) = d.retry_at(at);
            r.expect("retried");
            ack(p.expect("journaled"), "retry").await;
            println!("AT {q1} {id} {}", unix_ms(at));
        }
    }
    // Drained ids scheduled again in q1, a done id again in q0.
    for id in 1000..1005 {
        ack(sched(m, q1, id, now + 40 * MIN), "schedule again").await;
        println!("AT {q1} {id} {}", unix_ms(now + 40 * MIN));
    }
    ack(sched(m, q0, 1010, now + 50 * MIN), "schedule in q0").await;
    println!("AT {q0} 1010 {}", unix_ms(now + 50 * MIN));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn moved_drained_and_dropped_timers_come_back_exactly_after_a_kill() {
    let Some((s, lines, qs, _e, _r)) = after_death("moves", Duration::from_secs(120)).await else {
        return;
    };
    let live = ledger(&lines, "AT ");
    let dropped: BTreeSet<_> = ledger(&lines, "DROP ").into_keys().collect();
    assert_eq!(live.len(), 30 + 5 + 5 + 1, "{lines:?}");
    assert_eq!(dropped.len(), 10, "{lines:?}");
    holds_exactly(&s, &qs, &live, &dropped, &lines).await;
    for (q, id) in live.keys().chain(&dropped) {
        let want = if (1015..1020).contains(id) {
            format!("retried:{id}")
        } else {
            value(q, *id)
        };
        let got = s.scheduler().with_value(id, String::clone);
        assert_eq!(
            got.as_ref(),
            Some(&want),
            "{q}/{id}'s value at the survivor"
        );
    }
    // Over the next 5 s only the dropped hand-outs come due: nothing moved later fires at
    // its old deadline, nothing drained or done fires at all.
    let mut fired = BTreeSet::new();
    pop_due_into(
        &s,
        Duration::from_secs(5),
        &mut fired,
        |_| false,
        |f, d| {
            f.insert((d.due.queue().clone(), *d.due.id()));
            let _ = d.done();
        },
    )
    .await;
    assert_eq!(fired, dropped, "fired at the survivor within 5 s");
}

/// Four threads schedule, reschedule and cancel 200 overlapping ids over three queues at
/// far and near deadlines while a dispatcher ends or retries what comes due; then the
/// child prints its scheduler (`AT`) once every write resolved.
pub(crate) async fn hammer_child(m: &FleetMember, qs: &[String]) {
    const IDS: u64 = 200;
    const OPS: usize = 10_000;
    let start = Instant::now();
    let stop = AtomicBool::new(false);
    let pending: Mutex<Vec<Pending>> = Mutex::new(Vec::new());
    let push = |p: Pending| pending.lock().expect("lock").push(p);
    tokio::task::block_in_place(|| {
        std::thread::scope(|sc| {
            let dispatcher = sc.spawn(|| {
                while !stop.load(Ordering::Acquire) {
                    for d in m.pop_due(Instant::now(), 100) {
                        let id = *d.due.id();
                        if id % 2 == 0 {
                            push(d.done().1.expect("journaled"));
                        } else {
                            let (r, p) = d.retry_at(start + HOUR + Duration::from_secs(id));
                            r.expect("retried");
                            push(p.expect("journaled"));
                        }
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
            });
            let workers: Vec<_> = (0..4u64)
                .map(|t| {
                    let push = &push;
                    sc.spawn(move || {
                        let mut x = 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(t + 1);
                        for _ in 0..OPS {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            let id = x % IDS;
                            let at = if (x >> 20).is_multiple_of(4) {
                                Instant::now() + Duration::from_millis((x >> 24) % 200)
                            } else {
                                start + HOUR + Duration::from_secs((x >> 30) % 3600)
                            };
                            match (x >> 8) % 3 {
                                0 => {
                                    let q = &qs[((x >> 12) % qs.len() as u64) as usize];
                                    match m.schedule(q.clone(), id, at, value(q, id)) {
                                        Ok(Ok(p)) => push(p),
                                        Ok(Err(_)) => {}
                                        Err(e) => panic!("schedule {id}: {e}"),
                                    }
                                }
                                1 => match m.reschedule(&id, at) {
                                    Ok(Ok(p)) => push(p),
                                    Ok(Err(_)) => {}
                                    Err(e) => panic!("reschedule {id}: {e}"),
                                },
                                _ => match m.cancel(&id) {
                                    Ok((_, p)) => p.into_iter().for_each(push),
                                    Err(e) => panic!("cancel {id}: {e}"),
                                },
                            }
                        }
                    })
                })
                .collect();
            for w in workers {
                w.join().expect("worker");
            }
            stop.store(true, Ordering::Release);
            dispatcher.join().expect("dispatcher");
        })
    });
    let all = std::mem::take(&mut *pending.lock().expect("lock"));
    let n = all.len();
    let mut errs = 0;
    for p in all {
        if let Err(e) = p.await {
            errs += 1;
            println!("ERR {e}");
        }
    }
    println!("WRITES {n} ERRS {errs}");
    for q in qs {
        for t in m.scheduler().queue_members(q) {
            assert_eq!(
                t.state,
                IdState::Pending,
                "{q}/{} after the dispatcher",
                t.id
            );
            println!("AT {q} {} {}", t.id, unix_ms(t.deadline));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hammered_front_leaves_the_survivor_exactly_the_schedulers_timers() {
    let Some((s, lines, qs, _e, _r)) = after_death("hammer", Duration::from_secs(180)).await else {
        return;
    };
    let errs = lines
        .iter()
        .find(|l| l.starts_with("WRITES "))
        .expect("WRITES");
    assert!(errs.ends_with(" ERRS 0"), "{errs}");
    let live = ledger(&lines, "AT ");
    assert!(live.len() > 50, "only {} live: {errs}", live.len());
    holds_exactly(&s, &qs, &live, &BTreeSet::new(), &lines).await;
}

/// Hand-outs dropped (their records stay, as documented): ids 0..10 of q0 and 20..30 of q1;
/// then each id scheduled again in the other queue and acknowledged. Ids 10..20 are done in
/// q0 before they move to q1, for contrast. Both directions, so the order in which the
/// survivor loads the two queues does not decide the outcome.
pub(crate) async fn cross_queue_child(m: &FleetMember, qs: &[String]) {
    let (q0, q1) = (&qs[0], &qs[1]);
    let home = |id: u64| if id < 20 { q0 } else { q1 };
    let away = |id: u64| if id < 20 { q1 } else { q0 };
    let now = Instant::now();
    for id in 0..30 {
        ack(sched(m, home(id), id, now), "schedule").await;
    }
    let mut out = due_within(m, 30, Duration::from_secs(20)).await;
    assert_eq!(out.len(), 30);
    out.sort_by_key(|d| *d.due.id());
    for d in out {
        let id = *d.due.id();
        if (10..20).contains(&id) {
            ack(d.done().1.expect("journaled"), "done").await;
            println!("END {} {id}", home(id));
        } else {
            drop(d);
            println!("DROP {} {id}", home(id));
        }
    }
    for id in 0..30 {
        let at = now + HOUR + Duration::from_secs(id);
        ack(sched(m, away(id), id, at), "schedule in the other queue").await;
        println!("AT {} {id} {}", away(id), unix_ms(at));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_id_dropped_in_one_queue_and_scheduled_in_another_keeps_its_acknowledged_timer() {
    let Some((s, lines, qs, _e, _r)) = after_death("crossq", Duration::from_secs(90)).await else {
        return;
    };
    let live = ledger(&lines, "AT ");
    assert_eq!(live.len(), 30, "{lines:?}");
    // One timer per id: the acknowledged schedule in q1, not the stale record of q0.
    holds_exactly(&s, &qs, &live, &BTreeSet::new(), &lines).await;
}

/// Four tasks, each on 50 ids of its own, run schedule (on either queue), reschedule and
/// cancel one write at a time until killed: `TRY <queue> <id> <ms>` (live at that deadline
/// after the write; ms 0: gone) before each call, `OK <queue> <id> <ms>` once its `Pending`
/// resolved, `NOP <id>` when the front or the scheduler refused it.
pub(crate) async fn stream_child(m: &FleetMember, qs: &[String]) {
    let tasks = (0..4u64).map(|t| async move {
        let mut x = 0x2545_F491_4F6C_DD1Du64.wrapping_mul(t + 1);
        // id → queue while live.
        let mut live: std::collections::BTreeMap<u64, String> = Default::default();
        loop {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let id = t * 1000 + x % 50;
            let at = Instant::now() + HOUR + Duration::from_millis((x >> 16) % 3_600_000);
            let ms = unix_ms(at);
            let cancel = (x >> 8).is_multiple_of(3);
            let (q, p) = match live.get(&id).cloned() {
                None => {
                    let q = qs[((x >> 8) % 2) as usize].clone();
                    println!("TRY {q} {id} {ms}");
                    (
                        q.clone(),
                        m.schedule(q.clone(), id, at, value(&q, id))
                            .ok()
                            .and_then(Result::ok),
                    )
                }
                Some(q) if cancel => {
                    println!("TRY {q} {id} 0");
                    let p = match m.cancel(&id) {
                        Ok((tickwheel::sync::Cancel::Cancelled(_), p)) => p,
                        _ => None,
                    };
                    (q, p)
                }
                Some(q) => {
                    println!("TRY {q} {id} {ms}");
                    (q, m.reschedule(&id, at).ok().and_then(Result::ok))
                }
            };
            let Some(p) = p else {
                println!("NOP {id}");
                continue;
            };
            match p.await {
                Ok(_) => {
                    let gone = live.contains_key(&id) && cancel;
                    if gone {
                        live.remove(&id);
                        println!("OK {q} {id} 0");
                    } else {
                        live.insert(id, q.clone());
                        println!("OK {q} {id} {ms}");
                    }
                }
                Err(e) => panic!("{id}: {e}"),
            }
        }
    });
    futures_util::future::join_all(tasks).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_killed_mid_stream_loses_no_acknowledged_write() {
    let Some((etcd, redis, opts, qs)) = parent_fleet_with(CHILD, queues_of("stream")).await else {
        return;
    };
    let test = ("adversarial_child", CHILD);
    let limit = Duration::from_secs(120);
    let mut child = child_member_ready(test, (&etcd, &redis, "stream"), limit, ("OK ", 3000)).await;
    child.kill9();
    // Let the reader take what the pipe still held.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let lines = child.lines();
    // Per id: its last acknowledged state, and the state of a write in flight at the kill.
    let mut acked: BTreeMap<u64, (String, i64)> = BTreeMap::new();
    let mut tried: BTreeMap<u64, Option<(String, i64)>> = BTreeMap::new();
    for l in &lines {
        let p: Vec<&str> = l.split(' ').collect();
        match p[..] {
            ["TRY", q, id, ms] => {
                tried.insert(
                    id.parse().expect("id"),
                    Some((q.to_owned(), ms.parse().expect("ms"))),
                );
            }
            ["OK", q, id, ms] => {
                let id = id.parse().expect("id");
                acked.insert(id, (q.to_owned(), ms.parse().expect("ms")));
                tried.insert(id, None);
            }
            ["NOP", id] => {
                tried.insert(id.parse().expect("id"), None);
            }
            _ => {}
        }
    }
    let s = join_journaling(&opts, "s", true).await;
    owns(&s, qs.len()).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ids: BTreeSet<u64> = acked.keys().chain(tried.keys()).copied().collect();
    let mut wrong = Vec::new();
    for id in ids {
        let here = s
            .scheduler()
            .lookup(&id)
            .map(|i| (i.queue, unix_ms(i.deadline)));
        // What may hold: the last acknowledged state, or the in-flight write's.
        let mut may = vec![acked.get(&id).cloned().filter(|(_, ms)| *ms != 0)];
        if let Some(Some(t)) = tried.get(&id) {
            may.push(Some(t.clone()).filter(|(_, ms)| *ms != 0));
        }
        let fits = may.iter().any(|m| match (m, &here) {
            (None, None) => true,
            (Some((q, ms)), Some((hq, hms))) => q == hq && *hms >= ms - 100 && *hms <= ms + 5000,
            _ => false,
        });
        if !fits {
            wrong.push((id, may, here));
        }
    }
    let oks = lines.iter().filter(|l| l.starts_with("OK ")).count();
    assert!(
        wrong.is_empty(),
        "{} of the ids disagree after {oks} acknowledged writes (id, allowed, survivor), e.g. \
         {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
}
