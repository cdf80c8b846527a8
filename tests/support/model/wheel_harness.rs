//! [`Harness`]: one op sequence against a [`Wheel`] and the model, checked after every step.

use std::collections::BTreeSet;
use std::fmt;

use tickwheel::{Expired, TimerKey, Wheel};

use super::checks::{self, ensure, ensure_ok};
use super::{KeyPick, MAX_CHURN, Model, Op, OrderRule, When, resolve_when};

/// The capacity hint of the wheels built with spare slot vectors: 64 of them, more than the
/// slots a sequence fills.
const SPARES_HINT: usize = 2048;

/// Runs one op sequence against a [`Wheel`] and the model; panics (with the step, the op and
/// the state) on the first difference.
pub struct Harness {
    pub wheel: Wheel<u64>,
    model: Model<TimerKey>,
    rule: OrderRule,
    /// Every key issued, with its last known deadline (for [`When::Same`]).
    issued: Vec<(TimerKey, u64)>,
    issued_set: BTreeSet<TimerKey>,
    /// The largest `now` (or starting tick) seen: nothing may fire after it.
    horizon: u64,
    next_value: u64,
    step: usize,
    op: Option<Op>,
    /// `stats()` walks every slot, which dominates a fuzz run; the fuzz targets check it every
    /// `stats_stride` steps (and after every churn and at the end). Default 1: every step.
    pub stats_stride: usize,
    stats_turn_counter: std::cell::Cell<usize>,
}

impl fmt::Debug for Harness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        checks::describe(f, self.step, &self.op, &self.model, &self.wheel)
    }
}

impl Harness {
    /// A fresh wheel started at `start`, and an empty model. An odd `start` builds the wheel
    /// with `Wheel::starting_at`; an even one with `Wheel::with_capacity` (so its slots take
    /// the spare vectors made up front) and an empty poll to `start`.
    pub fn new(start: u64, rule: OrderRule) -> Self {
        let wheel = if start % 2 == 1 {
            Wheel::starting_at(start)
        } else {
            let mut wheel = Wheel::with_capacity(SPARES_HINT);
            assert!(wheel.poll(start).is_none(), "an empty wheel fires nothing");
            wheel
        };
        Harness {
            wheel,
            model: Model::new(start),
            rule,
            issued: Vec::new(),
            issued_set: BTreeSet::new(),
            horizon: start,
            next_value: 0,
            step: 0,
            op: None,
            stats_stride: 1,
            stats_turn_counter: std::cell::Cell::new(0),
        }
    }

    /// Runs `ops` from `start`, checking after every step, then drains the wheel at
    /// `u64::MAX` and checks that exactly the model's remaining timers come out.
    pub fn run(start: u64, ops: &[Op], rule: OrderRule) {
        Harness::run_with(Harness::new(start, rule), ops);
    }

    /// [`Harness::run`] on a harness set up by the caller.
    pub fn run_with(mut h: Harness, ops: &[Op]) {
        h.check();
        for op in ops {
            h.apply(*op);
            h.check();
        }
        h.finish();
    }

    /// Pending timers in the model.
    pub fn len(&self) -> usize {
        self.model.timers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.model.timers.is_empty()
    }

    /// Applies one op to both sides and checks its direct results.
    pub fn apply(&mut self, op: Op) {
        self.step += 1;
        self.op = Some(op);
        match op {
            Op::Insert(when) => {
                let deadline = self.resolve(when);
                self.insert(deadline);
            }
            Op::Cancel(pick) => self.cancel(pick),
            Op::Reset(pick, when) => {
                let deadline = self.resolve(when);
                self.reset(pick, deadline);
            }
            Op::Poll(when) => {
                let now = self.resolve(when);
                self.poll(now);
            }
            Op::PollAll(when) => {
                let now = self.resolve(when);
                self.poll_all(now);
            }
            Op::PollInto {
                now,
                limit,
                prefill,
            } => {
                let now = self.resolve(now);
                self.poll_into(now, checks::limit(limit), prefill as usize);
            }
            Op::GetMut(pick) => self.get_mut(pick),
            Op::Churn {
                times,
                level,
                window,
            } => self.churn(times, level, window),
            Op::Clear => {
                self.wheel.clear();
                self.model.clear();
            }
            Op::ShrinkToFit => {
                self.wheel.shrink_to_fit();
                ensure_ok!(self, checks::check_shrunk(&self.wheel));
            }
        }
    }

    /// The tick a [`When`] names now.
    pub fn resolve(&self, when: When) -> u64 {
        resolve_when(when, self.model.elapsed, |pick| {
            self.pick_issued(pick).map(|(_, d)| d)
        })
    }

