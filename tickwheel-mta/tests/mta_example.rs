//! Runs `examples/mta/` (the MTA scheduled-queue simulation) at a small size and checks what
//! it promises: the `exactly-once: OK` line adds up, `--json` says the same, the real clock
//! works with both dispatchers, and bad options end in a clear error with exit code 2, not
//! a panic.
//!
//! The test makes sure the example binary next to its own is built and current (`cargo
//! build --example mta` with the same profile, features and target directory, by
//! `tickwheel_testkit::example`) and runs it.

mod support;

use std::process::Output;

use support::{MTA, text, workload};

/// Small enough for a debug build: a few seconds each.
fn small() -> Vec<&'static str> {
    let mut args = workload("20000", "1");
    args.extend(["--seed", "7"]);
    args
}

fn run(args: &[&str]) -> Output {
    MTA.run(args)
}

/// The run's standard output; it must have exited with status 0.
fn succeeded(out: &Output) -> String {
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{}",
        out.status,
        text(&out.stderr)
    );
    stdout
}

/// Parses `exactly-once: OK (N scheduled = A delivered + B drained + C bounced + D pending;
/// 0 duplicates)` into [N, A, B, C, D].
fn parse_ok_line(stdout: &str) -> [u64; 5] {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("exactly-once: "))
        .unwrap_or_else(|| panic!("no exactly-once line in:\n{stdout}"));
    assert!(line.starts_with("exactly-once: OK ("), "not OK: {line}");
    assert!(
        line.ends_with("; 0 duplicates)"),
        "duplicates reported: {line}"
    );
    let words: Vec<&str> = line.split_whitespace().collect();
    let number = |label: &str| -> u64 {
        let at = words
            .iter()
            .position(|w| w.trim_end_matches(';') == label)
            .unwrap_or_else(|| panic!("no `{label}` in {line}"));
        words[at - 1]
            .trim_start_matches('(')
            .parse()
            .unwrap_or_else(|e| panic!("{label} in {line}: {e}"))
    };
    ["scheduled", "delivered", "drained", "bounced", "pending"].map(number)
}

#[test]
fn small_run_proves_exactly_once() {
    let out = run(&small());
    let stdout = succeeded(&out);
    let [scheduled, delivered, drained, bounced, pending] = parse_ok_line(&stdout);
    assert_eq!(scheduled, 20_000, "every message is scheduled\n{stdout}");
    assert_eq!(
        scheduled,
        delivered + drained + bounced + pending,
        "the line adds up\n{stdout}"
    );
    assert!(
        delivered > 0 && drained > 0 && bounced > 0,
        "operators acted\n{stdout}"
    );
    for row in [
        "messages scheduled",
        "still pending",
        "lateness",
        "peak memory",
        "ops/s",
    ] {
        assert!(stdout.contains(row), "no `{row}` in the table\n{stdout}");
    }
}

#[test]
fn json_output_says_the_same() {
    let mut args = small();
    args.push("--json");
    let out = run(&args);
    let stdout = succeeded(&out);
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("stdout is one JSON object");
    let m = &v["messages"];
    let n = |k: &str| {
        m[k].as_u64()
            .unwrap_or_else(|| panic!("messages.{k} in {v}"))
    };
    assert_eq!(n("scheduled"), 20_000);
    assert_eq!(
        n("scheduled"),
        n("delivered") + n("drained") + n("bounced") + n("pending")
    );
    assert_eq!(v["exactly_once"]["ok"], true, "{v}");
    assert_eq!(v["exactly_once"]["duplicates"], 0, "{v}");
    assert_eq!(v["config"]["seed"], 7, "{v}");
    let line = v["exactly_once"]["line"].as_str().expect("line");
    assert_eq!(parse_ok_line(line)[0], 20_000);
}

