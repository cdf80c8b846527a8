//! Command-line options: parsing (clap), durations like `5m`, and the range checks that
//! clap's types cannot express. Every bad option ends in a clear message and exit code 2,
//! never a panic.

use std::time::Duration;

use clap::{CommandFactory, Parser, ValueEnum, error::ErrorKind};

/// Most messages a run may have. The program holds a few bytes per message whatever
/// happens (the ledger's state byte, the queue of each message) and the scheduler holds
/// every pending one, so this bounds the run's memory to a few GB; 4294967295 would ask for
/// tens of GB before the run starts.
pub const MAX_MESSAGES: u32 = 20_000_000;

/// Most destination queues a run may have: the program keeps a suspension mark per queue
/// and counts the queue sizes for the report (16 bytes a queue).
pub const MAX_QUEUES: u32 = 1_000_000;

/// An MTA's scheduled queues on tickwheel's Scheduler, with exactly-once proven at the end.
///
/// Producers queue messages over thousands of Zipf-sized destination queues, one dispatcher
/// delivers what is due (and retries failures with exponential back-off), and operators
/// drain, bounce and suspend while dispatch is in flight. At the end every message is
/// accounted for exactly once, checked against the program's own per-message ledger.
/// Durations take a unit: 250ms, 30s, 5m, 4h, 1d, or sums like 1h30m.
#[derive(Debug, Clone, Parser)]
#[command(name = "mta", version)]
pub struct Args {
    /// Messages to queue (each gets its own timer id); at most 20000000.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub messages: u32,

    /// Destination queues; sizes follow a Zipf law (a few huge domains, a long tail); at
    /// most 1000000.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub queues: u32,

    /// Zipf exponent of the queue sizes (0 = all queues equally likely).
    #[arg(long, default_value_t = 1.0, value_name = "S")]
    pub zipf: f64,

    /// Producer threads that queue new messages.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub threads: u16,

    /// Scheduler shards [default: the scheduler's own, one per available core].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub shards: Option<u16>,

    /// The scheduler's tick, in MTA time (an MTA schedules retries to the second).
    #[arg(long, default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    pub resolution: Duration,

    /// MTA time to simulate; messages not delivered by then are reported as pending.
    #[arg(long, default_value = "4h", value_parser = parse_duration, value_name = "DURATION")]
    pub duration: Duration,

    /// New messages arrive evenly over this first part of the run.
    #[arg(long, default_value = "1h", value_parser = parse_duration, value_name = "DURATION")]
    pub arrival: Duration,

    /// First retry interval after a failed delivery; it doubles on each further failure.
    #[arg(long, default_value = "5m", value_parser = parse_duration, value_name = "DURATION")]
    pub retry_base: Duration,

    /// Longest retry interval (the doubling stops here).
    #[arg(long, default_value = "1h", value_parser = parse_duration, value_name = "DURATION")]
    pub retry_cap: Duration,

    /// Retry jitter: each interval is scaled by a random factor in [1 - J, 1 + J).
    #[arg(long, default_value_t = 0.2, value_name = "J")]
    pub jitter: f64,

    /// Fraction of delivery attempts that fail (temporary failure, retried later).
    #[arg(long, default_value_t = 0.5, value_name = "FRACTION")]
    pub fail_rate: f64,

    /// Operator queue drains per minute of MTA time.
    #[arg(long, default_value_t = 0.5, value_name = "PER_MINUTE")]
    pub drain_rate: f64,

    /// Fraction of drains that rebind (re-queue the messages on another queue); the rest
    /// transfer the messages away (they end as "drained").
    #[arg(long, default_value_t = 0.75, value_name = "FRACTION")]
    pub rebind: f64,

    /// Operator bounces of single messages per minute of MTA time.
    #[arg(long, default_value_t = 100.0, value_name = "PER_MINUTE")]
    pub bounce_rate: f64,

    /// Operator queue suspensions per minute of MTA time.
    #[arg(long, default_value_t = 0.5, value_name = "PER_MINUTE")]
    pub suspend_rate: f64,

    /// How long a suspension holds a queue's deliveries back (a hold of the queue in the
    /// scheduler, released at the end of it).
    #[arg(long, default_value = "15m", value_parser = parse_duration, value_name = "DURATION")]
    pub suspend_for: Duration,

    /// Most messages of one queue in flight at once (the scheduler's concurrency limit per
    /// queue; none by default).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..), value_name = "N")]
    pub concurrency: Option<u32>,

    /// Most hand-outs per second of MTA time per queue (the scheduler's rate limit per
    /// queue, no burst; none by default).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..), value_name = "R")]
    pub rate: Option<u32>,

    /// Most timers the simulated dispatcher takes per `pop_due` call.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch: u32,

    /// `simulated`: a virtual clock advanced as fast as the machine allows. `real`: the
    /// wall clock, MTA time scaled by --scale, with real dispatch lateness.
    #[arg(long, value_enum, default_value_t = ClockMode::Simulated)]
    pub clock: ClockMode,

