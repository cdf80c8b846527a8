//! Semantics of the core wheel, each contract of docs/design.md tested on its own, with the
//! structural checker run after every step that could break the structure.

use super::*;

mod bound_model;
mod epochs;
mod levels_memory;
mod peeks;
mod runs;
mod unlinks;

/// Polls everything due at `now`, checking invariants before and after.
fn drain(wheel: &mut Wheel<u64>, now: u64) -> Vec<(u64, u64)> {
    wheel.check_invariants();
    let effective = now.max(wheel.elapsed()); // a `now` behind `elapsed` is ignored
    let mut out = Vec::new();
    while let Some(e) = wheel.poll(now) {
        assert!(
            e.deadline <= effective,
            "fired early: deadline {} at now {effective}",
            e.deadline
        );
        out.push((e.deadline, e.value));
    }
    wheel.check_invariants();
    out
}

fn deadlines_around_levels() -> Vec<u64> {
    let mut v = vec![0, 1, 2, 63, u64::MAX - 1, u64::MAX];
    for k in 1..11u32 {
        let p = 1u64 << (6 * k);
        v.extend([p - 1, p, p + 1]);
    }
    v
}

#[test]
fn never_early_never_skipped_every_tick() {
    let mut wheel = Wheel::new();
    let deadlines: Vec<u64> = (0..2000u64).map(|i| (i * 7919) % 5000).collect();
    for (i, &d) in deadlines.iter().enumerate() {
        wheel.insert(d, i as u64);
    }
    let mut fired = Vec::new();
    for now in 0..=5000 {
        for (d, v) in drain(&mut wheel, now) {
            assert_eq!(d, now, "every-tick polling fires exactly at the deadline");
            fired.push(v);
        }
    }
    assert_eq!(fired.len(), deadlines.len());
    assert!(wheel.is_empty());
}

#[test]
fn never_skipped_with_jittered_and_huge_polls() {
    let deadlines = deadlines_around_levels();
    for cadence in [1u64, 3, 61, 64, 65, 4097, 1 << 20, 1 << 40, u64::MAX] {
        let mut wheel = Wheel::new();
        for &d in &deadlines {
            wheel.insert(d, d);
        }
        let mut now = 0u64;
        let mut count = 0;
        let mut step = cadence;
        loop {
            let fired = drain(&mut wheel, now);
            let mut last = 0;
            for (d, v) in fired {
                assert_eq!(d, v);
                assert!(d >= last, "deadline order");
                last = d;
                count += 1;
            }
            if let Some(next) = wheel.next_expiration() {
                assert!(
                    next > now,
                    "after a full poll nothing is due at {now}: next {next}"
                );
            }
            if now == u64::MAX {
                break;
            }
            now = now.saturating_add(step);
            step = step.saturating_mul(2).max(1); // growing, irregular jumps
        }
        assert_eq!(count, deadlines.len(), "cadence {cadence}");
        assert!(wheel.is_empty());
    }
}

#[test]
fn level_boundaries_fire_exactly_when_polled_tick_by_tick_near_them() {
    for k in 1..6u32 {
        let p = 1u64 << (6 * k);
        let mut wheel = Wheel::new();
        for d in [p - 1, p, p + 1] {
            wheel.insert(d, d);
        }
        assert_eq!(drain(&mut wheel, p - 2), vec![]);
        assert_eq!(drain(&mut wheel, p - 1), vec![(p - 1, p - 1)]);
        assert_eq!(drain(&mut wheel, p), vec![(p, p)]);
        assert_eq!(drain(&mut wheel, p + 1), vec![(p + 1, p + 1)]);
    }
}

#[test]
fn past_deadlines_fire_on_next_poll_in_deadline_order() {
    let mut wheel = Wheel::starting_at(1000);
    wheel.insert(500, 500);
    wheel.insert(3, 3);
    wheel.insert(1000, 1000);
    wheel.insert(3, 4);
    assert_eq!(
        drain(&mut wheel, 1000),
        vec![(3, 3), (3, 4), (500, 500), (1000, 1000)]
    );
}

#[test]
fn now_going_backwards_is_ignored() {
    let mut wheel = Wheel::new();
    wheel.insert(100, 1);
    assert_eq!(drain(&mut wheel, 50), vec![]);
    assert_eq!(drain(&mut wheel, 10), vec![]);
    assert_eq!(wheel.elapsed(), 50, "elapsed never moves back");
    wheel.insert(40, 2); // in the past relative to elapsed = 50
    assert_eq!(
        drain(&mut wheel, 0),
        vec![(40, 2)],
        "past timer fires even when now < elapsed"
    );
    assert_eq!(drain(&mut wheel, 99), vec![]);
    assert_eq!(drain(&mut wheel, 100), vec![(100, 1)]);
}

