//! A reference model of [`tickwheel::Wheel`] and a harness that runs one op sequence
//! against both, checking the wheel against the model after every step.
//!
//! Shared by the proptest in `tests/wheel_model.rs` (through `tests/support/mod.rs`) and by
//! the fuzz crate (`fuzz/src/lib.rs` includes this file with `#[path]`), so the two check
//! exactly the same contracts.
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
//! that were never reset* (docs/design.md, "Order"). Under [`OrderRule::FreshInsert`] the harness
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

use std::collections::BTreeMap;
use std::fmt;

// Children by explicit path, relative to this file, so that whoever includes this file with
// `#[path]` gets them too and needs no change.
#[path = "model/checks.rs"]
pub mod checks;
#[path = "model/ops.rs"]
mod ops;
#[path = "model/wheel_harness.rs"]
mod wheel_harness;

// As for dead code: each includer uses a different part.
#[allow(unused_imports)]
pub use ops::{KeyPick, MAX_CHURN, Op, When, pow64, resolve_when};
#[allow(unused_imports)]
pub use wheel_harness::Harness;

/// Slots in the wheel: 11 levels of 64.
pub const SLOTS_TOTAL: usize = 11 * 64;

/// The memory bound the wheel keeps on stale references.
pub fn stale_bound(live: usize) -> usize {
    2 * live + 8 * SLOTS_TOTAL + 16
}

/// How much order among equal deadlines the harness demands; see the module doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderRule {
    /// docs/design.md's contract: insertion order among equal deadlines for never-reset timers.
    Documented,
    /// A reset orders like a fresh insert at the moment of the reset. The wheel does not
    /// promise this; see the module doc.
    FreshInsert,
}

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

    /// Moves `elapsed` as a `poll` at an effective now of `effective` does: to the deadline
    /// of the timer it returned (`fired`), or, when it returned none (which needs nothing
    /// due), to `effective`.
    pub fn after_poll(&mut self, effective: u64, fired: Option<u64>) -> Result<(), String> {
        match fired {
            Some(deadline) => self.elapsed = self.elapsed.max(deadline),
            None => {
                self.check_nothing_due(effective, "poll returned None")?;
                self.elapsed = effective;
            }
        }
        Ok(())
    }

    /// Moves `elapsed` as a `poll_into` that took `taken` timers under `limit` does: below its
    /// limit it stopped because nothing is due, so to `effective`; at its limit, to the
    /// deadline of the last timer it returned (`last`).
    pub fn after_poll_into(
        &mut self,
        effective: u64,
        taken: usize,
        limit: usize,
        last: Option<u64>,
    ) -> Result<(), String> {
        if taken < limit {
            self.check_nothing_due(effective, "poll_into stopped below its limit")?;
            self.elapsed = effective;
        } else if let Some(last) = last {
            self.elapsed = self.elapsed.max(last);
        }
        Ok(())
    }
}

/// The tick at which the slot holding a timer due at `deadline` (filed while the wheel
/// stood at `elapsed < deadline`) is processed: the deadline with every digit below the
/// highest one where it differs from `elapsed` cleared.
pub fn cascade_tick(elapsed: u64, deadline: u64) -> u64 {
    let level = (((elapsed ^ deadline) | 63).ilog2() / 6) as u64;
    deadline & !((1u64 << (6 * level)) - 1)
}
