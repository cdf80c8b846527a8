//! Wakers that panic — when woken, on a later wake only, when dropped, when cloned, after
//! giving capacity back — against the admission layer's promise: every request resolves
//! once, nothing is over-granted, all capacity comes back, nothing hangs, the process does
//! not abort. Cases that could abort run in a child process (the test binary run again with
//! a filter, `CHILD` set); cases that could hang run on a thread answered within `HANG`.

#![cfg(feature = "tokio")]

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Once, PoisonError, mpsc};
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng, rngs::StdRng};
use tickwheel::admission::{Acquire, AcquireError, AdmissionQueue, Limit, Order, Permit};

const RES: Duration = Duration::from_millis(1);
/// Long enough for any loaded machine; only a hang takes this long.
const HANG: Duration = Duration::from_secs(30);
/// In every panic message of these wakers; the hook prints no such panic.
const MARK: &str = "adversarial waker";
const CHILD: &str = "TICKWHEEL_PANIC_ADVERSARIAL_CHILD";

fn far() -> Instant {
    Instant::now() + Duration::from_secs(3600)
}

fn sleep_past(at: Instant) {
    while Instant::now() < at + 3 * RES {
        thread::sleep(RES);
    }
}

/// The default hook, minus the panics of these wakers (hundreds of them).
fn quiet() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let p = info.payload();
            let msg = p
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| p.downcast_ref::<String>().map(String::as_str));
            if !msg.is_some_and(|m| m.contains(MARK)) {
                prev(info);
            }
        }));
    });
}

type Hook = Box<dyn FnOnce() + Send>;

/// A waker's behaviour. `wakes` is shared by every waker made for one future, so a test can
/// tell whether any of them was woken.
#[derive(Default)]
struct Spec {
    wakes: Arc<AtomicUsize>,
    /// Panics on wake number `n` (1-based, counted over `wakes`) when `panic_on(n)`.
    panic_on: Option<fn(usize) -> bool>,
    drop_panics: bool,
    /// Run at the first wake, before any panic.
    on_wake: Mutex<Option<Hook>>,
    /// Run when dropped, before any panic.
    on_drop: Mutex<Option<Hook>>,
    /// A real waker woken first (a tokio task's).
    forward: Option<Waker>,
}

fn take(hook: &Mutex<Option<Hook>>) -> Option<Hook> {
    hook.lock().unwrap_or_else(PoisonError::into_inner).take()
}

/// The waker made from a [`Spec`].
struct Adv(Spec);

impl Wake for Adv {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        let s = &self.0;
        let n = s.wakes.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(w) = &s.forward {
            w.wake_by_ref();
        }
        if let Some(f) = take(&s.on_wake) {
            f();
        }
        if s.panic_on.is_some_and(|p| p(n)) {
            panic!("{MARK}: wake {n}");
        }
    }
}

impl Drop for Adv {
    fn drop(&mut self) {
        if let Some(f) = take(&self.0.on_drop) {
            f();
        }
        if self.0.drop_panics {
            panic!("{MARK}: dropped");
        }
    }
}

fn always(_: usize) -> bool {
    true
}
fn second_only(n: usize) -> bool {
    n == 2
}

fn waker(spec: Spec) -> Waker {
    Waker::from(Arc::new(Adv(spec)))
}
fn panics_on_wake() -> Waker {
    waker(Spec {
        panic_on: Some(always),
        ..Spec::default()
    })
}
fn counting() -> (Arc<AtomicUsize>, Waker) {
    let adv = Spec::default();
    (adv.wakes.clone(), waker(adv))
}

/// A waker whose clone panics from clone number `panic_from` on. `std::task::Wake` cannot
/// make one (its clone is an `Arc` count), so this one is built from a `RawWaker` over an
/// `Arc`, the way `Wake`'s own conversion does it.
#[allow(unsafe_code)]
mod clone_panics {
    use super::*;
    use std::task::{RawWaker, RawWakerVTable};

    pub struct State {
        pub clones: AtomicUsize,
        pub wakes: AtomicUsize,
        pub panic_from: usize,
    }