#[test]
fn whole_u64_range_without_clamping() {
    let mut wheel = Wheel::new();
    wheel.insert(u64::MAX, 1);
    wheel.insert(u64::MAX - 1, 2);
    wheel.insert(1 << 63, 3);
    assert_eq!(drain(&mut wheel, u64::MAX - 2), vec![(1 << 63, 3)]);
    assert_eq!(drain(&mut wheel, u64::MAX - 1), vec![(u64::MAX - 1, 2)]);
    assert_eq!(drain(&mut wheel, u64::MAX), vec![(u64::MAX, 1)]);
    assert_eq!(wheel.elapsed(), u64::MAX);
    wheel.insert(u64::MAX, 4);
    wheel.insert(0, 5);
    assert_eq!(drain(&mut wheel, u64::MAX), vec![(0, 5), (u64::MAX, 4)]);
}

#[test]
fn long_uptime_starts_behave_like_fresh() {
    let offsets = [0u64, 1, 63, 64, 65, 4095, 4096, 262_143, 1 << 20, 1 << 30];
    let run = |start: u64| -> Vec<(u64, u64)> {
        let mut wheel = Wheel::starting_at(start);
        for (i, &o) in offsets.iter().enumerate() {
            wheel.insert(start.saturating_add(o), i as u64);
        }
        let mut out = Vec::new();
        let mut now = start;
        while !wheel.is_empty() {
            // Step like a driver that sleeps until the next expiration, but never less than
            // 997 ticks, so polls also land inside slots.
            let next = wheel.next_expiration().unwrap_or(now);
            now = now.saturating_add(997).max(next);
            out.extend(
                drain(&mut wheel, now)
                    .into_iter()
                    .map(|(d, v)| (d - start, v)),
            );
        }
        out
    };
    let fresh = run(0);
    assert_eq!(fresh.len(), offsets.len());
    for start in [
        (1u64 << 30) - 3,
        (1 << 32) - 100,
        (1 << 36) - 5000,
        1 << 63,
        (1 << 63) - 1,
    ] {
        assert_eq!(run(start), fresh, "start {start:#x}");
    }
}

#[test]
fn equal_deadlines_in_insertion_order_across_levels() {
    let mut wheel = Wheel::new();
    let d = 5000; // level 2 from tick 0
    wheel.insert(d, 0);
    wheel.insert(d, 1);
    drain(&mut wheel, 4000); // the level-2 slot has cascaded
    wheel.insert(d, 2); // files at a lower level, after the cascaded ones
    drain(&mut wheel, 4990);
    wheel.insert(d, 3); // level 0
    let fired: Vec<u64> = drain(&mut wheel, d).into_iter().map(|(_, v)| v).collect();
    assert_eq!(fired, vec![0, 1, 2, 3]);
}

#[test]
fn stale_keys_never_touch_the_new_timer() {
    let mut wheel = Wheel::new();
    let old = wheel.insert(10, 1);
    assert_eq!(wheel.cancel(old), Some(1));
    let new = wheel.insert(20, 2);
    assert_eq!(old.index(), new.index(), "slot reused");
    assert_eq!(wheel.cancel(old), None);
    assert!(!wheel.reset(old, 5));
    assert_eq!(wheel.deadline(old), None);
    assert_eq!(wheel.get(old), None);
    assert_eq!(wheel.get_mut(old), None);
    assert!(!wheel.contains(old));
    assert_eq!(wheel.deadline(new), Some(20));
    assert_eq!(drain(&mut wheel, 20), vec![(20, 2)]);
    // A fired key is stale too, and so is a key after clear.
    assert_eq!(wheel.cancel(new), None);
    let k = wheel.insert(30, 3);
    wheel.clear();
    assert!(!wheel.contains(k));
    let k2 = wheel.insert(30, 4);
    assert_eq!(wheel.cancel(k), None);
    assert_eq!(wheel.get(k2), Some(&4));
    // A key that was never issued.
    assert_eq!(wheel.cancel(TimerKey::from_raw_parts(999, 0)), None);
}

