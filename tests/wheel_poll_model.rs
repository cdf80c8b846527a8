//! The core wheel's poll paths against a `BTreeMap<(deadline, seq)>` model, checked after
//! every operation: the quiet mark set after a poll takes a tick's last timer, the sorted
//! run's head taken directly when it is the next event, and the arena prefetch. Deadlines
//! cluster in level-2 slots (the sorted run) and near level boundaries and `u64::MAX`; polls
//! go behind `elapsed()`; `poll_into` stops at limits of 1 to 3. (Each check
//! was shown to catch a planted fault in those paths.)

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;
use tickwheel::{TimerKey, Wheel};

#[derive(Clone, Copy, Debug)]
struct T {
    deadline: u64,
    seq: u64,
    reset: bool,
    key: TimerKey,
}

struct Model {
    queue: BTreeMap<(u64, u64), u64>,
    timers: HashMap<u64, T>,
    seq: u64,
    elapsed: u64,
    next_id: u64,
    issued: Vec<u64>,
}

impl Model {
    /// Timer `id` is pending at `deadline`, after every timer filed before it at that
    /// deadline (`reset`: its place among equal deadlines is not promised).
    fn file(&mut self, id: u64, deadline: u64, reset: bool, key: TimerKey) {
        self.seq += 1;
        self.queue.insert((deadline, self.seq), id);
        let seq = self.seq;
        self.timers.insert(
            id,
            T {
                deadline,
                seq,
                reset,
                key,
            },
        );
    }

    fn earliest(&self) -> Option<u64> {
        self.queue.keys().next().map(|&(d, _)| d)
    }
}

fn check_fired(m: &mut Model, w: &Wheel<u64>, id: u64, deadline: u64, eff: u64, ctx: &str) {
    check_fired_e(m, w, id, deadline, eff, ctx, true)
}

fn check_fired_e(
    m: &mut Model,
    w: &Wheel<u64>,
    id: u64,
    deadline: u64,
    eff: u64,
    ctx: &str,
    check_elapsed: bool,
) {
    let t = *m
        .timers
        .get(&id)
        .unwrap_or_else(|| panic!("{ctx}: fired id {id} not pending in model"));
    assert_eq!(t.deadline, deadline, "{ctx}: deadline of fired id {id}");
    assert!(
        deadline <= eff,
        "{ctx}: fired EARLY id {id} due {deadline} at eff now {eff}"
    );
    let first = m.earliest().unwrap();
    assert_eq!(
        deadline, first,
        "{ctx}: deadline order: fired {id} due {deadline}, earliest pending {first}"
    );
    if !t.reset {
        for (&(d, s), &other) in m.queue.range((deadline, 0)..(deadline, t.seq)) {
            let o = m.timers[&other];
            assert!(
                o.reset,
                "{ctx}: insertion order at {d}: fired {id} (seq {}) before never-reset {other} (seq {s})",
                t.seq
            );
        }
    }
    m.queue.remove(&(t.deadline, t.seq));
    m.timers.remove(&id);
    m.elapsed = m.elapsed.max(deadline);
    if check_elapsed {
        assert_eq!(
            w.elapsed(),
            m.elapsed,
            "{ctx}: elapsed after a take of {deadline}"
        );
    }
}

fn check_state(m: &Model, w: &Wheel<u64>, ctx: &str) {
    assert_eq!(w.len(), m.timers.len(), "{ctx}: len");
    let st = w.stats();
    assert_eq!(st.live, m.timers.len(), "{ctx}: stats.live");
    assert!(
        st.stale <= 2 * st.live + 8 * 706,
        "{ctx}: stale {} over bound",
        st.stale
    );
    let ne = w.next_expiration();
    match m.earliest() {
        None => assert_eq!(ne, None, "{ctx}: next_expiration of empty"),
        Some(d) => {
            let ne = ne.unwrap_or_else(|| panic!("{ctx}: next_expiration None with {d} pending"));
            assert!(
                ne <= d,
                "{ctx}: next_expiration {ne} later than earliest {d}"
            );
            if d <= m.elapsed {
                assert!(
                    ne <= m.elapsed,
                    "{ctx}: due timer but next_expiration {ne} > elapsed"
                );
            }
        }
    }
    for t in m.timers.values() {
        assert_eq!(
            w.deadline(t.key),
            Some(t.deadline),
            "{ctx}: deadline via key"
        );
    }
}

