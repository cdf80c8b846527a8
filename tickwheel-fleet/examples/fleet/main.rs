//! The fleet proof: `cargo run --release -p tickwheel-fleet --example fleet -- --help`.
//!
//! The parent (`orchestrate.rs`) starts etcd and redis-server (unless given URLs), runs
//! member processes of this same program (`member.rs`, the hidden `member` subcommand),
//! produces messages into the spool (`spool.rs`), plays the scenario (`scenario.rs`,
//! `procs.rs`) and runs the ownership check (`check.rs`) over every member's dispatch log
//! (`dlog.rs`). Exit status: 0 ownership holds, 1 it does not (or the run failed), 2 bad
//! options or a missing server binary.
#![forbid(unsafe_code)]

/// A progress line on standard error in one write, so that the lines of the parent and its
/// children (which share the stream) never interleave within a line.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let line = format!("{}\n", format_args!($($arg)*));
        let _ = std::io::stderr().write_all(line.as_bytes());
    }};
}

mod check;
mod cli;
mod dlog;
mod member;
mod orchestrate;
mod procs;
mod scenario;
mod spool;

use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args = cli::parse();
    if let Some(cli::Command::Member(m)) = args.command {
        return match member::run(m) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                say!("{e}");
                ExitCode::FAILURE
            }
        };
    }
    // The servers this run starts must be installed: a missing one is a usage problem.
    let etcd = std::env::var(tickwheel_fleet::server::BINARY_ENV).unwrap_or_else(|_| "etcd".into());
    let redis = std::env::var(tickwheel_redis::server::BINARY_ENV)
        .unwrap_or_else(|_| "redis-server".into());
    for (binary, given, package) in [
        (&etcd, args.etcd_url.is_some(), "etcd-server"),
        (&redis, args.redis_url.is_some(), "redis-server"),
    ] {
        if !given && Command::new(binary).arg("--version").output().is_err() {
            eprintln!(
                "fleet: {binary} is not installed: `apt-get install {package}`, or give its URL \
                 (--etcd-url / --redis-url)"
            );
            return ExitCode::from(2);
        }
    }
    let dir = match tempfile::Builder::new().prefix("fleet-").tempdir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("fleet: cannot make the run's directory: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = orchestrate::run(&args, dir.path());
    if args.keep {
        eprintln!("run directory kept: {}", dir.keep().display());
    }
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("fleet: {e}");
            println!("ownership: FAILED the run did not finish: {e}");
            ExitCode::FAILURE
        }
    }
}
