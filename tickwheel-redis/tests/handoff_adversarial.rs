//! Adversarial tests of the high-level handoff (`Custody`, `Outgoing`, `Incoming`) against a
//! real redis-server. Every test counts every id: each ends exactly once (delivered, held by
//! a scheduler, in Redis, or handed back) and no `Due` fires before its deadline.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use support::{
    Sched, contents, custody_member as member, due_at, filled_with as filled, server, three_members,
};
use tickwheel::sync::{Retried, ScheduleError, Scheduler};
use tickwheel_redis::{Custody, CustodyError, Error, Offered, Rejection, State};
use tickwheel_testkit::redis::RedisServer;

fn rejection_of<K, T>(e: &CustodyError<K, T>) -> Option<&Rejection> {
    match e {
        CustodyError::Protocol(p) => p.rejection(),
        _ => None,
    }
}

/// Asserts that `r`, a claim or reclaim, was refused (`what` says why it must be) with a
/// rejection that `is` accepts.
#[track_caller]
fn assert_refused<T>(r: Result<T, Error>, what: &str, is: impl Fn(&Rejection) -> bool) {
    let e = r.err().expect(what);
    assert!(e.rejection().is_some_and(is), "{e}");
}

/// Queue `name` and a scheduler holding its `n` timers (ids `0..n`, values `v<id>`, due a
/// minute or so on).
fn queue_of(name: &str, n: u64) -> (String, Sched) {
    let src = filled(name, n, Instant::now(), |i| format!("v{i}"));
    (name.to_string(), src)
}

/// A source (origin `t0`) of queue `q` with timers `0..n`, values `v<id>`: ids below `now` due
/// at `t0`, the others at `later(id)`.
fn partly_due(q: &str, n: u64, now: u64, t0: Instant, later: impl Fn(u64) -> Instant) -> Sched {
    due_at(q, n, t0, |id| if id < now { t0 } else { later(id) })
}

/// A redis-server, its URL, queue `name` with `n` timers (see [`queue_of`]), three members
/// (4 timers a chunk), and the offer of the queue mx1 made to `to`, or to anyone. `None` where
/// the tests skip without a redis-server.
async fn offered(
    name: &str,
    n: u64,
    to: Option<&str>,
) -> Option<(RedisServer, String, String, [Custody; 3], Offered)> {
    let srv = server()?;
    let url = srv.url();
    let (q, src) = queue_of(name, n);
    let (mx1, mx2, mx3) = three_members(&url, 4).await;
    let offer = support::acquire_and_offer(&mx1, &src, &q, to).await;
    Some((srv, url, q, [mx1, mx2, mx3], offer))
}

/// Two targets race to claim one offer (for anyone) and both run the whole target side:
/// exactly one imports, the other is refused, and the ids are in exactly one scheduler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_targets_race_only_one_imports() {
    let Some(srv) = server() else { return };
    let url = srv.url();
    for round in 0..20 {
        let (q, src) = queue_of(&format!("race{round}.example"), 50);
        let mx1 = member(&url, "mx1", 7).await;
        let mx2 = member(&url, "mx2", 7).await;
        let mx3 = member(&url, "mx3", 7).await;
        let offered = support::acquire_and_offer(&mx1, &src, &q, None).await;
        assert_eq!(offered.entries, 50);
        let (s2, s3) = (Sched::new(), Sched::new());
        let (r2, r3) = tokio::join!(mx2.receive(&s2, q.clone()), mx3.receive(&s3, q.clone()));
        let wins = r2.is_ok() as u32 + r3.is_ok() as u32;
        assert_eq!(wins, 1, "round {round}: {r2:?} / {r3:?}");
        assert_eq!(s2.len() + s3.len(), 50, "round {round}");
        assert_eq!(src.len(), 0);
    }
}

/// An offer named for mx2: mx3 cannot claim it before its TTL, mx2 can; mx3's reclaim is
/// refused while it is live.
#[tokio::test]
async fn named_offer_not_claimable_by_another() {
    let Some((_srv, _, q, [_, mx2, mx3], _)) = offered("named.example", 10, Some("mx2")).await
    else {
        return;
    };
    let r = mx3.claim::<_, u64, String>(q.clone()).await;
    assert_refused(r, "mx3 must not claim", |r| {
        matches!(r, Rejection::NotOffered(_))
    });
    let r = mx3.reclaim::<_, u64, String>(q.clone()).await;
    assert_refused(r, "not expired", |r| matches!(r, Rejection::NotExpired(_)));
    let s2 = Sched::new();
    let got = mx2.receive(&s2, q.clone()).await.unwrap();
    assert_eq!(got.imported.imported, 10);
    assert_eq!(s2.len(), 10);
}

