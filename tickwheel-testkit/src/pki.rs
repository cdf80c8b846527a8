//! A CA and certificates made at run time (rcgen), for servers and clients on `127.0.0.1`.

use std::io;
use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, date_time_ymd,
};

fn err(e: rcgen::Error) -> io::Error {
    io::Error::other(e.to_string())
}

/// A self-signed CA (PEM) that signs leaf certificates.
pub struct Pki {
    /// The CA's certificate, PEM.
    pub ca_pem: String,
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its private key, PEM.
#[derive(Clone)]
pub struct Leaf {
    /// The certificate.
    pub cert_pem: String,
    /// Its private key (PKCS#8).
    pub key_pem: String,
}

impl Pki {
    /// A new CA with common name `name`.
    ///
    /// # Errors
    /// If the key or the certificate cannot be made.
    pub fn new(name: &str) -> io::Result<Pki> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let issuer =
            CertifiedIssuer::self_signed(params, KeyPair::generate().map_err(err)?).map_err(err)?;
        Ok(Pki {
            ca_pem: issuer.pem(),
            issuer,
        })
    }

    /// A certificate for `127.0.0.1` and `localhost`, signed by this CA, valid now.
    ///
    /// # Errors
    /// If the key or the certificate cannot be made.
    pub fn leaf(&self) -> io::Result<Leaf> {
        self.make_leaf(false)
    }

    /// Like [`Pki::leaf`], valid only in the year 2000 (expired).
    ///
    /// # Errors
    /// As [`Pki::leaf`].
    pub fn expired_leaf(&self) -> io::Result<Leaf> {
        self.make_leaf(true)
    }

    fn make_leaf(&self, expired: bool) -> io::Result<Leaf> {
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .map_err(err)?;
        if expired {
            params.not_before = date_time_ymd(2000, 1, 1);
            params.not_after = date_time_ymd(2000, 12, 31);
        }
        let key = KeyPair::generate().map_err(err)?;
        let cert = params.signed_by(&key, &self.issuer).map_err(err)?;
        Ok(Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// Writes `ca.crt` and the server's `server.crt`/`server.key` into `dir` (created if
    /// missing): the layout `TlsFiles::in_dir` (feature `servers`) names.
    ///
    /// # Errors
    /// If a file cannot be written.
    pub fn write_server(&self, dir: &Path, server: &Leaf) -> io::Result<()> {
        self.write(dir, &[("server", server)])
    }

    /// Writes `ca.crt`, and new leaves `server.crt`/`server.key` and `client.crt`/`client.key`
    /// into `dir` (created if missing), every file readable by all (mode 0644, the directory
    /// 0755): processes under other user ids read them.
    ///
    /// # Errors
    /// If a certificate cannot be made or a file written.
    pub fn write_run(&self, dir: &Path) -> io::Result<()> {
        let (server, client) = (self.leaf()?, self.leaf()?);
        self.write(dir, &[("server", &server), ("client", &client)])
    }

    fn write(&self, dir: &Path, leaves: &[(&str, &Leaf)]) -> io::Result<()> {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::create_dir_all(dir)?;
        let mut files = vec![("ca.crt".to_owned(), self.ca_pem.as_str())];
        for (who, leaf) in leaves {
            files.push((format!("{who}.crt"), leaf.cert_pem.as_str()));
            files.push((format!("{who}.key"), leaf.key_pem.as_str()));
        }
        for (name, text) in files {
            let path = dir.join(name);
            std::fs::write(&path, text)?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))?;
        }
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
    }
}

/// A Redis client for `url`; with `dir`, over TLS with the files [`Pki::write_run`] wrote
/// there: `ca.crt` as the only root, `client.crt`/`client.key` as the client identity.
/// Installs rustls's ring provider for the process if none is installed.
///
/// # Errors
/// If the URL does not parse, or a file cannot be read (an I/O error naming the file).
#[cfg(feature = "redis-tls")]
pub fn redis_client(url: &str, dir: Option<&Path>) -> ::redis::RedisResult<::redis::Client> {
    let Some(dir) = dir else {
        return ::redis::Client::open(url);
    };
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read(&path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
    };
    let (ca, cert, key) = (read("ca.crt")?, read("client.crt")?, read("client.key")?);
    // rustls needs a process-wide crypto provider; an error means one is installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    ::redis::Client::build_with_tls(
        url,
        ::redis::TlsCertificates {
            client_tls: Some(::redis::ClientTlsConfig {
                client_cert: cert,
                client_key: key,
            }),
            root_cert: Some(ca),
        },
    )
}
