//! A waker that panics — when woken, or when dropped — among the calls a queue makes once its
//! lock is released: the panic reaches the caller, but every other waiter of the same batch is
//! still woken, every queue short of the global limit is still told, the grant-pass signal is
//! left free for the next advance, and all capacity comes back.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::Ordering;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use tickwheel::admission::{AdmissionQueue, Limit, Order, TicketState, WaitQueue};

use crate::support::admission::{RES, enter_idle, far, full, limited, poll_once, under};
use crate::support::tasks::idle_runtime;
use crate::wakers::{
    Spec, all_granted, counting, expiring_soon, panics_on_wake, short_queues, sleep_past, waker,
};

/// Runs `f`; asserts it panicked.
fn panics_through(f: impl FnOnce()) {
    let unwound = catch_unwind(AssertUnwindSafe(f));
    assert!(unwound.is_err(), "the waker's panic reaches the caller");
}

/// One release grants four waiters; the second and the third wakers panic. The first and the
/// fourth are woken all the same, and the second panic does not abort the process.
#[test]
fn panicking_wakers_among_a_release_leave_the_others_woken() {
    enter_idle!();
    let (q, all) = full(8);
    let (first, first_waker) = counting();
    let (last, last_waker) = counting();
    let wakers = [first_waker, panics_on_wake(), panics_on_wake(), last_waker];
    let mut futures: Vec<_> = (0..4).map(|_| q.acquire_async(2, far())).collect();
    for (f, w) in futures.iter_mut().zip(&wakers) {
        assert!(poll_once(f, w).is_pending());
    }
    panics_through(|| drop(all));
    assert_eq!(first.load(Ordering::SeqCst), 1, "the first waiter woken");
    assert_eq!(last.load(Ordering::SeqCst), 1, "the last waiter woken");
    let quiet = Waker::noop();
    for f in &mut futures {
        assert!(matches!(poll_once(f, quiet), Poll::Ready(Ok(_))));
    }
    drop(futures);
    assert_eq!((q.available(), q.held(), q.waiting()), (8, 0, 0));
}

/// Four queues short of a shared limit, each with a waiter whose waker panics: a release of
/// another queue tells every one of them (in whatever order the limit lists them), though
/// each pass it runs panics.
#[test]
fn every_queue_short_of_the_limit_is_told_though_each_told_pass_panics() {
    enter_idle!();
    let (global, [give]) = limited(8, 8);
    let all = give.acquire(8, far()).unwrap();
    every_short_queue_told_by(&global, || drop(all));
    assert_eq!(global.available(), 8);
}

/// An advance whose expiry wakes a waker that panics leaves the signal free: a later advance
/// still expires the next ticket (a stuck signal would return at once, a pass "running").
#[test]
fn an_advance_whose_waker_panics_does_not_stop_later_advances() {
    enter_idle!();
    let (q, all) = full(4);
    let (soon, expiring) = expiring_soon(&q, 1);
    sleep_past(soon);
    panics_through(|| q.advance());
    let later = q
        .register(1, Instant::now() + Duration::from_millis(5))
        .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    q.advance();
    assert!(
        matches!(later.try_take(), Some(Err(_))),
        "the second ticket's deadline passed but it was not expired: {q:?}"
    );
    drop((expiring, later, all));
    assert_eq!((q.available(), q.held(), q.waiting()), (4, 0, 0));
}

/// Dropping a waiting head cancels it and grants the waiter behind it; the head's recorded
/// waker panics when dropped, and the waiter granted is woken all the same.
#[test]
fn a_recorded_waker_that_panics_when_dropped_leaves_the_grants_woken() {
    enter_idle!();
    let q = AdmissionQueue::new(10, RES);
    let four = q.acquire(4, far()).unwrap();
    let mut head = q.acquire_async(8, far()); // waits: 6 left
    let mut behind = q.acquire_async(6, far()); // fits, but waits behind the head (strict)
    let panics_when_dropped = waker(Spec {
        drop_panics: true,
        ..Spec::default()
    });
    assert!(poll_once(&mut head, &panics_when_dropped).is_pending());
    drop(panics_when_dropped); // the recorded copy is the last
    let (woken, waker) = counting();
    assert!(poll_once(&mut behind, &waker).is_pending());
    panics_through(|| drop(head));
    assert_eq!(woken.load(Ordering::SeqCst), 1, "the grant's waker woken");
    assert!(matches!(poll_once(&mut behind, &waker), Poll::Ready(Ok(_))));
    drop((behind, four));
    assert_eq!((q.available(), q.held(), q.waiting()), (10, 0, 0));
}

