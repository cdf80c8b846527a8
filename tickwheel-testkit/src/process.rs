//! What both server harnesses share: the binary, the directory, free ports, the log tail in
//! errors, the wait until healthy, and stopping by PID.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Why a server could not be started or signalled.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The server's binary is not installed (or not on `PATH`).
    #[error(
        "{server} is not installed ({binary} not found): install it with \
         `apt-get install {package}`, or name the binary in {env}"
    )]
    NotInstalled {
        /// The program, e.g. `redis-server`.
        server: &'static str,
        /// The binary that was looked for.
        binary: String,
        /// The Debian package that installs it.
        package: &'static str,
        /// The environment variable naming another binary.
        env: &'static str,
    },
    /// Starting, signalling or talking to the process failed.
    #[error("{server}: {source}")]
    Io {
        /// The program.
        server: &'static str,
        /// The failure.
        source: std::io::Error,
    },
    /// The process exited or was not healthy in time; `log` is the end of its log.
    #[error("{server} did not start: {reason}; log tail:\n{log}")]
    Startup {
        /// The program.
        server: &'static str,
        /// What went wrong.
        reason: String,
        /// The last lines of the server's log.
        log: String,
    },
}

/// A program the kit runs as a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    /// `redis-server` ([`crate::redis::RedisServer`]).
    Redis,
    /// `etcd` ([`crate::etcd::EtcdServer`]).
    Etcd,
}

impl Server {
    /// The environment variable naming its binary, `TICKWHEEL_REDIS_SERVER` or
    /// `TICKWHEEL_ETCD` (unset: `redis-server` or `etcd` on `PATH`).
    pub fn binary_env(self) -> &'static str {
        match self {
            Server::Redis => "TICKWHEEL_REDIS_SERVER",
            Server::Etcd => "TICKWHEEL_ETCD",
        }
    }

    /// Whether its binary runs: checked before a run that would start one.
    ///
    /// # Errors
    /// [`ServerError::NotInstalled`] if `BINARY --version` cannot be started.
    pub fn installed(self) -> Result<(), ServerError> {
        self.program().installed()
    }

    pub(crate) fn program(self) -> Program {
        match self {
            Server::Redis => Program::new("redis-server", "redis-server", self.binary_env()),
            Server::Etcd => Program::new("etcd", "etcd-server", self.binary_env()),
        }
    }
}

/// A started server's TLS files (PEM): its certificate and key (whose names must include what
/// clients connect to), and the CA that signs client certificates.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The server's certificate.
    pub cert: PathBuf,
    /// The server certificate's private key.
    pub key: PathBuf,
    /// The CA that signs client certificates.
    pub ca: PathBuf,
}

impl TlsFiles {
    /// `server.crt`, `server.key` and `ca.crt` in `dir` (what [`crate::pki::Pki::write_run`]
    /// writes).
    pub fn in_dir(dir: &Path) -> TlsFiles {
        TlsFiles {
            cert: dir.join("server.crt"),
            key: dir.join("server.key"),
            ca: dir.join("ca.crt"),
        }
    }
}

/// `Some(server)`, or `None` (after printing why) when the binary is not installed and the
/// environment variable `CI` is unset, so a developer without it can run the other tests.
///
/// # Panics
/// On any other error, or when the binary is missing and `CI` is set (CI must run the tests).
pub fn skip_if_missing<T>(started: Result<T, ServerError>) -> Option<T> {
    match started {
        Ok(server) => Some(server),
        Err(e @ ServerError::NotInstalled { .. }) if std::env::var_os("CI").is_none() => {
            eprintln!("skipping: {e}");
            None
        }
        Err(e) => panic!("cannot start the server: {e}"),
    }
}

/// Which program a harness runs, and how a missing one is reported.
#[derive(Debug, Clone)]
pub(crate) struct Program {
    pub(crate) server: &'static str,
    pub(crate) package: &'static str,
    pub(crate) env: &'static str,
    /// From `env`, else `server` on `PATH`.
    pub(crate) binary: String,
}

impl Program {
    pub(crate) fn new(server: &'static str, package: &'static str, env: &'static str) -> Self {
        let binary = std::env::var(env).unwrap_or_else(|_| server.to_owned());
        Program {
            server,
            package,
            env,
            binary,
        }
    }

    /// [`ServerError::NotInstalled`] if `BINARY --version` cannot be started.
    pub(crate) fn installed(&self) -> Result<(), ServerError> {
        match Command::new(&self.binary).arg("--version").output() {
            Ok(_) => Ok(()),
            Err(_) => Err(self.not_installed()),
        }
    }

