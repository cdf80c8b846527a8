//! Adversarial tests of the Lua protocol: steps out of order, wrong epochs and boots, stale and
//! replayed tokens, hostile names, prefixes, huge chunks, Redis killed mid-call, passwords.

mod support;

use support::connect::connect_a;

use std::future::Future;
use std::time::Duration;
use support::rejection as rej;
use tickwheel_redis::keys::QueueKeys;
use tickwheel_redis::{
    Effect, Error, Member, Options, Protocol, Rejection, State, Token, redact_url,
};
use tickwheel_testkit::redis::{RedisServer, start_for_test_with};

/// Asserts that `result`, a step's, is a rejection matching `pattern`.
macro_rules! assert_rejected {
    ($result:expr, $pattern:pat) => {{
        let r = rej($result);
        assert!(matches!(r, $pattern), "{}: {r:?}", stringify!($result));
    }};
}

/// Retries a call while Redis is unreachable or loading (a restart).
async fn retry<T, F, Fut>(call: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    support::retry(150, call).await
}

/// OWNED by `a` at epoch e, PREPARING with `n` chunks appended (1 entry each).
async fn preparing(a: &Protocol, q: &[u8], n: u64, target: Option<&str>) -> u64 {
    let e = a.acquire(q, &Token::generate()).await.unwrap().record.epoch;
    a.prepare(q, e, target, &Token::generate()).await.unwrap();
    for i in 0..n {
        a.append(
            q,
            e,
            i,
            format!("chunk{i}").as_bytes(),
            1,
            &Token::generate(),
        )
        .await
        .unwrap();
    }
    e
}

/// The rejections of a claim and of a reclaim of `q` by `b` (each must be refused).
async fn claim_and_reclaim(b: &Protocol, q: &[u8]) -> (Rejection, Rejection) {
    let claim = rej(b.claim(q, &Token::generate()).await);
    (claim, rej(b.reclaim(q, &Token::generate()).await))
}

/// A server and member a, a having acquired `q` (OWNED) at the epoch returned. `None`: skip
/// (see `support::server`).
async fn owned_by_a(q: &[u8]) -> Option<(RedisServer, Protocol, u64)> {
    let (server, [a]) = support::with_members(["a"]).await?;
    let e = a.acquire(q, &Token::generate()).await.unwrap().record.epoch;
    Some((server, a, e))
}

/// A server and members a and b, a having OFFERED `q` to anyone (one chunk of one entry) at
/// the epoch returned. `None`: skip (see `support::server`).
async fn offered_by_a(q: &[u8]) -> Option<(RedisServer, [Protocol; 2], u64)> {
    let (server, [a, b]) = support::with_members(["a", "b"]).await?;
    let e = preparing(&a, q, 1, None).await;
    a.seal(q, e, 1, 1, &Token::generate()).await.unwrap();
    Some((server, [a, b], e))
}

// ------------------------------------------------------------------------------------------
// Token replay across steps.

#[tokio::test]
async fn a_claim_token_reused_for_commit_is_refused() {
    let q = b"replay";
    let Some((_server, [_, b], _)) = offered_by_a(q).await else {
        return;
    };
    let t = Token::generate();
    let claimed = b.claim(q, &t).await.unwrap();
    let e2 = claimed.record.epoch;
    // A caller bug (or a token derived from a log that reuses one): the claim's token on
    // commit. The script sees "last token = this token, same member" and answers REPEATED —
    // Ok(..) — without committing.
    let r = b.commit(q, e2, &t).await;
    let state = b.read(q, None).await.unwrap().record.unwrap().state;
    assert!(
        matches!(&r, Err(Error::Rejected(x)) if matches!(**x, Rejection::TokenReused { ref step, .. } if step == "claim")),
        "{r:?}"
    );
    assert!(
        !(matches!(&r, Ok(a) if a.effect == Effect::Repeated) && state == State::Claimed),
        "commit with a replayed token from claim answered Ok(Repeated) but the record is still \
         {state:?}: the member believes it committed and dispatches, while the data stays in \
         Redis and is reclaimable after the lease => doubled. (REPEATED is not bound to the step)"
    );
}

