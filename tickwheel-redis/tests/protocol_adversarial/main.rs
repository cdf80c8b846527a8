//! Adversarial tests of the Lua protocol: steps out of order, wrong epochs and boots, stale and
//! replayed tokens, hostile names, prefixes, huge chunks, Redis killed mid-call, passwords.

#[path = "../support/mod.rs"]
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

mod faults;
mod names;
mod order;
mod passwords;
mod tokens;
