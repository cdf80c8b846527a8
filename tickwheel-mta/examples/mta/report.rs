//! The end of the run: the lateness histogram, peak memory, and the summary as a table or
//! as JSON.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use serde_json::json;

use crate::args::{Args, fmt_duration};
use crate::ledger::Tally;
use crate::sim::{Counts, Sim};

/// Sub-buckets per power of two: values are kept to within 1/32 (about 3 %).
const SUB_BITS: u32 = 5;
const SUBS: usize = 1 << SUB_BITS;
const BUCKETS: usize = SUBS * (64 - SUB_BITS as usize + 1);

/// A log-linear histogram of `u64` values, filled with relaxed atomics: values below 32
/// are exact, larger ones fall in one of 32 buckets per power of two. The maximum is exact.
pub struct Histogram {
    buckets: Vec<AtomicU64>,
    max: AtomicU64,
    count: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            max: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }
}

/// The bucket of `v`: the value itself below `SUBS`; above, the power of two (`exp`) picks a
/// row of `SUBS` buckets and the `SUB_BITS` bits after the leading one pick the column.
fn bucket_of(v: u64) -> usize {
    if v < SUBS as u64 {
        return v as usize;
    }
    let exp = 63 - v.leading_zeros(); // >= SUB_BITS
    let sub = (v >> (exp - SUB_BITS)) as usize & (SUBS - 1);
    SUBS * (exp - SUB_BITS + 1) as usize + sub
}

/// The largest value that falls in bucket `b` (the inverse of `bucket_of`).
fn bucket_top(b: usize) -> u64 {
    if b < SUBS {
        return b as u64;
    }
    let exp = (b / SUBS) as u32 + SUB_BITS - 1;
    let sub = (b % SUBS) as u64;
    let low = (SUBS as u64 + sub) << (exp - SUB_BITS);
    low + ((1u64 << (exp - SUB_BITS)) - 1)
}

impl Histogram {
    pub fn record(&self, v: u64) {
        self.buckets[bucket_of(v)].fetch_add(1, Relaxed);
        self.max.fetch_max(v, Relaxed);
        self.count.fetch_add(1, Relaxed);
    }

    /// The value at quantile `q` (0..=1), rounded up to its bucket's top, at most the max.
    pub fn quantile(&self, q: f64) -> u64 {
        let count = self.count.load(Relaxed);
        if count == 0 {
            return 0;
        }
        let rank = ((q * count as f64).ceil() as u64).clamp(1, count);
        let mut seen = 0;
        for (b, n) in self.buckets.iter().enumerate() {
            seen += n.load(Relaxed);
            if seen >= rank {
                return bucket_top(b).min(self.max());
            }
        }
        self.max()
    }

    pub fn max(&self) -> u64 {
        self.max.load(Relaxed)
    }
}

/// What the final sweep saw, besides the ledger.
pub struct Sweep {
    /// `Scheduler::len()` after every thread stopped.
    pub len: usize,
    /// `Scheduler::in_flight_len()` after every thread stopped (must be 0).
    pub in_flight: usize,
    /// Timers the sweep's drains returned.
    pub found: u64,
}

/// Everything the summary shows.
pub struct Summary<'a> {
    pub args: &'a Args,
    pub sim: &'a Sim,
    pub tally: Tally,
    pub sweep: Sweep,
    pub wall: Duration,
    pub peak_memory: Option<u64>,
    /// Scheduler tick length in nanoseconds (of `Instant` time).
    pub tick_ns: u64,
}

