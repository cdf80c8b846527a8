//! [`Durable::spawn_dispatcher`]: a thread that hands due timers to a handler, sleeping until
//! the next deadline and woken when an earlier one is scheduled.

use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::due::Due;
use crate::durable::Durable;

/// Most timers the dispatcher takes per `pop_due` (one commit of their hand-outs).
const BATCH: usize = 1024;

/// The longest the dispatcher sleeps without looking: a bound on a missed wake-up, never
/// reached in the protocol's normal course.
const MAX_SLEEP: Duration = Duration::from_millis(100);

/// The dispatcher's sleep, which calls that add an earlier deadline cut short.
#[derive(Debug)]
pub(crate) struct Wake {
    base: Instant,
    /// The deadline the dispatcher sleeps until, in µs since `base` (`u64::MAX`: none); 0
    /// when it is awake.
    until: AtomicU64,
    lock: Mutex<()>,
    cond: Condvar,
}

impl Wake {
    pub(crate) fn new() -> Self {
        Wake {
            base: Instant::now(),
            until: AtomicU64::new(0),
            lock: Mutex::new(()),
            cond: Condvar::new(),
        }
    }

    fn micros(&self, at: Instant) -> u64 {
        at.checked_duration_since(self.base)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX - 1))
            .max(1)
    }

    /// Called after a timer due at `at` became pending: wakes a dispatcher sleeping past it.
    /// One atomic load when nobody sleeps past `at`.
    pub(crate) fn deadline_added(&self, at: Instant) {
        if self.micros(at) < self.until.load(Ordering::SeqCst) {
            let _guard = self.lock.lock();
            self.cond.notify_all();
        }
    }

    fn stop(&self) {
        let _guard = self.lock.lock();
        self.cond.notify_all();
    }
}

/// The handle of a dispatcher thread; [`shutdown`](Self::shutdown) or dropping it stops the
/// thread after the batch in hand.
#[derive(Debug)]
pub struct DurableDispatcher {
    stop: Arc<AtomicBool>,
    wake: Arc<Wake>,
    delivered: Arc<AtomicU64>,
    panics: Arc<AtomicU64>,
    error: Arc<Mutex<Option<crate::Error>>>,
    thread: Option<JoinHandle<()>>,
}

impl DurableDispatcher {
    /// Stops the thread and waits for it. Timers in flight in the batch in hand are handed
    /// to the handler first; those not yet handed go back pending.
    pub fn shutdown(mut self) {
        self.stop_and_join();
    }

    /// Timers handed to the handler so far.
    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }

    /// Handler calls that panicked (their `Due` was dropped while unwinding: delivered).
    pub fn panics(&self) -> u64 {
        self.panics.load(Ordering::Relaxed)
    }

    /// The journal error that stopped the thread, if one did (`pop_due` failed: the journal
    /// is dead, re-open it).
    pub fn error(&self) -> Option<crate::Error> {
        self.error.lock().clone()
    }

    fn stop_and_join(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.wake.stop();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for DurableDispatcher {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

impl<Q, K, T> Durable<Q, K, T>
where
    Q: Hash + Eq + Clone + Serialize + DeserializeOwned + Send + Sync + 'static,
    K: Hash + Eq + Clone + Serialize + DeserializeOwned + Send + Sync + 'static,
    T: Serialize + DeserializeOwned + Send + Sync + 'static,
{
    /// Starts a thread that calls `handler` with each due timer, in delivery order, as
    /// [`tickwheel::sync::Scheduler::spawn_dispatcher`] does. Each hand-out is durable
    /// before the handler sees it (one commit per batch of up to 1 024). The handler ends
    /// each [`Due`]: [`done`](Due::done), [`retry_at`](Due::retry_at), or drop (done without
    /// waiting). A panicking handler is counted and the thread goes on.
    ///
    /// The thread sleeps until the next deadline; a schedule, reschedule, retry or import
    /// of an earlier one wakes it. With one dispatcher per journal (a second one would share
    /// the wake-ups, so each sleeps at most 100 ms past an earlier deadline).
    ///
    /// # Errors
    ///
    /// Spawning the thread can fail (the OS refuses): `Err(Error::Engine)`.
    pub fn spawn_dispatcher<F>(self: &Arc<Self>, mut handler: F) -> crate::Result<DurableDispatcher>
    where
        F: FnMut(Due<Q, K, T>) + Send + 'static,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let delivered = Arc::new(AtomicU64::new(0));
        let panics = Arc::new(AtomicU64::new(0));
        let error = Arc::new(Mutex::new(None));
        let wake = self.wake().clone();
        let (d, s, dl, p, e, w) = (
            self.clone(),
            stop.clone(),
            delivered.clone(),
            panics.clone(),
            error.clone(),
            wake.clone(),
        );
        let thread = std::thread::Builder::new()
            .name("tickwheel-journal-dispatcher".into())
            .spawn(move || {
                while !s.load(Ordering::SeqCst) {
                    let batch = match d.pop_due(Instant::now(), BATCH) {
                        Ok(batch) => batch,
                        Err(err) => {
                            *e.lock() = Some(err);
                            return;
                        }
                    };
                    if !batch.is_empty() {
                        for due in batch {
                            dl.fetch_add(1, Ordering::Relaxed);
                            if std::panic::catch_unwind(AssertUnwindSafe(|| handler(due))).is_err()
                            {
                                p.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        continue;
                    }
                    sleep(&d, &w, &s);
                }
            })
            .map_err(crate::Error::engine)?;
        Ok(DurableDispatcher {
            stop,
            wake,
            delivered,
            panics,
            error,
            thread: Some(thread),
        })
    }
}

/// Sleeps until the next deadline (at most `MAX_SLEEP`), unless an earlier one arrives or
/// the dispatcher is stopped.
fn sleep<Q, K, T>(d: &Durable<Q, K, T>, w: &Wake, stop: &AtomicBool)
where
    Q: Hash + Eq + Clone + Serialize + DeserializeOwned + Send + 'static,
    K: Hash + Eq + Clone + Serialize + DeserializeOwned + Send + 'static,
    T: Serialize + DeserializeOwned + Send + 'static,
{
    let mut guard = w.lock.lock();
    let next = d.next_deadline();
    w.until
        .store(next.map_or(u64::MAX, |at| w.micros(at)), Ordering::SeqCst);
    // Re-read after publishing: a timer added before the store is seen here, one added
    // after it sees the store and notifies under the lock we hold until we wait.
    if d.next_deadline() == next && !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        let until = next.map_or(now + MAX_SLEEP, |at| at.min(now + MAX_SLEEP));
        if until > now {
            w.cond.wait_until(&mut guard, until);
        }
    }
    w.until.store(0, Ordering::SeqCst);
}
