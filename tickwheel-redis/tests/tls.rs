//! TLS and passwords against a real TLS redis-server (`--port 0 --tls-port`), with a CA and
//! certificates made at test time (rcgen): a handoff over mutual TLS with a password; a wrong
//! CA, an expired server certificate, a missing client certificate and a wrong password each
//! refused with a clear error; no password or key bytes in any error or `Debug`.

use std::path::Path;

mod support;

use tempfile::TempDir;

use tickwheel_redis::{ClientIdentity, Error, Member, Options, Protocol, State, Token};
use tickwheel_testkit::TlsFiles;
use tickwheel_testkit::pki::{Leaf, Pki};
use tickwheel_testkit::redis::RedisServer;

const PASSWORD: &str = "s3cret-Pa55word";
const Q: &[u8] = b"tls.example";

fn ca(name: &str) -> Pki {
    Pki::new(name).expect("ca")
}

/// A certificate for `127.0.0.1` and `localhost`; `expired`: valid only in 2000.
fn leaf(pki: &Pki, expired: bool) -> Leaf {
    let leaf = if expired {
        pki.expired_leaf()
    } else {
        pki.leaf()
    };
    leaf.expect("leaf")
}

/// Writes the server's files; starts a TLS-only server requiring client certificates (when
/// `auth_clients`) and `PASSWORD`. `None` (skipped) where redis-server is missing, outside CI.
fn tls_server(dir: &Path, pki: &Pki, server: &Leaf, auth_clients: bool) -> Option<RedisServer> {
    pki.write_server(dir, server).expect("write");
    tickwheel_testkit::skip_if_missing(RedisServer::start_tls(
        Some(&dir.join("data")),
        TlsFiles::in_dir(dir),
        auth_clients,
        &[("requirepass", PASSWORD)],
    ))
}

/// A temporary directory (keep it while the server runs), a CA, and a [`tls_server`] there
/// whose certificate from that CA is `expired` (see [`leaf`]). `None` as [`tls_server`].
fn ca_and_server(expired: bool, auth_clients: bool) -> Option<(TempDir, Pki, RedisServer)> {
    let dir = tempfile::tempdir().expect("dir");
    let pki = ca("tickwheel test CA");
    let server = tls_server(dir.path(), &pki, &leaf(&pki, expired), auth_clients)?;
    Some((dir, pki, server))
}

fn url(server: &RedisServer, password: &str) -> String {
    format!("rediss://default:{password}@127.0.0.1:{}/", server.port())
}

fn options(ca_pem: &str, client: Option<&Leaf>) -> Options {
    Options {
        tls: Some(tickwheel_redis::TlsOptions {
            root_cert_pem: Some(ca_pem.as_bytes().to_vec()),
            client_identity: client.map(|c| ClientIdentity {
                cert_pem: c.cert_pem.as_bytes().to_vec(),
                key_pem: c.key_pem.as_bytes().to_vec(),
            }),
        }),
        ..Options::default()
    }
}

/// Connect's error, checked for secrets in its `Display` and `Debug`.
async fn refused(url: &str, options: Options, secrets: &[&str]) -> Error {
    let debug_options = format!("{options:?}");
    for s in secrets {
        assert!(!debug_options.contains(s), "Options Debug shows a secret");
    }
    match Protocol::connect(url, Member::new_boot("a"), options).await {
        Ok(_) => panic!("connected where it must be refused"),
        Err(e) => {
            let text = format!("{e} {e:?}");
            eprintln!("refused: {e}");
            for s in secrets {
                assert!(!text.contains(s), "a secret in the error: {text}");
            }
            e
        }
    }
}

/// The key's base64 body (what a leak would show), without the PEM armour.
fn key_body(leaf: &Leaf) -> String {
    leaf.key_pem.lines().nth(1).unwrap_or_default().to_owned()
}

