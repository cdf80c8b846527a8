//! The fleet proof: `cargo run --release -p tickwheel-proofs --example fleet -- --help`.
//!
//! The parent (`orchestrate.rs`) starts etcd and redis-server (unless given URLs), runs
//! member processes of this same program (`member.rs`, the hidden `member` subcommand),
//! produces messages into the spool (`spool.rs`), plays the scenario (`scenario.rs`,
//! `procs.rs`) and runs the ownership check (`check.rs`) over every member's dispatch log
//! (`dlog.rs`). Exit status: 0 ownership holds, 1 it does not (or the run failed), 2 bad
//! options or a missing server binary.
#![forbid(unsafe_code)]

// `say!`: a progress line on standard error in one write, so that the lines of the parent
// and its children (which share the stream) never interleave within a line.
#[macro_use]
extern crate tickwheel_testkit;

mod check;
mod cli;
mod dlog;
mod firewall;
mod intake;
mod member;
mod orchestrate;
mod procs;
mod scenario;
mod spool;
mod tls;

use std::process::ExitCode;

use tickwheel_testkit::cli::CheckedArgs as _;

fn main() -> ExitCode {
    let args = cli::Args::parse_or_exit();
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
    for (installed, given) in [
        (
            tickwheel_testkit::Server::Etcd.installed(),
            args.etcd_url.is_some(),
        ),
        (
            tickwheel_testkit::Server::Redis.installed(),
            args.redis_url.is_some(),
        ),
    ] {
        if let (Err(missing), false) = (installed, given) {
            eprintln!("fleet: {missing}; or give its URL (--etcd-url / --redis-url)");
            return ExitCode::from(2);
        }
    }
    if let Err(e) = preflight(&args) {
        eprintln!("fleet: {e}");
        return ExitCode::from(2);
    }
    tickwheel_testkit::proof::run_in_temp_dir("fleet", "ownership", args.keep, |dir| {
        orchestrate::run(&args, dir)
    })
}

/// A given `--redis-url` or `--etcd-url` the run cannot use (bad URL, unreachable, a Redis
/// without `appendonly yes` and `appendfsync always`) is a bad option: refused before any
/// process starts.
fn preflight(args: &cli::Args) -> Result<(), String> {
    if args.redis_url.is_none() && args.etcd_url.is_none() {
        return Ok(());
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    rt.block_on(async {
        if let Some(url) = &args.redis_url {
            let member = tickwheel_redis::Member::new_boot("fleet-preflight");
            tickwheel_redis::Protocol::connect(url, member, tickwheel_redis::Options::default())
                .await
                .map_err(|e| format!("--redis-url: {e}"))?;
        }
        if let Some(url) = &args.etcd_url {
            let opts = tickwheel_fleet::etcd_client::ConnectOptions::new()
                .with_connect_timeout(std::time::Duration::from_secs(3))
                .with_timeout(std::time::Duration::from_secs(3));
            let mut client =
                tickwheel_fleet::etcd_client::Client::connect([url.as_str()], Some(opts))
                    .await
                    .map_err(|e| format!("--etcd-url {url}: {e}"))?;
            client
                .status()
                .await
                .map_err(|e| format!("--etcd-url {url}: {e}"))?;
        }
        Ok(())
    })
}
