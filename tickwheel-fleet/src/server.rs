//! An `etcd` process of its own, for tests and examples.
//!
//! [`EtcdServer::start`] runs a one-node `etcd` (3.4 or later) in a temporary directory on
//! free loopback client and peer ports and waits until `/health` answers. It stops exactly the
//! process it started: by its PID, never by name. [`EtcdServer::restart`] stops it and starts a
//! new process on the same ports with the same data directory (the keys, leases and revision
//! survive; leases keep their remaining TTL from etcd's point of view).
//!
//! Signals go through the `kill` program with the PID (`kill -STOP <pid>`): this crate has no
//! unsafe code, so it does not call `libc::kill` itself.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Environment variable naming the `etcd` binary (default: `etcd` on `PATH`).
pub const BINARY_ENV: &str = "TICKWHEEL_ETCD";

/// How long a start waits for `/health` to answer.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// Why a server could not be started or signalled.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The `etcd` binary is not installed (or not on `PATH`).
    #[error(
        "etcd is not installed ({binary} not found): install it with \
         `apt-get install etcd-server`, or name the binary in {BINARY_ENV}"
    )]
    NotInstalled {
        /// The binary that was looked for.
        binary: String,
    },
    /// Starting, signalling or talking to the process failed.
    #[error("etcd: {0}")]
    Io(#[from] std::io::Error),
    /// The process exited or `/health` did not answer in time; `log` is the end of its log.
    #[error("etcd did not start: {reason}; log tail:\n{log}")]
    Startup {
        /// What went wrong.
        reason: String,
        /// The last lines of the server's log.
        log: String,
    },
}

