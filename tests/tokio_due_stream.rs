//! `Scheduler::due_stream`, the async dispatcher: deadline order across shards and queues,
//! never early, woken early by an earlier timer from another task or OS thread (and by a
//! batch put back elsewhere), fairness to other tasks, several streams on one scheduler.
//! Drains racing the stream, dropping it and shutting it down are in
//! `tokio_due_stream_drains.rs`.
//!
//! Everything runs under tokio's paused clock (`start_paused`): time moves only when every
//! task waits, straight to the next timer, so "yielded at 10 ms and not at 1 h" is an exact,
//! deterministic check. A lost wakeup shows up as an item yielded at the far timer's time.
//! The one exception, `multi_thread_runtime_on_the_real_clock`, has a 60 s bound for what
//! takes 10 ms. (One `Sleep` reused is checked in `src/tokio/due_stream.rs`, where the
//! count of sleeps made can be seen.)
#![cfg(feature = "tokio")]

mod support;
use support::due_stream;

use std::future::poll_fn;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::{Stream as _, StreamExt};
use tickwheel::sync::Scheduler;
use tickwheel::tokio::DueStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{self, Duration, Instant};

use due_stream::*;

// ---------------------------------------------------------------------------------------
// Order and timing
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn yields_in_deadline_order_across_shards_and_queues_exactly_on_time() {
    let (sched, t0) = scheduler(4);
    // 300 timers in 5 queues, scheduled out of deadline order, many sharing a deadline,
    // in wheel levels 0 to 2, some already past.
    let mut expected = Vec::new();
    for i in 0..300u64 {
        let id = (i * 919) % 1000; // distinct, not in schedule order
        let offset_ms = match i % 4 {
            0 => (i * 37) % 97,
            1 => 64 * (i % 40),
            2 => 4096 + (i * 131) % 5000,
            _ => 0,
        };
        let at = if i % 50 == 3 {
            t0 - ms(5) // past: due at once, reported as asked
        } else {
            t0 + ms(offset_ms)
        };
        schedule(&sched, (i % 5) as u32, id, at);
        expected.push((at.max(t0), i, id));
    }
    expected.sort_unstable();
    let mut stream = sched.due_stream().batch_limit(7);
    let mut got = Vec::new();
    for _ in 0..300 {
        got.push(next_out(&mut stream).await);
    }
    assert_eq!(
        ids(&got),
        expected.iter().map(|&(_, _, id)| id).collect::<Vec<_>>(),
        "deadline order, then schedule order, across shards and queues"
    );
    for o in &got {
        assert_eq!(o.at, o.deadline.max(t0), "id {} yielded on time", o.id);
    }
    assert_eq!((sched.len(), sched.in_flight_len()), (0, 0));
    assert!(
        poll_once(&mut stream).is_pending(),
        "empty: pending, not ended"
    );
}

#[tokio::test(start_paused = true)]
async fn never_early_with_an_odd_resolution_and_origin() {
    let t0 = Instant::now();
    let resolution = Duration::from_micros(700);
    let origin = t0 - Duration::from_micros(300);
    let sched = scheduler_with(2, resolution, origin);
    for id in 0..200u64 {
        let at = t0 + Duration::from_nanos((id * 7_777_777) % 50_000_000);
        schedule(&sched, 0, id, at);
    }
    let mut stream = sched.due_stream().batch_limit(5);
    let mut last_tick = 0;
    for _ in 0..200 {
        let o = next_out(&mut stream).await; // checks deadline <= tokio's now
        let late = o.at - o.deadline;
        // One tick of rounding up, plus tokio's own 1 ms rounding of the sleep.
        assert!(late <= resolution + ms(1), "id {} late by {late:?}", o.id);
        let tick = (o.deadline - origin)
            .as_nanos()
            .div_ceil(resolution.as_nanos());
        assert!(tick >= last_tick, "tick order: {tick} after {last_tick}");
        last_tick = tick;
    }
    assert!(sched.is_empty());
}

