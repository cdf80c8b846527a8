//! The sorted run: a slot's timers taken at its start into the due queue, and what `poll_into`
//! limits, cancels, resets and inserts into the past do to it.

use super::*;

/// A wheel whose timers sit in one level-2 slot (ticks 4096..8192), polled up to its start so
/// that the slot becomes the due queue's sorted run; returns the wheel and the deadlines.
fn wheel_with_a_run() -> (Wheel<u64>, Vec<u64>, Vec<TimerKey>) {
    wheel_with_a_run_of(600)
}

/// [`wheel_with_a_run`] with `n` timers: under 24 the run is sorted by comparison, under
/// 512 by radix, from 512 on by counting (see `DueQueue::start_run`).
fn wheel_with_a_run_of(n: u64) -> (Wheel<u64>, Vec<u64>, Vec<TimerKey>) {
    let mut wheel = Wheel::new();
    // Multiples of 16: equal deadlines, whose insertion order the run must keep.
    let deadlines: Vec<u64> = (0..n).map(|i| 4096 + (((i * 7919) % 4096) & !15)).collect();
    let keys = (0..n).map(|i| wheel.insert(deadlines[i as usize], i));
    let keys: Vec<TimerKey> = keys.collect();
    assert!(drain(&mut wheel, 4096).iter().all(|&(d, _)| d == 4096));
    assert!(wheel.due.run_live() > 0, "the level-2 slot became the run");
    (wheel, deadlines, keys)
}

/// [`wheel_with_a_run`] after one `poll_into(now, limit)` has taken the run's first timers;
/// also what that took.
fn partway_through_a_run(
    now: u64,
    limit: usize,
) -> (Wheel<u64>, Vec<u64>, Vec<TimerKey>, Vec<Expired<u64>>) {
    let (mut wheel, deadlines, keys) = wheel_with_a_run();
    let mut out = Vec::new();
    wheel.poll_into(now, limit, &mut out);
    (wheel, deadlines, keys, out)
}

/// The (deadline, insertion index) order a model would fire `deadlines` in, without `skip`.
fn model_order(deadlines: &[u64], from: u64, skip: &[u64]) -> Vec<(u64, u64)> {
    let mut want: Vec<(u64, u64)> = (0..deadlines.len() as u64)
        .map(|i| (deadlines[i as usize], i))
        .filter(|&(d, i)| d > from && !skip.contains(&i))
        .collect();
    want.sort();
    want
}

#[test]
fn run_comes_out_in_deadline_then_insertion_order_under_poll_into_limits() {
    for n in [600, 100, 10] {
        run_order_under_poll_into_limits(n);
    }
}

fn run_order_under_poll_into_limits(n: u64) {
    let (mut wheel, deadlines, _) = wheel_with_a_run_of(n);
    let want = model_order(&deadlines, 4096, &[]);
    let mut out = Vec::new();
    let mut calls = 0;
    while wheel.poll_into(9000, 7, &mut out) == 7 {
        calls += 1;
        wheel.check_invariants();
        let last = out.last().map(|e| e.deadline).unwrap_or(0);
        assert_eq!(
            wheel.elapsed(),
            last,
            "a stopped poll_into leaves elapsed at its last tick"
        );
        if let Some(&(next, _)) = want.get(out.len()) {
            let tick = wheel.next_expiration().expect("timers are pending");
            assert!(
                tick <= next,
                "next_expiration {tick} after the next deadline {next}"
            );
            assert_eq!(
                tick <= last,
                next == last,
                "at or before elapsed iff one is due"
            );
        }
    }
    assert_eq!(
        calls,
        want.len() / 7,
        "every call but the last stopped at its limit"
    );
    let got: Vec<(u64, u64)> = out.iter().map(|e| (e.deadline, e.value)).collect();
    assert_eq!(got, want);
    assert!(wheel.is_empty());
    wheel.check_invariants();
}

#[test]
fn cancel_and_reset_inside_a_run() {
    let (mut wheel, deadlines, keys, out) = partway_through_a_run(5000, 3);
    let at = wheel.elapsed();
    // Timers of tick `at` may still wait behind the three taken: the model is everything
    // after 4096 in order, less what came out.
    let taken: Vec<u64> = out.iter().map(|e| e.value).collect();
    // Cancel every third timer still waiting, the run's head among them.
    let waiting: Vec<u64> = model_order(&deadlines, 4096, &taken)
        .iter()
        .map(|&(_, i)| i)
        .collect();
    let cancelled: Vec<u64> = waiting.iter().copied().step_by(3).collect();
    for &i in &cancelled {
        assert_eq!(wheel.cancel(keys[i as usize]), Some(i));
        wheel.check_invariants();
    }
    // Later (stays in the run), earlier (moves out), into the past (due at once).
    let (later, earlier, past) = (waiting[1], waiting[100], waiting[200]);
    let stale_before = wheel.stats().stale;
    assert!(wheel.reset(keys[later as usize], 100_000));
    assert_eq!(
        wheel.stats().stale,
        stale_before,
        "a later reset leaves no stale reference"
    );
    assert!(wheel.reset(keys[earlier as usize], at + 1));
    assert!(wheel.reset(keys[past as usize], 100));
    wheel.check_invariants();
    let first = wheel
        .poll(at)
        .expect("a reset into the past is due at once");
    assert_eq!((first.deadline, first.value), (100, past));
    let fired = drain(&mut wheel, 200_000);
    let gone: Vec<u64> = taken.iter().chain(&cancelled).copied().collect();
    let mut want = model_order(&deadlines, 4096, &gone);
    want.retain(|&(_, i)| i != later && i != earlier && i != past);
    want.push((at + 1, earlier));
    want.push((100_000, later));
    want.sort();
    assert_eq!(fired, want);
    assert!(wheel.is_empty());
}

#[test]
fn inserts_into_the_past_while_a_run_is_pending() {
    let (mut wheel, deadlines, _, out) = partway_through_a_run(6000, 5);
    let at = wheel.elapsed();
    // Due at `at` (after the run's timers of that tick) and before it (first).
    wheel.insert(at, 1_000_000);
    wheel.insert(at - 1, 1_000_001);
    wheel.insert(10, 1_000_002);
    wheel.check_invariants();
    assert!(wheel.next_expiration().is_some_and(|t| t <= at));
    let rest = drain(&mut wheel, 6000);
    assert_eq!(rest[0], (10, 1_000_002));
    assert_eq!(rest[1], (at - 1, 1_000_001));
    let same: Vec<u64> = rest
        .iter()
        .filter(|&&(d, _)| d == at)
        .map(|&(_, v)| v)
        .collect();
    assert_eq!(
        same.last(),
        Some(&1_000_000),
        "inserted last among its tick"
    );
    let ours: Vec<(u64, u64)> = out
        .iter()
        .map(|e| (e.deadline, e.value))
        .chain(rest.iter().copied().filter(|&(_, v)| v < 1_000_000))
        .collect();
    let want: Vec<(u64, u64)> = model_order(&deadlines, 4096, &[])
        .into_iter()
        .filter(|&(d, _)| d <= 6000)
        .collect();
    assert_eq!(ours, want);
}
