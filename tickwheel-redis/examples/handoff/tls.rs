//! `--tls`: a CA and certificates made for the run (rcgen), a redis-server serving TLS only
//! and asking for client certificates, and every connection of the run over it.

use std::io;
use std::path::Path;

use tickwheel_redis::TlsOptions;

/// Writes `ca.crt`, `server.crt`/`server.key` (for 127.0.0.1 and localhost) and
/// `client.crt`/`client.key` into `dir`.
///
/// # Errors
/// If a certificate cannot be made or a file written.
pub fn make(dir: &Path) -> io::Result<()> {
    tickwheel_testkit::pki::Pki::new("tickwheel handoff run CA")?.write_run(dir)
}

/// The run's CA and client identity, for [`tickwheel_redis::Options::tls`].
///
/// # Errors
/// If a file cannot be read.
pub fn options(dir: &Path) -> io::Result<TlsOptions> {
    TlsOptions::from_files(
        &dir.join("ca.crt"),
        Some((&dir.join("client.crt"), &dir.join("client.key"))),
    )
}

/// A Redis client for `url`, over the run's TLS when `dir` is given.
///
/// # Errors
/// If the URL does not parse or a file cannot be read.
pub fn client(url: &str, dir: Option<&Path>) -> redis::RedisResult<redis::Client> {
    let Some(dir) = dir else {
        return redis::Client::open(url);
    };
    let tls = options(dir).map_err(redis::RedisError::from)?;
    // rustls needs a process-wide crypto provider; an error means one is installed.
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
