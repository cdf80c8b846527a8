//! Runs the `handoff` example (the custody proof) with `kill -9` of the source and of the
//! target at every protocol step, and of the redis-server after every step: each run must
//! end with `custody: OK`, exit 0, and report at-least-once redeliveries only when a host
//! that delivers was killed. Also: `--list-steps`, and bad options exit 2 without a panic.
//!
//! The example starts its own redis-server; outside CI a machine without one skips these
//! tests with a printed reason, in CI it is a failure.

use std::process::{Command, Output};

use tickwheel_testkit::example::{Example, can_run, installed, text};

/// The custody proof, built with the test's profile.
const HANDOFF: Example = Example::new("tickwheel-proofs", "handoff");

/// Small enough for a debug build: about a second a run.
const SMALL: &[&str] = &[
    "--queues",
    "2",
    "--messages",
    "2000",
    "--rate",
    "500",
    "--max-delay-ms",
    "500",
];

fn handoff() -> Command {
    HANDOFF.command()
}

/// Whether a redis-server can be started; outside CI its absence skips the test.
fn have_redis() -> bool {
    installed(&[("redis-server", "redis-server")])
}

fn steps() -> Vec<String> {
    let out = handoff()
        .arg("--list-steps")
        .output()
        .expect("run --list-steps");
    assert!(out.status.success());
    text(&out.stdout).lines().map(str::to_string).collect()
}

/// Where the target's steps begin in `--list-steps`.
fn first_target_step(all: &[String]) -> usize {
    all.iter().position(|s| s == "claim").expect("a claim step")
}

/// Runs with the kills; the last line must say custody holds, and is returned.
fn custody_ok(kills: &[String]) -> String {
    let mut args = Vec::new();
    for k in kills {
        args.extend(["--kill".to_string(), k.clone()]);
    }
    custody_ok_with(&args).0
}

/// Runs with these options; custody must hold. Returns the last line and standard error.
fn custody_ok_with(extra: &[String]) -> (String, String) {
    let kills = extra;
    let mut cmd = handoff();
    cmd.args(SMALL).args(extra);
    let out: Output = cmd.output().expect("run the handoff example");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    let last = stdout.lines().last().unwrap_or_default().to_string();
    assert!(
        out.status.success() && last.starts_with("custody: OK ("),
        "{kills:?}: {}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        !stderr.contains("no process reached"),
        "{kills:?}: a kill never happened\n{stderr}"
    );
    (last, stderr)
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(ToString::to_string).collect()
}

/// The first line of `stderr` holding `needle`; panics with `what` and `stderr` if none.
fn line_with<'a>(stderr: &'a str, needle: &str, what: &str) -> &'a str {
    stderr
        .lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("{what}:\n{stderr}"))
}

/// A zombie source: stopped (SIGSTOP) while PREPARING, past its lease; the spare reclaims,
/// fetches, commits and imports; the source resumes (SIGCONT), its next write is fenced and
/// the values no claimer took come back to it. The ledger is exact.
#[test]
fn a_zombie_source_is_fenced_and_gets_its_unsent_values_back() {
    if !have_redis() {
        return;
    }
    // Stopped before any chunk: every frozen value comes back.
    let (_, stderr) = custody_ok_with(&strings(&[
        "--stop",
        "source:prepare",
        "--lease-ms",
        "1500",
    ]));
    let fenced = line_with(
        &stderr,
        "fenced at append of dest-0.example",
        "the source was not fenced",
    );
    assert!(fenced.contains("0 chunk(s) taken"), "{fenced}");
    assert!(!fenced.contains(" 0 value(s) handed back"), "{fenced}");
    // Stopped after its chunks: the spare took them all, nothing comes back.
    let (_, stderr) = custody_ok_with(&strings(&["--stop", "source:append", "--lease-ms", "1500"]));
    let fenced = line_with(
        &stderr,
        "fenced at seal of dest-0.example",
        "the source was not fenced",
    );
    assert!(fenced.contains("0 value(s) handed back"), "{fenced}");
}

