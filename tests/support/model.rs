//! A reference model of [`tickwheel::Wheel`] and a harness that runs one op sequence
//! against both, checking the wheel against the model after every step.
//!
//! Shared by the proptest in `tests/wheel_model.rs` and by the fuzz crate (`fuzz/src/lib.rs`
//! includes this file with `#[path]`), so the two check exactly the same contracts.
//!
//! # The model
//!
//! A `BTreeMap<(deadline, seq), TimerKey>` of pending timers, where `seq` counts every insert
//! and every reset: a reset is modelled as a remove plus a fresh insert at the new deadline.
//! Beside it the model tracks `elapsed`, which it predicts exactly:
//!
//! - a poll at `now` may return exactly the timers with `deadline <= max(elapsed, now)`
//!   (a `now` behind `elapsed` is ignored, and deadlines at or before `elapsed` are already
//!   due, whatever `now` says);
//! - after a poll that returned everything due, `elapsed == max(elapsed, now)`;
//! - after a poll that stopped early (`poll` returning one timer, `poll_into` stopping at its
//!   `limit`), `elapsed == max(elapsed, deadline of the last timer returned)`: the wheel never
//!   processes a slot past the one that produced the timer it just returned.
//!
//! # Order, and the one place the model is relaxed
//!
//! The wheel promises deadline order, and insertion order among equal deadlines *for timers
//! that were never reset* (DESIGN.md, "Order"). Under [`OrderRule::FreshInsert`] the harness
//! demands more: a reset timer takes its place among equal deadlines as if freshly inserted
//! at the moment of the reset. The wheel does not do that: `Wheel::reset` to a later deadline
//! leaves the timer in the slot it was filed in (that is what makes it free), and the timer
//! joins the slot of its new deadline only when its old slot is processed, so it lands
//! among equal deadlines in the order of *that* refiling. Example: insert A at 5, reset A to
//! 10, insert C at 10; C goes straight into slot 10, A follows when slot 5 is processed, so C
//! fires before A, where a fresh insert would fire A first. (`tests/regressions.rs`,
//! `a_reset_timer_fires_at_its_new_deadline_and_never_reset_timers_keep_their_order`,
//! checks the documented contract on this sequence.)
//!
//! [`OrderRule::Documented`] therefore checks the documented contract and no less: every
//! timer comes out at the model's earliest deadline; a timer never reset comes out only when
//! no other never-reset timer with that deadline and an earlier insert is still pending; a
//! reset timer may come out anywhere among the timers of its deadline. Everything else (what
//! fires, when, how many, `len`, keys, `elapsed`) is checked exactly under both rules.
//!
//! # Checked after every step
//!
//! `len`/`is_empty`; `elapsed` equal to the model's and never past the largest `now` seen;
//! `contains`/`deadline`/`get` for every pending key and the most recent 64 issued keys
//! (stale ones included); a new key never equal to any key issued before; `next_expiration`
//! `None` iff empty, never later than the earliest deadline, after `elapsed` iff nothing is
//! due, and exactly the tick the earliest timer's slot is processed when no pending timer was
//! ever reset; `stats()` with `live == len` and `stale <= 2 * live + 8 * 704 + 16`; a reset to
//! a later deadline of a timer not yet due adds no stale reference and no memory;
//! `shrink_to_fit` leaves no stale reference. (`stats()` walks all 704 slots; the fuzz
//! targets set [`Harness::stats_stride`] to check it on every n-th step only, and always
//! after an [`Op::Churn`], the op that piles up stale references, and at the end.)
#![allow(dead_code)] // each includer uses a different part

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use tickwheel::{Expired, TimerKey, Wheel};

/// Slots in the wheel: 11 levels of 64.
pub const SLOTS_TOTAL: usize = 11 * 64;

/// The memory bound the wheel keeps on stale references.
pub fn stale_bound(live: usize) -> usize {
    2 * live + 8 * SLOTS_TOTAL + 16
}

/// How much order among equal deadlines the harness demands; see the module doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderRule {
    /// DESIGN.md's contract: insertion order among equal deadlines for never-reset timers.
    Documented,
    /// A reset orders like a fresh insert at the moment of the reset. The wheel does not
    /// promise this; see the module doc.
    FreshInsert,
}

/// `64^level`, saturating at `u64::MAX`.
pub fn pow64(level: u32) -> u64 {
    1u64.checked_shl(6 * level).unwrap_or(u64::MAX)
}

