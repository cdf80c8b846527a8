//! A queue's concurrency and rate limits, shared by every shard. [`QueueFlow`] holds the limits
//! and the counts, as atomics. [`FlowTable`] holds the scheduler's side:
//! - the records of the queues that ever had a limit;
//! - the list of those whose capacity grew while they had parked timers;
//! - the throttle wake-ups: for each throttled queue, the tick its next hand-out is permitted
//!   at.
//!
//! The rate limit is GCRA, the generic cell rate algorithm of ATM networks (ITU-T I.371) and
//! the algorithm of the `governor` crate. A queue with an emission interval `T` and a tolerance
//! `τ = T × (burst − 1)` keeps a theoretical arrival time `tat`. A hand-out at `now` is
//! permitted if `now ≥ tat − τ`, and sets `tat = max(tat, now) + T`. That is one
//! compare-and-swap per hand-out, and no timer per token.
//!
//! Its times are nanoseconds since the scheduler's origin, in a `u128`. They come from the
//! `now` given to `pop_due`, not rounded to ticks: two hand-outs `T` apart in ticks could be
//! less than `T` apart in the caller's time. Why `u128`: `u64` nanoseconds end 584 years after
//! the origin, short of the tick range the scheduler serves. And `T × (burst − 1)`, up to
//! 2^96 ns, would saturate there; a saturated tolerance or clock permits every hand-out. In
//! `u128` nothing saturates (a `now` is under 2^94 ns), so the arithmetic is exact.
//!
//! Why atomics, and in which order. A `pop_due` takes a slot under its shard's lock
//! ([`QueueFlow::acquire`]). A slot is given back by a `Due` that is done, which holds no lock
//! ([`QueueFlow::end`]), or by a retry or a put-back. A timer that finds no slot is parked in
//! its shard.
//!
//! The lost wake-up to avoid: the merge fails to take a slot; the last in-flight `Due` ends and
//! sees nothing parked; then the merge parks its timer, which nobody would make due again. So a
//! merge whose first try fails counts itself parked and **then** tries again, uncounting itself
//! if that succeeds. An end gives its slot back **before** it looks at the parked count. All
//! four accesses are `SeqCst`: of two threads that each write one location and then read the
//! other's, one reads the other's write (Dekker). So either the second try takes the slot just
//! given back, or the end sees the parked timer. The end then lists the queue as freed, for the
//! next `pop_due` to make one of its parked timers due. An end before the count was made left
//! its slot for the second try. A first try that succeeds, the usual case, costs one
//! compare-and-swap and no count.

use std::hash::Hash;
use std::sync::{Arc, Weak};

use hashbrown::HashMap;

use crate::loom::{AtomicBool, AtomicU64, AtomicU128, AtomicUsize, Mutex, Ordering, dekker_fence};

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
    /// GCRA, in nanoseconds since the origin: per hand-out (0: no rate limit), the burst
    /// (as set, at least 1: the tolerance `emission × (burst − 1)` is derived from it, never
    /// stored, so it reads back exact), and the theoretical arrival time.
    emission: AtomicU64,
    burst: AtomicU64,
    tat: AtomicU128,
    /// The emission `tat` counts in: the last non-zero one set (0: none ever), kept across
    /// a lift with `burst`, so that a limit set later rescales the same backlog.
    basis: AtomicU64,
    /// The throttle wake-up registered for this queue, ns ([`NEVER`]: none).
    wake_at: AtomicU128,
    /// The scheduler's freed list, for [`relist`](Self::relist) (weak: the list holds
    /// records while they are listed).
    freed: Weak<Freed<Q>>,
}

/// The queues whose capacity grew while they had parked timers (see [`FlowTable`]).
#[derive(Debug)]
pub(crate) struct Freed<Q> {
    list: Mutex<Vec<Arc<QueueFlow<Q>>>>,
    /// Whether `list` may be non-empty: `pop_due` reads only this while nothing was freed.
    any: AtomicBool,
}

impl<Q> Freed<Q> {
    fn push(&self, flow: &Arc<QueueFlow<Q>>) {
        self.list.lock().push(Arc::clone(flow));
        self.any.store(true, Ordering::SeqCst);
    }
}

/// "No wake-up registered".
pub(crate) const NEVER: u128 = u128::MAX;

