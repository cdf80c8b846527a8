//! The expiry driver of `acquire_async`: expiry at the deadline tick, re-arming for an
//! earlier deadline, one driver for many waiters, its end with the queue, and a new driver
//! when the runtime of the old one shuts down.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::{Duration, Instant};

use super::*;

const TICK: Duration = Duration::from_millis(10);

/// Tokio's `now` as a `std::time::Instant` (the paused clock's, under `start_paused`).
fn tokio_now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// A queue of one unit, held: every request waits.
fn full_queue() -> (AdmissionQueue, Permit) {
    let q = AdmissionQueue::new(1, TICK);
    let held = q.acquire(1, Instant::now() + Duration::from_secs(3600));
    (q, held.expect("an empty queue grants at once"))
}

/// Each waiter expires when its deadline tick begins on the paused clock, before the next
/// tick, all by one driver. Deadlines are seconds apart on the paused clock: the queue also
/// reads real time (`Instant::now()` at registration), which must stay behind them.
#[tokio::test(start_paused = true)]
async fn waiters_expire_at_their_deadline_tick_by_one_driver() {
    let (q, _held) = full_queue();
    let mut tasks = Vec::new();
    for k in 1..=5u64 {
        let deadline = tokio_now() + Duration::from_millis(1_000 * k + 5);
        let wake_at = q
            .clock()
            .instant_saturating(q.clock().deadline_tick(deadline));
        let acquire = q.acquire_async(1, deadline);
        tasks.push(tokio::spawn(async move {
            let result = acquire.await;
            (result.map(|p| p.amount()), wake_at, tokio_now())
        }));
    }
    for task in tasks {
        let (result, wake_at, at) = task.await.expect("waiter task");
        assert_eq!(result, Err(AcquireError::Expired));
        assert!(at >= wake_at, "expired early: {:?}", wake_at - at);
        assert!(at < wake_at + TICK, "expired late: {:?}", at - wake_at);
    }
    assert_eq!(q.driver().spawned.load(Ordering::Relaxed), 1);
}

/// A waiter with an earlier deadline than the one the driver sleeps for wakes it to re-arm:
/// it expires at its own deadline, not at the later one.
#[tokio::test(start_paused = true)]
async fn an_earlier_waiter_rearms_the_driver() {
    let (q, _held) = full_queue();
    let late = tokio::spawn(q.acquire_async(1, tokio_now() + Duration::from_secs(1_000)));
    tokio::time::sleep(Duration::from_millis(5)).await; // the driver sleeps for it now
    let start = tokio_now();
    let early = q.acquire_async(1, start + Duration::from_secs(2));
    assert_eq!(early.await.unwrap_err(), AcquireError::Expired);
    let took = tokio_now() - start;
    assert!(took < Duration::from_secs(2) + TICK, "{took:?}");
    late.abort();
}

/// The driver holds the queue weakly: dropping the queue (and its waiters) ends the task.
#[tokio::test(start_paused = true)]
async fn dropping_the_queue_ends_its_driver() {
    let (q, held) = full_queue();
    let driver = q.driver().clone();
    let mut waiting = Box::pin(q.acquire_async(1, tokio_now() + Duration::from_secs(3600)));
    let polled = std::future::poll_fn(|cx| Poll::Ready(waiting.as_mut().poll(cx).is_pending()));
    assert!(polled.await, "the request waits");
    tokio::task::yield_now().await;
    assert!(driver.alive.load(Ordering::Acquire), "a driver was spawned");
    drop((waiting, held, q));
    for _ in 0..100 {
        if !driver.alive.load(Ordering::Acquire) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("the driver outlived its queue");
}

/// 10 000 tasks waiting on one queue make one driver, and all of them expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_waiters_make_one_driver() {
    let (q, _held) = full_queue();
    // Far enough ahead that all 10 000 are registered before it, on a slow machine too.
    let deadline = Instant::now() + Duration::from_secs(1);
    let tasks: Vec<_> = (0..10_000)
        .map(|_| tokio::spawn(q.acquire_async(1, deadline)))
        .collect();
    for task in tasks {
        let result = task.await.expect("waiter task");
        assert_eq!(result.unwrap_err(), AcquireError::Expired);
    }
    assert_eq!(q.driver().spawned.load(Ordering::Relaxed), 1);
}

/// The driver's runtime shuts down while a task of another runtime waits: that task is
/// woken, spawns a driver where it runs, and still expires.
#[test]
fn a_runtime_shut_down_under_its_driver_strands_no_waiter() {
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_time()
            .build()
            .expect("a runtime")
    };
    let (first, second) = (runtime(), runtime());
    let (q, _held) = full_queue();
    let _on_first = first.spawn(q.acquire_async(1, Instant::now() + Duration::from_secs(3600)));
    let spawned = |n| {
        for _ in 0..5_000 {
            if q.driver().spawned.load(Ordering::Relaxed) >= n {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        false
    };
    assert!(spawned(1), "the first runtime spawned the driver");
    // Waiting (polled once, its waker recorded) before the first runtime shuts down.
    let polled = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut acquire = Box::pin(q.acquire_async(1, Instant::now() + Duration::from_secs(1)));
    let flag = polled.clone();
    let on_second = second.spawn(std::future::poll_fn(move |cx| {
        let poll = acquire.as_mut().poll(cx);
        flag.store(true, Ordering::Release);
        poll
    }));
    while !polled.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(q.driver().spawned.load(Ordering::Relaxed), 1, "one driver");
    drop(first);
    let result =
        second.block_on(async { tokio::time::timeout(Duration::from_secs(30), on_second).await });
    let result = result.expect("the waiter on the second runtime resolved");
    assert_eq!(
        result.expect("waiter task").unwrap_err(),
        AcquireError::Expired
    );
    assert_eq!(q.driver().spawned.load(Ordering::Relaxed), 2, "respawned");
}
