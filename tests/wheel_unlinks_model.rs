//! Runs of cancels and moving resets with no poll in between — fewer than, exactly and more
//! than the 64 unlinks `Levels::unlink` holds back — checked against a `BTreeMap` model
//! after every step (`support/unlinks_model.rs`): `next_expiration` (`None` iff empty, never
//! later than the earliest deadline, the exact cascade tick when nothing pending was reset),
//! `stats` (live == len, stale <= 2 * live + 8 * 706), stale keys, fired order; and directed
//! cases for the run, stale keys after reuse, `IndexedWheel`, `TimerWheel` and the scheduler.
//! For the held-back unlinks: it catches planted faults that skipped the flush
//! at a poll's entry or miscounted the stale references a flush drops.
//!
//! `PROPTEST_CASES` raises the case count (default 256).

mod support;
use support::unlinks_model;

use unlinks_model::*;
proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn held_back_unlinks_match_model(start in start_strat(), ops in prop::collection::vec(op(), 1..60)) {
        run_against_model(start, &ops);
    }

    /// Longer sequences, fewer cases.
    #[test]
    fn held_back_unlinks_match_model_long(start in start_strat(), ops in prop::collection::vec(op(), 100..250)) {
        run_against_model(start, &ops);
    }
}

/// Applies `ops` to a wheel started at `start` and to the model, checking after every step,
/// then drains both.
fn run_against_model(start: u64, ops: &[Op]) {
    let mut m = M::new(start);
    for op in ops {
        m.apply(op, start);
    }
    m.finish();
}

// ---- Directed tests ----

/// n cancels (all timers of the earliest slot, plus some elsewhere), no poll: next_expiration
/// must skip the emptied slot; then stats, shrink, fire.
#[test]
fn cancel_earliest_slot_then_next_expiration() {
    for start in [0u64, (1 << 32) - 3, 1 << 63, u64::MAX - 400_000] {
        for n in [1usize, 63, 64, 65, 128, 129, 500] {
            let mut m = M::new(start);
            let early: Vec<_> = (0..n).map(|_| m.insert(start + 70)).collect();
            let mid: Vec<_> = (0..n).map(|i| m.insert(start + 5000 + i as u64)).collect();
            m.insert(start + 300_000);
            m.check();
            for &k in &early {
                m.cancel(k);
                m.check();
            }
            for &k in mid.iter().skip(1) {
                m.cancel(k);
                m.check();
            }
            m.cancel(mid[0]);
            m.check();
            assert_eq!(
                m.wheel.next_expiration(),
                Some(cascade_tick(start, start + 300_000))
            );
            m.wheel.shrink_to_fit();
            assert_eq!(m.wheel.stats().stale, 0);
            m.check();
            m.finish();
        }
    }
}

/// Cancels of a level-2 run's timers partway through the run, with more than 64 level
/// cancels pending at the same time.
#[test]
fn run_cancels_with_pending_level_unlinks() {
    for start in [0u64, (1 << 36) + 1, u64::MAX - (1 << 20)] {
        let mut m = M::new(start);
        let mut run = Vec::new();
        for i in 0..3000u64 {
            run.push(m.insert(start + 4096 + (i * 37) % 4096));
        }
        let mut later = Vec::new();
        for i in 0..300u64 {
            later.push(m.insert(start + 8192 + i * 13));
        }
        // Poll partway into the run (slot [4096, 8192)).
        m.poll(start + 4096 + 1000, usize::MAX);
        m.check();
        // Interleave cancels of run timers and level timers without polling.
        for i in 0..200 {
            if let Some(&k) = run.get(i * 7) {
                m.cancel(k);
            }
            if let Some(&k) = later.get(i) {
                m.cancel(k);
            }
            m.check();
        }
        // Reset run timers earlier/later and level timers earlier.
        for i in 0..100 {
            let k = run[2000 + i];
            m.reset(k, start + 4096 + 1500 + i as u64);
            let k = later[200 + i];
            m.reset(k, start + 4096 + 3000 + i as u64);
        }
        m.check();
        m.poll(start + 4096 + 2000, 17);
        m.check();
        m.finish();
    }
}

/// Stale keys after slot reuse, with cancels held back.
#[test]
fn stale_keys_after_reuse_with_pending_unlinks() {
    let mut m = M::new(10);
    let keys: Vec<_> = (0..200).map(|i| m.insert(20 + i % 3)).collect();
    for &k in &keys {
        m.cancel(k);
    }
    m.check();
    // Reuse the entries.
    let fresh: Vec<_> = (0..200).map(|i| m.insert(20 + i % 3)).collect();
    for &k in &keys {
        m.cancel(k);
        m.reset(k, 5);
    }
    m.check();
    for &k in fresh.iter().step_by(2) {
        m.cancel(k);
    }
    m.check();
    m.finish();
}

