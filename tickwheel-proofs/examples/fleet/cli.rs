//! Command-line options. Every bad option ends in a clear message and exit status 2, never a
//! panic: clap's own errors exit 2, and so do the checks clap cannot express (`check` of
//! [`Args`]' `CheckedArgs`). Every number has an upper bound, so no option makes the program
//! allocate without limit.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use tickwheel_testkit::cli::CheckedArgs;

/// Runs a fleet of member processes sharing scheduled queues through etcd leases, plays
/// membership changes and faults (a join, an orderly leave, `kill -9`, SIGSTOP past the
/// lease, an etcd restart) while producers keep scheduling, logs every dispatch with its
/// member, queue, fencing token and CLOCK_MONOTONIC time, and checks at the end that no two
/// members dispatched a queue in overlapping lease windows, that no timer was lost, and that
/// none was dispatched twice under one token.
///
/// The last line is `ownership: OK (…)` (exit 0) or `ownership: FAILED …` (exit 1); bad
/// options exit 2.
#[derive(Debug, Clone, Parser)]
#[command(name = "fleet", version)]
pub struct Args {
    /// Member processes at the start.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=12))]
    pub members: u32,

    /// Queues the producers schedule into (named q0, q1, …).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub queues: u32,

    /// Most messages produced in the whole run (production stops there or when the
    /// scenario ends, whichever comes first).
    #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub messages: u64,

    /// Messages per second the producers schedule, spread over the queues.
    #[arg(long, default_value_t = 400, value_parser = clap::value_parser!(u32).range(1..=20_000))]
    pub rate: u32,

    /// Longest delay of a message, in ms (each is due 0 to this after it is produced).
    #[arg(long, default_value_t = 1_500, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub max_delay_ms: u64,

    /// What to play: one step, or `all` of them in turn.
    #[arg(long, value_enum, default_value_t = Scenario::All)]
    pub scenario: Scenario,

    /// `--scenario chaos`: how long to play faults, in seconds (production runs as long).
    #[arg(long, default_value_t = 120, value_name = "SECONDS",
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub duration: u64,

    /// `--scenario chaos`: the seed of its random choices (printed; random if not given).
    #[arg(long)]
    pub seed: Option<u64>,

    /// The members' etcd lease TTL in ms, whole seconds (etcd counts leases in seconds);
    /// keep-alive every third of it, margin and grace a fifth each.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1_000..=60_000))]
    pub lease_ms: u64,

    /// Use this etcd (`http://HOST:PORT`) instead of starting one; `etcd-restart` needs the
    /// program's own.
    #[arg(long, value_name = "URL")]
    pub etcd_url: Option<String>,

    /// Start etcd and redis-server serving TLS only, with client-certificate authentication,
    /// a CA and certificates made for the run; every connection of the run goes over TLS.
    #[arg(long)]
    pub tls: bool,

    /// Use this Redis (`redis://…`) instead of starting a redis-server. It must run with
    /// `appendonly yes` and `appendfsync always`.
    #[arg(long, value_name = "URL")]
    pub redis_url: Option<String>,

    /// A planted fault, to show the check catches it: `no-lease-check` makes every member
    /// dispatch without its fence check (with `--scenario pause` the run must end FAILED).
    #[arg(long, value_enum)]
    pub plant: Option<Plant>,

    /// `redis`: every member journals its queues' live timers in Redis (the fleet's
    /// journal) and runs without a recovery hook: a dead member's timers come back only
    /// from the journal, never from the spool. Not given: the recovery hook reads the spool.
    #[arg(long, value_enum, value_name = "STORE")]
    pub journal: Option<JournalStore>,

    /// Keep the run's directory (dispatch logs, server files) and print its path.
    #[arg(long)]
    pub keep: bool,

    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The scenario steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// A new member joins; queues move to it by handoff.
    Join,
    /// A member leaves in order, handing its queues to the others.
    Drain,
    /// `kill -9` a member; the others adopt its queues after its lease; it restarts under
    /// the same name.
    Kill,
    /// SIGSTOP a member past its lease, then SIGCONT: it must have fenced itself, and its
    /// stale writes are rejected by the spool.
    Pause,
    /// Restart etcd (down for more than a lease): members fence, then rejoin.
    EtcdRestart,
    /// Network partitions by nftables rules (needs root and `nft`): a member cut from etcd,
    /// one cut from Redis, one cut from both, a flapping link, the majority cut from etcd,
    /// lossy links, and a cut in the middle of a handoff on each side; each healed. Members run under user ids of their own. Not part of `all`.
    Partition,
    /// Random faults for `--duration` seconds: kills, pauses, joins, orderly leaves, etcd
    /// and redis-server restarts, cut, flapping and lossy links (needs root and `nft`, as
    /// `partition`). Not part of `all`.
    Chaos,
    /// All of the above in turn, except `partition` and `chaos`.
    All,
}

