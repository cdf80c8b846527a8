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
use tickwheel_testkit::child::TestChild;

const CHILD: &str = "TICKWHEEL_FLEET_IN_FLIGHT_CHILD";
const QUEUES: usize = 3;
const PER_QUEUE: u64 = 60;

fn token_of(m: &FleetMember, q: &str) -> Option<u64> {
    m.owned().iter().find(|(o, _)| o == q).map(|(_, t)| *t)
}

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

/// Without the journal the calls say so; with it, a queue this member does not own is
/// refused before anything is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journal_calls_on_a_queue_not_owned_or_with_the_journal_off_are_refused() {
    let Some((_etcd, _redis, opts)) = fleet() else {
        return;
    };
    let qs = queues(1);
    register(&opts, &qs).await;
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
    let Some((_etcd, redis, opts)) = fleet() else {
        return;
    };
    let qs = queues(4);
    register(&opts, &qs).await;
    let a = join_journaling(&opts, "a", true).await;
    wait_until(Duration::from_secs(30), "a owns every queue", || {
        a.owned().len() == qs.len()
    })
    .await;
    let at = Instant::now() + Duration::from_secs(3600);
    let mut pending = Vec::new();
    for (n, q) in qs.iter().enumerate() {
        for i in 0..40u64 {
            let id = n as u64 * 1000 + i;
            let v = format!("{q}:{id}");
            a.scheduler()
                .schedule(q.clone(), id, at, v.clone())
                .expect("schedule");
            pending.push(a.journal_put(q, &id, at, &v).expect("journal"));
        }
    }
    for w in pending {
        w.await.expect("durable");
    }
    let b = join_journaling(&opts, "b", true).await;
    wait_until(Duration::from_secs(30), "b owns some queue", || {
        !b.owned().is_empty()
    })
    .await;
    wait_until(Duration::from_secs(30), "one owner each", || {
        exactly_one(&[&a, &b], &qs)
    })
    .await;
    for (q, token) in b.owned() {
        let held: BTreeSet<u64> = {
            let ids = b.scheduler().queue_members(&q);
            ids.into_iter().map(|m| m.id).collect()
        };
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
        let token = token_of(&m, q).unwrap_or(0);
        for i in 0..PER_QUEUE {
            let id = n as u64 * 1000 + i;
            let at = Instant::now();
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
    // Hand everything out; confirm every third, keep the rest in flight.
    let mut out = Vec::new();
    let until = Instant::now() + Duration::from_secs(20);
    while out.len() < QUEUES * PER_QUEUE as usize && Instant::now() < until {
        for d in m.pop_due(Instant::now(), 1000) {
            println!("OUT {} {}", d.due.queue(), d.due.id());
            out.push(d);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut held = Vec::new();
    for d in out {
        let (q, id) = (d.due.queue().clone(), *d.due.id());
        if id % 3 == 0 {
            drop(d);
            match m.journal_end(&q, &id).expect("journal").await {
                Ok(_) => println!("END {q} {id}"),
                Err(e) => println!("ERR {q} {id} {e}"),
            }
        } else {
            held.push(d);
        }
    }
    println!("DONE");
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn parse(child: &TestChild, prefix: &str) -> BTreeSet<(String, u64)> {
    child
        .lines()
        .iter()
        .filter_map(|l| {
            let mut p = l.strip_prefix(prefix)?.split(' ');
            Some((p.next()?.to_owned(), p.next()?.parse().ok()?))
        })
        .collect()
}

/// A member killed while holding handed-out, unconfirmed timers: the survivor hands each of
/// them out again under a newer token, and every timer not confirmed ended, and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn timers_in_flight_at_a_kill_come_back_under_a_newer_token() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let Some((etcd, redis, opts)) = fleet() else {
        return;
    };
    let qs = queues(QUEUES);
    register(&opts, &qs).await;
    let mut child = TestChild::spawn(
        "in_flight_child",
        CHILD,
        &format!("{} {} w", etcd.url(), redis.url()),
    );
    let started = Instant::now();
    while !child.has("DONE") {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "the child did not finish: {:?}",
            child.lines()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child.kill9();
    let tokens: Vec<(String, u64)> = child
        .lines()
        .iter()
        .filter_map(|l| {
            let mut p = l.strip_prefix("ACK ")?.split(' ');
            let q = p.next()?.to_owned();
            p.next()?;
            Some((q, p.next()?.parse().ok()?))
        })
        .collect();
    let acked = parse(&child, "ACK ");
    let out = parse(&child, "OUT ");
    let ended = parse(&child, "END ");
    assert_eq!(
        acked.len(),
        QUEUES * PER_QUEUE as usize,
        "{:?}",
        child.lines()
    );
    assert_eq!(out, acked, "the child did not hand out everything");
    assert!(!ended.is_empty());
    let want: BTreeSet<(String, u64)> = acked.difference(&ended).cloned().collect();
    let s = join_journaling(&opts, "s", true).await;
    wait_until(Duration::from_secs(30), "s owns every queue", || {
        s.owned().len() == qs.len()
    })
    .await;
    let mut got = BTreeSet::new();
    let until = Instant::now() + Duration::from_secs(10);
    while got.len() < want.len() && Instant::now() < until {
        for d in s.pop_due(Instant::now(), 1000) {
            let dead = tokens
                .iter()
                .find(|(q, _)| q == d.due.queue())
                .map(|(_, t)| *t)
                .unwrap_or(0);
            assert!(d.token > dead, "redelivered under {} ≤ {dead}", d.token);
            let k = (d.due.queue().clone(), *d.due.id());
            assert!(
                got.insert(k.clone()),
                "{k:?} delivered twice by the survivor"
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(got, want, "in flight at the kill vs redelivered");
}

/// Constant live timers (300) in one queue while 30 000 journal puts and ends go through a
/// member: Redis's key count stays flat and its memory does not grow with the churn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_through_a_member_keeps_redis_flat() {
    let Some((_etcd, redis, opts)) = fleet() else {
        return;
    };
    let qs = queues(1);
    register(&opts, &qs).await;
    let m = join_journaling(&opts, "m", true).await;
    wait_until(Duration::from_secs(30), "m owns the queue", || {
        m.owned().len() == 1
    })
    .await;
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
    let mem0 = used_memory(&mut c).await;
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
    let mem1 = used_memory(&mut c).await;
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

async fn used_memory(c: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(c)
        .await
        .expect("info");
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory")
}

/// The last member leaves with journaled timers (some handed out and never confirmed): the
/// next member to join, whose recovery hook finds nothing, holds every one not ended, and its
/// journal under the new token holds them too (so its own death would lose none).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn after_the_last_leave_the_next_member_rebuilds_every_journaled_timer() {
    let Some((_etcd, redis, opts)) = fleet() else {
        return;
    };
    let qs = queues(2);
    register(&opts, &qs).await;
    let a = join_journaling(&opts, "a", true).await;
    wait_until(Duration::from_secs(30), "a owns every queue", || {
        a.owned().len() == qs.len()
    })
    .await;
    let now = Instant::now();
    let mut want = BTreeSet::new();
    let mut pending = Vec::new();
    for (n, q) in qs.iter().enumerate() {
        for i in 0..30u64 {
            let id = n as u64 * 1000 + i;
            // The first ten of each queue due at once, the rest in an hour.
            let at = if i < 10 {
                now
            } else {
                now + Duration::from_secs(3600)
            };
            let v = format!("{q}:{id}");
            a.scheduler()
                .schedule(q.clone(), id, at, v.clone())
                .expect("schedule");
            pending.push(a.journal_put(q, &id, at, &v).expect("journal"));
            want.insert((q.clone(), id));
        }
    }
    for w in pending {
        w.await.expect("durable");
    }
    // Hand out the due ones; confirm and end half of them, keep the rest in flight.
    let mut in_flight = Vec::new();
    let until = Instant::now() + Duration::from_secs(10);
    while in_flight.len() < 20 && Instant::now() < until {
        in_flight.extend(a.pop_due(Instant::now(), 100));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
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
    wait_until(Duration::from_secs(30), "c owns every queue", || {
        c.owned().len() == qs.len()
    })
    .await;
    let mut held = BTreeSet::new();
    for q in &qs {
        for m in c.scheduler().queue_members(q) {
            held.insert((q.clone(), m.id));
        }
    }
    assert_eq!(held, want, "the next member's timers after the last leave");
    for (q, token) in c.owned() {
        let journaled = journal_ids(&redis.url(), &q, token).await;
        let in_q: BTreeSet<u64> = want
            .iter()
            .filter(|(o, _)| *o == q)
            .map(|(_, i)| *i)
            .collect();
        assert_eq!(journaled, in_q, "the journal of {q} under c's token");
    }
}

/// A member keeps scheduling and journaling while a second one joins and takes queues by
/// handoff. Every put acknowledged `Ok` ends up in the scheduler of its queue's owner and in
/// that queue's journal; the journal holds no record that no scheduler holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn puts_racing_a_move_stay_in_custody_and_in_the_journal() {
    let Some((_etcd, redis, opts)) = fleet() else {
        return;
    };
    let qs = queues(4);
    register(&opts, &qs).await;
    let a = Arc::new(join_journaling(&opts, "a", true).await);
    wait_until(Duration::from_secs(30), "a owns every queue", || {
        a.owned().len() == qs.len()
    })
    .await;
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
                    match a.journal_put(q, &id, at, &v) {
                        Ok(w) => match w.await {
                            Ok(_) => acked.push((q.clone(), id)),
                            Err(_) => refused.push((q.clone(), id)),
                        },
                        Err(_) => refused.push((q.clone(), id)),
                    }
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            (acked, refused)
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let b = join_journaling(&opts, "b", true).await;
    wait_until(Duration::from_secs(30), "b owns some queue", || {
        !b.owned().is_empty()
    })
    .await;
    wait_until(Duration::from_secs(30), "one owner each", || {
        exactly_one(&[&a, &b], &qs)
    })
    .await;
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
        let (owner, token) = [&*a, &b]
            .iter()
            .find_map(|m| token_of(m, q).map(|t| (*m, t)))
            .expect("an owner");
        let held: BTreeSet<u64> = owner
            .scheduler()
            .queue_members(q)
            .into_iter()
            .map(|m| m.id)
            .collect();
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
    assert!(
        orphans.is_empty(),
        "{} journal records no scheduler holds (refused puts: {}), e.g. {:?}",
        orphans.len(),
        refused.len(),
        &orphans[..orphans.len().min(5)]
    );
}

const ZOMBIE: &str = "TICKWHEEL_FLEET_JOURNAL_ZOMBIE_CHILD";

/// Journals new timers into every queue it owns, without end, printing `ACK <queue> <id>`
/// for each acknowledged put and `REFUSED <queue> <id>` for each refused one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zombie_child() {
    let Ok(spec) = std::env::var(ZOMBIE) else {
        return;
    };
    let (opts, name) = child_spec(&spec);
    let m = join_journaling(&opts, &name, true).await;
    let qs = queues(2);
    wait_until(
        Duration::from_secs(30),
        "the child owns every queue",
        || m.owned().len() == qs.len(),
    )
    .await;
    println!("OWNS");
    let at = Instant::now() + Duration::from_secs(3600);
    let mut next = 0u64;
    loop {
        for q in &qs {
            let id = next;
            next += 1;
            let v = format!("{q}:{id}");
            let _ = m.scheduler().schedule(q.clone(), id, at, v.clone());
            match m.journal_put(q, &id, at, &v) {
                Ok(w) => match w.await {
                    Ok(_) => println!("ACK {q} {id}"),
                    Err(_) => println!("REFUSED {q} {id}"),
                },
                Err(_) => println!("REFUSED {q} {id}"),
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
    if std::env::var_os(ZOMBIE).is_some() {
        return;
    }
    let Some((etcd, redis, opts)) = fleet() else {
        return;
    };
    let qs = queues(2);
    register(&opts, &qs).await;
    let mut child = TestChild::spawn(
        "zombie_child",
        ZOMBIE,
        &format!("{} {} z", etcd.url(), redis.url()),
    );
    let started = Instant::now();
    while child.count("ACK ") < 50 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the child made no progress: {:?}",
            child.lines()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tickwheel_testkit::child::send_signal(child.pid(), "STOP").expect("stop");
    let s = join_journaling(&opts, "s", true).await;
    let mut events = s.events();
    wait_until(Duration::from_secs(30), "s owns every queue", || {
        s.owned().len() == qs.len()
    })
    .await;
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
    let acked = parse(&child, "ACK ");
    // Resumed, the old member may have rejoined and taken a queue back by handoff: dead now,
    // it leaves every queue to the survivor again.
    wait_until(Duration::from_secs(30), "s owns every queue again", || {
        s.owned().len() == qs.len()
    })
    .await;
    while let Ok(e) = events.try_recv() {
        eprintln!("EVENT {e:?}");
    }
    // A handoff to the resumed member may still hold a queue's timers in its offer: give it
    // until its timeout to come back (reclaimed) or to be adopted.
    let holding = |s: &FleetMember| {
        let mut held = BTreeSet::new();
        for q in &qs {
            for m in s.scheduler().queue_members(q) {
                held.insert((q.clone(), m.id));
            }
        }
        held
    };
    let until = Instant::now() + Duration::from_secs(30);
    let mut held = holding(&s);
    while !acked.is_subset(&held) && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(100)).await;
        held = holding(&s);
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
        let mine: BTreeSet<u64> = held
            .iter()
            .filter(|(o, _)| *o == q)
            .map(|(_, i)| *i)
            .collect();
        assert!(
            journaled.is_subset(&mine),
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
    let Some((_etcd, redis, opts)) = fleet() else {
        return;
    };
    let qs = queues(4);
    register(&opts, &qs).await;
    let a = join_journaling(&opts, "a", true).await;
    wait_until(Duration::from_secs(30), "a owns every queue", || {
        a.owned().len() == qs.len()
    })
    .await;
    let now = Instant::now();
    let mut pending = Vec::new();
    for (n, q) in qs.iter().enumerate() {
        for i in 0..20u64 {
            let id = n as u64 * 1000 + i;
            // One due at once per queue, the rest in an hour.
            let at = if i == 0 {
                now
            } else {
                now + Duration::from_secs(3600)
            };
            let v = format!("{q}:{id}");
            a.scheduler()
                .schedule(q.clone(), id, at, v.clone())
                .expect("schedule");
            pending.push(a.journal_put(q, &id, at, &v).expect("journal"));
        }
    }
    for w in pending {
        w.await.expect("durable");
    }
    let mut out = Vec::new();
    let until = Instant::now() + Duration::from_secs(10);
    while out.len() < qs.len() && Instant::now() < until {
        out.extend(a.pop_due(Instant::now(), 100));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
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
    wait_until(Duration::from_secs(30), "b owns some queue", || {
        !b.owned().is_empty()
    })
    .await;
    wait_until(Duration::from_secs(30), "one owner each", || {
        exactly_one(&[&a, &b], &qs)
    })
    .await;
    let mut orphans = Vec::new();
    for q in &qs {
        let (owner, token) = [&a, &b]
            .iter()
            .find_map(|m| token_of(m, q).map(|t| (*m, t)))
            .expect("an owner");
        let held: BTreeSet<u64> = owner
            .scheduler()
            .queue_members(q)
            .into_iter()
            .map(|m| m.id)
            .collect();
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
