//! `tickwheel::tokio::DelayQueue`: every method, stale keys, far deadlines, ordering and
//! `Stream` use, under tokio's paused clock. Lost wakeups are in `tokio_delay_queue_wakeups.rs`,
//! the side-by-side comparison with `tokio_util::time::DelayQueue` in
//! `tokio_delay_queue_compat.rs`.
#![cfg(feature = "tokio")]

mod support;

use std::collections::HashSet;
use std::marker::PhantomPinned;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};
use std::task::Poll;

use futures_util::{Stream, StreamExt};
use support::delay_queue::*;
use tickwheel::tokio::{DelayQueue, Expired, Key};
use tokio::time::{self, Duration, Instant};

fn panic_message(f: impl FnOnce()) -> String {
    let payload = catch_unwind(AssertUnwindSafe(f)).expect_err("expected a panic");
    match payload.downcast::<String>() {
        Ok(s) => *s,
        Err(p) => p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .unwrap_or_default(),
    }
}

// ---------------------------------------------------------------------------------------
// Every method
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn constructors_capacity_and_reserve() {
    let q: DelayQueue<u8> = DelayQueue::new();
    assert!(q.is_empty() && q.peek().is_none());
    assert_eq!(q.len(), 0);
    let q: DelayQueue<u8> = DelayQueue::default();
    assert!(q.is_empty());
    let mut q: DelayQueue<u8> = DelayQueue::with_capacity(10);
    assert!(q.capacity() >= 10, "capacity {}", q.capacity());
    q.insert(1, secs(1));
    q.reserve(100);
    assert!(q.capacity() >= 101, "capacity {}", q.capacity());
    assert_eq!(q.len(), 1);
}

#[test]
fn a_queue_is_made_and_filled_outside_a_runtime() {
    // tokio-util needs a runtime to insert; this queue only needs one to poll.
    let (mut q, key) = holding("x", secs(1));
    assert!(q.contains(&key));
    assert_eq!(q.remove(&key).into_inner(), "x");
}

#[tokio::test(start_paused = true)]
async fn insert_comes_out_at_its_deadline_not_before() {
    let start = Instant::now();
    let (mut q, key) = holding("a", ms(100));
    assert_eq!(q.deadline(&key), start + ms(100));
    assert_eq!(q.len(), 1);
    time::advance(ms(99)).await;
    assert!(poll_now(&mut q).is_pending(), "1 ms early");
    time::advance(ms(1)).await;
    let e = match poll_now(&mut q) {
        Poll::Ready(Some(e)) => e,
        other => panic!("expected the entry at its deadline, got {other:?}"),
    };
    assert_eq!(
        (e.key(), e.deadline(), *e.get_ref()),
        (key, start + ms(100), "a")
    );
    assert!(matches!(poll_now(&mut q), Poll::Ready(None)));
    assert!(q.is_empty());
}

#[tokio::test(start_paused = true)]
async fn deadlines_round_up_to_the_next_millisecond() {
    let start = Instant::now();
    let mut q = DelayQueue::new();
    let key = q.insert_at("a", start + Duration::from_micros(1_500));
    assert_eq!(q.deadline(&key), start + ms(2));
    time::advance(Duration::from_micros(1_999)).await;
    assert!(
        poll_now(&mut q).is_pending(),
        "the deadline is 1.5 ms: not out at 1.999 ms"
    );
    assert_eq!(drain_after(&mut q, Duration::from_micros(1)).await, ["a"]);
}

#[tokio::test(start_paused = true)]
async fn zero_and_past_deadlines_come_out_on_the_next_poll() {
    let long_ago = Instant::now();
    time::advance(secs(10)).await;
    let created = Instant::now();
    let mut q = DelayQueue::new();
    time::advance(secs(1)).await;
    let now = Instant::now();
    let zero = q.insert("zero", Duration::ZERO);
    let past = q.insert_at("past", now - ms(3));
    let before_origin = q.insert_at("before the queue existed", long_ago);
    assert_eq!(q.deadline(&zero), now);
    assert_eq!(
        q.deadline(&past),
        now - ms(3),
        "a past deadline is kept as asked"
    );
    assert_eq!(
        q.deadline(&before_origin),
        created,
        "reads as the queue's creation"
    );
    assert_eq!(
        drain_now(&mut q),
        ["before the queue existed", "past", "zero"],
        "deadline order"
    );
}

