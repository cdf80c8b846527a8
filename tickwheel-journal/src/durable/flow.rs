//! Flow control through the journal: a queue's hold and limits are recorded, so a held
//! queue is still held after a crash (as Postfix's hold queue survives a restart).

use std::hash::Hash;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
#[cfg(doc)]
use tickwheel::sync::Scheduler;
use tickwheel::sync::{FlowPolicy, RateLimit};

use super::Durable;
use crate::codec;
use crate::error::Result;
use crate::store::{Op, Table};

/// A queue's [`FlowPolicy`] as the `queues` table keeps it (postcard; the field order and
/// types are the record format, kept as they were when `FlowPolicy` was this crate's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub(crate) struct Policy {
    held: bool,
    concurrency: Option<u64>,
    /// (nanoseconds between hand-outs, burst).
    rate: Option<(u64, u64)>,
}

impl From<FlowPolicy> for Policy {
    fn from(p: FlowPolicy) -> Self {
        Policy {
            held: p.held,
            concurrency: p.concurrency.map(|n| n as u64),
            rate: p.rate.map(|(interval, burst)| {
                (
                    u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX),
                    burst,
                )
            }),
        }
    }
}

impl From<Policy> for FlowPolicy {
    fn from(p: Policy) -> Self {
        FlowPolicy {
            held: p.held,
            concurrency: p
                .concurrency
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            rate: p
                .rate
                .map(|(interval_ns, burst)| (Duration::from_nanos(interval_ns), burst)),
        }
    }
}

impl<Q, K, T> Durable<Q, K, T>
where
    Q: Hash + Eq + Clone + Serialize + DeserializeOwned + Send + 'static,
    K: Hash + Eq + Clone + Serialize + DeserializeOwned + Send + 'static,
    T: Serialize + DeserializeOwned + Send + 'static,
{
    /// Changes `queue`'s flow control with `change` and records the queue's policy after
    /// it; returns what `change` returned once the record is durable.
    fn change_policy<R>(&self, queue: &Q, change: impl FnOnce() -> R) -> Result<R> {
        let key = codec::policy_key(queue)?;
        // One change of policy at a time: records of one queue reach the engine in the
        // order of the changes.
        let guard = self.policy.lock();
        self.core.shared.check()?;
        let out = change();
        let policy = Policy::from(self.sched.flow_policy(queue));
        let op = if policy == Policy::default() {
            Op::Delete(Table::Queues, key)
        } else {
            Op::Put(Table::Queues, key, codec::encode(&policy)?)
        };
        let n = self.core.queue([op])?;
        drop(guard);
        self.core.settle(n)?;
        Ok(out)
    }

    /// Holds `queue`, as [`Scheduler::hold_queue`], and records the hold: after a crash the
    /// queue comes back held. Like every change of policy here, it records the queue's whole
    /// policy as the scheduler then has it (with what was set directly on
    /// [`scheduler`](Self::scheduler)). Returns whether the queue was newly held. O(shards) plus one
    /// record.
    ///
    /// # Errors
    ///
    /// The journal's (see the type's docs): [`Error::Closed`](crate::Error::Closed),
    /// holding nothing, if the journal had failed or was closed when the call started;
    /// otherwise the queue may be held in memory but the hold is not acknowledged.
    pub fn hold_queue(&self, queue: &Q) -> Result<bool> {
        self.change_policy(queue, || self.sched.hold_queue(queue))
    }

    /// Releases `queue`, as [`Scheduler::release_queue`], and records it. Returns how many
    /// parked timers became eligible. O(shards + timers that became eligible).
    ///
    /// # Errors
    ///
    /// As [`hold_queue`](Self::hold_queue).
    pub fn release_queue(&self, queue: &Q) -> Result<usize> {
        self.change_policy(queue, || self.sched.release_queue(queue))
    }

    /// Sets `queue`'s concurrency limit, as [`Scheduler::set_concurrency`], and records
    /// it. O(shards) plus one record.
    ///
    /// # Errors
    ///
    /// As [`hold_queue`](Self::hold_queue).
    pub fn set_concurrency(&self, queue: &Q, limit: Option<usize>) -> Result<()> {
        self.change_policy(queue, || self.sched.set_concurrency(queue, limit))
    }

    /// Sets `queue`'s rate limit, as [`Scheduler::set_rate`], and records it (as the
    /// interval between hand-outs and the burst, which is all the scheduler keeps; the
    /// rate's position — when the next hand-out is permitted — is not recorded: after a
    /// crash the queue may hand out its burst at once). O(shards) plus one record.
    ///
    /// # Errors
    ///
    /// As [`hold_queue`](Self::hold_queue).
    pub fn set_rate(&self, queue: &Q, limit: Option<RateLimit>) -> Result<()> {
        self.change_policy(queue, || self.sched.set_rate(queue, limit))
    }
}