#[tokio::test(start_paused = true)]
async fn never_early_with_a_real_time_origin_ahead_of_the_paused_clock() {
    // `Scheduler::new()` takes its origin from std's clock, which has moved on while tokio's
    // is paused. Nothing is due before the origin, so timers come out late, never early.
    let t0 = Instant::now();
    let sched: Arc<Sched> = Arc::new(Scheduler::new());
    for id in 0..20u64 {
        schedule(&sched, 0, id, t0 + ms(id % 7));
    }
    let mut stream = sched.due_stream();
    for _ in 0..20 {
        next_out(&mut stream).await; // checks deadline <= tokio's now
    }
    assert!(sched.is_empty());
}

// ---------------------------------------------------------------------------------------
// Progress: a waiting stream never spins
// ---------------------------------------------------------------------------------------

/// Forwards to the task's waker. A fresh one per poll is a waker that `will_wake` says is
/// not the last one, as combinators that wrap the waker make, and as tokio's own waker
/// looks when its vtable is duplicated across codegen units (release builds with several).
struct Forward(Waker);

impl Wake for Forward {
    fn wake(self: Arc<Self>) {
        self.0.wake_by_ref();
    }
}

/// Polls per item allowed: the wait (`Pending`), the poll the sleep's wakeup brings
/// (`Ready`), and slack for a spurious wakeup or two. A spin takes thousands.
const POLLS_PER_ITEM: u32 = 4;

/// The next item, or `Err` once the stream was polled more than `POLLS_PER_ITEM` times
/// for it (a spin, which would otherwise hang) or an hour of paused time passed (a lost
/// wakeup). With `fresh_waker`, each poll gets a new [`Forward`] waker.
async fn next_within_bounded_polls(stream: &mut Stream, fresh_waker: bool) -> Result<Out, String> {
    let mut polls = 0;
    let next = poll_fn(|cx| {
        polls += 1;
        if polls > POLLS_PER_ITEM {
            return Poll::Ready(None);
        }
        let forward = Waker::from(Arc::new(Forward(cx.waker().clone())));
        let waker = if fresh_waker { &forward } else { cx.waker() };
        stream
            .poll_next_unpin(&mut Context::from_waker(waker))
            .map(|due| Some(due.map(|due| record(&due))))
    });
    match time::timeout(HOUR, next).await {
        Ok(Some(Some(out))) => Ok(out),
        Ok(Some(None)) => Err("the stream ended".into()),
        Ok(None) => Err(format!(
            "spins: no item in {POLLS_PER_ITEM} polls, tokio now {:?}",
            Instant::now()
        )),
        Err(_) => Err("no item for an hour: a lost wakeup".into()),
    }
}

