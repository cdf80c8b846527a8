//! A `redis-server` process of its own, for tests and examples.
//!
//! [`RedisServer::start`] runs `redis-server` in a temporary (or given) directory on a free
//! loopback port with the durability the handoff needs (`appendonly yes`, `appendfsync always`,
//! no RDB snapshots), and stops exactly the process it started: by its PID, never by name.
//! [`RedisServer::kill9`] and [`RedisServer::restart`] let a test crash the server and bring
//! it back from its append-only file on the same port.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Environment variable naming the `redis-server` binary (default: `redis-server` on `PATH`).
pub const BINARY_ENV: &str = "TICKWHEEL_REDIS_SERVER";

/// How long a start waits for the server to answer `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a server could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The `redis-server` binary is not installed (or not on `PATH`).
    #[error(
        "redis-server is not installed ({binary} not found): install it with \
         `apt-get install redis-server`, or name the binary in {BINARY_ENV}"
    )]
    NotInstalled {
        /// The binary that was looked for.
        binary: String,
    },
    /// Starting or talking to the process failed.
    #[error("redis-server: {0}")]
    Io(#[from] std::io::Error),
    /// The process exited or did not answer `PING` in time; `log` is the end of its log file.
    #[error("redis-server did not start: {reason}; log tail:\n{log}")]
    Startup {
        /// What went wrong.
        reason: String,
        /// The last lines of the server's log.
        log: String,
    },
}

/// A `redis-server` child process with AOF on and `appendfsync always`, on a loopback port.
///
/// Dropping it kills the process it started (by PID) and removes the temporary directory if
/// it made one.
///
/// # Example
/// ```no_run
/// use tickwheel_redis::server::RedisServer;
/// let mut server = RedisServer::start(None)?;
/// let url = server.url(); // "redis://127.0.0.1:PORT/"
/// server.kill9()?;        // crash it
/// server.restart()?;      // same directory and port, reloads the AOF
/// # let _ = url;
/// # Ok::<(), tickwheel_redis::server::ServerError>(())
/// ```
#[derive(Debug)]
#[must_use = "dropping the handle stops the redis-server"]
pub struct RedisServer {
    dir: PathBuf,
    // Held only to delete the directory on drop, when the server made it.
    _temp: Option<tempfile::TempDir>,
    port: u16,
    binary: String,
    extra: Vec<(String, String)>,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server in `dir` (a new temporary directory if `None`) on a free loopback port
    /// and waits until it answers `PING` (up to 10 s).
    ///
    /// # Errors
    /// [`ServerError::NotInstalled`] if the binary is missing; [`ServerError::Startup`] if it
    /// exits or stays silent; [`ServerError::Io`] for file-system failures.
    pub fn start(dir: Option<&Path>) -> Result<Self, ServerError> {
        Self::start_with(dir, &[])
    }

    /// Like [`RedisServer::start`], with extra `redis-server` options appended to the command
    /// line (a later option overrides an earlier one), e.g. `[("appendfsync", "everysec")]`.
    ///
    /// # Errors
    /// As [`RedisServer::start`].
    pub fn start_with(dir: Option<&Path>, extra: &[(&str, &str)]) -> Result<Self, ServerError> {
        let (dir, temp) = match dir {
            Some(d) => {
                std::fs::create_dir_all(d)?;
                (d.to_path_buf(), None)
            }
            None => {
                let t = tempfile::Builder::new()
                    .prefix("tickwheel-redis-")
                    .tempdir()?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        let binary = std::env::var(BINARY_ENV).unwrap_or_else(|_| "redis-server".to_owned());
        let mut server = RedisServer {
            dir,
            _temp: temp,
            port: 0,
            binary,
            extra: extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            child: None,
        };
        // A port found free can be taken by someone else before the server binds it: retry
        // with another one.
        let mut last = None;
        for _ in 0..5 {
            server.port = free_port()?;
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e @ ServerError::NotInstalled { .. }) => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| ServerError::Startup {
            reason: "no free port".into(),
            log: String::new(),
        }))
    }

