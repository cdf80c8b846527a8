//! nexus-timer.

use std::time::{Duration, Instant};

use super::Peer;

/// `nexus_timer::Wheel<u64>` (unbounded, default configuration: 1 ms ticks), polled with
/// `poll_and_rebalance`, the poll its documentation recommends for steady polling: it
/// collects what is due and moves not-yet-due entries down to finer levels in the same pass,
/// where the bare `poll` leaves them in their coarse slot and re-walks them on every call.
///
/// Capacity: its only sizing knob is the slab's chunk size (entries per chunk; the slab grows
/// by whole chunks). With a capacity hint the chunk is `n` entries, so the whole workload
/// fits in one chunk allocated up front, as a `with_capacity(n)` would; without one (the
/// memory workload) it is the README's 4096.
pub struct NexusTimer {
    wheel: nexus_timer::Wheel<u64>,
    epoch: Instant,
}

/// Slab chunk size without a capacity hint (nexus-timer's README).
const DEFAULT_CHUNK: usize = 4096;

impl Peer for NexusTimer {
    const NAME: &'static str = "nexus-timer";
    type Key = nexus_timer::TimerHandle<u64>;
    type Deadline = Instant;

    fn new(_lanes: usize, capacity: usize) -> Self {
        let epoch = Instant::now();
        let chunk = if capacity == 0 {
            DEFAULT_CHUNK
        } else {
            capacity
        };
        NexusTimer {
            wheel: nexus_timer::Wheel::unbounded(chunk, epoch),
            epoch,
        }
    }
    #[inline]
    fn deadline(&self, ms: u64) -> Instant {
        self.epoch + Duration::from_millis(ms)
    }
    #[inline]
    fn insert(&mut self, deadline: Instant, lane: u64) -> Self::Key {
        self.wheel.schedule(deadline, lane)
    }
    #[inline]
    fn cancel(&mut self, key: Self::Key) -> bool {
        self.wheel.cancel(key).is_some()
    }
    #[inline]
    fn reset(&mut self, key: Self::Key, deadline: Instant) -> Self::Key {
        self.wheel.reschedule(key, deadline)
    }
    #[inline]
    fn poll(&mut self, now: u64, fired: &mut Vec<u64>) {
        self.wheel
            .poll_and_rebalance(self.epoch + Duration::from_millis(now), fired);
    }
    const RELEASE: bool = true;
    #[inline]
    fn release(&mut self, key: Self::Key) {
        self.wheel.free(key);
    }
}
