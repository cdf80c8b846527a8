//! The dispatch-phase harness's flow steps: one shard's part of `hold_queue` and
//! `release_queue`, interleaved with schedule, reschedule, cancel, drains, freezes,
//! `pop_due`, taking, retrying and dropping `Due`s and half-taken batches. The model's
//! `pop_due` skips the members of a queue held in their shard, and those over their queue's
//! concurrency limit (`set_concurrency`, set before the first pop); at the end
//! (`World::settle`) every hold is released and every limit lifted, the rest is delivered,
//! and every timer must have ended exactly once.

use super::phases::{
    Step, World, drain, expect, four_timers, freeze, hold, pop, release, retry, run_phases,
    schedule, unfreeze,
};
use super::{alternating, id_on};
use crate::sync::shard::Mark;

impl World {
    pub(super) fn hold_shard(&mut self, queue: u8, shard: usize) -> Result<(), String> {
        let real = self.sched.hold_shard(shard, &queue);
        let model = self.holds.insert((queue, shard));
        expect("hold (new mark)", real, model)
    }

    /// The release count is checked against what can have been parked: the model's members
    /// of the queue in the shard that are pending and were due at some `pop_due` (a merge
    /// that stopped at its limit parks fewer). The shard's invariants (checked after every
    /// step) tie each parked entry to its hold.
    pub(super) fn release_shard(&mut self, queue: u8, shard: usize) -> Result<(), String> {
        let (real, _) = self
            .sched
            .in_shard(shard, |state, trash| state.lift(Mark::Held, &queue, trash));
        if !self.holds.remove(&(queue, shard)) {
            return expect("release of an unheld queue", real, 0);
        }
        let most = (self.ids.iter())
            .filter(|(id, r)| r.queue == queue && self.sched.shard_index(id) == shard)
            .filter(|(_, r)| !r.in_flight && !r.forwarded && r.tick <= self.popped_to)
            .count();
        if real > most {
            return Err(format!("release: {real} parked, at most {most} due"));
        }
        Ok(())
    }

    pub(super) fn limit(&mut self, queue: u8, limit: Option<usize>) {
        self.sched.set_concurrency(&queue, limit);
        match limit {
            Some(limit) => self.limits.insert(queue, limit),
            None => self.limits.remove(&queue),
        };
    }

    /// Keeps, of the due timers `due` (in delivery order), those a `pop_due` may hand out
    /// under the concurrency limits: per queue, as many as its limit leaves beside the
    /// members in flight. (Every in-flight member holds a slot: the tests set limits before
    /// the first pop.)
    pub(super) fn within_limits(&self, due: &mut Vec<(u64, u64, u64)>) {
        let mut room: std::collections::BTreeMap<u8, usize> = (self.limits.iter())
            .map(|(&queue, &limit)| {
                let flying = (self.ids.values())
                    .filter(|r| r.queue == queue && r.in_flight)
                    .count();
                (queue, limit.saturating_sub(flying))
            })
            .collect();
        due.retain(|&(_, _, id)| {
            let Some(queue) = self.ids.get(&id).map(|r| r.queue) else {
                return false;
            };
            match room.get_mut(&queue) {
                None => true,
                Some(0) => false,
                Some(n) => {
                    *n -= 1;
                    true
                }
            }
        });
    }

    /// `flush_queue(queue, now)`: the model's pending members due later than `now` become
    /// due at `now`, in delivery order, each with a new order key.
    pub(super) fn flush(&mut self, queue: u8, now: u64) -> Result<(), String> {
        let real = self.sched.flush_queue(&queue, self.at(now));
        let mut later: Vec<(u64, u64, u64)> = (self.ids.iter())
            .filter(|(_, r)| r.queue == queue && !r.in_flight && !r.forwarded && r.tick > now)
            .map(|(&id, r)| (r.tick, r.seq, id))
            .collect();
        later.sort_unstable();
        for &(_, _, id) in &later {
            self.seq += 1;
            if let Some(r) = self.ids.get_mut(&id) {
                (r.tick, r.seq) = (now, self.seq);
            }
        }
        expect("flush count", real, later.len())
    }