impl<Q> QueueFlow<Q> {
    pub(crate) fn new(name: Q, freed: Weak<Freed<Q>>) -> Self {
        QueueFlow {
            freed,
            name: Mutex::new(name),
            limit: AtomicUsize::new(UNLIMITED),
            in_flight: AtomicUsize::new(0),
            parked: AtomicUsize::new(0),
            emission: AtomicU64::new(0),
            burst: AtomicU64::new(1),
            tat: AtomicU128::new(0),
            basis: AtomicU64::new(0),
            wake_at: AtomicU128::new(NEVER),
        }
    }

    /// The emission (ns, 0: no limit) and the tolerance (ns) in force.
    fn gcra(&self) -> (u128, u128) {
        let emission = u128::from(self.emission.load(Ordering::SeqCst));
        let burst = self.burst.load(Ordering::SeqCst);
        (emission, emission * u128::from(burst.saturating_sub(1)))
    }

    /// GCRA at `now` (ns): takes one hand-out if permitted, or returns the time (ns) from
    /// which one is. Lock-free (a compare-and-swap loop on `tat`); exact (see the module
    /// doc: nothing saturates in `u128`).
    pub(crate) fn take_rate(&self, now: u128) -> Result<(), u128> {
        let (emission, tolerance) = self.gcra();
        if emission == 0 {
            return Ok(());
        }
        let mut tat = self.tat.load(Ordering::SeqCst);
        loop {
            let from = tat.max(now);
            if from - now > tolerance {
                return Err(from - tolerance);
            }
            match (self.tat).compare_exchange(
                tat,
                from.saturating_add(emission),
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return Ok(()),
                Err(seen) => tat = seen,
            }
        }
    }

    /// Hand-outs the rate limit permits at `now` (ns; `usize::MAX` without a limit), and
    /// the time (ns) from which the next one after those is permitted.
    pub(crate) fn permits(&self, now: u128) -> (usize, u128) {
        let (emission, tolerance) = self.gcra();
        if emission == 0 {
            return (usize::MAX, now);
        }
        let from = self.tat.load(Ordering::SeqCst).max(now);
        let ahead = from - now;
        if ahead > tolerance {
            return (0, from - tolerance);
        }
        // At most the burst (a `u64`): no overflow below.
        let n = (tolerance - ahead) / emission + 1;
        let next = from.saturating_add(n.saturating_mul(emission)) - tolerance;
        (usize::try_from(n).unwrap_or(usize::MAX), next)
    }

    /// Sets the rate limit: `emission` ns per hand-out (0: none) and a burst of `burst`
    /// hand-outs at once (at least 1). `now` (ns) is the latest time the scheduler was
    /// polled at (or earlier).
    ///
    /// The change takes effect at once, the backlog rescaled: `tat − t`, at
    /// `t = max(now, tat − old emission × old burst)` (the latter a time the last hand-out
    /// was not before), is the backlog in old intervals; it becomes as many new intervals,
    /// rounded up. So a burst spent under the old rate is spent under the new one (a lowered
    /// rate permits no second burst), and the next permitted instant comes sooner for a
    /// raised rate, later for a lowered one; never more than the new rate allows from
    /// there on. Setting the same limit again changes nothing. A lift leaves `tat`, its
    /// basis and the burst, so a limit set later rescales the backlog left at the lift. A
    /// hand-out racing the change counts at the emission it read.
    pub(crate) fn set_rate(&self, emission: u64, burst: u32, now: u128) {
        self.emission.store(emission, Ordering::SeqCst);
        if emission == 0 {
            // A lift: `tat`, `basis` and `burst` are not read until a limit is set again.
            return;
        }
        let old_burst = u128::from(self.burst.swap(u64::from(burst.max(1)), Ordering::SeqCst));
        let old = u128::from(self.basis.swap(emission, Ordering::SeqCst));
        let new = u128::from(emission);
        if old == 0 || old == new {
            // No limit before (no hand-out under one: `tat` is 0), or the same interval.
            return;
        }
        let mut tat = self.tat.load(Ordering::SeqCst);
        loop {
            let from = now.max(tat.saturating_sub(old * old_burst));
            if tat <= from {
                return;
            }
            // backlog ≤ old × old burst < 2^96: split so that no product overflows
            // (quotient < 2^32 times < 2^64; remainder < 2^64 times < 2^64).
            let backlog = tat - from;
            let scaled = backlog / old * new + (backlog % old * new).div_ceil(old);
            match (self.tat).compare_exchange(
                tat,
                from.saturating_add(scaled),
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return,
                Err(seen) => tat = seen,
            }
        }
    }

