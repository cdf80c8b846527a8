//! An `etcd` process of its own, for tests and examples.
//!
//! [`EtcdServer::start`] runs a one-node `etcd` (3.4 or later) in a temporary directory on
//! free loopback client and peer ports and waits until `/health` answers. It stops exactly the
//! process it started: by its PID, never by name. [`EtcdServer::restart`] stops it and starts a
//! new process on the same ports with the same data directory (the keys, leases and revision
//! survive; leases keep their remaining TTL from etcd's point of view).

use std::io::Read;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::process::{Proc, free_port, respawn, retry, send};
use crate::{Server, ServerError, TlsFiles, skip_if_missing};

/// How long a start waits for `/health` to answer.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a graceful stop (and a drop) waits after SIGTERM before SIGKILL.
const GRACE: Duration = Duration::from_secs(5);

/// A one-node `etcd` child process on loopback ports.
///
/// Dropping it stops the process it started (SIGTERM by PID, then SIGKILL if it lingers) and
/// removes the temporary directory.
///
/// # Example
/// ```no_run
/// use tickwheel_testkit::etcd::EtcdServer;
/// let mut etcd = EtcdServer::start()?;
/// let url = etcd.url(); // "http://127.0.0.1:PORT"
/// etcd.restart()?;      // same ports, same data
/// # let _ = url;
/// # Ok::<(), tickwheel_testkit::ServerError>(())
/// ```
#[derive(Debug)]
#[must_use = "dropping the handle stops the etcd server"]
pub struct EtcdServer {
    proc: Proc,
    client_port: u16,
    peer_port: u16,
    /// Clients must present a certificate signed by the CA (`--client-cert-auth`).
    tls: Option<TlsFiles>,
}

impl EtcdServer {
    /// Starts `etcd` in a new temporary directory on free loopback ports and waits until its
    /// `/health` endpoint says healthy (up to 20 s).
    ///
    /// # Errors
    /// [`ServerError::NotInstalled`] if the binary is missing; [`ServerError::Startup`] if it
    /// exits or stays unhealthy (after five tries with other ports); [`ServerError::Io`] for
    /// file-system failures.
    pub fn start() -> Result<Self, ServerError> {
        Self::start_inner(None)
    }

    /// Like [`EtcdServer::start`], serving clients over TLS only, with client-certificate
    /// authentication. Ready once its log says it serves clients (a plain `/health` request
    /// cannot reach it). [`EtcdServer::url`] is then `https://127.0.0.1:PORT`.
    ///
    /// # Errors
    /// As [`EtcdServer::start`].
    pub fn start_tls(tls: TlsFiles) -> Result<Self, ServerError> {
        Self::start_inner(Some(tls))
    }

    fn start_inner(tls: Option<TlsFiles>) -> Result<Self, ServerError> {
        let mut server = EtcdServer {
            proc: Proc::new(Server::Etcd.program(), None, "etcd.log")?.drop_gracefully(GRACE),
            client_port: 0,
            peer_port: 0,
            tls,
        };
        // A port found free can be taken before etcd binds it: retry with others.
        retry("etcd", 5, Duration::ZERO, "no free port pair", || {
            let io = |e| server.proc.program.io(e);
            server.client_port = free_port().map_err(io)?;
            server.peer_port = free_port().map_err(io)?;
            if server.client_port == server.peer_port {
                return Err(ServerError::Startup {
                    server: "etcd",
                    reason: "the same port twice".into(),
                    log: String::new(),
                });
            }
            server.spawn()
        })?;
        Ok(server)
    }

    fn spawn(&mut self) -> Result<(), ServerError> {
        let client = self.url();
        let log_start = self.proc.log_len();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.proc.log)
            .map_err(|e| self.proc.program.io(e))?;
        let log_too = log.try_clone().map_err(|e| self.proc.program.io(e))?;
        let mut cmd = Command::new(&self.proc.program.binary);
        cmd.args(["--name", "tickwheel"])
            .arg("--data-dir")
            .arg(self.proc.dir.join("data"))
            .arg("--listen-client-urls")
            .arg(&client)
            .arg("--advertise-client-urls")
            .arg(&client)
            .arg("--listen-peer-urls")
            .arg(&peer)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer)
            .arg("--initial-cluster")
            .arg(format!("tickwheel={peer}"))
            .args(["--initial-cluster-state", "new"]);
        if let Some(tls) = &self.tls {
            cmd.arg("--client-cert-auth")
                .arg("--trusted-ca-file")
                .arg(&tls.ca)
                .arg("--cert-file")
                .arg(&tls.cert)
                .arg("--key-file")
                .arg(&tls.key);
        }
        cmd.stdout(log_too).stderr(log);
        let port = self.client_port;
        let line = self
            .tls
            .is_some()
            .then_some("ready to serve client requests");
        let every = Duration::from_millis(50);
        (self.proc).spawn_ready(&mut cmd, (READY_TIMEOUT, every), log_start, line, || {
            healthy(port)
        })
    }

    /// The client URL, `http://127.0.0.1:PORT` (`https://` for [`EtcdServer::start_tls`]; kept
    /// across [`EtcdServer::restart`]).
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.client_port
    }

    /// The server's directory (data directory `data/` and `etcd.log`).
    pub fn dir(&self) -> &Path {
        &self.proc.dir
    }

    /// The PID of the running process; `None` once stopped or killed.
    pub fn pid(&self) -> Option<u32> {
        self.proc.pid()
    }

    /// Stops the process gracefully: SIGTERM by PID, then SIGKILL if it has not exited within
    /// 5 s; reaps it. No-op if it is not running.
    ///
    /// # Errors
    /// [`ServerError::Io`] if signalling or waiting fails.
    pub fn stop(&mut self) -> Result<(), ServerError> {
        self.proc.terminate(GRACE)
    }

    /// Kills the process with SIGKILL and reaps it. No-op if it is not running.
    ///
    /// # Errors
    /// [`ServerError::Io`] if the signal or the wait fails.
    pub fn kill(&mut self) -> Result<(), ServerError> {
        self.proc.kill()
    }

    /// Stops the process if it runs (gracefully, see [`EtcdServer::stop`]), then starts a new
    /// one on the same ports with the same data directory. Waits for `/health`.
    ///
    /// # Errors
    /// As [`EtcdServer::start`]; [`ServerError::Startup`] if a port was taken meanwhile.
    pub fn restart(&mut self) -> Result<(), ServerError> {
        self.stop()?;
        self.start_again()
    }

    /// Starts the process again after [`EtcdServer::stop`] or [`EtcdServer::kill`], on the
    /// same ports with the same data. No-op if it runs.
    ///
    /// # Errors
    /// As [`EtcdServer::restart`].
    pub fn start_again(&mut self) -> Result<(), ServerError> {
        if self.proc.child.is_some() {
            return Ok(());
        }
        respawn("etcd", || self.spawn())
    }
}

/// Starts an `etcd` for a test. Returns `None` (after printing why) when `etcd` is not
/// installed and the environment variable `CI` is unset.
///
/// # Panics
/// When the server cannot be started for another reason, or when it is not installed and
/// `CI` is set (CI must run these tests).
pub fn start_for_test() -> Option<EtcdServer> {
    skip_if_missing(EtcdServer::start())
}

/// `GET /health` answers `{"health":"true"...}` once the node serves requests.
fn healthy(port: u16) -> bool {
    let req = format!("GET /health HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    let Some(mut stream) = send(port, req.as_bytes(), Duration::from_millis(1000)) else {
        return false;
    };
    let mut buf = Vec::new();
    let _ = stream.read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).contains("\"health\":\"true\"")
}
