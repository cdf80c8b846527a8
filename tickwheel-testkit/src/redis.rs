//! A `redis-server` process of its own, for tests and examples.
//!
//! [`RedisServer::start`] runs `redis-server` in a temporary (or given) directory on a free
//! loopback port with the durability the handoff needs (`appendonly yes`, `appendfsync always`,
//! no RDB snapshots), and stops exactly the process it started: by its PID, never by name.
//! [`RedisServer::kill9`] and [`RedisServer::restart`] let a test crash the server and bring
//! it back from its append-only file on the same port.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::process::{Proc, free_port, respawn, retry, send};
use crate::{Server, ServerError, TlsFiles, skip_if_missing};

/// How long a start waits for the server to answer `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// A `redis-server` child process with AOF on and `appendfsync always`, on a loopback port.
///
/// Dropping it kills the process it started (by PID) and removes the temporary directory if
/// it made one.
///
/// # Example
/// ```no_run
/// use tickwheel_testkit::redis::RedisServer;
/// let mut server = RedisServer::start(None)?;
/// let url = server.url(); // "redis://127.0.0.1:PORT/"
/// server.kill9()?;        // crash it
/// server.restart()?;      // same directory and port, reloads the AOF
/// # let _ = url;
/// # Ok::<(), tickwheel_testkit::ServerError>(())
/// ```
#[derive(Debug)]
#[must_use = "dropping the handle stops the redis-server"]
pub struct RedisServer {
    proc: Proc,
    port: u16,
    extra: Vec<(String, String)>,
    /// The files, and whether a client must present a certificate signed by the CA.
    tls: Option<(TlsFiles, bool)>,
}

impl RedisServer {
    /// Starts a server in `dir` (a new temporary directory if `None`) on a free loopback port
    /// and waits until it answers `PING` (up to 10 s).
    ///
    /// # Errors
    /// [`ServerError::NotInstalled`] if the binary is missing; [`ServerError::Startup`] if it
    /// exits or stays silent (after five tries with other ports); [`ServerError::Io`] for
    /// file-system failures.
    pub fn start(dir: Option<&Path>) -> Result<Self, ServerError> {
        Self::start_with(dir, &[])
    }

    /// Like [`RedisServer::start`], with extra `redis-server` options appended to the command
    /// line (a later option overrides an earlier one), e.g. `[("appendfsync", "everysec")]`.
    ///
    /// # Errors
    /// As [`RedisServer::start`].
    pub fn start_with(dir: Option<&Path>, extra: &[(&str, &str)]) -> Result<Self, ServerError> {
        Self::start_inner(dir, extra, None)
    }

    /// Like [`RedisServer::start_with`], serving TLS only: `--port 0` (no plain port) and
    /// `--tls-port` on the chosen port; `auth_clients`: a client must present a certificate
    /// signed by `tls.ca` (`tls-auth-clients yes`, else `no`). Ready once its log says it
    /// accepts connections (a plain `PING` cannot reach it). [`RedisServer::url`] is then
    /// `rediss://127.0.0.1:PORT/`.
    ///
    /// # Errors
    /// As [`RedisServer::start`]; [`ServerError::Startup`] if redis-server was built without
    /// TLS or refuses the files.
    pub fn start_tls(
        dir: Option<&Path>,
        tls: TlsFiles,
        auth_clients: bool,
        extra: &[(&str, &str)],
    ) -> Result<Self, ServerError> {
        Self::start_inner(dir, extra, Some((tls, auth_clients)))
    }

    fn start_inner(
        dir: Option<&Path>,
        extra: &[(&str, &str)],
        tls: Option<(TlsFiles, bool)>,
    ) -> Result<Self, ServerError> {
        let mut server = RedisServer {
            proc: Proc::new(Server::Redis.program(), dir, "redis.log")?,
            port: 0,
            extra: extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            tls,
        };
        // A port found free can be taken by someone else before the server binds it: retry
        // with another one.
        retry("redis-server", 5, Duration::ZERO, "no free port", || {
            server.port = free_port().map_err(|e| server.proc.program.io(e))?;
            server.spawn()
        })?;
        Ok(server)
    }

    fn spawn(&mut self) -> Result<(), ServerError> {
        let mut cmd = Command::new(&self.proc.program.binary);
        match &self.tls {
            None => cmd.arg("--port").arg(self.port.to_string()),
            Some((tls, auth_clients)) => cmd
                .args(["--port", "0", "--tls-port"])
                .arg(self.port.to_string())
                .arg("--tls-cert-file")
                .arg(&tls.cert)
                .arg("--tls-key-file")
                .arg(&tls.key)
                .arg("--tls-ca-cert-file")
                .arg(&tls.ca)
                .arg("--tls-auth-clients")
                .arg(if *auth_clients { "yes" } else { "no" }),
        };
        let log_start = self.proc.log_len();
        cmd.args(["--bind", "127.0.0.1", "--daemonize", "no"])
            .arg("--dir")
            .arg(&self.proc.dir)
            .arg("--logfile")
            .arg(&self.proc.log)
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
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        let port = self.port;
        let line = self.tls.is_some().then_some("Ready to accept connections");
        let every = Duration::from_millis(20);
        (self.proc).spawn_ready(&mut cmd, (READY_TIMEOUT, every), log_start, line, || {
            ping(port)
        })
    }

