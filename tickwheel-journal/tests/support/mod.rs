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

/// What every killed child is given first (see [`run_and_kill`]): its journal's directory, the
/// seed of its random steps and its durability; then the test's own arguments.
pub struct ChildRun {
    pub dir: String,
    pub seed: u64,
    /// `Batched` (a 1 ms window) in even rounds, `Sync` in odd ones.
    pub durability: Durability,
    pub rest: Vec<String>,
}

/// The parent's side: the spec of a child of round `round` in `dir` seeded `seed`, followed
/// by `rest` (no commas in them).
pub fn child_spec(dir: &Path, seed: u64, round: u64, rest: &[&str]) -> String {
    let mode = if round.is_multiple_of(2) {
        "batched"
    } else {
        "sync"
    };
    let mut parts = vec![dir.display().to_string(), seed.to_string(), mode.to_owned()];
    parts.extend(rest.iter().map(|r| r.to_string()));
    parts.join(",")
}

/// The child's side: the [`ChildRun`] the parent put in the environment variable `env`;
/// `None` in the parent's own run of the child test. Panics on a spec [`child_spec`] did
/// not make.
pub fn child_run(env: &str) -> Option<ChildRun> {
    let spec = std::env::var(env).ok()?;
    let mut parts = spec.split(',').map(str::to_owned);
    let dir = parts.next().expect("dir");
    let seed = parts.next().and_then(|s| s.parse().ok()).expect("seed");
    let durability = match parts.next().as_deref() {
        Some("batched") => Durability::Batched(Duration::from_millis(1)),
        _ => Durability::Sync,
    };
    Some(ChildRun {
        dir,
        seed,
        durability,
        rest: parts.collect(),
    })
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