#[tokio::test(start_paused = true)]
async fn remove_and_try_remove() {
    let start = Instant::now();
    let (mut q, a) = holding("a", secs(1));
    let b = q.insert("b", secs(2));
    let e = q.remove(&a);
    assert_eq!(
        (e.key(), e.deadline(), e.into_inner()),
        (a, start + secs(1), "a")
    );
    assert_eq!(q.len(), 1);
    let e = q.try_remove(&b).expect("b is in the queue");
    assert_eq!(
        (e.key(), e.deadline(), e.into_inner()),
        (b, start + secs(2), "b")
    );
    assert!(q.try_remove(&b).is_none());
    assert!(q.is_empty());
    time::advance(secs(5)).await;
    assert!(
        matches!(poll_now(&mut q), Poll::Ready(None)),
        "removed entries never come out"
    );
}

#[tokio::test(start_paused = true)]
async fn remove_of_a_due_entry_not_yet_polled() {
    let (mut q, a) = holding("a", ms(5));
    q.insert("b", ms(6));
    time::advance(ms(10)).await;
    assert_eq!(q.remove(&a).into_inner(), "a");
    assert_eq!(drain_now(&mut q), ["b"]);
}

#[tokio::test(start_paused = true)]
async fn reset_and_reset_at_move_deadlines_both_ways() {
    let start = Instant::now();
    let (mut q, a) = holding("a", secs(1));
    let b = q.insert("b", secs(2));
    q.reset(&a, secs(3));
    assert_eq!(q.deadline(&a), start + secs(3));
    q.reset_at(&b, start + ms(500));
    assert_eq!(q.deadline(&b), start + ms(500));
    assert!(drain_after(&mut q, ms(499)).await.is_empty());
    assert_eq!(drain_after(&mut q, ms(1)).await, ["b"]);
    assert!(
        drain_after(&mut q, ms(2_499)).await.is_empty(),
        "a was moved from 1 s to 3 s"
    );
    assert_eq!(drain_after(&mut q, ms(1)).await, ["a"]);
}

#[tokio::test(start_paused = true)]
async fn reset_of_a_due_entry_not_yet_polled_makes_it_wait_again() {
    let (mut q, a) = holding("a", ms(5));
    time::advance(ms(10)).await;
    q.reset(&a, ms(10));
    assert!(poll_now(&mut q).is_pending());
    time::advance(ms(9)).await;
    assert!(poll_now(&mut q).is_pending());
    assert_eq!(drain_after(&mut q, ms(1)).await, ["a"]);
}

#[tokio::test(start_paused = true)]
async fn reset_to_the_past_comes_out_at_once() {
    let (mut q, a) = holding("a", secs(60));
    time::advance(secs(1)).await;
    q.reset_at(&a, Instant::now() - ms(500));
    assert_eq!(drain_now(&mut q), ["a"]);
}

#[tokio::test(start_paused = true)]
async fn try_reset_and_try_deadline_and_contains() {
    let start = Instant::now();
    let (mut q, a) = holding("a", secs(1));
    assert!(q.contains(&a));
    assert!(q.try_reset(&a, secs(4)));
    assert_eq!(q.try_deadline(&a), Some(start + secs(4)));
    assert!(q.try_reset_at(&a, start + secs(2)));
    assert_eq!(q.try_deadline(&a), Some(start + secs(2)));
    q.remove(&a);
    assert!(!q.contains(&a));
    assert!(!q.try_reset(&a, secs(1)));
    assert!(!q.try_reset_at(&a, start));
    assert_eq!(q.try_deadline(&a), None);
}

