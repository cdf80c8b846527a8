//! A dispatcher thread for programs without an async runtime.
//!
//! The loop, on its own thread:
//!
//! ```text
//!   loop:
//!     batch = pop_due(Instant::now(), 64)      phase one (all shard locks, briefly)
//!     for due in batch: handler(due)           phase two (no lock held)
//!     if the batch was empty:
//!       arm the signal; E = next deadline; lower the watermark to E
//!       sleep until E, unless a notify came since arming
//! ```
//!
//! A `schedule` earlier than `E` notifies the signal and the thread wakes at once (see
//! `signal.rs` for why no wakeup is lost). A handler that panics is caught: the panicking
//! timer counts as delivered (its `Due` was handed over and is dropped while unwinding), the
//! rest of the batch is delivered as usual, and the panic is counted in
//! [`DispatcherHandle::panics`].

use std::fmt;
use std::hash::Hash;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use super::Scheduler;
use super::due::Due;
use super::signal::Signal;
use crate::loom::{AtomicBool, AtomicU64, Ordering};

/// Timers the dispatcher thread takes per `pop_due`: small enough that shard locks are
/// held briefly, large enough to amortise the merge.
const DISPATCH_BATCH: usize = 64;

/// Counters shared between a dispatcher thread and its handle.
#[derive(Debug, Default)]
pub(super) struct Shared {
    stop: AtomicBool,
    delivered: AtomicU64,
    panics: AtomicU64,
}

/// The handle of a dispatcher thread started by
/// [`Scheduler::spawn_dispatcher`](Scheduler::spawn_dispatcher).
///
/// [`shutdown`](Self::shutdown) stops the thread and waits for it; dropping the handle does
/// the same. Timers still pending stay in the scheduler.
///
/// The handler itself may stop its dispatcher: a `shutdown` or drop of the handle on the
/// dispatcher thread (from inside the handler) sets the stop flag and returns at once,
/// without waiting — the thread cannot wait for itself. The thread then stops when the
/// handler returns, and the rest of its batch goes back as pending.
#[must_use = "dropping the handle stops the dispatcher thread: keep it for as long as timers \
              should be delivered, and call `shutdown` to stop"]
pub struct DispatcherHandle {
    shared: Arc<Shared>,
    signal: Arc<Signal>,
    thread: Option<JoinHandle<()>>,
}

impl<Q, K, T> Scheduler<Q, K, T>
where
    Q: Hash + Eq + Clone + Send + 'static,
    K: Hash + Eq + Clone + Send + 'static,
    T: Send + 'static,
{
    /// Starts a thread that delivers every due timer to `handler`, in delivery order.
    ///
    /// The thread sleeps until the next deadline and is woken early when an earlier timer is
    /// scheduled. Each `Due` is done when the handler returns (it is dropped then, unless the
    /// handler consumed it). A panicking handler is caught and counted; the thread goes on.
    /// Several dispatchers may serve one scheduler; each timer goes to exactly one of them.
    ///
    /// # Panics
    ///
    /// If the operating system refuses to start a thread.
    ///
    /// ```
    /// use std::sync::{Arc, mpsc};
    /// use std::time::{Duration, Instant};
    /// use tickwheel::sync::Scheduler;
    ///
    /// let sched = Arc::new(Scheduler::new());
    /// let (tx, rx) = mpsc::channel();
    /// let dispatcher = sched.spawn_dispatcher(move |due| {
    ///     tx.send(due.into_value()).unwrap();
    /// });
    /// sched.schedule("q", 1, Instant::now() + Duration::from_millis(5), "hello").unwrap();
    /// assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok("hello"));
    /// dispatcher.shutdown();
    /// ```
    pub fn spawn_dispatcher<F>(self: &Arc<Self>, handler: F) -> DispatcherHandle
    where
        F: FnMut(Due<Q, K, T>) + Send + 'static,
    {
        let shared = Arc::new(Shared::default());
        let signal = Arc::clone(self.signal());
        let sched = Arc::clone(self);
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("tickwheel-dispatcher".into())
            .spawn(move || run(&sched, &thread_shared, handler));
        match thread {
            Ok(thread) => DispatcherHandle {
                shared,
                signal,
                thread: Some(thread),
            },
            Err(e) => panic!("tickwheel: cannot spawn the dispatcher thread: {e}"),
        }
    }
}

