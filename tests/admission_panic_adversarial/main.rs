//! Wakers that panic — when woken, on a later wake only, when dropped, when cloned, after
//! giving capacity back — against the admission layer's promise: every request resolves
//! once, nothing is over-granted, all capacity comes back, nothing hangs, the process does
//! not abort. Cases that could abort run in a child process (the test binary run again with
//! a filter, `CHILD` set); cases that could hang run on a thread answered within `HANG`.
//! `calls` checks each call that wakes and tells after its lock (a release, a cancel, an
//! advance, the driver's end, a raised limit, a dropped queue); `driver` the expiry driver;
//! `threads` all of it at once from several threads.

#![cfg(feature = "tokio")]

#[path = "../support/mod.rs"]
mod support;

mod calls;
mod driver;
mod threads;
mod wakers;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use tickwheel::admission::{AcquireError, AdmissionQueue, Limit, Order, Permit};

use wakers::*;

// --- a registration whose own advance wakes a panicking waker ------------------------------

/// `register` advances the queue before it registers, and the expiry it makes wakes a waker
/// that panics. The registration is made (and may be granted at once, its units detached to
/// the new waiter) before the wake-ups, but the panic leaves `register` before the `Waiter`
/// is built: nobody owns that ticket.
fn a_registration_that_expires_a_panicking_waiter(register: impl FnOnce(&AdmissionQueue)) {
    enter_idle!();
    let (global, [q]) = limited(4, 4);
    let three = q.acquire(3, far()).unwrap();
    let (soon, mut expiring) = expiring_soon(&q, 2);
    sleep_past(soon);
    // Whatever `register` answers, the test drops it with everything else.
    let _ = catch_unwind(AssertUnwindSafe(|| register(&q)));
    drop(three);
    assert!(matches!(
        poll_once(&mut expiring, Waker::noop()),
        Poll::Ready(Err(AcquireError::Expired))
    ));
    drop(expiring);
    assert_back(&q, 4);
    assert_eq!(global.available(), 4, "the global limit: {global:?}");
}

#[test]
fn a_registration_granted_while_its_advance_wakes_a_panicking_waker_gives_its_units_back() {
    a_registration_that_expires_a_panicking_waiter(|q| {
        let w = q.register(1, far()).expect("fits");
        drop(w);
    });
}

#[test]
fn an_acquire_async_whose_advance_wakes_a_panicking_waker_gives_its_units_back() {
    a_registration_that_expires_a_panicking_waiter(|q| drop(q.acquire_async(1, far())));
}

/// The same, for a registration that has to wait: its ticket waits with no owner, is
/// granted when capacity comes back, and those units never come back.
#[test]
fn a_registration_left_waiting_by_its_advances_panic_is_not_granted_to_nobody() {
    a_registration_that_expires_a_panicking_waiter(|q| {
        let w = q.register(4, far()).expect("waits");
        drop(w);
    });
}

/// No deadline needed: a `Passing` queue's registration runs a grant pass. Capacity of the
/// shared limit comes back through queue `x`; a waker `x` wakes registers on queue `y` before
/// `y` is told, and that registration's own pass grants `y`'s waiter, whose waker panics.
#[test]
fn a_passing_registration_whose_pass_wakes_a_panicking_waker_gives_its_units_back() {
    enter_idle!();
    let (global, [x]) = limited(4, 4);
    let y = AdmissionQueue::with_options(10, Some(global.clone()), Order::Passing, RES);
    let all = x.acquire(4, far()).unwrap();
    let mut short = y.acquire_async(2, far()); // short of the global limit
    assert!(poll_once(&mut short, &panics_on_wake()).is_pending());
    let registered = Arc::new(Mutex::new(None));
    let (y2, slot) = (y.clone(), registered.clone());
    let hook = waker(Spec {
        on_wake: Mutex::new(Some(Box::new(move || {
            let r = catch_unwind(AssertUnwindSafe(|| y2.register(1, far())));
            *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(r.map_err(drop));
        }))),
        ..Spec::default()
    });
    let mut first = x.acquire_async(1, far());
    assert!(poll_once(&mut first, &hook).is_pending());
    drop(hook);
    let _ = catch_unwind(AssertUnwindSafe(move || drop(all)));
    let r = registered.lock().unwrap().take();
    assert!(r.is_some(), "the hook ran");
    drop(r);
    for f in [&mut first, &mut short] {
        assert!(matches!(poll_once(f, Waker::noop()), Poll::Ready(Ok(_))));
    }
    drop((first, short));
    assert_back(&x, 4);
    assert_back(&y, 10);
    assert_eq!(global.available(), 4, "{global:?}");
}

