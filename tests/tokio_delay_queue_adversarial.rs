//! `tickwheel::tokio::DelayQueue` used the ways a program uses tokio-util's, aimed at the
//! idle-poll shortcut (a poll with the waker registered last, while the sleep runs, answers
//! `Pending` without polling the sleep or taking the waiter's lock): tokio's cooperative
//! budget spent when the queue arms its sleep, wakers swapped between polls, a `select!`
//! loop with a busy channel, a queue moved between tasks, `timeout` around `next()`,
//! `clear`, `compact`, capacity 0. The multi-thread run and the differential run against
//! tokio-util are in `tokio_delay_queue_adversarial_differential.rs`. No test times
//! anything: each waits under the paused clock or with a bounded deadline, and asserts what
//! comes out.
#![cfg(feature = "tokio")]

mod support;

use std::future::poll_fn;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use futures_util::StreamExt;
use support::delay_queue::*;
use tickwheel::tokio::DelayQueue;
use tokio::sync::mpsc;
use tokio::time::{self, Duration, Instant};

// ---------------------------------------------------------------------------------------
// tokio's cooperative budget spent when the queue arms its sleep
// ---------------------------------------------------------------------------------------

/// The first poll that has to wait runs after the task spent its budget (a busy loop over a
/// channel does that). tokio's `Sleep` then answers `Pending` without registering with the
/// timer driver (it only schedules the task again); the queue must poll it again later.
#[tokio::test(start_paused = true)]
async fn coop_budget_spent_at_the_first_arm_still_wakes_at_the_deadline() {
    let mut q = DelayQueue::new();
    q.insert("a", ms(10));
    let first = pending_with_budget_spent(&mut q).await;
    assert!(first, "nothing is due at 0 ms");
    assert_eq!(
        next_within(&mut q, secs(1)).await,
        Some(("a", ms(10))),
        "the entry comes out at its deadline, not never"
    );
}

/// As above, but the sleep already exists and is re-armed (an earlier insert woke the task)
/// while the budget is spent.
#[tokio::test(start_paused = true)]
async fn coop_budget_spent_at_a_re_arm_still_wakes_at_the_deadline() {
    let mut q = DelayQueue::new();
    q.insert("late", ms(500));
    assert!(
        poll_now(&mut q).is_pending(),
        "sleep made and armed at 500 ms"
    );
    q.insert("early", ms(10));
    let first = pending_with_budget_spent(&mut q).await;
    assert!(first, "nothing is due at 0 ms");
    assert_eq!(next_within(&mut q, secs(1)).await, Some(("early", ms(10))));
    assert_eq!(next_within(&mut q, secs(1)).await, Some(("late", ms(490))));
}

/// As above, but the sleep has ended (an entry came out) before it is re-armed for the next
/// entry while the budget is spent.
#[tokio::test(start_paused = true)]
async fn coop_budget_spent_at_a_re_arm_after_the_sleep_ended() {
    let mut q = DelayQueue::new();
    q.insert("first", ms(5));
    q.insert("second", ms(20));
    assert_eq!(next_within(&mut q, secs(1)).await, Some(("first", ms(5))));
    let first = pending_with_budget_spent(&mut q).await;
    assert!(first, "nothing is due at 5 ms");
    assert_eq!(next_within(&mut q, secs(1)).await, Some(("second", ms(15))));
}

/// The same two scripts against tokio-util's `DelayQueue`: it polls its `Sleep` with the
/// task's own waker on every poll, so the budget costs it nothing.
#[tokio::test(start_paused = true)]
async fn coop_budget_spent_at_an_arm_tokio_util_still_wakes() {
    let mut q = tokio_util::time::DelayQueue::new();
    q.insert("late", ms(500));
    let waker = Waker::noop();
    assert!(q.poll_expired(&mut Context::from_waker(waker)).is_pending());
    q.insert("early", ms(10));
    let first = poll_fn(|cx| {
        assert!(spend_budget(cx) > 0);
        Poll::Ready(q.poll_expired(cx).is_pending())
    })
    .await;
    assert!(first);
    let start = Instant::now();
    let got = time::timeout(secs(1), q.next()).await;
    assert_eq!(got.ok().flatten().map(|e| e.into_inner()), Some("early"));
    assert_eq!(start.elapsed(), ms(10));
}