    static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, wake, wake_by_ref, drop_raw);

    /// # Safety: `p` came from `Arc::into_raw` of an `Arc<State>` still counted.
    unsafe fn borrow(p: *const ()) -> std::mem::ManuallyDrop<Arc<State>> {
        // SAFETY: as the caller promises.
        std::mem::ManuallyDrop::new(unsafe { Arc::from_raw(p.cast::<State>()) })
    }
    unsafe fn clone(p: *const ()) -> RawWaker {
        // SAFETY: the vtable's contract: `p` is a live waker's data.
        let state = unsafe { borrow(p) };
        let n = state.clones.fetch_add(1, Ordering::SeqCst) + 1;
        if n >= state.panic_from {
            panic!("{MARK}: clone {n}");
        }
        RawWaker::new(Arc::into_raw(Arc::clone(&state)).cast(), &VTABLE)
    }
    unsafe fn wake(p: *const ()) {
        // SAFETY: `wake` consumes the waker: its count is ours to drop.
        let state = unsafe { Arc::from_raw(p.cast::<State>()) };
        state.wakes.fetch_add(1, Ordering::SeqCst);
    }
    unsafe fn wake_by_ref(p: *const ()) {
        // SAFETY: as in `clone`.
        unsafe { borrow(p) }.wakes.fetch_add(1, Ordering::SeqCst);
    }
    unsafe fn drop_raw(p: *const ()) {
        // SAFETY: `drop` consumes the waker.
        drop(unsafe { Arc::from_raw(p.cast::<State>()) });
    }

    pub fn waker(panic_from: usize) -> (Arc<State>, Waker) {
        let state = Arc::new(State {
            clones: AtomicUsize::new(0),
            wakes: AtomicUsize::new(0),
            panic_from,
        });
        let raw = RawWaker::new(Arc::into_raw(state.clone()).cast(), &VTABLE);
        // SAFETY: the vtable above keeps `RawWaker`'s contract (each waker one `Arc` count).
        (state, unsafe { Waker::from_raw(raw) })
    }
}

fn poll_once<F: Future + Unpin>(f: &mut F, w: &Waker) -> Poll<F::Output> {
    Pin::new(f).poll(&mut Context::from_waker(w))
}

/// Whether `f` panicked.
fn panicked(f: impl FnOnce()) -> bool {
    catch_unwind(AssertUnwindSafe(f)).is_err()
}

/// A runtime to spawn expiry drivers on, entered and never run: no driver ever advances.
fn idle_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

fn assert_back(q: &AdmissionQueue, capacity: u64) {
    assert_eq!(
        (q.available(), q.held(), q.waiting()),
        (capacity, 0, 0),
        "not all back: {q:?}"
    );
}

/// `f` on its own thread, answered within `HANG`: a hang fails the test.
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(catch_unwind(AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(HANG) {
        Ok(Ok(v)) => v,
        Ok(Err(p)) => resume_unwind(p),
        Err(_) => panic!("{what}: no answer within {HANG:?}, a hang"),
    }
}

/// Runs test `name`'s `body` in a child process (this binary again, filtered to `name`): an
/// abort fails the test instead of ending the run.
fn in_child(name: &str, body: impl FnOnce()) {
    if std::env::var_os(CHILD).is_some() {
        quiet();
        body();
        return;
    }
    let exe = std::env::current_exe().expect("the test binary");
    let out = within("the child process", {
        let name = name.to_owned();
        move || {
            std::process::Command::new(exe)
                .args([&name, "--exact", "--include-ignored", "--test-threads=1"])
                .env(CHILD, "1")
                .output()
                .expect("the child runs")
        }
    });
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "the child running {name} failed or aborted: {:?}\n{stdout}\n{stderr}",
        out.status
    );
}

// --- a registration whose own advance wakes a panicking waker ------------------------------

