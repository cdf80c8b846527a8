//! The handoff proof: `cargo run --release -p tickwheel-proofs --example handoff -- --help`.
//!
//! The parent (`orchestrate.rs`) runs a source and a target host as child processes of this
//! program (`host.rs`, selected by a hidden `--role`), kills them at protocol steps when
//! asked (`steps.rs`), and checks custody at the end from every host's spool and sink
//! (`spool.rs`, `ledger.rs`). Exit status: 0 custody holds, 1 it does not (or the run
//! failed), 2 bad options or no redis-server.
#![forbid(unsafe_code)]

// `say!`: a progress line on standard error in one write, so that the lines of the parent
// and its children (which share the stream) never interleave within a line.
#[macro_use]
extern crate tickwheel_testkit;

mod cli;
mod flow;
mod host;
mod ledger;
mod orchestrate;
mod spool;
mod steps;
mod tls;

use std::process::ExitCode;
use std::time::Duration;

use tickwheel_testkit::cli::CheckedArgs as _;

fn main() -> ExitCode {
    let args = cli::Args::parse_or_exit();
    if args.list_steps {
        for s in steps::ALL {
            println!("{s}");
        }
        return ExitCode::SUCCESS;
    }
    if let Some(role) = args.role {
        // `Args::check` made sure a child has all of these.
        let (Some(name), Some(boot), Some(dir), Some(url), Some(prefix)) = (
            args.name.clone(),
            args.boot,
            args.dir.clone(),
            args.redis_url.clone(),
            args.prefix.clone(),
        ) else {
            cli::usage("a child needs --name, --boot, --dir, --redis-url and --prefix");
        };
        let cfg = host::Config {
            role: role.into(),
            name,
            boot,
            dir: dir.clone(),
            queues: args.queues,
            messages: args.messages,
            rate: args.rate,
            max_delay: Duration::from_millis(args.max_delay_ms),
            lease: Duration::from_millis(args.lease_ms),
            offer_ttl: Duration::from_millis(args.offer_ttl_ms),
            spare_mode: args.spare || args.stop.is_some(),
            tls: args.tls.then(|| dir.join("tls")),
            prefix,
        };
        let label = format!("{}#{}", cfg.name, cfg.boot);
        return match host::run(cfg, &url) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{label}: {e}");
                ExitCode::FAILURE
            }
        };
    }
    // The harness's binary (its environment variable may name another).
    if args.redis_url.is_none()
        && let Err(missing) = tickwheel_testkit::Server::Redis.installed()
    {
        eprintln!("handoff: {missing} (or give --redis-url)");
        return ExitCode::from(2);
    }
    if let Some(url) = &args.redis_url
        && let Err(e) = preflight(url)
    {
        eprintln!("handoff: --redis-url: {e}");
        return ExitCode::from(2);
    }
    tickwheel_testkit::proof::run_in_temp_dir("handoff", "custody", args.keep, |dir| {
        orchestrate::run(&args, dir)
    })
}

/// A `--redis-url` the run cannot use (bad URL, unreachable, not a primary, no
/// `appendfsync always`) is a bad option: it is refused before any child starts.
fn preflight(url: &str) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start tokio: {e}"))?;
    let member = tickwheel_redis::Member::new_boot("handoff-preflight");
    rt.block_on(tickwheel_redis::Protocol::connect(
        url,
        member,
        tickwheel_redis::Options::default(),
    ))
    .map(drop)
    .map_err(|e| e.to_string())
}