// --- the signal: a pass asked for while a panicking pass runs ------------------------------------

/// A pass's waker asks for another pass (`advance`, which finds the pass running and leaves
/// it owed) and then panics: the owed pass still runs, and expires what is due by then.
#[test]
fn a_pass_owed_when_the_running_pass_panics_still_runs() {
    enter_idle!();
    let (q, one) = full(1);
    let soon = Instant::now() + Duration::from_millis(5);
    let later_at = soon + Duration::from_millis(300);
    let later = q.register(1, later_at).unwrap();
    let waiting_then = Arc::new(AtomicUsize::new(0));
    let (q2, seen) = (q.clone(), waiting_then.clone());
    let w = waker(Spec {
        panic_on: Some(always),
        on_wake: Mutex::new(Some(Box::new(move || {
            seen.store(q2.waiting(), Ordering::SeqCst);
            sleep_past(later_at);
            q2.advance(); // a pass runs: asks it for one more, returns at once
        }))),
        ..Spec::default()
    });
    let mut expiring = q.acquire_async(1, soon);
    assert!(poll_once(&mut expiring, &w).is_pending());
    drop(w);
    sleep_past(soon);
    assert!(panicked(|| q.advance()));
    assert_eq!(
        waiting_then.load(Ordering::SeqCst),
        1,
        "`later` was still waiting when the hook ran"
    );
    assert!(
        matches!(later.try_take(), Some(Err(AcquireError::Expired))),
        "the owed pass did not run: {q:?}"
    );
    drop((later, expiring, one));
    assert_back(&q, 1);
}

// --- a waker that panics on its second wake only --------------------------------------------------

/// One waker shared by two futures: its second wake (in one release's batch) panics; the
/// waiter after them is still woken and everything is granted.
#[test]
fn a_waker_that_panics_on_its_second_wake_leaves_the_batch_woken() {
    enter_idle!();
    let (q, all) = full(6);
    let shared = Spec {
        panic_on: Some(second_only),
        ..Spec::default()
    };
    let shared_wakes = shared.wakes.clone();
    let shared = waker(shared);
    let (woken, last) = counting();
    let mut futs: Vec<_> = (0..3).map(|_| q.acquire_async(2, far())).collect();
    for (f, w) in futs.iter_mut().zip([&shared, &shared, &last]) {
        assert!(poll_once(f, w).is_pending());
    }
    assert!(panicked(|| drop(all)));
    assert_eq!(shared_wakes.load(Ordering::SeqCst), 2);
    assert_eq!(woken.load(Ordering::SeqCst), 1, "the last waiter woken");
    let permits: Vec<_> = futs
        .iter_mut()
        .map(|f| match poll_once(f, Waker::noop()) {
            Poll::Ready(Ok(p)) => p,
            other => panic!("not granted: {other:?}"),
        })
        .collect();
    assert_eq!(q.available(), 0);
    drop((permits, futs));
    assert_back(&q, 6);
}

/// A poll replaces a waker whose drop gives back the very units the request waits for, and
/// then panics: the request is granted, the waker just recorded is woken, the panic reaches
/// the poller, and the grant is there at the next poll.
#[test]
fn a_replaced_waker_that_gives_back_and_panics_when_dropped_leaves_the_grant() {
    enter_idle!();
    let q = AdmissionQueue::new(1, RES);
    let one = Mutex::new(Some(q.acquire(1, far()).unwrap()));
    let mut fut = q.acquire_async(1, far());
    let gives_back = waker(Spec {
        drop_panics: true,
        on_drop: Mutex::new(Some(Box::new(move || drop(take_permit(&one))))),
        ..Spec::default()
    });
    assert!(poll_once(&mut fut, &gives_back).is_pending());
    drop(gives_back); // the recorded copy is the last
    let (woken, good) = counting();
    assert!(panicked(|| {
        let _ = poll_once(&mut fut, &good);
    }));
    assert_eq!(woken.load(Ordering::SeqCst), 1, "the new waker woken");
    let Poll::Ready(Ok(p)) = poll_once(&mut fut, &good) else {
        panic!("the grant is lost: {q:?}");
    };
    assert_eq!((p.amount(), q.available()), (1, 0));
    drop((p, fut));
    assert_back(&q, 1);
}

