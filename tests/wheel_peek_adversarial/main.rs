//! Adversarial tests of `Wheel::peek` (and of what is built on it: `TimerWheel::next_deadline`
//! near the top of the tick range, and the drop-in `tokio::DelayQueue::peek`). In a level-2
//! slot `peek` skips the references whose carried (filed) deadline is past the best found so
//! far; these tests attack that.
//!
//! This file holds the model and the deadlines chosen around level-2 slots; `random.rs` the
//! random operation sequences, `scenarios.rs` the deterministic ones, `delay_queue.rs` the
//! drop-in's.
//!
//! Every answer is compared with a brute-force model: the minimum deadline; among timers with
//! that deadline that were never reset, the first inserted (when none of the tied timers was
//! reset); otherwise any of the tied ones. Scenarios: resets later / earlier / within the
//! slot / to the past / to `u64::MAX` while a level-2 slot is the earliest, slots part-way
//! through becoming the due queue's sorted run (`poll_into` with small limits), wheels started
//! near 2^30, 2^32, 2^36, 2^63 and `u64::MAX`, stale keys and many cancels, equal deadlines,
//! `shrink_to_fit`, and a poll right after each peek (the peeked timer must come out first).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use tickwheel::{Expired, TimerKey, TimerWheel, Wheel};

// ---------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------

/// Peeks checked, by where the earliest timer was due: at or before `elapsed` (index 0), or
/// the level its deadline files into from `elapsed` (1 + level). Printed by the tests when
/// `PEEK_STATS` is set; it shows how often a level-2 slot was the one searched.
static BY_LEVEL: [AtomicU64; 12] = [const { AtomicU64::new(0) }; 12];

fn level_of(elapsed: u64, deadline: u64) -> usize {
    if deadline <= elapsed {
        return 0;
    }
    let masked = (elapsed ^ deadline) | 63;
    1 + (63 - masked.leading_zeros() as usize) / 6
}

fn print_stats(test: &str) {
    if std::env::var_os("PEEK_STATS").is_some() {
        let counts: Vec<u64> = BY_LEVEL.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        eprintln!("{test}: peeks by the earliest timer's place [due, L0, L1, L2, ...]: {counts:?}");
    }
}

#[derive(Clone, Copy, Debug)]
struct Timer {
    deadline: u64,
    seq: u64,
    reset: bool,
}

/// The wheel beside a brute-force model of its pending timers. Each timer's value is the
/// sequence number of its insertion (never changed by a reset).
struct Harness {
    wheel: Wheel<u64>,
    by_key: HashMap<TimerKey, Timer>,
    /// (deadline, seq) of every pending timer.
    order: BTreeSet<(u64, u64)>,
    by_seq: HashMap<u64, TimerKey>,
    /// Every key issued, pending or not (stale keys are picked too).
    keys: Vec<TimerKey>,
    next_seq: u64,
    /// Peeks checked.
    peeks: u64,
}

impl Harness {
    fn new(start: u64) -> Self {
        Harness {
            wheel: Wheel::starting_at(start),
            by_key: HashMap::new(),
            order: BTreeSet::new(),
            by_seq: HashMap::new(),
            keys: Vec::new(),
            next_seq: 0,
            peeks: 0,
        }
    }

    fn min_deadline(&self) -> Option<u64> {
        self.order.first().map(|&(d, _)| d)
    }

    fn insert(&mut self, deadline: u64) -> TimerKey {
        let seq = self.next_seq;
        self.next_seq += 1;
        let key = self.wheel.insert(deadline, seq);
        let timer = Timer {
            deadline,
            seq,
            reset: false,
        };
        assert!(self.by_key.insert(key, timer).is_none(), "a fresh key");
        self.order.insert((deadline, seq));
        self.by_seq.insert(seq, key);
        self.keys.push(key);
        key
    }

    fn reset(&mut self, key: TimerKey, deadline: u64) {
        let done = self.wheel.reset(key, deadline);
        match self.by_key.get_mut(&key) {
            Some(t) => {
                assert!(done, "reset of a pending timer to {deadline} refused");
                self.order.remove(&(t.deadline, t.seq));
                t.deadline = deadline;
                t.reset = true;
                self.order.insert((deadline, t.seq));
            }
            None => assert!(!done, "reset of a stale key accepted"),
        }
    }

    fn cancel(&mut self, key: TimerKey) {
        let got = self.wheel.cancel(key);
        match self.by_key.remove(&key) {
            Some(t) => {
                assert_eq!(got, Some(t.seq), "cancel of a pending timer");
                self.order.remove(&(t.deadline, t.seq));
                self.by_seq.remove(&t.seq);
            }
            None => assert_eq!(got, None, "cancel of a stale key"),
        }
    }

