//! A model of the sweep bound: long bulk sequences that take the levels up to their sweep bound, with the
//! pending unlinks (`Levels::try_unlink`) flushed by every kind of operation. After every
//! single wheel call: the levels' exact counts and bound (`check_counts`), the documented
//! bound `stats().stale <= live + run + 8 x 706`; after every op: `check_invariants`, the
//! model's next_expiration, len.

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;

use super::*;
use crate::wheel::level::filed_slot_start;

const DOC_SLACK: usize = 8 * 706;

#[derive(Debug, Clone)]
enum D {
    /// elapsed + 1 + (o mod span of level l)
    Ahead(u8, u64),
    /// at or before elapsed
    Past(u16),
    /// the deadline of a pending timer (crowding one slot)
    Same(u16),
    /// within the next level-2 slot ahead of elapsed (its processing makes the sorted run)
    Run(u16),
    /// the earliest pending deadline plus a little (partway into a slot or the run)
    Partway(u8),
}

#[derive(Debug, Clone)]
enum Op {
    Bulk(D, u16),
    /// cancel n pending timers, chosen from position s in the key list
    Cancel(u16, u16),
    /// cancel n timers of the earliest pending deadline's group
    CancelEarliest(u16),
    /// cancel up to n timers that share picked timer p's deadline, keeping p
    CancelGroup(u16, u16),
    /// move up to n timers sharing picked timer p's deadline to d, keeping p
    MoveGroup(u16, u16, D),
    /// move n timers earlier (to d if earlier, else to elapsed + 1 + ...)
    ResetEarlier(u16, u16, D),
    /// move n timers to d
    Reset(u16, u16, D),
    Poll(D),
    PollOne(D),
    PollInto(D, u8),
    /// a poll at or behind elapsed: idle unless something waits
    PollIdle,
    NextExpiration,
    StaleCancel(u16),
    Shrink,
    Clear,
}

fn d() -> impl Strategy<Value = D> {
    prop_oneof![
        6 => (0u8..=10, any::<u64>()).prop_map(|(l, o)| D::Ahead(l, o)),
        1 => any::<u16>().prop_map(D::Past),
        4 => any::<u16>().prop_map(D::Same),
        3 => any::<u16>().prop_map(D::Run),
        3 => any::<u8>().prop_map(D::Partway),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let n = || prop_oneof![1u16..4, 60u16..=70, 120u16..=130, 1u16..400, 1000u16..3000];
    let big = || prop_oneof![1u16..=130, 3000u16..8000];
    prop_oneof![
        4 => (d(), big()).prop_map(|(d, n)| Op::Bulk(d, n)),
        4 => (big(), any::<u16>()).prop_map(|(n, p)| Op::CancelGroup(n, p)),
        2 => (big(), any::<u16>(), d()).prop_map(|(n, p, d)| Op::MoveGroup(n, p, d)),
        6 => (d(), n()).prop_map(|(d, n)| Op::Bulk(d, n)),
        6 => (n(), any::<u16>()).prop_map(|(n, s)| Op::Cancel(n, s)),
        2 => n().prop_map(Op::CancelEarliest),
        3 => (n(), any::<u16>(), d()).prop_map(|(n, s, d)| Op::ResetEarlier(n, s, d)),
        2 => (n(), any::<u16>(), d()).prop_map(|(n, s, d)| Op::Reset(n, s, d)),
        2 => d().prop_map(Op::Poll),
        2 => d().prop_map(Op::PollOne),
        2 => (d(), 1u8..4).prop_map(|(d, l)| Op::PollInto(d, l)),
        2 => Just(Op::PollIdle),
        1 => Just(Op::NextExpiration),
        1 => (1u16..100).prop_map(Op::StaleCancel),
        1 => Just(Op::Shrink),
        1 => prop_oneof![9 => Just(Op::NextExpiration), 1 => Just(Op::Clear)],
    ]
}

fn start() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => Just(0u64),
        1 => any::<u64>(),
        1 => (0u64..1 << 13).prop_map(|d| (1u64 << 32) - d),
        1 => (0u64..1 << 20).prop_map(|d| u64::MAX - d),
    ]
}

struct M {
    w: Wheel<u64>,
    /// key -> (deadline, seq, reset, value)
    by_key: HashMap<TimerKey, (u64, u64, bool, u64)>,
    order: BTreeMap<(u64, u64), TimerKey>,
    keys: Vec<TimerKey>,
    dead: Vec<TimerKey>,
    seq: u64,
}

