//! A queue's hold and limits travel with its offer, against a real redis-server: stored by
//! the seal (fenced with it), applied by the target before it imports a timer, cleared by the
//! commit; an offer without a policy applies none; one of an unknown format is refused.

mod support;

use support::moving::custody_pair_on;

use std::time::{Duration, Instant};

use tickwheel::sync::RateLimit;
use tickwheel_redis::{Custody, CustodyError, FlowPolicy, PolicyText, Rejection, State, Token};

async fn member(url: &str, name: &str) -> Custody {
    support::custody_member(url, name, 3).await
}

use support::due_now;

use support::command as raw;

#[tokio::test]
async fn a_held_limited_queue_arrives_held_with_its_limits() {
    let Some((_server, _url, a, b, q, t0)) = custody_pair_on("example.com", 3).await else {
        return;
    };
    let (src, sent, offered) = support::held_offered_to_b(&a, &q, 10, t0, |s| {
        s.set_concurrency(&q, Some(2));
        s.set_rate(&q, Some(RateLimit::per_second(4).with_burst(3)));
    })
    .await;
    assert_eq!(offered.entries, 10);
    assert_eq!(offered.record.state, State::Offered);
    let stored = offered.record.policy.as_deref().expect("a policy sealed");
    assert_eq!(FlowPolicy::decode(stored), Ok(sent));

    let dst = support::empty(t0);
    let mut inc = b.claim(q.clone()).await.expect("claim");
    assert_eq!(inc.flow_policy(), Ok(Some(sent)));
    inc.fetch().await.expect("fetch");
    let committed = inc.commit().await.expect("commit").clone();
    assert_eq!(
        committed.policy, None,
        "the commit clears the offer's policy"
    );
    let received = inc.import(&dst).expect("import");
    assert_eq!(received.imported.imported, 10);

    assert!(dst.is_held(&q));
    assert_eq!(dst.concurrency(&q), src.concurrency(&q));
    assert_eq!(dst.rate(&q), src.rate(&q));
    assert_eq!(dst.rate(&q), Some((Duration::from_millis(250), 3)));
    let later = t0 + Duration::from_secs(1);
    assert_eq!(dst.pop_due(later, 100).count(), 0, "held: nothing out");
    assert_eq!(dst.queue_counts(&q).parked, 10);
    assert_eq!(dst.release_queue(&q), 10);
    let out: Vec<_> = dst.pop_due(later, 100).collect();
    assert_eq!(
        out.len(),
        2,
        "the concurrency limit of 2, under the burst of 3"
    );
    assert_eq!(dst.pop_due(later, 100).count(), 0, "two in flight");
}

#[tokio::test]
async fn an_offer_without_a_policy_applies_none() {
    let Some((_server, url, a, b, q, t0)) = custody_pair_on("q", 3).await else {
        return;
    };
    let src = due_now(&q, 4, t0);
    src.hold_queue(&q);
    support::acquire_and_offer(&a, &src, &q, None).await;
    // What an offer sealed by a build without policies looks like.
    let owner = a.protocol().keys(q.as_bytes()).owner;
    raw(&url, redis::cmd("HDEL").arg(&owner).arg("policy")).await;
    let dst = support::empty(t0);
    dst.set_concurrency(&q, Some(3));
    let r = b.receive(&dst, q.clone()).await.expect("receive");
    assert_eq!(r.imported.imported, 4);
    assert!(!dst.is_held(&q), "no policy: no hold");
    assert_eq!(
        dst.concurrency(&q),
        Some(3),
        "no policy: the target's own stays"
    );
    let later = t0 + Duration::from_secs(1);
    assert_eq!(dst.pop_due(later, 100).count(), 3);
}