/// The target's lease lapses mid-fetch, another member reclaims: the original target's
/// further fetch and its commit are refused (fenced), the reclaimer gets every id once.
#[tokio::test]
async fn reclaim_while_target_mid_fetch_then_stale_commit() {
    let Some((_srv, url, q, [mx1, mx2, mx3], _)) = offered("midfetch.example", 30, None).await
    else {
        return;
    };
    let mut inc2 = mx2.claim::<_, u64, String>(q.clone()).await.unwrap();
    // mx2 fetched once (a read copy), then stalls past its lease.
    assert_eq!(inc2.fetch().await.unwrap().len(), 30);
    support::expire(&url, &mx1.protocol().keys(q.as_bytes()).owner).await;
    let mut inc3 = mx3.reclaim::<_, u64, String>(q.clone()).await.unwrap();
    // mx2 comes back: fetch again and commit must be refused.
    let f = inc2.fetch().await;
    assert!(f.is_err(), "a stale claimer fetched again");
    let c = inc2.commit().await;
    let Err(err) = c else {
        panic!("a stale claimer committed")
    };
    assert!(
        matches!(rejection_of(&err), Some(Rejection::Fenced { .. })),
        "{err}"
    );
    let s2 = Sched::new();
    assert!(inc2.import(&s2).is_err(), "stale claimer imported");
    assert_eq!(s2.len(), 0);
    inc3.fetch().await.unwrap();
    inc3.commit().await.unwrap();
    let s3 = Sched::new();
    let r = inc3.import(&s3).unwrap();
    assert_eq!(r.imported.imported, 30);
    assert_eq!(contents(&s3, &q).len(), 30);
}

/// Steps called out of order are refused and change nothing; the handoff then completes.
/// Import twice: the second is refused, nothing doubled.
#[tokio::test]
async fn out_of_order_steps_and_import_twice() {
    let Some(srv) = server() else { return };
    let url = srv.url();
    let (q, src) = queue_of("order.example", 12);
    let (mx1, mx2) = (member(&url, "mx1", 5).await, member(&url, "mx2", 5).await);
    let epoch = mx1.acquire(q.as_bytes()).await.unwrap().record.epoch;
    let mut out = mx1.outgoing(&src, q.clone(), epoch);
    assert!(matches!(out.seal().await, Err(CustodyError::Step { .. })));
    assert!(matches!(out.abort().await, Err(CustodyError::Step { .. })));
    assert!(matches!(
        out.append_pending().await,
        Err(CustodyError::Step { .. })
    ));
    assert!(matches!(out.stage().await, Err(CustodyError::Step { .. })));
    assert_eq!(src.len(), 12, "an out-of-order step touched the scheduler");
    out.freeze().unwrap();
    assert!(matches!(out.freeze(), Err(CustodyError::Step { .. })));
    assert!(matches!(
        out.forward().await,
        Err(CustodyError::Step { .. })
    ));
    out.prepare(Some("mx2")).await.unwrap();
    assert!(matches!(
        out.prepare(None).await,
        Err(CustodyError::Step { .. })
    ));
    // seal before the appends: refused locally, nothing offered.
    assert!(matches!(out.seal().await, Err(CustodyError::Step { .. })));
    assert!(mx2.claim::<_, u64, String>(q.clone()).await.is_err());
    out.append_pending().await.unwrap();
    out.await_in_flight().await.unwrap();
    out.forward().await.unwrap();
    out.seal().await.unwrap();
    assert!(matches!(out.abort().await, Err(CustodyError::Step { .. })));
    let offered = out.finish().unwrap();
    assert_eq!(offered.entries, 12);
    let mut inc = mx2.claim::<_, u64, String>(q.clone()).await.unwrap();
    let s2 = Sched::new();
    assert!(matches!(inc.commit().await, Err(CustodyError::Step { .. })));
    assert!(matches!(inc.import(&s2), Err(CustodyError::Step { .. })));
    inc.fetch().await.unwrap();
    assert!(matches!(inc.import(&s2), Err(CustodyError::Step { .. })));
    assert_eq!(s2.len(), 0, "imported before commit");
    inc.commit().await.unwrap();
    assert!(matches!(inc.commit().await, Err(CustodyError::Step { .. })));
    assert!(matches!(inc.fetch().await, Err(CustodyError::Step { .. })));
    assert_eq!(inc.import(&s2).unwrap().imported.imported, 12);
    assert!(matches!(inc.import(&s2), Err(CustodyError::Step { .. })));
    assert_eq!(s2.len(), 12);
}

