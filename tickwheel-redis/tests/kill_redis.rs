//! `kill -9` of redis-server after each acknowledged transition, restart from the AOF: the
//! transition is there, and the handoff goes on (calls retried with the same token).

mod support;

use std::future::Future;
use tickwheel_redis::{Applied, Error, Protocol, Record, State, Token};
use tickwheel_testkit::redis::RedisServer;

const Q: &[u8] = b"dest{}.example\n";

/// Retries a call while Redis is unreachable or loading (a restart).
async fn retry<T, F, Fut>(call: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    support::retry(100, call).await
}

async fn crash_and_check(server: &mut RedisServer, p: &Protocol, acked: &Applied) -> Record {
    server.kill9().expect("kill");
    server.restart().expect("restart");
    let view = retry(|| p.read(Q, None)).await.expect("read after restart");
    let record = view.record.expect("record survived");
    assert_eq!(record, acked.record, "an acknowledged transition was lost");
    record
}

#[tokio::test]
async fn every_acknowledged_transition_survives_kill9() {
    let Some(mut server) = support::server() else {
        return;
    };
    let a = support::member(&server, "a").await;
    let b = support::member(&server, "b").await;
    let c = support::member(&server, "c").await;

    // A call acknowledged, then the server dies; the next call may meet the restart.
    macro_rules! step {
        ($p:ident, $t:ident => $body:expr) => {{
            let token = Token::generate();
            let acked = retry(|| {
                let $p = &$p;
                let $t = token.clone();
                async move { $body }
            })
            .await
            .expect(stringify!($body));
            crash_and_check(&mut server, &a, &acked).await
        }};
    }
    let r = step!(a, t => a.acquire(Q, &t).await);
    assert_eq!((r.state, r.epoch), (State::Owned, 1));
    let r = step!(a, t => a.renew(Q, 1, &t).await);
    assert!(r.deadline_ms.is_some());
    let r = step!(a, t => a.prepare(Q, 1, Some("b"), &t).await);
    assert_eq!(r.state, State::Preparing);
    let r = step!(a, t => a.append(Q, 1, 0, b"chunk-0", 1, &t).await);
    assert_eq!(r.chunks, 1);
    let r = step!(a, t => a.abort(Q, 1, &t).await);
    assert_eq!(r.state, State::Owned);
    step!(a, t => a.prepare(Q, 1, Some("b"), &t).await);
    step!(a, t => a.append(Q, 1, 0, b"chunk-0", 1, &t).await);
    let r = step!(a, t => a.append(Q, 1, 1, b"chunk-1", 2, &t).await);
    assert_eq!((r.chunks, r.entries), (2, 3));
    let r = step!(a, t => a.seal(Q, 1, 2, 3, &t).await);
    assert_eq!(r.state, State::Offered);
    let r = step!(b, t => b.claim(Q, &t).await);
    assert_eq!((r.state, r.epoch), (State::Claimed, 2));
    assert_eq!(
        retry(|| b.fetch(Q, 2, 1)).await.expect("data survived"),
        b"chunk-1"
    );
    // b dies; its claim lapses and c reclaims.
    support::expire(&server.url(), &a.keys(Q).owner).await;
    let r = step!(c, t => c.reclaim(Q, &t).await);
    assert_eq!(
        (r.state, r.epoch, r.owner.name.as_str()),
        (State::Claimed, 3, "c")
    );
    let b2 = support::member(&server, "b").await;
    let r = step!(c, t => c.commit(Q, 3, &t).await);
    assert_eq!((r.state, r.chunks), (State::Owned, 0));
    // A restarted member recovering its queue after a crash of the server.
    let c2 = support::member(&server, "c").await;
    let r = step!(c2, t => c2.recover(Q, &t).await);
    assert_eq!(
        (r.epoch, r.owner.boot_id.clone()),
        (4, c2.member().boot_id.clone())
    );
    let _ = b2;
}
