//! Every observable checked against the model, and the exactly-once ledger at the end.

use super::*;

impl SchedHarness {
    /// Every observable against the model.
    pub fn check(&self) {
        let s = &self.sched;
        let pending: Vec<Timer> = self
            .ids
            .values()
            .filter_map(|s| match *s {
                State::Pending(t) => Some(t),
                State::InFlight(_) => None,
            })
            .collect();
        let in_flight = self.ids.len() - pending.len();
        ensure!(
            self,
            s.len() == pending.len(),
            "len {} != {}",
            s.len(),
            pending.len()
        );
        ensure!(self, s.is_empty() == pending.is_empty(), "is_empty");
        ensure!(
            self,
            s.in_flight_len() == in_flight,
            "in_flight_len {}",
            s.in_flight_len()
        );
        for queue in 0..QUEUES {
            let expected = pending.iter().filter(|t| t.queue == queue).count();
            ensure!(self, s.queue_len(&queue) == expected, "queue_len({queue})");
        }
        let expected = self.queue_order();
        let queues = s.queues();
        ensure!(
            self,
            queues == expected,
            "queues() = {queues:?}, model (by oldest current member) {expected:?}"
        );
        let earliest = pending.iter().map(|t| t.tick).min();
        let next = s.next_deadline();
        let flow = !self.holds.is_empty() || !self.records.is_empty();
        ensure!(
            self,
            flow || next.is_some() == earliest.is_some(),
            "next_deadline {next:?}"
        );
        if let (false, Some(next), Some(tick)) = (flow, next, earliest) {
            let bound = self.at_nanos(u128::from(tick) * self.res_ns());
            ensure!(
                self,
                bound.is_none_or(|bound| next <= bound),
                "next_deadline {next:?} later than the earliest pending tick {tick}"
            );
        }
        let stats = s.stats();
        ensure!(
            self,
            (stats.shards, stats.pending, stats.in_flight, stats.queues)
                == (self.shards, pending.len(), in_flight, expected.len()),
            "stats {stats:?}"
        );
        ensure!(
            self,
            stats.wheel.live + stats.due_waiting + stats.parked == stats.pending,
            "stats: wheel timers + due waiting + parked != pending: {stats:?}"
        );
        let bound = 2 * stats.wheel.live + self.shards * (8 * 704 + 16);
        ensure!(
            self,
            stats.wheel.stale <= bound,
            "stale references over {bound}: {stats:?}"
        );
    }

    /// Ends everything: drops open batches (untaken items go back), finishes held `Due`s,
    /// delivers what is left, and checks that every accepted value ended exactly once.
    pub fn finish(&mut self) {
        self.op = None;
        while !self.batches.is_empty() {
            self.drop_batch(self.batches.len() - 1);
        }
        while !self.held.is_empty() {
            self.finish_due(0, true);
        }
        self.check();
        // Every hold released and every limit lifted: nothing parked stays.
        for queue in 0..QUEUES {
            self.apply(SchedOp::Release(queue));
            self.set_limit(queue, None);
            self.apply(SchedOp::Rate {
                queue,
                interval: u8::MAX,
                burst: 0,
            });
        }
        self.op = None;
        self.check();
        // Deliver the rest; a deadline that saturated to u64::MAX never fires: drain it.
        let far = self.instant(At::Far { shift: 63 });
        self.pop_due(far, usize::MAX);
        let i = self.batches.len() - 1;
        self.take(i, usize::MAX);
        self.drop_batch(i);
        while !self.held.is_empty() {
            self.finish_due(0, false);
        }
        for queue in 0..QUEUES {
            self.drain(queue);
        }
        self.check();
        ensure!(
            self,
            self.ids.is_empty(),
            "ids left after the end: {:?}",
            self.ids
        );
        let open: Vec<_> = self
            .ledger
            .iter()
            .filter(|(_, f)| !matches!(f, Fate::Delivered | Fate::Returned))
            .collect();
        ensure!(self, open.is_empty(), "values that never ended: {open:?}");
    }
}