    /// `redis://127.0.0.1:PORT/`, or `rediss://…` for a server started with
    /// [`RedisServer::start_tls`].
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}/", self.port)
    }

    /// The loopback port the server listens on (kept across [`RedisServer::restart`]).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's directory (holds the AOF and `redis.log`).
    pub fn dir(&self) -> &Path {
        &self.proc.dir
    }

    /// The PID of the running process, `None` after [`RedisServer::kill9`].
    pub fn pid(&self) -> Option<u32> {
        self.proc.pid()
    }

    /// The server's `INFO <section>` reply (lines `field:value`, see [`info_field`]), over a
    /// plain connection of its own; waits up to 2 s for each read of the reply.
    ///
    /// # Errors
    /// [`ServerError::Io`] if the server is not reached (not running, or serving TLS only:
    /// this speaks plain RESP), does not answer in time, closes the connection mid-reply or
    /// answers with an error.
    pub fn info(&self, section: &str) -> Result<String, ServerError> {
        let fail = |what: String| self.proc.program.io(std::io::Error::other(what));
        if self.tls.is_some() {
            return Err(fail(
                "INFO over a plain connection: the server serves TLS".into(),
            ));
        }
        let request = format!("INFO {section}\r\n");
        let mut stream = send(self.port, request.as_bytes(), Duration::from_secs(2))
            .ok_or_else(|| fail(format!("no connection to port {}", self.port)))?;
        let mut reply = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            let n = stream.read(&mut buf).map_err(|e| self.proc.program.io(e))?;
            if n == 0 {
                return Err(fail("the connection closed mid-reply".into()));
            }
            reply.extend_from_slice(&buf[..n]);
            if let Some(body) = bulk_string(&reply).map_err(fail)? {
                return Ok(body);
            }
        }
    }

    /// The server's `used_memory` (bytes), from [`RedisServer::info`]`("memory")`.
    ///
    /// # Errors
    /// As [`RedisServer::info`]; [`ServerError::Io`] if the reply has no such number.
    pub fn used_memory(&self) -> Result<u64, ServerError> {
        let info = self.info("memory")?;
        info_field(&info, "used_memory").ok_or_else(|| {
            (self.proc.program).io(std::io::Error::other("INFO memory without used_memory"))
        })
    }

    /// Kills the process with SIGKILL (what `kill -9` does) and reaps it. No-op if it is not
    /// running.
    ///
    /// # Errors
    /// [`ServerError::Io`] if the signal or the wait fails.
    pub fn kill9(&mut self) -> Result<(), ServerError> {
        self.proc.kill()
    }

    /// Kills the process if it runs, then starts a new one in the same directory on the same
    /// port: it loads its data back from the append-only file. Waits for `PING`.
    ///
    /// # Errors
    /// As [`RedisServer::start`]; a [`ServerError::Startup`] if the port was taken meanwhile.
    pub fn restart(&mut self) -> Result<(), ServerError> {
        self.kill9()?;
        respawn("redis-server", || self.spawn())
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
    skip_if_missing(RedisServer::start_with(None, extra))
}

/// Field `name` of an `INFO` reply's text (the line `name:value`), parsed; `None` if no line
/// names it or its value does not parse as a `T`. O(length of `info`).
///
/// # Example
/// ```
/// use tickwheel_testkit::redis::info_field;
/// let info = "# Memory\r\nused_memory:1024\r\nused_memory_human:1.00K\r\n";
/// assert_eq!(info_field::<u64>(info, "used_memory"), Some(1024));
/// assert_eq!(info_field::<u64>(info, "used_memory_human"), None);
/// assert_eq!(info_field::<u64>(info, "maxmemory"), None);
/// ```
pub fn info_field<T: std::str::FromStr>(info: &str, name: &str) -> Option<T> {
    info.lines().find_map(|l| {
        let value = l.strip_prefix(name)?.strip_prefix(':')?;
        value.trim().parse().ok()
    })
}

/// The text of a RESP bulk string (`$<len>\r\n<bytes>\r\n`) once `reply` holds all of it;
/// `Ok(None)` while it is incomplete; `Err` for an error reply or anything else.
fn bulk_string(reply: &[u8]) -> Result<Option<String>, String> {
    let Some(eol) = reply.windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let header = String::from_utf8_lossy(&reply[..eol]);
    let Some(len) = header
        .strip_prefix('$')
        .and_then(|n| n.parse::<usize>().ok())
    else {
        return Err(format!("not a bulk string: {header}"));
    };
    let start = eol + 2;
    Ok(reply
        .get(start..start + len)
        .map(|body| String::from_utf8_lossy(body).into_owned()))
}

fn ping(port: u16) -> bool {
    let Some(mut stream) = send(port, b"PING\r\n", Duration::from_millis(500)) else {
        return false;
    };
    let mut buf = [0u8; 64];
    let n = stream.read(&mut buf).unwrap_or(0);
    // "-LOADING" while the AOF loads: not ready yet. "-NOAUTH": up, with a password set.
    buf[..n].starts_with(b"+PONG") || buf[..n].starts_with(b"-NOAUTH")
}

#[cfg(test)]
mod tests {
    use super::bulk_string;

    /// A bulk string is whole only once all its bytes are in; an error reply or anything but
    /// a bulk string is an error.
    #[test]
    fn a_bulk_string_is_read_whole_or_not_at_all() {
        assert_eq!(bulk_string(b""), Ok(None));
        assert_eq!(bulk_string(b"$11\r"), Ok(None));
        assert_eq!(bulk_string(b"$11\r\nused_memo"), Ok(None));
        let whole = bulk_string(b"$11\r\nused_memory\r\n");
        assert_eq!(whole, Ok(Some("used_memory".to_owned())));
        assert!(bulk_string(b"-ERR unknown section\r\n").is_err());
        assert!(bulk_string(b"+OK\r\n").is_err());
    }
}