#[tokio::test]
async fn a_policy_of_an_unknown_format_is_refused_before_the_commit() {
    let Some((_server, url, a, b, q, t0)) = custody_pair_on("q", 3).await else {
        return;
    };
    let src = due_now(&q, 4, t0);
    support::acquire_and_offer(&a, &src, &q, None).await;
    let owner = a.protocol().keys(q.as_bytes()).owner;
    raw(
        &url,
        redis::cmd("HSET")
            .arg(&owner)
            .arg("policy")
            .arg("v9;paused=1"),
    )
    .await;
    let dst = support::empty(t0);
    match b.receive(&dst, q.clone()).await {
        Err(CustodyError::Policy { .. }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(dst.len(), 0, "nothing imported");
    let view = b.read(q.as_bytes(), None).await.expect("read");
    let record = view.record.expect("record");
    assert_eq!(
        record.state,
        State::Claimed,
        "not committed: the offer stays"
    );
    assert_eq!(record.entries, 4);
}

#[tokio::test]
async fn a_fenced_seal_stores_no_policy_and_a_retry_keeps_the_first() {
    let Some(server) = support::server() else {
        return;
    };
    let url = server.url();
    let a = member(&url, "a").await;
    let p = a.protocol();
    let q = b"q";
    let epoch = p
        .acquire(q, &Token::generate())
        .await
        .expect("acquire")
        .record
        .epoch;
    p.prepare(q, epoch, None, &Token::generate())
        .await
        .expect("prepare");
    let held = FlowPolicy {
        held: true,
        concurrency: Some(1),
        rate: None,
    };
    // A seal under a stale epoch is refused, and writes nothing.
    match p
        .seal_with_policy(q, epoch + 1, 0, 0, Some(&held), &Token::generate())
        .await
    {
        Err(e) => assert!(
            matches!(e.rejection(), Some(Rejection::Fenced { .. })),
            "{e}"
        ),
        Ok(a) => panic!("sealed at a stale epoch: {a:?}"),
    }
    let view = p.read(q, None).await.expect("read");
    let record = view.record.expect("record");
    assert_eq!((record.state, record.policy), (State::Preparing, None));
    // A retry of the seal with its token keeps the first call's policy.
    let t = Token::generate();
    let first = p
        .seal_with_policy(q, epoch, 0, 0, Some(&held), &t)
        .await
        .expect("seal");
    let again = p
        .seal_with_policy(q, epoch, 0, 0, Some(&FlowPolicy::default()), &t)
        .await
        .expect("seal again");
    assert_eq!(first.record.policy, Some(held.encode()));
    assert_eq!(again.record.policy, Some(held.encode()));
}

#[tokio::test]
async fn an_adopted_leftover_offer_brings_its_policy() {
    let Some(server) = support::server() else {
        return;
    };
    let url = server.url();
    let (a, c) = (member(&url, "a").await, member(&url, "c").await);
    let q = "q".to_string();
    let t0 = Instant::now();
    let src = due_now(&q, 5, t0);
    src.hold_queue(&q);
    src.set_rate(&q, Some(RateLimit::per_second(2)));
    let sent = src.flow_policy(&q);
    // External epochs, as a coordinator hands them out; the sealed offer is never claimed.
    let epoch = match c.adopt::<_, u64, String>(q.clone(), 10).await {
        Ok(tickwheel_redis::Adopted::Owned(a)) => a.record.epoch,
        other => panic!("{other:?}"),
    };
    assert_eq!(epoch, 10);
    let a_epoch = match a.adopt::<_, u64, String>(q.clone(), 11).await {
        Ok(tickwheel_redis::Adopted::Owned(a)) => a.record.epoch,
        other => panic!("{other:?}"),
    };
    a.offer(&src, q.clone(), a_epoch, Some("b"))
        .await
        .expect("offer");
    let inc = match c.adopt::<_, u64, String>(q.clone(), 12).await {
        Ok(tickwheel_redis::Adopted::Leftover(inc)) => inc,
        other => panic!("{other:?}"),
    };
    assert_eq!(inc.flow_policy(), Ok(Some(sent)));
    let dst = support::empty(t0);
    let r = c.complete(inc, &dst).await.expect("complete");
    assert_eq!(r.imported.imported, 5);
    assert!(dst.is_held(&q));
    assert_eq!(dst.rate(&q), Some((Duration::from_millis(500), 1)));
    assert_eq!(dst.concurrency(&q), None);
    assert_eq!(dst.pop_due(t0 + Duration::from_secs(1), 100).count(), 0);
}
