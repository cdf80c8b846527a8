//! The command line. Every value is checked while parsing, by clap: a bad one is a usage
//! error (exit status 2) whose message names the option and what it accepts, never a panic
//! later on nor a `NaN` in the tables. Numbers go through the parsers below rather than clap's
//! ranged integer parser, whose message names the range only for numbers out of it, not for
//! text that is no number at all (`-1`, `1k`); names go through clap's possible values.
//! Numeric options take values that start with a hyphen (`-1`, `-inf`), so that these reach
//! the option's parser and are reported as its bad values, not as unknown arguments.

use std::ops::RangeInclusive;
use std::time::Duration;

use clap::Parser;
use clap::builder::PossibleValuesParser;

use crate::peers::Workload;

#[derive(Parser, Debug)]
#[command(about = "tickwheel side by side with tokio and the other timer wheels")]
pub struct Args {
    /// 100 000 timers only (finishes in under a minute).
    #[arg(long)]
    pub quick: bool,
    /// Timer counts to run, comma-separated, each from 2 to 10000000 (default
    /// 1000,100000,1000000; --quick: 100000).
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true, value_parser = size)]
    pub sizes: Vec<usize>,
    /// Repetitions per cell, after one unmeasured warm-up, from 1 to 1000; the table shows
    /// the median (default 3, --quick 2).
    #[arg(long, allow_hyphen_values = true, value_parser = repetitions)]
    pub reps: Option<usize>,
    /// Repetitions of workload 7 (the concurrent scheduler), from 1 to 1000, whose wall-clock
    /// figure is noisier on a shared machine; the table shows the median and the min–max
    /// spread (default 5).
    #[arg(long, allow_hyphen_values = true, value_parser = repetitions)]
    pub scheduler_reps: Option<usize>,
    /// Also run workload 7 with each of these producer counts, comma-separated, each from 1
    /// to 64 (for example 1,2,4,8), and print its throughput by producer count: the scaling
    /// figure. Each count takes --scheduler-reps repetitions of the three contenders.
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true, value_parser = producers)]
    pub producers: Vec<usize>,
    /// Time budget of one run in seconds, from 0.001 to 86400 (default 3, --quick 1); a run
    /// over it reports an estimate (`~`).
    #[arg(long, allow_hyphen_values = true, value_parser = budget)]
    pub budget: Option<Duration>,
    /// Peers to run (names as in the table, comma-separated); tickwheel always runs, and
    /// `tickwheel DelayQueue` needs `--features tokio`.
    #[arg(long, value_delimiter = ',', value_parser = PossibleValuesParser::new(peer_names()))]
    pub peers: Vec<String>,
    /// Workloads to run, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        value_parser = PossibleValuesParser::new(Workload::ALL.map(Workload::short))
    )]
    pub workloads: Vec<String>,
    /// Skip workload 8 (memory).
    #[arg(long)]
    pub no_memory: bool,
    /// Leave out the floor column (a bare random read-modify-write loop over memory as large
    /// as the wheel's entries, beside insert, cancel and expiry; see `floor.rs`).
    #[arg(long)]
    pub no_floor: bool,
    /// Skip workload 7 (the concurrent scheduler).
    #[arg(long)]
    pub no_scheduler: bool,
    /// Run workload 7 only (no workloads 1–6, idle poll or memory): for before/after
    /// comparisons of the scheduler.
    #[arg(long, conflicts_with_all = ["no_scheduler", "workloads"])]
    pub scheduler_only: bool,
    /// Run the flow-control workload only (`flow.rs`): `pop_due` per timer handed out with
    /// 9 000 of 10 000 queues held or at their limit, against the same with them empty;
    /// --reps repetitions (default 7).
    #[arg(long, conflicts_with_all = ["scheduler_only", "workloads"])]
    pub flow: bool,
    /// Print Markdown tables.
    #[arg(long)]
    pub markdown: bool,
    /// Also write an SVG chart of workloads 1–6 and the idle poll to FILE: ns per operation
    /// by number of timers, one line per peer.
    #[arg(long, value_name = "FILE")]
    pub chart: Option<String>,
    /// Measure nothing: draw the `--chart` from the tables of an earlier `--markdown` run
    /// saved in FILE (such as PERFORMANCE.md).
    #[arg(long, value_name = "FILE", requires = "chart")]
    pub chart_from: Option<String>,
    /// Internal: measure this one size and print its cells for the parent (see `child.rs`).
    #[arg(long, hide = true, value_parser = size)]
    pub child_size: Option<usize>,
}

/// The timer counts accepted: at least 2, so that workload 2 (cancel half) cancels one; at
/// most 10 million: each peer's structure, the inputs and the scripts take a few hundred
/// bytes per timer together (at `u32::MAX`, the most the inputs can number, the child
/// aborted on a failed 32 GiB allocation).
const SIZES: RangeInclusive<usize> = 2..=10_000_000;

/// The repetitions accepted: one at least, as a median of none is `NaN`; a thousand at most,
/// as more is a typo that would run for days.
const REPETITIONS: RangeInclusive<usize> = 1..=1000;