impl M {
    fn new(start: u64) -> Self {
        M {
            w: Wheel::starting_at(start),
            by_key: HashMap::new(),
            order: BTreeMap::new(),
            keys: Vec::new(),
            dead: Vec::new(),
            seq: 0,
        }
    }

    /// After every single call.
    fn quick(&self) {
        self.w.levels.check_counts();
        let s = self.w.stats();
        assert_eq!(s.live, self.by_key.len());
        assert!(
            s.stale <= s.live + self.w.due.run_live() + DOC_SLACK,
            "stale bound: {s:?}, run {}",
            self.w.due.run_live()
        );
    }

    fn full(&self) {
        self.quick();
        self.w.check_invariants();
        assert_eq!(self.w.len(), self.by_key.len());
        let e = self.w.elapsed();
        let next = self.w.next_expiration();
        match self.order.keys().next() {
            None => assert_eq!(next, None),
            Some(&(dl, _)) => {
                let n = next.expect("next_expiration None with timers pending");
                assert!(n <= dl, "next_expiration {n} after earliest {dl}");
                if dl <= e {
                    assert!(n <= e);
                } else if !self.by_key.values().any(|t| t.2) {
                    let level = (((e ^ dl) | 63).ilog2() / 6) as usize;
                    assert_eq!(n, filed_slot_start(dl, level), "elapsed {e} earliest {dl}");
                }
            }
        }
    }

    fn resolve(&self, d: &D) -> u64 {
        let e = self.w.elapsed();
        match *d {
            D::Ahead(l, o) => {
                // The ticks of levels 0..=l; all of `u64` from level 10 (a shift past 63).
                let span = 1u64
                    .checked_shl(6 * (u32::from(l) + 1))
                    .map_or(u64::MAX, |s| s - 1);
                e.saturating_add(1 + o % span.max(1))
                    .max(e.saturating_add(1))
            }
            D::Past(x) => e.saturating_sub(x as u64 % 5000),
            D::Run(o) => {
                let next = (e | 4095).saturating_add(1);
                next.saturating_add(o as u64 % 4096)
                    .max(e.saturating_add(1))
            }
            D::Partway(x) => match self.order.keys().next() {
                None => e.saturating_add(1),
                Some(&(dl, _)) => dl.saturating_add(x as u64 % 8).max(e),
            },
            D::Same(p) => match self.keys.len() {
                0 => e.saturating_add(1 + p as u64),
                n => self.by_key[&self.keys[p as usize % n]].0,
            },
        }
    }

    fn insert(&mut self, dl: u64) {
        let k = self.w.insert(dl, self.seq);
        self.by_key.insert(k, (dl, self.seq, false, self.seq));
        self.order.insert((dl, self.seq), k);
        self.keys.push(k);
        self.seq += 1;
        self.quick();
    }

    fn forget(&mut self, k: TimerKey) -> (u64, u64, bool, u64) {
        let t = self.by_key.remove(&k).unwrap();
        self.order.remove(&(t.0, t.1));
        let i = self.keys.iter().position(|&x| x == k).unwrap();
        self.keys.swap_remove(i);
        self.dead.push(k);
        t
    }

    fn cancel(&mut self, k: TimerKey) {
        let got = self.w.cancel(k);
        if self.by_key.contains_key(&k) {
            let t = self.forget(k);
            assert_eq!(got, Some(t.3), "cancel of a pending timer");
        } else {
            assert_eq!(got, None, "cancel of a stale key");
        }
        self.quick();
    }

    fn reset(&mut self, k: TimerKey, dl: u64) {
        assert!(self.w.reset(k, dl));
        let t = self.by_key.remove(&k).unwrap();
        self.order.remove(&(t.0, t.1));
        // The value stays, the order key is fresh.
        self.by_key.insert(k, (dl, self.seq, true, t.3));
        self.order.insert((dl, self.seq), k);
        self.seq += 1;
        self.quick();
    }

    fn fired(&mut self, e: Expired<u64>, effective: u64) {
        assert!(
            e.deadline <= effective,
            "early: {} > {effective}",
            e.deadline
        );
        let t = *self.by_key.get(&e.key).expect("fired a timer not pending");
        assert_eq!(t.0, e.deadline);
        let &(first, _) = self.order.keys().next().unwrap();
        assert_eq!(first, e.deadline, "out of deadline order");
        assert_eq!(e.value, t.3, "value");
        if !t.2 {
            let before = self
                .order
                .range((first, 0)..(first, t.1))
                .any(|(_, k)| !self.by_key[k].2);
            assert!(!before, "equal deadlines out of insertion order");
        }
        self.forget(e.key);
    }

