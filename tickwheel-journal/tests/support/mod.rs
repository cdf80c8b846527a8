//! What the journal's integration tests share, included by each as `mod support;`: opening
//! a journal on every engine built, and the harness of the SIGKILL tests (the test binary
//! runs one of its own tests as the child and kills it).
// Each test uses its own subset.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use tickwheel_journal::{Durability, Durable, Engine, Options};

/// The journal the custody tests open: `String` queues, `u64` ids, `String` values.
pub type J = Durable<String, u64, String>;

/// Every engine this build has: redb, and fjall with the `fjall` feature.
pub fn engines() -> Vec<Engine> {
    #[cfg_attr(not(feature = "fjall"), allow(unused_mut))]
    let mut all = vec![Engine::Redb];
    #[cfg(feature = "fjall")]
    all.push(Engine::Fjall);
    all
}

/// Runs `test` once per engine of [`engines`], each with a fresh temporary directory.
pub fn each_engine(mut test: impl FnMut(Engine, &Path)) {
    for engine in engines() {
        let dir = tempfile::tempdir().expect("temp dir");
        test(engine, dir.path());
    }
}

/// Opens (recovers) the journal in `dir` on `engine`, every change synced. Panics if it
/// cannot.
pub fn open(dir: &Path, engine: Engine) -> J {
    Durable::open(
        dir,
        Options::new().engine(engine).durability(Durability::Sync),
    )
    .expect("open the journal")
}

/// In a child process (see [`run_and_kill`]), the comma-separated arguments the parent put
/// in the environment variable `env`; `None` in the parent's own run of the child test.
pub fn child_args(env: &str) -> Option<Vec<String>> {
    let spec = std::env::var(env).ok()?;
    Some(spec.split(',').map(str::to_owned).collect())
}

/// The durability a killed child runs with, by its argument: `batched` (a 1 ms window), any
/// other word `Sync`.
pub fn durability_named(name: &str) -> Durability {
    if name == "batched" {
        Durability::Batched(Duration::from_millis(1))
    } else {
        Durability::Sync
    }
}

/// Runs the test `child` of this test binary as a child process with `env = spec`, waits
/// (60 s at most) until it prints a line ending in `OPEN`, lets it run `run_for` more,
/// SIGKILLs it and returns every line it printed. Panics if it cannot spawn the child or
/// the child never opens.
pub fn run_and_kill(child: &str, env: &str, spec: String, run_for: Duration) -> Vec<String> {
    let exe = std::env::current_exe().expect("the test binary");
    let mut process = Command::new(&exe)
        .args(["--exact", child, "--nocapture", "--test-threads=1"])
        .env(env, spec)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the child");
    let stdout = process.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        let mut opened = Some(tx);
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.ends_with("OPEN")
                && let Some(tx) = opened.take()
            {
                let _ = tx.send(());
            }
            lines.push(line);
        }
        lines
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the child opened the journal");
    std::thread::sleep(run_for);
    process.kill().expect("SIGKILL");
    let _ = process.wait();
    reader.join().expect("reader")
}