    fn not_installed(&self) -> ServerError {
        ServerError::NotInstalled {
            server: self.server,
            binary: self.binary.clone(),
            package: self.package,
            env: self.env,
        }
    }

    pub(crate) fn io(&self, source: std::io::Error) -> ServerError {
        ServerError::Io {
            server: self.server,
            source,
        }
    }
}

/// A child process of a server, its directory and its log file.
#[derive(Debug)]
pub(crate) struct Proc {
    pub(crate) program: Program,
    pub(crate) dir: PathBuf,
    // Held only to delete the directory on drop, when the harness made it.
    _temp: Option<tempfile::TempDir>,
    pub(crate) log: PathBuf,
    pub(crate) child: Option<Child>,
    /// How a drop stops the process: SIGTERM with this long to exit (see
    /// [`Proc::terminate`]), or at once by SIGKILL when `None`.
    pub(crate) drop_grace: Option<Duration>,
}

impl Proc {
    /// In `dir` (created if missing), or a new temporary directory named after the program.
    pub(crate) fn new(
        program: Program,
        dir: Option<&Path>,
        log: &str,
    ) -> Result<Self, ServerError> {
        let (dir, temp) = match dir {
            Some(d) => {
                std::fs::create_dir_all(d).map_err(|e| program.io(e))?;
                (d.to_path_buf(), None)
            }
            None => {
                let t = tempfile::Builder::new()
                    .prefix(&format!("tickwheel-{}-", program.server))
                    .tempdir()
                    .map_err(|e| program.io(e))?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        Ok(Proc {
            log: dir.join(log),
            program,
            dir,
            _temp: temp,
            child: None,
            drop_grace: None,
        })
    }

    /// Stops the process on drop by SIGTERM, SIGKILL only after `grace` (default: SIGKILL).
    pub(crate) fn drop_gracefully(mut self, grace: Duration) -> Self {
        self.drop_grace = Some(grace);
        self
    }

    /// The log's length now: a restart appends to the same log, and readiness counts only
    /// what the new process writes.
    pub(crate) fn log_len(&self) -> u64 {
        std::fs::metadata(&self.log).map(|m| m.len()).unwrap_or(0)
    }

    /// Whether the log, from byte `from` on, contains `needle`.
    pub(crate) fn logged_since(&self, from: u64, needle: &str) -> bool {
        std::fs::read(&self.log).is_ok_and(|text| {
            let tail = usize::try_from(from)
                .ok()
                .and_then(|from| text.get(from..))
                .unwrap_or_default();
            String::from_utf8_lossy(tail).contains(needle)
        })
    }

    /// Spawns `cmd` (stdin closed) as this server's process.
    pub(crate) fn spawn(&mut self, cmd: &mut Command) -> Result<(), ServerError> {
        let child = cmd.stdin(Stdio::null()).spawn().map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                self.program.not_installed()
            } else {
                self.program.io(e)
            }
        })?;
        self.child = Some(child);
        Ok(())
    }

    /// Spawns `cmd` and waits ([`Proc::wait_ready`]) until it is ready: `ready_line` in the
    /// log from byte `log_start` on when given (a TLS-only server, which the plain `probe`
    /// cannot reach), else `probe()`.
    pub(crate) fn spawn_ready(
        &mut self,
        cmd: &mut Command,
        (limit, every): (Duration, Duration),
        log_start: u64,
        ready_line: Option<&str>,
        probe: impl Fn() -> bool,
    ) -> Result<(), ServerError> {
        self.spawn(cmd)?;
        self.wait_ready(limit, every, |p| match ready_line {
            Some(line) => p.logged_since(log_start, line),
            None => probe(),
        })
    }

    /// Polls `ready` every `every` until it holds; fails with the log's tail if the process
    /// exits, or (after killing it) if `ready` does not hold within `limit`.
    pub(crate) fn wait_ready(
        &mut self,
        limit: Duration,
        every: Duration,
        mut ready: impl FnMut(&Self) -> bool,
    ) -> Result<(), ServerError> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Some(status) = child.try_wait().map_err(|e| self.program.io(e))? {
                    self.child = None;
                    return Err(self.startup_error(format!("exited with {status}")));
                }
            }
            if ready(self) {
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = self.kill();
                return Err(self.startup_error(format!("not ready within {limit:?}")));
            }
            std::thread::sleep(every);
        }
    }

    pub(crate) fn startup_error(&self, reason: String) -> ServerError {
        ServerError::Startup {
            server: self.program.server,
            reason,
            log: self.log_tail(10),
        }
    }

    /// The last `n` lines of the log (empty if it cannot be read).
    pub(crate) fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL by PID (what `Child::kill` sends on Unix) and reap. No-op if not running.
    pub(crate) fn kill(&mut self) -> Result<(), ServerError> {
        if let Some(mut child) = self.child.take() {
            match child.kill() {
                Ok(()) => {}
                // Already exited: reap below.
                Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {}
                Err(e) => return Err(self.program.io(e)),
            }
            child.wait().map_err(|e| self.program.io(e))?;
        }
        Ok(())
    }

    /// SIGTERM by PID, then SIGKILL if it has not exited within `grace`; reap. No-op if not
    /// running.
    pub(crate) fn terminate(&mut self, grace: Duration) -> Result<(), ServerError> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let io = |e| self.program.io(e);
        if child.try_wait().map_err(io)?.is_none() {
            let _ = crate::child::send_signal(child.id(), "TERM");
            let deadline = Instant::now() + grace;
            while child.try_wait().map_err(io)?.is_none() {
                if Instant::now() > deadline {
                    let _ = child.kill();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        child.wait().map_err(io)?;
        Ok(())
    }
}

impl Drop for Proc {
    /// Best effort: the process is ours, by PID. Reports first, while the process's exit
    /// status can still be read.
    fn drop(&mut self) {
        self.report_if_panicking();
        let _ = match self.drop_grace {
            Some(grace) => self.terminate(grace),
            None => self.kill(),
        };
    }
}

impl Proc {
    /// Called on drop, before the process is stopped: a test that panics
    /// while it holds a server shows the server's last words on stderr. A failure the client
    /// sees only as a dropped connection ("broken pipe") often has its cause there (a full
    /// disk under `appendfsync always`, a crash).
    pub(crate) fn report_if_panicking(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let exited = match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(Some(status))) => format!(" (it had exited: {status})"),
            _ => String::new(),
        };
        eprintln!(
            "--- {} in {}{exited}, last lines of {}:\n{}\n---",
            self.program.server,
            self.dir.display(),
            self.log.display(),
            self.log_tail(20),
        );
    }
}