/// A source killed while PREPARING stays dead past its lease; the spare reclaims the offer
/// (taking the chunks in so far); the source restarts: its spool's chunk records say which
/// of its values were taken, and the rest are handed back, not lost. The ledger is exact.
#[test]
fn a_source_restarted_after_a_reclaim_keeps_what_was_not_taken() {
    if !have_redis() {
        return;
    }
    for (step, taken) in [("prepare", "0 chunk(s) taken"), ("append", "")] {
        let (_, stderr) = custody_ok_with(&strings(&[
            "--kill",
            &format!("source:{step}"),
            "--spare",
            "--lease-ms",
            "1500",
        ]));
        let line = line_with(
            &stderr,
            "source#2: dest-0.example was taken over",
            &format!("{step}: no takeover seen"),
        );
        assert!(line.contains(taken), "{step}: {line}");
        if step == "prepare" {
            // Nothing was appended: every frozen value is the source's again.
            assert!(!line.contains(" 0 value(s) handed back"), "{line}");
        }
    }
}

/// A target killed mid-claim that never comes back: the spare reclaims after the lease.
#[test]
fn a_dead_target_is_replaced_by_the_spare() {
    if !have_redis() {
        return;
    }
    for step in ["claim", "spool"] {
        let (_, stderr) = custody_ok_with(&strings(&[
            "--kill",
            &format!("target:{step}"),
            "--spare",
            "--lease-ms",
            "1500",
            "--offer-ttl-ms",
            "1500",
        ]));
        assert!(
            stderr.contains("spare#1: imported dest-0.example"),
            "{stderr}"
        );
    }
}

/// Runs with `extra` and a planted fault (the target leaves one entry of each offer out):
/// the ledger must say FAILED, exit status 1.
fn planted_loss_fails(extra: &[&str]) {
    let out = handoff()
        .args(SMALL)
        .args(extra)
        .env("HANDOFF_FAULT", "skip-one")
        .output()
        .expect("run the handoff example");
    let stdout = text(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    assert_eq!(out.status.code(), Some(1), "{last}");
    assert!(
        last.starts_with("custody: FAILED") && last.contains("lost (in no place)"),
        "{last}"
    );
}

/// A planted fault (the target leaves one entry of each offer out): the ledger says
/// FAILED, exit status 1.
#[test]
fn a_planted_loss_fails_the_ledger() {
    if !have_redis() {
        return;
    }
    planted_loss_fails(&[]);
}

/// `--tls`: a redis-server serving TLS only with client certificates (a CA made for the run),
/// killed at `seal` and restarted: custody holds; the planted loss still fails the ledger.
#[test]
fn over_tls_custody_holds_and_the_planted_loss_fails() {
    if !have_redis() {
        return;
    }
    custody_ok_with(&strings(&["--tls", "--kill", "redis:seal"]));
    planted_loss_fails(&["--tls"]);
}

fn redeliveries(last: &str) -> u64 {
    let n = last
        .split("at-least-once redeliveries ")
        .nth(1)
        .and_then(|r| r.split(',').next());
    n.and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no redelivery count in {last}"))
}

#[test]
fn without_kills_custody_holds_and_nothing_is_delivered_twice() {
    if !have_redis() {
        return;
    }
    let last = custody_ok(&[]);
    assert_eq!(redeliveries(&last), 0, "{last}");
}

#[test]
fn kill_the_source_at_every_step() {
    if !have_redis() {
        return;
    }
    let all = steps();
    for step in &all[..first_target_step(&all)] {
        let last = custody_ok(&[format!("source:{step}")]);
        // A source killed before its first load (at `acquire`) loads on its next boot: the
        // run still moves the `--messages` timers, not empty queues.
        assert!(ids(&last) >= 2000, "source:{step}: {last}");
    }
}

#[test]
fn kill_the_target_at_every_step() {
    if !have_redis() {
        return;
    }
    let all = steps();
    for step in &all[first_target_step(&all)..] {
        custody_ok(&[format!("target:{step}")]);
    }
}

#[test]
fn kill_redis_after_every_step() {
    if !have_redis() {
        return;
    }
    for step in steps() {
        custody_ok(&[format!("redis:{step}")]);
    }
}

/// The `N` of `custody: OK (N ids: …)`.
fn ids(last: &str) -> u64 {
    last.strip_prefix("custody: OK (")
        .and_then(|r| r.split_once(" ids"))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no id count in {last:?}"))
}

/// Two runs against one `--redis-url`: each run keys its records under a prefix of its
/// own, so the second does not meet the first's owner records.
#[test]
fn two_runs_share_one_redis_url() {
    let Some(server) = tickwheel_testkit::redis::start_for_test() else {
        return;
    };
    let url = server.url();
    for run in 0..2 {
        let (last, _) = custody_ok_with(&strings(&["--redis-url", &url]));
        assert!(ids(&last) >= 2000, "run {run}: {last}");
    }
}

/// A Redis that would lose acknowledged steps (`appendfsync everysec`) is refused before
/// any host starts: exit 2, the reason on standard error.
#[test]
fn an_unsafe_redis_url_exits_2() {
    let Some(server) =
        tickwheel_testkit::redis::start_for_test_with(&[("appendfsync", "everysec")])
    else {
        return;
    };
    let out = handoff()
        .args(SMALL)
        .args(["--redis-url", &server.url()])
        .output()
        .expect("run the handoff example");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("appendfsync"), "{stderr}");
}

