//! Hostile queue and member names, key prefixes and huge chunks: no collision, no break.

use super::*;

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
