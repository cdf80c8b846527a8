//! `--journal DIR [--crashes N]`: the parent process runs the simulation as child
//! processes (this binary again, with hidden `--round` options), SIGKILLs a child at a
//! random point N times and restarts it from the journal, then reconciles the ledger file
//! with what the journal holds and prints the `exactly-once:` line.
//!
//! Each child is armed with an MTA time and a kind of point (mid-batch, mid-drain,
//! mid-freeze): at the first such point from that time on it prints `crash-point KIND`
//! and waits, and the parent kills it with SIGKILL (`Child::kill`). The journal's writer
//! thread keeps running for the few microseconds that takes, as it would for a kill from
//! outside.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::args::Args;
use crate::journal::{self, Anchor, Arm, Book, Fate, Point, Round};
use crate::workload::{Workload, nanos};

/// The options the parent gives each child.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ChildArgs {
    /// Runs one round of a `--journal` run (set by the parent).
    #[arg(long, hide = true)]
    pub round: Option<u32>,
    /// MTA time 0 as UNIX nanoseconds, the same in every round.
    #[arg(long, hide = true)]
    pub anchor: Option<u64>,
    /// The MTA time from which the round stops at a kill point.
    #[arg(long, hide = true)]
    pub kill_at: Option<u64>,
    /// The kind of that kill point: 0 batch, 1 drain, 2 freeze.
    #[arg(long, hide = true)]
    pub kill_kind: Option<usize>,
    /// A planted fault, for the tests: the journal acknowledges before its records are
    /// durable (`Async` without the run's flushes). Kills must then show lost messages.
    #[arg(long, hide = true)]
    pub unsynced_acks: bool,
}

/// The `--journal` run: a child round, or the parent of the rounds.
pub fn main(args: &Args, seed: u64) -> ExitCode {
    let Some(dir) = args.journal.as_deref() else {
        return ExitCode::FAILURE;
    };
    let result = match args.child.round {
        Some(round) => child(dir, args, seed, round).map(|()| ExitCode::SUCCESS),
        None => parent(dir, args, seed),
    };
    result.unwrap_or_else(|e| {
        eprintln!("mta --journal: {e}");
        ExitCode::FAILURE
    })
}

fn child(dir: &Path, args: &Args, seed: u64, round: u32) -> Result<(), String> {
    let work = Workload::new(args, seed);
    let anchor = Anchor::new(args.child.anchor.ok_or("a round needs --anchor")?)?;
    let arm = match (args.child.kill_at, args.child.kill_kind) {
        (Some(at), Some(k)) => Some(Arm {
            at,
            kind: *Point::ALL.get(k).ok_or("bad kill kind")?,
        }),
        _ => None,
    };
    Round::start(dir, args, &work, anchor, round, arm)?.run()
}

