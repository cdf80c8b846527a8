//! The fleet's journal under hostile use: calls on queues a member does not own, a member
//! killed with timers handed out and not confirmed, an orderly move of journaled queues, and
//! churn at a constant live count.
//!
//! The child (this test binary run again as `in_flight_child`) joins alone, owns every
//! queue, schedules and journals timers due at once (`ACK <queue> <id> <token>`), hands them
//! all out (`OUT <queue> <id>`), confirms and journals the end of every third
//! (`END <queue> <id>`), prints `DONE` and keeps the rest in flight until it is killed.

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::*;
use tickwheel_fleet::Error;
use tickwheel_redis::journal::{Journal, JournalOptions};

const CHILD: &str = "TICKWHEEL_FLEET_IN_FLIGHT_CHILD";
const QUEUES: usize = 3;
const PER_QUEUE: u64 = 60;

/// A reader of the journal beside the fleet: loads `q` under the token its owner holds.
async fn journal_ids(redis_url: &str, q: &str, token: u64) -> BTreeSet<u64> {
    let p = tickwheel_redis::Protocol::connect(
        redis_url,
        tickwheel_redis::Member::new_boot("reader"),
        tickwheel_redis::Options::default(),
    )
    .await
    .expect("connect");
    let j = Journal::start(p, JournalOptions::default()).expect("runtime");
    j.load_entries::<u64, String>(q.as_bytes(), token)
        .await
        .expect("load")
        .into_iter()
        .map(|e| e.id)
        .collect()
}

/// The ids of queue `q` among `timers` ((queue, id) pairs).
fn ids_in(timers: &BTreeSet<(String, u64)>, q: &str) -> BTreeSet<u64> {
    timers
        .iter()
        .filter(|(o, _)| o == q)
        .map(|(_, i)| *i)
        .collect()
}

/// Without the journal the calls say so; with it, a queue this member does not own is
/// refused before anything is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journal_calls_on_a_queue_not_owned_or_with_the_journal_off_are_refused() {
    let Some((_etcd, _redis, opts, qs)) = fleet_with(1).await else {
        return;
    };
    let off = join_journaling(&opts, "off", false).await;
    let at = Instant::now() + Duration::from_secs(60);
    assert!(matches!(
        off.journal_put(&qs[0], &1, at, &"v".to_owned()),
        Err(Error::JournalOff)
    ));
    assert!(matches!(
        off.journal_end(&qs[0], &1),
        Err(Error::JournalOff)
    ));
    off.leave().await.expect("leave");
    let on = join_journaling(&opts, "on", true).await;
    let stranger = "never-registered".to_owned();
    assert!(matches!(
        on.journal_put(&stranger, &1, at, &"v".to_owned()),
        Err(Error::NotOwned)
    ));
    assert!(matches!(
        on.journal_end(&stranger, &1),
        Err(Error::NotOwned)
    ));
}