/// Regression: with 16 codegen units in release, a waiting stream spun at one
/// instant (the paused clock never moved). tokio's waker was not `will_wake` its own
/// clone, so every wait "forgot" the previous waker and woke it: the stream's own task.
/// Deterministic here in every profile: a fresh waker per poll, across origins at
/// sub-millisecond offsets from tokio's millisecond grid and resolutions that are not
/// whole milliseconds, where tokio rounds each sleep up to its grid. Each item comes within
/// a few polls, never early (`record`), at most a tick plus tokio's 1 ms late.
#[tokio::test(start_paused = true)]
async fn a_waiting_stream_makes_progress_whatever_the_waker_origin_and_resolution() {
    let ns = Duration::from_nanos;
    let offsets: [i64; 9] = [
        -1_500_000, -300_000, -26_000, -1, 0, 1, 26_000, 999_999, 1_300_000,
    ];
    let resolutions = [
        ms(1),
        Duration::from_micros(700),
        Duration::from_micros(1300),
        ms(10),
    ];
    let mut failures = Vec::new();
    for fresh_waker in [true, false] {
        for &resolution in &resolutions {
            for &offset in &offsets {
                let t0 = Instant::now();
                let origin = if offset < 0 {
                    t0 - ns(offset.unsigned_abs())
                } else {
                    t0 + ns(offset.unsigned_abs())
                };
                let sched: Arc<Sched> = scheduler_with(2, resolution, origin);
                // At t0 (before an origin ahead of it) and sub-millisecond steps after, out of
                // order.
                for id in 0..12u64 {
                    let after = ns((id * 3_733_331) % 25_000_000);
                    schedule(&sched, (id % 2) as u32, id, t0 + after);
                }
                let mut stream = sched.due_stream().batch_limit(2);
                for _ in 0..12 {
                    match next_within_bounded_polls(&mut stream, fresh_waker).await {
                        Ok(o) => {
                            let late = o.at - o.deadline.max(origin);
                            assert!(late <= resolution + ms(1), "id {} late by {late:?}", o.id);
                        }
                        Err(e) => {
                            failures.push(format!(
                                "fresh waker {fresh_waker}, resolution {resolution:?}, origin \
                                 t0{offset:+} ns: {e}"
                            ));
                            break;
                        }
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} cases:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

// ---------------------------------------------------------------------------------------
// Early wake-up
// ---------------------------------------------------------------------------------------

/// A scheduler with one timer at 1 h and a dispatcher task asleep until then.
async fn asleep_until_an_hour() -> (
    Arc<Sched>,
    Instant,
    JoinHandle<()>,
    mpsc::UnboundedReceiver<Out>,
) {
    let (sched, t0) = scheduler(4);
    schedule(&sched, 0, 1, t0 + HOUR);
    let (task, mut rx) = spawn_dispatcher(sched.due_stream(), false);
    settle().await;
    assert!(rx.try_recv().is_err(), "nothing due yet");
    (sched, t0, task, rx)
}

#[tokio::test(start_paused = true)]
async fn wakes_early_for_an_earlier_timer_from_another_task() {
    let (sched, t0, task, mut rx) = asleep_until_an_hour().await;
    let producer = Arc::clone(&sched);
    tokio::spawn(async move { schedule(&producer, 1, 2, t0 + ms(10)) })
        .await
        .unwrap();
    let o = rx.recv().await.unwrap();
    assert_eq!((o.id, o.at), (2, t0 + ms(10)), "woken for it, not at 1 h");

    // Asleep until 1 h again; a reschedule to earlier wakes it too.
    sched.reschedule(&1, (t0 + ms(20)).into_std()).unwrap();
    let o = rx.recv().await.unwrap();
    assert_eq!((o.id, o.at), (1, t0 + ms(20)));

    // And a timer already past, scheduled while it sleeps on an empty scheduler.
    settle().await;
    schedule(&sched, 1, 3, t0);
    let o = rx.recv().await.unwrap();
    assert_eq!((o.id, o.at), (3, t0 + ms(20)), "at once");
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn wakes_early_for_an_earlier_timer_from_another_os_thread() {
    let (sched, t0, task, mut rx) = asleep_until_an_hour().await;
    let at = (t0 + ms(10)).into_std();
    let producer = Arc::clone(&sched);
    // `spawn_blocking` runs on another OS thread, and while it runs the paused clock does
    // not auto-advance: the runtime parks for real, and only that thread can wake the
    // dispatcher. (The real sleep just makes it likely that the runtime is parked first.)
    tokio::task::spawn_blocking(move || {
        std::thread::sleep(std::time::Duration::from_millis(20));
        producer.schedule(1, 2, at, 2).unwrap();
    })
    .await
    .unwrap();
    let o = rx.recv().await.unwrap();
    assert_eq!((o.id, o.at), (2, t0 + ms(10)), "woken for it, not at 1 h");
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn wakes_early_when_a_batch_elsewhere_puts_an_earlier_timer_back() {
    let (sched, t0) = scheduler(2);
    schedule(&sched, 0, 1, t0 + ms(10));
    schedule(&sched, 0, 2, t0 + HOUR);
    time::advance(ms(10)).await;
    let batch = sched.pop_due(Instant::now().into_std(), 10); // id 1 in flight, elsewhere
    assert_eq!(batch.len(), 1);
    let (task, mut rx) = spawn_dispatcher(sched.due_stream(), false);
    settle().await; // asleep until 1 h: id 1 is not pending
    drop(batch); // untaken: back, pending and due
    let o = rx.recv().await.unwrap();
    assert_eq!((o.id, o.at), (1, t0 + ms(10)), "woken at once, not at 1 h");
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_thread_runtime_on_the_real_clock() {
    let t0 = std::time::Instant::now();
    let sched: Arc<Sched> = Arc::new(Scheduler::builder().origin(t0).build());
    sched.schedule(0, 1, t0 + HOUR, 1).unwrap();
    let (task, mut rx) = spawn_dispatcher(sched.due_stream(), false);
    time::sleep(ms(20)).await; // the dispatcher is (very likely) asleep on a worker by now
    let producer = Arc::clone(&sched);
    std::thread::spawn(move || {
        let at = std::time::Instant::now() + std::time::Duration::from_millis(10);
        producer.schedule(1, 2, at, 2).unwrap();
    })
    .join()
    .unwrap();
    let o = time::timeout(Duration::from_secs(60), rx.recv())
        .await
        .expect("woken for the earlier timer, not left asleep until 1 h")
        .unwrap();
    assert_eq!(o.id, 2); // `record` checked it was not early
    task.abort();
}

// ---------------------------------------------------------------------------------------
// Several consumers, fairness, traits
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn two_streams_share_the_timers_each_exactly_once() {
    let (sched, _, mut ledger) = filled(4, 600, 3, 200);
    let (stop_a, task_a, rx_a) = stoppable(sched.due_stream().batch_limit(4));
    let (stop_b, task_b, rx_b) = stoppable(sched.due_stream().batch_limit(4));
    let a = stop_when_empty(&sched, stop_a, task_a, rx_a).await;
    let b = stop_when_empty(&sched, stop_b, task_b, rx_b).await;
    assert!(
        !a.is_empty() && !b.is_empty(),
        "both took part: {} / {}",
        a.len(),
        b.len()
    );
    for o in a.iter().chain(&b) {
        ledger.ended(o.id);
        assert!(o.at - o.deadline < ms(1), "id {} on time", o.id);
    }
    ledger.assert_balanced();
}

#[tokio::test(start_paused = true)]
async fn a_backlog_of_due_timers_lets_other_tasks_run() {
    let (sched, t0) = scheduler(2);
    for id in 0..1000u64 {
        schedule(&sched, 0, id, t0);
    }
    let ran = Arc::new(AtomicBool::new(false));
    let other = Arc::clone(&ran);
    tokio::spawn(async move { other.store(true, Ordering::SeqCst) });
    let mut stream = sched.due_stream();
    let mut first_seen = None;
    for n in 0..1000 {
        next_out(&mut stream).await;
        if first_seen.is_none() && ran.load(Ordering::SeqCst) {
            first_seen = Some(n);
        }
    }
    let n = first_seen.expect("the other task ran while the backlog was drained");
    assert!(n <= 200, "the other task waited {n} items");
}

#[test]
fn the_stream_is_send_sync_unpin_and_debug() {
    fn check<S: Send + Sync + Unpin + std::fmt::Debug>() {}
    check::<DueStream<String, u64, Vec<u8>>>();
    // `Unpin` whatever the types are.
    check_unpin::<DueStream<u8, u8, std::marker::PhantomPinned>>();
    fn check_unpin<S: Unpin>() {}
}

#[tokio::test(start_paused = true)]
async fn accessors() {
    let (sched, t0) = scheduler(1);
    let stream = sched.due_stream().batch_limit(0);
    assert!(Arc::ptr_eq(stream.scheduler(), &sched));
    assert_eq!(stream.batch_len(), 0);
    assert!(
        format!("{stream:?}").contains("batch_limit: 1"),
        "0 is taken as 1"
    );
    let mut stream = stream;
    schedule(&sched, 0, 1, t0);
    schedule(&sched, 0, 2, t0);
    assert_eq!(next_out(&mut stream).await.id, 1);
    assert_eq!(stream.size_hint(), (0, None), "batches of one");
    let mut stream = sched.due_stream();
    schedule(&sched, 0, 3, t0);
    assert_eq!(next_out(&mut stream).await.id, 2);
    assert_eq!(stream.size_hint(), (1, None));
    let due = poll_fn(|cx| stream.poll_next_unpin(cx)).await.unwrap();
    assert_eq!(*due.id(), 3);
}