// --- a dropped queue handle, with waiters whose wakers panic ---------------------------------------

/// Every handle of queue `a` is dropped while its waiters' wakers panic (on drop, on wake):
/// its waiters still resolve, its units come back to the shared limit, and queue `b`,
/// short of that limit, is told though its waker panics too.
#[test]
fn a_dropped_queue_with_panicking_waiters_gives_everything_back() {
    enter_idle!();
    let (global, [a, b]) = limited(6, 6);
    let three = a.acquire(3, far()).unwrap();
    let mut head = a.acquire_async(4, far()); // waits: 3 left
    let mut behind = a.acquire_async(2, far()); // fits, but strict
    let mut short = b.acquire_async(4, far()); // short of the global limit (3 left)
    let drop_panics = waker(Spec {
        drop_panics: true,
        ..Spec::default()
    });
    assert!(poll_once(&mut head, &drop_panics).is_pending());
    drop(drop_panics); // the recorded copy is the last
    assert!(poll_once(&mut behind, &panics_on_wake()).is_pending());
    assert!(poll_once(&mut short, &panics_on_wake()).is_pending());
    drop(a);
    assert!(panicked(|| drop(head)), "the recorded waker's drop panics");
    assert!(
        panicked(|| drop(three)),
        "no grant of b woke its waker: {b:?}"
    );
    let Poll::Ready(Ok(pa)) = poll_once(&mut behind, Waker::noop()) else {
        panic!("a's waiter behind the head is lost");
    };
    let Poll::Ready(Ok(pb)) = poll_once(&mut short, Waker::noop()) else {
        panic!("b was never told: {b:?} {global:?}");
    };
    assert_eq!((pa.amount(), pb.amount(), global.available()), (2, 4, 0));
    drop((pa, behind)); // the last handles of `a`
    assert_eq!(global.available(), 2);
    drop((pb, short));
    assert_back(&b, 6);
    assert_eq!(global.available(), 6);
}

// --- while a panic unwinds ------------------------------------------------------------------------

/// A holder panics with a permit and a waiting future: unwinding drops them. The permit's
/// release wakes a waker that panics after giving back a permit of another queue (whose
/// release tells a queue whose waker panics); the future's recorded waker panics when
/// dropped. Each of those panics escaping a destructor would abort the process.
fn drops_while_unwinding() {
    enter_idle!();
    let (global, [a, b, c]) = limited(8, 4);
    let all_a = a.acquire(4, far()).unwrap();
    let all_b = b.acquire(4, far()).unwrap();
    let mut told = c.acquire_async(2, far()); // short of the global limit
    assert!(poll_once(&mut told, &panics_on_wake()).is_pending());
    let mut gives_back = a.acquire_async(2, far());
    let mut plain = a.acquire_async(2, far());
    let mut cancelled = a.acquire_async(4, far());
    let permit_b = Mutex::new(Some(all_b));
    let gives = waker(Spec {
        panic_on: Some(always),
        on_wake: Mutex::new(Some(Box::new(move || drop(take_permit(&permit_b))))),
        ..Spec::default()
    });
    let (woken, counts) = counting();
    assert!(poll_once(&mut gives_back, &gives).is_pending());
    assert!(poll_once(&mut plain, &counts).is_pending());
    let drop_panics = waker(Spec {
        drop_panics: true,
        ..Spec::default()
    });
    assert!(poll_once(&mut cancelled, &drop_panics).is_pending());
    drop((gives, drop_panics));
    assert!(panicked(move || {
        let _held = (cancelled, all_a);
        panic!("the holder panics");
    }));
    assert_eq!(woken.load(Ordering::SeqCst), 1, "a's second waiter woken");
    let mut permits = Vec::new();
    for f in [&mut gives_back, &mut plain, &mut told] {
        match poll_once(f, Waker::noop()) {
            Poll::Ready(Ok(p)) => permits.push(p),
            other => panic!("not granted: {other:?} {a:?} {c:?}"),
        }
    }
    drop((permits, gives_back, plain, told));
    for q in [&a, &b, &c] {
        assert_back(q, 4);
    }
    assert_eq!(global.available(), 8);
}

fn take_permit(m: &Mutex<Option<Permit>>) -> Option<Permit> {
    m.lock().unwrap_or_else(PoisonError::into_inner).take()
}

child_test!(
    permits_and_futures_dropped_while_a_panic_unwinds_do_not_abort,
    drops_while_unwinding
);

