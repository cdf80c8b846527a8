//! Flow control per queue, as a queue manager needs it (Postfix's `postsuper -h`, KumoMTA's
//! suspensions):
//! - [`Scheduler::hold_queue`](super::Scheduler::hold_queue) and
//!   [`release_queue`](super::Scheduler::release_queue);
//! - a concurrency limit per queue ([`set_concurrency`](super::Scheduler::set_concurrency));
//! - a rate limit ([`set_rate`](super::Scheduler::set_rate), [`RateLimit`]);
//! - the three as one value ([`FlowPolicy`]).
//!
//! The shard's side, the marks and the parked timers, is in `shard/flow.rs`. The shared
//! per-queue record of a limit is in `limit.rs`.

mod limit;
mod policy;
mod scheduler;

pub(crate) use limit::{FlowTable, NEVER, QueueFlow};
pub use policy::FlowPolicy;

use std::time::Duration;

/// A rate limit for one queue: at most `count` hand-outs per `per`, with bursts of up to
/// `burst` at once after a quiet spell (GCRA; see
/// [`Scheduler::set_rate`](super::Scheduler::set_rate)). Any interval and burst hold
/// exactly, however long the tolerance `interval × (burst − 1)` (the arithmetic is 128-bit).
///
/// ```
/// use std::time::Duration;
/// use tickwheel::sync::RateLimit;
///
/// let limit = RateLimit::per_second(10).with_burst(3);
/// assert_eq!((limit.count, limit.per, limit.burst), (10, Duration::from_secs(1), 3));
/// assert_eq!(limit.interval(), Duration::from_millis(100));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RateLimit {
    /// Hand-outs per `per`; 0 is taken as 1.
    pub count: u32,
    /// The period.
    pub per: Duration,
    /// Hand-outs permitted at once after a quiet spell; 0 is taken as 1 (no burst).
    pub burst: u32,
}

impl RateLimit {
    /// `count` hand-outs per second, no burst.
    pub fn per_second(count: u32) -> Self {
        RateLimit {
            count,
            per: Duration::from_secs(1),
            burst: 1,
        }
    }

    /// The same limit with bursts of up to `burst` hand-outs.
    pub fn with_burst(self, burst: u32) -> Self {
        RateLimit { burst, ..self }
    }

    /// The least time between two hand-outs at the sustained rate: `per / count`, rounded
    /// up to a nanosecond (at least one), at most `u64::MAX` ns (about 584 years: a longer
    /// interval is taken as that one).
    pub fn interval(&self) -> Duration {
        Duration::from_nanos(self.interval_ns())
    }

    /// [`interval`](Self::interval) in nanoseconds (saturating at `u64::MAX`).
    pub(crate) fn interval_ns(&self) -> u64 {
        let per = self.per.as_nanos();
        let ns = per.div_ceil(u128::from(self.count.max(1))).max(1);
        u64::try_from(ns).unwrap_or(u64::MAX)
    }
}
