//! [`Driver`]: what an [`AdmissionQueue`](super::AdmissionQueue) shares with its expiry
//! driver task (the task itself, and why, are in `expiry.rs`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::sync::Notify;

/// What a queue and its driver task share; the queue holds it in an `Arc`, so it outlives
/// the queue for as long as the task runs.
#[derive(Debug, Default)]
pub(crate) struct Driver {
    /// Re-arms the driver: an earlier deadline, or the queue dropped.
    pub(super) notify: Notify,
    /// A driver task exists (spawned, not yet ended).
    pub(super) alive: AtomicBool,
    /// The tick the driver sleeps until; `u64::MAX` while nothing waits, 0 with no driver.
    /// Read and written under the queue lock.
    pub(super) armed: AtomicU64,
    /// The latest tick of tokio's clock the driver saw (see `expiry.rs`, "Clock").
    pub(super) tokio_tick: AtomicU64,
    /// Drivers spawned so far.
    #[cfg(test)]
    pub(super) spawned: std::sync::atomic::AtomicUsize,
}

impl Driver {
    /// Under the queue lock, after a ticket was registered waiting until `tick`: whether the
    /// driver must be woken to re-arm for it (the caller wakes it after the lock).
    pub(super) fn rearm(&self, tick: u64) -> bool {
        if tick < self.armed.load(Ordering::Relaxed) {
            self.armed.store(tick, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// Wakes the driver (after [`rearm`](Driver::rearm), or when the queue is dropped).
    pub(super) fn wake(&self) {
        self.notify.notify_one();
    }
}
