//! Bad input: corrupt chunks, chunks of an unknown version or of another queue, Redis gone
//! mid-call, hostile queue names, an unsafely configured server, passwords in URLs.

mod support;

use support::connect::{connect_a, wrong_and_right};

use tickwheel_redis::chunk::{CHUNK_VERSION, Chunk, ChunkError, SnapshotEntry};
use tickwheel_redis::{Effect, Error, Member, Options, Protocol, State, Token};
use tickwheel_testkit::redis::start_for_test_with;

type C = Chunk<String, String>;

fn chunk(queue: &[u8], epoch: u64, version: u32) -> Vec<u8> {
    Chunk {
        version,
        queue: queue.to_vec(),
        epoch,
        index: 0,
        entries: vec![SnapshotEntry {
            id: "m1".to_owned(),
            deadline_us: 42,
            value: "v".to_owned(),
        }],
    }
    .encode()
    .expect("encode")
}

#[tokio::test]
async fn bad_chunks_are_clear_errors_and_change_nothing() {
    let Some((_server, [a, b])) = support::with_members(["a", "b"]).await else {
        return;
    };
    let cases: Vec<(&[u8], Vec<u8>)> = vec![
        (b"corrupt", b"\x93\x01garbage".to_vec()),
        (b"future", chunk(b"future", 1, CHUNK_VERSION + 1)),
        (b"foreign", chunk(b"someone-else", 1, CHUNK_VERSION)),
        (b"stale", chunk(b"stale", 7, CHUNK_VERSION)),
    ];
    for (queue, bytes) in cases {
        a.acquire(queue, &Token::generate()).await.expect("acquire");
        a.prepare(queue, 1, None, &Token::generate())
            .await
            .expect("prepare");
        a.append(queue, 1, 0, &bytes, 1, &Token::generate())
            .await
            .expect("append");
        a.seal(queue, 1, 1, 1, &Token::generate())
            .await
            .expect("seal");
        let claimed = b.claim(queue, &Token::generate()).await.expect("claim");
        let source_epoch = claimed
            .record
            .source
            .as_ref()
            .map(|(_, e)| *e)
            .expect("source");
        let before = b.read(queue, None).await.expect("read").record;
        let fetched = b.fetch(queue, 2, 0).await.expect("fetch");
        let err = C::decode(&fetched, queue, source_epoch, 0).expect_err("must not decode");
        match (queue, &err) {
            (b"corrupt", ChunkError::Corrupt(_))
            | (b"future", ChunkError::UnknownVersion { found: 2 })
            | (b"foreign", ChunkError::OtherQueue { .. })
            | (
                b"stale",
                ChunkError::OtherEpoch {
                    expected: 1,
                    found: 7,
                },
            ) => {}
            _ => panic!("{queue:?}: {err:?}"),
        }
        assert!(!err.to_string().is_empty());
        // Nothing moved: the record and the data are as they were.
        assert_eq!(b.read(queue, None).await.expect("read").record, before);
        assert_eq!(b.fetch(queue, 2, 0).await.expect("fetch"), bytes);
    }
}

#[tokio::test]
async fn redis_gone_mid_handoff_is_a_retryable_error() {
    let Some(mut server) = support::server() else {
        return;
    };
    let a = support::member(&server, "a").await;
    a.acquire(b"q", &Token::generate()).await.expect("acquire");
    server.kill9().expect("kill");
    let t = Token::generate();
    let err = a
        .prepare(b"q", 1, None, &t)
        .await
        .expect_err("server is down");
    assert!(err.is_retryable(), "{err:?}");
    assert!(matches!(err, Error::Unavailable { .. }));
    server.restart().expect("restart");
    // The same call, same token, goes through once the server is back.
    let mut result = a.prepare(b"q", 1, None, &t).await;
    for _ in 0..50 {
        match &result {
            Err(e) if e.is_retryable() => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                result = a.prepare(b"q", 1, None, &t).await;
            }
            _ => break,
        }
    }
    let ok = result.expect("prepare after restart");
    assert_eq!(ok.record.state, State::Preparing);
    assert_eq!(
        a.prepare(b"q", 1, None, &t).await.expect("again").effect,
        Effect::Repeated
    );
}

#[tokio::test]
async fn hostile_names_keep_distinct_keys() {
    let Some(server) = support::server() else {
        return;
    };
    let names: [&[u8]; 8] = [b"a}", b"{a", b"a\nb", b"\x00\xff", b"", b"{}", b"a:b", b"a"];
    for (i, name) in names.iter().enumerate() {
        let m = support::member(&server, &format!("m{i}")).await;
        let r = m.acquire(name, &Token::generate()).await.expect("acquire");
        // Each name got its own fresh record (no other member's record under its key).
        assert_eq!(
            (r.effect, r.record.owner.name.clone()),
            (Effect::Changed, format!("m{i}"))
        );
        assert_eq!(r.record.queue, *name);
    }
    let client = redis::Client::open(server.url()).expect("url");
    let mut c = client.get_multiplexed_async_connection().await.expect("c");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut c)
        .await
        .expect("keys");
    assert_eq!(keys.len(), names.len(), "{keys:?}");
}

#[tokio::test]
async fn unsafe_servers_are_refused_unless_allowed() {
    for extra in [[("appendfsync", "everysec")], [("appendonly", "no")]] {
        let Some(server) = start_for_test_with(&extra) else {
            return;
        };
        let err = connect_a(&server.url())
            .await
            .expect_err("unsafe server accepted");
        assert!(matches!(err, Error::UnsafeServer { .. }), "{err:?}");
        assert!(err.to_string().contains(extra[0].0), "{err}");
        let allowed = Options {
            allow_unsafe_durability: true,
            ..Options::default()
        };
        Protocol::connect(&server.url(), Member::new_boot("a"), allowed)
            .await
            .expect("allowed explicitly");
    }
}

#[tokio::test]
async fn passwords_never_show() {
    let Some((text, debug)) =
        wrong_and_right("pw-secret-1", ":pw-wrong-2", "default:pw-secret-1").await
    else {
        return;
    };
    assert!(!text.contains("pw-wrong-2"), "{text}");
    assert!(
        !debug.contains("pw-secret-1") && debug.contains("***"),
        "{debug}"
    );
    let bad = Protocol::connect(
        "redis://:pw-secret-1@[::1",
        Member::new_boot("a"),
        Options::default(),
    )
    .await
    .expect_err("bad url");
    assert!(!format!("{bad} {bad:?}").contains("pw-secret-1"), "{bad:?}");
}

/// A URL that does not parse is echoed as typed, only its password hidden (what the handoff
/// example prints for `--redis-url notaurl`), never as a placeholder.
#[tokio::test]
async fn an_unparsable_url_is_echoed_with_only_the_password_hidden() {
    for (typed, shown, secret) in [
        ("notaurl", "notaurl", None),
        (
            "app:pw-typed-3@db:6379",
            "app:***@db:6379",
            Some("pw-typed-3"),
        ),
    ] {
        let err = connect_a(typed).await.expect_err("not a redis URL");
        let text = format!("{err} {err:?}");
        assert!(matches!(err, Error::Url { .. }), "{text}");
        assert!(text.contains(shown), "{text}");
        if let Some(secret) = secret {
            assert!(!text.contains(secret), "{text}");
        }
    }
}