#[tokio::test]
async fn a_prepare_token_reused_for_seal_is_refused() {
    let q = b"replay-seal";
    let Some((_server, a, e)) = owned_by_a(q).await else {
        return;
    };
    let t = Token::generate();
    a.prepare(q, e, None, &t).await.unwrap();
    let r = a.seal(q, e, 0, 0, &t).await;
    let state = a.read(q, None).await.unwrap().record.unwrap().state;
    assert!(
        matches!(&r, Err(Error::Rejected(x)) if matches!(**x, Rejection::TokenReused { ref step, .. } if step == "prepare")),
        "{r:?}"
    );
    assert_eq!(state, State::Preparing);
    assert!(
        !(matches!(&r, Ok(x) if x.effect == Effect::Repeated) && state == State::Preparing),
        "seal with prepare's token: Ok(Repeated) while still PREPARING — the source is told to \
         drop its copy (the docs: 'After this the source may drop its copy')"
    );
}

#[tokio::test]
async fn a_commit_retried_after_a_renew_is_repeated() {
    // The claimer renews its lease from a background task (as it must during a long import)
    // and commits. The commit's reply is lost; meanwhile the renewer ran. The commit retried
    // with the same token must be recognised as a repeat: a refusal would read as "not
    // committed" although the data in Redis is gone (a renewal stores no token).
    let q = b"retry-after-renew";
    let Some((_server, [_, b], _)) = offered_by_a(q).await else {
        return;
    };
    let e2 = b.claim(q, &Token::generate()).await.unwrap().record.epoch;
    let t_commit = Token::generate();
    b.commit(q, e2, &t_commit).await.unwrap(); // reply "lost"
    b.renew(q, e2, &Token::generate()).await.unwrap(); // the background renewer
    let r = b.commit(q, e2, &t_commit).await;
    assert!(
        matches!(&r, Ok(x) if x.effect == Effect::Repeated),
        "retry of an applied commit (same token) after a renew: {r:?}"
    );
}

#[tokio::test]
async fn a_seal_retried_after_a_renew_is_repeated() {
    let Some((_server, [a])) = support::with_members(["a"]).await else {
        return;
    };
    let q = b"seal-retry-after-renew";
    let e = preparing(&a, q, 1, None).await;
    let t_seal = Token::generate();
    // The renewer renews while PREPARING, the seal goes in, its reply is lost, the seal is
    // retried: the record's last token is the seal's, so this one holds ...
    a.renew(q, e, &Token::generate()).await.unwrap();
    a.seal(q, e, 1, 1, &t_seal).await.unwrap();
    // ... but a renew attempt in between (refused: OFFERED) changes nothing, fine; an
    // append retry of chunk 0 (its reply lost earlier) in between also changes nothing.
    let _ = a.append(q, e, 0, b"chunk0", 1, &Token::generate()).await;
    let r = a.seal(q, e, 1, 1, &t_seal).await;
    assert!(matches!(&r, Ok(x) if x.effect == Effect::Repeated), "{r:?}");
}

// ------------------------------------------------------------------------------------------
// Steps out of order, wrong epoch, wrong boot, someone else's claim.

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

// ------------------------------------------------------------------------------------------
// Hostile names, prefixes, key collisions.