/// The budgets accepted, in seconds: a run checks its budget every few hundred operations,
/// so a budget under a millisecond means nothing, and one over a day is a typo.
const BUDGET_SECONDS: RangeInclusive<f64> = 0.001..=86_400.0;

/// The names of the peers this build has (the tickwheel `DelayQueue` needs the `tokio`
/// feature), in table order.
fn peer_names() -> Vec<&'static str> {
    crate::all_peers().iter().map(|p| p.name).collect()
}

/// A whole number in `range`; the message names the range whatever is wrong with `text`.
fn whole_in(text: &str, range: RangeInclusive<usize>) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if range.contains(&n) => Ok(n),
        _ => Err(format!(
            "expected a whole number from {} to {}",
            range.start(),
            range.end()
        )),
    }
}

/// The producer counts accepted by `--producers`: one at least; 64 at most, as each is a
/// thread and the machines measured have a few cores.
const PRODUCERS: RangeInclusive<usize> = 1..=64;

fn producers(text: &str) -> Result<usize, String> {
    whole_in(text, PRODUCERS)
}

fn size(text: &str) -> Result<usize, String> {
    whole_in(text, SIZES)
}

fn repetitions(text: &str) -> Result<usize, String> {
    whole_in(text, REPETITIONS)
}

/// Seconds in [`BUDGET_SECONDS`]: `NaN`, infinities and negative numbers are out of it.
fn budget(text: &str) -> Result<Duration, String> {
    match text.parse::<f64>() {
        Ok(secs) if BUDGET_SECONDS.contains(&secs) => Ok(Duration::from_secs_f64(secs)),
        _ => Err(format!(
            "expected a number of seconds from {} to {}",
            BUDGET_SECONDS.start(),
            BUDGET_SECONDS.end()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("compare").chain(args.iter().copied()))
    }

    #[test]
    fn bad_values_are_usage_errors_naming_the_option_and_what_it_accepts() {
        let reps = "from 1 to 1000";
        let budget = "from 0.001 to 86400";
        let refused = |args: &[&str], option: &str, accepted: &str| match parse(args) {
            Ok(parsed) => panic!("{args:?} parsed as {parsed:?}"),
            Err(e) => {
                let text = e.to_string();
                assert_eq!(e.exit_code(), 2, "{args:?}: {text}");
                assert!(text.contains(&format!("'{option} <")), "{args:?}: {text}");
                assert!(text.contains(accepted), "{args:?}: {text}");
            }
        };
        // Each option, what its message says it accepts, and values it refuses.
        for (option, accepted, values) in [
            (
                "--budget",
                budget,
                &[
                    "-1", "0", "0.0009", "nan", "inf", "-inf", "--quick", "1e30", "86400.5", "",
                    "3s",
                ][..],
            ),
            (
                "--reps",
                reps,
                &[
                    "0",
                    "-1",
                    "x",
                    "99999999999999999999999",
                    "1001",
                    "18446744073709551615",
                ],
            ),
            ("--scheduler-reps", reps, &["0", ""]),
            ("--producers", "from 1 to 64", &["0", "65", "1,,2"]),
            (
                "--sizes",
                "from 2 to 10000000",
                &[
                    "0",
                    "1",
                    "",
                    "1000,,100000",
                    "1000,-5",
                    "4294967296",
                    "4294967295",
                    "10000001",
                    "1e3",
                ],
            ),
            ("--peers", "BTreeMap", &["foo", "", "BTreeMap,btreemap"]),
            ("--workloads", "expire_once", &["foo", "insert,"]),
        ] {
            for value in values {
                refused(&[option, value], option, accepted);
            }
        }
        refused(&["--budget=-1"], "--budget", budget);
    }

    #[test]
    fn good_values_parse() {
        let args = parse(&[
            "--sizes",
            "2,1000,10000000",
            "--reps",
            "1",
            "--scheduler-reps",
            "7",
            "--producers",
            "1,2,4,8",
            "--budget",
            "0.5",
            "--peers",
            "BTreeMap,tokio Sleep",
            "--workloads",
            "insert,idle_poll",
        ])
        .expect("valid arguments");
        assert_eq!(args.sizes, [2, 1000, 10_000_000]);
        assert_eq!((args.reps, args.scheduler_reps), (Some(1), Some(7)));
        assert_eq!(args.producers, [1, 2, 4, 8]);
        assert_eq!(args.budget, Some(Duration::from_millis(500)));
        assert_eq!(args.peers, ["BTreeMap", "tokio Sleep"]);
        assert_eq!(args.workloads, ["insert", "idle_poll"]);
        for edge in ["0.001", "86400", "1e-3"] {
            assert!(parse(&["--budget", edge]).is_ok(), "{edge}");
        }

        let defaults = parse(&[]).expect("no arguments");
        assert!(defaults.sizes.is_empty() && defaults.peers.is_empty());
        assert_eq!((defaults.reps, defaults.budget), (None, None));
    }

    #[test]
    fn every_peer_and_workload_name_is_accepted() {
        for name in peer_names() {
            assert!(parse(&["--peers", name]).is_ok(), "{name}");
        }
        for w in Workload::ALL {
            assert!(parse(&["--workloads", w.short()]).is_ok(), "{}", w.short());
        }
    }
}
