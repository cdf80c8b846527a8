//! Command-line options. Every bad option ends in a clear message and exit status 2, never a
//! panic: clap's own errors exit 2, and so do the checks clap cannot express (`check` of
//! [`Args`]' `CheckedArgs`) and the program's own later ones ([`usage`]).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use clap::{Parser, ValueEnum};
use tickwheel_testkit::cli::CheckedArgs;

use crate::steps::{self, Role};

/// Moves scheduled queues from a source host to a target host through Redis while producers
/// keep scheduling and dispatchers keep dispatching, then proves custody with a ledger: every
/// id exactly once across the source, the target, Redis and the values handed back, and no
/// timer delivered before its deadline on the reference clock (Redis `TIME`).
///
/// `--kill ROLE:STEP` kills that process with SIGKILL when it reaches STEP (`redis:STEP`:
/// the redis-server, restarted from its append-only file), recovers and finishes.
#[derive(Debug, Clone, Parser)]
#[command(name = "handoff", version)]
pub struct Args {
    /// Queues to move from the source to the target.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub queues: u32,

    /// Messages the source holds across those queues when the handoff starts.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub messages: u32,

    /// Messages per second the source's producers keep scheduling during the handoff.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    pub rate: u32,

    /// Longest deadline of a scheduled message, in milliseconds (deadlines are 0 to this; at
    /// most two minutes, so that a run finishes well within the parent's five-minute guard).
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(0..=120_000))]
    pub max_delay_ms: u64,

    /// Kill a process at a protocol step: `source:STEP`, `target:STEP` or `redis:STEP`
    /// (repeatable; `--list-steps` names the steps).
    #[arg(long = "kill", value_name = "ROLE:STEP")]
    pub kills: Vec<Kill>,

    /// Start redis-server serving TLS only, with client certificates, from a CA made for the
    /// run; every connection of the run goes over TLS (`rediss://`).
    #[arg(long)]
    pub tls: bool,

    /// A killed target is not restarted: a third host, `spare`, takes its queues over
    /// (`claim` once an offer lapses, `reclaim` once a claim's lease runs out); only for
    /// target kills before the commit (`claim`, `fetch`, `spool`). A killed
    /// source (at `prepare` or later) restarts only once the spare has taken its offer over
    /// (`reclaim` past the lease): it keeps the values no claimer took.
    #[arg(long)]
    pub spare: bool,

    /// Stop the source with SIGSTOP at STEP (`source:STEP`, a step between `prepare` and
    /// `forward`) until a third host, `spare`, has reclaimed the queue past the lease and
    /// imported it; then SIGCONT: the source's next write is fenced and the values no
    /// claimer took come back to it.
    #[arg(long, value_name = "source:STEP")]
    pub stop: Option<Kill>,

    /// The lease of PREPARING and CLAIMED, in milliseconds (how long a silent holder keeps
    /// the queue before another member may reclaim it).
    #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    pub lease_ms: u64,

    /// How long a sealed offer waits for its target before anyone may claim it, in ms.
    #[arg(long, default_value_t = 300_000, value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    pub offer_ttl_ms: u64,

    /// Use this Redis (`redis://`, `rediss://`, `unix://`) instead of starting a redis-server.
    /// It must run with `appendonly yes` and `appendfsync always`; `redis:STEP` kills need
    /// the program's own server. It is checked before any host starts (exit 2 when it is
    /// unreachable or unsafe), and each run keys its records under a prefix of its own
    /// (`handoff-<unix ms>-<pid>`), so runs may share one server.
    #[arg(long, value_name = "URL")]
    pub redis_url: Option<String>,

    /// Run a host under libfaketime with this clock offset: `source=+5m`, `target=-5m`
    /// (repeatable; needs Debian's `faketime`). Deadlines cross hosts on Redis `TIME`, so the
    /// skew must not show in the ledger.
    #[arg(long = "faketime", value_name = "ROLE=OFFSET")]
    pub faketime: Vec<Skew>,

    /// Print the protocol's step names, one per line, and exit.
    #[arg(long)]
    pub list_steps: bool,

    /// Keep the run's directory (spools, sinks, server files) and print its path.
    #[arg(long)]
    pub keep: bool,

    /// The process's part in a run (set by the program for its own child processes).
    #[arg(long, hide = true, value_enum)]
    pub role: Option<ChildRole>,

    /// A child's member name.
    #[arg(long, hide = true)]
    pub name: Option<String>,

    /// A child's boot id (a new one on every start of the same name).
    #[arg(long, hide = true)]
    pub boot: Option<u32>,

    /// The run's directory (spools and sinks).
    #[arg(long, hide = true)]
    pub dir: Option<PathBuf>,

    /// The run's Redis key prefix (chosen per run by the program, so runs sharing one
    /// `--redis-url` never meet each other's records).
    #[arg(long, hide = true)]
    pub prefix: Option<String>,
}

