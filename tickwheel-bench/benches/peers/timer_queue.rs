//! timer-queue.

use super::Peer;

/// `timer_queue::TimerQueue<u64>`.
///
/// The key carries the lane next to the `Timer`: `remove` has no fallible form (it panics on
/// an absent timer) and returns the value, so `cancel` reports whether it got back the lane it
/// was cancelling, the real outcome as far as the API tells it.
pub struct TimerQueue(timer_queue::TimerQueue<u64>);

impl Peer for TimerQueue {
    const NAME: &'static str = "timer-queue";
    type Key = (timer_queue::Timer, u64);
    type Deadline = u64;

    fn new(_lanes: usize, capacity: usize) -> Self {
        TimerQueue(timer_queue::TimerQueue::with_capacity(capacity))
    }
    #[inline]
    fn deadline(&self, ms: u64) -> u64 {
        ms
    }
    #[inline]
    fn insert(&mut self, deadline: u64, lane: u64) -> Self::Key {
        (self.0.insert(deadline, lane), lane)
    }
    #[inline]
    fn cancel(&mut self, (timer, lane): Self::Key) -> bool {
        self.0.remove(timer) == lane
    }
    #[inline]
    fn reset(&mut self, key: Self::Key, deadline: u64) -> Self::Key {
        self.0.reset(key.0, deadline);
        key
    }
    #[inline]
    fn poll(&mut self, now: u64, fired: &mut Vec<u64>) {
        while let Some(lane) = self.0.poll(now) {
            fired.push(lane);
        }
    }
}