/// A server loop: requests arrive in a burst on a channel, each inserts a timeout, and one
/// `select!` serves both. The burst spends the budget while the queue arms its sleep; every
/// timeout must still come out, at its deadline, and none twice.
#[tokio::test(start_paused = true)]
async fn select_loop_with_a_busy_channel_gets_every_timeout() {
    const N: u64 = 600;
    let (tx, mut rx) = requests(N);
    let start = Instant::now();
    let mut q = DelayQueue::new();
    let mut out = Vec::new();
    let mut open = true;
    let bound = time::sleep(secs(60));
    let mut bound = pin!(bound);
    while (out.len() as u64) < N {
        tokio::select! {
            biased;
            () = &mut bound => break,
            msg = rx.recv(), if open => match msg {
                Some(i) => {
                    q.insert(i, ms(10 + i % 7));
                }
                None => open = false,
            },
            Some(e) = q.next() => {
                out.push((e.into_inner(), start.elapsed()));
            }
            // A drained channel still has a sender: keep the select armed.
        }
        if rx.is_empty() && open {
            // All requests received; stop selecting on the channel.
            open = false;
        }
    }
    drop(tx);
    assert_each_once_on_time(N, out.len() as u64 == N, &out);
}

/// A channel holding the requests `0..n`, as a burst of messages finds it.
fn requests(n: u64) -> (mpsc::UnboundedSender<u64>, mpsc::UnboundedReceiver<u64>) {
    let (tx, rx) = mpsc::unbounded_channel::<u64>();
    for i in 0..n {
        tx.send(i).unwrap_or_else(|_| panic!("receiver alive"));
    }
    (tx, rx)
}

/// A burst of `$count` requests (`requests`) for queue `$queue`: `$run`, a future over the
/// receiver `$rx`, the queue `$q` and `$out`, must insert a timeout for each and push each
/// value with when it came out (since `$start`) on `$out`. Returns whether it ended within
/// 60 s, and `$out`.
macro_rules! burst {
    ($queue:expr, $count:expr, |$n:ident, $rx:ident, $q:ident, $out:ident, $start:ident| $run:expr) => {{
        let $n: u64 = $count;
        let (tx, mut $rx) = requests($n);
        let $start = Instant::now();
        let mut $q = $queue;
        let mut $out = Vec::new();
        let run = $run;
        let finished = time::timeout(secs(60), run).await.is_ok();
        drop(tx);
        (finished, $out)
    }};
}