/// A child process's part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ChildRole {
    /// Owns the queues first, produces, offers them.
    Source,
    /// Claims, fetches, commits and imports them.
    Target,
    /// Takes over what a dead or stopped host left: claims lapsed offers, reclaims
    /// expired claims and preparations.
    Spare,
}

impl From<ChildRole> for Role {
    fn from(r: ChildRole) -> Role {
        match r {
            ChildRole::Source => Role::Source,
            ChildRole::Target => Role::Target,
            ChildRole::Spare => Role::Spare,
        }
    }
}

/// Who to kill at which step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kill {
    pub who: Who,
    pub step: &'static str,
}

/// The process a `--kill` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    Host(Role),
    Redis,
}

impl fmt::Display for Kill {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.who {
            Who::Host(r) => write!(f, "{}:{}", r.name(), self.step),
            Who::Redis => write!(f, "redis:{}", self.step),
        }
    }
}

impl FromStr for Kill {
    type Err = String;

    fn from_str(s: &str) -> Result<Kill, String> {
        let Some((who, step)) = s.split_once(':') else {
            return Err(format!("`{s}` is not ROLE:STEP (e.g. source:seal)"));
        };
        let who = match (who, host(who)) {
            (_, Some(r)) => Who::Host(r),
            ("redis", None) => Who::Redis,
            (other, None) => {
                return Err(format!(
                    "`{other}` is not a process to kill: source, target or redis"
                ));
            }
        };
        let known = match who {
            Who::Host(r) => steps::of(r),
            Who::Redis => steps::ALL,
        };
        match known.iter().find(|k| **k == step) {
            Some(step) => Ok(Kill { who, step }),
            None => Err(format!(
                "`{step}` is not a step of {}: {}",
                match who {
                    Who::Host(r) => r.name(),
                    Who::Redis => "the protocol",
                },
                known.join(", ")
            )),
        }
    }
}

/// The host `name` names on the command line (the spare is not named there).
fn host(name: &str) -> Option<Role> {
    match name {
        "source" => Some(Role::Source),
        "target" => Some(Role::Target),
        _ => None,
    }
}

/// A host's clock offset for libfaketime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skew {
    pub role: Role,
    /// libfaketime's relative offset, e.g. `+5m` or `-300`.
    pub offset: String,
}

impl FromStr for Skew {
    type Err = String;

    fn from_str(s: &str) -> Result<Skew, String> {
        let Some((role, offset)) = s.split_once('=') else {
            return Err(format!("`{s}` is not ROLE=OFFSET (e.g. source=+5m)"));
        };
        let role = host(role).ok_or_else(|| format!("`{role}` is not a host: source or target"))?;
        // libfaketime's relative form: a sign, digits, an optional unit.
        let body = offset.strip_prefix(['+', '-']).unwrap_or("");
        let digits = body.trim_end_matches(['s', 'm', 'h', 'd']);
        if digits.is_empty()
            || !digits.bytes().all(|b| b.is_ascii_digit())
            || body.len() > digits.len() + 1
        {
            return Err(format!(
                "`{offset}` is not an offset like +5m, -300s or +1h"
            ));
        }
        Ok(Skew {
            role,
            offset: offset.to_string(),
        })
    }
}

