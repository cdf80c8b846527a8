//! `tickwheel::tokio::DelayQueue`: every method, stale keys, lost wakeups, far deadlines,
//! ordering and `Stream` use, all under tokio's paused clock. The side-by-side comparison
//! with `tokio_util::time::DelayQueue` is in `tokio_delay_queue_compat.rs`.
#![cfg(feature = "tokio")]

use std::collections::HashSet;
use std::future::poll_fn;
use std::marker::PhantomPinned;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::{Stream, StreamExt};
use tickwheel::tokio::{DelayQueue, Expired, Key};
use tokio::task::JoinHandle;
use tokio::time::{self, Duration, Instant};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A waker that counts its wakeups.
struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counting_waker() -> (Arc<Count>, Waker) {
    let count = Arc::new(Count(AtomicUsize::new(0)));
    (count.clone(), Waker::from(count))
}

fn wakes(count: &Count) -> usize {
    count.0.load(Ordering::SeqCst)
}

fn poll_with<T>(q: &mut DelayQueue<T>, waker: &Waker) -> Poll<Option<Expired<T>>> {
    q.poll_expired(&mut Context::from_waker(waker))
}

fn poll_now<T>(q: &mut DelayQueue<T>) -> Poll<Option<Expired<T>>> {
    poll_with(q, Waker::noop())
}

/// Everything due now, in the order it comes out, without waiting.
fn drain_now<T>(q: &mut DelayQueue<T>) -> Vec<T> {
    let mut out = Vec::new();
    while let Poll::Ready(Some(e)) = poll_now(q) {
        out.push(e.into_inner());
    }
    out
}

/// Lets every woken task run (the clock does not move).
async fn settle() {
    for _ in 0..8 {
        tokio::task::yield_now().await;
    }
}

async fn advance(d: Duration) {
    time::advance(d).await;
    settle().await;
}

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
    let mut q = DelayQueue::new();
    let key = q.insert("x", secs(1));
    assert!(q.contains(&key));
    assert_eq!(q.remove(&key).into_inner(), "x");
}

#[tokio::test(start_paused = true)]
async fn insert_comes_out_at_its_deadline_not_before() {
    let start = Instant::now();
    let mut q = DelayQueue::new();
    let key = q.insert("a", ms(100));
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
    time::advance(Duration::from_micros(1)).await;
    assert_eq!(drain_now(&mut q), ["a"]);
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
    let mut q = DelayQueue::new();
    let a = q.insert("a", secs(1));
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
    let mut q = DelayQueue::new();
    let a = q.insert("a", ms(5));
    q.insert("b", ms(6));
    time::advance(ms(10)).await;
    assert_eq!(q.remove(&a).into_inner(), "a");
    assert_eq!(drain_now(&mut q), ["b"]);
}

#[tokio::test(start_paused = true)]
async fn reset_and_reset_at_move_deadlines_both_ways() {
    let start = Instant::now();
    let mut q = DelayQueue::new();
    let a = q.insert("a", secs(1));
    let b = q.insert("b", secs(2));
    q.reset(&a, secs(3));
    assert_eq!(q.deadline(&a), start + secs(3));
    q.reset_at(&b, start + ms(500));
    assert_eq!(q.deadline(&b), start + ms(500));
    time::advance(ms(499)).await;
    assert!(drain_now(&mut q).is_empty());
    time::advance(ms(1)).await;
    assert_eq!(drain_now(&mut q), ["b"]);
    time::advance(ms(2_499)).await;
    assert!(drain_now(&mut q).is_empty(), "a was moved from 1 s to 3 s");
    time::advance(ms(1)).await;
    assert_eq!(drain_now(&mut q), ["a"]);
}

#[tokio::test(start_paused = true)]
async fn reset_of_a_due_entry_not_yet_polled_makes_it_wait_again() {
    let mut q = DelayQueue::new();
    let a = q.insert("a", ms(5));
    time::advance(ms(10)).await;
    q.reset(&a, ms(10));
    assert!(poll_now(&mut q).is_pending());
    time::advance(ms(9)).await;
    assert!(poll_now(&mut q).is_pending());
    time::advance(ms(1)).await;
    assert_eq!(drain_now(&mut q), ["a"]);
}

