//! Regression tests for faults found in the core wheel by adversarial testing, each kept as
//! the minimal sequence that showed it. The fix for each covers its whole kind; the comment
//! says which.

use tickwheel::{TimerKey, Wheel};

/// Inserts and cancels a timer at `deadline` 2^19 − 1 times: the next insert reuses the
/// freed index with its stamp epoch wrapped (what both faults below needed).
fn churn(w: &mut Wheel<&'static str>, deadline: u64) {
    for _ in 0..(1u32 << 19) - 1 {
        let k = w.insert(deadline, "churn");
        w.cancel(k);
    }
}

/// Cancels `a` (which holds "A"), churns at `churn_at` and inserts "B" at `at`, which must
/// reuse `a`'s index: a stale reference to `a` now names "B".
fn reuse_after_a_wrap(w: &mut Wheel<&'static str>, a: TimerKey, churn_at: u64, at: u64) {
    assert_eq!(w.cancel(a), Some("A"));
    churn(w, churn_at);
    let b = w.insert(at, "B");
    assert_eq!(b.index(), a.index());
}

/// Polls at `now` until nothing comes out: (deadline, value) of each, in order.
fn poll_all(w: &mut Wheel<&'static str>, now: u64) -> Vec<(u64, &'static str)> {
    std::iter::from_fn(|| w.poll(now))
        .map(|e| (e.deadline, e.value))
        .collect()
}

/// 20-bit stamp epochs wrapped after 2^19 insert/cancel cycles on one index, and a stale
/// due-queue reference then named the new timer with the old timer's deadline as its sort
/// key. Fixed for every container by sweeping stale references whenever an epoch reaches a
/// multiple of 2^19.
#[test]
fn epoch_wrap_stale_due_ref_keeps_deadline_order() {
    let mut w = Wheel::starting_at(1000);
    let a = w.insert(10, "A"); // past: due queue
    w.insert(20, "L"); // keeps the due queue non-empty
    reuse_after_a_wrap(&mut w, a, 5000, 30);
    assert_eq!(poll_all(&mut w, 1000), [(20, "L"), (30, "B")]);
}

/// The same wrap with a stale reference in a level slot broke insertion order among equal
/// deadlines.
#[test]
fn epoch_wrap_stale_slot_ref_keeps_insertion_order() {
    let mut w = Wheel::new();
    let a = w.insert(100, "A"); // level 1
    w.insert(100, "C");
    reuse_after_a_wrap(&mut w, a, 5, 100);
    assert_eq!(poll_all(&mut w, 100), [(100, "C"), (100, "B")]);
}

/// Popping due timers ignored the due queue's compaction signal, so stale references from
/// cancels outlived the bound while a backlog was polled down.
#[test]
fn due_queue_stale_refs_stay_bounded_while_popping() {
    let mut w = Wheel::starting_at(1_000_000);
    for i in 0..10_000u64 {
        w.insert(i, ());
    }
    let late: Vec<_> = (0..10_000u64).map(|i| w.insert(500_000 + i, ())).collect();
    for k in late {
        w.cancel(k);
    }
    let mut out = Vec::new();
    w.poll_into(1_000_000, 9_990, &mut out);
    let s = w.stats();
    assert!(s.stale <= s.live + 8 * 11 * 64 + 8, "{s:?}");
}

/// A timer moved back and forth between the due queue and the wheel, while a backlog keeps
/// the due queue alive, refiles one live index far more than 2^20 times; stale references to
/// it must not come back to life and reorder it. Today compaction on every move already keeps
/// them short-lived; the epoch sweep is the second guard.
#[test]
fn ping_pong_reset_of_one_timer_keeps_order() {
    let mut w = Wheel::starting_at(10_000);
    let backlog: Vec<_> = (0..64u64).map(|i| w.insert(i, i)).collect();
    let k = w.insert(5000, 999);
    for i in 0..(1u64 << 20) + 7 {
        // Past (due queue), then future (a level slot), and again.
        assert!(w.reset(k, if i % 2 == 0 { 100 } else { 20_000 }));
    }
    assert!(w.reset(k, 100));
    let got: Vec<u64> = std::iter::from_fn(|| w.poll(10_000))
        .map(|e| e.value)
        .collect();
    let mut want: Vec<u64> = (0..64).collect();
    want.push(999);
    assert_eq!(got, want);
    assert!(backlog.iter().all(|&b| !w.contains(b)));
}

/// `poll(now)` with `now` behind `elapsed` returned a timer whose deadline was after `now`,
/// while the docs said such a `now` was "ignored" and that a deadline is "never later than the
/// `now` it was polled at". The timer was due (the wheel had reached its deadline), so the
/// fix is the contract: a `now` behind `elapsed` counts as `elapsed` (time never goes
/// backwards), stated on `Wheel::poll`, `Expired::deadline` and `IndexedWheel::poll`.
#[test]
fn now_behind_elapsed_counts_as_elapsed() {
    let mut w = Wheel::new();
    w.insert(2, "a");
    w.insert(2, "b");
    w.insert(3, "c");
    assert_eq!(w.poll(2).map(|e| e.value), Some("a"));
    assert_eq!(w.elapsed(), 2);
    // "b" became due when the wheel reached 2; an earlier `now` does not take that back.
    let b = w.poll(1).expect("due at elapsed");
    assert_eq!((b.value, b.deadline), ("b", 2));
    assert!(b.deadline <= 1u64.max(w.elapsed()));
    // Nothing beyond elapsed comes out, and elapsed does not move back.
    assert!(w.poll(1).is_none());
    assert_eq!(w.elapsed(), 2);
    assert_eq!(w.poll(3).map(|e| e.value), Some("c"));
}

/// `Debug` of a wheel, a `TimerWheel` and a `DelayQueue` is a one-line summary, not the
/// slot table (it was 20 KB empty, 108 KB with 1 000 timers).
#[test]
fn debug_is_a_short_summary() {
    let mut w = Wheel::new();
    for i in 0..1_000u64 {
        w.insert(100 + i * 37, i);
    }
    let text = format!("{w:?}");
    assert_eq!(
        text,
        "Wheel { len: 1000, elapsed: 0, next_expiration: Some(64), stale: 0 }"
    );
    let origin = std::time::Instant::now();
    let mut t = tickwheel::TimerWheel::with_origin(origin, std::time::Duration::from_millis(1));
    for i in 0..1_000u64 {
        t.insert_at(origin + std::time::Duration::from_millis(100 + i), i);
    }
    let text = format!("{t:?}");
    assert!(text.len() < 120, "{} bytes: {text}", text.len());
    assert!(
        text.contains("len: 1000") && text.contains("resolution: 1ms"),
        "{text}"
    );
}