// Set by the run-focused proptest: deadlines stay within one level-2 slot (the sorted run).
thread_local! {
    static FOCUS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn deadline_for(m: &Model, block: u64, a: u64, b: u64) -> u64 {
    let e = m.elapsed;
    if FOCUS.get() {
        // everything within one level-2 block (the run), a few ticks, plus its edges
        return match a % 10 {
            0..=4 => block.saturating_add((b % 6) * (1 + (a >> 8) % 900)),
            5 => e.saturating_sub(b % 3),
            6 => e.saturating_add(b % 2),
            7 => m.earliest().unwrap_or(e).saturating_add(b % 3),
            8 => block.saturating_add(4095 + b % 3),
            _ => block.saturating_add(b % 4096),
        };
    }
    match a % 12 {
        // the clustered level-2 block: few distinct ticks so equal deadlines are common
        0..=3 => block.saturating_add((b % 8) * (1 + (a >> 8) % 600)),
        4 => block.saturating_add(b % 4096),
        5 => e.saturating_sub(b % 70),
        6 => e,
        7 => e.saturating_add(1 + b % 3),
        8 => {
            // near a 64^k boundary past elapsed
            let k = [1u32, 2, 3, 2][(b % 4) as usize];
            let p = 1u64 << (6 * k);
            let base = (e / p).saturating_add(1).saturating_mul(p);
            base.saturating_add((b >> 8) % 3)
                .saturating_sub((b >> 4) % 3)
        }
        9 => u64::MAX - b % 3,
        10 => m.earliest().unwrap_or(e).saturating_add(b % 3),
        _ => e.saturating_add(4096 + b % 300_000),
    }
}

fn now_for(m: &Model, block: u64, a: u64, b: u64) -> u64 {
    let e = m.elapsed;
    if FOCUS.get() {
        let next = m.earliest().unwrap_or(e);
        return match a % 8 {
            0 | 1 => e.saturating_sub(1 + b % 3000),
            2 => e,
            3 | 4 => next,
            5 => next.saturating_sub(1),
            6 => block.saturating_add(b % 4200),
            _ => next.saturating_add(b % 3),
        };
    }
    match a % 10 {
        0 | 1 => e.saturating_sub(1 + b % 5000),
        2 => e,
        3 | 4 => m.earliest().unwrap_or(e),
        5 => m.earliest().unwrap_or(e).saturating_sub(1),
        6 => m.earliest().unwrap_or(e).saturating_add(b % 5),
        7 => block.saturating_add(b % 4200),
        8 => e.saturating_add(b % 70),
        _ => {
            if b % 16 == 0 {
                u64::MAX
            } else {
                e.saturating_add(b % 300_000)
            }
        }
    }
}

/// The timer an operation targets: the earliest pending one (often the run's head) when
/// `earliest`, else one of the ids issued so far, picked by `a` (maybe ended already).
fn pick(m: &Model, earliest: bool, a: u64) -> Option<u64> {
    if earliest {
        m.queue.values().next().copied()
    } else if m.issued.is_empty() {
        None
    } else {
        Some(m.issued[(a as usize) % m.issued.len()])
    }
}

fn run(start: u64, ops: &[(u8, u64, u64)]) {
    let mut w: Wheel<u64> = Wheel::starting_at(start);
    let mut m = Model {
        queue: BTreeMap::new(),
        timers: HashMap::new(),
        seq: 0,
        elapsed: start,
        next_id: 0,
        issued: Vec::new(),
    };
    // a level-2 slot ahead of start
    let block = (start / 4096).saturating_add(2).saturating_mul(4096);
    let mut out = Vec::new();
    for (step, &(kind, a, b)) in ops.iter().enumerate() {
        let ctx = format!("step {step} op {:?} (start {start})", (kind, a, b));
        if kind % 16 == 15 {
            // shrink_to_fit mid-sequence (a run may be pending), or rarely clear
            if a % 8 == 0 {
                w.clear();
                m.queue.clear();
                m.timers.clear();
                assert!(w.is_empty());
                assert_eq!(w.next_expiration(), None, "{ctx}: after clear");
            } else {
                let before = w.stats();
                w.shrink_to_fit();
                let after = w.stats();
                assert_eq!(after.stale, 0, "{ctx}: shrink_to_fit left stale refs");
                assert_eq!(after.live, before.live, "{ctx}");
                assert!(
                    after.bytes_held <= before.bytes_held,
                    "{ctx}: shrink grew memory"
                );
            }
            check_state(&m, &w, &ctx);
            continue;
        }
        match kind % 9 {
            0..=2 => {
                let d = deadline_for(&m, block, a, b);
                let id = m.next_id;
                m.next_id += 1;
                let key = w.insert(d, id);
                m.file(id, d, false, key);
                m.issued.push(id);
            }
            3 => {
                // cancel: often the earliest (the run's head)
                let id = pick(&m, b % 2 == 0, a);
                if let Some(id) = id {
                    let key = m.timers.get(&id).map(|t| t.key);
                    if let Some(key) = key {
                        assert_eq!(w.cancel(key), Some(id), "{ctx}: cancel");
                        let t = m.timers.remove(&id).unwrap();
                        m.queue.remove(&(t.deadline, t.seq));
                    }
                }
            }
            4 => {
                let id = pick(&m, b % 3 == 0, a);
                if let Some(id) = id {
                    if let Some(t) = m.timers.get(&id).copied() {
                        let d = deadline_for(&m, block, a >> 3, b >> 2);
                        assert!(w.reset(t.key, d), "{ctx}: reset");
                        m.queue.remove(&(t.deadline, t.seq));
                        m.file(id, d, true, t.key);
                    }
                }
            }
            5 | 6 => {
                let now = now_for(&m, block, a, b);
                let eff = now.max(m.elapsed);
                match w.poll(now) {
                    Some(e) => {
                        assert_eq!(Some(e.key), m.timers.get(&e.value).map(|t| t.key), "{ctx}");
                        check_fired(&mut m, &w, e.value, e.deadline, eff, &ctx)
                    }
                    None => {
                        if let Some(d) = m.earliest() {
                            assert!(
                                d > eff,
                                "{ctx}: SKIPPED: poll({now}) None with {d} due (eff {eff}, elapsed {})",
                                w.elapsed()
                            );
                        }
                        m.elapsed = eff;
                        assert_eq!(w.elapsed(), eff, "{ctx}: elapsed after empty poll");
                    }
                }
            }
            7 => {
                let now = now_for(&m, block, a, b);
                let eff = now.max(m.elapsed);
                let limit = 1 + (b as usize >> 20) % 3;
                out.clear();
                let n = w.poll_into(now, limit, &mut out);
                assert_eq!(n, out.len(), "{ctx}");
                assert!(n <= limit);
                for e in out.drain(..) {
                    check_fired_e(&mut m, &w, e.value, e.deadline, eff, &ctx, false);
                }
                if n == limit {
                    assert_eq!(
                        w.elapsed(),
                        m.elapsed,
                        "{ctx}: elapsed after poll_into stopped at limit"
                    );
                }
                if n < limit {
                    if let Some(d) = m.earliest() {
                        assert!(
                            d > eff,
                            "{ctx}: SKIPPED by poll_into({now},{limit})={n}: {d} due"
                        );
                    }
                    m.elapsed = eff;
                    assert_eq!(w.elapsed(), eff, "{ctx}: elapsed after short poll_into");
                }
            }
            _ => {
                // poll all at now
                let now = now_for(&m, block, a, b);
                let eff = now.max(m.elapsed);
                while let Some(e) = w.poll(now) {
                    check_fired(&mut m, &w, e.value, e.deadline, eff, &ctx);
                }
                if let Some(d) = m.earliest() {
                    assert!(d > eff, "{ctx}: SKIPPED after poll-all({now}): {d} due");
                }
                m.elapsed = eff;
                assert_eq!(w.elapsed(), eff, "{ctx}");
            }
        }
        check_state(&m, &w, &ctx);
    }
    // drain everything at the end
    let eff = u64::MAX;
    while let Some(e) = w.poll(u64::MAX) {
        check_fired(&mut m, &w, e.value, e.deadline, eff, "final drain");
    }
    assert!(m.timers.is_empty(), "final drain left {:?}", m.timers.len());
    assert!(w.is_empty());
}

fn start() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => Just(0u64),
        1 => 0u64..300_000,
        1 => Just((1u64 << 32) - 3),
        1 => (0u64..5000).prop_map(|x| (1u64 << 63) + x),
        1 => (0u64..300_000).prop_map(|x| u64::MAX - 300_000 + x),
        1 => (0u64..9000).prop_map(|x| u64::MAX - x),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn the_run_matches_the_model_polled_around_its_deadlines(
        start in start(),
        ops in prop::collection::vec((any::<u8>(), any::<u64>(), any::<u64>()), 1..300),
    ) {
        FOCUS.set(true);
        run(start, &ops);
        FOCUS.set(false);
    }

    #[test]
    fn the_wheel_matches_the_model(
        start in start(),
        ops in prop::collection::vec((any::<u8>(), any::<u64>(), any::<u64>()), 1..250),
    ) {
        run(start, &ops);
    }
}

