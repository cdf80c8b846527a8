//! Deterministic scenarios: a busy level-2 slot, stale references, the top of the range.

use super::*;

struct Rng(u64);

impl Rng {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}

/// A busy level-2 slot as the earliest, thousands of timers filed in random order; then
/// resets of the earliest (later by a little, so that references filed after it in the slot
/// carry earlier digits), resets within the slot both ways, to the past, to `u64::MAX`,
/// cancels of the earliest, and polls that step into the slot a few timers at a time.
#[test]
fn a_busy_level_2_slot_through_resets_of_its_earliest() {
    let mut total = 0;
    for (round, &start) in [
        0,
        (1 << 32) + 5,
        1 << 63,
        u64::MAX - 70_000,
        u64::MAX - 9000,
    ]
    .iter()
    .enumerate()
    {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ ((round as u64 + 1) * 0x1234_5678_9abc));
        let mut h = Harness::new(start);
        let base = l2_slot_start(start, 1).unwrap();
        for _ in 0..2000 {
            let d = base + rng.below(4096);
            h.insert(d);
        }
        // Some in the next slot and a level-3 one, so that the search passes a slot.
        for _ in 0..50 {
            let d = base.saturating_add(4096 + rng.below(4096));
            h.insert(d);
            let d = start.saturating_add(262_144 + rng.below(1 << 20));
            h.insert(d);
        }
        h.check_peek("filled");
        for step in 0..1500 {
            let what = format!("round {round} step {step}");
            // The first 1 200 steps leave the busy slot ahead of `elapsed` (no polls, no
            // resets into the past); the rest also step into it.
            let op = if step < 1200 {
                [0, 1, 2, 3, 4, 5, 6, 7, 11, 11][rng.below(10) as usize]
            } else {
                rng.below(12)
            };
            match op {
                0..=3 => {
                    // The earliest moves later by a little: it stays in its slot.
                    let (key, d) = h.wheel.peek().unwrap();
                    let to = d.saturating_add(1 + rng.below(40));
                    h.reset(key, to);
                }
                4 => {
                    let (key, d) = h.wheel.peek().unwrap();
                    h.reset(key, d.saturating_add(rng.below(1 << 22)));
                }
                5 => {
                    // Any timer, within its slot (earlier or later).
                    let key = h.keys[rng.below(h.keys.len() as u64) as usize];
                    if let Some(t) = h.by_key.get(&key) {
                        let to = (t.deadline & !4095) | rng.below(4096);
                        let to = to.max(h.wheel.elapsed().saturating_add(1));
                        h.reset(key, to);
                    }
                }
                6 => {
                    let key = h.keys[rng.below(h.keys.len() as u64) as usize];
                    h.reset(key, u64::MAX);
                }
                7 => {
                    let (key, _) = h.wheel.peek().unwrap();
                    h.cancel(key);
                }
                8 => {
                    let key = h.keys[rng.below(h.keys.len() as u64) as usize];
                    let to = h.wheel.elapsed().saturating_sub(rng.below(3));
                    h.reset(key, to);
                }
                9 => {
                    // Into the slot, a few at a time: the slot becomes the run part-way.
                    let t = h.min_deadline().unwrap().saturating_add(rng.below(8));
                    let l = 1 + rng.below(3) as usize;
                    h.poll_into(t, l);
                }
                10 => h.peek_then_poll(),
                _ => {
                    // A new timer in the busy slot, or earlier than the earliest.
                    let e = h.wheel.elapsed();
                    let m = h.min_deadline().unwrap_or(e);
                    let d = if rng.below(2) == 0 {
                        (m & !4095) | rng.below(4096)
                    } else {
                        m.saturating_sub(rng.below(5))
                    };
                    h.insert(d.max(e.saturating_add(1)));
                }
            }
            h.check_peek(&what);
            if h.by_key.is_empty() {
                break;
            }
        }
        total += h.peeks;
    }
    assert!(total > 5000, "{total} peeks checked");
    print_stats("busy level-2 slot");
}

/// The slot's earliest timers move later one after another, each to just after the next
/// one's filed tick, in both filing orders: every reference's carried digits are then below
/// its timer's deadline, the case the level-2 search relies on.
#[test]
fn moving_each_earliest_just_past_the_next() {
    for reverse in [false, true] {
        for start in [0, (1 << 36) - 5, u64::MAX - 12_000] {
            let mut h = Harness::new(start);
            let base = l2_slot_start(start, 1).unwrap();
            let mut ticks: Vec<u64> = (0..300).map(|i| base + i * 13).collect();
            if reverse {
                ticks.reverse();
            }
            for &d in &ticks {
                h.insert(d);
            }
            for i in 0..2000 {
                let (key, d) = h.wheel.peek().unwrap();
                h.reset(key, d + 14);
                h.check_peek(&format!("reverse {reverse}, start {start}, move {i}"));
            }
        }
    }
    print_stats("moving each earliest");
}

