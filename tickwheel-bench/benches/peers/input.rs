//! The workloads' inputs, generated once from a fixed seed and shared by every peer.

use std::cell::RefCell;
use std::rc::Rc;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::workloads::Tally;
use super::{CHURN_CANCEL, CHURN_OPS_PER_TIMER, ROUND_TICKS, SPAN};

/// Everything the workloads need for `n` timers, generated once from a fixed seed and shared
/// by every peer.
pub struct Input {
    pub n: usize,
    /// Deadline of timer `i`, uniform in `1..=SPAN`.
    pub deadlines: Vec<u64>,
    /// A random permutation of `0..n`: the order of cancels and resets.
    pub order: Vec<u32>,
    /// Idle timeout of timer `i` in the reset-heavy workload, uniform in
    /// `ROUND_TICKS + 1..=SPAN`.
    pub idle: Vec<u64>,
    /// The churn script, built on first use (it is large).
    churn: RefCell<Option<Rc<Churn>>>,
}

impl Input {
    pub fn new(n: usize) -> Self {
        let mut rng = StdRng::seed_from_u64(0x71c4_e55e ^ n as u64);
        let deadlines = (0..n).map(|_| rng.gen_range(1..=SPAN)).collect();
        let mut order: Vec<u32> = (0..n as u32).collect();
        order.shuffle(&mut rng);
        let idle = (0..n)
            .map(|_| rng.gen_range(ROUND_TICKS + 1..=SPAN))
            .collect();
        Input {
            n,
            deadlines,
            order,
            idle,
            churn: RefCell::new(None),
        }
    }

    pub fn churn(&self) -> Rc<Churn> {
        self.churn
            .borrow_mut()
            .get_or_insert_with(|| Rc::new(Churn::new(self.n)))
            .clone()
    }

    /// The timers cancelled in workloads 2–4: the first half of `order`.
    pub(super) fn cancelled(&self) -> &[u32] {
        &self.order[..self.n / 2]
    }

    /// Whether timer `i` survives the cancel of workloads 2–4.
    pub(super) fn survivors(&self) -> Vec<bool> {
        let mut alive = vec![true; self.n];
        for &i in self.cancelled() {
            alive[i as usize] = false;
        }
        alive
    }
}

pub(super) const OP_INSERT: u64 = 0;
pub(super) const OP_CANCEL: u64 = 1 << 62;
pub(super) const OP_TICK: u64 = 2 << 62;
pub(super) const OP_TAG: u64 = 3 << 62;

/// The steady-churn script: `n` lanes, each holding one timer at a time. A timer's deadline is
/// uniform over the next `SPAN` ticks; with probability [`CHURN_CANCEL`] it is cancelled at a
/// uniform tick before its deadline, otherwise it fires. Either way its lane gets a new timer
/// at once (after a cancel) or on the next tick (after a fire). Every tick ends with a poll.
pub struct Churn {
    /// Ops, each one `u64`: tag in the top two bits, then a lane or a tick.
    pub ops: Vec<u64>,
    /// Deadlines of the inserts, in op order; the first `n` are the prefill.
    pub deadlines: Vec<u64>,
    /// Inserts (after the prefill) + cancels + fires the script performs.
    pub counted_ops: u64,
    pub expected: Tally,
    pub ticks: u64,
    /// Every expected fire as (tick of the poll that returns it, lane), in tick order: what
    /// a run stopped part-way is checked against.
    fires: Vec<(u64, u32)>,
}

impl Churn {
    fn new(n: usize) -> Self {
        let mut rng = StdRng::seed_from_u64(0xc4a7_c4a7 ^ n as u64);
        let mut plan = Plan {
            cancel_at: Vec::new(),
            refill_at: Vec::new(),
            deadlines: Vec::with_capacity(n * 6),
        };
        let mut ops = Vec::with_capacity(n * 11);
        for lane in 0..n as u32 {
            plan.schedule(lane, 0, &mut rng);
        }
        let target = CHURN_OPS_PER_TIMER * n as u64;
        let mut counted = 0u64;
        let mut expected = Tally::default();
        let mut fires = Vec::new();
        let mut tick = 0u64;
        while counted < target {
            tick += 1;
            let t = tick as usize;
            for lane in plan
                .cancel_at
                .get_mut(t)
                .map(std::mem::take)
                .unwrap_or_default()
            {
                ops.push(OP_CANCEL | lane as u64);
                expected.cancelled += 1;
                ops.push(OP_INSERT | lane as u64);
                plan.schedule(lane, tick, &mut rng);
                counted += 2;
            }
            for lane in plan
                .refill_at
                .get_mut(t)
                .map(std::mem::take)
                .unwrap_or_default()
            {
                expected.fire(lane as u64, tick - 1);
                fires.push((tick - 1, lane));
                ops.push(OP_INSERT | lane as u64);
                plan.schedule(lane, tick, &mut rng);
                counted += 2;
            }
            ops.push(OP_TICK | tick);
        }
        // Timers firing at the last tick are counted too: their refill is past the end.
        for &lane in plan
            .refill_at
            .get(tick as usize + 1)
            .map(Vec::as_slice)
            .unwrap_or(&[])
        {
            expected.fire(lane as u64, tick);
            fires.push((tick, lane));
            counted += 1;
        }
        Churn {
            ops,
            deadlines: plan.deadlines,
            counted_ops: counted,
            expected,
            ticks: tick,
            fires,
        }
    }

    /// What a run that did the first `done` ops, the last of them the poll at tick `last`,
    /// must have seen: the cancels among those ops, and the fires up to `last`.
    pub(super) fn expected_until(&self, done: usize, last: u64) -> Tally {
        let mut expected = Tally {
            cancelled: self.ops[..done]
                .iter()
                .filter(|&&op| op & OP_TAG == OP_CANCEL)
                .count() as u64,
            ..Tally::default()
        };
        for &(tick, lane) in self.fires.iter().take_while(|&&(tick, _)| tick <= last) {
            expected.fire(lane as u64, tick);
        }
        expected
    }
}

/// The churn script's future: which lanes end at which tick.
struct Plan {
    /// `cancel_at[t]`: lanes whose timer is cancelled at tick `t`.
    cancel_at: Vec<Vec<u32>>,
    /// `refill_at[t]`: lanes whose timer fired at tick `t - 1`.
    refill_at: Vec<Vec<u32>>,
    deadlines: Vec<u64>,
}

impl Plan {
    /// Gives `lane` a new timer at tick `now` and decides how it ends.
    fn schedule(&mut self, lane: u32, now: u64, rng: &mut StdRng) {
        let deadline = now + rng.gen_range(1..=SPAN);
        self.deadlines.push(deadline);
        let (bucket, at) = if deadline > now + 1 && rng.gen_bool(CHURN_CANCEL) {
            (&mut self.cancel_at, rng.gen_range(now + 1..deadline))
        } else {
            (&mut self.refill_at, deadline + 1)
        };
        let at = at as usize;
        if bucket.len() <= at {
            bucket.resize_with(at + 1, Vec::new);
        }
        bucket[at].push(lane);
    }
}
