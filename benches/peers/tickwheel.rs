//! The crate under test: `tickwheel::Wheel<u64>`.

use tickwheel::{TimerKey, Wheel};

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