    /// With --clock real: who pops the due timers [default: tokio when built with the
    /// `tokio` feature, else thread].
    #[arg(long, value_enum)]
    pub dispatcher: Option<DispatcherKind>,

    /// With --clock real: wall-clock seconds per second of MTA time (0.001: 4 h in 14.4 s).
    #[arg(long, default_value_t = 0.001, value_name = "FACTOR")]
    pub scale: f64,

    /// Seed of the workload (queue of each message, failures, jitter, operator plan)
    /// [default: random, printed in the output].
    #[arg(long)]
    pub seed: Option<u64>,

    /// Print one JSON object instead of the table (and no progress bar).
    #[arg(long)]
    pub json: bool,

    /// Keep every timer in a journal in DIR (tickwheel-journal; DIR/timers and
    /// DIR/ledger.log are replaced), so the run survives being killed; the run then has one
    /// thread (see docs/mta.md), without flow limits or the real clock.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["concurrency", "rate", "clock", "dispatcher"])]
    pub journal: Option<std::path::PathBuf>,

    /// With --journal: kill the run with SIGKILL N times at random points (mid-batch,
    /// mid-drain, mid-freeze) and restart it from the journal each time.
    #[arg(long, default_value_t = 0, value_name = "N", requires = "journal")]
    pub crashes: u32,

    /// The journal's child processes (set by the parent of a `--journal` run).
    #[command(flatten)]
    pub child: crate::crash::ChildArgs,
}

/// Which clock drives the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ClockMode {
    /// Virtual time, advanced by the dispatcher to the next deadline at once.
    Simulated,
    /// Wall-clock time, scaled by `--scale`.
    Real,
}

/// The dispatcher of `--clock real`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DispatcherKind {
    /// `Scheduler::spawn_dispatcher`: a thread that sleeps until the next deadline.
    Thread,
    /// `Scheduler::due_stream` on a tokio runtime (needs the `tokio` feature).
    Tokio,
}

impl DispatcherKind {
    pub fn name(self) -> &'static str {
        match self {
            DispatcherKind::Thread => "thread",
            DispatcherKind::Tokio => "tokio",
        }
    }
}

impl ClockMode {
    pub fn name(self) -> &'static str {
        match self {
            ClockMode::Simulated => "simulated",
            ClockMode::Real => "real",
        }
    }
}

impl Args {
    /// Parses the command line and applies the range checks; exits with a clap-formatted
    /// error (code 2) on any bad option.
    pub fn parse_and_check() -> Args {
        let args = Args::parse();
        if let Err(msg) = args.check() {
            Args::refuse(msg);
        }
        args
    }

    /// Exits like clap does on a bad value: the message on stderr, exit code 2.
    pub fn refuse(msg: String) -> ! {
        Args::command()
            .error(ErrorKind::ValueValidation, msg)
            .exit()
    }

    /// The dispatcher `--clock real` uses: `--dispatcher`, or tokio's `due_stream` when the
    /// `tokio` feature is on, or the thread dispatcher. `None` with the simulated clock,
    /// whose dispatcher is this program's own `pop_due` loop.
    pub fn dispatcher_kind(&self) -> Option<DispatcherKind> {
        let default = if cfg!(feature = "tokio") {
            DispatcherKind::Tokio
        } else {
            DispatcherKind::Thread
        };
        (self.clock == ClockMode::Real).then(|| self.dispatcher.unwrap_or(default))
    }

