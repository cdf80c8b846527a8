//! The high-level handoff against a real redis-server: a whole move, a forwarded retry, a
//! fenced source getting exactly its unsent values back, abort, bad data, outcome.

mod support;

use support::moving::custody_pair_on;

use std::time::{Duration, Instant};

use support::{Sched, contents, custody_member as member, filled};
use tickwheel::sync::{FrozenEntry, Retried, Scheduler};
use tickwheel_redis::{Custody, CustodyError, Outcome, Outgoing, Record, Rejection, State};

/// `a` acquires `q` and starts its handoff of `src`'s queue `q`: frozen, prepared for any
/// target. The epoch, and the handoff.
async fn prepared<'a>(
    a: &'a Custody,
    src: &'a Sched,
    q: &str,
) -> (u64, Outgoing<'a, String, u64, String>) {
    let epoch = support::acquire(a, q).await;
    let mut out = a.outgoing(src, q.to_owned(), epoch);
    out.freeze().expect("freeze");
    out.prepare(None).await.expect("prepare");
    (epoch, out)
}

/// A zombie source resumed after its queue was reclaimed: nothing in flight, nothing to
/// forward, and its seal fenced. The chunks taken, the values handed back and the record;
/// panics on any other outcome.
async fn fenced_at_the_seal(
    out: &mut Outgoing<'_, String, u64, String>,
) -> (u64, Vec<FrozenEntry<u64, String>>, Record) {
    out.await_in_flight().await.expect("nothing in flight");
    out.forward().await.expect("nothing forwarded: no call");
    match out.seal().await {
        Err(CustodyError::Fenced {
            taken_chunks,
            values,
            record,
        }) => (taken_chunks, values, *record),
        other => panic!("{:?}", other.err()),
    }
}

/// After the appends: waits for what is in flight, forwards what came back, seals.
async fn sealed(out: &mut Outgoing<'_, String, u64, String>) {
    out.await_in_flight().await.expect("in flight");
    out.forward().await.expect("forward");
    out.seal().await.expect("seal");
}

