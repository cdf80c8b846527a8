//! `DueStream`'s waker registration, one per stream: two streams in one task, a sibling
//! dropped while armed, a stream moved between tasks, wakers new on every poll, many
//! streams and short-lived tasks (registrations stay bounded: an allocator counting per
//! thread), and other tasks' streams dropped while one sleeps. Paused clock: a lost wakeup
//! shows as an item yielded at the far (1 h) timer's time, or a timeout. (Each test was shown to catch a planted fault in the registration.)
#![cfg(feature = "tokio")]

mod support;
use support::counting_alloc::{Counting, live_on_this_thread as live, per_thread};
use support::due_stream;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::StreamExt;
use tokio::time::{self, Duration, Instant};

use due_stream::*;

#[global_allocator]
static A: Counting = Counting(per_thread);

#[derive(Default)]
struct CountWake(AtomicUsize);
impl Wake for CountWake {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

struct Forward(Waker);
impl Wake for Forward {
    fn wake(self: Arc<Self>) {
        self.0.wake_by_ref();
    }
}

const GUARD: Duration = Duration::from_secs(3 * 3600);

/// A scheduler with `shards` shards and one timer (id 1, queue 0) an hour ahead: what a
/// stream sleeps towards while the earlier timers of a test arrive.
fn asleep_an_hour(shards: usize) -> (Arc<Sched>, Instant) {
    let (sched, t0) = scheduler(shards);
    schedule(&sched, 0, 1, t0 + HOUR);
    (sched, t0)
}

/// The next item a dispatcher task sent; a wait past [`GUARD`] is a lost wakeup.
async fn next_sent(rx: &mut tokio::sync::mpsc::UnboundedReceiver<Out>) -> Out {
    time::timeout(GUARD, rx.recv())
        .await
        .expect("hang: a lost wakeup")
        .expect("the dispatcher task is alive")
}

/// Waits for the next delivery and asserts it is `id`, yielded at `at` (`why` says why then).
async fn expect_next(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<Out>,
    (id, at): (u64, Instant),
    why: &str,
) {
    let o = next_sent(rx).await;
    assert_eq!((o.id, o.at), (id, at), "{why}");
}

/// Two streams in ONE task (select!), asleep until 1 h; a producer on another OS thread
/// schedules a timer at 10 ms: one of the streams must yield it at 10 ms.
#[tokio::test(start_paused = true)]
async fn two_streams_in_one_task_woken_from_os_thread() {
    let (sched, t0) = asleep_an_hour(4);
    let (mut a, mut b) = (sched.due_stream(), sched.due_stream());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        loop {
            let due = tokio::select! {
                Some(d) = a.next() => d,
                Some(d) = b.next() => d,
            };
            tx.send(record(&due)).unwrap();
        }
    });
    settle().await;
    let producer = Arc::clone(&sched);
    let at = (t0 + ms(10)).into_std();
    tokio::task::spawn_blocking(move || {
        std::thread::sleep(std::time::Duration::from_millis(20));
        producer.schedule(1, 2, at, 2).unwrap();
    })
    .await
    .unwrap();
    expect_next(&mut rx, (2, t0 + ms(10)), "woken for it, not at 1 h").await;
    expect_next(&mut rx, (1, t0 + HOUR), "then 1, at its deadline").await;
    task.abort();
}

/// One task polls A and B; A is dropped while armed (inside the task); B must still be
/// woken by an earlier timer scheduled from another task, and B alone stays registered.
#[tokio::test(start_paused = true)]
async fn drop_sibling_while_armed_then_earlier_timer() {
    for fresh in [false, true] {
        let (sched, t0) = asleep_an_hour(2);
        let a = sched.due_stream();
        let mut b = sched.due_stream();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let (drop_tx, drop_rx) = tokio::sync::oneshot::channel::<()>();
        let mut drop_rx = Some(drop_rx);
        let task = tokio::spawn(async move {
            let mut a_opt = Some(a);
            loop {
                let got = std::future::poll_fn(|cx| {
                    let fw = Waker::from(Arc::new(Forward(cx.waker().clone())));
                    let w = if fresh { &fw } else { cx.waker() };
                    let mut cx2 = Context::from_waker(w);
                    // the drop signal is polled with the task's waker, so it wakes us
                    if let Some(rx) = drop_rx.as_mut() {
                        if Pin::new(rx).poll(cx).is_ready() {
                            drop_rx = None;
                            a_opt = None; // dropped while armed, inside the task
                        }
                    }
                    if let Some(a) = a_opt.as_mut() {
                        if let Poll::Ready(d) = a.poll_next_unpin(&mut cx2) {
                            return Poll::Ready(d);
                        }
                    }
                    b.poll_next_unpin(&mut cx2)
                })
                .await
                .unwrap();
                tx.send(record(&got)).unwrap();
            }
        });
        settle().await;
        drop_tx.send(()).unwrap();
        settle().await;
        tokio::spawn({
            let s = Arc::clone(&sched);
            async move { schedule(&s, 1, 2, t0 + ms(10)) }
        })
        .await
        .unwrap();
        expect_next(
            &mut rx,
            (2, t0 + ms(10)),
            &format!("fresh {fresh}: woken for it, not at 1 h"),
        )
        .await;
        task.abort();
    }
}