/// A tick, chosen relative to the wheel's state when the op runs, so that generated
/// sequences keep hitting interesting deadlines whatever `elapsed` has become.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// `elapsed + d` with `d` uniform in level `level`'s distance range `[64^L, 64^(L+1))`
    /// (level 0: `[1, 64)`), saturating at `u64::MAX`. Drawing the level first and then the
    /// distance hits every level equally often.
    Ahead { level: u8, offset: u64 },
    /// `elapsed - d` with `d` drawn as for `Ahead`, saturating at 0: the past.
    Behind { level: u8, offset: u64 },
    /// A level boundary: `64^k + delta` past `elapsed` or, if `aligned`, past the first
    /// multiple of `64^k` after `elapsed` (where slots of level `k` begin).
    Boundary { k: u8, delta: i8, aligned: bool },
    /// `u64::MAX - back`.
    Top { back: u8 },
    /// The last known deadline of an issued key, plus `delta`: equal deadlines, and polls
    /// exactly at (or one tick before) a deadline.
    Same { pick: u16, delta: i8 },
    /// `elapsed` itself.
    Elapsed,
    /// Exactly this tick.
    Abs(u64),
}

/// Which key an op uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyPick {
    /// An issued key (pending or stale), by position in issue order, modulo their count.
    Issued(u16),
    /// An issued key with its generation moved by `dgen`: stale, or naming whatever timer has
    /// that index and generation now (a foreign key that happens to match).
    Skewed { pick: u16, dgen: i8 },
    /// A key built from raw parts.
    Raw { index: u32, generation: u32 },
}

/// One step of a sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Insert(When),
    Cancel(KeyPick),
    Reset(KeyPick, When),
    /// One `poll(now)`.
    Poll(When),
    /// `poll(now)` until it returns `None`.
    PollAll(When),
    /// `poll_into(now, limit, out)` with `prefill` timers' worth of junk already in `out`.
    PollInto {
        now: When,
        limit: u32,
        prefill: u8,
    },
    /// `get_mut` and overwrite the value.
    GetMut(KeyPick),
    /// `times` rounds (at most [`MAX_CHURN`]) of: insert a timer at `Ahead { level, .. }`,
    /// reset one of the last `window + 1` churned timers to another such deadline (often
    /// earlier, which leaves a stale reference), and cancel the oldest of them once there are
    /// more. Keeps the live count steady while stale references pile up, which single ops
    /// never do enough of to reach the memory bound or to make slots compact.
    Churn {
        times: u16,
        level: u8,
        window: u8,
    },
    Clear,
    ShrinkToFit,
}

/// Most rounds one [`Op::Churn`] runs.
pub const MAX_CHURN: u16 = 512;

/// A pending timer in the model.
#[derive(Debug, Clone, Copy)]
pub struct Timer {
    pub deadline: u64,
    pub seq: u64,
    pub value: u64,
    /// Reset at least once: its place among equal deadlines is not promised.
    pub reset: bool,
}

/// The reference model: pending timers in `(deadline, seq)` order, by any key type (the core
/// wheel's `TimerKey`, `IndexedWheel`'s ids), and the `elapsed` it predicts.
#[derive(Debug)]
pub struct Model<K> {
    pub queue: BTreeMap<(u64, u64), K>,
    pub timers: BTreeMap<K, Timer>,
    pub seq: u64,
    pub elapsed: u64,
}

impl<K: Ord + Copy + fmt::Debug> Model<K> {
    pub fn new(elapsed: u64) -> Self {
        Model {
            queue: BTreeMap::new(),
            timers: BTreeMap::new(),
            seq: 0,
            elapsed,
        }
    }

    /// Adds a timer with the next `seq`: a fresh insert, or (`reset`) the second half of a
    /// reset modelled as remove + insert.
    pub fn insert(&mut self, key: K, deadline: u64, value: u64, reset: bool) {
        self.seq += 1;
        let timer = Timer {
            deadline,
            seq: self.seq,
            value,
            reset,
        };
        self.queue.insert((deadline, timer.seq), key);
        self.timers.insert(key, timer);
    }

    pub fn remove(&mut self, key: K) -> Option<Timer> {
        let timer = self.timers.remove(&key)?;
        self.queue.remove(&(timer.deadline, timer.seq));
        Some(timer)
    }

    pub fn clear(&mut self) {
        self.queue.clear();
        self.timers.clear();
    }

    pub fn len(&self) -> usize {
        self.timers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.timers.is_empty()
    }

    pub fn earliest(&self) -> Option<(u64, K)> {
        self.queue.first_key_value().map(|(&(d, _), &k)| (d, k))
    }

    pub fn any_reset(&self) -> bool {
        self.timers.values().any(|t| t.reset)
    }

