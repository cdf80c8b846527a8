//! tokio's cooperative budget against `DelayQueue` and `Scheduler::due_stream`, in spawned
//! tasks: tokio answers a poll of a `Sleep` made with the budget spent `Pending` and *defers*
//! the wake of that poll's waker until the runtime next parks (`context::defer`), so a task
//! woken directly meanwhile is polled again, with a fresh budget, before that wake runs.
//! Also `unconstrained`, many queues in one task poll, a `LocalSet` and the multi-thread
//! runtime. Nothing is timed: each test waits under the paused clock or a bounded deadline.
#![cfg(feature = "tokio")]

mod support;

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use futures_util::StreamExt;
use support::delay_queue::*;
use tickwheel::sync::Scheduler;
use tickwheel::tokio::{DelayQueue, Key};
use tokio::time::{self, Duration, Instant};

/// `fut`'s output, or `None` when `bound` passed first. The bound is checked first, so an
/// output that comes only when the bound's wake polls `fut` counts as `None` (a lost wakeup
/// that `time::timeout`, which polls `fut` first, would hide).
async fn within<F: Future>(bound: Duration, fut: F) -> Option<F::Output> {
    tokio::select! {
        biased;
        () = time::sleep(bound) => None,
        out = fut => Some(out),
    }
}

/// A task poll script: poll `n` of the future returns `f(n, cx)` (counting from 1).
async fn polls<F: FnMut(usize, &mut Context<'_>) -> Poll<()>>(mut f: F) {
    let mut n = 0;
    poll_fn(|cx| {
        n += 1;
        f(n, cx)
    })
    .await;
}