#[tokio::test(start_paused = true)]
async fn peek_names_the_next_entry_and_follows_changes() {
    let mut q = DelayQueue::new();
    assert_eq!(q.peek(), None);
    let foo = q.insert("foo", secs(10));
    let bar = q.insert("bar", secs(5));
    let baz = q.insert("baz", secs(15));
    assert_eq!(q.peek(), Some(bar));
    assert_eq!(q.peek(), Some(bar), "repeated peek (cached)");
    q.reset(&baz, secs(1));
    assert_eq!(q.peek(), Some(baz), "a reset earlier takes the lead");
    q.remove(&baz);
    assert_eq!(q.peek(), Some(bar));
    q.reset(&bar, secs(20));
    assert_eq!(q.peek(), Some(foo), "a reset later gives the lead away");
    let early = q.insert("early", secs(2));
    assert_eq!(q.peek(), Some(early), "an insert earlier takes the lead");
    assert_eq!(drain_after(&mut q, secs(2)).await, ["early"]);
    assert_eq!(q.peek(), Some(foo));
    q.clear();
    assert_eq!(q.peek(), None);
}

#[tokio::test(start_paused = true)]
async fn peek_agrees_with_poll_even_for_ties_among_reset_entries() {
    // The core wheel orders reset entries within one tick its own way; peek must still name
    // exactly the entry poll_expired yields next.
    let mut q = DelayQueue::new();
    let mut keys = Vec::new();
    for i in 0..40u32 {
        keys.push(q.insert(i, ms(100 + u64::from(i % 3) * 70)));
    }
    for (i, key) in keys.iter().enumerate() {
        if i % 4 != 0 {
            q.reset(key, ms(240)); // most entries now tie at 240 ms, some after a reset
        }
    }
    q.insert(99, ms(240));
    time::advance(secs(1)).await;
    let mut seen = 0;
    while let Some(next) = q.peek() {
        let Poll::Ready(Some(e)) = poll_now(&mut q) else {
            panic!("entry {next:?} is due")
        };
        assert_eq!(e.key(), next, "peek said {next:?}, poll gave {:?}", e.key());
        seen += 1;
    }
    assert_eq!(seen, 41);
}

#[tokio::test(start_paused = true)]
async fn clear_empties_the_queue_and_makes_every_key_stale() {
    let mut q = DelayQueue::new();
    let keys: Vec<Key> = (0..5).map(|i| q.insert(i, secs(i))).collect();
    let capacity = q.capacity();
    q.clear();
    assert!(q.is_empty());
    assert_eq!(q.capacity(), capacity, "clear keeps the capacity");
    assert!(matches!(poll_now(&mut q), Poll::Ready(None)));
    let fresh: Vec<Key> = (0..5).map(|i| q.insert(i + 10, secs(1))).collect();
    for k in &keys {
        assert!(!q.contains(k), "{k:?} is stale after clear");
        assert!(!fresh.contains(k), "{k:?} is not reissued");
    }
    assert_eq!(drain_after(&mut q, secs(1)).await, [10, 11, 12, 13, 14]);
}

#[tokio::test(start_paused = true)]
async fn shrink_to_fit_and_compact_give_memory_back_and_keep_keys() {
    let start = Instant::now();
    let mut q = DelayQueue::with_capacity(100);
    let keys: Vec<Key> = (0..10).map(|i| q.insert(i, secs(i + 1))).collect();
    for k in &keys[3..] {
        q.remove(k);
    }
    q.shrink_to_fit();
    assert!(q.capacity() < 100, "capacity {}", q.capacity());
    assert!(q.capacity() >= 3);
    q.compact();
    for (i, k) in keys[..3].iter().enumerate() {
        assert_eq!(q.deadline(k), start + secs(i as u64 + 1), "keys stay valid");
    }
    // Storage truncated by the shrink is reused, and the keys that named it stay stale.
    let fresh: Vec<Key> = (0..7).map(|i| q.insert(100 + i, secs(1))).collect();
    for k in &keys[3..] {
        assert!(
            !q.contains(k) && !fresh.contains(k),
            "{k:?} must stay stale"
        );
    }
    assert_eq!(q.len(), 10);
}