/// The driver's runtime shuts down: every waiting task is woken to spawn a new driver where
/// it runs. The first waker panics; the second is woken all the same.
#[test]
fn a_panicking_waker_when_the_driver_ends_leaves_the_other_waiters_woken() {
    let rt = idle_runtime();
    let (q, all) = full(4);
    let mut first = q.acquire_async(1, far());
    let mut second = q.acquire_async(1, far());
    let (woken, waker) = counting();
    {
        let _guard = rt.enter();
        assert!(poll_once(&mut first, &panics_on_wake()).is_pending()); // spawns the driver on `rt`
        assert!(poll_once(&mut second, &waker).is_pending());
    }
    // The driver task is dropped with the runtime; tokio may or may not pass its panic on.
    let _ = catch_unwind(AssertUnwindSafe(|| drop(rt)));
    assert_eq!(woken.load(Ordering::SeqCst), 1, "the second waiter woken");
    drop((first, second, all));
    assert_eq!((q.available(), q.held(), q.waiting()), (4, 0, 0));
}

/// A sequential queue's release tells a thread-safe queue sharing its limit at once, and
/// that queue's grant wakes a waker that panics: the release has made its own grants first.
#[test]
fn a_sequential_release_grants_before_telling() {
    enter_idle!();
    let global = Limit::new(10);
    let mut seq: WaitQueue<u32> = WaitQueue::with_options(10, Some(global.clone()), Order::Strict);
    let shared = under(&global, 10);
    let mut out = Vec::new();
    let all = seq.register(10, 100, 0, &mut out).unwrap();
    assert_eq!(seq.detach(all), Some(10));
    let mut told = shared.acquire_async(5, far()); // short of the global limit: listed
    assert!(poll_once(&mut told, &panics_on_wake()).is_pending());
    let three = seq.register(3, 100, 1, &mut out).unwrap(); // waits: nothing local left
    out.clear();
    panics_through(|| {
        let _ = seq.release(10, &mut out);
    });
    assert_eq!(
        seq.state(three),
        Some(TicketState::Granted { amount: 3 }),
        "the release's own grant pass did not run: {seq:?}"
    );
    assert_eq!(out.len(), 1, "the grant handed out");
    assert!(matches!(
        poll_once(&mut told, Waker::noop()),
        Poll::Ready(Ok(_))
    ));
    drop(told);
    assert_eq!(
        global.available(),
        7,
        "the 3 held, the rest back: {global:?}"
    );
}

/// Four queues short of `global`, each with a waiter of 2 whose waker panics; `release`
/// gives capacity back to `global`. The release panics (the first told pass does), yet every
/// queue was told: each waiter is granted.
fn every_short_queue_told_by(global: &Limit, release: impl FnOnce()) {
    let (queues, futures) = short_queues(global, 4);
    panics_through(release);
    all_granted(&queues, futures);
}

/// A sequential queue dropped with units of the limit held gives them back and tells every
/// queue short of it, though each told pass panics.
#[test]
fn a_dropped_queue_tells_every_short_queue_though_each_pass_panics() {
    enter_idle!();
    let global = Limit::new(8);
    let mut seq: WaitQueue<()> = WaitQueue::with_options(8, Some(global.clone()), Order::Strict);
    let all = seq.register(8, 100, (), &mut Vec::new()).unwrap();
    assert_eq!(seq.state(all), Some(TicketState::Granted { amount: 8 }));
    every_short_queue_told_by(&global, || drop(seq));
    assert_eq!(global.available(), 8);
}

/// A permit dropped while its holder's panic unwinds: the release's wake-ups include a waker
/// that panics too. Escaping a destructor during unwinding, that panic would abort the
/// process; it is caught, and the other waiter is woken.
#[test]
fn a_permit_dropped_by_a_panic_wakes_the_rest_without_aborting() {
    enter_idle!();
    let (q, all) = full(4);
    let mut first = q.acquire_async(2, far());
    let mut second = q.acquire_async(2, far());
    let (woken, waker) = counting();
    assert!(poll_once(&mut first, &panics_on_wake()).is_pending());
    assert!(poll_once(&mut second, &waker).is_pending());
    panics_through(move || {
        let _held = all;
        panic!("the holder panics");
    });
    assert_eq!(woken.load(Ordering::SeqCst), 1, "the second waiter woken");
    assert!(matches!(
        poll_once(&mut first, Waker::noop()),
        Poll::Ready(Ok(_))
    ));
    assert!(matches!(poll_once(&mut second, &waker), Poll::Ready(Ok(_))));
    drop((first, second));
    assert_eq!((q.available(), q.held(), q.waiting()), (4, 0, 0));
}