#[test]
fn reset_behaves_as_fresh_insert() {
    // Due but not yet polled, reset to the future: waits again.
    let mut wheel = Wheel::new();
    let a = wheel.insert(10, 1);
    let b = wheel.insert(10, 2);
    let mut out = Vec::new();
    assert_eq!(wheel.poll_into(10, 1, &mut out), 1);
    assert!(wheel.reset(b, 50));
    assert_eq!(drain(&mut wheel, 49), vec![]);
    assert_eq!(drain(&mut wheel, 50), vec![(50, 2)]);
    assert_eq!(out[0].key, a);

    // Inserted in the past, reset to the future.
    let mut wheel = Wheel::starting_at(100);
    let k = wheel.insert(5, 7);
    assert!(wheel.reset(k, 300));
    assert_eq!(drain(&mut wheel, 299), vec![]);
    assert_eq!(drain(&mut wheel, 300), vec![(300, 7)]);

    // Reset after reset, earlier then later then earlier across levels.
    let mut wheel = Wheel::new();
    let k = wheel.insert(1 << 20, 9);
    for d in [100u64, 1 << 30, 70, 5000, 65] {
        assert!(wheel.reset(k, d));
        wheel.check_invariants();
        assert_eq!(wheel.deadline(k), Some(d));
    }
    assert_eq!(drain(&mut wheel, 64), vec![]);
    assert_eq!(drain(&mut wheel, 65), vec![(65, 9)]);
}

#[test]
fn reset_later_leaves_no_stale_reference() {
    let mut wheel = Wheel::new();
    let keys: Vec<_> = (0..100).map(|i| wheel.insert(1000 + i, i)).collect();
    for round in 1..=100u64 {
        for &k in &keys {
            let d = wheel.deadline(k).unwrap();
            assert!(wheel.reset(k, d + round));
        }
    }
    assert_eq!(wheel.stats().stale, 0);
    wheel.check_invariants();
}

#[test]
fn next_expiration_contract() {
    let mut wheel: Wheel<u64> = Wheel::new();
    assert_eq!(wheel.next_expiration(), None);
    let a = wheel.insert(40, 0);
    assert_eq!(wheel.next_expiration(), Some(40), "exact within level 0");
    let b = wheel.insert(5000, 0);
    assert_eq!(wheel.next_expiration(), Some(40));
    wheel.cancel(a);
    let next = wheel.next_expiration().unwrap();
    assert!(
        next > 40 && next <= 5000,
        "cancelled timer does not hold it: {next}"
    );
    wheel.cancel(b);
    assert_eq!(wheel.next_expiration(), None, "empty after cancels");
    wheel.insert(3, 0);
    drain(&mut wheel, 2);
    wheel.insert(1, 0); // past
    assert!(wheel.next_expiration().unwrap() <= 1);
}

#[test]
fn poll_into_limits_and_resumes_in_order() {
    let mut wheel = Wheel::new();
    for i in 0..100u64 {
        wheel.insert(i % 10 * 100, i);
    }
    let mut out = Vec::new();
    let mut batches = 0;
    while wheel.poll_into(10_000, 7, &mut out) > 0 {
        batches += 1;
        wheel.check_invariants();
    }
    assert_eq!(batches, 15);
    let got: Vec<(u64, u64)> = out.iter().map(|e| (e.deadline, e.value)).collect();
    let mut want: Vec<(u64, u64)> = (0..100u64).map(|i| (i % 10 * 100, i)).collect();
    want.sort();
    assert_eq!(got, want);
    assert_eq!(wheel.poll_into(10_000, 0, &mut out), 0);
}

#[test]
fn cancel_mix_keeps_stale_references_bounded() {
    let ops: u64 = 10_000_000;
    let mut wheel = Wheel::new();
    let mut keys: Vec<TimerKey> = (0..1000)
        .map(|i| wheel.insert(1_000_000 + i * 997, i))
        .collect();
    let mut max_bytes = 0;
    let mut x = 12345u64;
    for i in 0..ops {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let slot = (x % 1000) as usize;
        let deadline = 1_000 + (x >> 20) % 100_000_000;
        if i % 2 == 0 {
            wheel.cancel(keys[slot]);
            keys[slot] = wheel.insert(deadline, i);
        } else {
            wheel.reset(keys[slot], deadline);
        }
        if i % 4096 == 0 {
            let s = wheel.stats();
            assert!(
                s.stale <= 2 * s.live + 8 * 704 + 16,
                "stale {} live {}",
                s.stale,
                s.live
            );
            max_bytes = max_bytes.max(s.bytes_held);
        }
    }
    wheel.check_invariants();
    assert!(
        max_bytes < 4 << 20,
        "heap grew to {max_bytes} bytes for 1000 live timers"
    );
    wheel.shrink_to_fit();
    assert_eq!(wheel.stats().stale, 0);
    assert!(
        keys.iter().all(|&k| wheel.contains(k)),
        "shrink keeps keys valid"
    );
}

