//! The fleet over TLS against real servers: etcd serving clients over TLS only with
//! client-certificate authentication and users enabled, redis-server TLS-only with mutual TLS
//! and a password, a CA and certificates made at test time (rcgen). Two members share the
//! queues (handoffs through Redis over TLS); a wrong CA is refused with a clear error; no
//! password or key bytes appear in an error or a `Debug`.

mod support;

use std::path::Path;
use std::time::Duration;

use support::*;
use tickwheel_fleet::FleetOptions;
use tickwheel_redis::{ClientIdentity, TlsOptions};
use tickwheel_testkit::etcd::EtcdServer;
use tickwheel_testkit::pki::{Leaf, Pki};
use tickwheel_testkit::redis::RedisServer;
use tickwheel_testkit::{TlsFiles, skip_if_missing};

const ETCD_PASSWORD: &str = "etcd-tls-pw-41d2";
const REDIS_PASSWORD: &str = "redis-tls-pw-77ab";

fn etcd_tls(ca_pem: &str, leaf: &Leaf) -> etcd_client::TlsOptions {
    etcd_client::TlsOptions::new()
        .ca_certificate(etcd_client::Certificate::from_pem(ca_pem))
        .identity(etcd_client::Identity::from_pem(
            &leaf.cert_pem,
            &leaf.key_pem,
        ))
}

fn redis_tls(ca_pem: &str, leaf: &Leaf) -> TlsOptions {
    TlsOptions {
        root_cert_pem: Some(ca_pem.as_bytes().to_vec()),
        client_identity: Some(ClientIdentity {
            cert_pem: leaf.cert_pem.as_bytes().to_vec(),
            key_pem: leaf.key_pem.as_bytes().to_vec(),
        }),
    }
}

/// TLS-only etcd and redis-server; `None` (skipped) where either is missing, outside CI.
fn tls_servers(dir: &Path, pki: &Pki) -> Option<(EtcdServer, RedisServer)> {
    pki.write_server(dir, &pki.leaf().expect("leaf"))
        .expect("write");
    let etcd = skip_if_missing(EtcdServer::start_tls(TlsFiles::in_dir(dir)))?;
    let redis = skip_if_missing(RedisServer::start_tls(
        Some(&dir.join("redis")),
        TlsFiles::in_dir(dir),
        true,
        &[("requirepass", REDIS_PASSWORD)],
    ))?;
    Some((etcd, redis))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_members_share_queues_over_tls_with_users_and_passwords() {
    let dir = tempfile::tempdir().expect("dir");
    let pki = Pki::new("tickwheel fleet test CA").expect("ca");
    let Some((etcd, redis)) = tls_servers(dir.path(), &pki) else {
        return;
    };
    assert!(etcd.url().starts_with("https://"));
    let client = pki.leaf().expect("leaf");
    // Users: a root user with a password, then authentication on.
    let co = etcd_client::ConnectOptions::new().with_tls(etcd_tls(&pki.ca_pem, &client));
    enable_etcd_auth(&etcd.url(), ETCD_PASSWORD, Some(co)).await;
    let mut opts = FleetOptions::new(
        etcd.url(),
        format!(
            "rediss://default:{REDIS_PASSWORD}@127.0.0.1:{}/",
            redis.port()
        ),
    )
    .with_lease_ttl(Duration::from_secs(2));
    opts.poll_interval = Duration::from_millis(100);
    opts.handoff_timeout = Duration::from_secs(5);
    opts.custody.retry_for = Duration::from_secs(3);
    opts.etcd_user = Some(("root".into(), ETCD_PASSWORD.into()));
    opts.etcd_tls = Some(etcd_tls(&pki.ca_pem, &client));
    opts.redis.tls = Some(redis_tls(&pki.ca_pem, &client));
    let secrets = [
        ETCD_PASSWORD.to_owned(),
        REDIS_PASSWORD.to_owned(),
        client.key_pem.lines().nth(1).unwrap_or_default().to_owned(),
    ];
    let opts_debug = format!("{opts:?}");
    for s in &secrets {
        assert!(
            !opts_debug.contains(s.as_str()),
            "a secret in FleetOptions' Debug"
        );
    }

    let (qs, _, a) = start_with_a(&opts, 6, 3, Duration::from_secs(30), false).await;
    let b = join(&opts, "b", 3).await;
    // Placement splits the queues: some move from a to b through Redis over TLS.
    wait_until(Duration::from_secs(30), "the queues are split", || {
        let (na, nb) = (a.owned().len(), b.owned().len());
        na > 0 && nb > 0 && na + nb == qs.len()
    })
    .await;
    let owners = ownership(&[&a, &b]);
    assert!(owners.values().all(|o| o.len() == 1), "{owners:?}");

    // Another CA: refused, clearly, and without a secret.
    let other = Pki::new("another CA").expect("ca");
    let mut wrong = opts.clone();
    wrong.etcd_tls = Some(etcd_tls(&other.ca_pem, &client));
    let r = try_join(&wrong, "w").await;
    match r {
        Ok(_) => panic!("joined through an etcd whose CA it does not trust"),
        Err(e) => {
            let text = format!("{e} {e:?}");
            eprintln!("refused: {e}");
            for s in &secrets {
                assert!(!text.contains(s.as_str()), "a secret in the error: {text}");
            }
        }
    }
    drop(b);
    drop(a);
}