    /// `(emission ns, burst)` of the rate limit, as set; `None` without one.
    pub(crate) fn rate(&self) -> Option<(u64, u64)> {
        let emission = self.emission.load(Ordering::SeqCst);
        (emission != 0).then(|| (emission, self.burst.load(Ordering::SeqCst)))
    }

    /// Lists this queue freed again if it has a free slot and a parked member: for a
    /// timer made due for a slot that leaves without taking it (cancelled, drained,
    /// rescheduled, frozen), so the slot goes to the next parked one at the next
    /// `pop_due`. A leaf lock; callable under a shard lock.
    pub(crate) fn relist(self: &Arc<Self>) {
        if self.parked.load(Ordering::SeqCst) > 0 && self.free() > 0 {
            if let Some(freed) = self.freed.upgrade() {
                freed.push(self);
            }
        }
    }

    /// Whether a throttle wake-up is registered (the queue waits for its rate).
    pub(crate) fn throttled(&self) -> bool {
        self.wake_at.load(Ordering::SeqCst) != NEVER
    }

    /// Gives a slot back without listing the queue freed: for a timer that took a slot and
    /// was then throttled (its throttle wake-up makes the parked timers due).
    pub(crate) fn give_back(&self) {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }

    /// Runs `f` on the queue's name (under its leaf lock).
    pub(crate) fn with_name<R>(&self, f: impl FnOnce(&Q) -> R) -> R {
        f(&self.name.lock())
    }

    /// Takes a slot if one is free. Called under a shard lock; a second try after a failed
    /// one comes after [`parking`](Self::parking) (see the module doc).
    pub(crate) fn acquire(&self) -> bool {
        let limit = self.limit.load(Ordering::SeqCst);
        self.in_flight
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < limit).then(|| n + 1)
            })
            .is_ok()
    }

    /// Gives a slot back; `true` if a member is parked and the queue has a concurrency
    /// limit (the caller lists the queue as freed, see [`FlowTable::freed`]; without a
    /// limit, what holds parked timers back is the rate, whose wake-up makes them due).
    pub(crate) fn end(&self) -> bool {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        dekker_fence();
        self.parked.load(Ordering::SeqCst) > 0 && self.limit.load(Ordering::SeqCst) != UNLIMITED
    }

    /// Counts `n` members parked (before trying for a slot: see the module doc).
    pub(crate) fn parking(&self, n: usize) {
        self.parked.fetch_add(n, Ordering::SeqCst);
        dekker_fence();
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
        self.freed.push(flow);
    }

    /// Whether some queue was listed freed since the last `pop_due` took the list.
    pub(crate) fn any_freed(&self) -> bool {
        self.freed.any.load(Ordering::SeqCst)
    }

    /// Registers a throttle wake-up of `flow` at `tick` (ns), unless one at or before it is
    /// registered. Returns whether it registered one (the caller then wakes the pollers
    /// once no shard lock is held, as for a new deadline).
    pub(crate) fn throttle(&self, flow: &Arc<QueueFlow<Q>>, tick: u128) -> bool {
        // Not reached (times are under 2^97 ns), but `NEVER` is not a wake-up.
        let tick = tick.min(NEVER - 1);
        let mut list = self.throttled.lock();
        if flow.wake_at.load(Ordering::SeqCst) <= tick {
            return false;
        }
        flow.wake_at.store(tick, Ordering::SeqCst);
        list.push((tick, Arc::clone(flow)));
        self.next_wake.fetch_min(tick, Ordering::SeqCst);
        true
    }

    /// Drops the throttle wake-up of `flow`, if one is registered: for a rate that changed
    /// or was lifted (the caller lists the queue freed, so the next `pop_due` looks at its
    /// parked timers and registers a wake-up at the new rate's instant, if one is needed).
    /// O(throttled queues) under the leaf lock.
    pub(crate) fn unthrottle(&self, flow: &Arc<QueueFlow<Q>>) {
        let mut list = self.throttled.lock();
        if flow.wake_at.load(Ordering::SeqCst) == NEVER {
            return;
        }
        flow.wake_at.store(NEVER, Ordering::SeqCst);
        list.retain(|(_, listed)| !Arc::ptr_eq(listed, flow));
        let next = list.iter().map(|&(tick, _)| tick).min().unwrap_or(NEVER);
        self.next_wake.store(next, Ordering::SeqCst);
    }

    /// The earliest throttle wake-up ([`NEVER`]: none).
    pub(crate) fn next_wake(&self) -> u128 {
        self.next_wake.load(Ordering::SeqCst)
    }

    /// Notes `now` (ns) as a time the scheduler was polled at, and returns the latest such
    /// time: the rate limits' clock, which, like the wheel's, ignores a `now` that goes
    /// backwards (a rate never permits more for an earlier `now`, and a wake-up computed
    /// at a later one stays right). One atomic load while `now` is not later (a
    /// `fetch_max` when it is).
    pub(crate) fn polled(&self, now: u128) -> u128 {
        let seen = self.seen.load(Ordering::SeqCst);
        if seen < now {
            self.seen.fetch_max(now, Ordering::SeqCst);
            return now.max(self.seen.load(Ordering::SeqCst));
        }
        seen
    }

    /// The latest time (ns) the scheduler was polled at.
    pub(crate) fn seen(&self) -> u128 {
        self.seen.load(Ordering::SeqCst)
    }

    /// Takes the throttle wake-ups due at `now` (ns; nothing, without a lock, while none
    /// is) into `out`.
    pub(crate) fn take_woken(&self, now: u128, out: &mut Vec<Arc<QueueFlow<Q>>>) {
        if self.next_wake.load(Ordering::SeqCst) > now {
            return;
        }
        let mut list = self.throttled.lock();
        let mut next = NEVER;
        list.retain(|(tick, flow)| {
            if *tick > now {
                next = next.min(*tick);
                return true;
            }
            // A later registration replaced this one: that one stays listed.
            if flow.wake_at.load(Ordering::SeqCst) == *tick {
                flow.wake_at.store(NEVER, Ordering::SeqCst);
            }
            out.push(Arc::clone(flow));
            false
        });
        self.next_wake.store(next, Ordering::SeqCst);
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
    freed: Arc<Freed<Q>>,
    /// Throttle wake-ups: `(time, queue)`, a queue's parked timers may go from `time` (ns
    /// since the origin, as the GCRA's).
    /// A leaf lock, like `freed`.
    throttled: Mutex<Vec<(u128, Arc<QueueFlow<Q>>)>>,
    /// The earliest time in `throttled` ([`NEVER`]: none): `pop_due` and the pollers' sleep
    /// read only this.
    next_wake: AtomicU128,
    /// The latest `now` (ns) `pop_due` ran at: the rate limits' clock, and where a rate
    /// change rescales from.
    seen: AtomicU128,
}