/// Stale bound under a long cancel-only churn without polls; and clear with pending.
#[test]
fn stale_bound_under_cancel_churn() {
    let mut m = M::new(1 << 40);
    let s = 1u64 << 40;
    let mut live = Vec::new();
    for round in 0..60u64 {
        for i in 0..500u64 {
            live.push(m.insert(s + 1 + (i * 977 + round * 31) % 400_000));
        }
        let keep = live.split_off(live.len() / 10);
        for k in live.drain(..) {
            m.cancel(k);
        }
        live = keep;
        let st = m.wheel.stats();
        assert!(st.stale <= stale_bound(st.live), "{st:?}");
    }
    m.check();
    for k in live.iter().take(70) {
        m.cancel(*k);
    }
    m.wheel.clear();
    m.timers.clear();
    m.by_key.clear();
    m.check();
    assert_eq!(m.wheel.stats().stale, 0);
    // The wheel works after a clear with unlinks pending.
    m.insert(s + 5);
    m.insert(s + 70_000);
    m.finish();
}

/// IndexedWheel: >64 cancels by id, no poll, then next_expiration, then fire.
#[test]
fn indexed_many_cancels() {
    for n in [63u64, 64, 65, 200] {
        let mut w: IndexedWheel<u64, u64> = IndexedWheel::starting_at(u64::MAX - 1_000_000);
        let s = u64::MAX - 1_000_000;
        for i in 0..n {
            w.insert(i, s + 10, i);
        }
        w.insert(10_000, s + 100_000, 0);
        for i in 0..n {
            assert_eq!(w.cancel(&i), Some(i));
            if i + 1 < n {
                assert!(w.next_expiration().unwrap() <= s + 10);
            }
        }
        assert_eq!(w.next_expiration(), Some(cascade_tick(s, s + 100_000)));
        assert!(w.poll(s + 99_999).is_none());
        assert_eq!(w.poll(s + 100_000), Some((10_000, 0)));
        assert!(w.is_empty());
        assert_eq!(w.next_expiration(), None);
    }
}

/// TimerWheel: many cancels without a poll, then poll at a later Instant.
#[test]
fn timer_wheel_many_cancels() {
    use std::time::{Duration, Instant};
    use tickwheel::TimerWheel;
    let t0 = Instant::now();
    let mut w = TimerWheel::with_origin(t0, Duration::from_millis(1));
    let keys: Vec<_> = (0..130u64)
        .map(|i| w.insert_at(t0 + Duration::from_millis(5 + i % 2), i))
        .collect();
    let keep = w.insert_at(t0 + Duration::from_millis(9000), 999);
    for k in keys {
        assert!(w.cancel(k).is_some());
    }
    assert!(w.poll(t0 + Duration::from_millis(8999)).is_none());
    let f = w.poll(t0 + Duration::from_millis(9000)).unwrap();
    assert_eq!((f.key, f.value), (keep, 999));
    assert!(w.is_empty());
}

/// Scheduler: many cancels (one shard, so one wheel) and reschedules without a pop, then
/// next_deadline and pop_due: every timer ends exactly once, none early.
#[test]
fn scheduler_many_cancels_exactly_once() {
    use std::collections::HashSet;
    use std::time::{Duration, Instant};
    use tickwheel::sync::{Cancel, Scheduler};
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    for n in [63u64, 64, 65, 300] {
        let sched: Scheduler<u8, u64, u64> = Scheduler::builder()
            .origin(t0)
            .shards(1)
            .resolution(ms(1))
            .build();
        for id in 0..n {
            sched
                .schedule((id % 3) as u8, id, t0 + ms(10 + id % 5), id)
                .unwrap();
        }
        for id in 0..8 {
            sched
                .schedule(9, 1000 + id, t0 + ms(5000 + id * 100), 1000 + id)
                .unwrap();
        }
        let mut ended = HashSet::new();
        for id in 0..n {
            match sched.cancel(&id) {
                Cancel::Cancelled(v) => assert!(ended.insert(v)),
                _ => panic!("pending id {id} not cancelled"),
            }
        }
        sched.reschedule(&1007, t0 + ms(4000)).unwrap();
        let next = sched.next_deadline().expect("pending");
        assert!(next <= t0 + ms(4000), "next_deadline {next:?} too late");
        assert!(
            next > t0 + ms(100),
            "next_deadline reports cancelled slot: {:?}",
            next - t0
        );
        assert_eq!(sched.pop_due(t0 + ms(3999), 100).len(), 0);
        let mut now = t0 + ms(4000);
        while ended.len() < (n + 8) as usize {
            for due in sched.pop_due(now, 3) {
                assert!(due.deadline() <= now);
                assert!(ended.insert(due.into_value()), "delivered twice");
            }
            now += ms(100);
            assert!(now < t0 + ms(10_000), "lost timers");
        }
        assert!(sched.is_empty());
    }
}