/// A stream armed in task 1, moved to task 2 (not polled there yet), then polled there; an
/// earlier timer scheduled after the move must wake task 2.
#[tokio::test(start_paused = true)]
async fn stream_moved_between_tasks_then_earlier_timer() {
    let (sched, t0) = asleep_an_hour(2);
    let stream = sched.due_stream();
    let (stx, srx) = tokio::sync::oneshot::channel();
    let t1 = tokio::spawn(async move {
        let mut s = stream;
        assert!(poll_once_cx(&mut s).is_pending());
        // poll with this task's real waker, then hand the stream over
        std::future::poll_fn(|cx| {
            assert!(s.poll_next_unpin(cx).is_pending());
            Poll::Ready(())
        })
        .await;
        stx.send(s).ok();
        // keep task 1 alive and idle
        time::sleep(HOUR * 2).await;
    });
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let t2 = tokio::spawn(async move {
        let mut s = srx.await.unwrap();
        while let Some(d) = s.next().await {
            tx.send(record(&d)).unwrap();
        }
    });
    settle().await;
    schedule(&sched, 1, 2, t0 + ms(10));
    expect_next(&mut rx, (2, t0 + ms(10)), "moved stream woken, not at 1 h").await;
    t1.abort();
    t2.abort();
}

fn poll_once_cx(s: &mut Stream) -> Poll<Option<tickwheel::sync::Due<u32, u64, u64>>> {
    s.poll_next_unpin(&mut Context::from_waker(Waker::noop()))
}

/// Many streams created, armed and dropped, and one stream re-armed with a fresh waker each
/// poll: memory stays flat (registrations do not pile up).
#[tokio::test(start_paused = true)]
async fn registrations_stay_bounded() {
    let (sched, t0) = asleep_an_hour(2);
    let round = |n: usize| {
        for _ in 0..n {
            let mut s = sched.due_stream();
            let c = Arc::new(CountWake::default());
            let w = Waker::from(Arc::clone(&c));
            assert!(s.poll_next_unpin(&mut Context::from_waker(&w)).is_pending());
            drop(s);
            assert_eq!(
                c.0.load(Ordering::SeqCst),
                0,
                "dropping a stream wakes nobody"
            );
        }
    };
    round(1000);
    let before = live();
    round(50_000);
    let after = live();
    assert!(
        after - before < 16 * 1024,
        "created+dropped streams grew the heap by {} bytes",
        after - before
    );
    // One live stream, new waker every poll (each an Arc that must be released).
    let mut s = sched.due_stream();
    let mut tasks = Vec::new();
    for _ in 0..1000 {
        let c = Arc::new(CountWake::default());
        let w = Waker::from(Arc::clone(&c));
        assert!(s.poll_next_unpin(&mut Context::from_waker(&w)).is_pending());
        tasks.push(c);
    }
    let before = live();
    for _ in 0..50_000 {
        let c = Arc::new(CountWake::default());
        let w = Waker::from(Arc::clone(&c));
        assert!(s.poll_next_unpin(&mut Context::from_waker(&w)).is_pending());
        drop(w);
        // only the stream's registration (and tokio's sleep) may hold it now
        assert!(
            Arc::strong_count(&c) <= 3,
            "waker count {}",
            Arc::strong_count(&c)
        );
    }
    let after = live();
    assert!(
        after - before < 16 * 1024,
        "re-arming grew the heap by {}",
        after - before
    );
    // The last registered waker is the one woken by an earlier timer.
    let c = Arc::new(CountWake::default());
    let w = Waker::from(Arc::clone(&c));
    assert!(s.poll_next_unpin(&mut Context::from_waker(&w)).is_pending());
    schedule(&sched, 1, 2, t0 + ms(10));
    assert!(
        c.0.load(Ordering::SeqCst) >= 1,
        "the last waker was not woken"
    );
    assert!(
        tasks.iter().all(|t| t.0.load(Ordering::SeqCst) == 0),
        "an old waker was woken"
    );
}

