//! What a shared queue's lock holds: the [`WaitQueue`], and the buffer its calls fill with
//! resolutions, kept between calls so that a call that resolves tickets allocates nothing
//! for them once the buffer has grown.

use std::fmt;
use std::ops::{Deref, DerefMut};

use super::{Resolved, WaitQueue};

/// The most resolutions' room kept between calls: a burst's larger buffer is freed, so a
/// queue holds no more than this after it.
const KEEP: usize = 256;

pub(super) struct Locked<W> {
    queue: WaitQueue<W>,
    /// Empty between calls; its capacity is what is kept.
    resolved: Vec<Resolved<W>>,
}

impl<W> Locked<W> {
    pub(super) fn new(queue: WaitQueue<W>) -> Self {
        Locked {
            queue,
            resolved: Vec::new(),
        }
    }

    /// The empty buffer, for one call's resolutions; [`give_back`](Self::give_back) returns it.
    pub(super) fn take_buffer(&mut self) -> Vec<Resolved<W>> {
        std::mem::take(&mut self.resolved)
    }

    /// Keeps `buffer`'s capacity for the next call (emptied here), up to [`KEEP`].
    pub(super) fn give_back(&mut self, mut buffer: Vec<Resolved<W>>) {
        if buffer.capacity() <= KEEP {
            buffer.clear();
            self.resolved = buffer;
        }
    }
}

impl<W> Deref for Locked<W> {
    type Target = WaitQueue<W>;
    fn deref(&self) -> &WaitQueue<W> {
        &self.queue
    }
}

impl<W> DerefMut for Locked<W> {
    fn deref_mut(&mut self) -> &mut WaitQueue<W> {
        &mut self.queue
    }
}

impl<W> fmt::Debug for Locked<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.queue, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_buffer_keeps_its_room_up_to_the_bound() {
        let mut locked: Locked<u32> = Locked::new(WaitQueue::new(10));
        let mut small = locked.take_buffer();
        small.reserve_exact(8);
        locked.give_back(small);
        assert!(
            locked.take_buffer().capacity() >= 8,
            "a small buffer is kept"
        );
        let big: Vec<Resolved<u32>> = Vec::with_capacity(KEEP + 1);
        locked.give_back(big);
        assert_eq!(
            locked.take_buffer().capacity(),
            0,
            "a burst's buffer is freed"
        );
    }
}
