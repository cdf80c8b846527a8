//! A queue's whole flow policy as one value, read from one scheduler and applied to another. So
//! a queue that moves between processes, or comes back after a restart, keeps its hold and its
//! limits.

use std::borrow::Borrow;
use std::hash::Hash;
use std::time::Duration;

use crate::sync::flow::RateLimit;
use crate::sync::scheduler::Scheduler;

/// A queue's flow policy: what [`Scheduler::is_held`], [`Scheduler::concurrency`] and
/// [`Scheduler::rate`] report for it, read at once by [`Scheduler::flow_policy`] and set at
/// once by [`Scheduler::apply_flow_policy`]. The default is a queue without any: not held,
/// no limit.
///
/// The value holds no encoding of its own: a crate that stores or sends it chooses one.
///
/// ```
/// use std::time::Duration;
/// use tickwheel::sync::{FlowPolicy, RateLimit, Scheduler};
///
/// let src: Scheduler<String, u64, ()> = Scheduler::new();
/// src.hold_queue("q");
/// src.set_concurrency("q", Some(4));
/// src.set_rate("q", Some(RateLimit::per_second(4).with_burst(2)));
/// let policy = src.flow_policy("q");
/// assert_eq!(
///     policy,
///     FlowPolicy {
///         held: true,
///         concurrency: Some(4),
///         rate: Some((Duration::from_millis(250), 2)),
///     }
/// );
///
/// let dst: Scheduler<String, u64, ()> = Scheduler::new();
/// dst.set_concurrency("q", Some(1));
/// assert_eq!(dst.apply_flow_policy("q", &policy), 0, "held: nothing released");
/// assert_eq!(dst.flow_policy("q"), policy);
/// assert_eq!(dst.apply_flow_policy("q", &FlowPolicy::default()), 0, "none parked");
/// assert_eq!(dst.flow_policy("q"), FlowPolicy::default());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FlowPolicy {
    /// Whether the queue is held (nothing of it handed out until released).
    pub held: bool,
    /// The most timers in flight at once; `None`: no limit.
    pub concurrency: Option<usize>,
    /// The rate limit as `(interval between hand-outs, burst)`, as [`Scheduler::rate`]
    /// reports it; `None`: no limit. The scheduler's burst is a `u32`:
    /// [`Scheduler::apply_flow_policy`] applies a larger one as `u32::MAX`.
    pub rate: Option<(Duration, u64)>,
}

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> Scheduler<Q, K, T> {
    /// The flow policy `queue` has now: [`is_held`](Self::is_held),
    /// [`concurrency`](Self::concurrency) and [`rate`](Self::rate) in one value. The three
    /// are read one after another, so a change running meanwhile may show in some and not
    /// others. O(shards) (one shard lock at a time, for the hold). `queue` may be any
    /// borrowed form of `Q`.
    pub fn flow_policy<B: Hash + Eq + ?Sized>(&self, queue: &B) -> FlowPolicy
    where
        Q: Borrow<B>,
    {
        FlowPolicy {
            held: self.is_held(queue),
            concurrency: self.concurrency(queue),
            rate: self.rate(queue),
        }
    }

    /// Makes `queue`'s flow policy `policy`, exactly: held or released, the concurrency
    /// limit and the rate limit set or lifted (it replaces what the queue had here). The
    /// hold is set first, so timers imported after this call, or already pending, are not
    /// handed out in between; a release comes last, after the limits. Returns how many
    /// parked timers a release made eligible (0 unless the queue was held here and `policy`
    /// is not). A rate is applied as one hand-out per its interval with its burst (a burst
    /// over `u32::MAX` as `u32::MAX`). O(shards) per part, plus the timers a release or a
    /// raised limit makes eligible. `queue` may be any borrowed form of `Q` that can make
    /// an owned `Q`.
    pub fn apply_flow_policy<B>(&self, queue: &B, policy: &FlowPolicy) -> usize
    where
        B: Hash + Eq + ToOwned<Owned = Q> + ?Sized,
        Q: Borrow<B>,
    {
        if policy.held {
            self.hold_queue(queue);
        }
        self.set_concurrency(queue, policy.concurrency);
        // One hand-out per interval is the same limit as `count` per `per`: the scheduler
        // keeps only the interval (`per / count`, rounded up).
        let rate = policy.rate.map(|(interval, burst)| RateLimit {
            count: 1,
            per: interval,
            burst: u32::try_from(burst).unwrap_or(u32::MAX),
        });
        self.set_rate(queue, rate);
        if policy.held {
            0
        } else {
            self.release_queue(queue)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use crate::sync::{FlowPolicy, RateLimit, Scheduler};

    #[test]
    fn applied_policy_reads_back_and_replaces_the_old_one() {
        let s: Scheduler<String, u64, ()> = Scheduler::new();
        s.hold_queue("q");
        s.set_concurrency("q", Some(2));
        s.set_rate("q", Some(RateLimit::per_second(1)));
        assert_eq!(s.apply_flow_policy("q", &FlowPolicy::default()), 0);
        assert_eq!(s.flow_policy("q"), FlowPolicy::default());
        assert!(!s.is_held("q"));

        let big = FlowPolicy {
            held: false,
            concurrency: Some(3),
            rate: Some((Duration::from_nanos(7), u64::MAX)),
        };
        s.apply_flow_policy("q", &big);
        let read = s.flow_policy("q");
        assert_eq!(read.concurrency, Some(3));
        assert_eq!(
            read.rate,
            Some((Duration::from_nanos(7), u64::from(u32::MAX)))
        );
    }

    #[test]
    fn a_held_policy_parks_and_a_release_counts_what_it_freed() {
        let t0 = Instant::now();
        let s = Scheduler::builder().origin(t0).build();
        for id in 0..3u64 {
            s.schedule(String::from("q"), id, t0, ()).unwrap();
        }
        let held = FlowPolicy {
            held: true,
            ..FlowPolicy::default()
        };
        assert_eq!(s.apply_flow_policy("q", &held), 0);
        assert_eq!(s.pop_due(t0, 10).len(), 0, "held: all parked");
        let limited = FlowPolicy {
            held: false,
            concurrency: Some(1),
            rate: None,
        };
        assert_eq!(s.apply_flow_policy("q", &limited), 3, "released");
        let batch: Vec<_> = s.pop_due(t0, 10).collect();
        assert_eq!(batch.len(), 1, "one in flight at most");
    }
}