    /// Whether every pending timer at `deadline` was never reset.
    fn ties_never_reset(&self, deadline: u64) -> bool {
        self.order
            .range((deadline, 0)..=(deadline, u64::MAX))
            .all(|&(_, seq)| !self.by_key[&self.by_seq[&seq]].reset)
    }

    /// A timer came out of a poll at `now` (already `max`ed with the elapsed tick before
    /// the poll): it must be pending, not early, and no pending timer may be due before it.
    fn fired(&mut self, e: &Expired<u64>, now: u64) {
        let t = *self
            .by_key
            .get(&e.key)
            .unwrap_or_else(|| panic!("fired {:?} which is not pending", e.key));
        assert_eq!(t.seq, e.value, "the value of the timer fired");
        assert_eq!(t.deadline, e.deadline, "fired at its deadline");
        assert!(e.deadline <= now, "early: {} > now {now}", e.deadline);
        let min = self.min_deadline().expect("the model holds it");
        assert_eq!(min, e.deadline, "fired {} with {min} pending", e.deadline);
        if !t.reset {
            let first_never_reset = self
                .order
                .range((min, 0)..=(min, u64::MAX))
                .map(|&(_, seq)| seq)
                .find(|seq| !self.by_key[&self.by_seq[seq]].reset);
            assert_eq!(
                first_never_reset,
                Some(t.seq),
                "equal deadlines of never-reset timers in insertion order"
            );
        }
        self.by_key.remove(&e.key);
        self.order.remove(&(t.deadline, t.seq));
        self.by_seq.remove(&t.seq);
    }

    /// Polls until nothing is due at `now`.
    fn poll_all(&mut self, now: u64) {
        let eff = now.max(self.wheel.elapsed());
        while let Some(e) = self.wheel.poll(now) {
            self.fired(&e, eff);
        }
        assert!(
            self.min_deadline().is_none_or(|d| d > eff),
            "a poll at {eff} left {:?} due",
            self.min_deadline()
        );
    }

    fn poll_one(&mut self, now: u64) -> Option<Expired<u64>> {
        let eff = now.max(self.wheel.elapsed());
        let got = self.wheel.poll(now);
        match &got {
            Some(e) => self.fired(e, eff),
            None => assert!(
                self.min_deadline().is_none_or(|d| d > eff),
                "a poll at {eff} returned nothing with {:?} due",
                self.min_deadline()
            ),
        }
        got
    }

    fn poll_into(&mut self, now: u64, limit: usize) {
        let eff = now.max(self.wheel.elapsed());
        let mut out = Vec::new();
        let n = self.wheel.poll_into(now, limit, &mut out);
        assert_eq!(n, out.len());
        assert!(n <= limit);
        for e in &out {
            self.fired(e, eff);
        }
        if n < limit {
            assert!(
                self.min_deadline().is_none_or(|d| d > eff),
                "a poll_into at {eff} stopped short of its limit with {:?} due",
                self.min_deadline()
            );
        }
    }

    /// The check under test: `peek` against the model.
    fn check_peek(&mut self, what: &str) {
        self.peeks += 1;
        assert_eq!(self.wheel.len(), self.by_key.len(), "{what}: len");
        let got = self.wheel.peek();
        let Some(min) = self.min_deadline() else {
            assert_eq!(got, None, "{what}: peek of an empty wheel");
            return;
        };
        let Some((key, deadline)) = got else {
            panic!(
                "{what}: peek None with {} pending (earliest {min})",
                self.len()
            );
        };
        let t = *self
            .by_key
            .get(&key)
            .unwrap_or_else(|| panic!("{what}: peek names {key:?}, not pending"));
        assert_eq!(
            (deadline, t.deadline),
            (min, min),
            "{what}: peek ({key:?}, {deadline}) (model deadline {}), earliest is {min}; elapsed {}",
            t.deadline,
            self.wheel.elapsed()
        );
        assert_eq!(self.wheel.deadline(key), Some(min), "{what}: its deadline");
        if self.ties_never_reset(min) {
            let first = self.order.first().map(|&(_, seq)| seq);
            assert_eq!(
                Some(t.seq),
                first,
                "{what}: ties at {min} in insertion order"
            );
        }
        BY_LEVEL[level_of(self.wheel.elapsed(), min)].fetch_add(1, Ordering::Relaxed);
        let next = self.wheel.next_expiration().expect("timers are pending");
        assert!(
            next <= min,
            "{what}: next_expiration {next} after the earliest {min}"
        );
    }

    fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Polls at the peeked deadline: the peeked timer comes out first when none of the timers
    /// tied with it was reset (else one at its deadline does).
    fn peek_then_poll(&mut self) {
        let Some((key, deadline)) = self.wheel.peek() else {
            return;
        };
        let never_reset = self.ties_never_reset(deadline);
        let e = self
            .poll_one(deadline)
            .expect("the peeked timer is due at its deadline");
        assert_eq!(
            e.deadline, deadline,
            "the first timer at the peeked deadline"
        );
        if never_reset {
            assert_eq!(e.key, key, "peek names what the poll returns first");
        }
    }
}

