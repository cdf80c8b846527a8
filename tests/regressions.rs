//! Minimized sequences from the model tests and the fuzz targets, one test each, as plain
//! code. A test marked `#[ignore]` fails today: its reason names the fault and the code that
//! has it; it stays ignored only until that fault is fixed (run them with
//! `cargo test --all-features --test regressions -- --ignored`).

use std::time::{Duration, Instant};

use tickwheel::Wheel;
use tickwheel::sync::Scheduler;

/// Polls everything due at `now`, returning the values in the order they came out.
fn drain<T>(wheel: &mut Wheel<T>, now: u64) -> Vec<T> {
    std::iter::from_fn(|| wheel.poll(now).map(|e| e.value)).collect()
}

/// Found by `tests/wheel_model.rs` with `TICKWHEEL_MODEL_ORDER=fresh-insert`.
///
/// `Wheel::reset` to a later deadline keeps the timer in the slot it sits in (that is what
/// makes the reset free) and files it by its new deadline only when that slot is processed.
/// Among timers of its new deadline it then comes out in the order of that refiling, not as
/// if inserted at the moment of the reset:
///
/// 1. A at 5, reset to 10, then C inserted at 10: C goes straight into slot 10 and A is
///    appended when slot 5 is processed, so C fires first; a fresh insert of A at the time of
///    the reset would fire first.
/// 2. A at 100 and B at 120 share the level-1 slot 64..128; A reset to 120 stays ahead of B
///    in that slot and cascades ahead of it, so A fires first; a fresh insert would be second.
///
/// DESIGN.md promises insertion order among equal deadlines only for timers *never reset*,
/// so this is within the documented contract; issue 2's "a reset behaves as a fresh insert"
/// is read as covering when the timer fires, not its place among equal deadlines. Making it
/// hold would need a sequence number per entry, or giving up the free reset. The model test
/// checks the documented contract (`OrderRule::Documented`) and everything else exactly.
#[test]
#[ignore = "design decision for the wheel's owner: a reset to a later deadline keeps its slot \
            (free) and does not order like a fresh insert among equal deadlines; DESIGN.md \
            promises order among equal deadlines only for never-reset timers"]
fn reset_to_later_deadline_orders_like_a_fresh_insert() {
    let mut wheel = Wheel::new();
    let a = wheel.insert(5, 'a');
    assert!(wheel.reset(a, 10));
    wheel.insert(10, 'c');
    assert_eq!(
        drain(&mut wheel, 10),
        ['a', 'c'],
        "A was reset to 10 before C was inserted at 10"
    );

    let mut wheel = Wheel::new();
    let a = wheel.insert(100, 'a');
    wheel.insert(120, 'b');
    assert!(wheel.reset(a, 120));
    assert_eq!(
        drain(&mut wheel, 200),
        ['b', 'a'],
        "A was reset to 120 after B was inserted at 120"
    );
}

/// `queues()` after: queue 3 gets id `a` (in flight at once), queue 0 gets id 7, queue 3
/// gets id `b` while still non-empty, then `a` is delivered.
fn queues_after(shards: usize, a: u8, b: u8) -> Vec<u8> {
    let t0 = Instant::now();
    let later = t0 + Duration::from_secs(1);
    let sched: Scheduler<u8, u8, u8> = Scheduler::builder().shards(shards).origin(t0).build();
    sched.schedule(3, a, t0, 0).unwrap();
    let mut batch = sched.pop_due(t0, 1);
    let due = batch.next().expect("a is due");
    sched.schedule(0, 7, later, 0).unwrap();
    sched.schedule(3, b, later, 0).unwrap();
    drop(due); // `a` delivered; queue 3 keeps `b`
    sched.queues()
}

/// Found by `tests/scheduler_model.rs` (and `fuzz/` target `scheduler_races`).
///
/// `Scheduler::queues()` promises the queues "in the order they got their first current
/// member (not hash order)". Each shard keeps, per queue, the `seq` of the schedule that made
/// the queue non-empty *in that shard* (`sync/shard.rs`, `Members::since`), and `queues()`
/// sorts by the smallest over the shards. So when a queue's members sit in different shards,
/// its place depends on which ids share a shard — on the id hash and the shard count. Here:
/// queue 3 becomes non-empty (id `a`), then queue 0 (id 7), then queue 3 gains id `b` while
/// still non-empty, then `a` is delivered. With one shard (or `a`, `b` in one shard) the
/// answer is `[3, 0]`; with `a` and `b` in different shards it is `[0, 3]`. Under either
/// reading of "first current member" one of the two answers is wrong, and the same calls
/// give different results for different shard counts.
#[test]
#[ignore = "sync/shard.rs (not this tester's file): queues() order depends on which ids share \
            a shard (Members::since is per shard)"]
fn scheduler_queues_order_does_not_depend_on_shard_count() {
    let a = 6;
    for b in (8..40).filter(|&b| b != 7) {
        let one = queues_after(1, a, b);
        for shards in 2..=8 {
            assert_eq!(
                queues_after(shards, a, b),
                one,
                "ids {a} and {b}, {shards} shards vs 1 shard"
            );
        }
    }
}
