//! timer-queue.

use super::Peer;

/// `timer_queue::TimerQueue<u64>`.
pub struct TimerQueue(timer_queue::TimerQueue<u64>);

impl Peer for TimerQueue {
    const NAME: &'static str = "timer-queue";
    type Key = timer_queue::Timer;
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
        self.0.insert(deadline, lane)
    }
    #[inline]
    fn cancel(&mut self, key: Self::Key) -> bool {
        self.0.remove(key);
        true
    }
    #[inline]
    fn reset(&mut self, key: Self::Key, deadline: u64) -> Self::Key {
        self.0.reset(key, deadline);
        key
    }
    #[inline]
    fn poll(&mut self, now: u64, fired: &mut Vec<u64>) {
        while let Some(lane) = self.0.poll(now) {
            fired.push(lane);
        }
    }
}
