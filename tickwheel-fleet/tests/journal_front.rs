//! The journaled front (`Member::schedule`, `reschedule`, `cancel`, `drain_queue`,
//! `FencedDue::done`, `retry_at`): a member that never calls `journal_put` or `journal_end`
//! by hand leaves in Redis exactly its live timers, at their last deadlines.
//!
//! The child (this test binary run again as `front_child`) joins alone, owns every queue and
//! uses the front only. In each of the first two queues it schedules timers that it keeps
//! (`ACK`), moves to a later deadline (`MOVED`), cancels (`END`), hands out and ends
//! (`END`), hands out and retries later (`RETRIED`), hands out and holds (in flight at its
//! death), and hands out and drops (its end never written); the third queue it drains
//! (`END`). It prints each line once the write's
//! `Pending` resolved, then `DONE`, and is killed with SIGKILL. The survivor, whose recovery
//! hook finds nothing, must hold exactly the timers not ended, each at its last deadline.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use support::*;
use tickwheel::sync::Cancel;

const CHILD: &str = "TICKWHEEL_FLEET_JOURNAL_FRONT_CHILD";
const QUEUES: usize = 3;
/// Timers of each kind in each of the first two queues.
const EACH: u64 = 10;
const HOUR: Duration = Duration::from_secs(3600);

/// What the child does with a timer, by its id's hundreds (`id % 1000 / 100`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Scheduled an hour ahead, left alone.
    Kept,
    /// Scheduled an hour ahead, moved to two hours ahead.
    Moved,
    /// Scheduled an hour ahead, cancelled.
    Cancelled,
    /// Due at once, handed out, done.
    Done,
    /// Due at once, handed out, retried three hours ahead.
    Retried,
    /// Due at once, handed out and held: in flight when the child dies.
    InFlight,
    /// Due at once, handed out and dropped: ended here, its record left in the journal.
    Dropped,
}

const KINDS: [Kind; 7] = [
    Kind::Kept,
    Kind::Moved,
    Kind::Cancelled,
    Kind::Done,
    Kind::Retried,
    Kind::InFlight,
    Kind::Dropped,
];

fn kind(id: u64) -> Kind {
    KINDS[(id % 1000 / 100) as usize]
}

