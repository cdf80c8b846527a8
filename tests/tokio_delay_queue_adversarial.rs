//! `tickwheel::tokio::DelayQueue` used the ways a program uses tokio-util's, aimed at the
//! idle-poll shortcut (a poll with the waker registered last, while the sleep runs, answers
//! `Pending` without polling the sleep or taking the waiter's lock): tokio's cooperative
//! budget spent when the queue arms its sleep, wakers swapped between polls, a `select!`
//! loop with a busy channel, a queue moved between tasks, `timeout` around `next()`,
//! `clear`, `compact`, capacity 0, a multi-thread runtime on the real clock, and a
//! differential run against tokio-util's `DelayQueue`. No test times anything: each waits
//! under the paused clock or with a bounded deadline, and asserts what comes out.
#![cfg(feature = "tokio")]

mod tokio_support;

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use futures_util::StreamExt;
use proptest::prelude::*;
use tickwheel::tokio::DelayQueue;
use tokio::sync::mpsc;
use tokio::time::{self, Duration, Instant};
use tokio_support::*;

/// Spends the task's cooperative budget: afterwards every tokio resource polled in this
/// task poll (a `Sleep` included) answers `Pending` and asks for the task to be polled again.
/// Returns how many units it spent (tokio's budget is 128), bounded so it cannot spin.
fn spend_budget(cx: &mut Context<'_>) -> usize {
    for spent in 0..10_000 {
        if pin!(tokio::task::coop::consume_budget())
            .poll(cx)
            .is_pending()
        {
            return spent;
        }
    }
    panic!("the cooperative budget never ran out");
}

/// `next()` with a generous bound on the paused clock: `None` when the bound passed first.
async fn next_within<T>(q: &mut DelayQueue<T>, bound: Duration) -> Option<(T, Duration)> {
    let start = Instant::now();
    match time::timeout(bound, q.next()).await {
        Ok(Some(e)) => Some((e.into_inner(), start.elapsed())),
        Ok(None) | Err(_) => None,
    }
}

// ---------------------------------------------------------------------------------------
// tokio's cooperative budget spent when the queue arms its sleep
// ---------------------------------------------------------------------------------------

/// The first poll that has to wait runs after the task spent its budget (a busy loop over a
/// channel does that). tokio's `Sleep` then answers `Pending` without registering with the
/// timer driver (it only schedules the task again); the queue must poll it again later.
#[ignore = "fails: a poll that arms the sleep after tokio's cooperative budget ran out leaves it unregistered (Sleep answered Pending for the budget; OneSleep counts it registered) and the next polls take the shortcut, so the task is never woken at the deadline"]
#[tokio::test(start_paused = true)]
async fn coop_budget_spent_at_the_first_arm_still_wakes_at_the_deadline() {
    let mut q = DelayQueue::new();
    q.insert("a", ms(10));
    let first = poll_fn(|cx| {
        assert!(spend_budget(cx) > 0);
        Poll::Ready(q.poll_expired(cx).is_pending())
    })
    .await;
    assert!(first, "nothing is due at 0 ms");
    assert_eq!(
        next_within(&mut q, secs(1)).await,
        Some(("a", ms(10))),
        "the entry comes out at its deadline, not never"
    );
}

/// As above, but the sleep already exists and is re-armed (an earlier insert woke the task)
/// while the budget is spent.
#[ignore = "fails: a poll that arms the sleep after tokio's cooperative budget ran out leaves it unregistered (Sleep answered Pending for the budget; OneSleep counts it registered) and the next polls take the shortcut, so the task is never woken at the deadline"]
#[tokio::test(start_paused = true)]
async fn coop_budget_spent_at_a_re_arm_still_wakes_at_the_deadline() {
    let mut q = DelayQueue::new();
    q.insert("late", ms(500));
    assert!(
        poll_now(&mut q).is_pending(),
        "sleep made and armed at 500 ms"
    );
    q.insert("early", ms(10));
    let first = poll_fn(|cx| {
        assert!(spend_budget(cx) > 0);
        Poll::Ready(q.poll_expired(cx).is_pending())
    })
    .await;
    assert!(first, "nothing is due at 0 ms");
    assert_eq!(next_within(&mut q, secs(1)).await, Some(("early", ms(10))));
    assert_eq!(next_within(&mut q, secs(1)).await, Some(("late", ms(490))));
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
    let (tx, mut rx) = mpsc::unbounded_channel::<u64>();
    for i in 0..N {
        tx.send(i).unwrap_or_else(|_| panic!("receiver alive"));
    }
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
    assert_eq!(out.len() as u64, N, "every timeout comes out within 60 s");
    let mut seen = vec![false; N as usize];
    for &(i, at) in &out {
        assert!(!seen[i as usize], "{i} came out twice");
        seen[i as usize] = true;
        assert_eq!(at, ms(10 + i % 7), "{i} at its deadline");
    }
}

/// What the hand-written actor loop does with a burst of requests: take every message the
/// channel has (tokio's channel stops after 128 in one task poll and schedules the task
/// again), insert a timeout for each, then poll the queue. Returns each value with when it
/// came out, or stops at a bound of 60 s.
macro_rules! actor_loop {
    ($q:expr, $n:expr) => {{
        let n: u64 = $n;
        let (tx, mut rx) = mpsc::unbounded_channel::<u64>();
        for i in 0..n {
            tx.send(i).unwrap_or_else(|_| panic!("receiver alive"));
        }
        let start = Instant::now();
        let mut q = $q;
        let mut out = Vec::new();
        let run = poll_fn(|cx| {
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
        });
        let finished = time::timeout(secs(60), run).await.is_ok();
        drop(tx);
        (finished, out)
    }};
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

#[ignore = "fails: a poll that arms the sleep after tokio's cooperative budget ran out leaves it unregistered (Sleep answered Pending for the budget; OneSleep counts it registered) and the next polls take the shortcut, so the task is never woken at the deadline"]
#[tokio::test(start_paused = true)]
async fn actor_loop_with_a_burst_of_requests_gets_every_timeout() {
    let (finished, out) = actor_loop!(DelayQueue::new(), 300);
    assert_each_once_on_time(300, finished, &out);
}

#[tokio::test(start_paused = true)]
async fn actor_loop_with_a_burst_of_requests_tokio_util() {
    let (finished, out) = actor_loop!(tokio_util::time::DelayQueue::new(), 300);
    assert_each_once_on_time(300, finished, &out);
}