/// An orderly move (a second member joins and takes queues by handoff) leaves each moved
/// queue's journal holding exactly the timers its new owner's scheduler holds, readable
/// under the new token, and the new owner's ends delete them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_moved_queue_s_journal_matches_its_new_owner() {
    let Some((_etcd, redis, opts, qs, a)) = journaled_a(4).await else {
        return;
    };
    let at = Instant::now() + Duration::from_secs(3600);
    durable(schedule_journaled(&a, &qs, 40, |_| at)).await;
    let b = join_journaling(&opts, "b", true).await;
    shares(&a, &b, &qs).await;
    for (q, token) in b.owned() {
        let held = ids_held(&b, &q);
        let journaled = journal_ids(&redis.url(), &q, token).await;
        assert_eq!(held.len(), 40, "b holds {} timers of {q}", held.len());
        assert_eq!(journaled, held, "the journal of {q} differs from its owner");
        // b ends ten of them: the journal follows.
        for id in held.iter().take(10) {
            let _ = b.scheduler().cancel(id);
            b.journal_end(&q, id).expect("journal").await.expect("end");
        }
        let after = journal_ids(&redis.url(), &q, token).await;
        assert_eq!(after.len(), 30);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_child() {
    let Some((m, qs)) = join_child_journaling(CHILD, QUEUES).await else {
        return;
    };
    schedule_printing_acks(&m, &qs, PER_QUEUE, |_| Instant::now()).await;
    // Hand everything out; confirm every third, keep the rest in flight.
    let out = due_within(&m, QUEUES * PER_QUEUE as usize, Duration::from_secs(20)).await;
    for d in &out {
        println!("OUT {} {}", d.due.queue(), d.due.id());
    }
    let mut held = Vec::new();
    for d in out {
        let (q, id) = (d.due.queue().clone(), *d.due.id());
        if id % 3 == 0 {
            drop(d);
            end_printing(&m, &q, id).await;
        } else {
            held.push(d);
        }
    }
    println!("DONE");
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// A member killed while holding handed-out, unconfirmed timers: the survivor hands each of
/// them out again under a newer token, and every timer not confirmed ended, and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn timers_in_flight_at_a_kill_come_back_under_a_newer_token() {
    let test = ("in_flight_child", CHILD);
    let n = QUEUES * PER_QUEUE as usize;
    let Some((_etcd, _redis, _, child, s)) =
        survivor_of_killed_child(test, QUEUES, Duration::from_secs(90), n, true).await
    else {
        return;
    };
    assert_eq!(
        child.out, child.acked,
        "the child did not hand out everything"
    );
    assert!(!child.ended.is_empty());
    let got = redelivered(&s, &child).await;
    assert_eq!(
        got,
        child.not_ended(),
        "in flight at the kill vs redelivered"
    );
}

/// Constant live timers (300) in one queue while 30 000 journal puts and ends go through a
/// member: Redis's key count stays flat and its memory does not grow with the churn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_through_a_member_keeps_redis_flat() {
    let Some((_etcd, redis, opts, qs)) = fleet_with(1).await else {
        return;
    };
    let m = join_journaling(&opts, "m", true).await;
    owns(&m, 1).await;
    let q = &qs[0];
    let at = Instant::now() + Duration::from_secs(3600);
    let live = 300u64;
    let v = "12345678".to_owned();
    let mut pending = Vec::new();
    for id in 0..live {
        pending.push(m.journal_put(q, &id, at, &v).expect("journal"));
    }
    for w in pending.drain(..) {
        w.await.expect("put");
    }
    let mut c = support_raw(&redis.url()).await;
    let keys0: u64 = redis::cmd("DBSIZE")
        .query_async(&mut c)
        .await
        .expect("dbsize");
    let mem0 = redis.used_memory().expect("used_memory");
    let mut next = live;
    for _ in 0..100 {
        for _ in 0..300 {
            pending.push(m.journal_end(q, &(next - live)).expect("journal"));
            pending.push(m.journal_put(q, &next, at, &v).expect("journal"));
            next += 1;
        }
        let mut last = 0;
        for w in pending.drain(..) {
            last = w.await.expect("churn").live;
        }
        assert_eq!(last, live);
    }
    let keys1: u64 = redis::cmd("DBSIZE")
        .query_async(&mut c)
        .await
        .expect("dbsize");
    let mem1 = redis.used_memory().expect("used_memory");
    assert!(keys1 <= keys0 + 2, "keys grew from {keys0} to {keys1}");
    assert!(mem1 < mem0 + 300_000, "memory grew from {mem0} to {mem1}");
}

async fn support_raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

/// The last member leaves with journaled timers (some handed out and never confirmed): the
/// next member to join, whose recovery hook finds nothing, holds every one not ended, and its
/// journal under the new token holds them too (so its own death would lose none).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn after_the_last_leave_the_next_member_rebuilds_every_journaled_timer() {
    let Some((_etcd, redis, opts, qs, a)) = journaled_a(2).await else {
        return;
    };
    // The first ten of each queue due at once, the rest in an hour.
    let mut want = schedule_durably(&a, &qs, 30, 10).await;
    // Hand out the due ones; confirm and end half of them, keep the rest in flight.
    let in_flight = due_within(&a, 20, Duration::from_secs(10)).await;
    assert_eq!(in_flight.len(), 20);
    let mut kept = Vec::new();
    for d in in_flight {
        let (q, id) = (d.due.queue().clone(), *d.due.id());
        if id % 2 == 0 {
            a.journal_end(&q, &id).expect("journal").await.expect("end");
            drop(d);
            want.remove(&(q, id));
        } else {
            kept.push(d);
        }
    }
    a.leave().await.expect("leave");
    drop(kept);
    let c = join_journaling(&opts, "c", true).await;
    owns(&c, qs.len()).await;
    assert_eq!(
        held(&c, &qs),
        want,
        "the next member's timers after the last leave"
    );
    for (q, token) in c.owned() {
        let journaled = journal_ids(&redis.url(), &q, token).await;
        assert_eq!(
            journaled,
            ids_in(&want, &q),
            "the journal of {q} under c's token"
        );
    }
}