impl Summary<'_> {
    /// Whether the run proved exactly-once (and never-early), and the sweep agreed.
    pub fn ok(&self) -> bool {
        self.tally.ok() && self.sweep_agrees() && self.sim.flow.ok()
    }

    fn sweep_agrees(&self) -> bool {
        self.sweep.in_flight == 0 && self.sweep.len as u64 == self.sweep.found
    }

    /// The line the README and the integration test look for.
    pub fn exactly_once_line(&self) -> String {
        let t = &self.tally;
        let sum = format!(
            "{} delivered + {} drained + {} bounced + {} pending",
            t.delivered, t.drained, t.bounced, t.pending
        );
        if self.ok() {
            return format!(
                "exactly-once: OK ({} scheduled = {sum}; 0 duplicates)",
                t.scheduled
            );
        }
        let eq = if t.scheduled == t.delivered + t.drained + t.bounced + t.pending {
            "="
        } else {
            "≠"
        };
        let mut line = format!(
            "exactly-once: FAILED ({} scheduled {eq} {sum}; {} duplicates, {} lost, {} early",
            t.scheduled, t.duplicates, t.lost, t.early
        );
        if !self.sweep_agrees() {
            let s = &self.sweep;
            let _ = write!(
                line,
                "; after the run len() = {}, in_flight_len() = {}, sweep found {}",
                s.len, s.in_flight, s.found
            );
        }
        line.push(')');
        line
    }

    /// The human-readable table.
    pub fn table(&self) -> String {
        let (a, c, t) = (self.args, &self.sim.counts, &self.tally);
        let g = Counts::get;
        let (largest, median) = self.sim.work.queue_sizes(a.queues);
        let mta = Duration::from_nanos(self.sim.end);
        let mut out = String::new();
        let mut line = |s: String| {
            out.push_str(&s);
            out.push('\n');
        };
        line(format!(
            "tickwheel MTA simulation: --clock {}{}, --seed {}",
            a.clock.name(),
            real_scale(a),
            self.sim.work.seed
        ));
        line(format!(
            "  {} messages over {} queues (Zipf s={}: largest {largest}, median {median}), {} producer threads, {} shards",
            a.messages,
            a.queues,
            a.zipf,
            a.threads,
            self.sim.sched.shards()
        ));
        line(format!(
            "  {} of MTA time in {:.2} s; arrivals over {}; retry {} doubling to {} ±{:.0}%; {:.0}% of attempts fail",
            fmt_duration(mta),
            self.wall.as_secs_f64(),
            fmt_duration(a.arrival),
            fmt_duration(a.retry_base),
            fmt_duration(a.retry_cap),
            a.jitter * 100.0,
            a.fail_rate * 100.0
        ));
        line(String::new());
        line(format!("  {:<22}{:>12}", "messages scheduled", t.scheduled));
        line(format!("  {:<22}{:>12}", "delivered", t.delivered));
        line(format!("  {:<22}{:>12}", "drained", t.drained));
        line(format!("  {:<22}{:>12}", "bounced", t.bounced));
        line(format!("  {:<22}{:>12}", "still pending", t.pending));
        line(String::new());
        let (rebinds, transfers) = (g(&c.rebinds), g(&c.transfers));
        let (rebound, transferred) = (g(&c.rebound), g(&c.transferred));
        let rows = [
            (
                "delivery attempts",
                g(&c.attempts),
                format!(
                    "{} failed and retried, {} deferred by a suspension",
                    g(&c.failed),
                    g(&c.deferred)
                ),
            ),
            (
                "drains",
                rebinds + transfers,
                format!(
                    "{rebinds} rebinds re-queued {rebound} messages, {transfers} transfers drained {transferred}"
                ),
            ),
            (
                "bounces",
                g(&c.bounces),
                format!(
                    "{} cancelled, {} in flight, {} no longer pending",
                    g(&c.bounced),
                    g(&c.bounce_in_flight),
                    g(&c.bounce_not_pending)
                ),
            ),
            (
                "suspends",
                g(&c.suspends),
                format!("{} messages held back", g(&c.suspended)),
            ),
            (
                "in-flight meetings",
                g(&c.drains_met_in_flight),
                format!(
                    "drains and suspends that met {} messages in flight (left to the dispatcher)",
                    g(&c.left_in_flight)
                ),
            ),
            (
                "timer operations",
                c.operations(),
                format!(
                    "{:.0} ops/s (schedule, cancel, pop_due, and each timer popped or drained)",
                    self.ops_per_sec()
                ),
            ),
        ];
        // A figure, right-aligned after its label, then what it is made of.
        for (label, figure, note) in rows {
            line(format!("  {label:<22}{figure:>12}   {note}"));
        }
        line(format!("  {:<22}{}", "lateness", self.lateness_text()));
        line(format!(
            "  {:<22}{:>12}   dispatches, {} before their deadline",
            "never early",
            g(&c.dispatched),
            t.early
        ));
        line(format!("  {:<22}{}", "peak memory", self.memory_text()));
        line(String::new());
        for note in &t.notes {
            line(format!("  note: {note}"));
        }
        line(self.sim.flow.line());
        line(self.exactly_once_line());
        out
    }

    fn ops_per_sec(&self) -> f64 {
        self.sim.counts.operations() as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    fn late(&self) -> [u64; 3] {
        let h = &self.sim.lateness;
        [h.quantile(0.5), h.quantile(0.99), h.max()]
    }

    /// `p50 0.491  p99 0.989  max 0.999 ticks`: truncated, not rounded, so that a lateness
    /// below one tick never prints as `1.000`.
    fn lateness_text(&self) -> String {
        let [p50, p99, max] = self.late();
        let ticks = |ns: u64| (ns as f64 / self.tick_ns as f64 * 1000.0).floor() / 1000.0;
        let mut s = format!(
            "p50 {:.3}  p99 {:.3}  max {:.3} ticks",
            ticks(p50),
            ticks(p99),
            ticks(max)
        );
        let tick = fmt_duration(self.args.resolution);
        if self.args.clock == crate::args::ClockMode::Real {
            let ms = |ns: u64| ns as f64 / 1e6;
            let real_tick = self.tick_ns as f64 / 1e6;
            let _ = write!(
                s,
                " = {:.3} / {:.3} / {:.3} ms (tick: {tick} of MTA time, {real_tick} ms)",
                ms(p50),
                ms(p99),
                ms(max)
            );
        } else {
            let _ = write!(s, " (tick: {tick})");
        }
        s
    }

    fn memory_text(&self) -> String {
        match self.peak_memory {
            Some(b) => format!("{:.1} MiB (VmHWM)", b as f64 / (1 << 20) as f64),
            None => "n/a (no /proc/self/status)".into(),
        }
    }

    /// The same numbers as one JSON object.
    pub fn json(&self) -> serde_json::Value {
        let (a, c, t) = (self.args, &self.sim.counts, &self.tally);
        let g = Counts::get;
        let [p50, p99, max] = self.late();
        let ticks = |ns: u64| ns as f64 / self.tick_ns as f64;
        let real = a.clock == crate::args::ClockMode::Real;
        let ms = |ns: u64| {
            if real {
                json!(ns as f64 / 1e6)
            } else {
                json!(null)
            }
        };
        json!({
            "config": {
                "messages": a.messages, "queues": a.queues, "zipf": a.zipf, "threads": a.threads,
                "shards": self.sim.sched.shards(), "resolution": fmt_duration(a.resolution),
                "duration": fmt_duration(a.duration),
                "arrival": fmt_duration(a.arrival), "retry_base": fmt_duration(a.retry_base),
                "retry_cap": fmt_duration(a.retry_cap), "jitter": a.jitter,
                "fail_rate": a.fail_rate, "drain_rate": a.drain_rate, "rebind": a.rebind,
                "bounce_rate": a.bounce_rate, "suspend_rate": a.suspend_rate,
                "suspend_for": fmt_duration(a.suspend_for), "batch": a.batch,
                "clock": a.clock.name(),
                "dispatcher": a.dispatcher_kind().map(|d| d.name()),
                "scale": if real { json!(a.scale) } else { json!(null) },
                "seed": self.sim.work.seed,
            },
            "messages": {
                "scheduled": t.scheduled, "delivered": t.delivered, "drained": t.drained,
                "bounced": t.bounced, "pending": t.pending,
            },
            "attempts": {
                "total": g(&c.attempts), "failed": g(&c.failed), "deferred": g(&c.deferred),
            },
            "drains": {
                "rebinds": g(&c.rebinds), "rebound_messages": g(&c.rebound),
                "transfers": g(&c.transfers), "transferred_messages": g(&c.transferred),
                "met_in_flight": g(&c.drains_met_in_flight), "left_in_flight": g(&c.left_in_flight),
            },
            "bounces": {
                "total": g(&c.bounces), "cancelled": g(&c.bounced),
                "in_flight": g(&c.bounce_in_flight), "not_pending": g(&c.bounce_not_pending),
            },
            "suspends": { "total": g(&c.suspends), "messages": g(&c.suspended) },
            "operations": c.operations(),
            "ops_per_sec": self.ops_per_sec(),
            "wall_seconds": self.wall.as_secs_f64(),
            "mta_seconds": Duration::from_nanos(self.sim.end).as_secs_f64(),
            "dispatches": g(&c.dispatched), "waits": g(&c.waits), "stalls": g(&c.stalls),
            "lateness_ticks": { "p50": ticks(p50), "p99": ticks(p99), "max": ticks(max) },
            "lateness_ms": { "p50": ms(p50), "p99": ms(p99), "max": ms(max) },
            "peak_memory_bytes": self.peak_memory,
            "exactly_once": {
                "ok": self.ok(), "duplicates": t.duplicates, "lost": t.lost, "early": t.early,
                "sweep": {
                    "len": self.sweep.len, "in_flight": self.sweep.in_flight,
                    "found": self.sweep.found,
                },
                "notes": t.notes, "line": self.exactly_once_line(),
                "flow": self.sim.flow.line(),
            },
        })
    }
}

fn real_scale(a: &Args) -> String {
    match a.dispatcher_kind() {
        Some(d) => format!(" --scale {} --dispatcher {}", a.scale, d.name()),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_round_trip_at_every_power_of_two() {
        for exp in 0..64 {
            for v in [
                1u64 << exp,
                (1u64 << exp) - 1,
                (1u64 << exp) + 1,
                u64::MAX >> (63 - exp),
            ] {
                let b = bucket_of(v);
                assert!(b < BUCKETS, "value {v:#b} -> bucket {b}");
                assert!(
                    bucket_top(b) >= v,
                    "value {v:#b} above its bucket top {:#b}",
                    bucket_top(b)
                );
                if b > 0 {
                    assert!(bucket_top(b - 1) < v, "value {v:#b} fits the bucket below");
                }
            }
        }
    }
}