    fn pick_issued(&self, pick: u16) -> Option<(TimerKey, u64)> {
        if self.issued.is_empty() {
            return None;
        }
        Some(self.issued[pick as usize % self.issued.len()])
    }

    /// The key a [`KeyPick`] names now.
    pub fn key(&self, pick: KeyPick) -> TimerKey {
        match pick {
            KeyPick::Issued(i) => self
                .pick_issued(i)
                .map_or(TimerKey::from_raw_parts(0, 0), |(k, _)| k),
            KeyPick::Skewed { pick, dgen } => {
                let key = self
                    .pick_issued(pick)
                    .map_or(TimerKey::from_raw_parts(0, 0), |(k, _)| k);
                TimerKey::from_raw_parts(
                    key.index(),
                    key.generation().wrapping_add_signed(i32::from(dgen)),
                )
            }
            KeyPick::Raw { index, generation } => TimerKey::from_raw_parts(index, generation),
        }
    }

    fn note_deadline(&mut self, key: TimerKey, deadline: u64) {
        // Keys are few and recent ones are picked most; a linear search from the end is fine.
        if let Some(entry) = self.issued.iter_mut().rev().find(|(k, _)| *k == key) {
            entry.1 = deadline;
        }
    }

    pub fn insert(&mut self, deadline: u64) -> TimerKey {
        self.next_value += 1;
        let value = self.next_value;
        let key = self.wheel.insert(deadline, value);
        ensure!(
            self,
            self.issued_set.insert(key),
            "insert returned {key:?}, a key issued before: a stale key would alias the new timer"
        );
        self.issued.push((key, deadline));
        self.model.insert(key, deadline, value, false);
        key
    }

    pub fn cancel(&mut self, pick: KeyPick) {
        let key = self.key(pick);
        let expected = self.model.remove(key).map(|t| t.value);
        let got = self.wheel.cancel(key);
        ensure!(
            self,
            got == expected,
            "cancel({key:?}) = {got:?}, model says {expected:?}"
        );
    }

    pub fn reset(&mut self, pick: KeyPick, deadline: u64) {
        let key = self.key(pick);
        let elapsed = self.model.elapsed;
        // A timer not yet due, moved later: stays in its slot, no garbage, no allocation.
        let later = self
            .model
            .timers
            .get(&key)
            .is_some_and(|t| t.deadline > elapsed && deadline >= t.deadline);
        let before = (later && self.stats_turn()).then(|| self.wheel.stats());
        let got = self.wheel.reset(key, deadline);
        let Some(old) = self.model.remove(key) else {
            ensure!(
                self,
                !got,
                "reset({key:?}, {deadline}) = true on a key the model says is stale"
            );
            return;
        };
        ensure!(
            self,
            got,
            "reset({key:?}, {deadline}) = false on a pending timer"
        );
        self.model.insert(key, deadline, old.value, true);
        self.note_deadline(key, deadline);
        if let Some(before) = before {
            let after = self.wheel.stats();
            ensure!(
                self,
                after == before,
                "reset later ({} -> {deadline}) changed stats: {before:?} -> {after:?}",
                old.deadline
            );
        }
    }

    fn get_mut(&mut self, pick: KeyPick) {
        let key = self.key(pick);
        self.next_value += 1;
        let value = self.next_value;
        let got = self.wheel.get_mut(key).map(|v| std::mem::replace(v, value));
        let expected = self.model.timers.get(&key).map(|t| t.value);
        ensure!(
            self,
            got == expected,
            "get_mut({key:?}) = {got:?}, model has {expected:?}"
        );
        if let Some(t) = self.model.timers.get_mut(&key) {
            t.value = value;
        }
    }

    /// Whether this check gets `stats()`: every time, or every `stats_stride`-th time.
    fn stats_turn(&self) -> bool {
        self.stats_stride <= 1 || {
            let turn = self.stats_turn_counter.get();
            self.stats_turn_counter.set(turn.wrapping_add(1));
            turn.checked_rem(self.stats_stride) == Some(0)
        }
    }

