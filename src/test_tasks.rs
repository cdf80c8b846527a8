//! What tests use to drive tasks by hand: a waker that counts its wakeups and, with feature
//! `tokio` (the admission tests), two wakers that panic (when woken, when dropped) and a
//! runtime entered but never run. The unit tests use it as `crate::test_tasks`, the
//! integration tests as `support::tasks` (`tests/support/mod.rs` includes this file).

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

#[cfg(feature = "tokio")]
pub(crate) use panicking::*;

#[cfg(feature = "tokio")]
mod panicking {
    use std::sync::Arc;
    use std::task::{Wake, Waker};

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

    /// A current-thread runtime with time enabled, never run by the caller: entered, it lets
    /// a queue spawn its expiry driver (`admission`), and that driver never advances anything.
    ///
    /// # Panics
    /// If tokio cannot build the runtime.
    pub(crate) fn idle_runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap_or_else(|e| panic!("a current-thread runtime: {e}"))
    }
}