impl Scenario {
    /// The steps this scenario plays, in order.
    pub fn steps(self) -> Vec<Scenario> {
        match self {
            Scenario::All => vec![
                Scenario::Join,
                Scenario::Drain,
                Scenario::Kill,
                Scenario::Pause,
                Scenario::EtcdRestart,
            ],
            s => vec![s],
        }
    }

    /// Whether the scenario cuts links with nftables rules (members under ids of their own).
    pub fn cuts_links(self) -> bool {
        matches!(self, Scenario::Partition | Scenario::Chaos)
    }

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Join => "join",
            Scenario::Drain => "drain",
            Scenario::Kill => "kill",
            Scenario::Pause => "pause",
            Scenario::EtcdRestart => "etcd-restart",
            Scenario::Partition => "partition",
            Scenario::Chaos => "chaos",
            Scenario::All => "all",
        }
    }
}

/// Planted faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Plant {
    /// Dispatch without the fence check: the member keeps the timers itself, out of the
    /// scheduler, and hands them out under the last known token, lease or not.
    NoLeaseCheck,
}

/// Where `--journal` keeps the live timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum JournalStore {
    /// The fleet's journal in Redis (`tickwheel_redis::journal`).
    Redis,
}

/// The hidden subcommand the program runs its member processes with.
#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    #[command(hide = true)]
    Member(MemberArgs),
}

/// A member process's options (set by the parent).
#[derive(Debug, Clone, clap::Args)]
pub struct MemberArgs {
    /// The member's name (unique among live members).
    #[arg(long)]
    pub name: String,
    /// The run's directory (the member writes its dispatch log there).
    #[arg(long)]
    pub dir: PathBuf,
    /// The run's key prefix in etcd.
    #[arg(long)]
    pub prefix: String,
    /// The run's key prefix for the spool in Redis.
    #[arg(long)]
    pub redis_prefix: String,
    #[arg(long)]
    pub etcd_url: String,
    #[arg(long)]
    pub redis_url: String,
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub queues: u32,
    #[arg(long, value_parser = clap::value_parser!(u64).range(1_000..=60_000))]
    pub lease_ms: u64,
    #[arg(long, value_enum)]
    pub plant: Option<Plant>,
    #[arg(long, value_enum)]
    pub journal: Option<JournalStore>,
    /// The run's CA and client identity (`--tls`).
    #[arg(long)]
    pub tls_dir: Option<PathBuf>,
}

