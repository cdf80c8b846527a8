//! A cancelled request's waker that panics when woken: the grants the same cancel made are
//! woken all the same (the public API cannot record a task's waker on a ticket it can
//! cancel, so this reaches the waiter's cell directly).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Wake, Waker};
use std::time::{Duration, Instant};

use super::AdmissionQueue;

struct Panics;

impl Wake for Panics {
    fn wake(self: Arc<Self>) {
        panic!("a waker that panics when woken");
    }
}

#[derive(Default)]
struct Counts(AtomicUsize);

impl Wake for Counts {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn a_cancelled_waker_that_panics_leaves_the_cancels_grants_woken() {
    let q = AdmissionQueue::new(10, Duration::from_millis(1));
    let far = Instant::now() + Duration::from_secs(3600);
    let four = q.acquire(4, far).unwrap();
    let head = q.register(8, far).unwrap(); // waits: 6 left
    let behind = q.register(6, far).unwrap(); // fits, but waits behind the head (strict)
    assert!(head.poll_take(&Waker::from(Arc::new(Panics))).is_none());
    let counts = Arc::new(Counts::default());
    let waker = Waker::from(counts.clone());
    assert!(behind.poll_take(&waker).is_none());
    let cancelled = catch_unwind(AssertUnwindSafe(|| q.cancel(head.ticket())));
    assert!(cancelled.is_err(), "the waker's panic reaches the caller");
    assert_eq!(
        counts.0.load(Ordering::SeqCst),
        1,
        "the grant's waker woken"
    );
    assert!(matches!(behind.poll_take(&waker), Some(Ok(p)) if p.amount() == 6));
    drop((head, behind, four));
    assert_eq!((q.available(), q.held(), q.waiting()), (10, 0, 0));
}