#[tokio::test(start_paused = true)]
async fn expired_accessors() {
    let start = Instant::now();
    let (mut q, key) = holding(vec![1], ms(7));
    time::advance(ms(7)).await;
    let Poll::Ready(Some(mut e)) = poll_now(&mut q) else {
        panic!("due")
    };
    e.get_mut().push(2);
    assert_eq!(e.get_ref(), &[1, 2]);
    assert_eq!(e.deadline(), start + ms(7));
    assert_eq!(e.key(), key);
    assert_eq!(e.clone().into_inner(), vec![1, 2]);
    assert!(format!("{e:?}").contains("[1, 2]"));
}

#[tokio::test(start_paused = true)]
async fn keys_are_copy_hash_eq_and_debug_shows_the_generation() {
    let (mut q, a) = holding((), secs(1));
    let copy = a;
    assert_eq!(a, copy);
    q.remove(&a);
    let b = q.insert((), secs(1)); // reuses a's storage slot
    assert_ne!(a, b);
    let set: HashSet<Key> = [a, b, copy].into_iter().collect();
    assert_eq!(set.len(), 2);
    let (da, db) = (format!("{a:?}"), format!("{b:?}"));
    assert!(
        da.starts_with("Key(") && db.starts_with("Key("),
        "{da} {db}"
    );
    assert_ne!(
        da, db,
        "the generation tells a stale key from its successor"
    );
}

#[test]
fn auto_traits_match_tokio_util() {
    fn send_sync<T: Send + Sync>() {}
    fn unpin<T: Unpin>() {}
    fn stream<S: Stream<Item = Expired<T>>, T>() {}
    send_sync::<DelayQueue<String>>();
    send_sync::<Key>();
    send_sync::<Expired<String>>();
    unpin::<DelayQueue<PhantomPinned>>();
    stream::<DelayQueue<u8>, u8>();
}

// ---------------------------------------------------------------------------------------
// Stale keys: fired, removed, slot reused
// ---------------------------------------------------------------------------------------

/// Checks that `stale` touches nothing, with `other` live in the same queue.
fn assert_stale(q: &mut DelayQueue<&'static str>, stale: Key, other: Key) {
    let other_deadline = q.deadline(&other);
    let len = q.len();
    assert!(!q.contains(&stale));
    assert_eq!(q.try_deadline(&stale), None);
    assert!(q.try_remove(&stale).is_none());
    assert!(!q.try_reset(&stale, secs(1)));
    assert!(!q.try_reset_at(&stale, Instant::now()));
    for (op, msg) in [
        ("remove", panic_message(|| _ = q.remove(&stale))),
        ("reset", panic_message(|| q.reset(&stale, secs(1)))),
        (
            "reset_at",
            panic_message(|| q.reset_at(&stale, Instant::now())),
        ),
        ("deadline", panic_message(|| _ = q.deadline(&stale))),
    ] {
        assert!(
            msg.contains(&format!("{stale:?}")),
            "{op}: message names the key: {msg}"
        );
        assert!(
            msg.contains(op) && msg.contains("not in the queue"),
            "{op}: {msg}"
        );
    }
    assert_eq!(
        (q.len(), q.deadline(&other)),
        (len, other_deadline),
        "the other entry is untouched"
    );
    assert!(q.contains(&other));
}

#[tokio::test(start_paused = true)]
async fn a_fired_key_is_stale_even_after_its_slot_is_reused() {
    let (mut q, fired) = holding("fired", ms(1));
    assert_eq!(drain_after(&mut q, ms(1)).await, ["fired"]);
    let next = q.insert("next", secs(10)); // takes the fired entry's slot
    assert_stale(&mut q, fired, next);
}

#[tokio::test(start_paused = true)]
async fn a_removed_key_is_stale_even_after_its_slot_is_reused() {
    let (mut q, removed) = holding("removed", secs(1));
    q.remove(&removed);
    let next = q.insert("next", secs(10));
    assert_stale(&mut q, removed, next);
    assert_eq!(drain_after(&mut q, secs(10)).await, ["next"]);
}