/// Near the top of the range: timers at and just below `u64::MAX` share the last level-2
/// slot; they move to `u64::MAX`, back, and out.
#[test]
fn the_last_level_2_slot_of_the_range() {
    for start in [u64::MAX - 4096 * 3, u64::MAX - 5000, u64::MAX - 4097] {
        let mut h = Harness::new(start);
        let a = h.insert(u64::MAX);
        let b = h.insert(u64::MAX - 1);
        let c = h.insert(u64::MAX - 4095);
        let d = h.insert(u64::MAX);
        h.check_peek("four");
        h.reset(c, u64::MAX);
        h.check_peek("c to MAX");
        h.reset(b, u64::MAX);
        h.check_peek("b to MAX");
        h.reset(a, u64::MAX - 2);
        h.check_peek("a earlier");
        h.cancel(a);
        h.check_peek("a cancelled");
        h.reset(d, u64::MAX - 4095);
        h.check_peek("d to the slot's start");
        h.reset(d, u64::MAX - 3);
        h.check_peek("d later");
        h.poll_into(u64::MAX - 4095, 1);
        h.check_peek("polled into the slot");
        h.poll_into(u64::MAX - 3, 1);
        h.check_peek("polled to d");
        h.poll_all(u64::MAX - 1);
        h.check_peek("polled short of the top");
        h.poll_all(u64::MAX);
        h.check_peek("polled at the top");
    }
}

/// `TimerWheel::next_deadline` near the end of the range (1 ns ticks, `now` about 584 years
/// on): it asks `peek` whether the slot that holds *never due* timers (tick `u64::MAX`) holds
/// anything else. A timer due before `u64::MAX` in that level-2 slot must keep the answer
/// `Some`, also after it moved later while staying in the slot.
#[test]
fn next_deadline_sees_a_timer_beside_never_due_ones_in_the_last_level_2_slot() {
    let origin = std::time::Instant::now();
    let ns = Duration::from_nanos;
    let mut timers = TimerWheel::with_origin(origin, ns(1));
    let Some(late) = origin.checked_add(ns(u64::MAX - 9000)) else {
        return; // this platform's `Instant` cannot go that far
    };
    assert!(timers.poll(late).is_none());
    assert_eq!(timers.wheel().elapsed(), u64::MAX - 9000);
    let never = timers.wheel_mut().insert(u64::MAX, 0);
    let soon = timers.wheel_mut().insert(u64::MAX - 100, 1);
    let never2 = timers.wheel_mut().insert(u64::MAX, 2);
    let cases = [
        (u64::MAX - 50, true),
        (u64::MAX - 4000, true),
        (u64::MAX - 1, true),
        (u64::MAX, false),
        (u64::MAX - 4095, true),
        (u64::MAX, false),
    ];
    for (i, &(to, some)) in cases.iter().enumerate() {
        assert!(timers.wheel_mut().reset(soon, to));
        let next = timers.next_deadline();
        assert_eq!(next.is_some(), some, "case {i}: reset to {to}: {next:?}");
        if let Some(at) = next {
            let tick = at.duration_since(origin).as_nanos() as u64;
            assert!(tick <= to, "case {i}: next deadline {tick} after {to}");
        }
        let (key, d) = timers.wheel().peek().unwrap();
        assert_eq!(d, to);
        if some {
            assert_eq!(key, soon, "case {i}");
        }
    }
    let _ = (never, never2);
}

/// Many cancelled and reset timers leave stale references in a level-2 slot, many of them
/// filed earlier than any live timer (cancels of the earliest, resets earlier within the
/// slot, which file the timer again there): `peek` must skip them and still find the earliest
/// live one, also once the slot's indexes are reused by new timers; then the slot becomes the
/// run and is polled through a few timers at a time.
#[test]
fn stale_references_in_a_level_2_slot() {
    let mut rng = Rng(77);
    for start in [0, (1 << 30) + 5, u64::MAX - 300_000] {
        let mut h = Harness::new(start);
        let base = l2_slot_start(start, 2).unwrap();
        for round in 0..40 {
            for _ in 0..100 {
                h.insert(base + rng.below(4096));
            }
            // Cancel the earliest half; move some earlier within the slot, some later.
            for i in 0..50 {
                let (key, _) = h.wheel.peek().unwrap();
                h.cancel(key);
                if i % 10 == 0 {
                    h.check_peek(&format!("round {round}, cancel {i}"));
                }
            }
            for i in 0..10 {
                let key = h.keys[rng.below(h.keys.len() as u64) as usize];
                if let Some(t) = h.by_key.get(&key) {
                    let to = base + rng.below(t.deadline - base + 1);
                    h.reset(key, to);
                }
                let key = h.keys[rng.below(h.keys.len() as u64) as usize];
                if let Some(t) = h.by_key.get(&key) {
                    let to = t.deadline + rng.below(4096);
                    h.reset(key, to);
                }
                h.check_peek(&format!("round {round}, reset {i}"));
            }
        }
        let mut polls = 0;
        while h.len() > 0 && polls < 400 {
            let t = h.min_deadline().unwrap() + rng.below(3);
            h.poll_into(t, 1 + rng.below(3) as usize);
            h.check_peek(&format!("poll {polls}"));
            polls += 1;
        }
    }
    print_stats("stale references");
}
