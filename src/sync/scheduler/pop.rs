//! Phase one of dispatch: [`Scheduler::pop_due`], the merge of the due shards' timers in
//! delivery order, and the lock-free check that lets an idle poll take no lock.

use std::cmp::Reverse;
use std::collections::binary_heap::PeekMut;
use std::collections::{BinaryHeap, VecDeque};
use std::hash::Hash;
use std::sync::Arc;
use std::time::Instant;

use super::Scheduler;
use crate::sync::core::StateGuard;
use crate::sync::due::DueBatch;
use crate::sync::shard::Cursor;
use crate::sync::trash::Trash;

/// The most items `pop_due` makes room for before it has found them (a batch of more grows
/// as it goes): enough for the batches a dispatcher usually takes, bounded so that a
/// `pop_due(now, usize::MAX)` that finds one timer does not reserve megabytes.
const BATCH_RESERVE: usize = 1024;

/// One shard in `pop_due`'s merge: its index, its locked state, and where the merge stands
/// in it.
type Lane<'a, Q, K, T> = (usize, StateGuard<'a, Q, K, T>, Cursor);

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> Scheduler<Q, K, T> {
    /// Phase one of dispatch: takes up to `limit` timers due at `now` out of the scheduler
    /// and marks them in flight. See [`DueBatch`] for phase two: take every item you mean to
    /// deliver — dropping the batch puts the untaken ones back (so `pop_due(..).len()` on
    /// its own delivers nothing).
    ///
    /// The batch is in delivery order across all shards: deadline tick, then schedule order
    /// — the first `limit` due timers in that order, whatever the sharding. Nothing is
    /// returned before its deadline: a timer due at `at` is due for `now` once `now` reaches
    /// the first tick boundary at or after `at` (so a deadline between ticks needs a `now`
    /// up to one resolution later); a `now` before the clock origin finds nothing, and
    /// `limit == 0` returns an empty batch. A `now` too far ahead for a tick saturates at
    /// tick `u64::MAX - 1`, so a timer whose deadline tick saturated at `u64::MAX` (see
    /// [`schedule`](Self::schedule)) is never returned. See [`crate::clock`] for the
    /// rounding rules.
    ///
    /// Cost: a poll with nothing due reads each shard's published bound and its lowering
    /// count (twice) and takes no lock: O(shards). Otherwise it locks, in ascending order,
    /// the shards whose bound says a timer may be due (all of them if a shard passed over
    /// became due meanwhile, so the batch is what one instant held), finishes there the timers whose `Due` is done since
    /// the last such call, and merges: O(shards + limit × log shards), plus the wheels'
    /// cascading and the finished timers. The next due timer of each locked shard is looked
    /// at to merge; one looked at and not taken stays pending, in its place. So a `pop_due`
    /// that stops at `limit` leaves up to one looked-at timer per shard staged outside the
    /// wheel: which timers are delivered, and in what order, never depends on that, but
    /// [`SchedulerStats::due_waiting`](crate::sync::SchedulerStats::due_waiting) does, and so depends on the shard count.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use tickwheel::sync::Scheduler;
    ///
    /// let t0 = Instant::now();
    /// let sched = Scheduler::builder().shards(4).origin(t0).build();
    /// for id in 0..10u32 {
    ///     sched.schedule((), id, t0 + Duration::from_millis(u64::from(10 - id)), id).unwrap();
    /// }
    /// let ids: Vec<u32> = sched.pop_due(t0 + Duration::from_millis(5), 100)
    ///     .map(|due| due.into_value())
    ///     .collect();
    /// assert_eq!(ids, [9, 8, 7, 6, 5], "deadline order across shards, none early");
    /// ```
    pub fn pop_due(&self, now: Instant, limit: usize) -> DueBatch<Q, K, T> {
        let mut items = VecDeque::new();
        let instant = now;
        let Some(now) = self.inner.clock.now_tick(now) else {
            return DueBatch::new(Arc::clone(&self.inner), items);
        };
        if limit == 0 {
            return DueBatch::new(Arc::clone(&self.inner), items);
        }
        // Slots that came free for parked timers, and throttled queues whose next hand-out
        // is permitted now (three atomic loads while neither happened).
        // The rate limits' clock: nanoseconds since the origin, exact (`now` is a tick).
        let clock = &self.inner.clock;
        let now_ns = clock.nanos_after_origin(instant).map_or_else(
            || (instant.saturating_duration_since(clock.origin())).as_nanos(),
            u128::from,
        );
        // The rate limits' clock: the latest `now` any pop ran at (a `now` that goes
        // backwards is ignored, as by the wheel).
        let now_ns = self.unpark_ready(now_ns);
        // A shard whose published bound says nothing is due is passed over without its lock
        // (the dispatcher's idle polls then take no lock at all).
        let mut trash = Trash::new();
        let mut lanes = self.lock_due_shards(now, &mut trash);
        if lanes.is_empty() {
            return DueBatch::new(Arc::clone(&self.inner), items);
        }
        let mut throttles = Vec::new();
        let mut heads = BinaryHeap::with_capacity(lanes.len());
        for (lane, (index, shard, cursor)) in lanes.iter_mut().enumerate() {
            if let Some(key) = shard.head(now, cursor) {
                heads.push(Reverse((key, *index, lane)));
            }
        }
        while items.len() < limit {
            // The lane's next head replaces its entry in place (one sift, not a pop and a
            // push), or the entry goes when the lane has no more.
            let Some(mut top) = heads.peek_mut() else {
                break;
            };
            let Reverse((key, index, lane)) = *top;
            let (_, shard, cursor) = &mut lanes[lane];
            if let Some(popped) = shard.take(key, cursor, now_ns, &mut throttles) {
                if items.capacity() == 0 {
                    // Room for the whole batch at once (up to `BATCH_RESERVE`): growing it
                    // by doubling would copy every item several times with the shards locked.
                    items.reserve(limit.min(BATCH_RESERVE));
                }
                items.push_back((index, popped));
            }
            match shard.head(now, cursor) {
                Some(next) => top.0.0 = next,
                None => drop(PeekMut::pop(top)),
            }
        }
        for (_, shard, cursor) in &mut lanes {
            shard.close(std::mem::take(cursor));
        }
        drop(lanes);
        self.hand_out(trash, throttles, instant, items)
    }

    /// Locks, for `pop_due`'s merge, every shard that may have a timer due at tick `now`,
    /// in ascending order, and finishes there the timers whose `Due` is done (their ids and
    /// queue names go to `trash`, for the caller to drop after the locks). Empty when no
    /// shard had a timer due at one instant during the call.
    ///
    /// The locked set must be one that a single instant agrees with: a shard passed over may
    /// have become due since its bound was read, by an operation that happened before one
    /// the merge will see (a producer scheduling on shard 0, then on shard 1, or scheduling
    /// on shard 0, then cancelling the only due timer of shard 1). So with the locks held
    /// the shards passed over are checked again by [`quiet_except`](Self::quiet_except);
    /// if that fails, every shard is locked instead.
    fn lock_due_shards<'a>(&'a self, now: u64, trash: &mut Trash<Q, K>) -> Vec<Lane<'a, Q, K, T>> {
        let shards = &self.inner.shards;
        let mut lanes = Vec::new();
        for (index, shard) in shards.iter().enumerate() {
            if shard.may_be_due(now) {
                if lanes.is_empty() {
                    lanes.reserve_exact(shards.len());
                }
                lanes.push((index, shard.lock_settled(trash), Cursor::default()));
            }
        }
        let locked = |lanes: &[Lane<'_, Q, K, T>], index: usize| {
            lanes.binary_search_by_key(&index, |lane| lane.0).is_ok()
        };
        if !self.quiet_except(now, |index| locked(&lanes, index)) {
            drop(lanes);
            lanes = (shards.iter().enumerate())
                .map(|(index, shard)| (index, shard.lock_settled(trash), Cursor::default()))
                .collect();
        }
        lanes
    }

    /// Whether every shard not `locked` had nothing due at tick `now` at one instant during
    /// the call: each one's bound is above `now`, and no bound was lowered between the first
    /// read and the last (read twice: a bound only drops by a lowering, which bumps its
    /// shard's count after the store). O(shards), no lock.
    fn quiet_except(&self, now: u64, locked: impl Fn(usize) -> bool) -> bool {
        let shards = &self.inner.shards;
        let mut lowered = 0u64;
        for (index, shard) in shards.iter().enumerate() {
            if locked(index) {
                continue;
            }
            lowered = lowered.wrapping_add(shard.lowered());
            if shard.may_be_due(now) {
                return false;
            }
        }
        let again = (shards.iter().enumerate())
            .filter(|&(index, _)| !locked(index))
            .fold(0u64, |sum, (_, shard)| sum.wrapping_add(shard.lowered()));
        // Counts only grow, so equal sums mean equal counts (a wrap needs 2^64 lowerings).
        again == lowered
    }
}
