//! A queue's concurrency limit, shared by every shard: [`QueueFlow`] (the limit and the
//! counts, atomics), and [`FlowTable`], the scheduler's records of the queues that ever had
//! a limit, and the list of those whose capacity grew while they had parked timers.
//!
//! Why atomics, and in which order. A `pop_due` takes a slot under its shard's lock
//! ([`QueueFlow::acquire`]); a slot is given back by a `Due` that is done, which holds no
//! lock ([`QueueFlow::end`]), or by a retry or a put-back. A timer that finds no slot is
//! parked in its shard. The lost wake-up to avoid: the merge fails to take a slot, the last
//! in-flight `Due` ends and sees nothing parked, and then the merge parks its timer — which
//! nobody would make due again. So the merge counts itself parked **before** it tries for a
//! slot (and uncounts itself on success), and an end gives its slot back **before** it
//! looks at the parked count, all four `SeqCst`: of two threads each writing one location
//! and then reading the other's, one reads the other's write (Dekker). Either the merge
//! takes the slot just given back, or the end sees the parked timer and lists the queue as
//! freed, for the next `pop_due` to make one of its parked timers due.

use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use hashbrown::HashMap;

use crate::loom::{AtomicBool, Mutex, Ordering};

/// "No limit".
pub(crate) const UNLIMITED: usize = usize::MAX;

/// The shared flow record of one queue (see the module doc).
#[derive(Debug)]
pub(crate) struct QueueFlow<Q> {
    /// The queue's name, to find its record in each shard. In a (leaf) mutex so that the
    /// record is `Sync` when `Q` is only `Send`, as the scheduler promises.
    name: Mutex<Q>,
    /// The most in flight at once; [`UNLIMITED`] for none.
    limit: AtomicUsize,
    /// Hand-outs holding a slot (popped while the queue had this record).
    in_flight: AtomicUsize,
    /// Members parked in some shard, plus merges about to try for a slot.
    parked: AtomicUsize,
}

impl<Q> QueueFlow<Q> {
    pub(crate) fn new(name: Q) -> Self {
        QueueFlow {
            name: Mutex::new(name),
            limit: AtomicUsize::new(UNLIMITED),
            in_flight: AtomicUsize::new(0),
            parked: AtomicUsize::new(0),
        }
    }

    /// Runs `f` on the queue's name (under its leaf lock).
    pub(crate) fn with_name<R>(&self, f: impl FnOnce(&Q) -> R) -> R {
        f(&self.name.lock())
    }

    /// Takes a slot if one is free. Called under a shard lock, after [`parking`](Self::parking).
    pub(crate) fn acquire(&self) -> bool {
        let limit = self.limit.load(Ordering::SeqCst);
        self.in_flight
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < limit).then(|| n + 1)
            })
            .is_ok()
    }

    /// Gives a slot back; `true` if a member is parked (the caller lists the queue as
    /// freed, see [`FlowTable::freed`]).
    pub(crate) fn end(&self) -> bool {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.parked.load(Ordering::SeqCst) > 0
    }

    /// Counts `n` members parked (before trying for a slot: see the module doc).
    pub(crate) fn parking(&self, n: usize) {
        self.parked.fetch_add(n, Ordering::SeqCst);
    }

    /// Counts `n` members no longer parked.
    pub(crate) fn unparked(&self, n: usize) {
        self.parked.fetch_sub(n, Ordering::SeqCst);
    }

    /// Slots free now (0 at or over the limit).
    pub(crate) fn free(&self) -> usize {
        let limit = self.limit.load(Ordering::SeqCst);
        limit.saturating_sub(self.in_flight.load(Ordering::SeqCst))
    }

    pub(crate) fn limit(&self) -> Option<usize> {
        let limit = self.limit.load(Ordering::SeqCst);
        (limit != UNLIMITED).then_some(limit)
    }

    pub(crate) fn set_limit(&self, limit: Option<usize>) {
        self.limit
            .store(limit.unwrap_or(UNLIMITED), Ordering::SeqCst);
    }
}

impl<Q> FlowTable<Q> {
    /// Lists `flow` as freed: a slot came free while a member was parked.
    pub(crate) fn freed(&self, flow: &Arc<QueueFlow<Q>>) {
        self.freed.lock().push(Arc::clone(flow));
        self.any_freed.store(true, Ordering::SeqCst);
    }

    /// Whether some queue was listed freed since the last `pop_due` took the list.
    pub(crate) fn any_freed(&self) -> bool {
        self.any_freed.load(Ordering::SeqCst)
    }
}

/// The scheduler's flow records, and the queues whose capacity grew while some member was
/// parked. Lock order: `records` is taken alone; `freed` is a leaf (taken alone, or under a
/// shard lock by a retry or put-back), never with the signal lock.
#[derive(Debug)]
pub(crate) struct FlowTable<Q> {
    /// Every queue that ever had a limit. Records are kept (a queue's limit can be lifted,
    /// not its record), so that an `Arc` held by a shard or a `Due` is never the last one
    /// dropped under a lock.
    records: Mutex<HashMap<Q, Arc<QueueFlow<Q>>>>,
    freed: Mutex<Vec<Arc<QueueFlow<Q>>>>,
    /// Whether `freed` may be non-empty: `pop_due` reads only this while nothing was freed.
    any_freed: AtomicBool,
}

impl<Q: Hash + Eq + Clone> FlowTable<Q> {
    pub(crate) fn new() -> Self {
        FlowTable {
            records: Mutex::new(HashMap::new()),
            freed: Mutex::new(Vec::new()),
            any_freed: AtomicBool::new(false),
        }
    }

    /// The record of `queue`, made if it has none.
    pub(crate) fn record(&self, queue: &Q) -> Arc<QueueFlow<Q>> {
        let mut records = self.records.lock();
        if let Some(flow) = records.get(queue) {
            return Arc::clone(flow);
        }
        let flow = Arc::new(QueueFlow::new(queue.clone()));
        records.insert(queue.clone(), Arc::clone(&flow));
        flow
    }

    /// The record of `queue`, if it ever had a limit.
    pub(crate) fn get<B: Hash + Eq + ?Sized>(&self, queue: &B) -> Option<Arc<QueueFlow<Q>>>
    where
        Q: std::borrow::Borrow<B>,
    {
        self.records.lock().get(queue).map(Arc::clone)
    }

    /// Takes the freed list (empty, without a lock, while nothing was freed).
    pub(crate) fn take_freed(&self) -> Vec<Arc<QueueFlow<Q>>> {
        if !self.any_freed.load(Ordering::SeqCst) {
            return Vec::new();
        }
        let mut freed = self.freed.lock();
        self.any_freed.store(false, Ordering::SeqCst);
        std::mem::take(&mut *freed)
    }
}
