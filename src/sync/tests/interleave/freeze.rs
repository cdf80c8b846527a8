//! The dispatch-phase harness's freeze steps: one shard's part of `freeze_queue`,
//! `take_forwarded` and `unfreeze_queue`, and `Due::retry_at`, interleaved with schedule,
//! `pop_due`, taking and dropping `Due`s and dropping half-taken batches. At the end
//! (`World::settle`) every queue's forwarded timers are taken and every queue unfrozen, the
//! rest is delivered, and no timer may be both delivered and handed over (by a freeze or
//! `take_forwarded`), none left out.

use super::phases::{
    Step, World, drain, expect, four_timers, freeze, pop, retry, run_phases, schedule,
    take_forwarded, unfreeze,
};
use super::{alternating, id_on};
use crate::sync::Retried;
use crate::sync::shard::Mark;

impl World {
    pub(super) fn freeze_shard(&mut self, queue: u8, shard: usize) -> Result<(), String> {
        let (mut pending, mut in_flight) = (Vec::new(), Vec::new());
        self.sched
            .freeze_shard(shard, &queue, &mut pending, &mut in_flight);
        pending.sort_unstable_by_key(|&(tick, seq, _)| (tick, seq));
        in_flight.sort_unstable_by_key(|&(tick, seq, _)| (tick, seq));
        let real_p: Vec<(u64, u64)> = pending.iter().map(|(_, _, e)| (e.id, e.value)).collect();
        let real_f: Vec<u64> = in_flight.iter().map(|&(_, _, id)| id).collect();
        self.handed_over
            .extend(real_p.iter().map(|&(_, token)| token));

        self.frozen.insert((queue, shard));
        let (model_p, model_f) = self.take_members(queue, shard, |r| !r.in_flight && !r.forwarded);
        expect("freeze pending", real_p, model_p)?;
        expect("freeze in flight", real_f, model_f)
    }

    pub(super) fn take_forwarded_shard(&mut self, queue: u8, shard: usize) -> Result<(), String> {
        let mut out = Vec::new();
        self.sched.take_forwarded_shard(shard, &queue, &mut out);
        out.sort_unstable_by_key(|&(tick, seq, _)| (tick, seq));
        let real: Vec<(u64, u64)> = out.iter().map(|(_, _, e)| (e.id, e.value)).collect();
        self.handed_over
            .extend(real.iter().map(|&(_, token)| token));
        let model: Vec<(u64, u64)> = (self.members(queue, shard).iter())
            .filter(|(_, r)| r.forwarded)
            .map(|&(id, r)| (id, r.token))
            .collect();
        for (id, _) in &model {
            self.ids.remove(id);
        }
        expect("take_forwarded", real, model)
    }

    pub(super) fn unfreeze_shard(&mut self, queue: u8, shard: usize) -> Result<(), String> {
        let (real, _) = self.sched.in_shard(shard, |state, trash| {
            state.lift(Mark::Frozen, &queue, trash)
        });
        let mut model = 0;
        if self.frozen.remove(&(queue, shard)) {
            for (id, _) in self.members(queue, shard) {
                if let Some(r) = self.ids.get_mut(&id) {
                    if r.forwarded {
                        r.forwarded = false;
                        model += 1;
                    }
                }
            }
        }
        expect("unfreeze count", real, model)
    }

    /// `retry_at(tick)` of the `Due` in hand (nothing if none): pending again with a new
    /// order key, or forwarded if its queue is frozen in its shard.
    pub(super) fn retry(&mut self, tick: u64) -> Result<(), String> {
        let real = self.held.take().map(|due| due.retry_at(self.at(tick)));
        let model = self.m_held.take().map(|id| {
            let shard = self.sched.shard_index(&id);
            self.seq += 1;
            let Some(r) = self.ids.get_mut(&id) else {
                return Err(());
            };
            (r.in_flight, r.tick, r.seq) = (false, tick, self.seq);
            r.forwarded = self.frozen.contains(&(r.queue, shard));
            Ok(if r.forwarded {
                Retried::Forwarded
            } else {
                Retried::Pending
            })
        });
        let real = real.map(|r| r.map_err(|_| ()));
        expect("retry_at", real, model)
    }

    /// At the end: every queue's forwarded timers taken and every queue unfrozen, shard by
    /// shard, each checked against the model.
    pub(super) fn hand_over_and_unfreeze(&mut self) -> Result<(), String> {
        for queue in 0..2u8 {
            for shard in 0..2 {
                self.take_forwarded_shard(queue, shard)?;
                self.unfreeze_shard(queue, shard)?;
            }
        }
        Ok(())
    }
}

/// A freeze of queue 0 (both shards), racing the dispatcher: it pops, takes one `Due` and
/// retries it, takes another and delivers it, and drops the half-taken batch; meanwhile a
/// producer schedules into the queue and another queue, and the handoff takes the forwarded
/// timers, and unfreezes.
#[test]
fn freeze_against_pop_retry_and_a_half_taken_batch() {
    let ([_, _, c, _], initial) = four_timers([1, 1, 1, 2]);
    let threads = [
        vec![pop(3, 3), Step::Take, retry(2), Step::Take, Step::DropBatch],
        vec![freeze(0, 0), freeze(0, 1), take_forwarded(0, 1)],
        vec![schedule(0, c, 0), schedule(1, id_on(1, 2), 0)],
    ];
    assert_eq!(run_phases(&initial, &threads), 2_520);
}

/// Unfreezing while `Due`s come back: a retry and a dropped batch land before or after
/// each shard's unfreeze, and a second pop delivers what went back.
#[test]
fn unfreeze_against_retry_and_dropped_batches() {
    let [a, b] = alternating();
    let c = id_on(1, 1);
    let initial = [
        schedule(0, a, 1),
        schedule(0, b, 1),
        schedule(0, c, 1),
        pop(1, 3),
        freeze(0, 0),
        freeze(0, 1),
    ];
    let threads = [
        vec![Step::Take, retry(1), Step::DropBatch, pop(2, 2), Step::Take],
        vec![unfreeze(0, 1), take_forwarded(0, 0), unfreeze(0, 0)],
        vec![Step::Cancel { id: b }, Step::Reschedule { id: a, tick: 0 }],
    ];
    assert_eq!(run_phases(&initial, &threads), 2_520);
}

/// A freeze against a drain and schedules of the same ids: refused while frozen, taken
/// by the freeze if scheduled before the freeze reached their shard.
#[test]
fn freeze_against_drain_and_schedule_of_the_same_ids() {
    let [a, b] = alternating();
    let initial = [schedule(0, a, 1), pop(1, 1)];
    let threads = [
        vec![Step::Take, retry(3), pop(3, 1)],
        vec![freeze(0, 1), freeze(0, 0), unfreeze(0, 0)],
        vec![schedule(0, b, 2), drain(0, 0), schedule(0, a, 2)],
    ];
    assert_eq!(run_phases(&initial, &threads), 1_680);
}
