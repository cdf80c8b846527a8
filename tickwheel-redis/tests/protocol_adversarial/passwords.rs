//! Passwords (never printed, whatever their characters), `rediss://` without TLS, and a
//! server made unsafe after the connection.

use super::*;

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