/// What the hand-written actor loop does with a burst of requests: take every message the
/// channel has (tokio's channel stops after 128 in one task poll and schedules the task
/// again), insert a timeout for each, then poll the queue. Returns each value with when it
/// came out, or stops at a bound of 60 s.
macro_rules! actor_loop {
    ($queue:expr, $count:expr) => {
        burst!($queue, $count, |n, rx, q, out, start| poll_fn(|cx| {
            while let Poll::Ready(Some(i)) = rx.poll_recv(cx) {
                q.insert(i, ms(10 + i % 7));
            }
            while let Poll::Ready(Some(e)) = q.poll_expired(cx) {
                out.push((e.into_inner(), start.elapsed()));
            }
            if out.len() as u64 == n {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        }))
    };
}

fn assert_each_once_on_time(n: u64, finished: bool, out: &[(u64, Duration)]) {
    assert!(
        finished,
        "{} of {n} timeouts came out within 60 s",
        out.len()
    );
    let mut seen = vec![false; n as usize];
    for &(i, at) in out {
        assert!(!seen[i as usize], "{i} came out twice");
        seen[i as usize] = true;
        assert_eq!(at, ms(10 + i % 7), "{i} at its deadline");
    }
}

/// Two tests of one burst scenario (a macro taking the queue): `$ours` against this crate's
/// `DelayQueue`, `$theirs` against tokio-util's; each must get all 300 timeouts, once, on
/// time.
macro_rules! burst_against_both {
    ($scenario:ident, $ours:ident, $theirs:ident) => {
        #[tokio::test(start_paused = true)]
        async fn $ours() {
            let (finished, out) = $scenario!(DelayQueue::new(), 300);
            assert_each_once_on_time(300, finished, &out);
        }

        #[tokio::test(start_paused = true)]
        async fn $theirs() {
            let (finished, out) = $scenario!(tokio_util::time::DelayQueue::new(), 300);
            assert_each_once_on_time(300, finished, &out);
        }
    };
}

burst_against_both!(
    actor_loop,
    actor_loop_with_a_burst_of_requests_gets_every_timeout,
    actor_loop_with_a_burst_of_requests_tokio_util
);

/// The actor loop on a multi-thread runtime and the real clock: the wake-up is lost there
/// too (the bound is 5 s for deadlines of 10 to 16 ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actor_loop_real_clock_gets_every_timeout() {
    let n: u64 = 300;
    let (tx, mut rx) = requests(n);
    let mut q = DelayQueue::new();
    let mut deadlines = vec![None; n as usize];
    let mut out = 0u64;
    let run = poll_fn(|cx| {
        while let Poll::Ready(Some(i)) = rx.poll_recv(cx) {
            let key = q.insert(i, ms(10 + i % 7));
            deadlines[i as usize] = Some(q.deadline(&key));
        }
        while let Poll::Ready(Some(e)) = q.poll_expired(cx) {
            let i = *e.get_ref() as usize;
            assert!(
                deadlines[i].is_some_and(|d| Instant::now() >= d),
                "{i} early"
            );
            deadlines[i] = None;
            out += 1;
        }
        if out == n {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    });
    let finished = time::timeout(secs(5), run).await.is_ok();
    drop(tx);
    assert!(finished, "every timeout out within 5 s");
}

/// The same burst through `futures::future::select` (which, unlike `tokio::select!`, does
/// not check the budget first): the channel's 129th `recv` answers `Pending` for the budget,
/// and `next()` is polled right after, with none left.
macro_rules! futures_select_loop {
    ($queue:expr, $count:expr) => {
        burst!($queue, $count, |n, rx, q, out, start| async {
            while (out.len() as u64) < n {
                match futures_util::future::select(pin!(rx.recv()), q.next()).await {
                    futures_util::future::Either::Left((Some(i), _)) => {
                        q.insert(i, ms(10 + i % 7));
                    }
                    futures_util::future::Either::Left((None, _)) => {}
                    futures_util::future::Either::Right((Some(e), _)) => {
                        out.push((e.into_inner(), start.elapsed()));
                    }
                    futures_util::future::Either::Right((None, _)) => {}
                }
            }
        })
    };
}

burst_against_both!(
    futures_select_loop,
    futures_select_with_a_burst_of_requests_gets_every_timeout,
    futures_select_with_a_burst_of_requests_tokio_util
);

// ---------------------------------------------------------------------------------------
// Wakers swapped between polls, around the idle-poll shortcut
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn the_waker_polled_last_is_the_one_woken_whatever_came_between() {
    let mut q = DelayQueue::new();
    q.insert("a", ms(10));
    let (a, wa) = counting_waker();
    let (b, wb) = counting_waker();
    assert!(poll_with(&mut q, &wa).is_pending());
    assert!(poll_with(&mut q, &wa).is_pending(), "shortcut");
    assert!(poll_with(&mut q, Waker::noop()).is_pending());
    assert!(poll_with(&mut q, &wb).is_pending());
    assert!(poll_with(&mut q, &wa).is_pending());
    assert!(
        poll_with(&mut q, &wa.clone()).is_pending(),
        "a clone: shortcut"
    );
    advance(ms(9)).await;
    assert_eq!((wakes(&a), wakes(&b)), (0, 0), "not before 10 ms");
    advance(ms(1)).await;
    assert_eq!((wakes(&a), wakes(&b)), (1, 0), "a polled last, woken once");
    assert!(matches!(poll_with(&mut q, &wa), Poll::Ready(Some(_))));
}

/// The noop waker polled last, then the task's: the task's must be registered again.
#[tokio::test(start_paused = true)]
async fn noop_then_the_tasks_waker_is_woken() {
    let mut q = DelayQueue::new();
    q.insert("a", ms(10));
    let (a, wa) = counting_waker();
    assert!(poll_with(&mut q, &wa).is_pending());
    assert!(poll_now(&mut q).is_pending());
    advance(ms(3)).await;
    assert!(poll_with(&mut q, &wa).is_pending());
    advance(ms(7)).await;
    assert_eq!(wakes(&a), 1);
}

/// After the shortcut answered `Pending`, an insert earlier than the armed sleep, a reset
/// of the armed entry (later, then earlier than it was), and a removal of the armed entry
/// each leave the task woken at the right time.
#[tokio::test(start_paused = true)]
async fn changes_after_a_shortcut_pending_wake_at_the_new_earliest_deadline() {
    let mut q = DelayQueue::new();
    let armed = q.insert("armed", ms(100));
    let (count, w) = pending_twice(&mut q);
    q.insert("early", ms(40));
    assert_eq!(wakes(&count), 1, "earlier than the armed sleep");
    assert!(poll_with(&mut q, &w).is_pending());
    assert!(poll_with(&mut q, &w).is_pending());
    advance(ms(39)).await;
    assert_eq!(wakes(&count), 1);
    advance(ms(1)).await;
    assert_eq!(wakes(&count), 2);
    assert_eq!(drain_now(&mut q), ["early"]);
    assert!(poll_with(&mut q, &w).is_pending());
    assert!(poll_with(&mut q, &w).is_pending());
    q.reset(&armed, ms(500));
    assert!(poll_with(&mut q, &w).is_pending());
    assert!(poll_with(&mut q, &w).is_pending());
    let later = q.insert("later", ms(200));
    assert!(poll_with(&mut q, &w).is_pending());
    q.reset(&armed, ms(20));
    assert!(poll_with(&mut q, &w).is_pending());
    let before = wakes(&count);
    advance(ms(20)).await;
    assert_eq!(wakes(&count), before + 1, "armed, reset earlier, at 60 ms");
    assert_eq!(drain_now(&mut q), ["armed"]);
    assert!(poll_with(&mut q, &w).is_pending());
    assert!(poll_with(&mut q, &w).is_pending());
    q.remove(&later);
    assert!(matches!(poll_with(&mut q, &w), Poll::Ready(None)));
    q.insert_at("past", Instant::now() - secs(5));
    assert_eq!(drain_now(&mut q), ["past"]);
}

/// A deadline in the past, inserted right after the shortcut answered `Pending`.
#[tokio::test(start_paused = true)]
async fn a_past_deadline_after_a_shortcut_pending_comes_out_next() {
    let mut q = DelayQueue::new();
    q.insert("far", secs(10));
    let (count, _w) = pending_twice(&mut q);
    q.insert_at("past", Instant::now() - ms(1));
    q.insert("zero", Duration::ZERO);
    assert_eq!(wakes(&count), 1);
    assert_eq!(drain_now(&mut q), ["past", "zero"]);
    assert_eq!(next_within(&mut q, secs(20)).await, Some(("far", secs(10))));
}

/// A sub-millisecond deadline rounds up: never out early, whatever the polls in between.
#[tokio::test(start_paused = true)]
async fn never_early_across_sub_millisecond_advances() {
    let start = Instant::now();
    let mut q = DelayQueue::new();
    let when = start + Duration::from_micros(10_500);
    q.insert_at("a", when);
    let (count, w) = counting_waker();
    // Polls at 0, 0.5, ..., 10.5 ms: 10.5 ms is the deadline, which rounds up to 11 ms.
    for _ in 0..22 {
        let at = start.elapsed();
        assert!(poll_with(&mut q, &w).is_pending(), "at {at:?}");
        advance(Duration::from_micros(500)).await;
    }
    assert_eq!(start.elapsed(), ms(11));
    assert_eq!(wakes(&count), 1, "the sleep armed for 11 ms ended");
    let e = match poll_with(&mut q, &w) {
        Poll::Ready(Some(e)) => e,
        other => panic!("due at 11 ms, got {:?}", other.map(|o| o.is_some())),
    };
    assert!(e.deadline() >= when);
    assert!(matches!(poll_with(&mut q, &w), Poll::Ready(None)));
}

// ---------------------------------------------------------------------------------------
// Tasks, timeouts, clear, compact, capacity, drop
// ---------------------------------------------------------------------------------------

/// One task polls the queue until `Pending` and hands it to another, which awaits it.
#[tokio::test(start_paused = true)]
async fn a_queue_moved_to_another_task_wakes_that_task() {
    let mut q = DelayQueue::new();
    q.insert("a", ms(10));
    q.insert("b", ms(30));
    let (tx, rx) = tokio::sync::oneshot::channel();
    let first = tokio::spawn(async move {
        let pending = poll_fn(|cx| Poll::Ready(q.poll_expired(cx).is_pending())).await;
        let pending_again = poll_fn(|cx| Poll::Ready(q.poll_expired(cx).is_pending())).await;
        assert!(pending && pending_again);
        tx.send(q).unwrap_or_else(|_| panic!("receiver alive"));
        // This task stays alive: a wake-up sent to it instead is lost for the queue.
        time::sleep(secs(3_600)).await;
    });
    let second = tokio::spawn(async move {
        let mut q = rx.await.unwrap_or_else(|_| panic!("sender sent"));
        let a = next_within(&mut q, secs(1)).await;
        let b = next_within(&mut q, secs(1)).await;
        (a, b)
    });
    let (a, b) = second.await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(a, Some(("a", ms(10))));
    assert_eq!(b, Some(("b", ms(20))));
    first.abort();
}

/// `timeout` around `next()`: timeouts that end first leave the entry in the queue, and it
/// comes out at its deadline, once.
#[tokio::test(start_paused = true)]
async fn timeouts_around_next_neither_lose_nor_duplicate() {
    let start = Instant::now();
    let mut q = DelayQueue::new();
    q.insert("a", ms(10));
    q.insert("b", ms(10));
    let mut out = Vec::new();
    for _ in 0..100 {
        match time::timeout(ms(3), q.next()).await {
            Ok(Some(e)) => out.push((e.into_inner(), start.elapsed())),
            Ok(None) => break,
            Err(_) => {}
        }
    }
    assert_eq!(out, [("a", ms(10)), ("b", ms(10))]);
    assert!(q.is_empty());
}

#[tokio::test(start_paused = true)]
async fn clear_while_waiting_then_insert_later_wakes_at_the_new_deadline() {
    let mut q = DelayQueue::new();
    q.insert("old", ms(10));
    let (count, w) = pending_twice(&mut q);
    q.clear();
    assert_eq!(wakes(&count), 1);
    q.insert("new", ms(50));
    assert!(poll_with(&mut q, &w).is_pending());
    assert!(poll_with(&mut q, &w).is_pending());
    advance(ms(10)).await;
    assert_eq!(
        wakes(&count),
        1,
        "the old sleep does not end the wait early"
    );
    assert!(poll_with(&mut q, &w).is_pending(), "nothing due at 10 ms");
    advance(ms(40)).await;
    assert_eq!(wakes(&count), 2);
    assert_eq!(drain_now(&mut q), ["new"]);
    q.clear();
    assert!(matches!(poll_with(&mut q, &w), Poll::Ready(None)));
}

#[tokio::test(start_paused = true)]
async fn capacity_zero_and_compact_between_polls() {
    let mut q = DelayQueue::with_capacity(0);
    assert_eq!(q.capacity(), 0);
    let keys: Vec<_> = (0..50u64).map(|i| q.insert(i, ms(5 + i))).collect();
    let (_, w) = counting_waker();
    assert!(poll_with(&mut q, &w).is_pending());
    for k in &keys[..25] {
        q.remove(k);
    }
    q.compact();
    assert!(poll_with(&mut q, &w).is_pending());
    q.shrink_to_fit();
    let start = Instant::now();
    let mut out = Vec::new();
    while let Some((v, _)) = next_within(&mut q, secs(1)).await {
        out.push((v, start.elapsed()));
    }
    let want: Vec<_> = (25..50u64).map(|i| (i, ms(5 + i))).collect();
    assert_eq!(out, want);
    assert_eq!(start.elapsed(), ms(54));
}

/// Dropping a queue whose sleep is registered with the timer driver: no panic, and the task
/// that waited is not woken later by a sleep nobody owns (a spurious wake-up would be
/// allowed; a panic in the driver would not).
#[tokio::test(start_paused = true)]
async fn dropping_a_queue_while_its_sleep_is_pending() {
    let mut q = DelayQueue::new();
    q.insert(String::from("a"), ms(10));
    let (count, _w) = pending_twice(&mut q);
    drop(q);
    advance(ms(20)).await;
    assert!(wakes(&count) <= 1);
    let mut again = DelayQueue::new();
    again.insert("b", ms(5));
    assert_eq!(next_within(&mut again, secs(1)).await, Some(("b", ms(5))));
}

/// `select!` between the queue and a stream of changes that make deadlines earlier and
/// later: every entry comes out at its final deadline.
#[tokio::test(start_paused = true)]
async fn select_with_changes_from_another_task() {
    let start = Instant::now();
    let (tx, mut rx) = mpsc::channel::<(u64, u64)>(4);
    let feeder = tokio::spawn(async move {
        for round in 0..40u64 {
            time::sleep(ms(3)).await;
            // (value, deadline in ms from start): alternately far and near.
            let at = if round % 2 == 0 {
                500 - round
            } else {
                5 * round
            };
            if tx.send((round, at)).await.is_err() {
                return;
            }
        }
    });
    let mut q = DelayQueue::new();
    let mut expected = Vec::new();
    let mut out = Vec::new();
    let bound = time::sleep(secs(10));
    let mut bound = pin!(bound);
    let mut open = true;
    loop {
        tokio::select! {
            () = &mut bound => break,
            msg = rx.recv(), if open => match msg {
                Some((v, at)) => {
                    let when = start + ms(at);
                    q.insert_at(v, when);
                    expected.push((v, when.max(Instant::now())));
                }
                None => open = false,
            },
            Some(e) = q.next() => out.push((e.into_inner(), Instant::now())),
            else => break,
        }
        if !open && q.is_empty() {
            break;
        }
    }
    feeder.await.unwrap_or_else(|e| panic!("{e}"));
    expected.sort_by_key(|&(v, at)| (at, v));
    out.sort_by_key(|&(v, at)| (at, v));
    assert_eq!(out.len(), 40);
    for ((v, at), (ev, eat)) in out.iter().zip(&expected) {
        assert_eq!(v, ev);
        assert!(at >= eat, "{v} early");
        assert!(*at <= *eat + ms(1), "{v} late: {at:?} vs {eat:?}");
    }
}

/// The real clock first, then paused mid-wait (`time::pause`) and advanced by hand: the
/// entry comes out once the paused clock reaches its deadline, not before.
#[tokio::test]
async fn real_clock_then_paused_mid_wait() {
    let mut q = DelayQueue::new();
    let key = q.insert("a", secs(30));
    let (count, w) = pending_twice(&mut q);
    time::pause();
    let deadline = q.deadline(&key);
    time::advance(deadline.saturating_duration_since(Instant::now()) - ms(2)).await;
    settle().await;
    assert!(
        poll_with(&mut q, &w).is_pending(),
        "2 ms before the deadline"
    );
    let mut out = None;
    for _ in 0..10 {
        time::advance(ms(1)).await;
        settle().await;
        if let Poll::Ready(Some(e)) = poll_with(&mut q, &w) {
            out = Some((e.into_inner(), Instant::now()));
            break;
        }
    }
    let (v, at) = out.unwrap_or_else(|| panic!("not out within 8 ms after its deadline"));
    assert_eq!(v, "a");
    assert!(at >= deadline);
    assert!(wakes(&count) >= 1, "the task was woken");
}