/// Many timers in one level-2 slot, polled tick by tick with poll_into limits and polls
/// behind elapsed, some reset inside the run.
#[test]
fn run_walk_with_small_limits_and_polls_behind() {
    for start in [0u64, 4095, 1 << 40, u64::MAX - 20_000] {
        let mut ops = Vec::new();
        let mut x = 0x9e3779b97f4a7c15u64 ^ start;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..300 {
            ops.push((0u8, 0u64, rnd()));
        }
        for _ in 0..3000 {
            let k = (rnd() % 9) as u8;
            ops.push((k, rnd(), rnd()));
        }
        run(start, &ops);
    }
}

/// The arena prefetch must never change behaviour: a million timers, half cancelled, a
/// quarter reset, expired with one poll far ahead and also tick by tick.
#[test]
fn million_timers_match_model() {
    let n = 1_000_000u64;
    let mut x = 12345u64;
    let mut rnd = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for mode in 0..2 {
        let mut w: Wheel<u64> = Wheel::with_capacity(n as usize);
        let mut keys = Vec::with_capacity(n as usize);
        let mut model: BTreeMap<(u64, u64), u64> = BTreeMap::new();
        let mut dl = vec![0u64; n as usize];
        let mut seq = 0u64;
        let mut seqs = vec![0u64; n as usize];
        for id in 0..n {
            let d = rnd() % 60_000;
            keys.push(w.insert(d, id));
            seq += 1;
            model.insert((d, seq), id);
            dl[id as usize] = d;
            seqs[id as usize] = seq;
        }
        let mut alive = vec![true; n as usize];
        for _ in 0..n / 2 {
            let id = (rnd() % n) as usize;
            if alive[id] {
                assert_eq!(w.cancel(keys[id]), Some(id as u64));
                alive[id] = false;
                model.remove(&(dl[id], seqs[id]));
            } else {
                assert_eq!(w.cancel(keys[id]), None);
            }
        }
        for _ in 0..n / 4 {
            let id = (rnd() % n) as usize;
            let d = rnd() % 70_000;
            assert_eq!(w.reset(keys[id], d), alive[id]);
            if alive[id] {
                model.remove(&(dl[id], seqs[id]));
                seq += 1;
                model.insert((d, seq), id as u64);
                dl[id] = d;
                seqs[id] = seq;
            }
        }
        assert_eq!(w.len(), model.len());
        let st = w.stats();
        assert_eq!(st.live, model.len());
        assert!(
            st.stale <= 2 * st.live + 8 * 706,
            "stale {} live {}",
            st.stale,
            st.live
        );
        let mut got = Vec::with_capacity(model.len());
        if mode == 0 {
            while let Some(e) = w.poll(100_000) {
                got.push((e.deadline, e.value));
            }
        } else {
            let mut out = Vec::new();
            for now in 0..=70_000u64 {
                loop {
                    out.clear();
                    let k = w.poll_into(now, 7, &mut out);
                    for e in &out {
                        assert_eq!(e.deadline, now, "not fired at its tick");
                        got.push((e.deadline, e.value));
                    }
                    if k < 7 {
                        break;
                    }
                }
            }
        }
        // deadline order exactly; among equal deadlines compare as sets plus never-reset order
        let want: Vec<(u64, u64)> = model.iter().map(|(&(d, _), &id)| (d, id)).collect();
        assert_eq!(got.len(), want.len(), "mode {mode}: count");
        let mut g2 = got.clone();
        let mut w2 = want.clone();
        g2.sort();
        w2.sort();
        assert_eq!(g2, w2, "mode {mode}: fired set");
        for (i, (a, b)) in got.iter().zip(want.iter()).enumerate() {
            assert_eq!(a.0, b.0, "mode {mode}: deadline order at {i}");
        }
        assert!(w.is_empty());
        let st = w.stats();
        assert_eq!(st.live, 0);
        w.shrink_to_fit();
        let st2 = w.stats();
        assert_eq!(st2.stale, 0, "shrink_to_fit leaves stale refs");
        assert!(st2.bytes_held <= st.bytes_held);
        // reuse after shrink and clear
        let k = w.insert(100_001, 7);
        w.clear();
        assert!(!w.contains(k));
        assert_eq!(w.stats().live, 0);
        assert!(w.poll(u64::MAX).is_none());
        let k2 = w.insert(5, 9);
        assert_ne!(k, k2);
        assert_eq!(w.poll(u64::MAX).map(|e| e.value), Some(9));
    }
}