/// A queue moves A → B → A with the one-call API. The original host's queue stays frozen
/// after its offer (by design), so does its later `receive` import anything?
#[tokio::test]
async fn ping_pong_back_to_the_original_host() {
    let Some(srv) = server() else { return };
    let url = srv.url();
    let (q, a) = queue_of("pingpong.example", 20);
    let b = Sched::new();
    let (mxa, mxb) = (member(&url, "mxa", 6).await, member(&url, "mxb", 6).await);
    support::acquire_and_offer(&mxa, &a, &q, Some("mxb")).await;
    let got = mxb.receive(&b, q.clone()).await.unwrap();
    assert_eq!(b.len(), 20);
    mxb.offer(&b, q.clone(), got.epoch, Some("mxa"))
        .await
        .unwrap();
    let back = mxa.receive(&a, q.clone()).await.unwrap();
    // Custody: every id is either scheduled on A or handed back in `refused`.
    assert_eq!(
        back.imported.imported + back.imported.refused.len() + back.imported.present.len(),
        20
    );
    // What a user expects from "receive": the queue is scheduled on A again.
    assert_eq!(
        a.len(),
        20,
        "receive on the original host scheduled {} of 20 (refused: {}): its queue is still \
         frozen from its own earlier offer and nothing says so",
        back.imported.imported,
        back.imported.refused.len()
    );
}

