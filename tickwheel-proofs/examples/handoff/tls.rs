//! `--tls`: a CA and certificates made for the run (rcgen), a redis-server serving TLS only
//! and asking for client certificates, and every connection of the run over it (a Redis
//! client: `tickwheel_testkit::pki::redis_client`).

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
