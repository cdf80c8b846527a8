//! `tickwheel::tokio::DelayQueue` never leaves a waiting task asleep when its answer
//! changes: the lost-wakeup cases tokio-util's `DelayQueue` had (reset earlier or to the past,
//! removal of the last entry, clear), plus insert earlier and insert after `Ready(None)`.
//! First exactly (a counting waker), then end to end (a spawned task blocked in
//! `poll_expired` or `Stream::poll_next`, checked not to return before its deadline nor
//! after), then a randomized consumer that must get every entry exactly on time.
#![cfg(feature = "tokio")]

mod support;

use std::future::poll_fn;
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};

use support::delay_queue::*;
use tickwheel::tokio::{DelayQueue, Key};
use tokio::time::{self, Duration, Instant};

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
    wakes_after(secs(1), &count, 2, "the re-armed sleep fires at 1 s").await;
    assert_eq!(drain_now(&mut q), ["near"]);
}

#[tokio::test(start_paused = true)]
async fn wake_on_reset_earlier_and_to_the_past() {
    let (mut q, far, count, waker) = waiting_queue();
    q.reset(&far, secs(2));
    assert_eq!(wakes(&count), 1, "earlier than the armed sleep");
    assert!(poll_with(&mut q, &waker).is_pending());
    q.reset_at(&far, Instant::now() - ms(1));
    assert_eq!(wakes(&count), 2, "to the past");
    assert_eq!(drain_now(&mut q), ["far"]);
}

/// A reset that moves the entry the sleep is armed for later wakes the task once, at the
/// reset, so that it re-arms: it is not woken at the old deadline, nor at the ticks where a
/// far deadline's wheel slot cascades, only at the new deadline.
#[tokio::test(start_paused = true)]
async fn a_reset_later_wakes_once_to_re_arm_then_only_at_the_new_deadline() {
    let (mut q, far, count, waker) = waiting_queue();
    let other = q.insert("other", secs(20));
    q.reset(&other, secs(25));
    assert_eq!(wakes(&count), 0, "not the entry the sleep is armed for");
    q.reset(&far, secs(3_600));
    assert_eq!(wakes(&count), 1, "the armed entry moved later: re-arm");
    assert!(poll_with(&mut q, &waker).is_pending());
    wakes_after(secs(24), &count, 1, "no wake-up at the old deadline (10 s)").await;
    wakes_after(secs(1), &count, 2, "other is due at 25 s").await;
    assert_eq!(drain_now(&mut q), ["other"]);
    assert!(poll_with(&mut q, &waker).is_pending());
    // 3 600 000 ms files in level 3: its slot cascades at 3 407 872 ms, then at 3 596 416 ms;
    // neither these nor any other tick before 3 600 s wakes the task.
    wakes_after(
        Duration::from_millis(3_599_999 - 25_000),
        &count,
        2,
        "no wake-up before the deadline",
    )
    .await;
    wakes_after(ms(1), &count, 3, "at the new deadline, 3 600 s").await;
    assert_eq!(drain_now(&mut q), ["far"]);
}

/// Polls that find nothing due and come with the waker registered last leave the sleep and
/// the registration as they are (no lock, no poll of the sleep); a poll with another waker
/// moves the wake-up to it. Either way the sleep's end wakes the last poller, once.
#[tokio::test(start_paused = true)]
async fn the_last_waker_polled_with_is_woken_once_at_the_deadline() {
    let (mut q, _, first, first_waker) = waiting_queue();
    for _ in 0..3 {
        assert!(poll_with(&mut q, &first_waker).is_pending());
    }
    let (second, second_waker) = counting_waker();
    assert!(poll_with(&mut q, &second_waker).is_pending());
    assert!(poll_with(&mut q, &second_waker).is_pending());
    wakes_after(secs(10), &first, 0, "replaced before the sleep ended").await;
    assert_eq!(wakes(&second), 1, "the last poller, once");
    // Back to the first waker, which no longer matches the one registered last.
    q.insert("later", secs(5));
    assert_eq!(drain_now(&mut q), ["far"]);
    assert!(poll_with(&mut q, &second_waker).is_pending());
    assert!(poll_with(&mut q, &first_waker).is_pending());
    time::advance(secs(5)).await;
    assert_eq!((wakes(&first), wakes(&second)), (1, 1));
    assert_eq!(drain_now(&mut q), ["later"]);
}

/// A sleep that ended woke the waker it held; a poll before the entry is taken, with that
/// same waker, must register it again: the next sleep would otherwise wake nobody.
#[tokio::test(start_paused = true)]
async fn after_the_sleep_ends_the_same_waker_is_registered_again() {
    let (mut q, _, count, waker) = waiting_queue();
    q.insert("next", secs(20));
    wakes_after(secs(10), &count, 1, "the sleep armed for 10 s").await;
    assert!(matches!(poll_with(&mut q, &waker), Poll::Ready(Some(_))));
    assert!(poll_with(&mut q, &waker).is_pending());
    assert!(poll_with(&mut q, &waker).is_pending());
    wakes_after(secs(10), &count, 2, "woken by the sleep armed for 20 s").await;
    assert_eq!(drain_now(&mut q), ["next"]);
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
