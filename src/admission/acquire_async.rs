//! `AdmissionQueue::acquire_async` (feature `tokio`): waiting for capacity from a task.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::time::Sleep;

use super::{AcquireError, AdmissionQueue, Permit, Waiter};
use crate::tokio::due_stream::MAX_SLEEP;

impl AdmissionQueue {
    /// [`acquire`](AdmissionQueue::acquire) for a task: resolves to a [`Permit`] once
    /// `amount` is granted, or to an error at `deadline`.
    ///
    /// **Cancellation-safe**: dropping the future before it completes cancels the ticket if
    /// it still waits and gives the amount back if it had been granted (see [`Waiter`]'s
    /// `Drop`), so no capacity is lost. The task advances the queue itself when its deadline
    /// tick begins (with a tokio `Sleep`, made at the first poll that has to wait: it needs a
    /// runtime with time enabled then, on real time, since the queue's clock is
    /// `std::time::Instant`). The request is registered when `acquire_async` is called, so
    /// its place in the FIFO order is taken then, not at the first poll.
    ///
    /// # Errors
    ///
    /// As [`acquire`](AdmissionQueue::acquire): [`AcquireError::Refused`] (returned by the
    /// first poll), [`AcquireError::Expired`], [`AcquireError::Cancelled`].
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
        Acquire { state, sleep: None }
    }
}

/// The future of [`AdmissionQueue::acquire_async`]. Dropping it never leaks capacity.
#[derive(Debug)]
#[must_use = "a future does nothing unless awaited; dropping it cancels the request"]
pub struct Acquire {
    state: Result<Waiter, Option<AcquireError>>,
    /// Until the deadline tick begins; made at the first poll that has to wait (inside the
    /// runtime), so a request granted at once never touches tokio's timer.
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Future for Acquire {
    type Output = Result<Permit, AcquireError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let waiter = match &mut this.state {
            Ok(waiter) => &*waiter,
            Err(refused) => return Poll::Ready(Err(refused.take_or_done())),
        };
        loop {
            if let Some(result) = waiter.try_take() {
                return Poll::Ready(result);
            }
            // Registered before the last look: a resolution after it wakes us.
            waiter.set_waker(cx.waker());
            if let Some(result) = waiter.try_take() {
                return Poll::Ready(result);
            }
            let sleep = this.sleep.get_or_insert_with(|| {
                Box::pin(tokio::time::sleep_until(capped(waiter.wake_at())))
            });
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let now = Instant::now();
            if now < waiter.wake_at() {
                // One capped step of a far (or never-due) deadline: sleep the next one.
                sleep.as_mut().reset(capped(waiter.wake_at()));
                continue;
            }
            // The deadline tick has begun: advance the queue ourselves, then look again
            // (another thread may be running the pass; it was asked to run again).
            waiter.advance();
            if let Some(result) = waiter.try_take() {
                return Poll::Ready(result);
            }
            sleep
                .as_mut()
                .reset(capped(after(now, waiter.resolution())));
        }
    }
}

/// `at`, or [`MAX_SLEEP`] from now when that is sooner: tokio's `sleep_until` panics on an
/// instant near the end of `Instant`'s range (it rounds deadlines up), and a never-due
/// ticket (README, "One saturation rule") wakes at such an instant. The blocking
/// [`Waiter::wait`] and `DueStream` cap their sleeps alike.
fn capped(at: Instant) -> tokio::time::Instant {
    let now = Instant::now();
    tokio::time::Instant::from_std(at.min(after(now, MAX_SLEEP)))
}

/// `now + d` with `d` at most [`MAX_SLEEP`]; `now` itself at the very end of `Instant`'s
/// range.
fn after(now: Instant, d: Duration) -> Instant {
    now.checked_add(d.min(MAX_SLEEP)).unwrap_or(now)
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
