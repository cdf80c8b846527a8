//! The crate under test: the core `tickwheel::Wheel<u64>` (the reference of every ratio) and
//! its `Instant` adapter `tickwheel::TimerWheel<u64>`.

use std::time::{Duration, Instant};

use tickwheel::{TimerKey, TimerWheel, Wheel};

use super::Peer;

/// `tickwheel::Wheel<u64>`.
pub struct Tickwheel(Wheel<u64>);

impl Peer for Tickwheel {
    const NAME: &'static str = "tickwheel";
    type Key = TimerKey;
    type Deadline = u64;

    fn new(_lanes: usize, capacity: usize) -> Self {
        Tickwheel(Wheel::with_capacity(capacity))
    }
    #[inline]
    fn deadline(&self, ms: u64) -> u64 {
        ms
    }
    #[inline]
    fn insert(&mut self, deadline: u64, lane: u64) -> TimerKey {
        self.0.insert(deadline, lane)
    }
    #[inline]
    fn cancel(&mut self, key: TimerKey) -> bool {
        self.0.cancel(key).is_some()
    }
    #[inline]
    fn reset(&mut self, key: TimerKey, deadline: u64) -> TimerKey {
        self.0.reset(key, deadline);
        key
    }
    #[inline]
    fn poll(&mut self, now: u64, fired: &mut Vec<u64>) {
        while let Some(expired) = self.0.poll(now) {
            fired.push(expired.value);
        }
    }
}

impl Tickwheel {
    pub fn wheel(&self) -> &Wheel<u64> {
        &self.0
    }
}

/// `tickwheel::TimerWheel<u64>` at 1 ms: the `Instant` API over the same wheel. Deadlines are
/// `Instant`s precomputed outside the timed region (as for tokio's `insert_at`); each poll
/// converts its tick to an `Instant`, as a caller polling with `Instant::now()` would have
/// one.
pub struct TimerWheelPeer {
    wheel: TimerWheel<u64>,
    epoch: Instant,
}

impl Peer for TimerWheelPeer {
    const NAME: &'static str = "TimerWheel";
    type Key = TimerKey;
    type Deadline = Instant;

    fn new(_lanes: usize, capacity: usize) -> Self {
        let wheel = TimerWheel::with_capacity(capacity, Duration::from_millis(1));
        let epoch = wheel.clock().origin();
        TimerWheelPeer { wheel, epoch }
    }
    #[inline]
    fn deadline(&self, ms: u64) -> Instant {
        self.epoch + Duration::from_millis(ms)
    }
    #[inline]
    fn insert(&mut self, deadline: Instant, lane: u64) -> TimerKey {
        self.wheel.insert_at(deadline, lane)
    }
    #[inline]
    fn cancel(&mut self, key: TimerKey) -> bool {
        self.wheel.cancel(key).is_some()
    }
    #[inline]
    fn reset(&mut self, key: TimerKey, deadline: Instant) -> TimerKey {
        self.wheel.reset_at(key, deadline);
        key
    }
    #[inline]
    fn poll(&mut self, now: u64, fired: &mut Vec<u64>) {
        let now = self.epoch + Duration::from_millis(now);
        while let Some(expired) = self.wheel.poll(now) {
            fired.push(expired.value);
        }
    }
}