/// A source offering while producers schedule and the dispatcher retries: a `Due` retried
/// during the freeze is forwarded, one dropped is delivered, a producer's schedule is
/// refused with its value. Every id ends exactly once; none fires early on the target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offer_while_producers_schedule_and_dispatcher_retries() {
    let Some(srv) = server() else { return };
    let url = srv.url();
    let q = "busy.example".to_string();
    let t0 = Instant::now();
    // 0..10 due now (will be in flight), 10..40 later.
    let s1 = partly_due(&q, 40, 10, t0, |id| {
        t0 + Duration::from_millis(300 + id * 10)
    });
    let (mx1, mx2) = (member(&url, "mx1", 3).await, member(&url, "mx2", 3).await);
    let epoch = mx1.acquire(q.as_bytes()).await.unwrap().record.epoch;
    let mut dues: Vec<_> = s1.pop_due(Instant::now(), 10).collect();
    assert_eq!(dues.len(), 10);
    let mut delivered = Vec::new();
    let mut handed_back = Vec::new();
    let mut out = mx1.outgoing(&s1, q.clone(), epoch);
    let in_flight = out.freeze().unwrap().to_vec();
    assert_eq!(in_flight.len(), 10);
    // producers keep scheduling: refused, value handed back.
    for id in 100..105u64 {
        match s1.schedule(q.clone(), id, t0, format!("v{id}")) {
            Err(ScheduleError::Frozen(v)) => handed_back.push((id, v)),
            other => panic!("schedule into a frozen queue: {other:?}"),
        }
    }
    out.prepare(None).await.unwrap();
    out.append_pending().await.unwrap();
    // the dispatcher: half retried (forwarded), half delivered, while await_in_flight polls.
    let retry_at = Instant::now() + Duration::from_millis(200);
    let mut forwarded = Vec::new();
    for due in dues.drain(..) {
        let id = *due.id();
        if id % 2 == 0 {
            assert_eq!(due.retry_at(retry_at), Ok(Retried::Forwarded));
            forwarded.push(id);
        } else {
            delivered.push(id);
            drop(due);
        }
    }
    out.await_in_flight().await.unwrap();
    out.forward().await.unwrap();
    out.seal().await.unwrap();
    let offered = out.finish().unwrap();
    assert_eq!(offered.entries, 30 + forwarded.len() as u64);
    let s2: Sched = Sched::new();
    let got = mx2.receive(&s2, q.clone()).await.unwrap();
    assert_eq!(got.imported.imported as u64, offered.entries);
    // Pop everything from s2, checking never early.
    let original: BTreeMap<u64, Instant> = (0..40u64)
        .map(|id| {
            (
                id,
                if id < 10 {
                    retry_at
                } else {
                    t0 + Duration::from_millis(300 + id * 10)
                },
            )
        })
        .collect();
    let mut fired = Vec::new();
    let until = Instant::now() + Duration::from_secs(5);
    while fired.len() < offered.entries as usize && Instant::now() < until {
        let now = Instant::now();
        for due in s2.pop_due(now, 100) {
            let id = *due.id();
            assert!(
                now >= original[&id],
                "id {id} fired {:?} early",
                original[&id] - now
            );
            fired.push(id);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut all: Vec<u64> = fired
        .iter()
        .chain(&delivered)
        .copied()
        .chain(handed_back.iter().map(|(i, _)| *i))
        .collect();
    all.sort_unstable();
    let want: Vec<u64> = (0..40).chain(100..105).collect();
    assert_eq!(all, want, "every id exactly once");
    assert_eq!(s1.len() + s1.in_flight_len(), 0);
}

/// The source's lease lapses after its pending chunks are in; a reclaimer takes them; the
/// source's forward (a retried timer) is fenced and hands back exactly the forwarded values.
#[tokio::test]
async fn fenced_source_gets_back_exactly_what_was_not_taken() {
    let Some(srv) = server() else { return };
    let url = srv.url();
    let q = "fenced.example".to_string();
    let t0 = Instant::now();
    let s1 = partly_due(&q, 20, 4, t0, |_| t0 + Duration::from_secs(60));
    let (mx1, mx3) = (member(&url, "mx1", 5).await, member(&url, "mx3", 5).await);
    let epoch = mx1.acquire(q.as_bytes()).await.unwrap().record.epoch;
    let dues: Vec<_> = s1.pop_due(Instant::now(), 4).collect();
    let mut out = mx1.outgoing(&s1, q.clone(), epoch);
    out.freeze().unwrap();
    out.prepare(None).await.unwrap();
    out.append_pending().await.unwrap();
    for due in dues {
        assert_eq!(
            due.retry_at(t0 + Duration::from_secs(1)),
            Ok(Retried::Forwarded)
        );
    }
    out.await_in_flight().await.unwrap();
    support::expire(&url, &mx1.protocol().keys(q.as_bytes()).owner).await;
    let mut inc = mx3.reclaim::<_, u64, String>(q.clone()).await.unwrap();
    let taken: Vec<u64> = inc.fetch().await.unwrap().iter().map(|e| e.id).collect();
    inc.commit().await.unwrap();
    let back = match out.forward().await {
        Err(CustodyError::Fenced { values, .. }) => values,
        other => panic!("forward after a reclaim: {other:?}"),
    };
    let s3 = Sched::new();
    inc.import(&s3).unwrap();
    let mut all: Vec<u64> = taken
        .iter()
        .copied()
        .chain(back.iter().map(|e| e.id))
        .collect();
    all.sort_unstable();
    assert_eq!(
        all,
        (0..20).collect::<Vec<_>>(),
        "taken {taken:?} back {:?}",
        back.iter().map(|e| e.id).collect::<Vec<_>>()
    );
    assert_eq!(s1.len() + s1.in_flight_len(), 0);
}

/// Hostile queue names and values: braces, newlines, NUL, Lua and RESP syntax, non-UTF-8
/// is not possible for `String` but is for the key bytes; two queues whose names differ only
/// by a brace never meet. Every value round-trips byte for byte.
#[tokio::test]
async fn hostile_names_and_values_round_trip() {
    let Some(srv) = server() else { return };
    let url = srv.url();
    let names = [
        "a",
        "a}",
        "{a",
        "{a}",
        "}{",
        "a\nb",
        "a\r\n*3\r\n$3\r\nDEL\r\n",
        "\0",
        "",
        "q'); redis.call('FLUSHALL') --",
        "tickwheel:{61}:owner",
    ];
    let values = |i: u64| match i % 6 {
        0 => String::new(),
        1 => "\0\r\n$-1\r\n".to_string(),
        2 => "]]; redis.call('FLUSHALL'); --[[".to_string(),
        3 => "{\"json\": [1,2,3]}".to_string(),
        4 => "é🦀\u{202e}".repeat(100),
        _ => "x".repeat(200_000),
    };
    let (mx1, mx2) = (member(&url, "mx1", 3).await, member(&url, "mx2", 3).await);
    for q in names {
        let q = q.to_string();
        let t0 = Instant::now();
        let s1 = filled(&q, 13, t0, values);
        let before = contents(&s1, &q);
        let epoch = match mx1.acquire(q.as_bytes()).await {
            Ok(a) => a.record.epoch,
            Err(e) => panic!("acquire {q:?}: {e}"),
        };
        mx1.offer(&s1, q.clone(), epoch, Some("mx2")).await.unwrap();
        let s2 = Sched::new();
        let got = mx2.receive(&s2, q.clone()).await.unwrap();
        assert_eq!(got.imported.imported, 13, "{q:?}");
        let after = contents(&s2, &q);
        for (id, (at, v)) in &before {
            let (at2, v2) = &after[id];
            assert_eq!(v, v2, "{q:?} id {id}");
            assert!(at2 >= at, "{q:?} id {id} earlier by {:?}", *at - *at2);
        }
    }
    // Every queue was moved: each ends OWNED by mx2, none touched another's record.
    for q in names {
        let v = mx2.read(q.as_bytes(), None).await.unwrap();
        let r = v.record.expect("record");
        assert_eq!(
            (r.state, r.owner.name.as_str()),
            (State::Owned, "mx2"),
            "{q:?}"
        );
        assert_eq!(r.queue, q.as_bytes());
    }
}

/// Commit after the lease lapsed, before anyone reclaimed: allowed (no one else acted). Then
/// a late reclaim finds OWNED and is refused: the committed owner keeps it.
#[tokio::test]
async fn late_commit_without_reclaim_then_reclaim_refused() {
    let Some((_srv, url, q, [mx1, mx2, mx3], _)) = offered("late.example", 9, None).await else {
        return;
    };
    let mut inc = mx2.claim::<_, u64, String>(q.clone()).await.unwrap();
    inc.fetch().await.unwrap();
    support::expire(&url, &mx1.protocol().keys(q.as_bytes()).owner).await;
    inc.commit().await.unwrap();
    let r = mx3.reclaim::<_, u64, String>(q.clone()).await;
    assert_refused(r, "reclaim of OWNED", |r| {
        matches!(r, Rejection::WrongState(_))
    });
    let s2 = Sched::new();
    assert_eq!(inc.import(&s2).unwrap().imported.imported, 9);
}

/// Redis unreachable mid-offer with the one-call `Custody::offer`: the offer is aborted and
/// the values are back in the scheduler, the queue unfrozen.
#[tokio::test]
async fn one_call_offer_with_redis_down_loses_no_value() {
    let Some(mut srv) = server() else { return };
    let url = srv.url();
    let (q, s1) = queue_of("down.example", 8);
    let mx1 = member(&url, "mx1", 4).await;
    let epoch = mx1.acquire(q.as_bytes()).await.unwrap().record.epoch;
    srv.kill9().unwrap();
    let r = mx1.offer(&s1, q.clone(), epoch, None).await;
    let Err(err) = r else {
        panic!("offer with redis down succeeded")
    };
    assert!(err.is_retryable(), "{err}");
    let _ = Error::EmptyTarget; // (type in scope)
    assert!(!s1.is_frozen(&q), "the aborted offer unfroze the queue");
    let in_sched = s1.len() + s1.take_forwarded(&q).len();
    assert_eq!(
        in_sched,
        8,
        "Custody::offer failed retryably ({err}) and the queue's {} timers are neither in the \
         scheduler nor in the error",
        8 - in_sched
    );
}

/// The one-call API under live load: a producer thread schedules ids 0..N into the queue
/// while a dispatcher thread pops due timers and retries every third (with `Due::retry_at`)
/// and delivers the rest, and the source runs `Custody::offer`. Then the target receives,
/// and everything is dispatched. Each id ends exactly once: delivered on the source,
/// refused to the producer, or delivered on the target; none early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offer_under_live_producer_and_dispatcher_threads() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let Some(srv) = server() else { return };
    let url = srv.url();
    for round in 0..3 {
        let q = format!("live{round}.example");
        let t0 = Instant::now();
        let s1: Arc<Sched> = Arc::new(Scheduler::builder().origin(t0).build());
        let deadlines: Arc<Mutex<BTreeMap<u64, Instant>>> = Arc::default();
        let refused: Arc<Mutex<Vec<u64>>> = Arc::default();
        let delivered: Arc<Mutex<Vec<u64>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        const N: u64 = 4_000;
        let producer = {
            let (s1, q, d, r) = (s1.clone(), q.clone(), deadlines.clone(), refused.clone());
            std::thread::spawn(move || {
                for id in 0..N {
                    let at = Instant::now() + Duration::from_millis(id % 50);
                    d.lock().unwrap().insert(id, at);
                    match s1.schedule(q.clone(), id, at, format!("v{id}")) {
                        Ok(()) => {}
                        Err(ScheduleError::Frozen(_)) => r.lock().unwrap().push(id),
                        Err(e) => panic!("schedule {id}: {e:?}"),
                    }
                    if id % 64 == 0 {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            })
        };
        let dispatcher = {
            let (s1, d, del, stop) = (
                s1.clone(),
                deadlines.clone(),
                delivered.clone(),
                stop.clone(),
            );
            std::thread::spawn(move || {
                let mut retried = std::collections::HashSet::new();
                while !stop.load(Ordering::Relaxed) {
                    let now = Instant::now();
                    for due in s1.pop_due(now, 64) {
                        let id = *due.id();
                        assert!(now >= due.deadline(), "source: id {id} early");
                        if id % 3 == 0 && retried.insert(id) {
                            let at = Instant::now() + Duration::from_millis(30);
                            d.lock().unwrap().insert(id, at);
                            due.retry_at(at).expect("retry");
                        } else {
                            del.lock().unwrap().push(id);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let (mx1, mx2) = (member(&url, "mx1", 50).await, member(&url, "mx2", 50).await);
        let offered = support::acquire_and_offer(&mx1, &s1, &q, Some("mx2")).await;
        producer.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        dispatcher.join().unwrap();
        let s2 = Sched::new();
        let got = mx2.receive(&s2, q.clone()).await.unwrap();
        assert_eq!(got.imported.imported as u64, offered.entries);
        let mut fired = Vec::new();
        let until = Instant::now() + Duration::from_secs(10);
        let d = deadlines.lock().unwrap().clone();
        while fired.len() < offered.entries as usize && Instant::now() < until {
            let now = Instant::now();
            for due in s2.pop_due(now, 1000) {
                let id = *due.id();
                assert!(now >= d[&id], "target: id {id} early by {:?}", d[&id] - now);
                fired.push(id);
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let mut all: Vec<u64> = fired;
        all.extend(delivered.lock().unwrap().iter());
        all.extend(refused.lock().unwrap().iter());
        all.sort_unstable();
        let dups: Vec<_> = all
            .windows(2)
            .filter(|w| w[0] == w[1])
            .map(|w| w[0])
            .collect();
        assert!(dups.is_empty(), "round {round}: doubled ids {dups:?}");
        assert_eq!(
            all.len() as u64,
            N,
            "round {round}: {} ids missing",
            N - all.len() as u64
        );
        assert_eq!(s1.len() + s1.in_flight_len(), 0);
    }
}

/// An empty queue (no timers at all) is offered, claimed and committed like any other.
#[tokio::test]
async fn empty_queue_moves() {
    let Some((_srv, _, q, [_, mx2, _], o)) = offered("empty.example", 0, None).await else {
        return;
    };
    assert_eq!((o.chunks, o.entries), (0, 0));
    let s2 = Sched::new();
    let r = mx2.receive(&s2, q.clone()).await.unwrap();
    assert_eq!(r.imported.imported, 0);
    let v = mx2.read(q.as_bytes(), None).await.unwrap().record.unwrap();
    assert_eq!((v.state, v.owner.name.as_str()), (State::Owned, "mx2"));
}
