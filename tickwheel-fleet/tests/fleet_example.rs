//! Runs the `fleet` example (the ownership proof) as users do: the planted fault (dispatch
//! without the lease check) with `--scenario pause` must end `ownership: FAILED` with an
//! overlap and exit 1, the same scenario without the fault must end `ownership: OK`, and bad
//! options exit 2 without a panic.
//!
//! The example starts its own etcd and redis-server; outside CI a machine without them skips
//! these tests with a printed reason, in CI it is a failure.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::OnceLock;

/// Small enough for a debug build; a lease of 1 s keeps the pause short.
const SMALL: &[&str] = &[
    "--members",
    "3",
    "--queues",
    "24",
    "--rate",
    "300",
    "--max-delay-ms",
    "300",
    "--lease-ms",
    "1000",
];

fn fleet() -> &'static PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let exe = std::env::current_exe().expect("test binary path");
        // target/<profile>/deps/fleet_example-<hash> -> target/<profile>/examples/fleet
        let profile_dir = exe.parent().and_then(|d| d.parent()).expect("profile dir");
        let target_dir = profile_dir.parent().expect("target dir");
        let binary = profile_dir
            .join("examples")
            .join(format!("fleet{}", std::env::consts::EXE_SUFFIX));
        // Usually built by `cargo test` already; a stale binary must not be tested.
        let mut cargo = Command::new(env!("CARGO"));
        cargo.args(["build", "-p", "tickwheel-fleet", "--example", "fleet"]);
        cargo.arg("--target-dir").arg(target_dir);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cargo.arg("--release");
        }
        let status = cargo
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo build");
        assert!(status.success(), "cargo build --example fleet failed");
        binary
    })
}

/// Whether etcd and redis-server can be started; outside CI their absence skips the test.
fn have_servers() -> bool {
    let missing: Vec<&str> = [("etcd", "etcd-server"), ("redis-server", "redis-server")]
        .into_iter()
        .filter(|(bin, _)| Command::new(bin).arg("--version").output().is_err())
        .map(|(_, pkg)| pkg)
        .collect();
    if missing.is_empty() {
        return true;
    }
    let msg = format!("not installed: {} (apt-get install …)", missing.join(", "));
    assert!(std::env::var_os("CI").is_none(), "{msg}");
    eprintln!("skipped: {msg}");
    false
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn run(extra: &[&str]) -> Output {
    Command::new(fleet())
        .args(SMALL)
        .args(extra)
        .output()
        .expect("run the fleet example")
}

fn last_line(out: &Output) -> String {
    text(&out.stdout).lines().last().unwrap_or("").to_string()
}

#[test]
fn the_planted_fault_fails_the_ownership_check() {
    if !have_servers() {
        return;
    }
    let out = run(&["--scenario", "pause", "--plant", "no-lease-check"]);
    let last = last_line(&out);
    assert!(
        last.starts_with("ownership: FAILED overlap on queue"),
        "last line: {last}\nstderr:\n{}",
        text(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{last}");
}

#[test]
fn the_same_pause_without_the_fault_passes() {
    if !have_servers() {
        return;
    }
    let out = run(&["--scenario", "pause"]);
    let last = last_line(&out);
    assert!(
        last.starts_with("ownership: OK ("),
        "last line: {last}\nstderr:\n{}",
        text(&out.stderr)
    );
    assert!(out.status.success(), "{last}");
}

/// `--tls`: etcd and redis-server serve TLS only and ask for client certificates; every
/// connection of the run (members, spool, handoffs) goes over TLS with the run's CA.
#[test]
fn over_tls_the_kill_passes_and_the_planted_fault_fails() {
    if !have_servers() {
        return;
    }
    let out = run(&["--tls", "--scenario", "kill"]);
    let last = last_line(&out);
    assert!(
        last.starts_with("ownership: OK ("),
        "last line: {last}\nstderr:\n{}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stderr).contains("etcd https://"),
        "{}",
        text(&out.stderr)
    );
    let out = run(&["--tls", "--scenario", "pause", "--plant", "no-lease-check"]);
    let last = last_line(&out);
    assert!(
        last.starts_with("ownership: FAILED overlap on queue"),
        "last line: {last}\nstderr:\n{}",
        text(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{last}");
}

#[test]
fn bad_options_exit_2_without_a_panic() {
    for bad in [
        &["--members", "0"][..],
        &["--queues", "100000"],
        &["--messages", "99999999999"],
        &["--lease-ms", "1500"],
        &["--scenario", "sleep"],
        &[
            "--etcd-url",
            "http://127.0.0.1:1",
            "--scenario",
            "etcd-restart",
        ],
        &["--plant", "everything"],
        &["--tls", "--redis-url", "redis://127.0.0.1:1/"],
        &["--redis-url", "redis://127.0.0.1:1/", "--scenario", "kill"],
        &["--redis-url", "redis://[::1", "--scenario", "kill"],
        &["--etcd-url", "http://127.0.0.1:1", "--scenario", "kill"],
    ] {
        let out = Command::new(fleet())
            .args(bad)
            .output()
            .expect("run the fleet example");
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {err}");
        assert!(!err.contains("panicked"), "{bad:?}: {err}");
    }
}
