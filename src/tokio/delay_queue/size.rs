//! How many entries a [`DelayQueue`] holds, and the memory behind them.

use super::DelayQueue;

impl<T> DelayQueue<T> {
    /// How many entries the queue holds without reallocating.
    ///
    /// # Examples
    ///
    /// ```
    /// use tickwheel::tokio::DelayQueue;
    ///
    /// let queue: DelayQueue<i32> = DelayQueue::with_capacity(10);
    /// assert!(queue.capacity() >= 10);
    /// ```
    pub fn capacity(&self) -> usize {
        self.wheel.capacity()
    }

    /// How many entries are in the queue, due or not. O(1).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use tickwheel::tokio::DelayQueue;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let mut queue = DelayQueue::new();
    /// assert_eq!(queue.len(), 0);
    /// queue.insert(3, Duration::from_secs(5));
    /// assert_eq!(queue.len(), 1);
    /// # }
    /// ```
    pub fn len(&self) -> usize {
        self.wheel.len()
    }

    /// Whether the queue holds no entry. `false` while entries wait, even if none is due.
    /// O(1).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use tickwheel::tokio::DelayQueue;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let mut queue = DelayQueue::new();
    /// assert!(queue.is_empty());
    /// queue.insert("hello", Duration::from_secs(5));
    /// assert!(!queue.is_empty());
    /// # }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.wheel.is_empty()
    }

    /// Makes room for at least `additional` more entries.
    ///
    /// # Panics
    ///
    /// If the new capacity overflows `isize::MAX` bytes, as `Vec::reserve` does.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use tickwheel::tokio::DelayQueue;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let mut queue = DelayQueue::new();
    /// queue.insert("hello", Duration::from_secs(10));
    /// queue.reserve(10);
    /// assert!(queue.capacity() >= 11);
    /// # }
    /// ```
    #[track_caller]
    pub fn reserve(&mut self, additional: usize) {
        self.wheel.reserve(additional);
    }

    /// Gives unused memory back: storage slots past the last entry, stale references in the
    /// wheel, spare capacity. Keys stay valid (and stale keys stale). O(capacity).
    pub fn shrink_to_fit(&mut self) {
        self.wheel.shrink_to_fit();
    }

    /// The same as [`shrink_to_fit`](Self::shrink_to_fit). O(capacity).
    ///
    /// tokio-util's `compact` moves entries so that the capacity becomes the length, and
    /// remaps keys behind the scenes. Here a key names its storage slot for good, so entries
    /// do not move, and slots freed below the last entry stay allocated until reused.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use tickwheel::tokio::DelayQueue;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let mut queue = DelayQueue::with_capacity(10);
    /// let keys: Vec<_> = (0..3).map(|i| queue.insert(i, Duration::from_secs(i))).collect();
    /// queue.remove(&keys[2]);
    /// queue.compact();
    /// assert!(queue.capacity() < 10);
    /// assert_eq!(queue.deadline(&keys[1]), tokio::time::Instant::now() + Duration::from_secs(1));
    /// # }
    /// ```
    pub fn compact(&mut self) {
        self.shrink_to_fit();
    }
}
