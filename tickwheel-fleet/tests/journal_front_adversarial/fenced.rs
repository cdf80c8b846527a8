//! Hand-outs ended by a member that no longer owns their queue (a lost lease), or while their
//! queues move to a joining member.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::common::*;
use super::support::*;

/// Holds 20 hand-outs, waits until it was stopped (SIGSTOP) long enough to lose its lease,
/// then ends half with `done` and retries half, and tries the front again.
pub(crate) async fn zombie_child(m: &FleetMember, q: &String) {
    let now = Instant::now();
    for id in 0..20 {
        ack(sched(m, q, id, now), "schedule").await;
        println!("ACK {q} {id} {}", token_of(m, q).unwrap_or(0));
    }
    let out = due_within(m, 20, Duration::from_secs(20)).await;
    assert_eq!(out.len(), 20);
    println!("READY");
    // A gap of over 3 s between two 100 ms sleeps: the process was stopped (for 4 s or more).
    let mut last = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if last.elapsed() > Duration::from_secs(3) {
            break;
        }
        last = Instant::now();
    }
    println!("RESUMED owned={:?}", m.owned());
    for d in out {
        let id = *d.due.id();
        let (what, p) = if id < 10 {
            ("done", d.done().1)
        } else {
            let (r, p) = d.retry_at(Instant::now() + HOUR);
            println!("RETRY_LOCAL {id} {:?}", r.is_ok());
            ("retry", p)
        };
        match p.expect("journaled").await {
            Ok(_) => println!("WRITTEN {what} {id}"),
            Err(e) => println!("REFUSED {what} {id} fenced={} {e}", e.is_fenced()),
        }
    }
    let outcome = match m.schedule(q.clone(), 100, now + HOUR, value(q, 100)) {
        Err(e) => format!("outer {e}"),
        Ok(Err(e)) => format!("scheduler {e:?}"),
        Ok(Ok(p)) => match p.await {
            Ok(_) => "acknowledged".to_owned(),
            Err(e) => format!("pending fenced={} {e}", e.is_fenced()),
        },
    };
    println!("SCHEDULE_AFTER {outcome}");
    // Once it owns the queue again (its survivor left), what its scheduler holds of it.
    let until = Instant::now() + Duration::from_secs(60);
    while token_of(m, q).is_none() {
        if Instant::now() > until {
            println!("NEVER_REOWNED");
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    for t in m.scheduler().queue_members(q) {
        println!("HELD {} {:?} {}", t.id, t.state, unix_ms(t.deadline));
    }
    println!("REOWNED {}", token_of(m, q).unwrap_or(0));
}

/// The zombie child, SIGSTOPped once it holds its 20 hand-outs until survivor `s` owns its
/// queue (and 4 s at least), then continued: once it printed `SCHEDULE_AFTER`.
async fn zombie_and_survivor() -> Option<(
    tickwheel_testkit::etcd::EtcdServer,
    tickwheel_testkit::redis::RedisServer,
    Vec<String>,
    tickwheel_testkit::child::TestChild,
    FleetMember,
)> {
    let (etcd, redis, opts, qs) = parent_fleet_with(CHILD, 1).await?;
    let test = ("adversarial_child", CHILD);
    let child = child_member_ready(
        test,
        (&etcd, &redis, "zombie"),
        Duration::from_secs(60),
        ("READY", 1),
    )
    .await;
    let pid = child.pid();
    tickwheel_testkit::child::send_signal(pid, "STOP").expect("SIGSTOP");
    let stopped = Instant::now();
    let s = join_journaling(&opts, "s", true).await;
    owns(&s, 1).await;
    // Stopped for at least 4 s, so the child sees the gap it waits for.
    let least = Duration::from_secs(4).saturating_sub(stopped.elapsed());
    tokio::time::sleep(least).await;
    tickwheel_testkit::child::send_signal(pid, "CONT").expect("SIGCONT");
    let started = Instant::now();
    while child.count("SCHEDULE_AFTER ") == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{:?}",
            child.lines()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Some((etcd, redis, qs, child, s))
}

/// The ids of the first 20 distinct timers `s` hands out (waiting at most 10 s), each
/// hand-out passed to `take` as it comes.
async fn twenty_from(s: &FleetMember, mut take: impl FnMut(Due)) -> BTreeSet<u64> {
    let mut got = BTreeSet::new();
    let limit = Duration::from_secs(10);
    pop_due_into(
        s,
        limit,
        &mut got,
        |g| g.len() >= 20,
        |g, d| {
            g.insert(*d.due.id());
            take(d);
        },
    )
    .await;
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_that_lost_its_queue_and_gets_it_back_revives_nothing_the_survivor_ended() {
    let Some((_etcd, _redis, qs, mut child, s)) = zombie_and_survivor().await else {
        return;
    };
    let q = &qs[0];
    // The survivor delivers the 20 and ends each, acknowledged; then it leaves.
    let mut ends = Vec::new();
    let got = twenty_from(&s, |d| ends.push(d.done().1.expect("journaled"))).await;
    assert_eq!(got.len(), 20);
    for p in ends {
        p.await.expect("ended at the survivor");
    }
    s.leave().await.expect("leave");
    let started = Instant::now();
    while child.count("REOWNED") + child.count("NEVER_REOWNED") == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "{:?}",
            child.lines()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let lines = child.lines();
    child.kill9();
    assert!(
        !lines.iter().any(|l| l == "NEVER_REOWNED"),
        "the stale member never owned {q} again: {lines:?}"
    );
    let revived: Vec<_> = lines.iter().filter(|l| l.starts_with("HELD ")).collect();
    assert!(
        revived.is_empty(),
        "back at the member that lost {q}, timers the survivor delivered and ended (id, state, \
         unix ms): {revived:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hand_outs_ended_by_a_member_that_lost_its_queue_are_fenced_and_delivered_again() {
    let Some((_etcd, _redis, qs, mut child, s)) = zombie_and_survivor().await else {
        return;
    };
    let q = &qs[0];
    let lines = child.lines();
    child.kill9();
    // Every hand-out comes back at the survivor, under a larger token.
    let dead = acked_tokens(&child).get(q).copied().unwrap_or(0);
    let got = twenty_from(&s, |d| {
        assert!(d.token > dead, "{} under {} <= {dead}", d.due.id(), d.token);
    })
    .await;
    assert_eq!(
        got,
        (0..20).collect(),
        "delivered again at the survivor\n{lines:?}"
    );
    // The stale member learned its ends were refused, never that they were written.
    let written: Vec<_> = lines.iter().filter(|l| l.starts_with("WRITTEN ")).collect();
    assert!(
        written.is_empty(),
        "acknowledged under a stale token: {written:?}"
    );
    let refused = lines.iter().filter(|l| l.starts_with("REFUSED ")).count();
    assert_eq!(refused, 20, "{lines:?}");
    assert!(
        lines
            .iter()
            .filter(|l| l.starts_with("REFUSED "))
            .all(|l| l.contains("fenced=true")),
        "{lines:?}"
    );
    let after = lines
        .iter()
        .find(|l| l.starts_with("SCHEDULE_AFTER "))
        .expect("line");
    eprintln!("{:?}", &lines[lines.len().saturating_sub(25)..]);
    assert!(
        !after.ends_with("acknowledged") || s.scheduler().lookup(&100).is_some(),
        "{after}, yet the survivor does not hold 100"
    );
}

/// How a hand-out ended at the source of a move, and what its write answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    DoneWritten,
    DoneRefused,
    RetryWritten,
    RetryRefused,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hand_outs_ended_while_their_queues_move_are_neither_lost_nor_revived() {
    // A move waits for the queue's hand-outs (handoff step 5, `in-flight`), so ends written
    // here run before the target's claim; a refused one (a lost lease) is the zombie test's.
    const QS: usize = 8;
    const PER: u64 = 5;
    let Some((_etcd, _redis, opts, qs, a)) = journaled_a(QS).await else {
        return;
    };
    let now = Instant::now();
    let mut puts = Vec::new();
    for (n, q) in qs.iter().enumerate() {
        for i in 0..PER {
            puts.push(sched(&a, q, n as u64 * 1000 + i, now));
        }
    }
    for p in puts {
        p.await.expect("durable");
    }
    let out = due_within(&a, QS * PER as usize, Duration::from_secs(10)).await;
    assert_eq!(out.len(), QS * PER as usize);
    // b joins while every timer is in flight at a; a ends them in the middle of the moves.
    let opts_b = opts.clone();
    let joining = tokio::spawn(async move { join_journaling(&opts_b, "b", true).await });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut ledger = BTreeMap::new();
    for d in out {
        let id = *d.due.id();
        let (written, done) = if id % 2 == 0 {
            (d.done().1.expect("journaled").await, true)
        } else {
            let (r, p) = d.retry_at(Instant::now() + HOUR);
            let _ = r;
            (p.expect("journaled").await, false)
        };
        let how = match (done, &written) {
            (true, Ok(_)) => Ended::DoneWritten,
            (false, Ok(_)) => Ended::RetryWritten,
            (true, Err(e)) if e.is_fenced() => Ended::DoneRefused,
            (false, Err(e)) if e.is_fenced() => Ended::RetryRefused,
            (_, Err(e)) => panic!("{id}: {e}"),
        };
        ledger.insert(id, how);
    }
    let b = joining.await.expect("join b");
    shares(&a, &b, &qs).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (ha, hb) = (held(&a, &qs), held(&b, &qs));
    let mut wrong = Vec::new();
    for (n, q) in qs.iter().enumerate() {
        let (owner, _) = owner_of(&[&a, &b], q);
        for i in 0..PER {
            let id = n as u64 * 1000 + i;
            let key = (q.clone(), id);
            let at_owner = if owner.name() == "a" {
                ha.contains(&key)
            } else {
                hb.contains(&key)
            };
            let elsewhere = if owner.name() == "a" {
                hb.contains(&key)
            } else {
                ha.contains(&key)
            };
            // Written ends never come back; every other hand-out is held by the queue's owner
            // (a refused end: delivered again; a retry: pending).
            let want = ledger[&id] != Ended::DoneWritten;
            if at_owner != want || elsewhere {
                wrong.push((
                    q.clone(),
                    id,
                    ledger[&id],
                    owner.name().to_owned(),
                    at_owner,
                ));
            }
        }
    }
    let tally: BTreeMap<String, usize> = ledger.values().fold(BTreeMap::new(), |mut m, e| {
        *m.entry(format!("{e:?}")).or_default() += 1;
        m
    });
    eprintln!("hand-outs ended during the moves: {tally:?}");
    assert!(
        wrong.is_empty(),
        "(queue, id, how it ended at a, owner now, held by the owner): {wrong:?}; tally {tally:?}"
    );
}