/// The deferred-wake script on `s`: task poll 1 runs `poll_1` (which spends the budget, and
/// may change `s` before or after), finds `s` pending and wakes the task directly; poll 2,
/// before the runtime parks, finds it pending again with a fresh budget and waits for the
/// deferred coop wake; poll 3 ends the script.
async fn deferred_wake_script<S>(
    s: &mut S,
    poll_1: impl FnOnce(&mut S, &mut Context<'_>),
    pending: impl Fn(&mut S, &mut Context<'_>) -> bool,
) {
    let mut poll_1 = Some(poll_1);
    polls(|n, cx| match n {
        1 => {
            if let Some(f) = poll_1.take() {
                f(s, cx);
            }
            assert!(pending(s, cx), "nothing due yet");
            cx.waker().wake_by_ref(); // e.g. a message from another task
            Poll::Pending
        }
        2 => {
            assert!(pending(s, cx), "nothing due yet");
            Poll::Pending // woken by the deferred coop wake
        }
        _ => Poll::Ready(()),
    })
    .await;
}

/// [`deferred_wake_script`] on a `DelayQueue`.
async fn queue_script<T>(
    q: &mut DelayQueue<T>,
    poll_1: impl FnOnce(&mut DelayQueue<T>, &mut Context<'_>),
) {
    deferred_wake_script(q, poll_1, |q, cx| q.poll_expired(cx).is_pending()).await;
}

/// A queue holding `a` at 10 ms and `b` at 40 ms, polled once (armed at 10 ms); `a`'s key.
fn armed_a_and_b() -> (DelayQueue<&'static str>, Key) {
    let mut q = DelayQueue::new();
    let a = q.insert("a", ms(10));
    q.insert("b", ms(40));
    assert!(poll_now(&mut q).is_pending(), "armed at 10 ms");
    (q, a)
}

/// [`armed_a_and_b`] through [`queue_script`], whose first poll spends the budget and then
/// runs `op` on the queue and `a`'s key; the queue after.
async fn armed_then_spent(
    op: impl FnOnce(&mut DelayQueue<&'static str>, &Key),
) -> DelayQueue<&'static str> {
    let (mut q, a) = armed_a_and_b();
    queue_script(&mut q, |q, cx| {
        spend_budget(cx);
        op(q, &a);
    })
    .await;
    q
}

/// Spends the task's budget, nothing else.
fn spend(_: &mut impl Sized, cx: &mut Context<'_>) {
    spend_budget(cx);
}

// ---------------------------------------------------------------------------------------
// DelayQueue: the deferred coop wake lands after a poll with budget registered the sleep
// ---------------------------------------------------------------------------------------

/// Poll 1 spends the budget, polls the queue (its sleep answers `Pending` for the budget and
/// tokio defers a wake of the queue's sleep waker) and wakes the task directly. Poll 2, before
/// the runtime parks, has a fresh budget: the queue registers its sleep with the driver. At
/// the park the deferred wake runs and takes the task's waker out of the queue. Poll 3 must
/// not take the idle shortcut on a waker that is no longer there.
#[tokio::test(start_paused = true)]
async fn deferred_coop_wake_after_a_budgeted_re_poll_loses_no_wakeup() {
    let task = tokio::spawn(async {
        let mut q = DelayQueue::new();
        q.insert("a", ms(10));
        queue_script(&mut q, spend).await;
        next_within(&mut q, secs(60)).await
    });
    assert_eq!(
        task.await.unwrap(),
        Some(("a", ms(10))),
        "the entry comes out at its deadline"
    );
}

/// The same with an earlier deadline inserted between the polls: the insert wakes the task,
/// the re-arm runs with the budget spent.
#[tokio::test(start_paused = true)]
async fn deferred_coop_wake_after_an_earlier_insert_loses_no_wakeup() {
    let task = tokio::spawn(async {
        let mut q = DelayQueue::new();
        q.insert("late", ms(500));
        assert!(poll_now(&mut q).is_pending(), "armed at 500 ms");
        queue_script(&mut q, |q, cx| {
            q.insert("early", ms(10));
            spend_budget(cx);
        })
        .await;
        let early = next_within(&mut q, secs(60)).await;
        let late = next_within(&mut q, secs(60)).await;
        (early, late)
    });
    assert_eq!(
        task.await.unwrap(),
        (Some(("early", ms(10))), Some(("late", ms(490))))
    );
}

/// The armed entry is reset later while the budget is spent; a direct wake gets the task
/// polled again before the deferred coop wake runs.
#[tokio::test(start_paused = true)]
async fn reset_of_the_armed_entry_with_the_budget_spent() {
    let task = tokio::spawn(async {
        let mut q = armed_then_spent(|q, a| q.reset(a, ms(30))).await;
        let a = next_within(&mut q, secs(60)).await;
        (a, next_within(&mut q, secs(60)).await)
    });
    assert_eq!(
        task.await.unwrap(),
        (Some(("a", ms(30))), Some(("b", ms(10)))),
        "a at 30 ms, then b at 40 ms"
    );
}

/// The armed entry is removed while the budget is spent (the task re-arms for the next one
/// without budget); a direct wake gets the task polled again before the deferred wake runs.
#[tokio::test(start_paused = true)]
async fn remove_of_the_armed_entry_with_the_budget_spent() {
    let task = tokio::spawn(async {
        let mut q = armed_then_spent(|q, a| _ = q.remove(a)).await;
        next_within(&mut q, secs(60)).await
    });
    assert_eq!(task.await.unwrap(), Some(("b", ms(40))));
}

/// The armed entry is removed while the budget is spent, with no direct wake: the deferred
/// coop wake alone gets the task polled again (the ordinary order), and the next entry comes
/// out at its deadline.
#[tokio::test(start_paused = true)]
async fn remove_of_the_armed_entry_with_the_budget_spent_no_direct_wake() {
    let task = tokio::spawn(async {
        let (mut q, a) = armed_a_and_b();
        polls(|n, cx| match n {
            1 => {
                spend_budget(cx);
                q.remove(&a);
                assert!(q.poll_expired(cx).is_pending());
                Poll::Pending
            }
            _ => Poll::Ready(()),
        })
        .await;
        next_within(&mut q, secs(60)).await
    });
    assert_eq!(task.await.unwrap(), Some(("b", ms(40))));
}

/// The sleep ends while the budget is spent: the driver passed the deadline, the poll finds
/// it elapsed and takes the entry out without polling the sleep.
#[tokio::test(start_paused = true)]
async fn the_sleep_ending_while_the_budget_is_spent() {
    let task = tokio::spawn(async {
        let mut q = DelayQueue::new();
        q.insert("a", ms(10));
        q.insert("b", ms(20));
        assert!(poll_now(&mut q).is_pending(), "armed at 10 ms");
        time::sleep(ms(10)).await; // the driver ends the queue's sleep too
        let mut out = Vec::new();
        polls(|_, cx| {
            spend_budget(cx);
            if let Poll::Ready(Some(e)) = q.poll_expired(cx) {
                out.push(e.into_inner());
            }
            Poll::Ready(())
        })
        .await;
        let b = next_within(&mut q, secs(60)).await;
        (out, b)
    });
    assert_eq!(task.await.unwrap(), (vec!["a"], Some(("b", ms(10)))));
}

/// `unconstrained` around the queue: the budget never runs out, the shortcut holds.
#[tokio::test(start_paused = true)]
async fn unconstrained_around_the_queue() {
    let task = tokio::spawn(tokio::task::unconstrained(async {
        let mut q = DelayQueue::new();
        for i in 0..300u64 {
            q.insert(i, ms(10 + i % 5));
        }
        let mut out = Vec::new();
        while let Some((v, _)) = next_within(&mut q, secs(60)).await {
            out.push((v, Instant::now()));
        }
        out
    }));
    let start = Instant::now();
    let out = task.await.unwrap();
    assert_eq!(out.len(), 300, "each entry once");
    for (v, at) in out {
        assert_eq!(at - start, ms(10 + v % 5), "{v} at its deadline");
    }
}

/// Polled once with the budget spent, then inside `unconstrained` in the same task poll:
/// the unconstrained poll registers the sleep before the deferred coop wake runs.
#[tokio::test(start_paused = true)]
async fn unconstrained_re_poll_in_the_same_task_poll_loses_no_wakeup() {
    let task = tokio::spawn(async {
        let mut q = DelayQueue::new();
        q.insert("a", ms(10));
        polls(|n, cx| match n {
            1 => {
                spend_budget(cx);
                assert!(q.poll_expired(cx).is_pending());
                let mut again = pin!(tokio::task::unconstrained(poll_fn(|cx| {
                    Poll::Ready(q.poll_expired(cx).is_pending())
                })));
                assert_eq!(again.as_mut().poll(cx), Poll::Ready(true));
                Poll::Pending
            }
            _ => Poll::Ready(()),
        })
        .await;
        next_within(&mut q, secs(60)).await
    });
    assert_eq!(task.await.unwrap(), Some(("a", ms(10))));
}

/// 200 queues, queue `i` with one entry at `deadline(i)`, polled in one task poll that
/// spends the budget half way (a busy resource drained there: the rest arm their sleeps
/// without it; a `Pending` poll of a sleep spends none); `direct_wake`: the first poll also
/// wakes the task directly. When each queue's entry came out (`None`: never, within 60 s of
/// the paused clock).
async fn burst(deadline: fn(usize) -> Duration, direct_wake: bool) -> Vec<Option<Duration>> {
    let start = Instant::now();
    let mut qs: Vec<DelayQueue<usize>> = (0..200)
        .map(|i| {
            let mut q = DelayQueue::new();
            q.insert(i, deadline(i));
            q
        })
        .collect();
    let mut out = vec![None; 200];
    let (mut first, mut spend) = (direct_wake, true);
    let run = poll_fn(|cx| {
        for (i, q) in qs.iter_mut().enumerate() {
            if i == 100 && std::mem::take(&mut spend) {
                spend_budget(cx);
            }
            while let Poll::Ready(Some(e)) = q.poll_expired(cx) {
                let i = e.into_inner();
                assert!(out[i].is_none(), "{i} twice");
                out[i] = Some(start.elapsed());
            }
        }
        if std::mem::take(&mut first) {
            cx.waker().wake_by_ref();
        }
        if out.iter().all(Option::is_some) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    });
    assert!(within(secs(60), run).await.is_some(), "done within 60 s");
    out
}

/// 200 queues polled in one task poll: the budget runs out half way, the rest arm their
/// sleeps without it. Every queue's entry comes out at its deadline, once.
#[tokio::test(start_paused = true)]
async fn a_burst_across_200_queues_in_one_task_poll() {
    let task = tokio::spawn(burst(|i| ms(10 + (i % 3) as u64), false));
    let out = task.await.unwrap();
    for (i, at) in out.into_iter().enumerate() {
        assert_eq!(at, Some(ms(10 + (i % 3) as u64)), "queue {i}");
    }
}

/// 200 queues in one task, and the task woken directly while the deferred coop wakes of
/// the queues polled after the budget ran out wait for the park: as
/// `deferred_coop_wake_after_a_budgeted_re_poll`, once per such queue. Those queues' entries
/// are due later (20 ms) than the first 100 (10 ms), so the wake at 10 ms does not hide a
/// lost one.
#[tokio::test(start_paused = true)]
async fn a_burst_across_200_queues_with_a_direct_wake() {
    let task = tokio::spawn(burst(|i| if i < 100 { ms(10) } else { ms(20) }, true));
    let out = task.await.unwrap();
    let lost: Vec<usize> = (0..200).filter(|&i| out[i].is_none()).collect();
    assert!(
        lost.is_empty(),
        "queues whose entry never came out: {lost:?}"
    );
    for (i, at) in out.into_iter().enumerate() {
        assert_eq!(at, Some(if i < 100 { ms(10) } else { ms(20) }), "queue {i}");
    }
}

/// On a `LocalSet`: the same deferred-wake script in a local task.
#[tokio::test(start_paused = true)]
async fn local_set_deferred_coop_wake() {
    let local = tokio::task::LocalSet::new();
    let got = local
        .run_until(async {
            tokio::task::spawn_local(async {
                let mut q = DelayQueue::new();
                q.insert("a", ms(10));
                queue_script(&mut q, spend).await;
                next_within(&mut q, secs(60)).await
            })
            .await
        })
        .await;
    assert_eq!(got.unwrap(), Some(("a", ms(10))));
}

/// Multi-thread runtime, real clock: the deferred-wake script; the entry must come out
/// within a generous bound (5 s for a 10 ms deadline), woken by its sleep, not early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_thread_deferred_coop_wake() {
    let task = tokio::spawn(async {
        let mut q = DelayQueue::new();
        let k = q.insert("a", ms(10));
        let deadline = q.deadline(&k);
        queue_script(&mut q, spend).await;
        // The bound first: an entry that comes out only when the bound wakes the task
        // counts as lost.
        let got = tokio::select! {
            biased;
            () = time::sleep(secs(5)) => None,
            e = q.next() => e.map(|e| e.into_inner()),
        };
        (got, Instant::now() >= deadline)
    });
    assert_eq!(task.await.unwrap(), (Some("a"), true));
}

// ---------------------------------------------------------------------------------------
// Scheduler::due_stream
// ---------------------------------------------------------------------------------------

fn paused_scheduler() -> (Arc<Scheduler<u32, u32, Instant>>, Instant) {
    let t0 = Instant::now();
    (
        Arc::new(Scheduler::builder().origin(t0.into_std()).build()),
        t0,
    )
}

/// The deferred-wake script on a `DueStream`: it polls its sleep with the task's waker on
/// every wait, so the deferred wake only wakes the task once more.
#[tokio::test(start_paused = true)]
async fn due_stream_deferred_coop_wake() {
    let (sched, t0) = paused_scheduler();
    let at = t0 + ms(10);
    sched.schedule(1, 1, at.into_std(), at).unwrap();
    let task = tokio::spawn(async move {
        let mut s = sched.due_stream();
        deferred_wake_script(&mut s, spend, |s, cx| s.poll_next_unpin(cx).is_pending()).await;
        let due = time::timeout(secs(60), s.next()).await;
        due.ok().flatten().map(|d| (*d.id(), Instant::now() - t0))
    });
    assert_eq!(task.await.unwrap(), Some((1, ms(10))));
}

/// A waiting `DueStream` polled with the budget spent, on every poll, by a counting waker
/// (the block_on task's budget is spent before each poll): it must not keep waking its
/// waker with nothing due (a busy loop), and yields the timer at its deadline.
#[tokio::test(start_paused = true)]
async fn due_stream_budget_spent_on_every_poll_is_no_busy_loop() {
    let (sched, t0) = paused_scheduler();
    let at = t0 + ms(10);
    sched.schedule(1, 1, at.into_std(), at).unwrap();
    let (count, waker) = counting_waker();
    let mut s = sched.due_stream();
    // First poll with budget: registered with the driver, then ten with it spent.
    assert!(
        s.poll_next_unpin(&mut Context::from_waker(&waker))
            .is_pending()
    );
    for _ in 0..10 {
        poll_fn(|cx| {
            spend_budget(cx);
            Poll::Ready(())
        })
        .await;
        let mut first = true;
        poll_fn(|cx| {
            if std::mem::take(&mut first) {
                spend_budget(cx);
                assert!(
                    s.poll_next_unpin(&mut Context::from_waker(&waker))
                        .is_pending()
                );
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            Poll::Ready(())
        })
        .await;
        settle().await;
    }
    let before = wakes(&count);
    assert!(before <= 10, "{before} wakeups for 10 budget-spent polls");
    // No poll since the last wake: the clock moves on to 10 ms, the sleep's end wakes it.
    time::sleep_until(at).await;
    settle().await;
    let after = wakes(&count);
    assert!(after > before, "the sleep's end woke the stream's waker");
    let due = s.poll_next_unpin(&mut Context::from_waker(Waker::noop()));
    assert!(matches!(due, Poll::Ready(Some(ref d)) if *d.id() == 1));
    assert!(Instant::now() >= at, "not early");
}

/// Takes `count` timers from `s`, spending the task's budget before every other poll, each
/// not before its deadline (the value), within `bound`; their ids, sorted.
async fn consume_spending(
    mut s: tickwheel::tokio::DueStream<u32, u32, Instant>,
    count: usize,
    bound: Duration,
) -> Vec<u32> {
    let mut out = Vec::new();
    let mut n = 0u32;
    let run = poll_fn(|cx| {
        n += 1;
        if n % 2 == 1 {
            spend_budget(cx);
        }
        while let Poll::Ready(Some(d)) = s.poll_next_unpin(cx) {
            assert!(Instant::now() >= *d.value(), "{} early", d.id());
            out.push(*d.id());
        }
        if out.len() == count {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    });
    assert!(within(bound, run).await.is_some(), "done within {bound:?}");
    out.sort_unstable();
    out
}

/// A `DueStream` in a spawned task that spends its budget on every other poll before
/// waiting (a busy consumer), with 300 timers at 10 to 14 ms: each once, never early, no hang.
#[tokio::test(start_paused = true)]
async fn due_stream_budget_spent_before_every_poll() {
    let (sched, t0) = paused_scheduler();
    for i in 0..300u32 {
        let at = t0 + ms(10 + u64::from(i % 5));
        sched.schedule(i % 7, i, at.into_std(), at).unwrap();
    }
    let task = tokio::spawn(consume_spending(sched.due_stream(), 300, secs(60)));
    let out = task.await.unwrap();
    assert_eq!(out, (0..300).collect::<Vec<_>>(), "each timer once");
}

/// A `DueStream` on the multi-thread runtime and the real clock, budget spent before every
/// other wait, timers scheduled from another task meanwhile: each once, never early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn due_stream_multi_thread_real_clock_budget_spent() {
    let t0 = Instant::now();
    let sched: Arc<Scheduler<u32, u32, Instant>> =
        Arc::new(Scheduler::builder().origin(t0.into_std()).build());
    let producer = {
        let sched = sched.clone();
        tokio::spawn(async move {
            for i in 0..200u32 {
                let at = Instant::now() + ms(1 + u64::from(i % 13));
                sched.schedule(i % 5, i, at.into_std(), at).unwrap();
                if i % 20 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        })
    };
    let consumer = tokio::spawn(consume_spending(sched.due_stream(), 200, secs(10)));
    producer.await.unwrap();
    let out = consumer.await.unwrap();
    assert_eq!(out, (0..200).collect::<Vec<_>>(), "each timer once");
}
