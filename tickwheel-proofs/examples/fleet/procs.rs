//! The member processes: children of this program (`fleet member …`), controlled by their
//! PID only. A child reads commands on its standard input: `leave` (or end of input, so a
//! parent that dies takes its children along) makes it leave the fleet in order and exit.

use std::io::{self, Write as _};
use std::os::unix::process::CommandExt as _;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process};

/// What every member of the run is started with.
#[derive(Debug, Clone)]
pub struct Spawner {
    /// The options after `member --name NAME`.
    pub common: Vec<String>,
    /// Run member `mN` under user (and group) id `base + N`, so that nftables rules can tell
    /// its packets apart (`--scenario partition`); `None`: as this process.
    pub uid_base: Option<u32>,
}

/// One running (or finished) member process.
#[derive(Debug)]
pub struct Proc {
    pub name: String,
    /// The user id it runs under, if one of its own.
    pub uid: Option<u32>,
    child: Child,
    stdin: Option<ChildStdin>,
    stopped: bool,
}

impl Spawner {
    /// Starts `fleet member --name NAME …` from this program's own binary.
    ///
    /// # Errors
    /// If the binary cannot be found or started.
    pub fn spawn(&self, name: &str) -> io::Result<Proc> {
        let exe = std::env::current_exe()?;
        let uid = self.uid_base.and_then(|base| {
            let n: u32 = name.trim_start_matches('m').parse().ok()?;
            base.checked_add(n)
        });
        let mut cmd = Command::new(exe);
        if let Some(uid) = uid {
            cmd.uid(uid).gid(uid);
        }
        let mut child = cmd
            .arg("member")
            .arg("--name")
            .arg(name)
            .args(&self.common)
            .stdin(Stdio::piped())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdin = child.stdin.take();
        Ok(Proc {
            uid,
            name: name.to_owned(),
            child,
            stdin,
            stopped: false,
        })
    }
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn signal(&self, sig: Signal) -> io::Result<()> {
        let pid = i32::try_from(self.pid())
            .ok()
            .and_then(Pid::from_raw)
            .ok_or_else(|| io::Error::other("pid out of range"))?;
        kill_process(pid, sig).map_err(io::Error::from)
    }

    /// `kill -9` and reap.
    pub fn kill9(&mut self) -> io::Result<ExitStatus> {
        match self.child.kill() {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => {}
            Err(e) => return Err(e),
        }
        self.stdin = None;
        self.child.wait()
    }

    /// SIGSTOP: the process freezes where it is (its sockets stay open).
    pub fn stop(&mut self) -> io::Result<()> {
        self.signal(Signal::STOP)?;
        self.stopped = true;
        Ok(())
    }

    /// SIGCONT.
    pub fn cont(&mut self) -> io::Result<()> {
        self.signal(Signal::CONT)?;
        self.stopped = false;
        Ok(())
    }

    /// Asks the member to leave in order (it hands its queues over, then exits).
    pub fn leave(&mut self) -> io::Result<()> {
        self.command(b"leave\n")
    }

    /// Asks the member to exit at once (its lease revoked, no handoff).
    pub fn quit(&mut self) -> io::Result<()> {
        self.command(b"quit\n")
    }

    fn command(&mut self, line: &[u8]) -> io::Result<()> {
        match self.stdin.as_mut() {
            Some(s) => {
                s.write_all(line)?;
                s.flush()
            }
            None => Err(io::Error::other("stdin already closed")),
        }
    }

    /// Whether it still runs (not exited).
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits up to `limit` for the exit.
    ///
    /// # Errors
    /// `TimedOut` if it still runs then.
    pub fn wait(&mut self, limit: Duration) -> io::Result<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{} (pid {}) still runs", self.name, self.pid()),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // Ours by PID: a stopped child cannot act on a kill until continued.
        if self.stopped {
            let _ = self.cont();
        }
        if self.running() {
            let _ = self.kill9();
        }
    }
}
