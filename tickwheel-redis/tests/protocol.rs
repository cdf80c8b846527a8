//! The steps one by one against a real redis-server: a whole handoff, fencing, retries.

mod support;

use support::rejection;
use tickwheel_redis::{Effect, Protocol, Rejection, State, Token};

const Q: &[u8] = b"example.com";

#[tokio::test]
async fn a_whole_handoff_with_retries() {
    let Some((_server, [a, b, c])) = support::with_members(["a", "b", "c"]).await else {
        return;
    };

    let t = Token::generate();
    let owned = a.acquire(Q, &t).await.expect("acquire");
    assert_eq!(
        (owned.record.state, owned.record.epoch, owned.effect),
        (State::Owned, 1, Effect::Changed)
    );
    assert_eq!(
        a.acquire(Q, &t).await.expect("again").effect,
        Effect::Repeated
    );
    assert!(matches!(
        rejection(b.acquire(Q, &Token::generate()).await),
        Rejection::Taken(_)
    ));

    let p = a
        .prepare(Q, 1, Some("b"), &Token::generate())
        .await
        .expect("prepare");
    assert_eq!(p.record.state, State::Preparing);
    assert!(p.record.deadline_ms.is_some_and(|d| d > p.now_ms));
    let t0 = Token::generate();
    a.append(Q, 1, 0, b"chunk0", 2, &t0)
        .await
        .expect("append 0");
    assert_eq!(
        a.append(Q, 1, 0, b"chunk0", 2, &t0)
            .await
            .expect("retry")
            .effect,
        Effect::Repeated
    );
    // An older chunk re-sent with a new token is recognised by its bytes.
    a.append(Q, 1, 1, b"chunk1", 3, &Token::generate())
        .await
        .expect("append 1");
    assert_eq!(
        a.append(Q, 1, 0, b"chunk0", 2, &Token::generate())
            .await
            .expect("old")
            .effect,
        Effect::Repeated
    );
    assert!(matches!(
        rejection(a.append(Q, 1, 0, b"other", 2, &Token::generate()).await),
        Rejection::ChunkConflict { index: 0, .. }
    ));
    assert!(matches!(
        rejection(a.append(Q, 1, 5, b"x", 1, &Token::generate()).await),
        Rejection::OutOfOrder { expected: 2, .. }
    ));
    assert!(matches!(
        rejection(a.seal(Q, 1, 2, 4, &Token::generate()).await),
        Rejection::CountMismatch {
            chunks_in_redis: 2,
            ..
        }
    ));
    // A stale epoch is fenced, even from the owner's own name and boot.
    assert!(matches!(
        rejection(a.seal(Q, 0, 2, 5, &Token::generate()).await),
        Rejection::Fenced { .. }
    ));
    let sealed = a.seal(Q, 1, 2, 5, &Token::generate()).await.expect("seal");
    assert_eq!(
        (sealed.record.state, sealed.record.entries),
        (State::Offered, 5)
    );

    // Meant for b: c may not claim before the deadline.
    assert!(matches!(
        rejection(c.claim(Q, &Token::generate()).await),
        Rejection::NotOffered(_)
    ));
    let claimed = support::claimed_once(&b, Q, 2).await;
    assert_eq!(
        claimed
            .record
            .source
            .as_ref()
            .map(|(m, e)| (m.name.as_str(), *e)),
        Some(("a", 1))
    );
    assert_eq!(b.fetch(Q, 2, 1).await.expect("fetch"), b"chunk1");
    assert!(matches!(
        rejection(b.fetch(Q, 2, 2).await),
        Rejection::MissingChunk { index: 2, .. }
    ));
    assert!(matches!(
        rejection(c.fetch(Q, 2, 0).await),
        Rejection::Fenced { .. }
    ));
    // The source, fenced after its seal, learns that both chunks were taken.
    match rejection(a.abort(Q, 1, &Token::generate()).await) {
        Rejection::Fenced {
            taken_chunks,
            record,
        } => {
            assert_eq!(taken_chunks, Some(2));
            assert_eq!(record.owner.name, "b");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        rejection(c.reclaim(Q, &Token::generate()).await),
        Rejection::NotExpired(_)
    ));
    let tc = Token::generate();
    let done = b.commit(Q, 2, &tc).await.expect("commit");
    assert_eq!(
        (done.record.state, done.record.chunks, done.record.source),
        (State::Owned, 0, None)
    );
    assert_eq!(
        b.commit(Q, 2, &tc).await.expect("retry").effect,
        Effect::Repeated
    );
    let view = b.read(Q, Some(1)).await.expect("read");
    assert_eq!(view.taken_chunks, Some(2));
    assert_eq!(view.record.map(|r| r.owner.name), Some("b".to_owned()));
}

/// `a` acquires `Q` (epoch 1), prepares for any target and appends chunk 0 (`c0`).
async fn one_chunk_appended(a: &Protocol) {
    a.acquire(Q, &Token::generate()).await.expect("acquire");
    a.prepare(Q, 1, None, &Token::generate())
        .await
        .expect("prepare");
    a.append(Q, 1, 0, b"c0", 1, &Token::generate())
        .await
        .expect("append");
}

#[tokio::test]
async fn reclaim_of_an_abandoned_prepare_tells_the_source_what_was_taken() {
    let Some((server, [a, c])) = support::with_members(["a", "c"]).await else {
        return;
    };
    one_chunk_appended(&a).await;
    support::expire(&server.url(), &a.keys(Q).owner).await;
    let r = c.reclaim(Q, &Token::generate()).await.expect("reclaim");
    assert_eq!(
        (r.record.state, r.record.epoch, r.record.chunks),
        (State::Claimed, 2, 1)
    );
    // The source's next write is fenced, deletes included, and says one chunk was taken.
    match rejection(a.append(Q, 1, 1, b"c1", 1, &Token::generate()).await) {
        Rejection::Fenced { taken_chunks, .. } => assert_eq!(taken_chunks, Some(1)),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        rejection(a.abort(Q, 1, &Token::generate()).await),
        Rejection::Fenced { .. }
    ));
    assert_eq!(c.fetch(Q, 2, 0).await.expect("data kept"), b"c0");
}

#[tokio::test]
async fn recover_after_a_restart_of_the_member() {
    let Some((server, [a])) = support::with_members(["a"]).await else {
        return;
    };
    one_chunk_appended(&a).await;
    let a2 = support::member(&server, "a").await;
    let r = a2.recover(Q, &Token::generate()).await.expect("recover");
    assert_eq!(
        (r.record.state, r.record.epoch, r.record.chunks),
        (State::Owned, 2, 0)
    );
    // The old boot is fenced; nothing of its offer was taken.
    match rejection(a.seal(Q, 1, 1, 1, &Token::generate()).await) {
        Rejection::Fenced { taken_chunks, .. } => assert_eq!(taken_chunks, Some(0)),
        other => panic!("{other:?}"),
    }
    let other = support::member(&server, "b").await;
    assert!(matches!(
        rejection(other.recover(Q, &Token::generate()).await),
        Rejection::Taken(_)
    ));
}