#[tokio::test]
async fn hostile_queue_and_member_names_do_not_collide_or_break() {
    let Some(server) = support::server() else {
        return;
    };
    let long = vec![b'x'; 200_000];
    let queues: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"{".to_vec(),
        b"}".to_vec(),
        b"{}".to_vec(),
        b"a\nb".to_vec(),
        b"\xff\xfe\x00".to_vec(),
        b"_".to_vec(),
        b"5f".to_vec(), // hex of "_"
        b"61".to_vec(),
        b"a".to_vec(),
        b"') redis.call('FLUSHALL') --".to_vec(),
        b"]] redis.call('FLUSHALL') --[[".to_vec(),
        long.clone(),
    ];
    let members = [
        "",
        "{",
        "a\nb",
        "') redis.call('FLUSHALL') --",
        &"m".repeat(100_000),
        "ü",
    ];
    let mut protos = Vec::new();
    for m in members {
        protos.push(support::member(&server, m).await);
    }
    // Every member acquires its own copy of every queue, under its own prefix? No: one
    // prefix; member i acquires queue i, and all others see it Taken by member i.
    for (i, q) in queues.iter().enumerate() {
        let p = &protos[i % protos.len()];
        let r = p.acquire(q, &Token::generate()).await.unwrap();
        assert_eq!(r.record.queue, *q);
        assert_eq!(r.record.owner, *p.member());
        assert_eq!(r.record.epoch, 1, "queue {i} collided with an earlier one");
    }
    for (i, q) in queues.iter().enumerate() {
        let owner = &protos[i % protos.len()];
        let v = owner.read(q, None).await.unwrap().record.unwrap();
        assert_eq!(v.queue, *q);
        assert_eq!(v.owner, *owner.member());
    }
    // Full handoff on a hostile queue between hostile members, targeted.
    let (src, dst) = (&protos[2], &protos[3]);
    let q = b"}\n{\xff";
    let e = src
        .acquire(q, &Token::generate())
        .await
        .unwrap()
        .record
        .epoch;
    src.prepare(q, e, Some(&dst.member().name), &Token::generate())
        .await
        .unwrap();
    src.append(q, e, 0, b"\x00\xff{}\n", 1, &Token::generate())
        .await
        .unwrap();
    src.seal(q, e, 1, 1, &Token::generate()).await.unwrap();
    // protos[2] is "a\nb"; a member named "a" must not match the target "a\nb"-ish; the
    // member named "" (protos[0]) must not claim a targeted offer either.
    assert_rejected!(
        protos[0].claim(q, &Token::generate()).await,
        Rejection::NotOffered(_)
    );
    let c = dst.claim(q, &Token::generate()).await.unwrap();
    assert_eq!(
        dst.fetch(q, c.record.epoch, 0).await.unwrap(),
        b"\x00\xff{}\n"
    );
    dst.commit(q, c.record.epoch, &Token::generate())
        .await
        .unwrap();
    // Nothing was flushed.
    for (i, q) in queues.iter().enumerate() {
        assert!(
            protos[0].read(q, None).await.unwrap().record.is_some(),
            "queue {i} gone"
        );
    }
    // Every key in Redis has exactly one well-formed hash tag.
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .unwrap();
    for k in &keys {
        let k = String::from_utf8(k.clone()).expect("keys are ASCII");
        assert_eq!(k.matches('{').count(), 1, "{k}");
        assert_eq!(k.matches('}').count(), 1, "{k}");
    }
}

#[tokio::test]
async fn prefixes_separate_and_bad_prefixes_refused() {
    let Some(server) = support::server() else {
        return;
    };
    for bad in ["", "a{b", "a}b", "a b", "a\nb", "\u{e9}", &"p".repeat(65)] {
        let o = Options {
            prefix: bad.to_owned(),
            ..Options::default()
        };
        let r = Protocol::connect(&server.url(), Member::new_boot("a"), o).await;
        assert!(matches!(r, Err(Error::Prefix(_))), "prefix {bad:?}: {r:?}");
    }
    let mut protos = Vec::new();
    for prefix in ["p", "p:", "p:{", "tickwheel"] {
        let o = Options {
            prefix: prefix.to_owned(),
            ..Options::default()
        };
        match Protocol::connect(&server.url(), Member::new_boot(prefix), o).await {
            Ok(p) => protos.push(p),
            Err(Error::Prefix(_)) => {}
            Err(e) => panic!("{e}"),
        }
    }
    for p in &protos {
        let r = p.acquire(b"same-queue", &Token::generate()).await.unwrap();
        assert_eq!(
            r.record.epoch,
            1,
            "prefix {:?} collided",
            p.options().prefix
        );
    }
    // keys of distinct (prefix, queue) pairs never coincide, e.g. ("p", ":x") vs ("p:", "x")
    assert_ne!(
        QueueKeys::new("p", b":x").owner,
        QueueKeys::new("p:", b"x").owner
    );
}

