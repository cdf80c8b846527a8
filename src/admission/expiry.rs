//! The expiry driver of an [`AdmissionQueue`](super::AdmissionQueue) (feature `tokio`). It is
//! one tokio task per queue that sleeps until the earliest waiting deadline tick, then advances
//! the queue. So `acquire_async` waiters need no timer of their own.
//!
//! **Arming.** The driver records the tick it sleeps until in `armed`, under the queue lock. A
//! registration with an earlier deadline lowers it and wakes the driver through its `Notify`,
//! so the driver re-arms for it. The `Notify`'s stored permit covers a driver that is between
//! its look and its sleep. `armed` is 0 when no driver runs: there is nobody to tell.
//!
//! **Life.** The first `acquire_async` future that has to wait spawns the driver on its own
//! runtime (`alive` false → true, once). The task holds only a `Weak` to the queue; the queue's
//! drop wakes it, and it ends. A guard owned by the task's future sets `alive` back to false
//! however the future ends: the queue dropped, or the runtime shut down under it, polled or
//! not. The guard then wakes every waiting task. One of them, on a runtime that still runs,
//! spawns a new driver at its next poll, so waiters on other runtimes still expire.
//!
//! **Clock.** The driver advances to the later of the queue's clock (`std::time::Instant`) and
//! tokio's `now`. Under a paused clock (`start_paused`), tokio's `now` is the virtual time the
//! driver's sleep was advanced to. Expiries then happen at the paused clock's deadline tick.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::task::Poll;
use std::time::{Duration, Instant};

use super::driver::Driver;
use super::each::each;
use super::shared::Inner;
use crate::tokio::due_stream::MAX_SLEEP;

/// From the poll of a waiter that has to wait: spawns the queue's driver on the current
/// runtime unless one is alive. One atomic load when it is.
///
/// # Panics
///
/// Outside a tokio runtime, or on one without time enabled (as a tokio `Sleep` would).
pub(super) fn ensure(inner: &Arc<Inner>) {
    let driver = &inner.driver;
    if driver.alive.load(Ordering::Acquire)
        || driver
            .alive
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
    {
        return;
    }
    // Made before the spawn, so that it is dropped with the future even if the runtime
    // drops the task unpolled.
    let guard = Guard {
        queue: Arc::downgrade(inner),
        driver: driver.clone(),
    };
    // The sleep the driver will make: panics here, in the waiter's poll, without a runtime
    // or its timer (as the waiter's own sleep did), rather than in a task that would be
    // respawned.
    let probe = tokio::time::sleep(Duration::ZERO);
    drop(probe);
    #[cfg(test)]
    driver.spawned.fetch_add(1, Ordering::Relaxed);
    tokio::spawn(run(guard));
}

/// Ends the driver's life however its future ends: see the module doc, "Life".
struct Guard {
    queue: Weak<Inner>,
    driver: Arc<Driver>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        match self.queue.upgrade() {
            Some(inner) => inner.driver_ended(),
            None => self.driver.alive.store(false, Ordering::Release),
        }
    }
}

async fn run(guard: Guard) {
    let mut sleep = pin!(tokio::time::sleep(Duration::ZERO));
    loop {
        let Some(next) = guard.queue.upgrade().map(|inner| inner.drive()) else {
            return; // the queue is gone
        };
        // Taken before the sleep; a notification since the look above left a permit.
        let notified = pin!(guard.driver.notify.notified());
        match next {
            Some(at) => {
                sleep.as_mut().reset(capped(at));
                let mut notified = notified;
                std::future::poll_fn(|cx| {
                    if sleep.as_mut().poll(cx).is_ready() || notified.as_mut().poll(cx).is_ready() {
                        Poll::Ready(())
                    } else {
                        Poll::Pending
                    }
                })
                .await;
            }
            None => notified.await,
        }
    }
}

impl Inner {
    /// One step of the driver: advances the queue to now (tokio's or the queue's clock,
    /// whichever is later) and returns the instant the earliest waiting deadline tick
    /// begins, recording that tick as armed. `None` if nothing waits.
    fn drive(&self) -> Option<Instant> {
        let now = tokio::time::Instant::now().into_std();
        if let Some(tick) = self.clock.now_tick(now) {
            self.driver.tokio_tick.fetch_max(tick, Ordering::Relaxed);
        }
        self.signal();
        let core = self.core.lock();
        let next = core.next_deadline();
        self.driver
            .armed
            .store(next.unwrap_or(u64::MAX), Ordering::Relaxed);
        drop(core);
        next.map(|tick| self.clock.instant_saturating(tick))
    }

    /// The driver ended with the queue alive (its runtime shut down): nobody is armed, and
    /// every waiting task is woken to spawn a new one where it runs. O(waiting), once per
    /// driver.
    ///
    /// All under the queue lock, so that a new driver (which can be spawned once `alive` is
    /// false) records its armed tick after this one's 0, never before it. `alive` is cleared
    /// before the wakers are read, each under its cell's lock: a waiter records its waker
    /// under that lock and then reads `alive`, so it is either woken here or sees `false` and
    /// spawns the new driver itself.
    fn driver_ended(&self) {
        let mut cells = Vec::new();
        let core = self.core.lock();
        self.driver.armed.store(0, Ordering::Relaxed);
        self.driver.alive.store(false, Ordering::Release);
        core.for_each_waiting(|cell| cells.push(Arc::clone(cell)));
        drop(core);
        // Every one, even if a waker's clone or wake panics: each task must be polled to
        // spawn a new driver. The clone runs here, not under the queue lock, so a panicking
        // one cannot cut the list short.
        each(cells, |cell| {
            if let Some(waker) = cell.task_waker() {
                waker.wake();
            }
        });
    }
}

/// `at`, or [`MAX_SLEEP`] from now when that is sooner: tokio's `sleep_until` panics on an
/// instant near the end of `Instant`'s range (it rounds deadlines up), and a never-due
/// ticket (README, "One saturation rule") has such a deadline. The blocking
/// [`Waiter::wait`](super::Waiter::wait) and `DueStream` cap their sleeps alike.
fn capped(at: Instant) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    let limit = now.checked_add(MAX_SLEEP).unwrap_or(now);
    tokio::time::Instant::from_std(at).min(limit)
}