/// Member `name` connected to `server` over TLS with [`PASSWORD`], trusting `pki`'s CA and
/// presenting `client`. Panics if the connection is refused.
async fn connected(server: &RedisServer, pki: &Pki, name: &str, client: &Leaf) -> Protocol {
    let options = options(&pki.ca_pem, Some(client));
    Protocol::connect(&url(server, PASSWORD), Member::new_boot(name), options)
        .await
        .unwrap_or_else(|e| panic!("connect {name} over TLS: {e}"))
}

#[tokio::test]
async fn a_handoff_over_mutual_tls_with_a_password() {
    let Some((_dir, pki, server)) = ca_and_server(false, true) else {
        return;
    };
    assert!(server.url().starts_with("rediss://"));
    let (ca, ca2) = (leaf(&pki, false), leaf(&pki, false));
    let a = connected(&server, &pki, "a", &ca).await;
    let b = connected(&server, &pki, "b", &ca2).await;
    assert!(!format!("{:?}", a.options()).contains(&key_body(&ca)));

    let acquired = a.acquire(Q, &Token::generate()).await.expect("acquire");
    assert_eq!(acquired.record.epoch, 1);
    a.prepare(Q, 1, Some("b"), &Token::generate())
        .await
        .expect("prepare");
    a.append(Q, 1, 0, b"chunk0", 2, &Token::generate())
        .await
        .expect("append");
    a.seal(Q, 1, 1, 2, &Token::generate()).await.expect("seal");
    support::claimed_once(&b, Q, 2).await;
    assert_eq!(b.fetch(Q, 2, 0).await.expect("fetch"), b"chunk0");
    let committed = b.commit(Q, 2, &Token::generate()).await.expect("commit");
    assert_eq!(
        (committed.record.state, committed.record.owner.name.as_str()),
        (State::Owned, "b")
    );
}

#[tokio::test]
async fn bad_credentials_are_refused_clearly_and_never_echoed() {
    let Some((_dir, pki, server)) = ca_and_server(false, true) else {
        return;
    };
    let client = leaf(&pki, false);
    let secrets = [PASSWORD, key_body(&client).as_str()].map(str::to_owned);
    let secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();

    // The web roots only: the private CA is unknown.
    let mut web_roots = options(&pki.ca_pem, Some(&client));
    if let Some(t) = web_roots.tls.as_mut() {
        t.root_cert_pem = None;
    }
    let e = refused(&url(&server, PASSWORD), web_roots, &secrets).await;
    assert!(matches!(e, Error::Tls { .. }), "{e}");
    assert!(e.to_string().contains("UnknownIssuer"), "{e}");

    // The handshake fails, for good (a retry cannot help).
    let other = ca("another CA");
    let expired = leaf(&pki, true);
    for (what, tls) in [
        ("another CA", options(&other.ca_pem, Some(&client))),
        (
            "no client certificate where one is required",
            options(&pki.ca_pem, None),
        ),
        (
            "an expired client certificate",
            options(&pki.ca_pem, Some(&expired)),
        ),
    ] {
        let e = refused(&url(&server, PASSWORD), tls, &secrets).await;
        assert!(matches!(e, Error::Tls { .. }), "{what}: {e}");
        assert!(!e.is_retryable(), "{what}: {e}");
    }

    // A wrong password.
    let e = refused(
        &url(&server, "wrong-Pa55"),
        options(&pki.ca_pem, Some(&client)),
        &secrets,
    )
    .await;
    assert!(
        matches!(&e, Error::Redis { message, .. } if message.contains("authentication")),
        "{e}"
    );
    assert!(!e.to_string().contains("wrong-Pa55"), "{e}");
}

#[tokio::test]
async fn an_expired_server_certificate_is_refused() {
    let Some((_dir, pki, server)) = ca_and_server(true, false) else {
        return;
    };
    let e = refused(
        &url(&server, PASSWORD),
        options(&pki.ca_pem, None),
        &[PASSWORD],
    )
    .await;
    assert!(matches!(e, Error::Tls { .. }), "{e}");
    assert!(
        e.to_string().to_ascii_lowercase().contains("expired"),
        "{e}"
    );
}