#[test]
fn bad_options_exit_2_without_a_panic() {
    HANDOFF.assert_usage_errors(&[
        &["--kill", "source"],
        &["--kill", "source:nothing"],
        &["--queues", "0"],
        &["--kill", "source:freeze", "--spare"],
        &["--kill", "target:import", "--spare"],
        &["--kill", "target:commit", "--spare"],
        &["--max-delay-ms", "600000"],
        &["--messages", "many"],
        &["--redis-url", "redis://127.0.0.1:1/"],
        &["--redis-url", "redis://[::1"],
        &[
            "--redis-url",
            "redis://127.0.0.1:1/",
            "--kill",
            "redis:seal",
        ],
    ]);
}

/// Whether libfaketime is installed; outside CI its absence skips the test.
fn have_faketime() -> bool {
    let found = [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/faketime/libfaketimeMT.so.1",
    ]
    .iter()
    .any(|p| std::path::Path::new(p).exists())
        || std::env::var_os("FAKETIME_LIB").is_some();
    can_run((!found).then(|| "libfaketime is not installed (apt-get install faketime)".into()))
}

/// The source 5 minutes ahead and the target 5 minutes behind (and the other way round):
/// both hosts see the skew, and custody holds with no delivery before its deadline on the
/// reference clock (the ledger checks each one) and imported deadlines not moved by the
/// skew.
#[test]
fn clock_skew_of_five_minutes_either_way() {
    if !have_redis() || !have_faketime() {
        return;
    }
    for (source, target) in [("+5m", "-5m"), ("-5m", "+5m")] {
        let out = handoff()
            .args(SMALL)
            .args(["--faketime", &format!("source={source}")])
            .args(["--faketime", &format!("target={target}")])
            .output()
            .expect("run the handoff example");
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        let last = stdout.lines().last().unwrap_or_default();
        assert!(
            out.status.success() && last.starts_with("custody: OK ("),
            "{source}/{target}: {last}\n{stderr}"
        );
        for (host, offset) in [("source", source), ("target", target)] {
            let seen = format!("{host}#1: host clock {}300.0 s off", &offset[..1]);
            assert!(
                stderr.contains(&seen),
                "{host} not skewed {offset}:\n{stderr}"
            );
        }
        let shift = last
            .split("largest import shift ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse::<i64>().ok())
            .unwrap_or_else(|| panic!("no import shift in {last}"));
        // The 300 s skew cancelled out. What is left is a tick plus the anchors' round
        // trips to Redis, which a loaded machine stretches past a millisecond, so the bound
        // is far from both (the ledger has already checked that none moved earlier).
        assert!(
            shift.abs() <= 1_000_000,
            "imported deadlines moved {shift} µs: {last}"
        );
    }
}
