//! A reference model for runs of cancels and moving resets with no poll in between (the
//! unlinks `Levels::unlink` holds back): a `BTreeMap` of (deadline, insertion seq), checked
//! against the wheel after every step (see `M::check`). Used by `tests/wheel_unlinks_model.rs`.

#![allow(dead_code)]
use std::collections::{BTreeMap, HashMap};

pub use proptest::prelude::*;
pub use tickwheel::{IndexedWheel, TimerKey, Wheel};

pub fn cases() -> u32 {
    super::cases_or(256)
}

pub fn cascade_tick(elapsed: u64, deadline: u64) -> u64 {
    let level = (((elapsed ^ deadline) | 63).ilog2() / 6) as u64;
    deadline & !((1u64 << (6 * level)) - 1)
}

pub fn stale_bound(live: usize) -> usize {
    2 * live + 8 * 706
}

pub struct M {
    pub wheel: Wheel<u64>,
    /// (deadline, seq) -> (key, value, reset)
    pub timers: BTreeMap<(u64, u64), (TimerKey, u64, bool)>,
    pub by_key: HashMap<TimerKey, (u64, u64)>,
    pub issued: Vec<TimerKey>,
    pub seq: u64,
    pub elapsed: u64,
    pub max_now: u64,
    pub log: Vec<String>,
}

impl M {
    pub fn new(start: u64) -> Self {
        M {
            wheel: Wheel::starting_at(start),
            timers: BTreeMap::new(),
            by_key: HashMap::new(),
            issued: Vec::new(),
            seq: 0,
            elapsed: start,
            max_now: start,
            log: Vec::new(),
        }
    }

    pub fn insert(&mut self, deadline: u64) -> TimerKey {
        let value = self.seq;
        let key = self.wheel.insert(deadline, value);
        assert!(
            !self.by_key.contains_key(&key),
            "fresh key equals a pending one"
        );
        self.timers
            .insert((deadline, self.seq), (key, value, false));
        self.by_key.insert(key, (deadline, self.seq));
        self.issued.push(key);
        self.seq += 1;
        key
    }

    pub fn cancel(&mut self, key: TimerKey) {
        let got = self.wheel.cancel(key);
        match self.by_key.remove(&key) {
            Some(k) => {
                let (_, value, _) = self.timers.remove(&k).unwrap();
                assert_eq!(got, Some(value), "cancel of a pending key");
            }
            None => assert_eq!(got, None, "cancel of a stale key returned a value"),
        }
    }

    pub fn reset(&mut self, key: TimerKey, deadline: u64) {
        let ok = self.wheel.reset(key, deadline);
        match self.by_key.remove(&key) {
            Some(k) => {
                assert!(ok, "reset of a pending key failed");
                let (key, value, _) = self.timers.remove(&k).unwrap();
                let nk = (deadline, self.seq);
                self.seq += 1;
                self.timers.insert(nk, (key, value, true));
                self.by_key.insert(key, nk);
            }
            None => assert!(!ok, "reset of a stale key succeeded"),
        }
    }

    pub fn take_fired(&mut self, deadline: u64, key: TimerKey, value: u64, effective: u64) {
        assert!(
            deadline <= effective,
            "fired early: {deadline} > now {effective}"
        );
        assert!(
            deadline <= self.max_now.max(self.elapsed),
            "fired before reached"
        );
        let k = self
            .by_key
            .remove(&key)
            .expect("fired a key that is not pending");
        assert_eq!(k.0, deadline, "fired deadline differs from model");
        let (&(d0, _), _) = self.timers.iter().next().unwrap();
        assert_eq!(d0, deadline, "fired out of deadline order");
        let (_, v, reset) = self.timers.remove(&k).unwrap();
        assert_eq!(v, value);
        if !reset {
            let earlier = self.timers.range((d0, 0)..(d0, k.1)).any(|(_, t)| !t.2);
            assert!(!earlier, "equal deadlines out of insertion order");
        }
    }

    pub fn poll(&mut self, now: u64, max: usize) {
        self.max_now = self.max_now.max(now);
        let effective = now.max(self.elapsed);
        let mut n = 0;
        while n < max {
            match self.wheel.poll(now) {
                Some(e) => {
                    self.take_fired(e.deadline, e.key, e.value, effective);
                    self.elapsed = self.elapsed.max(e.deadline);
                    n += 1;
                }
                None => {
                    if let Some((&(d, _), _)) = self.timers.iter().next() {
                        assert!(d > effective, "skipped: {d} <= {effective} still pending");
                    }
                    self.elapsed = effective;
                    break;
                }
            }
        }
        assert_eq!(self.wheel.elapsed(), self.elapsed, "elapsed");
    }