impl<Q: Hash + Eq + Clone> FlowTable<Q> {
    pub(crate) fn new() -> Self {
        FlowTable {
            records: Mutex::new(HashMap::new()),
            freed: Arc::new(Freed {
                list: Mutex::new(Vec::new()),
                any: AtomicBool::new(false),
            }),
            throttled: Mutex::new(Vec::new()),
            next_wake: AtomicU128::new(NEVER),
            seen: AtomicU128::new(0),
        }
    }

    /// The record of `queue`, made if it has none.
    pub(crate) fn record(&self, queue: &Q) -> Arc<QueueFlow<Q>> {
        let mut records = self.records.lock();
        if let Some(flow) = records.get(queue) {
            return Arc::clone(flow);
        }
        let flow = Arc::new(QueueFlow::new(queue.clone(), Arc::downgrade(&self.freed)));
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

    /// Bytes the flow records hold, by capacity: the records themselves (each in its `Arc`),
    /// the map of them, the freed list and the throttle wake-ups. Not what `Q` owns on the
    /// heap. O(1); takes the three leaf locks one at a time.
    pub(crate) fn bytes_held(&self) -> usize {
        use std::mem::size_of;
        let (records, map) = {
            let records = self.records.lock();
            (records.len(), records.allocation_size())
        };
        // An `Arc`'s allocation: the record and the two counts.
        let record = size_of::<QueueFlow<Q>>() + 2 * size_of::<usize>();
        let freed = self.freed.list.lock().capacity() * size_of::<Arc<QueueFlow<Q>>>();
        let throttled = self.throttled.lock().capacity() * size_of::<(u128, Arc<QueueFlow<Q>>)>();
        size_of::<Freed<Q>>() + 2 * size_of::<usize>() + records * record + map + freed + throttled
    }

    /// Takes the freed list (empty, without a lock, while nothing was freed).
    pub(crate) fn take_freed(&self) -> Vec<Arc<QueueFlow<Q>>> {
        if !self.freed.any.load(Ordering::SeqCst) {
            return Vec::new();
        }
        let mut freed = self.freed.list.lock();
        self.freed.any.store(false, Ordering::SeqCst);
        std::mem::take(&mut *freed)
    }
}