fn parent(dir: &Path, args: &Args, seed: u64) -> Result<ExitCode, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let (timers, ledger) = journal::paths(dir);
    if timers.exists() {
        std::fs::remove_dir_all(&timers).map_err(|e| format!("{}: {e}", timers.display()))?;
    }
    if ledger.exists() {
        std::fs::remove_file(&ledger).map_err(|e| format!("{}: {e}", ledger.display()))?;
    }
    let anchor_ns = Anchor::now_wall_ns();
    let end = nanos(args.duration);
    let mut rng = StdRng::seed_from_u64(seed ^ 0x6b69_6c6c);
    let mut kills: Vec<(u64, usize)> = (0..args.crashes)
        .map(|_| {
            (
                rng.gen_range(0..end.max(1) / 10 * 9 + 1),
                rng.gen_range(0..3),
            )
        })
        .collect();
    kills.sort_unstable();
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    let started = Instant::now();
    let mut killed = [0u32; 3];
    let mut round = 0u32;
    loop {
        let mut cmd = Command::new(&exe);
        cmd.args(std::env::args_os().skip(1))
            .args([
                "--round",
                &round.to_string(),
                "--anchor",
                &anchor_ns.to_string(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if args.seed.is_none() {
            cmd.args(["--seed", &seed.to_string()]);
        }
        if let Some(&(at, kind)) = kills.get(round as usize) {
            cmd.args([
                "--kill-at",
                &at.to_string(),
                "--kill-kind",
                &kind.to_string(),
            ]);
        }
        let mut child = cmd.spawn().map_err(|e| format!("starting a round: {e}"))?;
        let stdout = child.stdout.take().ok_or("no pipe from the round")?;
        let mut point = None;
        for line in BufReader::new(stdout).lines() {
            let line = line.map_err(|e| e.to_string())?;
            if let Some(kind) = line.strip_prefix("crash-point ") {
                child.kill().map_err(|e| format!("SIGKILL: {e}"))?;
                point = Point::ALL.iter().position(|p| p.name() == kind);
                break;
            }
        }
        let status = child.wait().map_err(|e| e.to_string())?;
        round += 1;
        match point {
            Some(k) => killed[k] += 1,
            None if status.success() => {
                if (round as usize) < kills.len() {
                    continue; // its kill time came after its last kill point; next one
                }
                break;
            }
            None => return Err(format!("round {} failed: {status}", round - 1)),
        }
    }
    let wall = started.elapsed();
    reconcile(dir, args, seed, anchor_ns, killed, round, wall)
}

/// The ledger file against the journal: every accepted message delivered, drained,
/// bounced, or pending in the journal, exactly one of these; redeliveries only of messages
/// in flight at a kill, each under a higher attempt.
fn reconcile(
    dir: &Path,
    args: &Args,
    seed: u64,
    anchor_ns: u64,
    killed: [u32; 3],
    rounds: u32,
    wall: std::time::Duration,
) -> Result<ExitCode, String> {
    let work = Workload::new(args, seed);
    let book = Book::read(&journal::paths(dir).1, args, &work)?;
    let anchor = Anchor::new(anchor_ns)?;
    let opened = Instant::now();
    let j = journal::open(dir, args)?;
    let recovery = opened.elapsed();
    let inv = journal::inventory(&j, args.queues, &anchor);
    let count = |f: Fate| book.fate.iter().filter(|&&x| x == f).count() as u64;
    let (delivered, drained, bounced) = (
        count(Fate::Delivered),
        count(Fate::Drained),
        count(Fate::Bounced),
    );
    let pending = (0..args.messages)
        .filter(|&id| book.pending(id) && inv.contains_key(&id))
        .count() as u64;
    let lost = count(Fate::Pending) - pending;
    // A timer the journal still holds for a message the ledger says ended or never had.
    let extra = inv.keys().filter(|&&id| !book.pending(id)).count() as u64;
    let duplicates = extra + book.conflicts;
    let scheduled = book.fate.len() as u64 - count(Fate::Unborn);
    let redelivered: u64 = book.deliveries.values().map(|a| a.len() as u64 - 1).sum();
    let same_attempt = book
        .deliveries
        .values()
        .filter(|a| a.windows(2).any(|w| w[1] <= w[0]))
        .count();
    let crashes: u32 = killed.iter().sum();
    println!(
        "journal: {}, {crashes} kills (mid-batch {}, mid-drain {}, mid-freeze {}), {rounds} rounds in {:.1} s, seed {seed}",
        dir.display(),
        killed[0],
        killed[1],
        killed[2],
        wall.as_secs_f64()
    );
    println!(
        "recovery: {} timers back in {:.0} ms at the end",
        j.len(),
        recovery.as_secs_f64() * 1e3
    );
    j.close().map_err(|e| format!("journal: {e}"))?;
    let sum = format!(
        "{delivered} delivered + {drained} drained + {bounced} bounced + {pending} pending"
    );
    let again = format!(
        "{redelivered} redelivered after {crashes} kills, at most {} in flight",
        book.in_flight
    );
    let ok = scheduled == u64::from(args.messages)
        && lost == 0
        && duplicates == 0
        && same_attempt == 0
        && redelivered <= book.in_flight;
    if ok {
        println!("exactly-once: OK ({scheduled} scheduled = {sum}; 0 duplicates; {again})");
        Ok(ExitCode::SUCCESS)
    } else {
        println!(
            "exactly-once: FAILED ({scheduled} scheduled, {sum}; {duplicates} duplicates, {lost} lost, {same_attempt} delivered twice under one attempt; {again})"
        );
        Ok(ExitCode::FAILURE)
    }
}