#[test]
fn shrink_to_fit_gives_memory_back() {
    let mut wheel = Wheel::new();
    let keys: Vec<_> = (0..100_000u64).map(|i| wheel.insert(i * 13, i)).collect();
    let full = wheel.stats().bytes_held;
    for &k in &keys[10..] {
        wheel.cancel(k);
    }
    wheel.shrink_to_fit();
    let after = wheel.stats();
    assert!(
        after.bytes_held * 20 < full,
        "{} -> {}",
        full,
        after.bytes_held
    );
    assert_eq!(after.live, 10);
    for &k in &keys[..10] {
        assert!(wheel.contains(k));
    }
    for &k in &keys[10..] {
        assert!(!wheel.contains(k));
    }
    wheel.check_invariants();
}

#[test]
fn a_poll_behind_elapsed_still_takes_what_waits_at_elapsed() {
    // Three timers share a tick of the sorted run; a poll at that tick takes the first.
    // Polls behind `elapsed` poll at `elapsed`: each takes one more, and none may mark the
    // wheel quiet while one still waits (regression: the quiet check after a take compared
    // the run's head with the `now` passed instead of `max(now, elapsed)`).
    let mut wheel = Wheel::new();
    for value in 1..=3 {
        wheel.insert(5000, value);
    }
    assert_eq!(wheel.poll(5000).map(|e| e.value), Some(1));
    assert_eq!(wheel.poll(10).map(|e| e.value), Some(2));
    wheel.check_invariants();
    assert_eq!(wheel.poll(10).map(|e| e.value), Some(3));
    assert!(wheel.poll(10).is_none());
    assert_eq!(wheel.elapsed(), 5000);
}

#[test]
fn polling_every_tick_marks_the_wheel_quiet_after_each_ticks_last_timer() {
    // A take that leaves nothing due by `now` sets `quiet_until` to the next event exactly,
    // so the driver's next polls are one comparison each; timers then still come out on time.
    let mut wheel = Wheel::new();
    let deadlines = [3u64, 3, 70, 4100, 4100, 4101, 9000];
    for (value, &d) in deadlines.iter().enumerate() {
        wheel.insert(d, value as u64);
    }
    let mut fired = Vec::new();
    for now in 0..=10_000u64 {
        while let Some(e) = wheel.poll(now) {
            assert_eq!(e.deadline, now, "fired exactly at its tick");
            fired.push(e.value);
            wheel.check_invariants();
        }
        if let Some(next) = deadlines.iter().copied().find(|&d| d > now) {
            assert!(
                wheel.quiet_until() <= next,
                "quiet until {} past the next deadline {next}",
                wheel.quiet_until()
            );
        }
    }
    assert_eq!(fired, (0..deadlines.len() as u64).collect::<Vec<_>>());
    // Right after the take of a tick's last timer the wheel is quiet up to the next event.
    let mut wheel = Wheel::new();
    wheel.insert(4100, 0u64);
    wheel.insert(4200, 1);
    assert_eq!(wheel.poll(4100).map(|e| e.value), Some(0));
    assert!(
        wheel.quiet_until() > 4100,
        "quiet after the tick's last timer"
    );
    assert!(wheel.quiet_until() <= 4200);
}

#[test]
fn an_insert_lowers_quiet_until_only_for_an_empty_slot() {
    // `quiet_until` is never later than the start of a slot whose bit is set, so an insert
    // into a slot that already has timers leaves it alone; one into an empty slot lowers it.
    let mut wheel = Wheel::new();
    let keys: Vec<TimerKey> = (0..10).map(|i| wheel.insert(130 + i, i)).collect();
    wheel.insert(5000, 99);
    assert!(drain(&mut wheel, 10).is_empty());
    assert_eq!(
        wheel.quiet_until(),
        128,
        "the start of the slot of ticks 128..191"
    );
    // Every timer of that slot cancelled, the unlinks still pending, then one more there.
    for key in keys {
        assert!(wheel.cancel(key).is_some());
    }
    wheel.insert(150, 7);
    wheel.check_invariants();
    assert!(drain(&mut wheel, 149).is_empty());
    assert_eq!(drain(&mut wheel, 150), vec![(150, 7)]);
    // Quiet up to the slot of 5000 (ticks 4096..8191); a timer before it, in an empty slot.
    assert!(drain(&mut wheel, 200).is_empty());
    assert_eq!(wheel.quiet_until(), 4096);
    wheel.insert(260, 8);
    wheel.check_invariants();
    assert_eq!(
        wheel.quiet_until(),
        256,
        "the start of the slot of ticks 256..319"
    );
    assert_eq!(drain(&mut wheel, 260), vec![(260, 8)]);
    assert_eq!(drain(&mut wheel, 5000), vec![(5000, 99)]);
}