#[tokio::test(start_paused = true)]
async fn reset_to_the_past_comes_out_at_once() {
    let mut q = DelayQueue::new();
    let a = q.insert("a", secs(60));
    time::advance(secs(1)).await;
    q.reset_at(&a, Instant::now() - ms(500));
    assert_eq!(drain_now(&mut q), ["a"]);
}

#[tokio::test(start_paused = true)]
async fn try_reset_and_try_deadline_and_contains() {
    let start = Instant::now();
    let mut q = DelayQueue::new();
    let a = q.insert("a", secs(1));
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
    time::advance(secs(2)).await;
    assert_eq!(drain_now(&mut q), ["early"]);
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
    time::advance(secs(1)).await;
    assert_eq!(drain_now(&mut q), [10, 11, 12, 13, 14]);
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
    let mut q = DelayQueue::new();
    let key = q.insert(vec![1], ms(7));
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
    let mut q = DelayQueue::new();
    let a = q.insert((), secs(1));
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
    let mut q = DelayQueue::new();
    let fired = q.insert("fired", ms(1));
    time::advance(ms(1)).await;
    assert_eq!(drain_now(&mut q), ["fired"]);
    let next = q.insert("next", secs(10)); // takes the fired entry's slot
    assert_stale(&mut q, fired, next);
}

#[tokio::test(start_paused = true)]
async fn a_removed_key_is_stale_even_after_its_slot_is_reused() {
    let mut q = DelayQueue::new();
    let removed = q.insert("removed", secs(1));
    q.remove(&removed);
    let next = q.insert("next", secs(10));
    assert_stale(&mut q, removed, next);
    time::advance(secs(10)).await;
    assert_eq!(drain_now(&mut q), ["next"]);
}

#[tokio::test(start_paused = true)]
async fn a_stale_key_survives_many_reuses_of_its_slot() {
    let mut q = DelayQueue::new();
    let first = q.insert("first", secs(1));
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
    let mut q = DelayQueue::new();
    let k = q.insert((), secs(1));
    q.remove(&k);
    q.remove(&k);
}

// ---------------------------------------------------------------------------------------
// Lost wakeups, with a counting waker: exactly when is the waiting task woken?
// ---------------------------------------------------------------------------------------

/// A queue holding one entry at 10 s, and a waker registered by a `Pending` poll.
fn waiting_queue() -> (DelayQueue<&'static str>, Key, Arc<Count>, Waker) {
    let mut q = DelayQueue::new();
    let far = q.insert("far", secs(10));
    let (count, waker) = counting_waker();
    assert!(poll_with(&mut q, &waker).is_pending());
    (q, far, count, waker)
}

#[tokio::test(start_paused = true)]
async fn wake_on_insert_earlier_only() {
    let (mut q, _, count, waker) = waiting_queue();
    q.insert("later", secs(20));
    q.insert("same", secs(10));
    assert_eq!(wakes(&count), 0, "the armed sleep covers these");
    q.insert("near", secs(1));
    assert_eq!(wakes(&count), 1, "an earlier deadline wakes the task");
    assert!(poll_with(&mut q, &waker).is_pending());
    time::advance(secs(1)).await;
    assert_eq!(wakes(&count), 2, "the re-armed sleep fires at 1 s");
    assert_eq!(drain_now(&mut q), ["near"]);
}

#[tokio::test(start_paused = true)]
async fn wake_on_reset_earlier_and_to_the_past() {
    let (mut q, far, count, waker) = waiting_queue();
    q.reset(&far, secs(30));
    assert_eq!(wakes(&count), 0, "later: the sleep wakes early, harmlessly");
    q.reset(&far, secs(2));
    assert_eq!(wakes(&count), 1, "earlier than the armed sleep");
    assert!(poll_with(&mut q, &waker).is_pending());
    q.reset_at(&far, Instant::now() - ms(1));
    assert_eq!(wakes(&count), 2, "to the past");
    assert_eq!(drain_now(&mut q), ["far"]);
}

#[tokio::test(start_paused = true)]
async fn wake_on_remove_of_the_last_entry_only() {
    let (mut q, far, count, waker) = waiting_queue();
    let other = q.insert("other", secs(20));
    q.remove(&other);
    assert_eq!(wakes(&count), 0, "the answer is still Pending");
    q.remove(&far);
    assert_eq!(wakes(&count), 1, "the answer is now Ready(None)");
    assert!(matches!(poll_with(&mut q, &waker), Poll::Ready(None)));
}

