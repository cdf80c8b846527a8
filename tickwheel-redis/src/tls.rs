//! TLS trust and client identity for `rediss://` URLs.

use std::fmt;

/// What a `rediss://` connection trusts and presents, in PEM.
///
/// Without it (or with `root_cert_pem: None`) only the public web roots compiled into the
/// crate are trusted, which a server with a certificate from a private CA does not pass. With
/// `client_identity` the connection presents a certificate (mutual TLS, `tls-auth-clients yes`).
/// Used only for `rediss://` URLs. `Debug` prints sizes, never the key.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// The CA certificate(s) to trust instead of the web roots, PEM.
    pub root_cert_pem: Option<Vec<u8>>,
    /// A client certificate and its private key, for servers that ask for one.
    pub client_identity: Option<ClientIdentity>,
}

/// A client certificate (chain) and its private key, PEM. `Debug` never prints the key.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    /// The certificate chain, PEM.
    pub cert_pem: Vec<u8>,
    /// The private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key_pem: Vec<u8>,
}

impl TlsOptions {
    /// Reads a CA file and, if given, a client certificate and key file (all PEM).
    ///
    /// # Errors
    /// The I/O error of the first file that cannot be read, with its path (never its content).
    pub fn from_files(
        ca: &std::path::Path,
        client: Option<(&std::path::Path, &std::path::Path)>,
    ) -> std::io::Result<Self> {
        let read = |p: &std::path::Path| {
            std::fs::read(p)
                .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", p.display())))
        };
        let client_identity = match client {
            Some((cert, key)) => Some(ClientIdentity {
                cert_pem: read(cert)?,
                key_pem: read(key)?,
            }),
            None => None,
        };
        Ok(TlsOptions {
            root_cert_pem: Some(read(ca)?),
            client_identity,
        })
    }

    pub(crate) fn certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: self
                .client_identity
                .as_ref()
                .map(|c| redis::ClientTlsConfig {
                    client_cert: c.cert_pem.clone(),
                    client_key: c.key_pem.clone(),
                }),
            root_cert: self.root_cert_pem.clone(),
        }
    }
}

impl fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsOptions")
            .field(
                "root_cert_pem",
                &self
                    .root_cert_pem
                    .as_ref()
                    .map(|c| format!("<{} bytes>", c.len())),
            )
            .field("client_identity", &self.client_identity)
            .finish()
    }
}

impl fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientIdentity")
            .field("cert_pem", &format!("<{} bytes>", self.cert_pem.len()))
            .field("key_pem", &"<redacted>")
            .finish()
    }
}