fn value(q: &str, id: u64) -> String {
    format!("{q}:{id}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn front_child() {
    let Some((m, qs)) = join_child_journaling(CHILD, QUEUES).await else {
        return;
    };
    let tokens: BTreeMap<String, u64> = m.owned().into_iter().collect();
    let now = Instant::now();
    let mut acks = Vec::new();
    for (n, q) in qs[..2].iter().enumerate() {
        for (k, kind) in KINDS.iter().enumerate() {
            for i in 0..EACH {
                let id = n as u64 * 1000 + k as u64 * 100 + i;
                let at = match kind {
                    Kind::Kept | Kind::Moved | Kind::Cancelled => now + HOUR,
                    _ => now,
                };
                let p = m.schedule(q.clone(), id, at, value(q, id));
                acks.push((q.clone(), id, p.expect("journal").expect("schedule")));
            }
        }
    }
    // The third queue: scheduled, then drained.
    let drained = &qs[2];
    for i in 0..EACH {
        let id = 2000 + i;
        let p = m.schedule(drained.clone(), id, now + HOUR, value(drained, id));
        acks.push((drained.clone(), id, p.expect("journal").expect("schedule")));
    }
    for (q, id, p) in acks {
        match p.await {
            Ok(_) => println!("ACK {q} {id} {}", tokens.get(&q).copied().unwrap_or(0)),
            Err(e) => println!("ERR {q} {id} {e}"),
        }
    }
    let (d, p) = m.drain_queue(drained).expect("drain");
    assert_eq!(d.cancelled.len(), EACH as usize);
    if p.expect("ends").await.is_ok() {
        for (id, _) in &d.cancelled {
            println!("END {drained} {id}");
        }
    }
    for n in 0..2u64 {
        for i in 0..EACH {
            let id = n * 1000 + 100 + i;
            let p = m.reschedule(&id, now + 2 * HOUR).expect("journal");
            if p.expect("moved").await.is_ok() {
                println!("MOVED {} {id}", qs[n as usize]);
            }
            let id = n * 1000 + 200 + i;
            let (c, p) = m.cancel(&id).expect("journal");
            assert!(matches!(c, Cancel::Cancelled(_)), "{id}: {c:?}");
            if p.expect("end").await.is_ok() {
                println!("END {} {id}", qs[n as usize]);
            }
        }
    }
    let due = 2 * 4 * EACH as usize;
    let mut held = Vec::new();
    for d in due_within(&m, due, Duration::from_secs(20)).await {
        let (q, id) = (d.due.queue().clone(), *d.due.id());
        match kind(id) {
            Kind::Done => {
                let (v, p) = d.done();
                assert_eq!(v, value(&q, id));
                if p.expect("journaled").await.is_ok() {
                    println!("END {q} {id}");
                }
            }
            Kind::Retried => {
                let (r, p) = d.retry_at(now + 3 * HOUR);
                r.expect("retried");
                if p.expect("journaled").await.is_ok() {
                    println!("RETRIED {q} {id}");
                }
            }
            Kind::Dropped => drop(d),
            _ => held.push(d),
        }
    }
    println!("HELD {}", held.len());
    println!("DONE");
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The survivor's deadline of each kept timer, in hours from now: a kept timer is due in
/// about one, a moved one in about two, a retried one in about three, one held in flight
/// at the death or dropped at once.
fn expected_hours(k: Kind) -> std::ops::Range<f64> {
    match k {
        Kind::Kept => 0.5..1.5,
        Kind::Moved => 1.5..2.5,
        Kind::Retried => 2.5..3.5,
        Kind::InFlight | Kind::Dropped => 0.0..0.5,
        Kind::Cancelled | Kind::Done => 0.0..0.0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_survivor_adopts_exactly_the_fronts_live_timers() {
    let test = ("front_child", CHILD);
    let all = 2 * KINDS.len() * EACH as usize + EACH as usize;
    let Some((_etcd, _redis, qs, child, s)) =
        survivor_of_killed_child(test, QUEUES, Duration::from_secs(90), all, true).await
    else {
        return;
    };
    let lines = &child.lines;
    let count = |prefix: &str| lines.iter().filter(|l| l.starts_with(prefix)).count();
    assert_eq!(count("MOVED "), 2 * EACH as usize, "{lines:?}");
    assert_eq!(count("RETRIED "), 2 * EACH as usize, "{lines:?}");
    // Cancelled and done in two queues, and the drained queue.
    assert_eq!(child.ended.len(), 5 * EACH as usize, "{lines:?}");
    assert!(lines.iter().any(|l| l == &format!("HELD {}", 2 * EACH)));
    let want = child.not_ended();
    wait_until(
        Duration::from_secs(10),
        "the survivor holds the timers",
        || held(&s, &qs).len() >= want.len(),
    )
    .await;
    assert_eq!(
        held(&s, &qs),
        want,
        "the survivor holds exactly the live timers"
    );
    let now = Instant::now();
    for (q, id) in &want {
        let info = s.scheduler().lookup(id).expect("held");
        let hours = info.deadline.saturating_duration_since(now).as_secs_f64() / 3600.0;
        let k = kind(*id);
        assert!(
            expected_hours(k).contains(&hours),
            "{q}/{id} ({k:?}) due in {hours:.3} h at the survivor"
        );
        assert_eq!(info.state, tickwheel::sync::IdState::Pending, "{q}/{id}");
    }
}

/// A reader of `q`'s journal under `token`: (id, deadline in hours from Redis's now).
async fn journal_of(
    redis: &tickwheel_testkit::redis::RedisServer,
    q: &str,
    token: u64,
) -> BTreeMap<u64, f64> {
    let j = support::own_journal(redis, "reader").await;
    let now_us = support::unix_now_us() as f64;
    let records = j.load(q.as_bytes(), token).await.expect("load");
    records
        .iter()
        .map(|r| {
            let e = r.entry::<u64, String>().expect("decodes");
            (e.id, (e.deadline_us as f64 - now_us) / 3.6e9)
        })
        .collect()
}

/// Ids raced on by two threads.
const RACED: u64 = 20_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_reschedules_and_cancels_leave_the_journal_agreeing_with_the_scheduler() {
    let Some((_etcd, redis, a, q, token)) = journaled_one().await else {
        return;
    };
    let q = &q;
    let now = Instant::now();
    front_schedule_durably(&a, q, 0..RACED, now + HOUR).await;
    // Each id raced on by two threads meeting at a barrier: one moves it two hours ahead;
    // the other cancels it (even ids) or moves it three hours ahead (odd ids).
    let barrier = Barrier::new(2);
    let pending = tokio::task::block_in_place(|| {
        std::thread::scope(|scope| {
            let first = scope.spawn(|| {
                let mut out = Vec::new();
                for id in 0..RACED {
                    barrier.wait();
                    if let Ok(p) = a.reschedule(&id, now + 2 * HOUR).expect("journal") {
                        out.push(p);
                    }
                }
                out
            });
            let second = scope.spawn(|| {
                let mut out = Vec::new();
                for id in 0..RACED {
                    barrier.wait();
                    if id % 2 == 0 {
                        out.extend(a.cancel(&id).expect("journal").1);
                    } else if let Ok(p) = a.reschedule(&id, now + 3 * HOUR).expect("journal") {
                        out.push(p);
                    }
                }
                out
            });
            let mut all = first.join().expect("first");
            all.extend(second.join().expect("second"));
            all
        })
    });
    for p in pending {
        p.await.expect("durable");
    }
    let journal = journal_of(&redis, q, token).await;
    let at = Instant::now();
    let mut disagree = Vec::new();
    for id in 0..RACED {
        // The scheduler's deadline and the journal's, rounded to whole hours from now.
        let here = a
            .scheduler()
            .lookup(&id)
            .map(|i| (i.deadline.saturating_duration_since(at).as_secs_f64() / 3600.0).round());
        let there = journal.get(&id).map(|h| h.round());
        if here != there {
            disagree.push((id, here, there));
        }
    }
    assert!(
        disagree.is_empty(),
        "{} ids where the journal disagrees with the scheduler (id, hours here, hours in \
         Redis), e.g. {:?}",
        disagree.len(),
        &disagree[..disagree.len().min(5)]
    );
    // Both outcomes of the odd ids' race are possible; every even id is gone.
    let left: BTreeSet<u64> = journal.keys().copied().collect();
    assert!(left.iter().all(|id| id % 2 == 1), "{left:?}");
    assert_eq!(left.len(), RACED as usize / 2);
}