// ---------------------------------------------------------------------------------------
// Deadlines and ticks chosen around level-2 slots
// ---------------------------------------------------------------------------------------

/// The start of the level-2 slot `k` slots after the one holding `e`, if it fits.
fn l2_slot_start(e: u64, k: u64) -> Option<u64> {
    ((e >> 12).checked_add(k))?.checked_mul(4096)
}

/// A deadline of kind `kind`, relative to the wheel's elapsed tick and the model.
fn deadline(h: &Harness, kind: u8, x: u32) -> u64 {
    let e = h.wheel.elapsed();
    let x = x as u64;
    let min = h.min_deadline();
    match kind % 18 {
        0 => e.saturating_add(1 + x % 64),
        1 => e.saturating_add(1 + x % 4096),
        // In one of the next few level-2 slots, on multiples of 8 (ties).
        2..=5 => {
            let k = 1 + (x >> 12) % 4;
            l2_slot_start(e, k).map_or(u64::MAX, |s| s + ((x % 4096) & !7))
        }
        6 => e.saturating_add(4096 + (x * 4) % 258_048),
        // Level 3 and beyond.
        7 => e.saturating_add(x << 6),
        8 => e.saturating_add(x << 20),
        9 => u64::MAX - x % 3,
        // At or behind elapsed.
        10 => e.saturating_sub(x % 5000),
        11 => min.unwrap_or(e.saturating_add(4096)),
        12 => min.map_or(e.saturating_add(5000), |m| m.saturating_add(1 + x % 8)),
        13 => min.map_or(e, |m| m.saturating_sub(1 + x % 8)),
        // Edges of a level-2 slot.
        14 => {
            let k = 1 + (x >> 4) % 3;
            let s = l2_slot_start(e, k).unwrap_or(u64::MAX - 4095);
            [s, s + 1, s + 4095, s.saturating_add(4096), s - 1][(x % 5) as usize]
        }
        15 => e,
        // Another pending timer's deadline.
        16 => {
            let n = h.order.len() as u64;
            if n == 0 {
                e.saturating_add(4096 + x % 4096)
            } else {
                let i = x % n;
                h.order.iter().nth(i as usize).map(|&(d, _)| d).unwrap()
            }
        }
        _ => e.saturating_add(4096 + x % 8192),
    }
}

/// A new deadline for a timer now due at `c`.
fn reset_deadline(h: &Harness, c: u64, kind: u8, x: u32) -> u64 {
    let e = h.wheel.elapsed();
    let xx = x as u64;
    match kind % 14 {
        0 => c.saturating_add(1 + xx % 300),
        1 => c.saturating_add(xx << 6),
        // Earlier, but still ahead of elapsed when possible.
        2 => {
            if c > e.saturating_add(1) {
                c - 1 - xx % (c - e - 1)
            } else {
                c
            }
        }
        // Another tick of the same level-2 slot.
        3 => (c & !4095) | (xx % 4096),
        4 => u64::MAX,
        5 => e.saturating_sub(xx % 100),
        6 => h.min_deadline().unwrap_or(c),
        7 => h.min_deadline().unwrap_or(c).saturating_sub(1),
        8 => c,
        9 => c.saturating_add(4096),
        10 => c.saturating_sub(1 + xx % 64),
        _ => deadline(h, (kind / 14).wrapping_add(x as u8), x.rotate_left(7)),
    }
}

/// A tick to poll at.
fn poll_tick(h: &Harness, kind: u8, x: u32) -> u64 {
    let e = h.wheel.elapsed();
    let x = x as u64;
    match kind % 9 {
        0 => e.saturating_add(x % 64),
        1 => e.saturating_add(x % 4096),
        // Around the start of the next level-2 slot.
        2 => l2_slot_start(e, 1).map_or(u64::MAX - 1, |s| s + x % 3 - 1),
        3 => h.wheel.peek().map_or(e, |(_, d)| d.saturating_sub(x % 2)),
        4 => e.saturating_add(x % 300_000),
        5 => h.min_deadline().unwrap_or(e).saturating_add(x % 4),
        6 => e.saturating_sub(x % 1000),
        // Just before the next level-3 slot.
        7 => ((e >> 18).saturating_add(1) << 18).saturating_sub(1 + x % 2),
        _ => e.saturating_add(x % 20_000),
    }
}

/// Proptest cases: `default`, or `PEEK_CASES` for a longer hunt.
fn cases(default: u32) -> u32 {
    std::env::var("PEEK_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[cfg(feature = "tokio")]
mod delay_queue;
mod random;
mod scenarios;
