//! Steps under an external epoch (a coordinator's fencing token) against a real redis-server:
//! `adopt`, `claim_at`, `reclaim_at`. A stale epoch is refused, a leftover sealed offer is
//! imported once, an unsealed offer is discarded, a retry with the same token is `Repeated`.

mod support;

use support::moving::custody_pair_on;

use std::time::Duration;

use support::rejection;
use support::{Sched, filled};
use tickwheel::sync::FrozenEntry;
use tickwheel_redis::{Adopted, Custody, Effect, Error, Rejection, State, Token};

#[tokio::test]
async fn adopt_takes_the_external_epoch_and_refuses_a_stale_one() {
    let Some((_server, [a, b])) = support::with_members(["a", "b"]).await else {
        return;
    };
    let q = b"q1";
    let t = Token::generate();
    let got = a.adopt(q, 100, &t).await.expect("adopt");
    assert_eq!((got.record.state, got.record.epoch), (State::Owned, 100));
    assert_eq!(got.effect, Effect::Changed);
    // The same token again: the reply was lost, the step is not repeated.
    let again = a.adopt(q, 100, &t).await.expect("retry");
    assert_eq!(again.effect, Effect::Repeated);
    // A token not above the record's epoch: fenced, nothing changed.
    for stale in [100, 99, 1] {
        match rejection(b.adopt(q, stale, &Token::generate()).await) {
            Rejection::Fenced { record, .. } => assert_eq!(record.epoch, 100),
            other => panic!("{other:?}"),
        }
    }
    // A larger token takes it; the former holder's steps at its epoch are refused.
    let got = b.adopt(q, 130, &Token::generate()).await.expect("adopt");
    assert_eq!(
        (got.record.owner.name.as_str(), got.record.epoch),
        ("b", 130)
    );
    let e = a.renew(q, 100, &Token::generate()).await.err();
    assert!(e.as_ref().is_some_and(Error::is_fenced), "{e:?}");
    let e = a.prepare(q, 100, None, &Token::generate()).await.err();
    assert!(e.as_ref().is_some_and(Error::is_fenced), "{e:?}");
    // Epoch 0 is no token.
    assert!(matches!(
        a.adopt(b"q0", 0, &Token::generate()).await,
        Err(Error::UnexpectedReply(_))
    ));
}

#[tokio::test]
async fn adopt_discards_an_unsealed_offer_and_the_source_keeps_every_value() {
    let Some((_server, _url, a, b, q, t0)) = custody_pair_on("q2", 4).await else {
        return;
    };
    let src = filled(&q, 10, t0);
    let epoch = match a.adopt::<_, u64, String>(q.clone(), 7).await {
        Ok(Adopted::Owned(x)) => x.record.epoch,
        other => panic!("{other:?}"),
    };
    assert_eq!(epoch, 7);
    let mut out = a.outgoing(&src, q.clone(), epoch);
    out.freeze().expect("freeze");
    out.prepare(Some("b")).await.expect("prepare");
    out.append_pending().await.expect("append");
    // The source stalls before the seal; b adopts with a larger token.
    let adopted = b
        .adopt::<_, u64, String>(q.clone(), 9)
        .await
        .expect("adopt");
    let record = match adopted {
        Adopted::Owned(x) => x.record,
        other => panic!("an unsealed offer is no leftover: {other:?}"),
    };
    assert_eq!(
        (record.state, record.chunks, record.entries),
        (State::Owned, 0, 0)
    );
    assert_eq!(record.epoch, 9);
    // The source is fenced and gets every value back: none of its chunks was taken.
    out.await_in_flight().await.expect("in flight");
    out.forward().await.expect("forward");
    match out.seal().await {
        Err(tickwheel_redis::CustodyError::Fenced {
            taken_chunks,
            values,
            ..
        }) => {
            assert_eq!(taken_chunks, 0);
            assert_eq!(values.len(), 10);
        }
        other => panic!("{:?}", other.err().map(|e| e.to_string())),
    }
}

