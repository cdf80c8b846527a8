//! [`tickwheel::IndexedWheel`] against the reference model of `model.rs`, keyed by id.
//!
//! Ids are `u8`s drawn from a small range, so inserts keep colliding with pending ids
//! (a replacement: the old value comes back and the new timer counts as freshly inserted,
//! so it orders by insertion among equal deadlines) and with ids that just fired or were
//! cancelled. Same checks as for the core wheel, after every step: what fires and in what
//! order (under the documented rule), `len`, `elapsed`, `contains`/`deadline`/`get` of every
//! id ever used, `next_expiration`, and `stats()` within the memory bound.
//!
//! A sibling of `model.rs` (as `super::model`): in `tests/support/` for
//! `tests/indexed_model.rs`, included with `#[path]` by the fuzz crate.

use std::collections::BTreeSet;
use std::fmt;

use tickwheel::IndexedWheel;

use super::model::checks::{self, ensure, ensure_ok};
use super::model::{Model, OrderRule, When, resolve_when};

/// One step of an `IndexedWheel` sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IxOp {
    /// `insert(id, deadline, value)`: a new timer, or a replacement.
    Insert {
        id: u8,
        when: When,
    },
    Cancel(u8),
    Reset(u8, When),
    Poll(When),
    PollAll(When),
    PollInto {
        now: When,
        limit: u32,
        prefill: u8,
    },
    GetMut(u8),
    Clear,
    ShrinkToFit,
}

/// How many ids the generators mostly draw from (`0..COMMON_IDS`), so that they collide.
pub const COMMON_IDS: u8 = 6;

/// [`When::Same`] picks a deadline by id here: keep its picks among the common ids, the ones
/// in use.
pub fn same_id(when: When) -> When {
    match when {
        When::Same { pick, delta } => When::Same {
            pick: pick % u16::from(COMMON_IDS),
            delta,
        },
        other => other,
    }
}

/// Runs one `IndexedWheel` op sequence against the model; panics on the first difference.
pub struct IndexedHarness {
    pub wheel: IndexedWheel<u8, u64>,
    model: Model<u8>,
    rule: OrderRule,
    /// Last known deadline of each id, for [`When::Same`] (picked by id).
    last_deadline: [Option<u64>; 256],
    used: BTreeSet<u8>,
    horizon: u64,
    next_value: u64,
    step: usize,
    op: Option<IxOp>,
    /// Check `stats()` (it walks every slot) on every n-th step only; default 1.
    pub stats_stride: usize,
}

impl fmt::Debug for IndexedHarness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        checks::describe(f, self.step, &self.op, &self.model, &self.wheel)
    }
}

impl IndexedHarness {
    pub fn new(start: u64, rule: OrderRule) -> Self {
        IndexedHarness {
            wheel: IndexedWheel::starting_at(start),
            model: Model::new(start),
            rule,
            last_deadline: [None; 256],
            used: BTreeSet::new(),
            horizon: start,
            next_value: 0,
            step: 0,
            op: None,
            stats_stride: 1,
        }
    }

    /// Runs `ops` from `start`, checking after every step, then drains at `u64::MAX`.
    pub fn run(start: u64, ops: &[IxOp], rule: OrderRule) {
        Self::run_with(Self::new(start, rule), ops);
    }

    pub fn run_with(mut h: Self, ops: &[IxOp]) {
        h.check();
        for &op in ops {
            h.apply(op);
            h.check();
        }
        h.finish();
    }

    fn resolve(&self, when: When) -> u64 {
        resolve_when(when, self.model.elapsed, |pick| {
            self.last_deadline[usize::from(pick as u8)]
        })
    }