    /// The checks between and inside options that clap's value parsers cannot express.
    pub fn check(&self) -> Result<(), String> {
        let fraction = |name: &str, v: f64| {
            if (0.0..=1.0).contains(&v) {
                Ok(())
            } else {
                Err(format!("--{name} must be between 0 and 1, got {v}"))
            }
        };
        let rate = |name: &str, v: f64| {
            if v.is_finite() && (0.0..=1e6).contains(&v) {
                Ok(())
            } else {
                Err(format!(
                    "--{name} must be between 0 and 1000000 per minute, got {v}"
                ))
            }
        };
        if self.messages > MAX_MESSAGES {
            return Err(format!(
                "--messages must be at most {MAX_MESSAGES} (the run holds every message in memory), got {}",
                self.messages
            ));
        }
        if self.queues > MAX_QUEUES {
            return Err(format!(
                "--queues must be at most {MAX_QUEUES} (the run keeps a record per queue), got {}",
                self.queues
            ));
        }
        fraction("jitter", self.jitter)?;
        fraction("fail-rate", self.fail_rate)?;
        fraction("rebind", self.rebind)?;
        rate("drain-rate", self.drain_rate)?;
        rate("bounce-rate", self.bounce_rate)?;
        rate("suspend-rate", self.suspend_rate)?;
        if !(self.zipf.is_finite() && (0.0..=10.0).contains(&self.zipf)) {
            return Err(format!(
                "--zipf must be between 0 and 10, got {}",
                self.zipf
            ));
        }
        let year = Duration::from_secs(365 * 24 * 3600);
        for (name, d) in [
            ("duration", self.duration),
            ("arrival", self.arrival),
            ("retry-base", self.retry_base),
            ("retry-cap", self.retry_cap),
            ("suspend-for", self.suspend_for),
            ("resolution", self.resolution),
        ] {
            if d.is_zero() || d > year {
                return Err(format!(
                    "--{name} must be more than 0 and at most 365d, got {d:?}"
                ));
            }
        }
        if self.arrival > self.duration {
            return Err(format!(
                "--arrival ({}) must not exceed --duration ({}): every message must arrive during the run",
                fmt_duration(self.arrival),
                fmt_duration(self.duration)
            ));
        }
        if self.retry_cap < self.retry_base {
            return Err(format!(
                "--retry-cap ({}) must be at least --retry-base ({})",
                fmt_duration(self.retry_cap),
                fmt_duration(self.retry_base)
            ));
        }
        if !(self.scale.is_finite() && self.scale > 0.0 && self.scale <= 1.0) {
            return Err(format!(
                "--scale must be more than 0 and at most 1, got {}",
                self.scale
            ));
        }
        if self.resolution > self.retry_base {
            return Err(format!(
                "--resolution ({}) must not exceed --retry-base ({})",
                fmt_duration(self.resolution),
                fmt_duration(self.retry_base)
            ));
        }
        if self.dispatcher.is_some() && self.clock != ClockMode::Real {
            return Err("--dispatcher applies to --clock real only".into());
        }
        if self.dispatcher == Some(DispatcherKind::Tokio) && !cfg!(feature = "tokio") {
            return Err(
                "--dispatcher tokio needs the tokio feature: cargo run --release --features tokio --example mta -- ..."
                    .into(),
            );
        }
        if self.clock == ClockMode::Real {
            let tick = self.resolution.as_secs_f64() * self.scale;
            if tick < 1e-4 {
                return Err(format!(
                    "--clock real needs a tick (--resolution × --scale) of at least 100 µs, got {:.1} µs",
                    tick * 1e6
                ));
            }
            let wall = self.duration.as_secs_f64() * self.scale;
            if wall > 3600.0 {
                return Err(format!(
                    "--clock real would run for {wall:.0} s of wall-clock time (--duration × --scale); at most 3600 s"
                ));
            }
        }
        Ok(())
    }
}

/// Parses `250ms`, `30s`, `5m`, `4h`, `2d`, or a sum such as `1h30m`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("`{text}` is not a duration: use e.g. 250ms, 30s, 5m, 4h, 1d or 1h30m");
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let value: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit_ns: u64 = match &rest[..unit_len] {
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "d" => 86_400_000_000_000,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        let ns = value.checked_mul(unit_ns).ok_or_else(bad)?;
        total = total
            .checked_add(Duration::from_nanos(ns))
            .ok_or_else(bad)?;
    }
    Ok(total)
}

/// Formats a duration the way `parse_duration` reads it (`1h30m`, `250ms`, `0s`).
pub fn fmt_duration(d: Duration) -> String {
    let mut ms = d.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms >= size {
            out += &format!("{}{unit}", ms / size);
            ms %= size;
        }
    }
    if ms > 0 {
        out += &format!("{ms}ms");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units_and_sums() {
        let ms = |n| Duration::from_millis(n);
        assert_eq!(parse_duration("250ms"), Ok(ms(250)));
        assert_eq!(parse_duration("30s"), Ok(ms(30_000)));
        assert_eq!(parse_duration("5m"), Ok(ms(300_000)));
        assert_eq!(parse_duration("1h30m"), Ok(ms(5_400_000)));
        assert_eq!(parse_duration("1d"), Ok(ms(86_400_000)));
        assert_eq!(
            parse_duration("0s"),
            Ok(Duration::ZERO),
            "zero parses; Args::check refuses it"
        );
    }

    #[test]
    fn bad_durations_are_errors_not_panics() {
        for bad in [
            "",
            "5",
            "m",
            "5x",
            "-5m",
            "1.5h",
            "5 m",
            "99999999999999999999d",
            "213503982d",
        ] {
            assert!(parse_duration(bad).is_err(), "`{bad}` parsed");
        }
    }

    #[test]
    fn durations_print_the_way_they_parse() {
        for text in ["250ms", "30s", "5m", "1h30m", "4h", "1d2h3m4s5ms"] {
            let d = parse_duration(text).unwrap();
            assert_eq!(fmt_duration(d), text);
        }
        assert_eq!(fmt_duration(Duration::ZERO), "0s");
    }

    #[test]
    fn defaults_pass_the_checks() {
        let args = Args::try_parse_from(["mta"]).unwrap();
        assert_eq!(args.check(), Ok(()));
        let real = Args::try_parse_from(["mta", "--clock", "real"]).unwrap();
        assert_eq!(real.check(), Ok(()));
    }
}
