//! Runs `examples/mta/` with `--journal` and `--crashes`: the run is SIGKILLed at random
//! points (mid-batch, mid-drain, mid-freeze) and restarted from its journal, and the
//! `exactly-once: OK` line still adds up. With a planted fault (a journal that acknowledges
//! before its records are durable) the same check must fail.
//!
//! Like `mta_example.rs`, the test builds the example binary next to its own and runs it.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::OnceLock;

/// A small workload: a few seconds a round in a debug build.
const SMALL: &[&str] = &[
    "--messages",
    "10000",
    "--queues",
    "300",
    "--duration",
    "2h",
    "--arrival",
    "30m",
    "--bounce-rate",
    "20",
    "--drain-rate",
    "2",
    "--suspend-rate",
    "2",
];

fn mta() -> &'static PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let exe = std::env::current_exe().expect("test binary path");
        let profile_dir = exe
            .parent()
            .and_then(|deps| deps.parent())
            .expect("profile dir");
        let target_dir = profile_dir.parent().expect("target dir");
        let binary = profile_dir
            .join("examples")
            .join(format!("mta{}", std::env::consts::EXE_SUFFIX));
        let mut cargo = Command::new(env!("CARGO"));
        cargo
            .args(["build", "--example", "mta", "--target-dir"])
            .arg(target_dir);
        if cfg!(feature = "tokio") {
            cargo.args(["--features", "tokio"]);
        }
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cargo.arg("--release");
        }
        let status = cargo
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo build");
        assert!(status.success(), "cargo build --example mta failed");
        binary
    })
}

fn run(extra: &[&str], dir: &std::path::Path) -> (Output, String) {
    let out = Command::new(mta())
        .args(SMALL)
        .args(extra)
        .arg("--journal")
        .arg(dir)
        .output()
        .expect("run the mta example");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    (out, stdout)
}

fn line<'a>(stdout: &'a str, prefix: &str) -> &'a str {
    stdout
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no `{prefix}` line in:\n{stdout}"))
}

/// The number before `label` in `line`.
fn number(line: &str, label: &str) -> u64 {
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words
        .iter()
        .position(|w| w.trim_end_matches([';', ',', ')']) == label)
        .unwrap_or_else(|| panic!("no `{label}` in {line}"));
    words[at - 1]
        .trim_start_matches('(')
        .parse()
        .unwrap_or_else(|e| panic!("{label} in {line}: {e}"))
}

#[test]
fn three_kills_and_restarts_keep_exactly_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (out, stdout) = run(&["--crashes", "3", "--seed", "5"], dir.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{stderr}",
        out.status
    );
    let kills = line(&stdout, "journal: ");
    assert_eq!(number(kills, "kills"), 3, "three kills happened\n{stdout}");
    let ok = line(&stdout, "exactly-once: ");
    assert!(ok.starts_with("exactly-once: OK ("), "{stdout}");
    let [scheduled, delivered, drained, bounced, pending] =
        ["scheduled", "delivered", "drained", "bounced", "pending"].map(|l| number(ok, l));
    assert_eq!(scheduled, 10_000, "every message accepted\n{stdout}");
    assert_eq!(
        scheduled,
        delivered + drained + bounced + pending,
        "{stdout}"
    );
    assert!(delivered > 0 && drained > 0 && bounced > 0, "{stdout}");
    let (again, in_flight) = (number(ok, "redelivered"), number(ok, "in"));
    assert!(
        again <= in_flight,
        "redeliveries bounded by what was in flight\n{stdout}"
    );
}

#[test]
fn acknowledging_before_durable_is_caught() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (out, stdout) = run(
        &["--crashes", "3", "--seed", "5", "--unsynced-acks"],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(1), "the check fails\n{stdout}");
    let failed = line(&stdout, "exactly-once: ");
    assert!(failed.starts_with("exactly-once: FAILED ("), "{stdout}");
    assert!(
        number(failed, "lost") > 0,
        "acknowledged messages lost\n{stdout}"
    );
}

#[test]
fn crashes_need_a_journal() {
    let out = Command::new(mta())
        .args(SMALL)
        .args(["--crashes", "2"])
        .output()
        .expect("run the mta example");
    assert_eq!(out.status.code(), Some(2), "refused as a bad option");
}