/// Many short-lived tasks, each polling its own stream once while nothing is due, then
/// finishing (the stream drops with the task): heap flat.
#[tokio::test(start_paused = true)]
async fn short_lived_tasks_leave_no_wakers() {
    let (sched, _) = asleep_an_hour(2);
    let run = |n: usize| {
        let sched = Arc::clone(&sched);
        async move {
            for _ in 0..n {
                let mut s = sched.due_stream();
                tokio::spawn(async move {
                    let _ = time::timeout(ms(1), s.next()).await;
                })
                .await
                .unwrap();
            }
        }
    };
    run(500).await;
    let before = live();
    run(5_000).await;
    let after = live();
    assert!(
        after - before < 64 * 1024,
        "heap grew by {}",
        after - before
    );
}

/// N streams in N tasks, all asleep until 1 h; repeatedly a producer schedules an earlier
/// timer: each must come out at its own time (some stream woken), never at 1 h.
#[tokio::test(start_paused = true)]
async fn many_streams_many_tasks_each_early_timer_on_time() {
    let (sched, t0) = scheduler(4);
    schedule(&sched, 0, 0, t0 + HOUR);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let mut s = sched.due_stream().batch_limit(1 + i % 3);
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            while let Some(d) = s.next().await {
                tx.send(record(&d)).unwrap();
            }
        }));
    }
    settle().await;
    for k in 1..=40u64 {
        // schedule at now + k ms, from alternating places
        let at = Instant::now() + ms(k);
        if k % 2 == 0 {
            let s = Arc::clone(&sched);
            tokio::task::spawn_blocking(move || {
                s.schedule(1, k, at.into_std(), k).unwrap();
            })
            .await
            .unwrap();
        } else {
            schedule(&sched, 1, k, at);
        }
        // and drop/recreate one stream
        let o = next_sent(&mut rx).await;
        assert_eq!(o.id, k, "got {o:?}");
        assert!(
            o.at - o.deadline <= ms(1),
            "id {k} late: {:?}",
            o.at - o.deadline
        );
    }
    for t in tasks {
        t.abort();
    }
}

#[tokio::test(start_paused = true)]
async fn others_dropping_streams_do_not_unregister_a_sleeper() {
    let (sched, _) = asleep_an_hour(2);
    let (task, mut rx) = spawn_dispatcher(sched.due_stream(), false);
    settle().await;
    for round in 0..3u64 {
        // a task that arms a stream and ends
        let s2 = Arc::clone(&sched);
        tokio::spawn(async move {
            let mut s = s2.due_stream();
            assert!(poll_once_cx_real(&mut s).await.is_pending());
        })
        .await
        .unwrap();
        // a task aborted while its stream is armed
        let s3 = Arc::clone(&sched);
        let t = tokio::spawn(async move {
            let mut s = s3.due_stream();
            let _ = s.next().await;
        });
        settle().await;
        t.abort();
        let _ = t.await;
        // a stream armed here, dropped on another OS thread
        let mut s = sched.due_stream();
        assert!(poll_once_cx_real(&mut s).await.is_pending());
        std::thread::spawn(move || drop(s)).join().unwrap();
        settle().await;
        let id = 10 + round;
        let at = Instant::now() + ms(10);
        schedule(&sched, 1, id, at);
        expect_next(
            &mut rx,
            (id, at),
            &format!("round {round}: sleeper woken for it, not at 1 h"),
        )
        .await;
        settle().await;
    }
    task.abort();
}

async fn poll_once_cx_real(s: &mut Stream) -> Poll<()> {
    std::future::poll_fn(|cx| Poll::Ready(s.poll_next_unpin(cx).map(|_| ()))).await
}