/// `register` advances the queue before it registers, and the expiry it makes wakes a waker
/// that panics. The registration is made (and may be granted at once, its units detached to
/// the new waiter) before the wake-ups, but the panic leaves `register` before the `Waiter`
/// is built: nobody owns that ticket.
fn a_registration_that_expires_a_panicking_waiter(register: impl FnOnce(&AdmissionQueue)) {
    quiet();
    let rt = idle_runtime();
    let _guard = rt.enter();
    let global = Limit::new(4);
    let q = AdmissionQueue::with_options(4, Some(global.clone()), Order::Strict, RES);
    let three = q.acquire(3, far()).unwrap();
    let soon = Instant::now() + Duration::from_millis(5);
    let mut expiring = q.acquire_async(2, soon);
    assert!(poll_once(&mut expiring, &panics_on_wake()).is_pending());
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
#[ignore = "fails: a registration granted at once whose register() panics in its expiry wake-ups keeps its units forever"]
fn a_registration_granted_while_its_advance_wakes_a_panicking_waker_gives_its_units_back() {
    a_registration_that_expires_a_panicking_waiter(|q| {
        let w = q.register(1, far()).expect("fits");
        drop(w);
    });
}

#[test]
#[ignore = "fails: acquire_async() panics in its register's expiry wake-ups; its granted ticket keeps its units forever"]
fn an_acquire_async_whose_advance_wakes_a_panicking_waker_gives_its_units_back() {
    a_registration_that_expires_a_panicking_waiter(|q| drop(q.acquire_async(1, far())));
}

/// The same, for a registration that has to wait: its ticket waits with no owner, is
/// granted when capacity comes back, and those units never come back.
#[test]
#[ignore = "fails: a registration left waiting by register()'s panic has no owner; its later grant is never given back"]
fn a_registration_left_waiting_by_its_advances_panic_is_not_granted_to_nobody() {
    a_registration_that_expires_a_panicking_waiter(|q| {
        let w = q.register(4, far()).expect("waits");
        drop(w);
    });
}

// --- wakers whose clone panics ----------------------------------------------------------------

/// A poll whose waker's clone panics (the clone the queue records): the poll panics, the
/// request keeps waiting, and a later poll with a good waker gets its grant.
#[test]
fn a_poll_whose_waker_clone_panics_leaves_the_request_whole() {
    quiet();
    let rt = idle_runtime();
    let _guard = rt.enter();
    let q = AdmissionQueue::new(2, RES);
    let all = q.acquire(2, far()).unwrap();
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
    assert_eq!(woken.load(Ordering::SeqCst), 1, "the grant woke the good waker");
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
    let q = AdmissionQueue::new(1, RES);
    let one = q.acquire(1, far()).unwrap();
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
    assert_eq!(woken, 1, "the second waiter was never woken to spawn a new driver");
}

#[test]
#[ignore = "fails: a waker whose clone panics in the driver's end (expiry.rs driver_ended) leaves the waiters behind it unwoken"]
fn a_driver_ending_with_a_waker_whose_clone_panics_still_wakes_the_others() {
    in_child(
        "a_driver_ending_with_a_waker_whose_clone_panics_still_wakes_the_others",
        the_driver_ends_with_a_waker_whose_clone_panics,
    );
}

/// What that loses in practice: a task on a live runtime waits behind a waiter whose clone
/// panics; the driver's runtime shuts down, and the task is never woken to spawn a new
/// driver, so it never expires.
#[test]
#[ignore = "fails: the task is never woken after the driver's end panics on a clone, so it never expires (hangs)"]
fn a_task_behind_a_waker_whose_clone_panics_still_expires() {
    quiet();
    let q = AdmissionQueue::new(1, RES);
    let one = q.acquire(1, far()).unwrap();
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
    quiet();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let q = AdmissionQueue::new(1, RES);
    let one = q.acquire(1, far()).unwrap();
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

// --- the signal: a pass asked for while a panicking pass runs ------------------------------------

/// A pass's waker asks for another pass (`advance`, which finds the pass running and leaves
/// it owed) and then panics: the owed pass still runs, and expires what is due by then.
#[test]
fn a_pass_owed_when_the_running_pass_panics_still_runs() {
    quiet();
    let rt = idle_runtime();
    let _guard = rt.enter();
    let q = AdmissionQueue::new(1, RES);
    let one = q.acquire(1, far()).unwrap();
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
    quiet();
    let rt = idle_runtime();
    let _guard = rt.enter();
    let q = AdmissionQueue::new(6, RES);
    let all = q.acquire(6, far()).unwrap();
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

// --- a dropped queue handle, with waiters whose wakers panic ---------------------------------------

/// Every handle of queue `a` is dropped while its waiters' wakers panic (on drop, on wake):
/// its waiters still resolve, its units come back to the shared limit, and queue `b`,
/// short of that limit, is told though its waker panics too.
#[test]
fn a_dropped_queue_with_panicking_waiters_gives_everything_back() {
    quiet();
    let rt = idle_runtime();
    let _guard = rt.enter();
    let global = Limit::new(6);
    let a = AdmissionQueue::with_options(6, Some(global.clone()), Order::Strict, RES);
    let b = AdmissionQueue::with_options(6, Some(global.clone()), Order::Strict, RES);
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
    let rt = idle_runtime();
    let _guard = rt.enter();
    let global = Limit::new(8);
    let a = AdmissionQueue::with_options(4, Some(global.clone()), Order::Strict, RES);
    let b = AdmissionQueue::with_options(4, Some(global.clone()), Order::Strict, RES);
    let c = AdmissionQueue::with_options(4, Some(global.clone()), Order::Strict, RES);
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

#[test]
fn permits_and_futures_dropped_while_a_panic_unwinds_do_not_abort() {
    in_child(
        "permits_and_futures_dropped_while_a_panic_unwinds_do_not_abort",
        drops_while_unwinding,
    );
}

// --- many threads, many queues over one limit, every kind of panicking waker ----------------------

const QUEUES: usize = 3;
const LOCAL: u64 = 6;
const GLOBAL: u64 = 10;

/// Units held by the grants seen, per queue and in all; records any excess.
#[derive(Default)]
struct InUse {
    per_queue: [AtomicU64; QUEUES],
    all: AtomicU64,
    over: AtomicBool,
}

impl InUse {
    fn hold(&self, q: usize, amount: u64) {
        let l = self.per_queue[q].fetch_add(amount, Ordering::SeqCst) + amount;
        let g = self.all.fetch_add(amount, Ordering::SeqCst) + amount;
        if l > LOCAL || g > GLOBAL {
            self.over.store(true, Ordering::SeqCst);
        }
    }
}

/// A permit counted in `InUse` until dropped (uncounted before its release).
struct Held {
    q: usize,
    permit: Option<Permit>,
    in_use: Arc<InUse>,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(p) = self.permit.take() {
            self.in_use.per_queue[self.q].fetch_sub(p.amount(), Ordering::SeqCst);
            self.in_use.all.fetch_sub(p.amount(), Ordering::SeqCst);
            drop(p);
        }
    }
}

struct World {
    queues: Vec<AdmissionQueue>,
    global: Limit,
    in_use: Arc<InUse>,
    /// Permits any thread's wakers may give back from inside a wake or a drop.
    bank: Mutex<Vec<Held>>,
    created: AtomicU64,
    ended: AtomicU64,
    /// The wake counts of futures seen resolved after a pending poll while none of their
    /// wakers was woken yet: the resolving thread may still be about to wake it, so they
    /// are looked at once every thread is done.
    unwoken: Mutex<Vec<Arc<AtomicUsize>>>,
    /// Calls that panicked, and grants seen: the run did exercise what it tests.
    caught: AtomicU64,
    granted: AtomicU64,
    /// Futures that answered a poll after their outcome with anything but `Cancelled`.
    twice: AtomicU64,
}

impl World {
    /// Runs `f`, counting its panic.
    fn guarded(&self, f: impl FnOnce()) {
        if catch_unwind(AssertUnwindSafe(f)).is_err() {
            self.caught.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn from_bank(&self) -> Option<Held> {
        self.bank.lock().unwrap_or_else(PoisonError::into_inner).pop()
    }
}

/// How a future's wakers behave: quiet, panic on every wake, on the second wake, when
/// dropped, after giving a banked permit back when woken, after giving one back when dropped.
const KINDS: usize = 6;

struct Pending {
    q: usize,
    fut: Acquire,
    kind: usize,
    wakes: Arc<AtomicUsize>,
    was_pending: bool,
}

/// A fresh waker of `kind` (a new one each poll: the one it replaces is dropped by the poll).
fn kind_waker(world: &Arc<World>, kind: usize, wakes: &Arc<AtomicUsize>) -> Waker {
    let give_back = |w: &Arc<World>| -> Mutex<Option<Hook>> {
        let w = Arc::downgrade(w);
        Mutex::new(Some(Box::new(move || {
            if let Some(w) = w.upgrade() {
                drop(w.from_bank());
            }
        })))
    };
    let mut adv = Spec {
        wakes: wakes.clone(),
        ..Spec::default()
    };
    match kind {
        1 => adv.panic_on = Some(always),
        2 => adv.panic_on = Some(second_only),
        3 => adv.drop_panics = true,
        4 => {
            adv.panic_on = Some(always);
            adv.on_wake = give_back(world);
        }
        5 => {
            adv.drop_panics = true;
            adv.on_drop = give_back(world);
        }
        _ => {}
    }
    waker(adv)
}

/// Polls `p` with a fresh waker of its kind (or a quiet one); `true` once it ended.
fn poll_pending(world: &Arc<World>, p: &mut Pending, quiet: bool, held: &mut Vec<Held>) -> bool {
    let w = if quiet {
        Waker::noop().clone()
    } else {
        kind_waker(world, p.kind, &p.wakes)
    };
    let polled = catch_unwind(AssertUnwindSafe(|| poll_once(&mut p.fut, &w)));
    if polled.is_err() {
        world.caught.fetch_add(1, Ordering::SeqCst);
    }
    let done = match polled {
        Ok(Poll::Ready(r)) => {
            if p.was_pending && p.wakes.load(Ordering::SeqCst) == 0 {
                let mut unwoken = world.unwoken.lock().unwrap_or_else(PoisonError::into_inner);
                unwoken.push(p.wakes.clone());
            }
            // Resolved once: a poll after the outcome answers `Cancelled`, never again.
            let again = catch_unwind(AssertUnwindSafe(|| poll_once(&mut p.fut, Waker::noop())));
            if !matches!(again, Ok(Poll::Ready(Err(AcquireError::Cancelled)))) {
                world.twice.fetch_add(1, Ordering::SeqCst);
            }
            if let Ok(permit) = r {
                world.granted.fetch_add(1, Ordering::SeqCst);
                world.in_use.hold(p.q, permit.amount());
                held.push(Held {
                    q: p.q,
                    permit: Some(permit),
                    in_use: world.in_use.clone(),
                });
            }
            true
        }
        // A poll that panicked (a replaced waker's drop) recorded its waker all the same.
        Ok(Poll::Pending) | Err(_) => {
            p.was_pending = true;
            false
        }
    };
    world.guarded(move || drop(w));
    done
}

fn worker(world: Arc<World>, seed: u64, ops: usize, expiries: bool) {
    let rt = idle_runtime();
    let guard = rt.enter();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut pending: Vec<Pending> = Vec::new();
    let mut held: Vec<Held> = Vec::new();
    for _ in 0..ops {
        let q = rng.gen_range(0..QUEUES);
        match rng.gen_range(0..100) {
            0..=19 => {
                let deadline = if expiries && rng.gen_bool(0.3) {
                    Instant::now() + Duration::from_micros(rng.gen_range(0..3000))
                } else {
                    far()
                };
                let amount = if rng.gen_bool(0.1) {
                    LOCAL
                } else {
                    rng.gen_range(1..=3)
                };
                let Ok(fut) = catch_unwind(AssertUnwindSafe(|| {
                    world.queues[q].acquire_async(amount, deadline)
                })) else {
                    continue; // see the `register` tests above
                };
                world.created.fetch_add(1, Ordering::SeqCst);
                let mut p = Pending {
                    q,
                    fut,
                    kind: rng.gen_range(0..KINDS),
                    wakes: Arc::default(),
                    was_pending: false,
                };
                if poll_pending(&world, &mut p, false, &mut held) {
                    world.ended.fetch_add(1, Ordering::SeqCst);
                } else {
                    pending.push(p);
                }
            }
            20..=39 if !pending.is_empty() => {
                let i = rng.gen_range(0..pending.len());
                if poll_pending(&world, &mut pending[i], false, &mut held) {
                    pending.swap_remove(i);
                    world.ended.fetch_add(1, Ordering::SeqCst);
                }
            }
            40..=49 => {
                // Every pending future polled, as an executor would after their wake-ups.
                let before = pending.len();
                pending.retain_mut(|p| !poll_pending(&world, p, false, &mut held));
                let n = (before - pending.len()) as u64;
                world.ended.fetch_add(n, Ordering::SeqCst);
            }
            50..=57 if !pending.is_empty() => {
                let p = pending.swap_remove(rng.gen_range(0..pending.len()));
                world.ended.fetch_add(1, Ordering::SeqCst);
                world.guarded(move || drop(p));
            }
            58..=74 if !held.is_empty() => {
                let h = held.swap_remove(rng.gen_range(0..held.len()));
                if rng.gen_bool(0.5) {
                    world.guarded(move || drop(h));
                } else {
                    world.bank.lock().unwrap_or_else(PoisonError::into_inner).push(h);
                }
            }
            75..=82 => {
                let to = if rng.gen_bool(0.5) { GLOBAL } else { GLOBAL - 3 };
                world.guarded(|| world.global.set_capacity(to));
            }
            83..=92 => {
                world.guarded(|| world.queues[q].advance());
            }
            93..=95 => {
                world.guarded(|| drop(world.from_bank()));
            }
            96 => {
                // A panic that unwinds through futures and permits: their drops run then.
                let n = rng.gen_range(0..=pending.len());
                let doomed: Vec<Pending> = pending.drain(..n).collect();
                world.ended.fetch_add(n as u64, Ordering::SeqCst);
                let k = rng.gen_range(0..=held.len());
                let doomed_held: Vec<Held> = held.drain(..k).collect();
                world.guarded(move || {
                    let _dropped_by_the_panic = (doomed, doomed_held);
                    panic!("{MARK}: the holder panics");
                });
            }
            _ => {}
        }
    }
    for h in held.drain(..) {
        world.guarded(move || drop(h));
    }
    // What still waits: looked at once more, then dropped.
    for mut p in pending.drain(..) {
        poll_pending(&world, &mut p, true, &mut held);
        world.ended.fetch_add(1, Ordering::SeqCst);
        world.guarded(move || drop(p));
    }
    for h in held.drain(..) {
        world.guarded(move || drop(h));
    }
    drop(guard);
    world.guarded(move || drop(rt));
}

fn many_threads(expiries: bool) {
    for round in 0..6u64 {
        let global = Limit::new(GLOBAL);
        let world = Arc::new(World {
            queues: (0..QUEUES)
                .map(|_| AdmissionQueue::with_options(LOCAL, Some(global.clone()), Order::Strict, RES))
                .collect(),
            global,
            in_use: Arc::default(),
            bank: Mutex::new(Vec::new()),
            created: AtomicU64::new(0),
            ended: AtomicU64::new(0),
            unwoken: Mutex::default(),
            caught: AtomicU64::new(0),
            granted: AtomicU64::new(0),
            twice: AtomicU64::new(0),
        });
        let w = world.clone();
        within("the threads", move || {
            let handles: Vec<_> = (0..3u64)
                .map(|t| {
                    let w = w.clone();
                    thread::spawn(move || worker(w, round * 16 + t, 1000, expiries))
                })
                .collect();
            for h in handles {
                h.join().expect("a worker's own code panicked");
            }
        });
        while let Some(h) = world.from_bank() {
            world.guarded(move || drop(h));
        }
        world.guarded(|| world.global.set_capacity(GLOBAL));
        assert!(!world.in_use.over.load(Ordering::SeqCst), "round {round}: over-granted");
        assert_eq!(
            world.ended.load(Ordering::SeqCst),
            world.created.load(Ordering::SeqCst),
            "round {round}: every request ends once"
        );
        assert_eq!(world.twice.load(Ordering::SeqCst), 0, "round {round}: resolved twice");
        let unwoken = world.unwoken.lock().unwrap_or_else(PoisonError::into_inner);
        let never = unwoken.iter().filter(|w| w.load(Ordering::SeqCst) == 0);
        assert_eq!(never.count(), 0, "round {round}: resolved, never woken");
        for q in &world.queues {
            assert_back(q, LOCAL);
        }
        assert_eq!(world.global.available(), GLOBAL, "round {round}");
        let (caught, granted) = (
            world.caught.load(Ordering::SeqCst),
            world.granted.load(Ordering::SeqCst),
        );
        assert!(
            caught > 50 && granted > 30,
            "round {round}: {caught} panics caught, {granted} grants: too few to test"
        );
        eprintln!("round {round}: {caught} panics caught, {granted} grants");
    }
}

/// Three threads on three queues over one limit; every kind of panicking waker, permits
/// given back from inside wakes and drops, the limit lowered and raised, panics unwinding
/// through futures and permits. Deadlines far: nothing expires (see the next test).
#[test]
fn threads_with_panicking_wakers_over_one_limit_lose_nothing() {
    in_child(
        "threads_with_panicking_wakers_over_one_limit_lose_nothing",
        || many_threads(false),
    );
}

/// The same with deadlines that pass: a registration's own advance then expires waiters
/// whose wakers panic (the `register` tests above).
#[test]
#[ignore = "fails: a registration whose advance wakes a panicking waker leaks its ticket (see the register tests)"]
fn threads_with_panicking_wakers_and_expiries_lose_nothing() {
    in_child(
        "threads_with_panicking_wakers_and_expiries_lose_nothing",
        || many_threads(true),
    );
}
