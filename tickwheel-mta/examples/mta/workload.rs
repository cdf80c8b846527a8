//! The workload, fixed by the seed before the run starts: which queue each message is for,
//! when it arrives, whether each delivery attempt fails, each retry's jitter, and the
//! operators' plan (what they do, to which queue or message, and when).
//!
//! Times here are MTA time: nanoseconds since the start of the run, whatever the clock.
//! Per-attempt decisions are a hash of (seed, message, attempt), so they do not depend on
//! which thread makes them or in what order.
//!
//! The operators' plan is a stream ([`Plan`]), drawn as the operator goes: a year of MTA
//! time at the default rates is some 50 million actions, which computed up front took more
//! than a gigabyte before the run began. It holds three random generators, whatever the
//! length of the run.

use rand::{Rng, SeedableRng, rngs::StdRng};
use rand_distr::{Distribution, Exp, Zipf};

use crate::args::Args;

const MINUTE_NS: f64 = 60e9;

/// Everything the seed decides.
pub struct Workload {
    pub seed: u64,
    /// The destination queue of each message, by message id. Queue 0 is the biggest.
    pub queue_of: Vec<u32>,
    messages: u64,
    arrival_ns: u64,
    retry_base_ns: u64,
    retry_cap_ns: u64,
    jitter: f64,
    fail_rate: f64,
    /// The queue sizes' law (queue `k - 1` is drawn for a sample `k`).
    zipf: Zipf<f64>,
    queues: u32,
    /// What the operators' plan is drawn from.
    ops: Ops,
}

/// The options the operators' plan is drawn from.
#[derive(Debug, Clone, Copy)]
struct Ops {
    end_ns: u64,
    /// Drains, bounces and suspensions per minute, in that order.
    per_minute: [f64; 3],
    rebind: f64,
    suspend_for_ns: u64,
}

/// One operator action at a point of MTA time.
#[derive(Debug, Clone, Copy)]
pub struct Action {
    pub at: u64,
    pub kind: ActionKind,
}

/// What an operator does.
#[derive(Debug, Clone, Copy)]
pub enum ActionKind {
    /// Drain `queue` and re-queue its messages on queue `to` (a new route).
    Rebind { queue: u32, to: u32 },
    /// Drain `queue` and hand its messages to another host: they end as drained.
    Transfer { queue: u32 },
    /// Bounce one message: the first message from `from` on that is pending when the
    /// operator looks (operators bounce deferred mail). Cancelled, it ends as bounced.
    Bounce { from: u32 },
    /// Hold back `queue`'s deliveries until `until` (MTA time).
    Suspend { queue: u32, until: u64 },
}

impl Workload {
    /// Draws the workload of `args` from `seed`.
    pub fn new(args: &Args, seed: u64) -> Workload {
        let mut rng = StdRng::seed_from_u64(seed);
        let zipf = Zipf::new(u64::from(args.queues), args.zipf).expect("checked by Args::check");
        let mut w = Workload {
            seed,
            queue_of: Vec::new(),
            messages: u64::from(args.messages),
            arrival_ns: nanos(args.arrival),
            retry_base_ns: nanos(args.retry_base),
            retry_cap_ns: nanos(args.retry_cap),
            jitter: args.jitter,
            fail_rate: args.fail_rate,
            zipf,
            queues: args.queues,
            ops: Ops {
                end_ns: nanos(args.duration),
                per_minute: [args.drain_rate, args.bounce_rate, args.suspend_rate],
                rebind: args.rebind,
                suspend_for_ns: nanos(args.suspend_for),
            },
        };
        w.queue_of = (0..args.messages).map(|_| w.draw(&mut rng)).collect();
        w
    }

    /// A queue, drawn with the Zipf weights of the traffic.
    fn draw(&self, rng: &mut StdRng) -> u32 {
        (self.zipf.sample(rng) as u32).clamp(1, self.queues) - 1
    }

