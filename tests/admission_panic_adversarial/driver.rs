//! The expiry driver and wakers that panic: when cloned (where the queue records a waker,
//! and where the driver's end wakes every waiting task), when the driver's expiry wakes
//! them, when the driver's end wakes them, when a poll that must spawn a new driver drops
//! them.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::task::{Context, Poll};
use std::thread;
use std::time::{Duration, Instant};

use tickwheel::admission::{Acquire, AcquireError, Permit};

use super::wakers::*;

// --- wakers whose clone panics ----------------------------------------------------------------

/// A poll whose waker's clone panics (the clone the queue records): the poll panics, the
/// request keeps waiting, and a later poll with a good waker gets its grant.
#[test]
fn a_poll_whose_waker_clone_panics_leaves_the_request_whole() {
    enter_idle!();
    let (q, all) = full(2);
    let mut fut = q.acquire_async(1, far());
    let mut dropped = q.acquire_async(1, far());
    let (state, bad) = clone_panics::waker(1);
    assert!(panicked(|| {
        let _ = poll_once(&mut fut, &bad);
    }));
    assert!(panicked(|| {
        let _ = poll_once(&mut dropped, &bad);
    }));
    assert_eq!(state.clones.load(Ordering::SeqCst), 2, "each poll cloned");
    assert_eq!(q.waiting(), 2, "both still wait: {q:?}");
    drop(dropped); // cancelled with no waker recorded
    let (woken, good) = counting();
    assert!(poll_once(&mut fut, &good).is_pending());
    drop(all);
    assert_eq!(
        woken.load(Ordering::SeqCst),
        1,
        "the grant woke the good waker"
    );
    let Poll::Ready(Ok(p)) = poll_once(&mut fut, &good) else {
        panic!("the grant is lost: {q:?}");
    };
    assert_eq!(p.amount(), 1);
    drop((p, fut));
    assert_back(&q, 2);
}

/// The driver's runtime shuts down: the driver's end clones every waiting task's waker (under
/// the queue lock) to wake it. The first waker's clone panics: the waiters behind it must
/// still be woken, else none of them is polled to spawn a new driver, and none expires.
fn the_driver_ends_with_a_waker_whose_clone_panics() {
    let rt = idle_runtime();
    let (q, one) = full(1);
    let mut first = q.acquire_async(1, far());
    let mut second = q.acquire_async(1, far());
    let (state, bad) = clone_panics::waker(2); // the poll's clone passes, the next panics
    let (woken, good) = counting();
    {
        let _guard = rt.enter();
        assert!(poll_once(&mut first, &bad).is_pending()); // spawns the driver on `rt`
        assert!(poll_once(&mut second, &good).is_pending());
    }
    drop(bad);
    let _ = catch_unwind(AssertUnwindSafe(|| drop(rt)));
    assert_eq!(
        state.clones.load(Ordering::SeqCst),
        2,
        "the driver's end cloned it"
    );
    // Still usable: nothing poisoned, no lock left held.
    assert_eq!(q.waiting(), 2);
    let woken = woken.load(Ordering::SeqCst);
    drop((first, second, one));
    assert_back(&q, 1);
    assert_eq!(
        woken, 1,
        "the second waiter was never woken to spawn a new driver"
    );
}

child_test!(
    a_driver_ending_with_a_waker_whose_clone_panics_still_wakes_the_others,
    the_driver_ends_with_a_waker_whose_clone_panics
);

/// What that loses in practice: a task on a live runtime waits behind a waiter whose clone
/// panics; the driver's runtime shuts down, and the task is never woken to spawn a new
/// driver, so it never expires.
#[test]
fn a_task_behind_a_waker_whose_clone_panics_still_expires() {
    let (q, one) = full(1);
    let rt = idle_runtime();
    let mut first = q.acquire_async(1, far());
    let (_state, bad) = clone_panics::waker(2);
    {
        let _guard = rt.enter();
        assert!(poll_once(&mut first, &bad).is_pending());
    }
    let live = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_time()
        .build()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let q2 = q.clone();
    let (polled_tx, polled_rx) = mpsc::channel();
    live.spawn(async move {
        let fut = q2.acquire_async(1, Instant::now() + Duration::from_millis(100));
        let _ = polled_tx.send(());
        let _ = tx.send(fut.await.map(|p| p.amount()));
    });
    polled_rx.recv_timeout(HANG).expect("the task runs");
    thread::sleep(Duration::from_millis(20)); // its first poll is made
    let _ = catch_unwind(AssertUnwindSafe(|| drop(rt)));
    let got = rx.recv_timeout(Duration::from_secs(10));
    drop((first, one, live));
    assert_eq!(got, Ok(Err(AcquireError::Expired)), "{q:?}");
}

// --- the expiry driver waking a panicking waker -------------------------------------------------

/// Polls its future with a waker that wakes the task and then panics.
struct PanicsAfterWaking(Acquire);