#[tokio::test(start_paused = true)]
async fn wake_on_try_remove_of_the_last_entry() {
    let (mut q, far, count, _) = waiting_queue();
    assert!(q.try_remove(&far).is_some());
    assert_eq!(wakes(&count), 1);
}

#[tokio::test(start_paused = true)]
async fn wake_on_clear_of_a_non_empty_queue() {
    let (mut q, _, count, waker) = waiting_queue();
    q.clear();
    assert_eq!(wakes(&count), 1);
    assert!(matches!(poll_with(&mut q, &waker), Poll::Ready(None)));
    q.clear();
    assert_eq!(
        wakes(&count),
        1,
        "clearing an empty queue changes no answer"
    );
}

#[tokio::test(start_paused = true)]
async fn wake_on_insert_after_ready_none() {
    let mut q = DelayQueue::new();
    let (count, waker) = counting_waker();
    assert!(matches!(poll_with(&mut q, &waker), Poll::Ready(None)));
    q.insert("x", secs(100));
    assert_eq!(
        wakes(&count),
        1,
        "as tokio-util does: the task that saw the end is woken"
    );
}

// ---------------------------------------------------------------------------------------
// Lost wakeups, end to end: a spawned task blocked in poll_expired / Stream::next
// ---------------------------------------------------------------------------------------

type Shared<T> = Arc<Mutex<DelayQueue<T>>>;

/// Spawns a task that waits for the queue's next item through `Stream::poll_next`, and
/// reports it with how long it waited.
fn spawn_next<T: Send + 'static>(q: &Shared<T>) -> JoinHandle<(Option<T>, Duration)> {
    let q = q.clone();
    let start = Instant::now();
    tokio::spawn(async move {
        let item = poll_fn(|cx| Pin::new(&mut *q.lock().unwrap()).poll_next(cx)).await;
        (item.map(Expired::into_inner), start.elapsed())
    })
}

/// Spawns a task that waits for the next *expired entry*, treating `Ready(None)` as "nothing
/// yet" (the `select!` loop pattern).
fn spawn_next_entry<T: Send + 'static>(q: &Shared<T>) -> JoinHandle<(T, Duration)> {
    let q = q.clone();
    let start = Instant::now();
    tokio::spawn(async move {
        let e = poll_fn(|cx| match q.lock().unwrap().poll_expired(cx) {
            Poll::Ready(Some(e)) => Poll::Ready(e),
            _ => Poll::Pending,
        })
        .await;
        (e.into_inner(), start.elapsed())
    })
}

fn shared<T>(entries: &[(T, Duration)]) -> (Shared<T>, Vec<Key>)
where
    T: Clone,
{
    let mut q = DelayQueue::new();
    let keys = entries
        .iter()
        .map(|(v, d)| q.insert(v.clone(), *d))
        .collect();
    (Arc::new(Mutex::new(q)), keys)
}

/// Asserts the task is still waiting at `at_least`, then returns once it finished at `at`.
async fn finishes_at<R>(task: JoinHandle<R>, at_least: Duration, at: Duration) -> R {
    assert!(at_least < at);
    if !at_least.is_zero() {
        advance(at_least).await;
    }
    assert!(!task.is_finished(), "returned before {at:?}");
    advance(at - at_least).await;
    assert!(task.is_finished(), "still waiting at {at:?}: a lost wakeup");
    task.await.unwrap()
}

#[tokio::test(start_paused = true)]
async fn blocked_task_is_woken_by_insert_earlier() {
    let (q, _) = shared(&[("far", secs(10))]);
    let task = spawn_next(&q);
    settle().await;
    q.lock().unwrap().insert("near", secs(1));
    let (item, waited) = finishes_at(task, ms(999), secs(1)).await;
    assert_eq!((item, waited), (Some("near"), secs(1)));
}

#[tokio::test(start_paused = true)]
async fn blocked_task_is_woken_by_reset_earlier() {
    let (q, keys) = shared(&[("a", secs(10)), ("b", secs(20))]);
    let task = spawn_next(&q);
    settle().await;
    q.lock().unwrap().reset(&keys[1], secs(2));
    let (item, waited) = finishes_at(task, ms(1_999), secs(2)).await;
    assert_eq!((item, waited), (Some("b"), secs(2)));
}

