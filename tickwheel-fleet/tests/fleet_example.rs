//! Runs the `fleet` example (the ownership proof) as users do: the planted fault (dispatch
//! without the lease check) with `--scenario pause` must end `ownership: FAILED` with an
//! overlap and exit 1, the same scenario without the fault must end `ownership: OK`, and bad
//! options exit 2 without a panic; with `--journal redis` (no recovery hook: a killed member's
//! timers come back only from the fleet's journal) the kill must end `ownership: OK`, every
//! produced id delivered.
//!
//! The example starts its own etcd and redis-server; outside CI a machine without them skips
//! these tests with a printed reason, in CI it is a failure.

mod support;

use std::process::Output;

use support::{FLEET, SERVERS, SMALL, overlap_caught, ownership_ok};
use tickwheel_testkit::example::{installed, text};

fn have_servers() -> bool {
    installed(SERVERS)
}

fn run(extra: &[&str]) -> Output {
    FLEET
        .command()
        .args(SMALL)
        .args(extra)
        .output()
        .expect("run the fleet example")
}

#[test]
fn the_planted_fault_fails_the_ownership_check() {
    if !have_servers() {
        return;
    }
    let out = run(&["--scenario", "pause", "--plant", "no-lease-check"]);
    overlap_caught(&out);
}

#[test]
fn the_same_pause_without_the_fault_passes() {
    if !have_servers() {
        return;
    }
    let out = run(&["--scenario", "pause"]);
    let last = ownership_ok(&out);
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
    ownership_ok(&out);
    assert!(
        text(&out.stderr).contains("etcd https://"),
        "{}",
        text(&out.stderr)
    );
    let out = run(&["--tls", "--scenario", "pause", "--plant", "no-lease-check"]);
    overlap_caught(&out);
}

/// `--journal redis --scenario kill`: the killed member's queues are rebuilt from the journal
/// alone, and the check asks every produced id to be delivered (none merely held).
#[test]
fn with_the_journal_and_no_recovery_hook_the_kill_loses_nothing() {
    if !have_servers() {
        return;
    }
    let out = run(&["--journal", "redis", "--scenario", "kill"]);
    let last = ownership_ok(&out);
    assert!(last.contains(" + 0 held by live owners"), "{last}");
    assert!(out.status.success(), "{last}");
    // The survivors' adoptions rebuilt the killed member's timers from the journal (a journal
    // that never acknowledged a put would leave the inbox to carry them all).
    let err = text(&out.stderr);
    let rebuilt = err
        .lines()
        .filter_map(|l| {
            l.split(": ")
                .nth(1)?
                .strip_suffix(" timers rebuilt from the journal by adoptions so far")
        })
        .filter_map(|n| n.parse::<u64>().ok())
        .max()
        .unwrap_or(0);
    assert!(rebuilt > 0, "no timer rebuilt from the journal:\n{err}");
}

#[test]
fn bad_options_exit_2_without_a_panic() {
    FLEET.assert_usage_errors(&[
        &["--members", "0"],
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
        &["--journal", "etcd"],
        &["--tls", "--redis-url", "redis://127.0.0.1:1/"],
        &["--redis-url", "redis://127.0.0.1:1/", "--scenario", "kill"],
        &["--redis-url", "redis://[::1", "--scenario", "kill"],
        &["--etcd-url", "http://127.0.0.1:1", "--scenario", "kill"],
    ]);
}