    pub fn poll_into(&mut self, now: u64, limit: usize) {
        self.max_now = self.max_now.max(now);
        let effective = now.max(self.elapsed);
        let mut out = Vec::new();
        let taken = self.wheel.poll_into(now, limit, &mut out);
        assert_eq!(taken, out.len());
        let mut last = None;
        for e in out {
            self.take_fired(e.deadline, e.key, e.value, effective);
            last = Some(e.deadline);
        }
        if taken < limit {
            if let Some((&(d, _), _)) = self.timers.iter().next() {
                assert!(d > effective, "skipped by poll_into: {d} <= {effective}");
            }
            self.elapsed = effective;
        } else if let Some(l) = last {
            self.elapsed = self.elapsed.max(l);
        }
        assert_eq!(
            self.wheel.elapsed(),
            self.elapsed,
            "elapsed after poll_into"
        );
    }

    pub fn check(&self) {
        assert_eq!(self.wheel.len(), self.timers.len(), "len");
        assert_eq!(self.wheel.is_empty(), self.timers.is_empty());
        let next = self.wheel.next_expiration();
        match (self.timers.iter().next(), next) {
            (None, None) => {}
            (None, Some(n)) => panic!("next_expiration {n} on an empty wheel"),
            (Some((&(d, _), _)), None) => panic!("next_expiration None with {d} pending"),
            (Some((&(d, _), _)), Some(n)) => {
                assert!(n <= d, "next_expiration {n} later than earliest {d}");
                if d <= self.elapsed {
                    assert!(
                        n <= self.elapsed,
                        "next_expiration {n} after elapsed, {d} due"
                    );
                } else {
                    assert!(
                        n > self.elapsed,
                        "next_expiration {n} <= elapsed, nothing due"
                    );
                    let any_reset = self.timers.values().any(|t| t.2);
                    if !any_reset {
                        assert_eq!(
                            n,
                            cascade_tick(self.elapsed, d),
                            "next_expiration (elapsed {}, earliest {d}) reports a cancelled slot",
                            self.elapsed
                        );
                    }
                }
            }
        }
        let s = self.wheel.stats();
        assert_eq!(s.live, self.timers.len());
        assert!(
            s.stale <= stale_bound(s.live),
            "stale {} > bound for {}",
            s.stale,
            s.live
        );
        // Stale keys: the last few issued ones.
        for &k in self.issued.iter().rev().take(80) {
            match self.by_key.get(&k) {
                Some(&(d, _)) => assert_eq!(self.wheel.deadline(k), Some(d)),
                None => {
                    assert!(!self.wheel.contains(k));
                    assert_eq!(self.wheel.deadline(k), None);
                }
            }
        }
    }

    pub fn finish(&mut self) {
        self.poll(u64::MAX, usize::MAX);
        assert!(self.wheel.is_empty());
        assert!(self.timers.is_empty());
        self.check();
        assert_eq!(
            self.wheel.stats().stale,
            0,
            "an emptied wheel keeps no stale refs"
        );
    }
}

#[derive(Debug, Clone)]
pub enum D {
    /// elapsed + offset in a level's range.
    Ahead(u8, u64),
    /// one of a few anchors relative to the start (shared slots).
    Anchor(u8),
    /// behind elapsed.
    Past(u64),
    /// near u64::MAX.
    Top(u16),
    /// same as an existing timer's deadline, +delta.
    Same(u16, i8),
    /// a level-2 "run" slot: 4096..262144 ahead.
    Run(u32),
}

#[derive(Debug, Clone)]
pub enum Pick {
    Any(u16),
    Issued(u16),
    Earliest(u16),
}

#[derive(Debug, Clone)]
pub enum Op {
    Insert(D),
    Burst(D, u8),
    Cancel(Pick),
    /// Cancel `n` pending picks in a row, checking after each.
    CancelMany(u16, u16),
    /// Cancel every pending timer whose slot is the earliest one's (same cascade tick).
    CancelEarliestSlot,
    /// Cancel the n earliest timers.
    CancelEarliest(u16),
    Reset(Pick, D),
    /// Reset n picks, alternately earlier and later.
    ResetMany(u16, u16, D),
    Poll(D),
    PollOne(D),
    PollInto(D, u8),
    /// Poll to just past the earliest deadline's cascade tick (partway into a slot / run).
    PollPartway(u16),
    StaleCancels(u16),
    Shrink,
    Clear,
}