#[tokio::test(start_paused = true)]
async fn blocked_task_is_woken_by_reset_to_the_past() {
    let (q, keys) = shared(&[("a", secs(10))]);
    let task = spawn_next(&q);
    advance(secs(1)).await;
    assert!(!task.is_finished());
    q.lock()
        .unwrap()
        .reset_at(&keys[0], Instant::now() - ms(100));
    settle().await;
    assert!(
        task.is_finished(),
        "a past deadline must come out without waiting"
    );
    assert_eq!(task.await.unwrap(), (Some("a"), secs(1)));
}

#[tokio::test(start_paused = true)]
async fn blocked_task_is_woken_by_remove_of_the_last_entry() {
    let (q, keys) = shared(&[("a", secs(10))]);
    let task = spawn_next(&q);
    settle().await;
    assert!(!task.is_finished());
    q.lock().unwrap().remove(&keys[0]);
    settle().await;
    assert!(
        task.is_finished(),
        "the queue is empty: next() must return None now"
    );
    assert_eq!(task.await.unwrap(), (None, Duration::ZERO));
}

#[tokio::test(start_paused = true)]
async fn blocked_task_is_woken_by_clear() {
    let (q, _) = shared(&[("a", secs(10)), ("b", secs(3))]);
    let task = spawn_next(&q);
    advance(secs(1)).await;
    q.lock().unwrap().clear();
    settle().await;
    assert!(
        task.is_finished(),
        "the queue is empty: next() must return None now"
    );
    assert_eq!(task.await.unwrap(), (None, secs(1)));
}

#[tokio::test(start_paused = true)]
async fn blocked_task_is_woken_by_insert_into_an_empty_queue() {
    let (q, _) = shared::<&str>(&[]);
    let task = spawn_next_entry(&q);
    settle().await;
    assert!(!task.is_finished());
    q.lock().unwrap().insert("x", secs(1));
    let (item, waited) = finishes_at(task, ms(999), secs(1)).await;
    assert_eq!((item, waited), ("x", secs(1)));
}

#[tokio::test(start_paused = true)]
async fn blocked_task_does_not_return_early_after_the_earliest_is_removed_or_reset_later() {
    let (q, keys) = shared(&[("a", secs(1)), ("b", secs(5)), ("c", secs(9))]);
    let task = spawn_next(&q);
    settle().await;
    q.lock().unwrap().remove(&keys[0]);
    q.lock().unwrap().reset(&keys[1], secs(7));
    // The sleep armed for 1 s still fires (spuriously): the task must go back to waiting.
    let (item, waited) = finishes_at(task, ms(6_999), secs(7)).await;
    assert_eq!((item, waited), (Some("b"), secs(7)));
}

/// A waiting consumer and a driver that inserts, resets, removes and advances at random.
/// Every entry must reach the consumer at the first instant the clock shows at or after its
/// deadline: not before (never early), not later (no lost wakeup).
#[tokio::test(start_paused = true)]
async fn a_waiting_consumer_gets_every_entry_exactly_on_time() {
    for seed in [1u64, 7, 2024] {
        check_consumer_timing(seed, 250).await;
    }
}