/// `a` adopts `q` at `epoch` (no record yet: OWNED) and offers `src`'s timers to `to`.
async fn adopt_and_offer(a: &Custody, q: &str, epoch: u64, src: &Sched, to: &str) {
    let Ok(Adopted::Owned(x)) = a.adopt::<_, u64, String>(q.to_string(), epoch).await else {
        panic!("adopt");
    };
    a.offer(src, q.to_string(), x.record.epoch, Some(to))
        .await
        .expect("offer");
}

#[tokio::test]
async fn a_leftover_sealed_offer_is_claimed_by_the_adopter_and_imported_once() {
    let Some((_server, _url, a, b, q, t0)) = custody_pair_on("q3", 3).await else {
        return;
    };
    adopt_and_offer(&a, &q, 20, &filled(&q, 8, t0), "c").await;
    // The source is gone and its target never came: b adopts with a larger token.
    let dst = support::empty(t0);
    // What the durable store gave back first (some ids overlap the offer).
    let recovered: Vec<_> = (5..12)
        .map(|id| FrozenEntry {
            id,
            at: t0 + Duration::from_secs(90),
            value: format!("v{id}"),
        })
        .collect();
    dst.import(q.clone(), recovered);
    let inc = match b
        .adopt::<_, u64, String>(q.clone(), 25)
        .await
        .expect("adopt")
    {
        Adopted::Leftover(inc) => inc,
        other => panic!("{other:?}"),
    };
    assert_eq!(inc.epoch(), 25);
    let received = b.complete(inc, &dst).await.expect("complete");
    assert_eq!(received.epoch, 25);
    assert_eq!(received.imported.imported, 5, "ids 0..5 new");
    assert_eq!(received.imported.present.len(), 3, "ids 5..8 de-duplicated");
    assert_eq!(dst.queue_len(&q), 12);
    // Committed: nothing is left; a later adopter finds OWNED.
    let view = b.read(q.as_bytes(), None).await.expect("read");
    let record = view.record.expect("record");
    assert_eq!((record.state, record.chunks), (State::Owned, 0));
    match a.adopt::<_, u64, String>(q.clone(), 30).await {
        Ok(Adopted::Owned(x)) => assert_eq!(x.record.epoch, 30),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn claim_at_and_reclaim_at_take_the_given_epoch() {
    let Some((_server, url, a, b, q, t0)) = custody_pair_on("q4", 3).await else {
        return;
    };
    let p = b.protocol().clone();
    adopt_and_offer(&a, &q, 40, &filled(&q, 5, t0), "b").await;
    match rejection(p.claim_at(q.as_bytes(), 40, &Token::generate()).await) {
        Rejection::Fenced { record, .. } => assert_eq!(record.state, State::Offered),
        other => panic!("{other:?}"),
    }
    let t = Token::generate();
    let got = p.claim_at(q.as_bytes(), 44, &t).await.expect("claim_at");
    assert_eq!((got.record.state, got.record.epoch), (State::Claimed, 44));
    let again = p.claim_at(q.as_bytes(), 44, &t).await.expect("retry");
    assert_eq!(again.effect, Effect::Repeated);
    // b stalls; after its deadline a reclaims at a larger token and completes.
    support::expire(&url, &p.keys(q.as_bytes()).owner).await;
    let ap = a.protocol().clone();
    match rejection(ap.reclaim_at(q.as_bytes(), 44, &Token::generate()).await) {
        Rejection::Fenced { .. } => {}
        other => panic!("{other:?}"),
    }
    let inc = a
        .reclaim_at::<_, u64, String>(q.clone(), 50)
        .await
        .expect("reclaim_at");
    assert_eq!(inc.epoch(), 50);
    let dst = support::empty(t0);
    let received = a.complete(inc, &dst).await.expect("complete");
    assert_eq!(received.imported.imported, 5);
    // b's commit at 44 is fenced.
    let e = p.commit(q.as_bytes(), 44, &Token::generate()).await.err();
    assert!(e.as_ref().is_some_and(Error::is_fenced), "{e:?}");
}