    /// The operators' plan, from the start: the same stream for the same seed and options.
    pub fn plan(&self) -> Plan<'_> {
        Plan::new(self)
    }

    /// When message `id` arrives (and is due for its first delivery attempt): arrivals are
    /// spread evenly over `--arrival`, in id order.
    pub fn arrival(&self, id: u32) -> u64 {
        (u128::from(id) * u128::from(self.arrival_ns) / u128::from(self.messages)) as u64
    }

    /// How many messages have arrived by MTA time `t`.
    pub fn arrived_by(&self, t: u64) -> u32 {
        let last = u128::from(t) * u128::from(self.messages) / u128::from(self.arrival_ns);
        (last + 1).min(u128::from(self.messages)) as u32
    }

    /// Whether delivery attempt `attempt` (0 = the first) of message `id` fails.
    pub fn fails(&self, id: u32, attempt: u32) -> bool {
        unit(mix(self.seed, id, attempt, 1)) < self.fail_rate
    }

    /// The wait before the next attempt after `failures` failed attempts (1 = the first
    /// failure): `--retry-base` doubled `failures - 1` times, capped at `--retry-cap`, then
    /// scaled by a jitter factor in [1 - J, 1 + J).
    pub fn backoff(&self, id: u32, failures: u32) -> u64 {
        let doublings = failures.saturating_sub(1).min(63);
        let interval = self
            .retry_base_ns
            .saturating_mul(1 << doublings)
            .min(self.retry_cap_ns);
        self.jittered(interval, mix(self.seed, id, failures, 2))
    }

    /// A spread for messages released together (after a suspension in the journaled run,
    /// which re-queues them): up to one `--retry-base` later, so a suspended queue does not
    /// come back as one burst.
    pub fn spread(&self, id: u32, salt: u32) -> u64 {
        (unit(mix(self.seed, id, salt, 3)) * self.retry_base_ns as f64) as u64
    }

    fn jittered(&self, interval: u64, hash: u64) -> u64 {
        let factor = 1.0 + self.jitter * (2.0 * unit(hash) - 1.0);
        ((interval as f64 * factor) as u64).max(1)
    }

    /// The message count of the biggest queue and of the median queue.
    pub fn queue_sizes(&self, queues: u32) -> (u64, u64) {
        let mut sizes = vec![0u64; queues as usize];
        for &q in &self.queue_of {
            sizes[q as usize] += 1;
        }
        sizes.sort_unstable();
        (sizes[sizes.len() - 1], sizes[sizes.len() / 2])
    }
}

/// The operators' plan: three independent Poisson processes (drains, bounces, suspends) over
/// the run, merged in time order (equal times: drains, then bounces, then suspends), drawn
/// one action at a time. Drained and suspended queues are picked with the same Zipf weights
/// as the traffic (operators act on the destinations that matter); a rebind target is any
/// other queue; a bounce starts its search at a message that has arrived by then.
///
/// Each process has its own generator, seeded from the workload's seed, so the stream
/// depends on the seed and the options alone. Memory: three generators, whatever the
/// length of the run.
pub struct Plan<'a> {
    work: &'a Workload,
    processes: Vec<Process>,
}

/// One of the plan's Poisson processes: the time of its next action (`f64` nanoseconds)
/// and what it draws its gaps and choices from.
struct Process {
    kind: usize,
    next: f64,
    gap: Exp<f64>,
    rng: StdRng,
}

impl<'a> Plan<'a> {
    fn new(work: &'a Workload) -> Plan<'a> {
        let processes = (0..3)
            .filter(|&kind| work.ops.per_minute[kind] > 0.0)
            .map(|kind| {
                let rate = work.ops.per_minute[kind] / MINUTE_NS;
                let gap = Exp::new(rate).expect("rate checked by Args::check");
                let mut rng = StdRng::seed_from_u64(mix(work.seed, 0, kind as u32, 4));
                let next = gap.sample(&mut rng);
                Process {
                    kind,
                    next,
                    gap,
                    rng,
                }
            })
            .collect();
        Plan { work, processes }
    }
}

impl Iterator for Plan<'_> {
    type Item = Action;

    fn next(&mut self) -> Option<Action> {
        let work = self.work;
        let end = work.ops.end_ns as f64;
        let p = self
            .processes
            .iter_mut()
            .filter(|p| p.next < end)
            .min_by(|a, b| a.next.total_cmp(&b.next))?;
        let at = p.next as u64;
        let kind = work.action(p.kind, &mut p.rng, at);
        p.next += p.gap.sample(&mut p.rng);
        Some(Action { at, kind })
    }
}

impl Workload {
    /// An action of process `kind` (0 drain, 1 bounce, 2 suspend) at `at`.
    fn action(&self, kind: usize, rng: &mut StdRng, at: u64) -> ActionKind {
        match kind {
            0 => {
                let queue = self.draw(rng);
                if rng.gen_bool(self.ops.rebind) {
                    ActionKind::Rebind {
                        queue,
                        to: other_queue(rng, queue, self.queues),
                    }
                } else {
                    ActionKind::Transfer { queue }
                }
            }
            1 => ActionKind::Bounce {
                from: rng.gen_range(0..self.arrived_by(at).max(1)),
            },
            _ => ActionKind::Suspend {
                queue: self.draw(rng),
                until: at.saturating_add(self.ops.suspend_for_ns),
            },
        }
    }
}

fn other_queue(rng: &mut StdRng, queue: u32, queues: u32) -> u32 {
    if queues == 1 {
        return queue;
    }
    let pick = rng.gen_range(0..queues - 1);
    if pick >= queue { pick + 1 } else { pick }
}