/// A one-node `etcd` child process on loopback ports.
///
/// Dropping it stops the process it started (SIGTERM by PID, then SIGKILL if it lingers) and
/// removes the temporary directory.
///
/// # Example
/// ```no_run
/// use tickwheel_fleet::server::EtcdServer;
/// let mut etcd = EtcdServer::start()?;
/// let url = etcd.url(); // "http://127.0.0.1:PORT"
/// etcd.restart()?;      // same ports, same data
/// # let _ = url;
/// # Ok::<(), tickwheel_fleet::server::ServerError>(())
/// ```
#[derive(Debug)]
#[must_use = "dropping the handle stops the etcd server"]
pub struct EtcdServer {
    dir: PathBuf,
    _temp: tempfile::TempDir,
    client_port: u16,
    peer_port: u16,
    binary: String,
    child: Option<Child>,
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
        let temp = tempfile::Builder::new()
            .prefix("tickwheel-etcd-")
            .tempdir()?;
        let binary = std::env::var(BINARY_ENV).unwrap_or_else(|_| "etcd".to_owned());
        let mut server = EtcdServer {
            dir: temp.path().to_path_buf(),
            _temp: temp,
            client_port: 0,
            peer_port: 0,
            binary,
            child: None,
        };
        // A port found free can be taken before etcd binds it: retry with others.
        let mut last = None;
        for _ in 0..5 {
            server.client_port = free_port()?;
            server.peer_port = free_port()?;
            if server.client_port == server.peer_port {
                continue;
            }
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e @ ServerError::NotInstalled { .. }) => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| ServerError::Startup {
            reason: "no free port pair".into(),
            log: String::new(),
        }))
    }

    fn spawn(&mut self) -> Result<(), ServerError> {
        let client = format!("http://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("etcd.log"))?;
        let mut cmd = Command::new(&self.binary);
        cmd.args(["--name", "tickwheel"])
            .arg("--data-dir")
            .arg(self.dir.join("data"))
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
            .args(["--initial-cluster-state", "new"])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let child = cmd.spawn().map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                ServerError::NotInstalled {
                    binary: self.binary.clone(),
                }
            } else {
                ServerError::Io(e)
            }
        })?;
        self.child = Some(child);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                self.child = None;
                return Err(self.startup_error(format!("exited with {status}")));
            }
            if healthy(self.client_port) {
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = self.kill();
                return Err(self.startup_error("not healthy within 20 s".into()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn startup_error(&self, reason: String) -> ServerError {
        let text = std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(10)..].join("\n");
        ServerError::Startup { reason, log: tail }
    }

    /// The client URL, `http://127.0.0.1:PORT` (kept across [`EtcdServer::restart`]).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.client_port
    }

    /// The server's directory (data directory `data/` and `etcd.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The PID of the running process; `None` once stopped or killed.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Stops the process gracefully: SIGTERM by PID, then SIGKILL if it has not exited within
    /// 5 s; reaps it. No-op if it is not running.
    ///
    /// # Errors
    /// [`ServerError::Io`] if signalling or waiting fails.
    pub fn stop(&mut self) -> Result<(), ServerError> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        if child.try_wait()?.is_none() {
            let _ = send_signal(child.id(), "TERM");
            let deadline = Instant::now() + Duration::from_secs(5);
            while child.try_wait()?.is_none() {
                if Instant::now() > deadline {
                    let _ = child.kill();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        child.wait()?;
        Ok(())
    }

    /// Kills the process with SIGKILL and reaps it. No-op if it is not running.
    ///
    /// # Errors
    /// [`ServerError::Io`] if the signal or the wait fails.
    pub fn kill(&mut self) -> Result<(), ServerError> {
        if let Some(mut child) = self.child.take() {
            match child.kill() {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {}
                Err(e) => return Err(e.into()),
            }
            child.wait()?;
        }
        Ok(())
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
        if self.child.is_some() {
            return Ok(());
        }
        // A listening socket can linger for a moment after the old process exited.
        let mut last = None;
        for _ in 0..20 {
            match self.spawn() {
                Ok(()) => return Ok(()),
                Err(e @ ServerError::NotInstalled { .. }) => return Err(e),
                Err(e) => last = Some(e),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(last.unwrap_or_else(|| ServerError::Startup {
            reason: "restart failed".into(),
            log: String::new(),
        }))
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        // Best effort: the process is ours, by PID.
        let _ = self.stop();
    }
}

/// Starts an `etcd` for a test. Returns `None` (after printing why) when `etcd` is not
/// installed and the environment variable `CI` is unset.
///
/// # Panics
/// When the server cannot be started for another reason, or when it is not installed and
/// `CI` is set (CI must run these tests).
pub fn start_for_test() -> Option<EtcdServer> {
    match EtcdServer::start() {
        Ok(server) => Some(server),
        Err(e @ ServerError::NotInstalled { .. }) if std::env::var_os("CI").is_none() => {
            eprintln!("skipping: {e}");
            None
        }
        Err(e) => panic!("cannot start etcd: {e}"),
    }
}

/// Sends signal `name` (`"STOP"`, `"CONT"`, `"TERM"`, `"KILL"`, ...) to process `pid` by
/// running `kill -<name> <pid>`. Only for processes the caller started.
///
/// # Errors
/// [`ServerError::Io`] if `kill` cannot run or reports failure (no such process).
pub fn send_signal(pid: u32, name: &str) -> Result<(), ServerError> {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(ServerError::Io(std::io::Error::other(format!(
            "kill -{name} {pid} failed: {status}"
        ))))
    }
}

fn free_port() -> std::io::Result<u16> {
    let listener = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

/// `GET /health` answers `{"health":"true"...}` once the node serves requests.
fn healthy(port: u16) -> bool {
    let addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
    let Ok(mut stream) = TcpStream::connect_timeout(&addr.into(), Duration::from_millis(200))
    else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(1000)));
    let req = format!("GET /health HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    if stream.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut buf = Vec::new();
    let _ = stream.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    text.contains("\"health\":\"true\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binary_is_not_installed() {
        let temp = tempfile::tempdir();
        let Ok(temp) = temp else { return };
        let mut s = EtcdServer {
            dir: temp.path().to_path_buf(),
            _temp: temp,
            client_port: 1,
            peer_port: 2,
            binary: "/nonexistent/etcd-x".into(),
            child: None,
        };
        let e = s.spawn().err();
        assert!(matches!(e, Some(ServerError::NotInstalled { .. })), "{e:?}");
    }
}
