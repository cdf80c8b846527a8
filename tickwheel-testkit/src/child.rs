//! Child processes of a test: signals by PID, and the test binary run again as a child.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};

/// Sends signal `name` (`"STOP"`, `"CONT"`, `"TERM"`, `"KILL"`, ...) to process `pid` by
/// running `kill -<name> <pid>` (no unsafe `libc::kill`). Only for processes the caller
/// started.
///
/// # Errors
/// If `kill` cannot run or reports failure (no such process).
pub fn send_signal(pid: u32, name: &str) -> std::io::Result<()> {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "kill -{name} {pid} failed: {status}"
        )))
    }
}

/// This test binary run again as a child, running only the test `test` (which acts only when
/// the environment variable `env` is set, to `value`), and the lines it prints to standard
/// output, each without libtest's `test NAME ... ` in front.
///
/// Dropping it continues the child (a stopped one could not die), kills it by PID and reaps
/// it.
#[derive(Debug)]
pub struct TestChild {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    /// Reaped: its PID may belong to another process now, and gets no more signals.
    reaped: bool,
}

impl TestChild {
    /// Starts the child.
    ///
    /// # Panics
    /// If the test binary's path is unknown or it cannot be started.
    pub fn spawn(test: &str, env: &str, value: &str) -> TestChild {
        let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
        let mut child = Command::new(exe)
            .args(["--exact", test, "--nocapture", "--test-threads", "1"])
            .env(env, value)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {test}: {e}"));
        let lines: Arc<Mutex<Vec<String>>> = Arc::default();
        if let Some(out) = child.stdout.take() {
            let l = Arc::clone(&lines);
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    // libtest prints "test NAME ... " before the first line.
                    let line = line.rsplit(" ... ").next().unwrap_or("").to_owned();
                    l.lock().unwrap_or_else(PoisonError::into_inner).push(line);
                }
            });
        }
        TestChild {
            child,
            lines,
            reaped: false,
        }
    }

    /// Every line printed so far, in order.
    pub fn lines(&self) -> Vec<String> {
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many printed lines start with `prefix`.
    pub fn count(&self, prefix: &str) -> usize {
        self.lines()
            .iter()
            .filter(|l| l.starts_with(prefix))
            .count()
    }

    /// Whether a printed line is `line`.
    pub fn has(&self, line: &str) -> bool {
        self.lines().iter().any(|l| l == line)
    }

    /// The child's PID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL by PID, and reap. No-op once reaped.
    ///
    /// # Panics
    /// If the signal cannot be sent.
    pub fn kill9(&mut self) {
        if self.reaped {
            return;
        }
        if let Err(e) = send_signal(self.child.id(), "KILL") {
            panic!("kill child: {e}");
        }
        let _ = self.child.wait();
        self.reaped = true;
    }
}

impl Drop for TestChild {
    fn drop(&mut self) {
        if self.reaped {
            return;
        }
        // Ours, by PID (a stopped child is continued first so it can die).
        let _ = send_signal(self.child.id(), "CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
