//! `peek` against a brute-force minimum, through resets that keep a timer in its slot (later)
//! or file it again (earlier), cancels and polls, with the slots of levels 0 to 3 busy: a
//! level-2 slot is searched by the deadlines its references were filed for.

use std::collections::HashMap;

use super::*;

/// A pending timer of the model: its deadline, its insertion number, whether it was reset.
#[derive(Clone, Copy)]
struct Pending {
    deadline: u64,
    inserted: u64,
    reset: bool,
}

/// Checks `wheel.peek()` against `model`: the earliest deadline, and among timers never reset
/// that share it, the first inserted (when the earliest deadline has only such timers).
fn check_peek(wheel: &Wheel<u64>, model: &HashMap<TimerKey, Pending>, step: usize) {
    let Some(min) = model.values().map(|p| p.deadline).min() else {
        assert_eq!(wheel.peek(), None, "step {step}: empty");
        return;
    };
    let (key, deadline) = wheel.peek().expect("a pending timer");
    assert_eq!(deadline, min, "step {step}: the earliest deadline");
    let tied: Vec<&Pending> = model.values().filter(|p| p.deadline == min).collect();
    if tied.iter().all(|p| !p.reset) {
        let first = tied.iter().map(|p| p.inserted).min();
        assert_eq!(
            model.get(&key).map(|p| p.inserted),
            first,
            "step {step}: ties in insertion order"
        );
    } else {
        assert_eq!(
            model.get(&key).map(|p| p.deadline),
            Some(min),
            "step {step}"
        );
    }
}

#[test]
fn peek_is_the_earliest_through_resets_cancels_and_polls() {
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move |bound: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % bound
    };
    for round in 0..8u64 {
        let mut wheel = Wheel::new();
        let start = round * 100_003;
        drain(&mut wheel, start);
        let mut model: HashMap<TimerKey, Pending> = HashMap::new();
        let mut keys: Vec<TimerKey> = Vec::new();
        let mut inserted = 0;
        for step in 0..3_000 {
            let now = wheel.elapsed();
            match next(10) {
                // Deadlines within 64, 4 096, 262 144 ticks: levels 0 to 2, some level 3;
                // multiples of 8 make ties.
                0..=3 => {
                    let reach = [64, 4_096, 4_096, 262_144][next(4) as usize];
                    let deadline = now + 1 + (next(reach) & !7);
                    let key = wheel.insert(deadline, inserted);
                    let reset = false;
                    model.insert(
                        key,
                        Pending {
                            deadline,
                            inserted,
                            reset,
                        },
                    );
                    keys.push(key);
                    inserted += 1;
                }
                // A reset later (it stays in its slot) or earlier (filed again).
                4..=6 if !keys.is_empty() => {
                    let key = keys[next(keys.len() as u64) as usize];
                    let Some(p) = model.get_mut(&key) else {
                        continue;
                    };
                    let deadline = if next(2) == 0 {
                        p.deadline + 1 + next(300)
                    } else {
                        now + 1 + next(p.deadline - now)
                    };
                    assert!(wheel.reset(key, deadline));
                    (p.deadline, p.reset) = (deadline, true);
                }
                7 if !keys.is_empty() => {
                    let key = keys.swap_remove(next(keys.len() as u64) as usize);
                    assert_eq!(wheel.cancel(key).is_some(), model.remove(&key).is_some());
                }
                // A poll a little ahead: what it fires leaves the model, in deadline order.
                8 => {
                    let to = now + next(200);
                    for (deadline, value) in drain(&mut wheel, to) {
                        let key = model
                            .iter()
                            .find(|(_, p)| p.inserted == value)
                            .map(|(k, _)| *k);
                        let p = model.remove(&key.expect("fired a pending timer")).unwrap();
                        assert_eq!(p.deadline, deadline, "step {step}: its deadline");
                    }
                }
                _ => {}
            }
            check_peek(&wheel, &model, step);
        }
    }
}
