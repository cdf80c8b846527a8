//! `--tls`: a CA and certificates made for the run (rcgen), etcd and redis-server serving TLS
//! only and asking for client certificates, and every connection of the run over them.

use std::io;
use std::path::Path;

/// Writes `ca.crt`, `server.crt`/`server.key` (for 127.0.0.1 and localhost) and
/// `client.crt`/`client.key` into `dir`, readable by the members' user ids.
///
/// # Errors
/// If a certificate cannot be made or a file written.
pub fn make(dir: &Path) -> io::Result<()> {
    tickwheel_testkit::pki::Pki::new("tickwheel fleet run CA")?.write_run(dir)
}

fn read(dir: &Path, name: &str) -> io::Result<Vec<u8>> {
    let path = dir.join(name);
    std::fs::read(&path).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// The Redis options' TLS: the run's CA and the client identity.
pub fn redis(dir: &Path) -> io::Result<tickwheel_redis::TlsOptions> {
    tickwheel_redis::TlsOptions::from_files(
        &dir.join("ca.crt"),
        Some((&dir.join("client.crt"), &dir.join("client.key"))),
    )
}

/// etcd's TLS: the run's CA and the client identity.
pub fn etcd(dir: &Path) -> io::Result<etcd_client::TlsOptions> {
    let (ca, cert, key) = (
        read(dir, "ca.crt")?,
        read(dir, "client.crt")?,
        read(dir, "client.key")?,
    );
    Ok(etcd_client::TlsOptions::new()
        .ca_certificate(etcd_client::Certificate::from_pem(ca))
        .identity(etcd_client::Identity::from_pem(cert, key)))
}

/// A Redis client for `url`, over the run's TLS when `dir` is given.
pub fn redis_client(url: &str, dir: Option<&Path>) -> redis::RedisResult<redis::Client> {
    match dir {
        None => redis::Client::open(url),
        Some(d) => {
            let tls = redis(d).map_err(redis::RedisError::from)?;
            let _ = rustls::crypto::ring::default_provider().install_default();
            redis::Client::build_with_tls(
                url,
                redis::TlsCertificates {
                    client_tls: tls.client_identity.map(|c| redis::ClientTlsConfig {
                        client_cert: c.cert_pem,
                        client_key: c.key_pem,
                    }),
                    root_cert: tls.root_cert_pem,
                },
            )
        }
    }
}
