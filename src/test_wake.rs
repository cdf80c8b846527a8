//! A waker for unit tests that counts its wakeups.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Wake, Waker};

/// Counts the wakeups of the wakers made from it (in `.0`).
#[derive(Default)]
pub(crate) struct CountWake(pub(crate) AtomicUsize);

impl Wake for CountWake {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A new count at 0 and a waker that adds to it.
pub(crate) fn counting() -> (Arc<CountWake>, Waker) {
    let count = Arc::new(CountWake::default());
    (Arc::clone(&count), Waker::from(count))
}