/// Nanoseconds of a duration, saturating (durations are capped at a year by `Args::check`).
pub fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// SplitMix64 finaliser over (seed, id, attempt, stream): a well-mixed 64-bit hash.
fn mix(seed: u64, id: u32, attempt: u32, stream: u32) -> u64 {
    let mut z = seed
        ^ (u64::from(id) << 32 | u64::from(attempt)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ u64::from(stream).wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A hash as a uniform float in [0, 1).
fn unit(hash: u64) -> f64 {
    (hash >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn workload(extra: &[&str]) -> Workload {
        let mut argv = vec!["mta", "--messages", "1000", "--queues", "50"];
        argv.extend_from_slice(extra);
        Workload::new(&Args::try_parse_from(argv).unwrap(), 9)
    }

    #[test]
    fn arrived_by_counts_the_arrivals_at_or_before() {
        let w = workload(&[]);
        for id in [0, 1, 499, 998, 999] {
            let at = w.arrival(id);
            assert!(w.arrived_by(at) > id, "message {id} arrives at {at}");
            if at > 0 {
                assert!(
                    w.arrived_by(at - 1) <= id,
                    "message {id} counted before {at}"
                );
            }
        }
        assert_eq!(w.arrived_by(u64::MAX / 2), 1000);
    }

    #[test]
    fn backoff_doubles_to_the_cap_within_the_jitter() {
        let w = workload(&["--retry-base", "5m", "--retry-cap", "1h", "--jitter", "0.2"]);
        let minute = 60e9;
        for (failures, interval) in [
            (1, 5.0),
            (2, 10.0),
            (3, 20.0),
            (4, 40.0),
            (5, 60.0),
            (40, 60.0),
        ] {
            for id in 0..200 {
                let b = w.backoff(id, failures) as f64 / minute;
                assert!(
                    (interval * 0.8..interval * 1.2).contains(&b),
                    "failure {failures} of {id}: {b} min, want {interval} ±20%"
                );
            }
        }
        assert!(
            w.backoff(0, u32::MAX) > 0,
            "no overflow at absurd failure counts"
        );
    }

    #[test]
    fn the_seed_fixes_queues_failures_and_plan() {
        let (a, b) = (workload(&[]), workload(&[]));
        assert_eq!(a.queue_of, b.queue_of);
        let (plan_a, plan_b): (Vec<_>, Vec<_>) = (a.plan().collect(), b.plan().collect());
        assert_eq!(format!("{plan_a:?}"), format!("{plan_b:?}"));
        assert!((0..1000).all(|id| a.fails(id, 0) == b.fails(id, 0)));
        assert!(
            plan_a.windows(2).all(|p| p[0].at <= p[1].at),
            "plan in time order"
        );
        let (largest, median) = a.queue_sizes(50);
        assert!(
            largest > 5 * median.max(1),
            "Zipf skew: largest {largest}, median {median}"
        );
    }

    #[test]
    fn the_plan_has_every_kind_at_about_its_rate() {
        let w = workload(&["--duration", "10h", "--arrival", "1h"]);
        let plan: Vec<Action> = w.plan().collect();
        let count = |f: fn(&ActionKind) -> bool| plan.iter().filter(|a| f(&a.kind)).count();
        let drains =
            count(|k| matches!(k, ActionKind::Rebind { .. } | ActionKind::Transfer { .. }));
        let bounces = count(|k| matches!(k, ActionKind::Bounce { .. }));
        let suspends = count(|k| matches!(k, ActionKind::Suspend { .. }));
        // 600 minutes at 0.5, 100 and 0.5 per minute: 300, 60000, 300 expected.
        assert!((200..400).contains(&drains), "{drains} drains");
        assert!((57_000..63_000).contains(&bounces), "{bounces} bounces");
        assert!((200..400).contains(&suspends), "{suspends} suspends");
        assert!(
            plan.iter().all(|a| a.at < 36_000_000_000_000),
            "all within the run"
        );
    }

    /// A year at a million bounces a minute is 5 × 10^11 actions: computed up front it
    /// could never start. Streamed, its first actions come at once.
    #[test]
    fn a_long_plan_is_streamed_not_computed_up_front() {
        let w = workload(&[
            "--duration",
            "365d",
            "--arrival",
            "1h",
            "--bounce-rate",
            "1000000",
        ]);
        let first: Vec<Action> = w.plan().take(1000).collect();
        assert_eq!(first.len(), 1000);
        assert!(first.windows(2).all(|p| p[0].at <= p[1].at), "time order");
        assert!(
            first[999].at < 60_000_000_000,
            "about 1000 in the first minute"
        );
    }
}
