//! Steps out of order, wrong epochs and boots, other members' claims: refused, nothing changed,
//! and the fenced counts agree with what the reclaimer gets.

use super::*;

#[tokio::test]
async fn steps_out_of_order_are_refused_and_change_nothing() {
    let Some((_server, [a, b])) = support::with_members(["a", "b"]).await else {
        return;
    };
    let q = b"order";
    // Nothing yet.
    assert_eq!(
        rej(a.prepare(q, 1, None, &Token::generate()).await),
        Rejection::Absent
    );
    assert_eq!(rej(a.claim(q, &Token::generate()).await), Rejection::Absent);
    assert_eq!(
        rej(a.reclaim(q, &Token::generate()).await),
        Rejection::Absent
    );
    assert_eq!(
        rej(a.commit(q, 1, &Token::generate()).await),
        Rejection::Absent
    );
    assert_eq!(
        rej(a.recover(q, &Token::generate()).await),
        Rejection::Absent
    );
    assert!(matches!(rej(a.fetch(q, 1, 0).await), Rejection::Absent));
    let e = a.acquire(q, &Token::generate()).await.unwrap().record.epoch;
    // OWNED.
    for r in [
        a.append(q, e, 0, b"x", 1, &Token::generate()).await,
        a.seal(q, e, 0, 0, &Token::generate()).await,
        a.abort(q, e, &Token::generate()).await,
        a.commit(q, e, &Token::generate()).await,
    ] {
        assert!(matches!(rej(r), Rejection::WrongState(_)));
    }
    let r = claim_and_reclaim(&b, q).await;
    assert!(
        matches!(r, (Rejection::NotOffered(_), Rejection::WrongState(_))),
        "{r:?}"
    );
    assert_rejected!(a.fetch(q, e, 0).await, Rejection::WrongState(_));
    // PREPARING.
    a.prepare(q, e, None, &Token::generate()).await.unwrap();
    assert_rejected!(
        a.prepare(q, e, None, &Token::generate()).await,
        Rejection::WrongState(_)
    );
    assert_rejected!(
        a.append(q, e, 1, b"x", 1, &Token::generate()).await,
        Rejection::OutOfOrder { expected: 0, .. }
    );
    a.append(q, e, 0, b"x", 1, &Token::generate())
        .await
        .unwrap();
    let again = a
        .append(q, e, 0, b"x", 1, &Token::generate())
        .await
        .unwrap();
    assert_eq!(again.effect, Effect::Repeated);
    assert_rejected!(
        a.append(q, e, 0, b"y", 1, &Token::generate()).await,
        Rejection::ChunkConflict { index: 0, .. }
    );
    assert_rejected!(
        a.seal(q, e, 2, 1, &Token::generate()).await,
        Rejection::CountMismatch {
            chunks_in_redis: 1,
            ..
        }
    );
    assert_rejected!(
        a.seal(q, e, 1, 2, &Token::generate()).await,
        Rejection::CountMismatch { .. }
    );
    let r = claim_and_reclaim(&b, q).await;
    assert!(
        matches!(r, (Rejection::NotOffered(_), Rejection::NotExpired(_))),
        "{r:?}"
    );
    assert_rejected!(
        a.commit(q, e, &Token::generate()).await,
        Rejection::WrongState(_)
    );
    // OFFERED.
    a.seal(q, e, 1, 1, &Token::generate()).await.unwrap();
    for r in [
        a.append(q, e, 1, b"x", 1, &Token::generate()).await,
        a.abort(q, e, &Token::generate()).await,
        a.renew(q, e, &Token::generate()).await,
        a.prepare(q, e, None, &Token::generate()).await,
        a.commit(q, e, &Token::generate()).await,
    ] {
        assert!(matches!(rej(r), Rejection::WrongState(_)));
    }
    assert!(
        matches!(rej(a.fetch(q, e, 0).await), Rejection::WrongState(_)),
        "source fetch"
    );
    assert_rejected!(
        b.reclaim(q, &Token::generate()).await,
        Rejection::NotExpired(_)
    );
    let view = a.read(q, None).await.unwrap().record.unwrap();
    assert_eq!(
        (view.state, view.epoch, view.chunks, view.entries),
        (State::Offered, e, 1, 1)
    );
}

