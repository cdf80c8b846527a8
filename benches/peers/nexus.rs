//! nexus-timer.

use std::time::{Duration, Instant};

use super::Peer;

/// `nexus_timer::Wheel<u64>` (unbounded, the README's configuration: 1 ms ticks, 4096-entry
/// slab chunks).
pub struct NexusTimer {
    wheel: nexus_timer::Wheel<u64>,
    epoch: Instant,
}

impl Peer for NexusTimer {
    const NAME: &'static str = "nexus-timer";
    type Key = nexus_timer::TimerHandle<u64>;
    type Deadline = Instant;

    fn new(_lanes: usize, _capacity: usize) -> Self {
        let epoch = Instant::now();
        NexusTimer {
            wheel: nexus_timer::Wheel::unbounded(4096, epoch),
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
            .poll(self.epoch + Duration::from_millis(now), fired);
    }
    const RELEASE: bool = true;
    #[inline]
    fn release(&mut self, key: Self::Key) {
        self.wheel.free(key);
    }
}