    fn churn(&mut self, times: u16, level: u8, window: u8) {
        let window = usize::from(window % 64) + 1;
        let mut ring = std::collections::VecDeque::new();
        let mut x = (self.step as u64) ^ 0x9e37_79b9_7f4a_7c15;
        for _ in 0..times.min(MAX_CHURN) {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let deadline = self.resolve(When::Ahead {
                level,
                offset: x >> 8,
            });
            ring.push_back(self.insert(deadline));
            let victim = ring[(x >> 40) as usize % ring.len()];
            let deadline = self.resolve(When::Ahead {
                level,
                offset: x >> 20,
            });
            self.reset(
                KeyPick::Raw {
                    index: victim.index(),
                    generation: victim.generation(),
                },
                deadline,
            );
            if ring.len() > window {
                let oldest = ring.pop_front().expect("ring is not empty");
                self.cancel(KeyPick::Raw {
                    index: oldest.index(),
                    generation: oldest.generation(),
                });
            }
        }
    }

    /// Checks one timer the wheel returned against the model and takes it out of the model.
    fn fired(&mut self, e: &Expired<u64>, effective: u64) {
        let checked =
            self.model
                .check_fired(e.key, Some(e.deadline), e.value, effective, self.rule);
        ensure_ok!(self, checked);
        self.model.remove(e.key);
    }

    pub fn poll(&mut self, now: u64) -> bool {
        let effective = self.model.elapsed.max(now);
        self.horizon = self.horizon.max(now);
        let fired = self.wheel.poll(now);
        if let Some(e) = &fired {
            self.fired(e, effective);
        }
        let polled = self
            .model
            .after_poll(effective, fired.as_ref().map(|e| e.deadline));
        ensure_ok!(self, polled);
        fired.is_some()
    }

    pub fn poll_all(&mut self, now: u64) {
        let most = self.model.timers.len() + 1;
        for _ in 0..most {
            if !self.poll(now) {
                return;
            }
        }
        panic!("{self:?}: poll({now}) returned more timers than are pending");
    }

    pub fn poll_into(&mut self, now: u64, limit: usize, prefill: usize) {
        let effective = self.model.elapsed.max(now);
        self.horizon = self.horizon.max(now);
        let junk = Expired {
            key: TimerKey::from_raw_parts(u32::MAX, 0),
            deadline: 0,
            value: 0,
        };
        let mut out = vec![junk.clone(); prefill];
        let taken = self.wheel.poll_into(now, limit, &mut out);
        let out_ok = checks::check_poll_into_out(&out, &junk, prefill, taken, limit);
        ensure_ok!(self, out_ok);
        for e in &out[prefill..] {
            self.fired(e, effective);
        }
        let last = out[prefill..].last().map(|e| e.deadline);
        let polled = self.model.after_poll_into(effective, taken, limit, last);
        ensure_ok!(self, polled);
    }

    /// Checks every observable against the model.
    pub fn check(&self) {
        let w = &self.wheel;
        let live = self.model.timers.len();
        ensure_ok!(self, checks::check_state(w, &self.model, self.horizon));
        ensure!(
            self,
            w.capacity() >= live,
            "capacity {} < len",
            w.capacity()
        );
        let churned = matches!(self.op, Some(Op::Churn { .. }) | None);
        if self.stats_turn() || churned {
            ensure_ok!(self, checks::check_stats(w, live));
        }
        for (key, timer) in &self.model.timers {
            ensure!(
                self,
                w.contains(*key),
                "contains({key:?}) on a pending timer"
            );
            ensure!(
                self,
                w.deadline(*key) == Some(timer.deadline),
                "deadline({key:?})"
            );
            ensure!(self, w.get(*key) == Some(&timer.value), "get({key:?})");
        }
        for &(key, _) in self.issued.iter().rev().take(64) {
            ensure_ok!(self, checks::check_key(w, &self.model, key));
        }
        let next = self.model.check_next_expiration(w.next_expiration());
        ensure_ok!(self, next);
        // `peek` names the earliest timer, one a poll may return next (by the order rule).
        let peeked = match (w.peek(), self.model.earliest()) {
            (None, None) => Ok(()),
            (Some((key, deadline)), Some(_)) => {
                let value = self.model.timers.get(&key).map_or(u64::MAX, |t| t.value);
                let effective = deadline.max(self.model.elapsed);
                self.model
                    .check_fired(key, Some(deadline), value, effective, self.rule)
                    .map_err(|e| format!("peek: {e}"))
            }
            (peeked, earliest) => Err(format!("peek {peeked:?} with earliest {earliest:?}")),
        };
        ensure_ok!(self, peeked);
    }

    /// Drains everything at `u64::MAX` and checks the model is drained with it.
    pub fn finish(&mut self) {
        self.op = None;
        self.step += 1;
        self.poll_into(u64::MAX, usize::MAX, 0);
        ensure!(
            self,
            self.model.timers.is_empty(),
            "timers left after draining at u64::MAX"
        );
        self.check();
    }
}