pub fn d_strat() -> impl Strategy<Value = D> {
    prop_oneof![
        6 => (0u8..=10, any::<u64>()).prop_map(|(l, o)| D::Ahead(l, o)),
        6 => (0u8..12).prop_map(D::Anchor),
        1 => any::<u64>().prop_map(D::Past),
        1 => any::<u16>().prop_map(D::Top),
        4 => (any::<u16>(), -1i8..=1).prop_map(|(p, d)| D::Same(p, d)),
        4 => (4096u32..262_144).prop_map(D::Run),
    ]
}

pub fn pick() -> impl Strategy<Value = Pick> {
    prop_oneof![
        4 => any::<u16>().prop_map(Pick::Any),
        1 => any::<u16>().prop_map(Pick::Issued),
        2 => (0u16..8).prop_map(Pick::Earliest),
    ]
}

pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => d_strat().prop_map(Op::Insert),
        4 => (d_strat(), 1u8..=150).prop_map(|(d, n)| Op::Burst(d, n)),
        2 => pick().prop_map(Op::Cancel),
        4 => (prop_oneof![0u16..70, 60u16..=70, 120u16..=300], any::<u16>())
            .prop_map(|(n, s)| Op::CancelMany(n, s)),
        2 => Just(Op::CancelEarliestSlot),
        2 => (prop_oneof![1u16..5, 62u16..=66, 100u16..200]).prop_map(Op::CancelEarliest),
        2 => (pick(), d_strat()).prop_map(|(p, d)| Op::Reset(p, d)),
        2 => (prop_oneof![1u16..70, 60u16..=70, 100u16..200], any::<u16>(), d_strat())
            .prop_map(|(n, s, d)| Op::ResetMany(n, s, d)),
        2 => d_strat().prop_map(Op::Poll),
        2 => d_strat().prop_map(Op::PollOne),
        2 => (d_strat(), 0u8..=10).prop_map(|(d, l)| Op::PollInto(d, l)),
        3 => any::<u16>().prop_map(Op::PollPartway),
        1 => (1u16..100).prop_map(Op::StaleCancels),
        1 => Just(Op::Shrink),
        1 => prop_oneof![4 => Just(Op::Shrink), 1 => Just(Op::Clear)],
    ]
}

pub fn start_strat() -> impl Strategy<Value = u64> {
    prop_oneof![
        2 => Just(0u64),
        1 => any::<u64>(),
        1 => (0u64..1 << 13).prop_map(|d| (1u64 << 32) - d),
        1 => (0u64..1 << 13).prop_map(|d| (1u64 << 63) - d),
        1 => (0u64..1 << 20).prop_map(|d| u64::MAX - d),
        1 => (0u64..300).prop_map(|d| u64::MAX - d),
    ]
}

impl M {
    pub fn resolve(&self, d: &D, start: u64) -> u64 {
        match *d {
            D::Ahead(l, o) => {
                // The ticks of levels 0..=l; all of `u64` from level 10 (a shift past 63).
                let span = 1u64
                    .checked_shl(6 * (u32::from(l) + 1))
                    .map_or(u64::MAX, |s| s - 1);
                self.elapsed.saturating_add(o % span.max(1))
            }
            D::Anchor(i) => {
                let offs = [
                    1u64, 5, 63, 64, 100, 4095, 4096, 5000, 8191, 70_000, 262_144, 300_000,
                ];
                start.saturating_add(offs[i as usize])
            }
            D::Past(o) => self.elapsed.saturating_sub(o % 5000),
            D::Top(b) => u64::MAX - (b as u64 % 300),
            D::Same(p, delta) => {
                if self.timers.is_empty() {
                    self.elapsed.saturating_add(1)
                } else {
                    let (&(d, _), _) = self
                        .timers
                        .iter()
                        .nth(p as usize % self.timers.len())
                        .unwrap();
                    d.saturating_add_signed(delta as i64)
                }
            }
            D::Run(o) => self.elapsed.saturating_add(o as u64),
        }
    }