#[tokio::test(start_paused = true)]
async fn a_stale_key_survives_many_reuses_of_its_slot() {
    let (mut q, first) = holding("first", secs(1));
    q.remove(&first);
    for _ in 0..100 {
        let k = q.insert("again", secs(1));
        q.remove(&k);
    }
    let last = q.insert("last", secs(2));
    assert_stale(&mut q, first, last);
}

#[tokio::test(start_paused = true)]
#[should_panic(expected = "DelayQueue::remove")]
async fn remove_of_a_stale_key_panics() {
    let (mut q, k) = holding((), secs(1));
    q.remove(&k);
    q.remove(&k);
}

// ---------------------------------------------------------------------------------------
// Far deadlines and long-lived queues
// ---------------------------------------------------------------------------------------

const YEAR: Duration = Duration::from_secs(365 * 86_400);

#[tokio::test(start_paused = true)]
async fn deadlines_past_tokios_two_year_range() {
    let start = Instant::now();
    let (mut q, three_years) = holding("3y", YEAR * 3);
    let far = q.insert_at("35k years", start + Duration::from_secs(1 << 40));
    let never = q.insert("never", Duration::MAX);
    assert_eq!(q.deadline(&three_years), start + YEAR * 3);
    assert_eq!(q.deadline(&far), start + Duration::from_secs(1 << 40));
    assert!(
        q.deadline(&never) > start + Duration::from_secs(1 << 50),
        "Duration::MAX saturates"
    );
    assert_eq!(q.peek(), Some(three_years));
    assert!(
        drain_after(&mut q, YEAR * 3 - ms(1)).await.is_empty(),
        "1 ms early"
    );
    assert_eq!(drain_after(&mut q, ms(1)).await, ["3y"]);
    q.reset(&far, YEAR * 5);
    assert_eq!(q.deadline(&far), start + YEAR * 8);
    assert_eq!(q.remove(&never).into_inner(), "never");
}

#[tokio::test(start_paused = true)]
async fn a_task_waits_more_than_two_years_and_wakes_on_time() {
    let (q, _) = shared(&[("3y", YEAR * 3)]);
    let task = spawn_next(&q);
    let (item, waited) = finishes_at(task, YEAR * 3 - ms(1), YEAR * 3).await;
    assert_eq!((item, waited), (Some("3y"), YEAR * 3));
}

#[tokio::test(start_paused = true)]
async fn a_queue_older_than_2_pow_36_ms_behaves_like_a_new_one() {
    let start = Instant::now();
    let mut q = DelayQueue::new();
    let edge = q.insert_at("edge", start + ms((1 << 36) + 10));
    assert!(drain_after(&mut q, ms(1 << 36)).await.is_empty());
    assert!(drain_after(&mut q, ms(9)).await.is_empty());
    assert_eq!(drain_after(&mut q, ms(1)).await, ["edge"]);
    assert!(!q.contains(&edge));

    time::advance(ms(1 << 37)).await;
    assert!(matches!(poll_now(&mut q), Poll::Ready(None)));
    let now = Instant::now();
    let a = q.insert("a", ms(5));
    q.insert("b", ms(64 * 64 + 3));
    assert_eq!(q.deadline(&a), now + ms(5));
    assert!(drain_after(&mut q, ms(4)).await.is_empty());
    assert_eq!(drain_after(&mut q, ms(1)).await, ["a"]);
    assert!(drain_after(&mut q, ms(64 * 64 - 3)).await.is_empty());
    assert_eq!(drain_after(&mut q, ms(1)).await, ["b"]);

    // And with a task waiting through the Stream.
    let shared = Arc::new(Mutex::new(q));
    shared.lock().unwrap().insert("c", secs(90));
    let task = spawn_next(&shared);
    let (item, waited) = finishes_at(task, ms(89_999), secs(90)).await;
    assert_eq!((item, waited), (Some("c"), secs(90)));
}

