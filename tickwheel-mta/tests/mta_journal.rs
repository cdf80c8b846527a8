//! Runs `examples/mta/` with `--journal` and `--crashes`: the run is SIGKILLed at random
//! points (mid-batch, mid-drain, mid-freeze) and restarted from its journal, and the
//! `exactly-once: OK` line still adds up. With a planted fault (a journal that acknowledges
//! before its records are durable) the same check must fail.
//!
//! Like `mta_example.rs`, the test builds the example binary next to its own and runs it.

mod support;

use std::process::Output;

use support::{MTA, text, workload};

/// A small workload: a few seconds a round in a debug build.
fn small() -> Vec<&'static str> {
    workload("10000", "2")
}

fn run(extra: &[&str], dir: &std::path::Path) -> (Output, String) {
    let out = MTA
        .command()
        .args(small())
        .args(extra)
        .arg("--journal")
        .arg(dir)
        .output()
        .expect("run the mta example");
    let stdout = text(&out.stdout);
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
    let stderr = text(&out.stderr);
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
    let mut args = small();
    args.extend(["--crashes", "2"]);
    let out = MTA.run(args);
    assert_eq!(out.status.code(), Some(2), "refused as a bad option");
}