impl CheckedArgs for Args {
    /// The checks clap's types cannot express.
    fn check(&self) -> Result<(), String> {
        if self.role.is_some() && (self.name.is_none() || self.boot.is_none() || self.dir.is_none())
        {
            return Err("a child needs --name, --boot and --dir".into());
        }
        if self.tls && self.redis_url.is_some() && self.role.is_none() {
            return Err("--tls starts the program's own redis-server (drop --redis-url)".into());
        }
        if self.redis_url.is_some() && self.kills.iter().any(|k| k.who == Who::Redis) {
            return Err(
                "--kill redis:STEP needs the program's own redis-server (drop --redis-url)".into(),
            );
        }
        if self.role.is_some() && (self.redis_url.is_none() || self.prefix.is_none()) {
            return Err("a child needs --redis-url and --prefix".into());
        }
        if let Some(k) = self.stop
            && (k.who != Who::Host(Role::Source)
                || !["prepare", "append", "in-flight", "forward"].contains(&k.step))
        {
            return Err(format!(
                "--stop {k}: only the source, at prepare, append, in-flight or forward"
            ));
        }
        const RECLAIMABLE: [&str; 6] =
            ["prepare", "append", "in-flight", "forward", "seal", "drop"];
        if let Some(k) = self.kills.iter().find(|k| {
            self.spare && k.who == Who::Host(Role::Source) && !RECLAIMABLE.contains(&k.step)
        }) {
            return Err(format!(
                "--kill {k} with --spare: the spare can take over a source's queue only from its prepare on"
            ));
        }
        // Committed, the queue is the target's: its timers are in the target's spool, and only
        // its restart (or, in a fleet, a lease-based takeover) brings them back.
        const CLAIM_ONLY: [&str; 3] = ["claim", "fetch", "spool"];
        if let Some(k) = self.kills.iter().find(|k| {
            self.spare && k.who == Who::Host(Role::Target) && !CLAIM_ONLY.contains(&k.step)
        }) {
            return Err(format!(
                "--kill {k} with --spare: after its commit the queue is the target's own (in its \
                 spool); the spare can take over a target's claim only before the commit \
                 (claim, fetch, spool)"
            ));
        }
        let mut seen = Vec::new();
        for k in &self.kills {
            if seen.contains(k) {
                return Err(format!("--kill {k} is given twice"));
            }
            seen.push(*k);
        }
        Ok(())
    }
}

/// Prints `msg` as clap prints a usage error and exits with status 2.
pub fn usage(msg: &str) -> ! {
    tickwheel_testkit::cli::usage::<Args>(msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kills_parse_and_name_their_process() {
        let a = Args::parse_line(&["--kill", "source:seal", "--kill", "redis:claim"]).unwrap();
        assert_eq!(
            a.kills[0],
            Kill {
                who: Who::Host(Role::Source),
                step: "seal"
            }
        );
        assert_eq!(
            a.kills[1],
            Kill {
                who: Who::Redis,
                step: "claim"
            }
        );
        assert_eq!(a.kills[1].to_string(), "redis:claim");
        let a = Args::parse_line(&["--faketime", "target=-300s"]).unwrap();
        assert_eq!(
            a.faketime[0],
            Skew {
                role: Role::Target,
                offset: "-300s".into()
            }
        );
    }

    #[test]
    fn bad_options_are_errors_not_panics() {
        Args::assert_refused(&[
            &["--kill", "seal"],
            &["--kill", "nobody:seal"],
            &["--kill", "source:claim"],
            &["--kill", "source:seal", "--kill", "source:seal"],
            &["--queues", "0"],
            &["--messages", "-3"],
            &["--redis-url", "redis://x", "--kill", "redis:seal"],
            &["--role", "source"],
            &["--faketime", "source"],
            &["--faketime", "redis=+5m"],
            &["--faketime", "source=5m"],
            &["--faketime", "source=+5mm"],
            &["--stop", "target:claim"],
            &["--stop", "source:seal"],
            &["--lease-ms", "5"],
        ]);
    }

    #[test]
    fn defaults_are_valid() {
        let a = Args::parse_line(&[]).unwrap();
        assert!(a.kills.is_empty() && a.role.is_none() && !a.list_steps);
    }
}