// --- every one told, every one woken, though several panic ---------------------------------------

/// Raising a limit tells five queues short of it; every told pass panics, each after the
/// first while that first panic unwinds. All five are told.
#[test]
fn raising_a_limit_tells_every_queue_though_every_told_pass_panics() {
    enter_idle!();
    let (global, [holder]) = limited(2, 2);
    let two = holder.acquire(2, far()).unwrap();
    let (queues, futs) = short_queues(&global, 5);
    assert!(panicked(|| global.set_capacity(12)));
    all_granted(&queues, futs);
    drop(two);
    assert_eq!(global.available(), 12);
}

/// A sequential queue holding a limit's units is dropped while a panic unwinds: it tells the
/// queues short of the limit from that destructor, and their told passes panic too.
fn a_sequential_queue_dropped_by_a_panic() {
    enter_idle!();
    let global = Limit::new(8);
    let mut seq: tickwheel::admission::WaitQueue<()> =
        tickwheel::admission::WaitQueue::with_options(8, Some(global.clone()), Order::Strict);
    let all = seq.register(8, 100, (), &mut Vec::new()).unwrap();
    assert!(seq.state(all).is_some());
    let (queues, futs) = short_queues(&global, 4);
    assert!(panicked(move || {
        let _held = seq;
        panic!("{MARK}: the holder panics");
    }));
    all_granted(&queues, futs);
    assert_eq!(global.available(), 8);
}

child_test!(
    a_sequential_queue_dropped_by_a_panic_tells_every_queue_without_aborting,
    a_sequential_queue_dropped_by_a_panic
);

/// A thread blocked in `acquire` runs the pass at its deadline; that pass expires a task's
/// waiter too, whose waker panics. The panic reaches the blocked thread's `acquire`: its
/// request is given back on the way, and nothing hangs.
#[test]
fn a_blocking_acquire_whose_pass_wakes_a_panicking_waker_loses_nothing() {
    enter_idle!();
    let (q, one) = full(1);
    let (soon, mut fut) = expiring_soon(&q, 1);
    let q2 = q.clone();
    let blocked = within("the blocked acquire", move || {
        catch_unwind(AssertUnwindSafe(|| {
            q2.acquire(1, soon + Duration::from_millis(20))
                .map(|p| p.amount())
        }))
        .map_err(drop)
    });
    // Either the panic reached it, or (had another pass expired the task first) its expiry.
    assert!(
        matches!(blocked, Err(()) | Ok(Err(AcquireError::Expired))),
        "{blocked:?}"
    );
    assert!(matches!(
        poll_once(&mut fut, Waker::noop()),
        Poll::Ready(Err(AcquireError::Expired))
    ));
    drop((fut, one));
    assert_back(&q, 1);
}

/// A panic whose payload panics when dropped.
struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("{MARK}: the payload's drop");
    }
}

/// Two wakers of one release panic with a payload whose drop panics: the second payload is
/// caught while the first panic unwinds and then dropped, inside a destructor.
fn payloads_that_panic_when_dropped() {
    enter_idle!();
    let (q, all) = full(2);
    let bomb = || {
        waker(Spec {
            on_wake: Mutex::new(Some(Box::new(|| std::panic::panic_any(Bomb)))),
            ..Spec::default()
        })
    };
    let mut futs: Vec<_> = (0..2).map(|_| q.acquire_async(1, far())).collect();
    for f in &mut futs {
        assert!(poll_once(f, &bomb()).is_pending());
    }
    let unwound = catch_unwind(AssertUnwindSafe(move || drop(all)));
    std::mem::forget(unwound); // the first payload: not dropped here
    drop(futs);
    assert_back(&q, 2);
}

child_test!(
    a_panic_payload_that_panics_when_dropped_does_not_abort,
    payloads_that_panic_when_dropped
);

child_test!(
    /// Three threads on three queues over one limit; every kind of panicking waker, permits
    /// given back from inside wakes and drops, the limit lowered and raised, panics unwinding
    /// through futures and permits. Deadlines far: nothing expires (see the next test).
    threads_with_panicking_wakers_over_one_limit_lose_nothing,
    || threads::many_threads(false)
);

child_test!(
    /// The same with deadlines that pass: a registration's own advance then expires waiters
    /// whose wakers panic (the `register` tests above).
    threads_with_panicking_wakers_and_expiries_lose_nothing,
    || threads::many_threads(true)
);
