//! `AdmissionQueue::acquire_async` (feature `tokio`): waiting for capacity from a task.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use super::each::DropLast;
use super::shared::Polled;
use super::{AcquireError, AdmissionQueue, Permit, Waiter, expiry};

impl AdmissionQueue {
    /// [`acquire`](AdmissionQueue::acquire) for a task: resolves to a [`Permit`] once
    /// `amount` is granted, or to an error at `deadline`.
    ///
    /// **Cancellation-safe**: dropping the future before it completes cancels the ticket if
    /// it still waits and gives the amount back if it had been granted (see [`Waiter`]'s
    /// `Drop`), so no capacity is lost. The future has no timer of its own: the queue's one
    /// expiry driver, a tokio task spawned by the first future that has to wait (so that
    /// poll needs a runtime with time enabled), advances the queue when the earliest waiting
    /// deadline tick begins and wakes the tasks it resolves (see the module doc, "The
    /// expiry driver"). The request is registered when `acquire_async` is called, so its
    /// place in the FIFO order is taken then, not at the first poll.
    ///
    /// # Errors
    ///
    /// As [`acquire`](AdmissionQueue::acquire): [`AcquireError::Refused`] (returned by the
    /// first poll), [`AcquireError::Expired`], [`AcquireError::Cancelled`].
    ///
    /// # Panics
    ///
    /// The first poll that has to wait, when the queue has no live driver, panics outside a
    /// tokio runtime or on one without time enabled (as tokio's `sleep` does).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::time::{Duration, Instant};
    /// use tickwheel::admission::AdmissionQueue;
    ///
    /// let q = AdmissionQueue::new(10, Duration::from_millis(1));
    /// let deadline = Instant::now() + Duration::from_secs(1);
    /// let held = q.acquire_async(10, deadline).await.unwrap();
    /// let next = q.acquire_async(4, deadline);
    /// drop(held); // the 10 come back: the next request gets its 4
    /// assert_eq!(next.await.unwrap().amount(), 4);
    /// # }
    /// ```
    pub fn acquire_async(&self, amount: u64, deadline: Instant) -> Acquire {
        let state = self
            .register(amount, deadline)
            .map_err(|e| Some(AcquireError::Refused(e)));
        Acquire { state }
    }
}

/// The future of [`AdmissionQueue::acquire_async`]. Dropping it never leaks capacity.
#[derive(Debug)]
#[must_use = "a future does nothing unless awaited; dropping it cancels the request"]
pub struct Acquire {
    state: Result<Waiter, Option<AcquireError>>,
}

impl Future for Acquire {
    type Output = Result<Permit, AcquireError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let waiter = match &mut self.state {
            Ok(waiter) => &*waiter,
            Err(refused) => return Poll::Ready(Err(refused.take_or_done())),
        };
        // Takes the outcome, or records the waker under the cell lock, where resolutions are
        // written: a resolution after this look wakes us.
        let replaced = match waiter.poll_take(cx.waker()) {
            Polled::Ready(result) => return Poll::Ready(result),
            Polled::Pending(replaced) => DropLast(replaced),
        };
        // The driver first: the replaced waker's drop may panic.
        expiry::ensure(waiter.queue());
        drop(replaced);
        Poll::Pending
    }
}

trait TakeOrDone {
    fn take_or_done(&mut self) -> AcquireError;
}

impl TakeOrDone for Option<AcquireError> {
    /// The refusal, once; a poll after completion answers `Cancelled` rather than panic.
    fn take_or_done(&mut self) -> AcquireError {
        self.take().unwrap_or(AcquireError::Cancelled)
    }
}
