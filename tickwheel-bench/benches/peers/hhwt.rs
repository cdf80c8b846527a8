//! hierarchical_hash_wheel_timer.

use std::time::Duration;

use super::Peer;

type HhwtEntry = hierarchical_hash_wheel_timer::IdOnlyTimerEntry<u64>;

/// `hierarchical_hash_wheel_timer::wheels::cancellable::QuadWheelWithOverflow` with
/// `IdOnlyTimerEntry<u64>`: ids are lanes, delays are relative to the wheel's own clock.
pub struct Hhwt {
    wheel: hierarchical_hash_wheel_timer::wheels::cancellable::QuadWheelWithOverflow<HhwtEntry>,
    /// The tick the wheel has been moved to by `tick`/`skip`.
    now: u64,
}

impl Hhwt {
    #[inline]
    fn schedule(&mut self, deadline: u64, lane: u64) {
        let delay = Duration::from_millis(deadline.saturating_sub(self.now).max(1));
        let entry = HhwtEntry::new(lane, delay);
        if self.wheel.insert(entry).is_err() {
            unreachable!("hhwt rejected a future deadline");
        }
    }
}

impl Peer for Hhwt {
    const NAME: &'static str = "hhwt";
    type Key = u64;
    type Deadline = u64;

    fn new(_lanes: usize, _capacity: usize) -> Self {
        Hhwt {
            wheel: Default::default(),
            now: 0,
        }
    }
    #[inline]
    fn deadline(&self, ms: u64) -> u64 {
        ms
    }
    #[inline]
    fn insert(&mut self, deadline: u64, lane: u64) -> u64 {
        self.schedule(deadline, lane);
        lane
    }
    #[inline]
    fn cancel(&mut self, key: u64) -> bool {
        self.wheel.cancel(&key).is_ok()
    }
    #[inline]
    fn reset(&mut self, key: u64, deadline: u64) -> u64 {
        let _ = self.wheel.cancel(&key);
        self.schedule(deadline, key);
        key
    }
    fn poll(&mut self, now: u64, fired: &mut Vec<u64>) {
        use hierarchical_hash_wheel_timer::wheels::Skip;
        while self.now < now {
            match self.wheel.can_skip() {
                Skip::Empty => {
                    let by = (now - self.now).min(u32::MAX as u64);
                    self.wheel.skip(by as u32);
                    self.now += by;
                }
                Skip::Millis(n) => {
                    let by = (now - self.now).min(n as u64);
                    self.wheel.skip(by as u32);
                    self.now += by;
                }
                Skip::None => {
                    fired.extend(self.wheel.tick().into_iter().map(|e| e.id));
                    self.now += 1;
                }
            }
        }
    }
}
