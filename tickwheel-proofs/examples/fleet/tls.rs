//! `--tls`: a CA and certificates made for the run (rcgen), etcd and redis-server serving TLS
//! only and asking for client certificates, and every connection of the run over them (a
//! Redis client: `tickwheel_testkit::pki::redis_client`).

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