// ------------------------------------------------------------------------------------------
// Huge chunks.

#[tokio::test]
async fn huge_chunk_round_trips() {
    let Some((_server, [a, b])) = support::with_members(["a", "b"]).await else {
        return;
    };
    let q = b"huge";
    let e = a.acquire(q, &Token::generate()).await.unwrap().record.epoch;
    a.prepare(q, e, None, &Token::generate()).await.unwrap();
    let big: Vec<u8> = (0..48 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let t = Token::generate();
    let r = retry(|| a.append(q, e, 0, &big, 1, &t)).await;
    assert!(r.is_ok(), "48 MiB append: {r:?}");
    a.seal(q, e, 1, 1, &Token::generate()).await.unwrap();
    let c = b.claim(q, &Token::generate()).await.unwrap();
    let got = b.fetch(q, c.record.epoch, 0).await.unwrap();
    assert!(got == big, "huge chunk changed in transit");
}

// ------------------------------------------------------------------------------------------
// Redis killed mid-call.

#[tokio::test]
async fn redis_killed_mid_call_then_restarted_no_transition_lost_or_doubled() {
    let Some(mut server) = support::server() else {
        return;
    };
    let url = server.url();
    let a = support::member(&server, "a").await;
    let b = support::member(&server, "b").await;
    let q = b"kill-mid";
    let e = a.acquire(q, &Token::generate()).await.unwrap().record.epoch;
    a.prepare(q, e, None, &Token::generate()).await.unwrap();
    // Appends of 4 MiB chunks, each with Redis killed at a varying moment during the call.
    let chunk = |i: u64| vec![i as u8; 4 * 1024 * 1024];
    let mut acked = 0u64;
    for i in 0..6u64 {
        let t = Token::generate();
        let body = chunk(i);
        let a2 = a.clone();
        let t2 = t.clone();
        let body2 = body.clone();
        let call = tokio::spawn(async move { a2.append(q, e, i, &body2, 1, &t2).await });
        tokio::time::sleep(Duration::from_millis(i * 7)).await;
        server.kill9().unwrap();
        let first = call.await.unwrap();
        server.restart().unwrap();
        let again = retry(|| a.append(q, e, i, &body, 1, &t)).await;
        match (&first, &again) {
            (Ok(_), Ok(x)) => {
                assert_eq!(x.effect, Effect::Repeated, "acked chunk {i} applied twice?")
            }
            (Err(err), Ok(_)) => assert!(err.is_retryable(), "chunk {i}: {err}"),
            (_, Err(err)) => panic!("chunk {i}: retry after restart failed: {err}"),
        }
        let rec = again.unwrap().record;
        assert_eq!(
            rec.chunks,
            i + 1,
            "chunk {i}: acknowledged or retried chunk lost"
        );
        assert_eq!(rec.entries, i + 1, "chunk {i}: entries doubled or lost");
        acked += 1;
    }
    let t = Token::generate();
    let sealed = retry(|| a.seal(q, e, acked, acked, &t)).await.unwrap();
    assert_eq!(sealed.record.state, State::Offered);
    // Claim with Redis killed right after; the retry must say Repeated (one winner: b).
    let t = Token::generate();
    let b2 = b.clone();
    let t2 = t.clone();
    let call = tokio::spawn(async move { b2.claim(q, &t2).await });
    tokio::time::sleep(Duration::from_millis(1)).await;
    server.kill9().unwrap();
    let _ = call.await.unwrap();
    // While it is down: an error the caller can retry, not a panic.
    let down = b.read(q, None).await;
    assert!(
        matches!(&down, Err(e) if e.is_retryable()),
        "while down: {down:?}"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    server.restart().unwrap();
    let claimed = retry(|| b.claim(q, &t))
        .await
        .expect("claim retry after restart");
    assert_eq!(claimed.record.state, State::Claimed);
    assert_eq!(claimed.record.owner, *b.member());
    let e2 = claimed.record.epoch;
    assert_eq!(e2, e + 1, "claim applied twice (epoch jumped)");
    for i in 0..acked {
        let bytes = retry(|| b.fetch(q, e2, i)).await.unwrap();
        assert!(bytes == chunk(i), "chunk {i} corrupted across restarts");
    }
    let t = Token::generate();
    retry(|| b.commit(q, e2, &t)).await.unwrap();
    // The restarted server's config must still be safe: reconnecting works.
    let fresh = Protocol::connect(&url, Member::new_boot("z"), Options::default()).await;
    assert!(fresh.is_ok(), "{fresh:?}");
    drop(server);
}

#[tokio::test]
async fn connection_recovers_after_a_long_outage() {
    // Redis down for longer than the client's reconnect retries; the same Protocol must work
    // again once it is back ("an error the caller can retry").
    let Some(mut server) = support::server() else {
        return;
    };
    let a = support::member(&server, "a").await;
    let q = b"outage";
    a.acquire(q, &Token::generate()).await.unwrap();
    server.kill9().unwrap();
    for _ in 0..5 {
        let r = a.read(q, None).await;
        assert!(matches!(&r, Err(e) if e.is_retryable()), "{r:?}");
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    server.restart().unwrap();
    let r = retry(|| a.read(q, None)).await;
    assert!(r.is_ok(), "after restart: {r:?}");
}

// ------------------------------------------------------------------------------------------
// Passwords.

fn leaks(text: &str, secret: &str) -> bool {
    text.contains(secret)
}

#[test]
fn redaction_of_passwords_with_url_special_characters() {
    let mut bad = Vec::new();
    // Passwords an operator pastes unencoded: '/', '?', '#', '@'.
    for (url, secret) in [
        ("redis://u:pa/ss@h:6379/", "pa/ss"),
        ("redis://u:pa?ss@h:6379/", "pa?ss"),
        ("redis://u:pa#ss@h:6379/", "pa#ss"),
        ("redis://u:p@ss@h:6379/", "p@ss"),
        ("redis://:s3cr3t@h:6379/?password=s3cr3t", "s3cr3t"),
        ("rediss://u:s3cr3t@h:6379/0?protocol=resp3", "s3cr3t"),
        ("redis://u:s3%2Fcr3t@h:6379/", "s3%2Fcr3t"),
        ("redis+unix:///tmp/x.sock?user=u&pass=s3cr3t", "s3cr3t"),
        ("REDIS://u:s3cr3t@h/", "s3cr3t"),
        ("unix:///tmp/x.sock?pass=s3cr3t", "s3cr3t"),
        ("redis:/u:s3cr3t@h/", "s3cr3t"),
    ] {
        let r = redact_url(url);
        // The part before the special character is the part most likely to leak.
        let head = &secret[..2.min(secret.len())];
        if leaks(&r, secret) || r.contains(&format!(":{head}")) {
            bad.push(format!("redact_url({url:?}) = {r:?}"));
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

#[tokio::test]
async fn connect_errors_never_print_the_password() {
    let Some(server) = start_for_test_with(&[("requirepass", "Sup3rS3cret")]) else {
        return;
    };
    let port = server.port();
    let cases = [
        format!("redis://:WrongPass99@127.0.0.1:{port}/"),
        format!("redis://default:WrongPass99@127.0.0.1:{port}/"),
        format!("redis://nouser:WrongPass99@127.0.0.1:{port}/"),
        "redis://:WrongPass99@127.0.0.1:1/".to_owned(),
        "redis://:WrongPass99@127.0.0.1:notaport/".to_owned(),
        format!("redis://u:Wrong/Pass99@127.0.0.1:{port}/"),
        format!("redis://u:Wrong?Pass99@127.0.0.1:{port}/"),
        format!("redis://u:Wrong#Pass99@127.0.0.1:{port}/"),
        format!("redis://127.0.0.1:{port}/?password=WrongPass99"),
        format!("redis://127.0.0.1:{port}/99999999999"),
    ];
    let mut bad = Vec::new();
    for url in &cases {
        let o = Options {
            connect_timeout: Duration::from_secs(2),
            ..Options::default()
        };
        match Protocol::connect(url, Member::new_boot("a"), o).await {
            Ok(p) => {
                let d = format!("{p:?}");
                if d.contains("Pass99") {
                    bad.push(format!("Debug of Protocol for {url}: {d}"));
                }
            }
            Err(e) => {
                let (s, d) = (e.to_string(), format!("{e:?}"));
                if s.contains("Pass99") || d.contains("Pass99") || s.contains("Wrong") {
                    bad.push(format!("url {url}: error leaks the password: {s}"));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
    // The right password works; Debug hides it.
    let ok = Protocol::connect(
        &format!("redis://:Sup3rS3cret@127.0.0.1:{port}/"),
        Member::new_boot("a"),
        Options::default(),
    )
    .await
    .expect("right password");
    assert!(!format!("{ok:?}").contains("Sup3rS3cret"));
}

#[tokio::test]
async fn rediss_url_is_an_error_not_a_panic() {
    // The docs: "`rediss://` for TLS". redis-rs is built with `tls-rustls` but rustls 0.23
    // has no crypto provider feature (ring / aws-lc-rs) enabled: the first TLS connect panics.
    let Some(server) = support::server() else {
        return;
    };
    let url = format!("rediss://:pw@127.0.0.1:{}/", server.port());
    let task = tokio::spawn(async move {
        let o = Options {
            connect_timeout: Duration::from_secs(2),
            ..Options::default()
        };
        Protocol::connect(&url, Member::new_boot("a"), o)
            .await
            .map(|_| ())
    });
    match task.await {
        Ok(r) => assert!(r.is_err(), "TLS to a plain server cannot succeed"),
        Err(e) => panic!(
            "Protocol::connect(rediss://..) panicked: {:?}",
            e.is_panic()
        ),
    }
}

#[tokio::test]
async fn a_server_made_unsafe_after_connect_is_refused_at_seal_claim_and_commit() {
    let Some(server) = start_for_test_with(&[("appendfsync", "everysec")]) else {
        return;
    };
    let r = connect_a(&server.url()).await;
    assert!(matches!(r, Err(Error::UnsafeServer { .. })), "{r:?}");
    drop(server);
    // Safe at connect, made unsafe afterwards.
    let Some((server, [a, b])) = support::with_members(["a", "b"]).await else {
        return;
    };
    let q = b"reconfigured";
    let e = preparing(&a, q, 1, None).await;
    let client = redis::Client::open(server.url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let set = |value: &'static str| {
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("SET").arg("appendfsync").arg(value);
        cmd
    };
    let _: () = set("no").query_async(&mut c).await.unwrap();
    let r = a.seal(q, e, 1, 1, &Token::generate()).await;
    assert!(matches!(r, Err(Error::UnsafeServer { .. })), "seal: {r:?}");
    let _: () = set("always").query_async(&mut c).await.unwrap();
    a.seal(q, e, 1, 1, &Token::generate()).await.unwrap();
    let _: () = set("everysec").query_async(&mut c).await.unwrap();
    let r = b.claim(q, &Token::generate()).await;
    assert!(matches!(r, Err(Error::UnsafeServer { .. })), "claim: {r:?}");
    let _: () = set("always").query_async(&mut c).await.unwrap();
    let claimed = b.claim(q, &Token::generate()).await.unwrap().record.epoch;
    let _: () = set("no").query_async(&mut c).await.unwrap();
    let r = b.commit(q, claimed, &Token::generate()).await;
    assert!(
        matches!(r, Err(Error::UnsafeServer { .. })),
        "commit: {r:?}"
    );
    let state = b.read(q, None).await.unwrap().record.unwrap().state;
    assert_eq!(state, State::Claimed, "a refused commit changed nothing");
}

#[allow(dead_code)]
fn _unused(_: RedisServer) {}
