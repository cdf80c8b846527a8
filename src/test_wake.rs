//! Wakers for tests: one that counts its wakeups, and two that panic (when woken, when
//! dropped). The unit tests use it as `crate::test_wake`, the integration tests as
//! `support::wakers` (`tests/support/mod.rs` includes this file).

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

/// Panics when woken.
pub(crate) struct Panics;

impl Wake for Panics {
    fn wake(self: Arc<Self>) {
        panic!("a waker that panics when woken");
    }
}

/// A waker that panics when woken.
pub(crate) fn panics() -> Waker {
    Waker::from(Arc::new(Panics))
}

/// Wakes quietly, and panics when dropped (as the last handle of a waker).
pub(crate) struct PanicsOnDrop;

impl Wake for PanicsOnDrop {
    fn wake(self: Arc<Self>) {}
}

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        panic!("a waker that panics when dropped");
    }
}