    /// Whether a poll may return `key` (due `deadline`, carrying `value`) next, at an
    /// effective now of `effective`: never early, in deadline order, and among equal
    /// deadlines as `rule` demands. Does not take it out.
    pub fn check_fired(
        &self,
        key: K,
        deadline: Option<u64>,
        value: u64,
        effective: u64,
        rule: OrderRule,
    ) -> Result<(), String> {
        let Some(&timer) = self.timers.get(&key) else {
            return Err(format!("fired {key:?}, which is not pending in the model"));
        };
        if timer.deadline > effective {
            return Err(format!(
                "fired early: {key:?} due {} at now {effective}",
                timer.deadline
            ));
        }
        if deadline.is_some_and(|d| d != timer.deadline) || value != timer.value {
            return Err(format!(
                "fired {key:?} with deadline {deadline:?} value {value}, model has {timer:?}"
            ));
        }
        let (first_deadline, first_key) = self.earliest().expect("the model holds key");
        if timer.deadline != first_deadline {
            return Err(format!(
                "deadline order: fired {key:?} due {} while {first_key:?} due {first_deadline} \
                 is pending",
                timer.deadline
            ));
        }
        match rule {
            OrderRule::FreshInsert if key != first_key => Err(format!(
                "order among equal deadlines {first_deadline}: fired {key:?} before {first_key:?}"
            )),
            OrderRule::Documented if !timer.reset => {
                let earlier = (first_deadline, 0)..(first_deadline, timer.seq);
                match self
                    .queue
                    .range(earlier)
                    .find(|(_, other)| !self.timers[other].reset)
                {
                    Some((_, other)) => Err(format!(
                        "insertion order: {key:?} fired before {other:?}, inserted earlier, \
                         same deadline {first_deadline}, neither reset"
                    )),
                    None => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }

    /// Whether `next` is a right answer of `next_expiration`: `None` iff empty; never later
    /// than the earliest deadline; at or before `elapsed` iff something is due; and, when no
    /// pending timer was ever reset, exactly the tick the earliest timer's slot is processed
    /// (so cancelled timers do not hold it early).
    pub fn check_next_expiration(&self, next: Option<u64>) -> Result<(), String> {
        let elapsed = self.elapsed;
        let (earliest, key) = match (self.earliest(), next) {
            (None, None) => return Ok(()),
            (None, Some(next)) => return Err(format!("next_expiration {next} on an empty wheel")),
            (Some((d, key)), None) => {
                return Err(format!("next_expiration None with {key:?} pending at {d}"));
            }
            (Some(earliest), Some(_)) => earliest,
        };
        let next = next.expect("matched above");
        if next > earliest {
            return Err(format!(
                "next_expiration {next} later than {key:?} due {earliest}"
            ));
        }
        if earliest <= elapsed {
            if next > elapsed {
                return Err(format!(
                    "next_expiration {next} after elapsed with {key:?} due"
                ));
            }
            return Ok(());
        }
        if next <= elapsed {
            return Err(format!(
                "next_expiration {next} not after elapsed; nothing is due"
            ));
        }
        let expected = cascade_tick(elapsed, earliest);
        if !self.any_reset() && next != expected {
            return Err(format!(
                "next_expiration {next}, expected {expected}: the tick {key:?} due {earliest} \
                 is processed (only cancelled timers are earlier)"
            ));
        }
        Ok(())
    }

    /// Whether a poll may answer "nothing (more) due" at an effective now of `effective`.
    pub fn check_nothing_due(&self, effective: u64, what: &str) -> Result<(), String> {
        match self.earliest() {
            Some((deadline, key)) if deadline <= effective => Err(format!(
                "skipped: {what} at effective now {effective} left {key:?} due {deadline} pending"
            )),
            _ => Ok(()),
        }
    }
}

/// The tick a [`When`] names, given `elapsed` and, for [`When::Same`], the last known
/// deadline of the picked timer (`None`: nothing to pick, use `elapsed`).
pub fn resolve_when(when: When, elapsed: u64, same: impl Fn(u16) -> Option<u64>) -> u64 {
    let distance = |level: u8, offset: u64| {
        let level = u32::from(level % 11);
        let lo = pow64(level);
        let hi = if level == 10 {
            u64::MAX
        } else {
            pow64(level + 1)
        };
        lo + offset % (hi - lo)
    };
    match when {
        When::Ahead { level, offset } => elapsed.saturating_add(distance(level, offset)),
        When::Behind { level, offset } => elapsed.saturating_sub(distance(level, offset)),
        When::Boundary { k, delta, aligned } => {
            let k = u32::from(k % 10) + 1;
            let base = if aligned {
                let shift = 6 * k;
                ((elapsed >> shift) + 1)
                    .checked_shl(shift)
                    .unwrap_or(u64::MAX)
            } else {
                elapsed.saturating_add(pow64(k))
            };
            base.saturating_add_signed(i64::from(delta.signum()))
        }
        When::Top { back } => u64::MAX - u64::from(back % 4),
        When::Same { pick, delta } => match same(pick) {
            Some(deadline) => deadline.saturating_add_signed(i64::from(delta.signum())),
            None => elapsed,
        },
        When::Elapsed => elapsed,
        When::Abs(tick) => tick,
    }
}

/// The tick at which the slot holding a timer due at `deadline` (filed while the wheel
/// stood at `elapsed < deadline`) is processed: the deadline with every digit below the
/// highest one where it differs from `elapsed` cleared.
pub fn cascade_tick(elapsed: u64, deadline: u64) -> u64 {
    let level = (((elapsed ^ deadline) | 63).ilog2() / 6) as u64;
    deadline & !((1u64 << (6 * level)) - 1)
}

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
        write!(
            f,
            "step {} op {:?}: model elapsed {} len {} earliest {:?}; wheel elapsed {} len {}",
            self.step,
            self.op,
            self.model.elapsed,
            self.model.timers.len(),
            self.model.earliest(),
            self.wheel.elapsed(),
            self.wheel.len()
        )
    }
}

macro_rules! ensure {
    ($h:expr, $cond:expr, $($fmt:tt)+) => {
        if !$cond {
            panic!("{:?}: {}", $h, format!($($fmt)+));
        }
    };
}

impl Harness {
    /// A fresh wheel started at `start` (`Wheel::starting_at`), and an empty model.
    pub fn new(start: u64, rule: OrderRule) -> Self {
        Harness {
            wheel: Wheel::starting_at(start),
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
                let limit = if limit == u32::MAX {
                    usize::MAX
                } else {
                    limit as usize
                };
                self.poll_into(now, limit, prefill as usize);
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
                let stats = self.wheel.stats();
                ensure!(
                    self,
                    stats.stale == 0,
                    "stale references after shrink_to_fit: {stats:?}"
                );
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
        if let Err(why) = checked {
            panic!("{self:?}: {why}");
        }
        self.model.remove(e.key);
    }

    fn expect_nothing_due(&self, effective: u64, what: &str) {
        if let Err(why) = self.model.check_nothing_due(effective, what) {
            panic!("{self:?}: {why}");
        }
    }

    pub fn poll(&mut self, now: u64) -> bool {
        let effective = self.model.elapsed.max(now);
        self.horizon = self.horizon.max(now);
        match self.wheel.poll(now) {
            Some(e) => {
                self.fired(&e, effective);
                self.model.elapsed = self.model.elapsed.max(e.deadline);
                true
            }
            None => {
                self.expect_nothing_due(effective, "poll returned None");
                self.model.elapsed = effective;
                false
            }
        }
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
        ensure!(
            self,
            taken <= limit,
            "poll_into took {taken} > limit {limit}"
        );
        ensure!(
            self,
            out.len() == prefill + taken,
            "poll_into said {taken} but out grew from {prefill} to {}",
            out.len()
        );
        ensure!(
            self,
            out[..prefill].iter().all(|e| *e == junk),
            "poll_into touched what was in out"
        );
        for e in &out[prefill..] {
            self.fired(e, effective);
        }
        if taken < limit {
            self.expect_nothing_due(effective, "poll_into stopped below its limit");
            self.model.elapsed = effective;
        } else if let Some(last) = out.last().filter(|_| taken > 0) {
            self.model.elapsed = self.model.elapsed.max(last.deadline);
        }
    }

    /// Checks every observable against the model.
    pub fn check(&self) {
        let w = &self.wheel;
        let live = self.model.timers.len();
        ensure!(self, w.len() == live, "len");
        ensure!(self, w.is_empty() == (live == 0), "is_empty");
        ensure!(
            self,
            w.elapsed() == self.model.elapsed,
            "elapsed differs from the model's"
        );
        ensure!(
            self,
            w.elapsed() <= self.horizon,
            "elapsed past the largest now {}",
            self.horizon
        );
        ensure!(
            self,
            w.capacity() >= live,
            "capacity {} < len",
            w.capacity()
        );
        let churned = matches!(self.op, Some(Op::Churn { .. }) | None);
        if self.stats_turn() || churned {
            let stats = w.stats();
            ensure!(self, stats.live == live, "stats.live {stats:?}");
            ensure!(
                self,
                stats.stale <= stale_bound(live),
                "stale references over the bound {}: {stats:?}",
                stale_bound(live)
            );
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
        for (key, _) in self.issued.iter().rev().take(64) {
            let expected = self.model.timers.get(key);
            ensure!(
                self,
                w.contains(*key) == expected.is_some(),
                "contains({key:?})"
            );
            ensure!(
                self,
                w.deadline(*key) == expected.map(|t| t.deadline),
                "deadline({key:?})"
            );
            ensure!(
                self,
                w.get(*key) == expected.map(|t| &t.value),
                "get({key:?})"
            );
        }
        self.check_next_expiration();
    }

    fn check_next_expiration(&self) {
        if let Err(why) = self
            .model
            .check_next_expiration(self.wheel.next_expiration())
        {
            panic!("{self:?}: {why}");
        }
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
