//! The run's own redis-server: append-only file on, `appendfsync always`, a free loopback
//! port, its files in the run's directory; killed by its PID (never by name) and restarted
//! from its append-only file for `redis:STEP` kills.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Server {
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
}

/// Why no server runs.
#[derive(Debug)]
pub enum ServerError {
    /// No `redis-server` binary on the PATH.
    NotInstalled,
    /// It started but did not answer, or exited.
    Failed(String),
}

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerError::NotInstalled => write!(
                f,
                "redis-server is not installed (Debian/Ubuntu: apt-get install redis-server), \
                 or give --redis-url"
            ),
            ServerError::Failed(why) => write!(f, "redis-server: {why}"),
        }
    }
}

impl Server {
    pub fn start(dir: &Path) -> Result<Server, ServerError> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| ServerError::Failed(format!("no free port: {e}")))?
            .port();
        let mut s = Server {
            dir: dir.to_path_buf(),
            port,
            child: None,
        };
        s.spawn()?;
        Ok(s)
    }

    fn spawn(&mut self) -> Result<(), ServerError> {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--dir",
            ])
            .arg(&self.dir)
            .args([
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => ServerError::NotInstalled,
                _ => ServerError::Failed(e.to_string()),
            })?;
        self.child = Some(child);
        self.wait_ready()
    }

    /// Waits until the port accepts a PING.
    fn wait_ready(&mut self) -> Result<(), ServerError> {
        use std::io::{Read, Write};
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                return Err(ServerError::Failed(format!("exited at start ({status})")));
            }
            if let Ok(mut c) = std::net::TcpStream::connect(("127.0.0.1", self.port)) {
                let mut buf = [0u8; 64];
                let _ = c.set_read_timeout(Some(Duration::from_millis(500)));
                if c.write_all(b"PING\r\n").is_ok()
                    && c.read(&mut buf)
                        .is_ok_and(|n| buf[..n].starts_with(b"+PONG"))
                {
                    return Ok(());
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(ServerError::Failed("no answer to PING within 10 s".into()))
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// SIGKILL to the server's PID (std's `Child::kill` sends SIGKILL on Unix).
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port and directory: it reloads the append-only file.
    pub fn restart(&mut self) -> Result<(), ServerError> {
        self.kill9();
        self.spawn()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}