#[tokio::test]
async fn a_queue_moves_whole_and_no_deadline_gets_earlier() {
    let Some((_server, _url, a, b, q, t0)) = custody_pair_on("example.com", 7).await else {
        return;
    };
    let src = filled(&q, 50, t0);
    let before = contents(&src, &q);
    let dst = support::empty(t0);
    let epoch = support::acquire(&a, &q).await;
    let offered = a
        .offer(&src, q.clone(), epoch, Some("b"))
        .await
        .expect("offer");
    assert_eq!((offered.chunks, offered.entries), (8, 50));
    assert_eq!(src.queue_len(&q), 0);
    let received = b.receive(&dst, q.clone()).await.expect("receive");
    assert_eq!(received.epoch, epoch + 1);
    assert_eq!(received.imported.imported, 50);
    let after = contents(&dst, &q);
    assert_eq!(after.len(), before.len());
    for (id, (at, v)) in &before {
        let (at2, v2) = &after[id];
        assert_eq!(v, v2);
        assert!(at2 >= at, "id {id} got earlier");
    }
    match a
        .outcome(q.as_bytes(), epoch, Duration::ZERO)
        .await
        .expect("outcome")
    {
        Outcome::Committed {
            record,
            taken_chunks,
        } => {
            assert_eq!((record.owner.name.as_str(), taken_chunks), ("b", 8));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn an_in_flight_timer_that_comes_back_is_forwarded() {
    let Some((_server, _url, a, b, q, t0)) = custody_pair_on("q", 100).await else {
        return;
    };
    let src = support::empty(t0);
    src.schedule(q.clone(), 1, t0, "due".into())
        .expect("schedule");
    src.schedule(q.clone(), 2, t0 + Duration::from_secs(60), "later".into())
        .expect("schedule");
    let mut batch = src.pop_due(t0 + Duration::from_millis(5), 10);
    let due = batch.next().expect("one due");
    let epoch = a.acquire(b"q").await.expect("acquire").record.epoch;
    let mut out = a.outgoing(&src, q.clone(), epoch);
    assert_eq!(out.freeze().expect("freeze"), [1]);
    out.prepare(None).await.expect("prepare");
    out.append_pending().await.expect("append");
    assert_eq!(
        due.retry_at(t0 + Duration::from_secs(30)),
        Ok(Retried::Forwarded)
    );
    drop(batch);
    sealed(&mut out).await;
    let offered = out.finish().expect("finish");
    assert_eq!(offered.entries, 2);
    let dst = support::empty(t0);
    let r = b.receive(&dst, q.clone()).await.expect("receive");
    assert_eq!(r.imported.imported, 2);
    assert_eq!(
        contents(&dst, &q).keys().copied().collect::<Vec<_>>(),
        [1, 2]
    );
}

#[tokio::test]
async fn a_fenced_source_gets_exactly_its_unsent_values_back() {
    let Some(server) = support::server() else {
        return;
    };
    let url = server.url();
    let (a, c) = (member(&url, "a", 3).await, member(&url, "c", 3).await);
    let q = "q".to_string();
    let t0 = Instant::now();
    let src = filled(&q, 10, t0);
    let (_, mut out) = prepared(&a, &src, &q).await;
    out.append_pending().await.expect("append"); // 4 chunks: 3 + 3 + 3 + 1
    // The source stalls past its lease: another member takes what is in.
    support::expire(&url, &a.protocol().keys(b"q").owner).await;
    let mut inc = c
        .reclaim::<_, u64, String>(q.clone())
        .await
        .expect("reclaim");
    let taken: Vec<u64> = inc
        .fetch()
        .await
        .expect("fetch")
        .iter()
        .map(|e| e.id)
        .collect();
    inc.commit().await.expect("commit");
    assert_eq!(taken.len(), 10);
    // The zombie resumes: fenced, and nothing comes back because all 4 chunks were taken.
    let (taken_chunks, values, record) = fenced_at_the_seal(&mut out).await;
    assert_eq!((taken_chunks, values.len()), (4, 0));
    assert_eq!(record.owner.name, "c");

    // Again with the reclaim between two appends: the values of the chunks not taken come
    // back, in order.
    let q2 = "q2".to_string();
    let src = filled(&q2, 10, t0);
    let epoch = a.acquire(b"q2").await.expect("acquire").record.epoch;
    let frozen = src.freeze_queue(&q2);
    src.unfreeze_queue(&q2);
    let all: Vec<u64> = frozen.pending.iter().map(|e| e.id).collect();
    src.import(q2.clone(), frozen.pending);
    let mut out = a.outgoing(&src, q2.clone(), epoch);
    out.freeze().expect("freeze");
    out.prepare(None).await.expect("prepare");
    // Two chunks in by hand (what a source killed mid-append leaves), then reclaimed.
    let keys = a.protocol().keys(b"q2");
    out.append_pending().await.expect("append");
    support::command(&url, redis::cmd("HDEL").arg(&keys.data).arg("2").arg("3")).await;
    support::expire(&url, &keys.owner).await;
    let got = c
        .reclaim::<_, u64, String>(q2.clone())
        .await
        .expect("reclaim");
    assert_eq!(got.record().chunks, 2);
    let (taken_chunks, values, _) = fenced_at_the_seal(&mut out).await;
    assert_eq!(taken_chunks, 2);
    let back: Vec<u64> = values.iter().map(|e| e.id).collect();
    assert_eq!(back, all[6..], "the chunks from 2 on, in order");
}

#[tokio::test]
async fn abort_gives_every_value_back_to_the_scheduler() {
    let Some(server) = support::server() else {
        return;
    };
    let a = member(&server.url(), "a", 4).await;
    let q = "q".to_string();
    let t0 = Instant::now();
    let src = filled(&q, 9, t0);
    let before = contents(&src, &q);
    let epoch = a.acquire(b"q").await.expect("acquire").record.epoch;
    let mut out = a.outgoing(&src, q.clone(), epoch);
    out.freeze().expect("freeze");
    assert!(matches!(out.seal().await, Err(CustodyError::Step { .. })));
    out.prepare(None).await.expect("prepare");
    out.append_pending().await.expect("append");
    let imported = out.abort().await.expect("abort");
    assert_eq!(imported.imported, 9);
    assert!(!src.is_frozen(&q));
    assert_eq!(contents(&src, &q), before);
    let view = a.read(b"q", None).await.expect("read");
    assert_eq!(
        view.record.map(|r| (r.state, r.chunks)),
        Some((State::Owned, 0))
    );
    assert!(matches!(
        a.outcome(b"q", epoch, Duration::ZERO)
            .await
            .expect("outcome"),
        Outcome::Returned(_)
    ));
}

#[tokio::test]
async fn a_corrupt_chunk_is_an_error_and_the_claim_stays() {
    let Some((_server, url, a, b)) = support::custody_pair(5).await else {
        return;
    };
    let q = "q".to_string();
    let src = filled(&q, 10, Instant::now());
    let epoch = a.acquire(b"q").await.expect("acquire").record.epoch;
    a.offer(&src, q.clone(), epoch, None).await.expect("offer");
    let keys = a.protocol().keys(b"q");
    support::command(
        &url,
        redis::cmd("HSET").arg(&keys.data).arg("1").arg("garbage"),
    )
    .await;
    let mut inc = b.claim::<_, u64, String>(q.clone()).await.expect("claim");
    assert!(matches!(
        inc.fetch().await,
        Err(CustodyError::Chunk { index: 1, .. })
    ));
    assert!(matches!(inc.commit().await, Err(CustodyError::Step { .. })));
    let dst: Sched = Scheduler::new();
    assert!(matches!(inc.import(&dst), Err(CustodyError::Step { .. })));
    let view = b.read(b"q", None).await.expect("read");
    assert_eq!(
        view.record.map(|r| (r.state, r.chunks)),
        Some((State::Claimed, 2))
    );
    // A second claimer loses.
    let c = member(&url, "c", 5).await;
    let lost = c.claim::<_, u64, String>(q).await.err().expect("a loser");
    assert!(matches!(lost.rejection(), Some(Rejection::NotOffered(_))));
}

#[tokio::test]
async fn redis_gone_is_a_retryable_error_and_the_step_resumes() {
    let Some(mut server) = support::server() else {
        return;
    };
    let url = server.url();
    let a = member(&url, "a", 3).await;
    let q = "q".to_string();
    let src = filled(&q, 8, Instant::now());
    let (_, mut out) = prepared(&a, &src, &q).await;
    server.kill9().expect("kill");
    let e = out.append_pending().await.expect_err("redis is down");
    assert!(e.is_retryable(), "{e}");
    assert_eq!(out.held(), 8, "nothing lost");
    server.restart().expect("restart");
    out.append_pending()
        .await
        .expect("append after the restart");
    sealed(&mut out).await;
    assert_eq!(out.finish().expect("finish").entries, 8);
}

/// `stage` names the ids of each chunk before it is sent (pending, then forwarded), the same
/// on a second call, and the chunks sent are exactly those.
#[tokio::test]
async fn stage_names_each_chunk_before_it_is_sent() {
    let Some((_server, _url, a, b, q, t0)) = custody_pair_on("q", 3).await else {
        return;
    };
    let src = filled(&q, 7, t0);
    src.schedule(q.clone(), 100, t0, "due".into())
        .expect("schedule");
    let mut batch = src.pop_due(t0 + Duration::from_millis(5), 10);
    let due = batch.next().expect("one due");
    let epoch = a.acquire(b"q").await.expect("acquire").record.epoch;
    let mut out = a.outgoing(&src, q.clone(), epoch);
    out.freeze().expect("freeze");
    assert!(matches!(
        out.stage().await,
        Err(CustodyError::Step {
            called: "stage",
            ..
        })
    ));
    out.prepare(None).await.expect("prepare");
    let staged = out.stage().await.expect("stage");
    assert_eq!(out.stage().await.expect("stage again"), staged);
    assert_eq!(
        staged
            .iter()
            .map(|(i, ids)| (*i, ids.len()))
            .collect::<Vec<_>>(),
        [(0, 3), (1, 3), (2, 1)]
    );
    let mut ids: Vec<u64> = staged.iter().flat_map(|(_, ids)| ids.clone()).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..7).collect::<Vec<_>>());
    assert_eq!(out.chunks_sent(), 0, "stage sends nothing");
    out.append_pending().await.expect("append");
    assert_eq!(out.chunks_sent(), 3);
    due.retry_at(t0 + Duration::from_secs(30)).expect("retry");
    drop(batch);
    out.await_in_flight().await.expect("in flight");
    assert_eq!(out.stage().await.expect("stage"), [(3, vec![100])]);
    out.forward().await.expect("forward");
    out.seal().await.expect("seal");
    assert_eq!(out.finish().expect("finish").entries, 8);
    let dst = support::empty(t0);
    let r = b.receive(&dst, q.clone()).await.expect("receive");
    assert_eq!(r.imported.imported, 8);
}
