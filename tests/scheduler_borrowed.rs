//! Lookups by a borrowed form of the id or the queue name reach the same shard and the same
//! timer as lookups by the owned form, whatever the shard count.

use std::time::{Duration, Instant};

use tickwheel::IndexedWheel;
use tickwheel::sync::{Cancel, Scheduler};

#[test]
fn string_ids_are_found_by_str_on_every_shard() {
    let t0 = Instant::now();
    for shards in [1, 3, 64] {
        let sched = Scheduler::builder().shards(shards).origin(t0).build();
        for n in 0..500u32 {
            let queue = format!("q{}", n % 7);
            sched
                .schedule(queue, format!("msg-{n}"), t0 + Duration::from_secs(1), n)
                .unwrap();
        }
        for n in (0..500u32).step_by(2) {
            let id = format!("msg-{n}");
            assert_eq!(
                sched.cancel(id.as_str()),
                Cancel::Cancelled(n),
                "{shards} shards, {id}"
            );
        }
        for n in (1..500u32).step_by(2) {
            let id = format!("msg-{n}");
            assert!(
                sched.reschedule(id.as_str(), t0).is_ok(),
                "{shards} shards, {id}"
            );
        }
        assert_eq!(sched.len(), 250);
        let by_queue: usize = (0..7)
            .map(|q| sched.queue_len(format!("q{q}").as_str()))
            .sum();
        assert_eq!(by_queue, 250);
        let drained = sched.drain_queue("q3");
        assert!(
            drained
                .cancelled
                .iter()
                .all(|(id, n)| *id == format!("msg-{n}") && n % 7 == 3)
        );
        assert_eq!(sched.queue_len("q3"), 0);
    }
}

#[test]
fn byte_vector_ids_are_found_by_slice() {
    let t0 = Instant::now();
    let sched = Scheduler::builder().shards(16).origin(t0).build();
    for n in 0..200u8 {
        sched.schedule("q", vec![n, n, n], t0, n).unwrap();
    }
    for n in 0..200u8 {
        assert_eq!(sched.cancel(&[n, n, n][..]), Cancel::Cancelled(n));
    }
    assert!(sched.is_empty());

    let mut wheel = IndexedWheel::new();
    wheel.insert(vec![1u8, 2, 3], 5, 'a');
    assert_eq!(wheel.deadline(&[1u8, 2, 3][..]), Some(5));
    assert!(wheel.reset(&[1u8, 2, 3][..], 9));
    assert_eq!(wheel.cancel(&[1u8, 2, 3][..]), Some('a'));
}

#[test]
fn frozen_string_queue_is_handled_by_str() {
    let t0 = Instant::now();
    let sched = Scheduler::builder().shards(4).origin(t0).build();
    for n in 0..20u32 {
        sched
            .schedule(String::from("example.com"), n, t0, n)
            .unwrap();
    }
    let frozen = sched.freeze_queue("example.com");
    assert_eq!(frozen.pending.len(), 20);
    assert!(sched.is_frozen("example.com"));
    assert!(sched.queue_in_flight("example.com").is_empty());
    assert!(sched.take_forwarded("example.com").is_empty());
    assert_eq!(
        sched
            .import("example.com", frozen.pending.clone())
            .refused
            .len(),
        20
    );
    assert_eq!(sched.unfreeze_queue("example.com"), 0);
    assert_eq!(sched.import("example.com", frozen.pending).imported, 20);
    assert_eq!(sched.queue_len("example.com"), 20);
}

/// `import` takes the queue as `schedule` does: with `Q = &'static str` (the README's type),
/// `import("q", ..)` compiles and lands in the queue `schedule("q", ..)` filled; the
/// reference forms (`&"q"`, and `"q"` for a `String` name) still work.
/// A frozen timer `id` due `at`, its value its id.
fn frozen(id: u32, at: Instant) -> tickwheel::sync::FrozenEntry<u32, u32> {
    tickwheel::sync::FrozenEntry { id, at, value: id }
}

#[test]
fn import_takes_the_queue_as_schedule_does() {
    let t0 = Instant::now();
    let at = t0 + Duration::from_secs(60);
    let sched: Scheduler<&'static str, u32, u32> = Scheduler::builder().origin(t0).build();
    sched.schedule("q", 1, at, 1).unwrap();
    let entry = frozen(5, at);
    assert_eq!(sched.import("q", vec![entry]).imported, 1);
    let entry = frozen(2, at);
    #[allow(clippy::needless_borrows_for_generic_args)] // the form that had to be written
    let imported = sched.import(&"q", vec![entry]).imported;
    assert_eq!(imported, 1);
    assert_eq!(sched.queue_len("q"), 3);

    let owned: Scheduler<String, u32, u32> = Scheduler::builder().origin(t0).build();
    let entry = frozen(3, at);
    assert_eq!(owned.import("q", vec![entry]).imported, 1);
    let entry = frozen(4, at);
    assert_eq!(owned.import(String::from("q"), vec![entry]).imported, 1);
    assert_eq!(owned.queue_len("q"), 2);
}