#[tokio::test]
async fn wrong_epochs_boots_and_other_members_are_fenced() {
    let Some((server, [a, b, c])) = support::with_members(["a", "b", "c"]).await else {
        return;
    };
    // Same name as b, another boot (b's zombie or impostor).
    let b2 = support::member(&server, "b").await;
    let q = b"fencing";
    let e = preparing(&a, q, 2, Some("b")).await;
    for bad in [e + 1, e.wrapping_sub(1), 0, u64::MAX] {
        assert!(
            matches!(
                rej(a.append(q, bad, 2, b"z", 1, &Token::generate()).await),
                Rejection::Fenced { .. }
            ),
            "epoch {bad}"
        );
    }
    // Another member with the right epoch: fenced.
    assert_rejected!(
        c.append(q, e, 2, b"z", 1, &Token::generate()).await,
        Rejection::Fenced { .. }
    );
    assert_rejected!(
        c.abort(q, e, &Token::generate()).await,
        Rejection::Fenced { .. }
    );
    a.seal(q, e, 2, 2, &Token::generate()).await.unwrap();
    // Targeted at "b": c may not claim; b's other boot (same name) may.
    assert_rejected!(
        c.claim(q, &Token::generate()).await,
        Rejection::NotOffered(_)
    );
    let claimed = b.claim(q, &Token::generate()).await.unwrap();
    let e2 = claimed.record.epoch;
    assert_eq!(e2, e + 1);
    // Only b (this boot) may fetch and commit.
    for (what, r) in [
        ("c fetch", rej(c.fetch(q, e2, 0).await)),
        ("a fetch", rej(a.fetch(q, e2, 0).await)),
        ("b2 fetch", rej(b2.fetch(q, e2, 0).await)),
        ("c commit", rej(c.commit(q, e2, &Token::generate()).await)),
        ("b2 commit", rej(b2.commit(q, e2, &Token::generate()).await)),
        ("b2 renew", rej(b2.renew(q, e2, &Token::generate()).await)),
        (
            "b commit, old epoch",
            rej(b.commit(q, e, &Token::generate()).await),
        ),
    ] {
        assert!(matches!(r, Rejection::Fenced { .. }), "{what}: {r:?}");
    }
    assert_rejected!(
        c.reclaim(q, &Token::generate()).await,
        Rejection::NotExpired(_)
    );
    assert_eq!(b.fetch(q, e2, 1).await.unwrap(), b"chunk1");
    assert_rejected!(
        b.fetch(q, e2, 2).await,
        Rejection::MissingChunk { index: 2, .. }
    );
    b.commit(q, e2, &Token::generate()).await.unwrap();
    // The old source learns everything was taken.
    match rej(a.abort(q, e, &Token::generate()).await) {
        Rejection::Fenced { taken_chunks, .. } => assert_eq!(taken_chunks, Some(2)),
        other => panic!("{other:?}"),
    }
    // recover by b's other boot: takes over (epoch + 1), b is fenced.
    let rec = b2.recover(q, &Token::generate()).await.unwrap();
    assert_eq!(rec.record.epoch, e2 + 1);
    assert_rejected!(
        b.renew(q, e2, &Token::generate()).await,
        Rejection::Fenced { .. }
    );
    // recover by a name that does not hold it.
    assert_rejected!(c.recover(q, &Token::generate()).await, Rejection::Taken(_));
    // acquire by anyone: taken.
    assert_rejected!(c.acquire(q, &Token::generate()).await, Rejection::Taken(_));
    assert_rejected!(b.acquire(q, &Token::generate()).await, Rejection::Taken(_));
}

#[tokio::test]
async fn fenced_source_taken_chunks_equal_what_the_reclaimer_gets() {
    let Some((server, [a, c])) = support::with_members(["a", "c"]).await else {
        return;
    };
    for n in [0u64, 1, 3] {
        let q = format!("taken-{n}");
        let q = q.as_bytes();
        let e = preparing(&a, q, n, None).await;
        // Chunk n goes in but its reply is "lost": the source does not know.
        let lost = Token::generate();
        a.append(q, e, n, b"lost-reply", 1, &lost).await.unwrap();
        support::expire(&server.url(), &a.keys(q).owner).await;
        let r = c.reclaim(q, &Token::generate()).await.unwrap();
        let e2 = r.record.epoch;
        // What the reclaimer can fetch.
        let mut got = Vec::new();
        for i in 0..r.record.chunks + 2 {
            match c.fetch(q, e2, i).await {
                Ok(bytes) => got.push((i, bytes)),
                Err(Error::Rejected(b)) if matches!(*b, Rejection::MissingChunk { .. }) => {}
                Err(other) => panic!("{other}"),
            }
        }
        assert_eq!(got.len() as u64, r.record.chunks);
        assert_eq!(got.len() as u64, n + 1);
        // The source retries the lost append with the same token, then appends the next.
        for (i, t) in [(n, lost.clone()), (n + 1, Token::generate())] {
            match rej(a.append(q, e, i, b"lost-reply", 1, &t).await) {
                Rejection::Fenced { taken_chunks, .. } => {
                    assert_eq!(taken_chunks, Some(n + 1), "n = {n}, retry of chunk {i}");
                }
                other => panic!("{other:?}"),
            }
        }
        // The view agrees.
        let v = a.read(q, Some(e)).await.unwrap();
        assert_eq!(v.taken_chunks, Some(n + 1));
        c.commit(q, e2, &Token::generate()).await.unwrap();
        // After the commit the fenced count is still readable (the source may be slow).
        match rej(a.seal(q, e, n + 1, n + 1, &Token::generate()).await) {
            Rejection::Fenced { taken_chunks, .. } => assert_eq!(taken_chunks, Some(n + 1)),
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn recover_of_preparing_while_offer_was_reclaimed_keeps_fenced_count() {
    // Source a prepares 2 chunks, its lease lapses, c reclaims (taken 2). a restarts (new boot)
    // and recovers: the record is c's now -> Taken, and fenced[e] must still say 2.
    let Some((server, [a, a2, c])) = support::with_members(["a", "a", "c"]).await else {
        return;
    };
    let q = b"recover-after-reclaim";
    let e = preparing(&a, q, 2, None).await;
    support::expire(&server.url(), &a.keys(q).owner).await;
    c.reclaim(q, &Token::generate()).await.unwrap();
    assert_rejected!(a2.recover(q, &Token::generate()).await, Rejection::Taken(_));
    assert_eq!(a2.read(q, Some(e)).await.unwrap().taken_chunks, Some(2));
}

#[tokio::test]
async fn an_empty_target_is_refused_not_taken_for_anyone() {
    let q = b"empty-target";
    let Some((_server, a, e)) = owned_by_a(q).await else {
        return;
    };
    let r = a.prepare(q, e, Some(""), &Token::generate()).await;
    assert!(matches!(r, Err(Error::EmptyTarget)), "{r:?}");
    let record = a.read(q, None).await.unwrap().record.unwrap();
    assert_eq!(record.state, State::Owned, "nothing was prepared");
}
