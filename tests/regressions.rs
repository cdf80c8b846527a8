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
/// `Scheduler::queues()` used to keep, per shard and queue, the `seq` of the schedule that
/// made the queue non-empty *in that shard*, and sorted by the smallest over the shards. So
/// when a queue's members sat in different shards, its place depended on which ids shared a
/// shard — on the id hash and the shard count. Here: queue 3 becomes non-empty (id `a`), then
/// queue 0 (id 7), then queue 3 gains id `b` while still non-empty, then `a` is delivered.
/// One shard answered `[3, 0]`, `a` and `b` in different shards `[0, 3]`.
///
/// Now `queues()` orders by each queue's oldest *current* member (lowest `seq` among its
/// pending and in-flight timers), which is `[0, 3]` here for every shard count.
#[test]
fn scheduler_queues_order_does_not_depend_on_shard_count() {
    let a = 6;
    for b in (8..40).filter(|&b| b != 7) {
        let one = queues_after(1, a, b);
        assert_eq!(
            one,
            [0, 3],
            "queue 3's oldest current member is {b}, after 7"
        );
        for shards in 2..=8 {
            assert_eq!(
                queues_after(shards, a, b),
                one,
                "ids {a} and {b}, {shards} shards vs 1 shard"
            );
        }
    }
}

/// The tester's minimal case: (queue 3, id 6), (queue 0, id 7), (queue 3, id 8), all due at
/// t0 + 1 s, then `cancel(&6)`. One shard answered `[3, 0]`, five shards `[0, 3]`.
#[test]
fn scheduler_queues_order_after_cancel_does_not_depend_on_shard_count() {
    for shards in 1..=8 {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(1);
        let sched: Scheduler<u8, u8, ()> = Scheduler::builder().shards(shards).origin(t0).build();
        sched.schedule(3, 6, later, ()).unwrap();
        sched.schedule(0, 7, later, ()).unwrap();
        sched.schedule(3, 8, later, ()).unwrap();
        assert_eq!(sched.queues(), [3, 0], "{shards} shards, before the cancel");
        assert!(sched.cancel(&6).into_cancelled().is_some());
        assert_eq!(
            sched.queues(),
            [0, 3],
            "{shards} shards: queue 3's oldest is now 8"
        );
    }
}

/// Tester's report: public rustdoc pointed readers at private source files (`ticks.rs`,
/// `signal.rs`, `model.rs`, `model/phases.rs`, `model/wake.rs`, `waiter.rs`) and at
/// DESIGN.md, none of which a reader of the published docs has. Scans the doc comments that
/// rustdoc publishes in `src/sync` and `src/tokio` — the module docs of the public modules,
/// and the `///` docs of `pub` items (not `pub(crate)`) — for a file name.
#[test]
fn public_docs_name_no_private_files() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let public_modules = ["sync/mod.rs", "tokio/mod.rs", "tokio/delay_queue.rs"];
    let mut files = Vec::new();
    let mut dirs = vec![root.join("sync"), root.join("tokio")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    assert!(files.len() > 10, "found the sources: {files:?}");
    let names_a_file = |line: &str| {
        line.contains("DESIGN.md")
            || line
                .split(|c: char| !(c.is_alphanumeric() || "_./".contains(c)))
                .any(|word| word.ends_with(".rs") && word.len() > 3)
    };
    let mut bad = Vec::new();
    for path in &files {
        let rel = path
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let text = std::fs::read_to_string(path).unwrap();
        let mut block: Vec<(usize, &str)> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let trimmed = line.trim_start();
            if let Some(doc) = trimmed.strip_prefix("//!") {
                if public_modules.contains(&rel.as_str()) && names_a_file(doc) {
                    bad.push(format!("{rel}:{}: {doc}", n + 1));
                }
            } else if let Some(doc) = trimmed.strip_prefix("///") {
                block.push((n + 1, doc));
            } else if trimmed.starts_with("#[") {
                // Attributes between a doc block and its item.
            } else {
                if trimmed.starts_with("pub ") {
                    for &(n, doc) in block.iter().filter(|(_, doc)| names_a_file(doc)) {
                        bad.push(format!("{rel}:{n}: {doc}"));
                    }
                }
                block.clear();
            }
        }
    }
    assert!(
        bad.is_empty(),
        "public docs name files:\n{}",
        bad.join("\n")
    );
}
