//! Redis killed mid-call and restarted, and a long outage: no transition lost or doubled.

use super::*;

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