impl CheckedArgs for Args {
    /// The checks clap's types cannot express.
    fn check(&self) -> Result<(), String> {
        if !self.lease_ms.is_multiple_of(1_000) {
            return Err(format!(
                "--lease-ms {}: etcd counts leases in whole seconds (give a multiple of 1000)",
                self.lease_ms
            ));
        }
        let steps = self.scenario.steps();
        if self.etcd_url.is_some() && steps.contains(&Scenario::EtcdRestart) {
            return Err(format!(
                "--scenario {} restarts etcd: it needs the program's own (drop --etcd-url)",
                self.scenario.name()
            ));
        }
        if self.tls && (self.etcd_url.is_some() || self.redis_url.is_some()) {
            return Err(
                "--tls starts the program's own servers (drop --etcd-url and --redis-url)".into(),
            );
        }
        if self.scenario.cuts_links() {
            if self.etcd_url.is_some() || self.redis_url.is_some() {
                return Err(format!(
                    "--scenario {} cuts links to and restarts the program's own servers \
                     (drop --etcd-url and --redis-url)",
                    self.scenario.name()
                ));
            }
            if self.members < 3 {
                return Err(format!(
                    "--scenario {} needs at least 3 members (it cuts a majority)",
                    self.scenario.name()
                ));
            }
        }
        if self.members < 2 && steps.iter().any(|s| *s != Scenario::Join) {
            return Err(format!(
                "--scenario {} needs at least 2 members (someone must take the queues over)",
                self.scenario.name()
            ));
        }
        if steps.contains(&Scenario::Join) && self.members >= 12 {
            return Err("--scenario join adds a member: at most 11 at the start".into());
        }
        for (flag, url) in [
            ("--etcd-url", &self.etcd_url),
            ("--redis-url", &self.redis_url),
        ] {
            if let Some(u) = url
                && (u.is_empty() || u.len() > 2048 || u.chars().any(char::is_whitespace))
            {
                return Err(format!("{flag}: not a URL"));
            }
        }
        if let Some(u) = &self.etcd_url
            && !(u.starts_with("http://") || u.starts_with("https://"))
        {
            return Err("--etcd-url: give http://HOST:PORT or https://HOST:PORT".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_all_plays_every_step() {
        let a = Args::parse_line(&[]).unwrap();
        assert_eq!(a.scenario, Scenario::All);
        assert_eq!(a.scenario.steps().len(), 5);
        assert!(a.plant.is_none() && a.command.is_none() && a.journal.is_none());
        let a = Args::parse_line(&["--journal", "redis", "--scenario", "kill"]).unwrap();
        assert_eq!(a.journal, Some(JournalStore::Redis));
        let a = Args::parse_line(&["--scenario", "pause", "--plant", "no-lease-check"]).unwrap();
        assert_eq!(a.scenario.steps(), vec![Scenario::Pause]);
        assert_eq!(a.plant, Some(Plant::NoLeaseCheck));
    }

    #[test]
    fn chaos_takes_a_duration_and_a_seed_and_cuts_links() {
        let a = Args::parse_line(&["--scenario", "chaos", "--duration", "1800", "--seed", "7"])
            .unwrap();
        assert_eq!((a.duration, a.seed), (1800, Some(7)));
        assert!(a.scenario.cuts_links() && Scenario::Partition.cuts_links());
        assert!(!Scenario::All.cuts_links() && !Scenario::Kill.cuts_links());
        assert_eq!(
            Args::parse_line(&["--scenario", "chaos"]).unwrap().duration,
            120
        );
    }

    #[test]
    fn bad_options_are_errors_not_panics() {
        Args::assert_refused(&[
            &["--members", "0"],
            &["--members", "13"],
            &["--members", "1", "--scenario", "kill"],
            &["--members", "12", "--scenario", "join"],
            &["--queues", "0"],
            &["--queues", "10001"],
            &["--messages", "0"],
            &["--messages", "1000001"],
            &["--rate", "0"],
            &["--rate", "20001"],
            &["--max-delay-ms", "60001"],
            &["--lease-ms", "100"],
            &["--lease-ms", "60001"],
            &["--lease-ms", "2500"],
            &["--scenario", "nap"],
            &["--scenario", "chaos", "--duration", "0"],
            &["--scenario", "chaos", "--duration", "86401"],
            &["--scenario", "chaos", "--seed", "-1"],
            &["--scenario", "chaos", "--members", "2"],
            &["--scenario", "chaos", "--redis-url", "redis://127.0.0.1:1/"],
            &["--plant", "nothing"],
            &["--journal", "disk"],
            &["--etcd-url", "http://x:1", "--scenario", "all"],
            &["--etcd-url", "x:1", "--scenario", "kill"],
            &["--redis-url", ""],
            &["member", "--name", "m1"],
        ]);
    }

    #[test]
    fn the_member_subcommand_parses() {
        let a = Args::parse_line(&[
            "member",
            "--name",
            "m1",
            "--dir",
            "/tmp/x",
            "--prefix",
            "/p/",
            "--redis-prefix",
            "fleet:1:",
            "--etcd-url",
            "http://127.0.0.1:1",
            "--redis-url",
            "redis://127.0.0.1:2/",
            "--queues",
            "5",
            "--lease-ms",
            "2000",
        ])
        .unwrap();
        match a.command {
            Some(Command::Member(m)) => {
                assert_eq!(m.name, "m1");
                assert_eq!(m.queues, 5);
                assert!(m.plant.is_none());
            }
            other => panic!("{other:?}"),
        }
    }
}