/// A member keeps scheduling and journaling while a second one joins and takes queues by
/// handoff. Every put acknowledged `Ok` ends up in the scheduler of its queue's owner and in
/// that queue's journal; the journal holds no record that no scheduler holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn puts_racing_a_move_stay_in_custody_and_in_the_journal() {
    let Some((_etcd, redis, opts, qs, a)) = journaled_a(4).await else {
        return;
    };
    let a = Arc::new(a);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let a = Arc::clone(&a);
        let stop = Arc::clone(&stop);
        let qs = qs.clone();
        tokio::spawn(async move {
            let at = Instant::now() + Duration::from_secs(3600);
            let mut acked = Vec::new();
            let mut refused = Vec::new();
            let mut next = 0u64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                for q in &qs {
                    let id = next;
                    next += 1;
                    let v = format!("{q}:{id}");
                    if a.scheduler()
                        .schedule(q.clone(), id, at, v.clone())
                        .is_err()
                    {
                        continue;
                    }
                    if journal_one(&a, q, id, at, &v).await {
                        acked.push((q.clone(), id));
                    } else {
                        refused.push((q.clone(), id));
                    }
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            (acked, refused)
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let b = join_journaling(&opts, "b", true).await;
    shares(&a, &b, &qs).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (acked, refused) = writer.await.expect("writer");
    assert!(!acked.is_empty());
    wait_until(Duration::from_secs(30), "one owner each, settled", || {
        exactly_one(&[&a, &b], &qs)
    })
    .await;
    let mut orphans = Vec::new();
    for q in &qs {
        let (owner, token) = owner_of(&[&*a, &b], q);
        let held = ids_held(owner, q);
        let journaled = journal_ids(&redis.url(), q, token).await;
        for (_, id) in acked.iter().filter(|(o, _)| o == q) {
            assert!(
                held.contains(id),
                "acknowledged {q}/{id} not held by its owner {}",
                owner.name()
            );
            assert!(
                journaled.contains(id),
                "acknowledged {q}/{id} not in the journal"
            );
        }
        orphans.extend(journaled.difference(&held).map(|id| (q.clone(), *id)));
    }
    let what = format!(
        "journal records no scheduler holds (refused puts: {})",
        refused.len()
    );
    support::checks::assert_none(&orphans, &what);
}

const ZOMBIE: &str = "TICKWHEEL_FLEET_JOURNAL_ZOMBIE_CHILD";

/// Journals new timers into every queue it owns, without end, printing `ACK <queue> <id>`
/// for each acknowledged put and `REFUSED <queue> <id>` for each refused one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zombie_child() {
    let Some((m, qs)) = join_child_journaling(ZOMBIE, 2).await else {
        return;
    };
    println!("OWNS");
    let at = Instant::now() + Duration::from_secs(3600);
    let mut next = 0u64;
    loop {
        for q in &qs {
            let id = next;
            next += 1;
            let v = format!("{q}:{id}");
            let _ = m.scheduler().schedule(q.clone(), id, at, v.clone());
            if journal_one(&m, q, id, at, &v).await {
                println!("ACK {q} {id}");
            } else {
                println!("REFUSED {q} {id}");
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A member paused (SIGSTOP) past its lease while it journals: the survivor adopts its queues;
/// resumed, the old member may go on writing (refused) or rejoin and take queues back; once
/// it is killed, every put it was ever told is durable is held by the survivor.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_member_s_acknowledged_puts_are_all_held_by_the_survivor() {
    let Some((etcd, redis, opts, qs)) = parent_fleet_with(ZOMBIE, 2).await else {
        return;
    };
    let child = ("zombie_child", ZOMBIE);
    let progress = ("ACK ", 50);
    let mut child = child_member_ready(
        child,
        (&etcd, &redis, "z"),
        Duration::from_secs(60),
        progress,
    )
    .await;
    tickwheel_testkit::child::send_signal(child.pid(), "STOP").expect("stop");
    let s = join_journaling(&opts, "s", true).await;
    let mut events = s.events();
    owns(&s, qs.len()).await;
    while let Ok(e) = events.try_recv() {
        eprintln!("EVENT {e:?}");
    }
    tickwheel_testkit::child::send_signal(child.pid(), "CONT").expect("cont");
    // Let the old member run on for a while (what it does then is what is checked).
    let refused_before = child.count("REFUSED ");
    let until = Instant::now() + Duration::from_secs(5);
    while child.count("REFUSED ") < refused_before + 20 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child.kill9();
    let acked = printed(&child, "ACK ");
    // Resumed, the old member may have rejoined and taken a queue back by handoff: dead now,
    // it leaves every queue to the survivor again.
    owns(&s, qs.len()).await;
    while let Ok(e) = events.try_recv() {
        eprintln!("EVENT {e:?}");
    }
    // A handoff to the resumed member may still hold a queue's timers in its offer: give it
    // until its timeout to come back (reclaimed) or to be adopted.
    let until = Instant::now() + Duration::from_secs(30);
    let mut held = support::held(&s, &qs);
    while !acked.is_subset(&held) && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(100)).await;
        held = support::held(&s, &qs);
    }
    while let Ok(e) = events.try_recv() {
        eprintln!("EVENT {e:?}");
    }
    let lost: Vec<_> = acked.difference(&held).take(5).collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged puts not held by the survivor, e.g. {lost:?}",
        acked.difference(&held).count()
    );
    // And Redis holds nothing the survivor lacks.
    for (q, token) in s.owned() {
        let journaled = journal_ids(&redis.url(), &q, token).await;
        assert!(
            journaled.is_subset(&ids_in(&held, &q)),
            "the journal of {q} has records the survivor lacks"
        );
    }
}

/// The fleet example with `--journal redis` (its recovery hook then off): a killed member's
/// queues come back from the journal and the run ends `ownership: OK`, exit 0.
#[test]
fn the_example_with_the_redis_journal_survives_a_kill() {
    if !tickwheel_testkit::example::installed(SERVERS) {
        return;
    }
    let out = FLEET
        .command()
        .args(SMALL)
        .args(["--journal", "redis", "--scenario", "kill"])
        .output()
        .expect("run the fleet example");
    let last = ownership_ok(&out);
    assert!(out.status.success(), "{last}");
}

/// A second member joins while the first holds one handed-out timer of each queue; after the
/// moves the first confirms them (`journal_end`, then drops the `Due`). Whoever owns each
/// queue then holds in its scheduler exactly the timers its journal holds: an end that was
/// refused leaves a record no scheduler holds (fired again at the next adoption, and kept in
/// Redis for good meanwhile).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_end_of_a_timer_in_flight_across_a_move_leaves_no_orphan_record() {
    let Some((_etcd, redis, opts, qs, a)) = journaled_a(4).await else {
        return;
    };
    // One due at once per queue, the rest in an hour.
    schedule_durably(&a, &qs, 20, 1).await;
    let out = due_within(&a, qs.len(), Duration::from_secs(10)).await;
    assert_eq!(out.len(), qs.len());
    let b = join_journaling(&opts, "b", true).await;
    // Give the moves their chance while the timers are out (the handoff waits for them, up
    // to its timeout).
    let until = Instant::now() + Duration::from_secs(8);
    while b.owned().is_empty() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut refused = 0;
    for d in out {
        let (q, id) = (d.due.queue().clone(), *d.due.id());
        match a.journal_end(&q, &id) {
            Ok(w) => {
                if w.await.is_err() {
                    refused += 1;
                }
            }
            Err(_) => refused += 1,
        }
        drop(d);
    }
    shares(&a, &b, &qs).await;
    let mut orphans = Vec::new();
    for q in &qs {
        let (owner, token) = owner_of(&[&a, &b], q);
        let held = ids_held(owner, q);
        let journaled = journal_ids(&redis.url(), q, token).await;
        assert!(
            held.is_subset(&journaled),
            "{q}: timers held but not journaled"
        );
        orphans.extend(journaled.difference(&held).map(|id| (q.clone(), *id)));
    }
    assert!(
        orphans.is_empty(),
        "records no scheduler holds: {orphans:?} ({refused} ends refused)"
    );
}