/// A loopback port nothing listens on right now (another process may take it before the
/// server binds it: the harnesses retry with another).
pub(crate) fn free_port() -> std::io::Result<u16> {
    let listener = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

/// Calls `attempt` up to `tries` times, `pause` apart, until it succeeds; a missing binary
/// ends it at once. `what` names the failure when no attempt produced an error.
pub(crate) fn retry(
    server: &'static str,
    tries: u32,
    pause: Duration,
    what: &str,
    mut attempt: impl FnMut() -> Result<(), ServerError>,
) -> Result<(), ServerError> {
    let mut last = None;
    for _ in 0..tries {
        match attempt() {
            Ok(()) => return Ok(()),
            Err(e @ ServerError::NotInstalled { .. }) => return Err(e),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(pause);
    }
    Err(last.unwrap_or_else(|| ServerError::Startup {
        server,
        reason: what.to_owned(),
        log: String::new(),
    }))
}

/// Spawns again after a stop, on the same ports: a listening socket can linger for a moment
/// after the old process exited, so up to 20 tries, 100 ms apart.
pub(crate) fn respawn(
    server: &'static str,
    spawn: impl FnMut() -> Result<(), ServerError>,
) -> Result<(), ServerError> {
    retry(
        server,
        20,
        Duration::from_millis(100),
        "restart failed",
        spawn,
    )
}

/// Connects to the loopback `port` (200 ms at most) and writes `request`; the stream, to read
/// the answer within `read_timeout`, or `None` if either failed.
pub(crate) fn send(port: u16, request: &[u8], read_timeout: Duration) -> Option<TcpStream> {
    let addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
    let mut stream = TcpStream::connect_timeout(&addr.into(), Duration::from_millis(200)).ok()?;
    let _ = stream.set_read_timeout(Some(read_timeout));
    stream.write_all(request).ok()?;
    Some(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A binary that is not there is `NotInstalled`, naming the package to install, whether
    /// found missing at the start of a server or before a run.
    #[test]
    fn a_missing_binary_is_not_installed() {
        for (server, package) in [
            (Server::Redis, "redis-server"),
            (Server::Etcd, "etcd-server"),
        ] {
            let mut program = server.program();
            program.binary = "/nonexistent/tickwheel-server-x".into();
            assert!(matches!(
                program.installed(),
                Err(ServerError::NotInstalled { .. })
            ));
            let Ok(mut proc) = Proc::new(program, None, "server.log") else {
                return;
            };
            let e = proc.spawn(&mut Command::new(&proc.program.binary)).err();
            assert!(matches!(e, Some(ServerError::NotInstalled { .. })), "{e:?}");
            let msg = e.map(|e| e.to_string()).unwrap_or_default();
            assert!(msg.contains(&format!("apt-get install {package}")), "{msg}");
        }
    }
}