impl Future for PanicsAfterWaking {
    type Output = Result<Permit, AcquireError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let w = waker(Spec {
            panic_on: Some(always),
            forward: Some(cx.waker().clone()),
            ..Spec::default()
        });
        Pin::new(&mut self.0).poll(&mut Context::from_waker(&w))
    }
}

/// The driver's expiry wakes a waker that panics, so the driver task panics and ends. The
/// waiters still waiting, and those registered later, must still expire: a new driver.
#[test]
fn a_driver_that_panics_in_an_expiry_is_replaced_and_the_rest_expire() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let (q, one) = full(1);
    let (tx, rx) = mpsc::channel();
    let at = |ms| Instant::now() + Duration::from_millis(ms);
    for (name, deadline, panics) in [("first", at(20), true), ("second", at(150), false)] {
        let (tx, q) = (tx.clone(), q.clone());
        rt.spawn(async move {
            let fut = q.acquire_async(1, deadline);
            let r = if panics {
                PanicsAfterWaking(fut).await
            } else {
                fut.await
            };
            let _ = tx.send((name, r.map(|p| p.amount())));
        });
    }
    let mut seen = Vec::new();
    for _ in 0..2 {
        seen.push(rx.recv_timeout(HANG).expect("a waiter never expired"));
    }
    seen.sort_by_key(|(name, _)| *name);
    let expired = Err(AcquireError::Expired);
    assert_eq!(seen, [("first", expired), ("second", expired)]);
    // Later still: a waiter registered after both, and one whose waker panics again.
    for panics in [true, false] {
        let (tx, q) = (tx.clone(), q.clone());
        rt.spawn(async move {
            let fut = q.acquire_async(1, Instant::now() + Duration::from_millis(30));
            let r = if panics {
                PanicsAfterWaking(fut).await
            } else {
                fut.await
            };
            let _ = tx.send(("later", r.map(|p| p.amount())));
        });
        let got = rx.recv_timeout(HANG).expect("a later waiter never expired");
        assert_eq!(got, ("later", expired));
    }
    drop((one, rt));
    assert_back(&q, 1);
}

// --- the driver's end, and a new driver after it ------------------------------------------------

/// The driver's runtime shuts down with four tasks waiting: the first and third wakers
/// panic, the second and fourth are woken all the same.
#[test]
fn the_drivers_end_wakes_every_waiter_though_two_wakers_panic() {
    let rt = idle_runtime();
    let (q, one) = full(1);
    let mut futs: Vec<_> = (0..4).map(|_| q.acquire_async(1, far())).collect();
    let (second, second_waker) = counting();
    let (fourth, fourth_waker) = counting();
    let wakers = [
        panics_on_wake(),
        second_waker,
        panics_on_wake(),
        fourth_waker,
    ];
    {
        let _guard = rt.enter();
        for (f, w) in futs.iter_mut().zip(&wakers) {
            assert!(poll_once(f, w).is_pending());
        }
    }
    let _ = catch_unwind(AssertUnwindSafe(move || drop(rt)));
    assert_eq!(
        (second.load(Ordering::SeqCst), fourth.load(Ordering::SeqCst)),
        (1, 1),
        "a waiter left unwoken, so it would spawn no new driver"
    );
    drop((futs, one));
    assert_back(&q, 1);
}

/// The driver's runtime shut down; the next poll (on a live runtime) records a new waker
/// and must spawn a new driver, but the waker it replaces panics when dropped. The driver
/// is spawned all the same: the request expires with nobody calling `advance`.
#[test]
fn a_poll_whose_replaced_waker_panics_when_dropped_still_spawns_a_driver() {
    let (q, one) = full(1);
    let deadline = Instant::now() + Duration::from_millis(100);
    let mut fut = q.acquire_async(1, deadline);
    {
        enter_idle!();
        let drop_panics = waker(Spec {
            drop_panics: true,
            ..Spec::default()
        });
        assert!(poll_once(&mut fut, &drop_panics).is_pending());
    } // the waker's last copy is the recorded one; the driver ends with the runtime
    let live = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_time()
        .build()
        .unwrap();
    let (woken, good) = counting();
    {
        let _guard = live.enter();
        assert!(panicked(|| {
            let _ = poll_once(&mut fut, &good);
        }));
    }
    let expired = within("the expiry", move || {
        let until = Instant::now() + Duration::from_secs(10);
        while woken.load(Ordering::SeqCst) == 0 && Instant::now() < until {
            thread::sleep(RES);
        }
        woken.load(Ordering::SeqCst)
    });
    assert_eq!(expired, 1, "no driver expired the request: {q:?}");
    assert!(matches!(
        poll_once(&mut fut, &good),
        Poll::Ready(Err(AcquireError::Expired))
    ));
    drop((fut, one, live));
    assert_back(&q, 1);
}
