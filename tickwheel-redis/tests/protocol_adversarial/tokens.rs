//! Token replays across steps: a token used for one step and replayed for another is refused;
//! a retry of the same step after a renew is repeated.

use super::*;

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