// ---------------------------------------------------------------------------------------
// Order and the Stream
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn equal_deadlines_come_out_in_insertion_order() {
    let start = Instant::now();
    let mut q = DelayQueue::new();
    for i in 0..60u32 {
        match i % 3 {
            0 => q.insert(i, secs(2)),
            1 => q.insert_at(i, start + secs(2)),
            // A later instant within the same millisecond rounds to the same deadline.
            _ => q.insert_at(i, start + secs(2) - Duration::from_micros(u64::from(i))),
        };
        q.insert(1_000 + i, secs(1)); // interleaved, earlier
    }
    let out = drain_after(&mut q, secs(2)).await;
    let want: Vec<u32> = (1_000..1_060).chain(0..60).collect();
    assert_eq!(out, want);
}

#[tokio::test(start_paused = true)]
async fn equal_past_deadlines_come_out_in_insertion_order() {
    time::advance(secs(5)).await;
    let mut q = DelayQueue::new();
    time::advance(secs(1)).await;
    let past = Instant::now() - ms(700);
    for i in 0..20u32 {
        q.insert_at(i, past);
    }
    assert_eq!(drain_now(&mut q), (0..20).collect::<Vec<_>>());
}

#[tokio::test(start_paused = true)]
async fn stream_next_yields_in_deadline_order_and_resumes_after_none() {
    let start = Instant::now();
    let mut q = DelayQueue::new();
    for (v, d) in [("c", 300), ("a", 100), ("d", 5_000), ("b", 200)] {
        q.insert(v, ms(d));
    }
    let mut got = Vec::new();
    while let Some(e) = q.next().await {
        // The paused clock jumps straight to each deadline.
        got.push((e.into_inner(), start.elapsed()));
    }
    assert_eq!(
        got,
        [
            ("a", ms(100)),
            ("b", ms(200)),
            ("c", ms(300)),
            ("d", ms(5_000))
        ]
    );
    assert!(q.next().await.is_none(), "empty: None again");
    q.insert("e", ms(50));
    let e = q
        .next()
        .await
        .expect("the stream resumes after a later insert");
    assert_eq!((e.into_inner(), start.elapsed()), ("e", ms(5_050)));
}

#[tokio::test(start_paused = true)]
async fn every_entry_comes_out_exactly_at_its_deadline_through_many_rearms() {
    // Many arm/re-arm cycles of the one sleep: a stale registration would show up as a missed
    // or early entry. (That the sleep is reset, not re-allocated, is a unit test in poll.rs.)
    let start = Instant::now();
    let mut q = DelayQueue::new();
    let mut at = 0;
    for i in 0..200u64 {
        let d = 1 + (i * 7919) % 5_000;
        at += d;
        q.insert_at(i, start + ms(at));
    }
    let mut n = 0;
    while let Some(e) = q.next().await {
        assert_eq!(Instant::now(), e.deadline(), "out exactly at its deadline");
        assert_eq!(*e.get_ref(), n);
        n += 1;
    }
    assert_eq!(n, 200);
}

/// An `Expired` makes its deadline `Instant` when asked: `deadline`, `Debug` and `==` all see
/// the instant asked for (rounded up to 1 ms), whether it came from `remove` or a poll.
#[tokio::test(start_paused = true)]
async fn expired_reports_its_deadline_in_debug_and_equality() {
    let start = Instant::now();
    let mut q = DelayQueue::new();
    let at = start + Duration::from_micros(2_500);
    let key = q.insert_at(7u32, at);
    let removed = q.remove(&key);
    let rounded = start + ms(3);
    assert_eq!(removed.deadline(), rounded);
    let text = format!("{removed:?}");
    assert!(
        text.starts_with("Expired { data: 7, deadline: ") && text.contains("key: Key("),
        "{text}"
    );
    assert!(text.contains(&format!("{rounded:?}")), "{text}");
    let same = removed.clone();
    assert_eq!(same, removed);
    q.insert_at(7u32, at);
    time::advance(ms(3)).await;
    let polled = q.next().await.expect("due at 3 ms");
    assert_eq!(polled.deadline(), rounded);
    assert_ne!(polled, removed, "same value and deadline, another key");
}
