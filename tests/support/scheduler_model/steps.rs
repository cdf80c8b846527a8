//! The harness's steps: each calls the scheduler and applies the model's answer.

use super::*;

impl SchedHarness {
    /// `flush_queue`: the queue's pending members due later than `now` become due at `now`,
    /// in delivery order, each with a new `seq`.
    pub(super) fn flush(&mut self, queue: u8, now: Instant) {
        let got = self.sched.flush_queue(&queue, now);
        let Some(now_tick) = self.now_tick(now) else {
            ensure!(self, got == 0, "flush before the origin moved {got}");
            return;
        };
        let mut later: Vec<((u64, u64), u8)> = (self.ids.iter())
            .filter_map(|(&id, s)| match *s {
                State::Pending(t) if t.queue == queue && t.tick > now_tick => {
                    Some(((t.tick, t.seq), id))
                }
                _ => None,
            })
            .collect();
        later.sort_unstable();
        // The deadline becomes the start of `now`'s tick.
        let at = self
            .at_nanos(u128::from(now_tick) * self.res_ns())
            .unwrap_or(now);
        for &(_, id) in &later {
            if let Some(State::Pending(t)) = self.ids.get_mut(&id) {
                self.seq += 1;
                (t.tick, t.seq, t.at) = (now_tick, self.seq, at);
            }
        }
        ensure!(
            self,
            got == later.len(),
            "flush_queue({queue}) moved {got}, model {later:?}"
        );
    }

    pub(super) fn set_limit(&mut self, queue: u8, limit: Option<usize>) {
        self.sched.set_concurrency(&queue, limit);
        match limit {
            Some(limit) => {
                self.records.insert(queue);
                self.limits.insert(queue, limit);
            }
            None => {
                self.limits.remove(&queue);
            }
        }
        let got = self.sched.concurrency(&queue);
        ensure!(self, got == limit, "concurrency({queue}) = {got:?}");
    }

    /// Keeps, of `due` (in delivery order), what a `pop_due` hands out: nothing of a held
    /// queue, and of a limited one no more than its limit leaves beside its slotted
    /// members in flight.
    pub(super) fn eligible(&mut self, due: &mut Vec<((u64, u64), u8)>, now: Instant, limit: usize) {
        // The rate limits' clock ignores a `now` that goes backwards: the latest pop's.
        let now_ns = now
            .saturating_duration_since(self.origin)
            .as_nanos()
            .max(self.seen);
        let mut room: BTreeMap<u8, usize> = BTreeMap::new();
        for (&queue, &limit) in &self.limits {
            let flying = (self.slotted.iter())
                .filter(
                    |id| matches!(self.ids.get(id), Some(State::InFlight(t)) if t.queue == queue),
                )
                .count();
            room.insert(queue, limit.saturating_sub(flying));
        }
        let mut taken = 0;
        due.retain(|&(_, id)| {
            if taken == limit {
                return false;
            }
            let Some(State::Pending(t)) = self.ids.get(&id) else {
                return false;
            };
            if self.holds.contains(&t.queue) {
                return false;
            }
            // As `pop_due` takes them: a slot first, then a hand-out of the rate.
            if room.get(&t.queue) == Some(&0) {
                return false;
            }
            if self
                .rates
                .get_mut(&t.queue)
                .is_some_and(|gcra| !gcra.permit(now_ns))
            {
                return false;
            }
            if let Some(n) = room.get_mut(&t.queue) {
                *n -= 1;
            }
            taken += 1;
            true
        });
    }

    pub(super) fn schedule(&mut self, queue: u8, id: u8, at: At) {
        let at = self.instant(at);
        self.next_value += 1;
        let value = self.next_value;
        let got = self.sched.schedule(queue, id, at, value);
        match self.ids.get(&id) {
            Some(State::Pending(_)) => ensure!(
                self,
                got == Err(ScheduleError::Pending(value)),
                "schedule of pending id {id}: {got:?}"
            ),
            Some(State::InFlight(_)) => ensure!(
                self,
                got == Err(ScheduleError::InFlight(value)),
                "schedule of in-flight id {id}: {got:?}"
            ),
            None => {
                ensure!(self, got.is_ok(), "schedule of absent id {id}: {got:?}");
                self.seq += 1;
                let timer = Timer {
                    queue,
                    tick: self.deadline_tick(at),
                    seq: self.seq,
                    at,
                    value,
                };
                self.ids.insert(id, State::Pending(timer));
                self.ledger.insert(value, Fate::Pending);
            }
        }
    }

    pub(super) fn reschedule(&mut self, id: u8, at: At) {
        let at = self.instant(at);
        let got = self.sched.reschedule(&id, at);
        match self.ids.get(&id).copied() {
            Some(State::Pending(mut timer)) => {
                ensure!(self, got.is_ok(), "reschedule of pending id {id}: {got:?}");
                self.seq += 1;
                timer.seq = self.seq;
                timer.tick = self.deadline_tick(at);
                timer.at = at;
                self.ids.insert(id, State::Pending(timer));
            }
            Some(State::InFlight(_)) => ensure!(
                self,
                got == Err(RescheduleError::InFlight),
                "reschedule of in-flight id {id}: {got:?}"
            ),
            None => ensure!(
                self,
                got == Err(RescheduleError::NotFound),
                "reschedule of absent id {id}: {got:?}"
            ),
        }
    }