/// The dispatcher loop (see the module doc).
pub(super) fn run<Q, K, T, F>(sched: &Scheduler<Q, K, T>, shared: &Shared, mut handler: F)
where
    Q: Hash + Eq + Clone,
    K: Hash + Eq + Clone,
    F: FnMut(Due<Q, K, T>),
{
    while !shared.stop.load(Ordering::SeqCst) {
        let mut batch = sched.pop_due(Instant::now(), DISPATCH_BATCH);
        if !batch.is_empty() {
            // Stop between items: the untaken rest goes back when `batch` drops.
            while !shared.stop.load(Ordering::SeqCst) {
                let Some(due) = batch.next() else {
                    break;
                };
                // Counted before the call: whatever the handler makes visible (a channel
                // send, say) is then never ahead of `delivered()`.
                shared.delivered.fetch_add(1, Ordering::SeqCst);
                if catch_unwind(AssertUnwindSafe(|| handler(due))).is_err() {
                    shared.panics.fetch_add(1, Ordering::Relaxed);
                }
            }
            continue;
        }
        sleep_until_due(sched, &shared.stop);
    }
}

/// The poller's side of the wake-up protocol (`signal.rs`, steps 1 to 4): arms the signal,
/// reads the earliest deadline, narrows the watermark to it and sleeps until then, unless
/// a notify came since arming or `stop` is set. Returns early when notified; may return
/// spuriously.
pub(crate) fn sleep_until_due<Q, K, T>(sched: &Scheduler<Q, K, T>, stop: &AtomicBool)
where
    Q: Hash + Eq + Clone,
    K: Hash + Eq + Clone,
{
    let signal = sched.signal();
    let epoch = signal.arm();
    let target = sched.earliest_tick();
    signal.lower(target);
    let deadline = target.map(|tick| sched.tick_instant(tick));
    signal.wait(epoch, deadline, stop);
}

/// Asks a dispatcher loop to stop: sets its flag, then wakes it if it sleeps (its `wait`
/// reads the flag under the signal lock, so either it sees the flag or the notify comes
/// after it went to sleep).
pub(super) fn request_stop(shared: &Shared, signal: &Signal) {
    shared.stop.store(true, Ordering::SeqCst);
    signal.notify();
}

impl DispatcherHandle {
    /// Stops the dispatcher thread and returns once it has exited. A handler call in
    /// progress finishes first; the rest of its batch goes back as pending.
    ///
    /// Called on the dispatcher thread itself (from inside the handler), it only asks the
    /// thread to stop and returns without waiting: the thread exits once the handler call
    /// returns. Dropping the handle behaves the same way.
    pub fn shutdown(mut self) {
        self.stop_and_join();
    }

    /// Timers handed to the handler so far (those whose handler panicked included).
    pub fn delivered(&self) -> u64 {
        self.shared.delivered.load(Ordering::SeqCst)
    }

    /// Handler calls that panicked so far.
    pub fn panics(&self) -> u64 {
        self.shared.panics.load(Ordering::Relaxed)
    }

    /// Whether the thread is still running (it stops only on shutdown).
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    fn stop_and_join(&mut self) {
        request_stop(&self.shared, &self.signal);
        if let Some(thread) = self.thread.take() {
            if thread.thread().id() == std::thread::current().id() {
                // From inside the handler: joining would wait for ourselves (the OS
                // refuses: EDEADLK). The loop sees `stop` once the handler returns;
                // dropping the `JoinHandle` detaches the thread.
                return;
            }
            // The loop catches handler panics, so the thread ends normally; if it did not,
            // there is nothing left to clean up here either.
            let _ = thread.join();
        }
    }
}

impl Drop for DispatcherHandle {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

impl fmt::Debug for DispatcherHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DispatcherHandle")
            .field("running", &self.is_running())
            .field("delivered", &self.delivered())
            .field("panics", &self.panics())
            .finish()
    }
}