    fn poll(&mut self, now: u64, max: usize) {
        let effective = now.max(self.w.elapsed());
        for _ in 0..max {
            match self.w.poll(now) {
                Some(e) => self.fired(e, effective),
                None => {
                    if let Some(&(dl, _)) = self.order.keys().next() {
                        assert!(dl > effective, "skipped {dl} at {effective}");
                    }
                    assert_eq!(self.w.elapsed(), effective);
                    break;
                }
            }
            self.quick();
        }
    }

    fn pick(&self, n: u16, s: u16) -> Vec<TimerKey> {
        let len = self.keys.len();
        if len == 0 {
            return Vec::new();
        }
        let start = s as usize % len;
        (0..(n as usize).min(len))
            .map(|i| self.keys[(start + i) % len])
            .collect()
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::Bulk(d, n) => {
                let dl = self.resolve(d);
                for _ in 0..*n {
                    self.insert(dl);
                }
            }
            Op::Cancel(n, s) => {
                for k in self.pick(*n, *s) {
                    self.cancel(k);
                }
            }
            Op::CancelEarliest(n) => {
                let ks: Vec<TimerKey> = self.order.values().take(*n as usize).copied().collect();
                for k in ks {
                    self.cancel(k);
                }
            }
            Op::CancelGroup(n, p) | Op::MoveGroup(n, p, _) => {
                let Some(&keep) = self.pick(1, *p).first() else {
                    return self.full();
                };
                let dl = self.by_key[&keep].0;
                let ks: Vec<TimerKey> = self
                    .order
                    .range((dl, 0)..=(dl, u64::MAX))
                    .map(|(_, &k)| k)
                    .filter(|&k| k != keep)
                    .take(*n as usize)
                    .collect();
                let to = match op {
                    Op::MoveGroup(_, _, d) => Some(self.resolve(d)),
                    _ => None,
                };
                for k in ks {
                    match to {
                        Some(to) => self.reset(k, to),
                        None => self.cancel(k),
                    }
                }
            }
            Op::ResetEarlier(n, s, d) => {
                let to = self.resolve(d);
                for k in self.pick(*n, *s) {
                    let cur = self.by_key[&k].0;
                    let e = self.w.elapsed();
                    let dl = if to < cur {
                        to
                    } else {
                        e.saturating_add(1).min(cur)
                    };
                    self.reset(k, dl);
                }
            }
            Op::Reset(n, s, d) => {
                let to = self.resolve(d);
                for k in self.pick(*n, *s) {
                    self.reset(k, to);
                }
            }
            Op::Poll(d) => {
                let now = self.resolve(d);
                self.poll(now, usize::MAX);
            }
            Op::PollOne(d) => {
                let now = self.resolve(d);
                self.poll(now, 1);
            }
            Op::PollInto(d, limit) => {
                let now = self.resolve(d);
                let effective = now.max(self.w.elapsed());
                let mut out = Vec::new();
                let got = self.w.poll_into(now, *limit as usize, &mut out);
                assert_eq!(got, out.len());
                for e in out {
                    self.fired(e, effective);
                }
                if got < *limit as usize {
                    if let Some(&(dl, _)) = self.order.keys().next() {
                        assert!(dl > effective, "skipped {dl} at {effective}");
                    }
                }
                self.quick();
            }
            Op::PollIdle => {
                let now = self.w.elapsed();
                self.poll(now, usize::MAX);
                let behind = now.saturating_sub(3);
                self.poll(behind, usize::MAX);
            }
            Op::NextExpiration => {}
            Op::StaleCancel(n) => {
                let dead: Vec<TimerKey> =
                    self.dead.iter().rev().take(*n as usize).copied().collect();
                for k in dead {
                    assert_eq!(self.w.cancel(k), None);
                    assert!(!self.w.reset(k, 5));
                    assert_eq!(self.w.deadline(k), None);
                    self.quick();
                }
            }
            Op::Shrink => {
                self.w.shrink_to_fit();
                assert!(self.w.stats().stale == 0, "{:?}", self.w.stats());
                self.quick();
            }
            Op::Clear => {
                self.w.clear();
                let ks: Vec<TimerKey> = self.keys.clone();
                for k in ks {
                    self.forget(k);
                }
                self.quick();
            }
        }
        self.full();
    }
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(16)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn bulk_sequences_keep_the_stale_bound(
        start in start(),
        ops in prop::collection::vec(op(), 1..40),
    ) {
        let mut m = M::new(start);
        for op in &ops {
            m.apply(op);
        }
        m.poll(u64::MAX, usize::MAX);
        m.full();
        assert!(m.w.is_empty());
        assert_eq!(m.w.stats().stale, 0);
    }
}