    pub fn apply(&mut self, op: IxOp) {
        self.step += 1;
        self.op = Some(op);
        match op {
            IxOp::Insert { id, when } => {
                let deadline = self.resolve(when);
                self.insert(id, deadline);
            }
            IxOp::Cancel(id) => {
                let expected = self.model.remove(id).map(|t| t.value);
                let got = self.wheel.cancel(&id);
                ensure!(
                    self,
                    got == expected,
                    "cancel({id}) = {got:?}, model says {expected:?}"
                );
            }
            IxOp::Reset(id, when) => {
                let deadline = self.resolve(when);
                let got = self.wheel.reset(&id, deadline);
                match self.model.remove(id) {
                    Some(old) => {
                        ensure!(self, got, "reset({id}, {deadline}) = false on a pending id");
                        self.model.insert(id, deadline, old.value, true);
                        self.last_deadline[usize::from(id)] = Some(deadline);
                    }
                    None => ensure!(self, !got, "reset({id}, {deadline}) = true on an absent id"),
                }
            }
            IxOp::Poll(when) => {
                let now = self.resolve(when);
                self.poll(now);
            }
            IxOp::PollAll(when) => {
                let now = self.resolve(when);
                let most = self.model.len() + 1;
                for _ in 0..most {
                    if !self.poll(now) {
                        return;
                    }
                }
                panic!("{self:?}: poll({now}) returned more timers than are pending");
            }
            IxOp::PollInto {
                now,
                limit,
                prefill,
            } => {
                let now = self.resolve(now);
                self.poll_into(now, checks::limit(limit), usize::from(prefill));
            }
            IxOp::GetMut(id) => {
                self.next_value += 1;
                let value = self.next_value;
                let got = self.wheel.get_mut(&id).map(|v| std::mem::replace(v, value));
                let expected = self.model.timers.get(&id).map(|t| t.value);
                ensure!(
                    self,
                    got == expected,
                    "get_mut({id}) = {got:?}, model has {expected:?}"
                );
                if let Some(t) = self.model.timers.get_mut(&id) {
                    t.value = value;
                }
            }
            IxOp::Clear => {
                self.wheel.clear();
                self.model.clear();
            }
            IxOp::ShrinkToFit => {
                self.wheel.shrink_to_fit();
                ensure_ok!(self, checks::check_shrunk(&self.wheel));
            }
        }
    }

    fn insert(&mut self, id: u8, deadline: u64) {
        self.next_value += 1;
        let value = self.next_value;
        let got = self.wheel.insert(id, deadline, value);
        let expected = self.model.remove(id).map(|t| t.value);
        ensure!(
            self,
            got == expected,
            "insert({id}) replaced {got:?}, model says {expected:?}"
        );
        self.model.insert(id, deadline, value, false);
        self.last_deadline[usize::from(id)] = Some(deadline);
        self.used.insert(id);
    }

    /// Checks one `(id, value)` a poll returned and takes it out of the model; returns its
    /// deadline.
    fn fired(&mut self, id: u8, value: u64, effective: u64) -> u64 {
        let checked = self
            .model
            .check_fired(id, None, value, effective, self.rule);
        ensure_ok!(self, checked);
        self.model.remove(id).expect("checked").deadline
    }

    fn poll(&mut self, now: u64) -> bool {
        let effective = self.model.elapsed.max(now);
        self.horizon = self.horizon.max(now);
        let fired = self
            .wheel
            .poll(now)
            .map(|(id, value)| self.fired(id, value, effective));
        let polled = self.model.after_poll(effective, fired);
        ensure_ok!(self, polled);
        fired.is_some()
    }

    fn poll_into(&mut self, now: u64, limit: usize, prefill: usize) {
        let effective = self.model.elapsed.max(now);
        self.horizon = self.horizon.max(now);
        let junk = (u8::MAX, u64::MAX);
        let mut out = vec![junk; prefill];
        let taken = self.wheel.poll_into(now, limit, &mut out);
        let out_ok = checks::check_poll_into_out(&out, &junk, prefill, taken, limit);
        ensure_ok!(self, out_ok);
        let mut last = None;
        for &(id, value) in &out[prefill..] {
            last = Some(self.fired(id, value, effective));
        }
        let polled = self.model.after_poll_into(effective, taken, limit, last);
        ensure_ok!(self, polled);
    }

    pub fn check(&self) {
        let w = &self.wheel;
        let live = self.model.len();
        ensure_ok!(self, checks::check_state(w, &self.model, self.horizon));
        for &id in &self.used {
            ensure_ok!(self, checks::check_key(w, &self.model, id));
        }
        let next = self.model.check_next_expiration(w.next_expiration());
        ensure_ok!(self, next);
        if self.op.is_none() || self.step.checked_rem(self.stats_stride) == Some(0) {
            ensure_ok!(self, checks::check_stats(w, live));
        }
    }

    fn finish(&mut self) {
        self.op = None;
        self.step += 1;
        self.poll_into(u64::MAX, usize::MAX, 0);
        ensure!(
            self,
            self.model.is_empty(),
            "timers left after draining at u64::MAX"
        );
        self.check();
    }
}