    pub(super) fn cancel(&mut self, id: u8) {
        let got = self.sched.cancel(&id);
        match self.ids.get(&id).copied() {
            Some(State::Pending(timer)) => {
                ensure!(
                    self,
                    got == Cancel::Cancelled(timer.value),
                    "cancel of pending id {id}: {got:?}"
                );
                self.ids.remove(&id);
                self.fate(timer.value, Fate::Pending, Fate::Returned);
            }
            Some(State::InFlight(_)) => {
                ensure!(
                    self,
                    got == Cancel::InFlight,
                    "cancel of in-flight id {id}: {got:?}"
                )
            }
            None => ensure!(
                self,
                got == Cancel::NotFound,
                "cancel of absent id {id}: {got:?}"
            ),
        }
    }

    pub(super) fn drain(&mut self, queue: u8) {
        let got = self.sched.drain_queue(&queue);
        let mut cancelled = Vec::new();
        let mut in_flight = Vec::new();
        for (&id, state) in &self.ids {
            match *state {
                State::Pending(t) if t.queue == queue => {
                    cancelled.push(((t.tick, t.seq), id, t.value))
                }
                State::InFlight(t) if t.queue == queue => in_flight.push(((t.tick, t.seq), id)),
                _ => {}
            }
        }
        cancelled.sort_unstable();
        in_flight.sort_unstable();
        let expected = Drained {
            cancelled: cancelled
                .iter()
                .map(|&(_, id, value)| (id, value))
                .collect(),
            in_flight: in_flight.iter().map(|&(_, id)| id).collect(),
        };
        ensure!(
            self,
            got == expected,
            "drain_queue({queue}) = {got:?}, model says {expected:?}"
        );
        for (_, id, value) in cancelled {
            self.ids.remove(&id);
            self.fate(value, Fate::Pending, Fate::Returned);
        }
    }

    /// `pop_due`, or with `only` `pop_due_queue` of that queue.
    pub(super) fn pop_due(&mut self, now: Instant, limit: usize) {
        self.pop_due_of(None, now, limit);
    }

    pub(super) fn pop_due_of(&mut self, only: Option<u8>, now: Instant, limit: usize) {
        let batch = match only {
            Some(queue) => self.sched.pop_due_queue(&queue, now, limit),
            None => self.sched.pop_due(now, limit),
        };
        let now_tick = self.now_tick(now);
        if let Some(tick) = now_tick {
            self.clock = self.clock.max(tick);
            if limit > 0 {
                let ns = now.saturating_duration_since(self.origin).as_nanos();
                self.seen = self.seen.max(ns);
            }
        }
        let mut due: Vec<((u64, u64), u8)> = match now_tick {
            Some(now_tick) if limit > 0 => self
                .ids
                .iter()
                .filter_map(|(&id, s)| match *s {
                    State::Pending(t)
                        if t.tick <= now_tick && only.is_none_or(|q| q == t.queue) =>
                    {
                        Some(((t.tick, t.seq), id))
                    }
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        due.sort_unstable();
        self.eligible(&mut due, now, limit);
        ensure!(
            self,
            batch.len() == due.len(),
            "pop_due(tick {now_tick:?}, {limit}) gave {} timers, model says {:?}",
            batch.len(),
            due
        );
        for &(_, id) in &due {
            let Some(State::Pending(timer)) = self.ids.get(&id).copied() else {
                unreachable!("due ids are pending");
            };
            self.ids.insert(id, State::InFlight(timer));
            self.fate(timer.value, Fate::Pending, Fate::InFlight);
            if self.records.contains(&timer.queue) {
                self.slotted.insert(id);
            }
        }
        let expected = due.into_iter().map(|(_, id)| id).collect();
        self.batches.push(OpenBatch {
            batch,
            now,
            expected,
        });
    }

    pub(super) fn take(&mut self, i: usize, n: usize) {
        for _ in 0..n {
            let open = &mut self.batches[i];
            let got = open.batch.next();
            let now = open.now;
            let Some(id) = open.expected.pop_front() else {
                ensure!(
                    self,
                    got.is_none(),
                    "batch {i} yields more than popped: {got:?}"
                );
                return;
            };
            let Some(due) = got else {
                panic!("{self:?}: batch {i} ended before id {id}");
            };
            let Some(State::InFlight(timer)) = self.ids.get(&id).copied() else {
                panic!("{self:?}: model has id {id} of batch {i} not in flight");
            };
            ensure!(
                self,
                (*due.id(), *due.queue(), due.deadline(), *due.value())
                    == (id, timer.queue, timer.at, timer.value),
                "batch {i} yielded {due:?}, model expects id {id} {timer:?}"
            );
            ensure!(
                self,
                due.deadline() <= now,
                "delivered early: {due:?} popped at {now:?}"
            );
            self.held.push((due, id));
        }
    }

    pub(super) fn drop_batch(&mut self, i: usize) {
        let open = self.batches.remove(i);
        drop(open.batch);
        for id in open.expected {
            let Some(State::InFlight(timer)) = self.ids.get(&id).copied() else {
                unreachable!("untaken ids are in flight");
            };
            self.ids.insert(id, State::Pending(timer));
            self.fate(timer.value, Fate::InFlight, Fate::Pending);
            self.slotted.remove(&id);
        }
    }

    pub(super) fn finish_due(&mut self, i: usize, consume: bool) {
        let (due, id) = self.held.remove(i);
        self.slotted.remove(&id);
        let Some(State::InFlight(timer)) = self.ids.remove(&id) else {
            panic!("{self:?}: finishing id {id}, which the model has not in flight");
        };
        if consume {
            let value = due.into_value();
            ensure!(
                self,
                value == timer.value,
                "into_value {value}, model has {timer:?}"
            );
        } else {
            drop(due);
        }
        self.fate(timer.value, Fate::InFlight, Fate::Delivered);
    }
}
