//! The adversarial wakers of these tests and their helpers (a child process, a hang limit,
//! a quiet panic hook); the admission set-ups come from the crate's `tests/support`.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Once, PoisonError, mpsc};
use std::task::{Poll, Wake, Waker};
use std::thread;
use std::time::{Duration, Instant};

use tickwheel::admission::{Acquire, AdmissionQueue, Limit};

pub(crate) use crate::support::admission::enter_idle;
pub use crate::support::admission::{RES, far, full, limited, poll_once, under};
pub(crate) use crate::support::tasks::idle_runtime;

/// Long enough for any loaded machine; only a hang takes this long.
pub const HANG: Duration = Duration::from_secs(30);
/// In every panic message of these wakers; the hook prints no such panic.
pub const MARK: &str = "adversarial waker";
pub const CHILD: &str = "TICKWHEEL_PANIC_ADVERSARIAL_CHILD";

pub fn sleep_past(at: Instant) {
    while Instant::now() < at + 3 * RES {
        thread::sleep(RES);
    }
}

/// The default hook, minus the panics of these wakers (hundreds of them). Installed once, by
/// the first waker made here (or [`panicked`], or a child process).
pub fn quiet() {
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

pub type Hook = Box<dyn FnOnce() + Send>;

/// A waker's behaviour. `wakes` is shared by every waker made for one future, so a test can
/// tell whether any of them was woken.
#[derive(Default)]
pub struct Spec {
    pub wakes: Arc<AtomicUsize>,
    /// Panics on wake number `n` (1-based, counted over `wakes`) when `panic_on(n)`.
    pub panic_on: Option<fn(usize) -> bool>,
    pub drop_panics: bool,
    /// Run at the first wake, before any panic.
    pub on_wake: Mutex<Option<Hook>>,
    /// Run when dropped, before any panic.
    pub on_drop: Mutex<Option<Hook>>,
    /// A real waker woken first (a tokio task's).
    pub forward: Option<Waker>,
}

pub fn take(hook: &Mutex<Option<Hook>>) -> Option<Hook> {
    hook.lock().unwrap_or_else(PoisonError::into_inner).take()
}

/// The waker made from a [`Spec`].
pub struct Adv(pub Spec);

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

pub fn always(_: usize) -> bool {
    true
}
pub fn second_only(n: usize) -> bool {
    n == 2
}

pub fn waker(spec: Spec) -> Waker {
    quiet();
    Waker::from(Arc::new(Adv(spec)))
}
pub fn panics_on_wake() -> Waker {
    waker(Spec {
        panic_on: Some(always),
        ..Spec::default()
    })
}
pub fn counting() -> (Arc<AtomicUsize>, Waker) {
    let adv = Spec::default();
    (adv.wakes.clone(), waker(adv))
}

/// A waker whose clone panics from clone number `panic_from` on. `std::task::Wake` cannot
/// make one (its clone is an `Arc` count), so this one is built from a `RawWaker` over an
/// `Arc`, the way `Wake`'s own conversion does it.
#[allow(unsafe_code)]
pub mod clone_panics {
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
        quiet();
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

/// A request of `amount` on `q`, due 5 ms from now and polled once with a waker that panics
/// when woken: its deadline and its future, waiting.
pub fn expiring_soon(q: &AdmissionQueue, amount: u64) -> (Instant, Acquire) {
    let soon = Instant::now() + Duration::from_millis(5);
    let mut fut = q.acquire_async(amount, soon);
    assert!(poll_once(&mut fut, &panics_on_wake()).is_pending());
    (soon, fut)
}

/// Whether `f` panicked.
pub fn panicked(f: impl FnOnce()) -> bool {
    quiet();
    catch_unwind(AssertUnwindSafe(f)).is_err()
}

pub fn assert_back(q: &AdmissionQueue, capacity: u64) {
    assert_eq!(
        (q.available(), q.held(), q.waiting()),
        (capacity, 0, 0),
        "not all back: {q:?}"
    );
}

/// `f` on its own thread, answered within `HANG`: a hang fails the test.
pub fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
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
/// A test that runs `body` in a child process ([`in_child`]), under its own name.
macro_rules! child_test {
    ($(#[$doc:meta])* $name:ident, $body:expr) => {
        $(#[$doc])*
        #[test]
        fn $name() {
            let path = concat!(module_path!(), "::", stringify!($name));
            // The harness's name of the test: its path without the binary's.
            let name = path.split_once("::").map_or(path, |(_, name)| name);
            $crate::wakers::in_child(name, $body);
        }
    };
}
pub(crate) use child_test;

pub fn in_child(name: &str, body: impl FnOnce()) {
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

/// `n` queues over `global`, each with one waiter of 2 whose waker panics when woken.
pub fn short_queues(global: &Limit, n: usize) -> (Vec<AdmissionQueue>, Vec<Acquire>) {
    let queues: Vec<_> = (0..n).map(|_| under(global, 8)).collect();
    let mut futs: Vec<_> = queues.iter().map(|q| q.acquire_async(2, far())).collect();
    for f in &mut futs {
        assert!(poll_once(f, &panics_on_wake()).is_pending());
    }
    (queues, futs)
}

/// Each of `futs` is granted; their permits are dropped, then the futures.
pub fn all_granted(queues: &[AdmissionQueue], futs: Vec<Acquire>) {
    for (i, mut f) in futs.into_iter().enumerate() {
        match poll_once(&mut f, Waker::noop()) {
            Poll::Ready(Ok(p)) => assert_eq!(p.amount(), 2),
            other => panic!("queue {i} was never told: {other:?} {:?}", queues[i]),
        }
    }
}