    pub fn pick(&self, p: &Pick) -> Option<TimerKey> {
        match *p {
            Pick::Any(i) => {
                if self.timers.is_empty() {
                    return None;
                }
                self.timers
                    .values()
                    .nth(i as usize % self.timers.len())
                    .map(|t| t.0)
            }
            Pick::Issued(i) => {
                if self.issued.is_empty() {
                    return None;
                }
                Some(self.issued[i as usize % self.issued.len()])
            }
            Pick::Earliest(i) => self.timers.values().nth(i as usize).map(|t| t.0),
        }
    }

    pub fn apply(&mut self, op: &Op, start: u64) {
        self.log.push(format!("{op:?}"));
        match op {
            Op::Insert(d) => {
                let d = self.resolve(d, start);
                self.insert(d);
            }
            Op::Burst(d, n) => {
                let d = self.resolve(d, start);
                for _ in 0..*n {
                    self.insert(d);
                }
            }
            Op::Cancel(p) => {
                if let Some(k) = self.pick(p) {
                    self.cancel(k);
                }
            }
            Op::CancelMany(n, s) => {
                let mut x = *s as usize;
                for _ in 0..*n {
                    if self.timers.is_empty() {
                        break;
                    }
                    x = x.wrapping_mul(1103515245).wrapping_add(12345);
                    let k = self
                        .timers
                        .values()
                        .nth((x >> 4) % self.timers.len())
                        .unwrap()
                        .0;
                    self.cancel(k);
                    self.check();
                }
            }
            Op::CancelEarliestSlot => {
                if let Some((&(d, _), _)) = self.timers.iter().next() {
                    if d > self.elapsed {
                        let t = cascade_tick(self.elapsed, d);
                        let keys: Vec<TimerKey> = self
                            .timers
                            .iter()
                            .filter(|&(&(dd, _), _)| {
                                dd > self.elapsed && cascade_tick(self.elapsed, dd) == t
                            })
                            .map(|(_, v)| v.0)
                            .collect();
                        for k in keys {
                            self.cancel(k);
                        }
                        self.check();
                    }
                }
            }
            Op::CancelEarliest(n) => {
                for _ in 0..*n {
                    let Some(k) = self.timers.values().next().map(|t| t.0) else {
                        break;
                    };
                    self.cancel(k);
                    self.check();
                }
            }
            Op::Reset(p, d) => {
                let d = self.resolve(d, start);
                if let Some(k) = self.pick(p) {
                    self.reset(k, d);
                }
            }
            Op::ResetMany(n, s, d) => {
                let base = self.resolve(d, start);
                let mut x = *s as usize;
                for i in 0..*n {
                    if self.timers.is_empty() {
                        break;
                    }
                    x = x.wrapping_mul(1103515245).wrapping_add(12345);
                    let (&(dl, _), t) = self
                        .timers
                        .iter()
                        .nth((x >> 4) % self.timers.len())
                        .unwrap();
                    let k = t.0;
                    let nd = match i % 3 {
                        0 => dl
                            .saturating_sub(1 + (x as u64 % 4096))
                            .max(self.elapsed.saturating_add(1)),
                        1 => dl.saturating_add(x as u64 % 100_000),
                        _ => base,
                    };
                    self.reset(k, nd);
                }
                self.check();
            }
            Op::Poll(d) => {
                let n = self.resolve(d, start);
                self.poll(n, usize::MAX);
            }
            Op::PollOne(d) => {
                let n = self.resolve(d, start);
                self.poll(n, 1);
            }
            Op::PollInto(d, l) => {
                let n = self.resolve(d, start);
                self.poll_into(n, *l as usize);
            }
            Op::PollPartway(o) => {
                if let Some((&(d, _), _)) = self.timers.iter().next() {
                    let t = if d > self.elapsed {
                        cascade_tick(self.elapsed, d)
                    } else {
                        d
                    };
                    self.poll(t.saturating_add(*o as u64 % 2048), usize::MAX);
                }
            }
            Op::StaleCancels(n) => {
                let dead: Vec<TimerKey> = self
                    .issued
                    .iter()
                    .rev()
                    .filter(|k| !self.by_key.contains_key(k))
                    .take(*n as usize)
                    .copied()
                    .collect();
                for k in dead {
                    self.cancel(k);
                    self.reset(k, self.elapsed.saturating_add(7));
                }
            }
            Op::Shrink => {
                self.wheel.shrink_to_fit();
                assert_eq!(self.wheel.stats().stale, 0, "shrink_to_fit left stale refs");
            }
            Op::Clear => {
                self.wheel.clear();
                self.timers.clear();
                self.by_key.clear();
            }
        }
        self.check();
    }
}
