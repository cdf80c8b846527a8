//! What `Durable::pop_due` hands out: a [`DueBatch`] of [`Due`]s, each recording its end.

use std::hash::Hash;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use tickwheel::sync::Retried;

use crate::codec;
use crate::durable::{Core, Slot, end_ops};
use crate::error::Result;
use crate::store::{Op, Table};

type Inner<Q, K, T> = tickwheel::sync::Due<Q, K, Slot<T>>;

/// The timers one `pop_due` handed out, their hand-outs already durable. An iterator of
/// [`Due`]s in delivery order; items left in it when it is dropped go back pending at
/// their deadline (as `Due::retry_at` would put them).
pub struct DueBatch<Q: Hash + Eq + Clone + Serialize, K: Hash + Eq + Clone + Serialize, T> {
    items: std::vec::IntoIter<(Inner<Q, K, T>, Vec<u8>)>,
    core: Arc<Core>,
}

impl<Q, K, T> DueBatch<Q, K, T>
where
    Q: Hash + Eq + Clone + Serialize,
    K: Hash + Eq + Clone + Serialize,
{
    pub(crate) fn new(items: Vec<(Inner<Q, K, T>, Vec<u8>)>, core: Arc<Core>) -> Self {
        DueBatch {
            items: items.into_iter(),
            core,
        }
    }

    /// Whether nothing is left in the batch.
    pub fn is_empty(&self) -> bool {
        self.items.len() == 0
    }
}

impl<Q, K, T> Iterator for DueBatch<Q, K, T>
where
    Q: Hash + Eq + Clone + Serialize,
    K: Hash + Eq + Clone + Serialize,
{
    type Item = Due<Q, K, T>;

    fn next(&mut self) -> Option<Self::Item> {
        let (inner, key) = self.items.next()?;
        Some(Due {
            inner: Some(inner),
            key,
            core: self.core.clone(),
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.items.size_hint()
    }
}

impl<Q, K, T> ExactSizeIterator for DueBatch<Q, K, T>
where
    Q: Hash + Eq + Clone + Serialize,
    K: Hash + Eq + Clone + Serialize,
{
}

impl<Q: Hash + Eq + Clone + Serialize, K: Hash + Eq + Clone + Serialize, T> Drop
    for DueBatch<Q, K, T>
{
    fn drop(&mut self) {
        for (inner, _) in self.items.by_ref() {
            // Never handed to a handler: back at its deadline. Its attempt stays counted
            // (the record is on disk), and the meta record already holds this deadline.
            let at = inner.deadline();
            let _ = inner.retry_at(at);
            self.core.wake.deadline_added(at);
        }
    }
}

/// One timer handed out by `Durable::pop_due`, in flight until done or retried.
///
/// [`done`](Self::done) records its end and waits for the record (per the durability
/// mode); dropping it records the end without waiting. Either way the end is queued before
/// the scheduler lets the id be scheduled again, so a later timer of the same id is never
/// deleted by it.
pub struct Due<Q: Hash + Eq + Clone + Serialize, K: Hash + Eq + Clone + Serialize, T> {
    inner: Option<Inner<Q, K, T>>,
    key: Vec<u8>,
    core: Arc<Core>,
}

impl<Q, K, T> Due<Q, K, T>
where
    Q: Hash + Eq + Clone + Serialize,
    K: Hash + Eq + Clone + Serialize,
{
    fn inner(&self) -> &Inner<Q, K, T> {
        // Taken only by the consuming methods and `Drop`.
        self.inner
            .as_ref()
            .unwrap_or_else(|| unreachable!("a Due is used after its end"))
    }

    /// The timer's queue.
    pub fn queue(&self) -> &Q {
        self.inner().queue()
    }

    /// The timer's id.
    pub fn id(&self) -> &K {
        self.inner().id()
    }

    /// The deadline it was due at.
    pub fn deadline(&self) -> Instant {
        self.inner().deadline()
    }

    /// The timer's value.
    pub fn value(&self) -> &T {
        &self.inner().value().value
    }

    /// How often this timer has been handed out, this time included (1 the first time). It
    /// only grows, across crashes too: a sink that has seen `(id, attempt)` can drop a
    /// repeat of it.
    pub fn attempt(&self) -> u32 {
        self.inner().value().attempt
    }

    /// Ends the timer as delivered: records its end, waits for the record (per the mode)
    /// and returns the value.
    ///
    /// # Errors
    ///
    /// The journal's ([`Error::Closed`](crate::Error::Closed) or
    /// [`Engine`](crate::Error::Engine)): the end is then not acknowledged, and recovery
    /// may bring the timer back.
    pub fn done(mut self) -> Result<T> {
        let inner = self.take();
        let ops = end_ops(std::mem::take(&mut self.key), true);
        // Queued while still in flight; only then the id is freed.
        let queued = self.core.queue(ops);
        let value = inner.into_value().value;
        self.core.settle(queued?)?;
        Ok(value)
    }

    /// Puts the timer back pending at `at` (forwarded if its queue is frozen), as
    /// [`tickwheel::sync::Due::retry_at`], and records the new deadline. Its attempt count
    /// stays.
    ///
    /// # Errors
    ///
    /// The journal's. `Ok(Err(value))` when the scheduler is gone (the timer then ended as
    /// delivered in memory, and its record stays: recovery brings it back).
    pub fn retry_at(mut self, at: Instant) -> Result<Result<Retried, T>> {
        let inner = self.take();
        let attempt = inner.value().attempt;
        let op = Op::Put(
            Table::Meta,
            std::mem::take(&mut self.key),
            codec::meta(attempt, self.core.clock.to_wall(at)),
        );
        let queued = self.core.queue([op]);
        let retried = inner.retry_at(at);
        self.core.wake.deadline_added(at);
        self.core.settle(queued?)?;
        Ok(retried.map_err(|e| e.into_value().value))
    }

    fn take(&mut self) -> Inner<Q, K, T> {
        self.inner
            .take()
            .unwrap_or_else(|| unreachable!("a Due is used after its end"))
    }
}

impl<Q: Hash + Eq + Clone + Serialize, K: Hash + Eq + Clone + Serialize, T> Drop for Due<Q, K, T> {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            // A failed journal is reported by the next call that waits.
            let _ = self
                .core
                .queue(end_ops(std::mem::take(&mut self.key), true));
            drop(inner);
        }
    }
}

impl<Q, K, T> std::fmt::Debug for Due<Q, K, T>
where
    Q: Hash + Eq + Clone + Serialize + std::fmt::Debug,
    K: Hash + Eq + Clone + Serialize + std::fmt::Debug,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.inner {
            Some(d) => f
                .debug_struct("Due")
                .field("queue", d.queue())
                .field("id", d.id())
                .field("attempt", &d.value().attempt)
                .finish_non_exhaustive(),
            None => f.write_str("Due(ended)"),
        }
    }
}
