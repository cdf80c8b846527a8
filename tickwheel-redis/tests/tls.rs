//! TLS and passwords against a real TLS redis-server (`--port 0 --tls-port`), with a CA and
//! certificates made at test time (rcgen): a handoff over mutual TLS with a password; a wrong
//! CA, an expired server certificate, a missing client certificate and a wrong password each
//! refused with a clear error; no password or key bytes in any error or `Debug`.

use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, date_time_ymd,
};
use tickwheel_redis::server::{RedisServer, ServerError, ServerTls};
use tickwheel_redis::{ClientIdentity, Effect, Error, Member, Options, Protocol, State, Token};

const PASSWORD: &str = "s3cret-Pa55word";
const Q: &[u8] = b"tls.example";

/// A CA, and a leaf certificate it signed (PEM), with its key.
struct Pki {
    ca_pem: String,
    issuer: CertifiedIssuer<'static, KeyPair>,
}

struct Leaf {
    cert_pem: String,
    key_pem: String,
}

impl Pki {
    fn new(name: &str) -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().expect("key");
        let issuer = CertifiedIssuer::self_signed(params, key).expect("ca");
        Pki {
            ca_pem: issuer.pem(),
            issuer,
        }
    }

    /// A certificate for `127.0.0.1` and `localhost`; `expired`: valid only in 2000.
    fn leaf(&self, expired: bool) -> Leaf {
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .expect("params");
        if expired {
            params.not_before = date_time_ymd(2000, 1, 1);
            params.not_after = date_time_ymd(2000, 12, 31);
        }
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

/// Writes the server's files; starts a TLS-only server requiring client certificates (when
/// `auth_clients`) and `PASSWORD`. `None` (skipped) where redis-server is missing, outside CI.
fn tls_server(dir: &Path, pki: &Pki, server: &Leaf, auth_clients: bool) -> Option<RedisServer> {
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write");
        path
    };
    let tls = ServerTls {
        cert: write("server.crt", &server.cert_pem),
        key: write("server.key", &server.key_pem),
        ca: write("ca.crt", &pki.ca_pem),
        auth_clients,
    };
    match RedisServer::start_tls(Some(&dir.join("data")), tls, &[("requirepass", PASSWORD)]) {
        Ok(s) => Some(s),
        Err(e @ ServerError::NotInstalled { .. }) if std::env::var_os("CI").is_none() => {
            eprintln!("skipping: {e}");
            None
        }
        Err(e) => panic!("cannot start a TLS redis-server: {e}"),
    }
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

#[tokio::test]
async fn a_handoff_over_mutual_tls_with_a_password() {
    let dir = tempfile::tempdir().expect("dir");
    let pki = Pki::new("tickwheel test CA");
    let Some(server) = tls_server(dir.path(), &pki, &pki.leaf(false), true) else {
        return;
    };
    assert!(server.url().starts_with("rediss://"));
    let (ca, ca2) = (pki.leaf(false), pki.leaf(false));
    let a = Protocol::connect(
        &url(&server, PASSWORD),
        Member::new_boot("a"),
        options(&pki.ca_pem, Some(&ca)),
    )
    .await
    .expect("connect a over TLS");
    let b = Protocol::connect(
        &url(&server, PASSWORD),
        Member::new_boot("b"),
        options(&pki.ca_pem, Some(&ca2)),
    )
    .await
    .expect("connect b over TLS");
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
    let t = Token::generate();
    let claimed = b.claim(Q, &t).await.expect("claim");
    assert_eq!(
        (claimed.record.state, claimed.record.epoch),
        (State::Claimed, 2)
    );
    assert_eq!(
        b.claim(Q, &t).await.expect("retry").effect,
        Effect::Repeated
    );
    assert_eq!(b.fetch(Q, 2, 0).await.expect("fetch"), b"chunk0");
    let committed = b.commit(Q, 2, &Token::generate()).await.expect("commit");
    assert_eq!(
        (committed.record.state, committed.record.owner.name.as_str()),
        (State::Owned, "b")
    );
}

#[tokio::test]
async fn bad_credentials_are_refused_clearly_and_never_echoed() {
    let dir = tempfile::tempdir().expect("dir");
    let pki = Pki::new("tickwheel test CA");
    let Some(server) = tls_server(dir.path(), &pki, &pki.leaf(false), true) else {
        return;
    };
    let client = pki.leaf(false);
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

    // Another CA.
    let other = Pki::new("another CA");
    let e = refused(
        &url(&server, PASSWORD),
        options(&other.ca_pem, Some(&client)),
        &secrets,
    )
    .await;
    assert!(matches!(e, Error::Tls { .. }), "{e}");
    assert!(!e.is_retryable());

    // No client certificate where the server requires one.
    let e = refused(
        &url(&server, PASSWORD),
        options(&pki.ca_pem, None),
        &secrets,
    )
    .await;
    assert!(matches!(e, Error::Tls { .. }), "{e}");

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

    // A client certificate that expired.
    let expired = pki.leaf(true);
    let e = refused(
        &url(&server, PASSWORD),
        options(&pki.ca_pem, Some(&expired)),
        &secrets,
    )
    .await;
    assert!(matches!(e, Error::Tls { .. }), "{e}");
}

#[tokio::test]
async fn an_expired_server_certificate_is_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let pki = Pki::new("tickwheel test CA");
    let Some(server) = tls_server(dir.path(), &pki, &pki.leaf(true), false) else {
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