    fn spawn(&mut self) -> Result<(), ServerError> {
        let log = self.dir.join("redis.log");
        let mut cmd = Command::new(&self.binary);
        cmd.arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(&log)
            .args([
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
            ]);
        for (k, v) in &self.extra {
            cmd.arg(format!("--{k}")).arg(v);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
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
            if ping(self.port) {
                return Ok(());
            }
            if Instant::now() > deadline {
                self.stop();
                return Err(self.startup_error("no PONG within 10 s".into()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn startup_error(&self, reason: String) -> ServerError {
        let text = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(10)..].join("\n");
        ServerError::Startup { reason, log: tail }
    }

    /// `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The loopback port the server listens on (kept across [`RedisServer::restart`]).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's directory (holds the AOF and `redis.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The PID of the running process, `None` after [`RedisServer::kill9`].
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills the process with SIGKILL (what `kill -9` does) and reaps it. No-op if it is not
    /// running.
    ///
    /// # Errors
    /// [`ServerError::Io`] if the signal or the wait fails.
    pub fn kill9(&mut self) -> Result<(), ServerError> {
        if let Some(mut child) = self.child.take() {
            // `Child::kill` sends SIGKILL on Unix.
            match child.kill() {
                Ok(()) => {}
                // Already exited: reap below.
                Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {}
                Err(e) => return Err(e.into()),
            }
            child.wait()?;
        }
        Ok(())
    }

    /// Kills the process if it runs, then starts a new one in the same directory on the same
    /// port: it loads its data back from the append-only file. Waits for `PING`.
    ///
    /// # Errors
    /// As [`RedisServer::start`]; a [`ServerError::Startup`] if the port was taken meanwhile.
    pub fn restart(&mut self) -> Result<(), ServerError> {
        self.kill9()?;
        // The old listening socket can linger for a moment after SIGKILL: retry briefly.
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

    fn stop(&mut self) {
        // Best effort on drop and on failed starts: the process is ours, by PID.
        let _ = self.kill9();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts a server for a test. Returns `None` (after printing why) when `redis-server` is not
/// installed and the environment variable `CI` is unset, so a developer without Redis can run
/// the other tests.
///
/// # Panics
/// When the server cannot be started for any other reason, or when it is not installed and
/// `CI` is set (CI must run these tests): a test that calls this fails.
pub fn start_for_test() -> Option<RedisServer> {
    start_for_test_with(&[])
}

/// [`start_for_test`] with extra `redis-server` options (see [`RedisServer::start_with`]).
///
/// # Panics
/// As [`start_for_test`].
pub fn start_for_test_with(extra: &[(&str, &str)]) -> Option<RedisServer> {
    match RedisServer::start_with(None, extra) {
        Ok(server) => Some(server),
        Err(e @ ServerError::NotInstalled { .. }) if std::env::var_os("CI").is_none() => {
            eprintln!("skipping: {e}");
            None
        }
        Err(e) => panic!("cannot start redis-server: {e}"),
    }
}

fn free_port() -> std::io::Result<u16> {
    let listener = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

fn ping(port: u16) -> bool {
    let addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
    let Ok(mut stream) = TcpStream::connect_timeout(&addr.into(), Duration::from_millis(200))
    else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    let n = stream.read(&mut buf).unwrap_or(0);
    // "-LOADING" while the AOF loads: not ready yet. "-NOAUTH": up, with a password set.
    buf[..n].starts_with(b"+PONG") || buf[..n].starts_with(b"-NOAUTH")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binary_is_not_installed() {
        let mut s = RedisServer {
            dir: std::env::temp_dir(),
            _temp: None,
            port: 1,
            binary: "/nonexistent/redis-server-x".into(),
            extra: vec![],
            child: None,
        };
        let e = s.spawn().err();
        assert!(matches!(e, Some(ServerError::NotInstalled { .. })), "{e:?}");
        let msg = e.map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains("apt-get install redis-server"), "{msg}");
    }
}