/// 30 min of MTA time at 1/2000 speed: under a second of wall-clock time.
const REAL: &[&str] = &[
    "--clock",
    "real",
    "--scale",
    "0.0005",
    "--messages",
    "5000",
    "--queues",
    "100",
    "--duration",
    "30m",
    "--arrival",
    "10m",
    "--retry-base",
    "1m",
    "--retry-cap",
    "5m",
    "--seed",
    "3",
];

fn real_clock_run(dispatcher: &str) {
    let mut args = REAL.to_vec();
    args.extend(["--dispatcher", dispatcher]);
    let out = run(&args);
    let stdout = succeeded(&out);
    let [scheduled, ..] = parse_ok_line(&stdout);
    assert_eq!(scheduled, 5_000, "{stdout}");
    assert!(
        stdout.contains(&format!("--dispatcher {dispatcher}")),
        "the header names the dispatcher\n{stdout}"
    );
    assert!(
        stdout.contains(" ms (tick"),
        "real mode reports lateness in ms\n{stdout}"
    );
}

#[test]
fn real_clock_with_the_thread_dispatcher_proves_exactly_once() {
    real_clock_run("thread");
}

#[cfg(feature = "tokio")]
#[test]
fn real_clock_with_the_tokio_due_stream_proves_exactly_once() {
    real_clock_run("tokio");
}

/// Without the feature, `--dispatcher tokio` is a clear error, not a silent fallback.
#[cfg(not(feature = "tokio"))]
#[test]
fn tokio_dispatcher_needs_the_feature() {
    let mut args = REAL.to_vec();
    args.extend(["--dispatcher", "tokio"]);
    let out = run(&args);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--features tokio"), "{stderr}");
}

#[test]
fn bad_options_are_refused_cleanly() {
    let cases: &[(&[&str], &str)] = &[
        (&["--queues", "0"], "--queues"),
        (&["--messages=-5"], "--messages"),
        (&["--fail-rate", "2"], "--fail-rate"),
        (&["--jitter", "NaN"], "--jitter"),
        (&["--duration", "banana"], "banana"),
        (&["--duration", "0s"], "--duration"),
        (&["--arrival", "5h", "--duration", "4h"], "--arrival"),
        (&["--retry-base", "1h", "--retry-cap", "5m"], "--retry-cap"),
        (&["--clock", "sundial"], "sundial"),
        (&["--clock", "real", "--scale", "0"], "--scale"),
        (&["--dispatcher", "thread"], "--dispatcher"),
        (&["--threads", "0"], "--threads"),
        (&["--no-such-option"], "--no-such-option"),
        // Sizes that would be allocated up front: refused, naming the limit.
        (
            &["--queues", "4294967295", "--messages", "10"],
            "at most 1000000",
        ),
        (&["--messages", "4294967295"], "at most 20000000"),
    ];
    for (args, mention) in cases {
        let out = run(args);
        let stderr = text(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?} should exit 2\n{stderr}"
        );
        assert!(
            stderr.contains("error"),
            "{args:?}: no error message\n{stderr}"
        );
        assert!(
            stderr.contains(mention),
            "{args:?}: message does not name `{mention}`\n{stderr}"
        );
        assert!(!stderr.contains("panicked"), "{args:?} panicked\n{stderr}");
    }
}

/// A year of MTA time: the operators' plan is drawn as the run goes, so memory does not
/// grow with `--duration` (computed up front, a year at the default rates was 1.25 GB).
#[test]
fn a_year_long_run_finishes_in_bounded_memory() {
    let out = run(&[
        "--messages",
        "200",
        "--queues",
        "10",
        "--duration",
        "365d",
        "--arrival",
        "1h",
        "--bounce-rate",
        "0.05",
        "--drain-rate",
        "0.01",
        "--suspend-rate",
        "0.01",
        "--seed",
        "5",
        "--json",
    ]);
    let stdout = succeeded(&out);
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("stdout is one JSON object");
    assert_eq!(v["exactly_once"]["ok"], true, "{v}");
    let peak = v["peak_memory_bytes"]
        .as_u64()
        .expect("peak memory on Linux");
    assert!(peak < 200 << 20, "peak memory {peak} bytes");
}