    /// At the end: every hold released, shard by shard, and every limit lifted.
    pub(super) fn release_all(&mut self) -> Result<(), String> {
        for queue in 0..2u8 {
            self.limit(queue, None);
        }
        for (queue, shard) in std::mem::take(&mut self.holds) {
            self.holds.insert((queue, shard));
            self.release_shard(queue, shard)?;
        }
        Ok(())
    }
}

/// A hold of queue 0 racing the dispatcher: it pops (parking what is held), takes a `Due`
/// and retries it, drops the half-taken batch and pops again; meanwhile the operator holds
/// and releases shard by shard, and a producer schedules, reschedules and cancels members.
#[test]
fn hold_and_release_against_pop_retry_and_a_half_taken_batch() {
    let ([_, b, _, d], initial) = four_timers([1, 1, 1, 2]);
    let threads = [
        vec![pop(3, 2), Step::Take, retry(2), Step::DropBatch, pop(3, 3)],
        vec![hold(0, 0), hold(0, 1), release(0, 1)],
        vec![Step::Reschedule { id: d, tick: 0 }, Step::Cancel { id: b }],
    ];
    assert_eq!(run_phases(&initial, &threads), 2_520);
}

/// Parked timers against drains, freezes and schedules of the same ids: a drain or a
/// freeze takes a parked timer as pending, and an id drained can be scheduled again into
/// the held queue.
#[test]
fn parked_timers_against_drain_freeze_and_schedule() {
    let [a, b] = alternating();
    let c = id_on(0, 1);
    let initial = [
        hold(0, 0),
        hold(0, 1),
        schedule(0, a, 1),
        schedule(0, b, 1),
        schedule(0, c, 2),
        pop(1, 3),
    ];
    let threads = [
        vec![pop(2, 2), Step::Take, release(0, 0), pop(2, 2)],
        vec![drain(0, 0), freeze(0, 1), unfreeze(0, 1)],
        vec![schedule(0, a, 0), Step::Reschedule { id: c, tick: 0 }],
    ];
    assert_eq!(run_phases(&initial, &threads), 1_260);
}

/// A concurrency limit of 1 on queue 0 and 2 on queue 1, against a dispatcher that takes,
/// delivers, retries and drops half-taken batches, a producer, and a hold: a slot that
/// comes free (delivered, retried, put back) lets the earliest parked timer go at the next
/// `pop_due`, never more than the limit in flight.
#[test]
fn concurrency_limits_against_delivery_retry_put_back_and_a_hold() {
    let ([_, _, _, d], timers) = four_timers([1, 1, 1, 2]);
    let limits = vec![
        Step::Limit {
            queue: 0,
            limit: Some(1),
        },
        Step::Limit {
            queue: 1,
            limit: Some(2),
        },
    ];
    let initial = [limits, timers].concat();
    let threads = [
        vec![
            pop(3, 3),
            Step::Take,
            retry(2),
            pop(3, 2),
            Step::Take,
            Step::Finish,
            pop(3, 3),
        ],
        vec![hold(0, 1), release(0, 1)],
        vec![schedule(1, id_on(1, 2), 0), Step::Cancel { id: d }],
    ];
    assert_eq!(run_phases(&initial, &threads), 1_980);
}

/// A flush of queue 0 racing a dispatcher that pops, takes, retries and drops a half-taken
/// batch, a hold and release of one shard, and a producer: the flushed timers come out
/// now, in deadline order, the in-flight ones are left alone, and every timer ends once.
#[test]
fn flush_against_pop_retry_a_hold_and_a_producer() {
    let ([_, _, _, d], initial) = four_timers([1, 5, 1, 7]);
    let threads = [
        vec![pop(2, 2), Step::Take, retry(9), Step::DropBatch, pop(2, 3)],
        vec![Step::Flush { queue: 0, now: 2 }, hold(0, 1), release(0, 1)],
        vec![
            schedule(0, id_on(1, 2), 8),
            Step::Reschedule { id: d, tick: 6 },
        ],
    ];
    assert_eq!(run_phases(&initial, &threads), 2_520);
}