async fn check_consumer_timing(seed: u64, steps: usize) {
    let mut rng = Rng(seed);
    let start = Instant::now();
    let q: Shared<u32> = Arc::new(Mutex::new(DelayQueue::new()));
    let got: Arc<Mutex<Vec<(u32, Duration)>>> = Arc::default();
    let consumer = {
        let (q, got) = (q.clone(), got.clone());
        tokio::spawn(async move {
            loop {
                let e = poll_fn(|cx| match q.lock().unwrap().poll_expired(cx) {
                    Poll::Ready(Some(e)) => Poll::Ready(e),
                    _ => Poll::Pending,
                })
                .await;
                got.lock().unwrap().push((e.into_inner(), start.elapsed()));
            }
        })
    };
    // The model: value -> (key, deadline since start, in ms).
    let mut pending: Vec<(u32, Key, u64)> = Vec::new();
    let mut expected: Vec<(u32, Duration)> = Vec::new();
    for step in 0..steps {
        let now = start.elapsed().as_millis() as u64;
        let delay = |rng: &mut Rng| match rng.below(10) {
            0 => 0,
            1 => rng.below(300_000), // level 2 and beyond
            _ => rng.below(400),
        };
        match rng.below(10) {
            0..=2 => {
                let d = delay(&mut rng);
                let v = step as u32;
                let key = q.lock().unwrap().insert(v, ms(d));
                pending.push((v, key, now + d));
            }
            3 if !pending.is_empty() => {
                let i = rng.below(pending.len() as u64) as usize;
                let d = delay(&mut rng);
                q.lock().unwrap().reset(&pending[i].1, ms(d));
                pending[i].2 = now + d;
            }
            4 if !pending.is_empty() => {
                let i = rng.below(pending.len() as u64) as usize;
                let back = rng.below(50);
                let at = Instant::now() - ms(back);
                q.lock().unwrap().reset_at(&pending[i].1, at);
                pending[i].2 = now; // due now: it was already due
            }
            5 if !pending.is_empty() => {
                let i = rng.below(pending.len() as u64) as usize;
                let (_, key, _) = pending.swap_remove(i);
                q.lock().unwrap().remove(&key);
            }
            6 if rng.below(8) == 0 => {
                q.lock().unwrap().clear();
                pending.clear();
            }
            _ => time::advance(ms(1 + rng.below(250))).await,
        }
        settle().await;
        let now = start.elapsed().as_millis() as u64;
        pending.retain(|&(v, _, deadline)| {
            let due = deadline <= now;
            if due {
                expected.push((v, Duration::from_millis(now)));
            }
            !due
        });
        let mut actual = got.lock().unwrap().clone();
        let mut want = expected.clone();
        actual.sort();
        want.sort();
        assert_eq!(actual, want, "seed {seed} step {step} at {now} ms");
    }
    consumer.abort();
}

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n.max(1)
    }
}

// ---------------------------------------------------------------------------------------
// Far deadlines and long-lived queues
// ---------------------------------------------------------------------------------------

const YEAR: Duration = Duration::from_secs(365 * 86_400);

#[tokio::test(start_paused = true)]
async fn deadlines_past_tokios_two_year_range() {
    let start = Instant::now();
    let mut q = DelayQueue::new();
    let three_years = q.insert("3y", YEAR * 3);
    let far = q.insert_at("35k years", start + Duration::from_secs(1 << 40));
    let never = q.insert("never", Duration::MAX);
    assert_eq!(q.deadline(&three_years), start + YEAR * 3);
    assert_eq!(q.deadline(&far), start + Duration::from_secs(1 << 40));
    assert!(
        q.deadline(&never) > start + Duration::from_secs(1 << 50),
        "Duration::MAX saturates"
    );
    assert_eq!(q.peek(), Some(three_years));
    time::advance(YEAR * 3 - ms(1)).await;
    assert!(drain_now(&mut q).is_empty(), "1 ms early");
    time::advance(ms(1)).await;
    assert_eq!(drain_now(&mut q), ["3y"]);
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
    time::advance(ms(1 << 36)).await;
    assert!(drain_now(&mut q).is_empty());
    time::advance(ms(9)).await;
    assert!(drain_now(&mut q).is_empty());
    time::advance(ms(1)).await;
    assert_eq!(drain_now(&mut q), ["edge"]);
    assert!(!q.contains(&edge));

    time::advance(ms(1 << 37)).await;
    assert!(matches!(poll_now(&mut q), Poll::Ready(None)));
    let now = Instant::now();
    let a = q.insert("a", ms(5));
    q.insert("b", ms(64 * 64 + 3));
    assert_eq!(q.deadline(&a), now + ms(5));
    time::advance(ms(4)).await;
    assert!(drain_now(&mut q).is_empty());
    time::advance(ms(1)).await;
    assert_eq!(drain_now(&mut q), ["a"]);
    time::advance(ms(64 * 64 - 3)).await;
    assert!(drain_now(&mut q).is_empty());
    time::advance(ms(1)).await;
    assert_eq!(drain_now(&mut q), ["b"]);

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
    time::advance(secs(2)).await;
    let out = drain_now(&mut q);
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
async fn the_one_sleep_is_reused() {
    // Many arm/re-arm cycles through every level: the queue must keep working (the sleep is
    // reset each time; a stale registration would show up as a missed or early entry).
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
