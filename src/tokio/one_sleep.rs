//! The one tokio `Sleep` that a [`DelayQueue`](super::DelayQueue) and a
//! [`DueStream`](super::DueStream) each wait on.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::time::{Instant, Sleep, sleep_until};

/// A `Sleep` made the first time it is armed (making one needs a runtime; its owner is made
/// without one), then only reset: one allocation for the owner's lifetime.
#[derive(Default)]
pub(super) struct OneSleep {
    sleep: Option<Pin<Box<Sleep>>>,
    /// The sleep was polled at its current deadline, with coop budget left, and answered
    /// `Pending`: the timer driver holds the waker of that poll and wakes it when the sleep
    /// ends. Cleared by a reset. A `Pending` for a spent budget does not count: tokio answers
    /// it before the sleep reaches the driver (and wakes that poll's waker once, to yield).
    registered: bool,
    /// `Sleep`s made so far: one at most (checked by the tests).
    #[cfg(test)]
    pub(super) made: usize,
}

impl OneSleep {
    /// Arms the sleep for `at` (resetting it, never re-allocating) and polls it.
    ///
    /// `same_waker`: `cx`'s waker wakes the same as the previous call's (the `DelayQueue`
    /// always polls with its waiter's one waker). Then a sleep already registered at `at`
    /// and not yet ended is not polled again: the driver holds an equivalent waker, and the
    /// answer is `Pending`. A sleep the driver has ended answers `Ready` without a poll.
    #[inline]
    pub(super) fn poll_at(
        &mut self,
        at: Instant,
        cx: &mut Context<'_>,
        same_waker: bool,
    ) -> Poll<()> {
        let sleep = match &mut self.sleep {
            Some(sleep) => sleep,
            none => {
                #[cfg(test)]
                {
                    self.made += 1;
                }
                let sleep = none.insert(Box::pin(sleep_until(at)));
                // Registered with the driver now, as a reset does: one armed for an instant
                // the driver has passed then ends at once, without the poll that a spent coop
                // budget would answer `Pending`.
                sleep.as_mut().reset(at);
                sleep
            }
        };
        if sleep.deadline() != at {
            sleep.as_mut().reset(at);
            self.registered = false;
        }
        if sleep.is_elapsed() {
            // The driver ended it (a reset to an instant it has passed ends it at once): no
            // poll needed, so none that a spent coop budget would turn into `Pending`.
            self.registered = false;
            return Poll::Ready(());
        }
        if same_waker && self.registered {
            return Poll::Pending;
        }
        // Read before the poll: the poll spends a unit of it.
        let budget = tokio::task::coop::has_budget_remaining();
        let poll = sleep.as_mut().poll(cx);
        self.registered = budget && poll.is_pending();
        poll
    }

    /// Whether the timer driver holds the waker of the last poll (see `registered`): the
    /// sleep was polled at its current deadline with coop budget left and has not ended
    /// since.
    #[inline]
    pub(super) fn registered(&self) -> bool {
        self.registered && !self.ended()
    }

    /// Whether the timer driver has ended the sleep (its deadline passed), or no sleep was
    /// ever armed.
    #[inline]
    pub(super) fn ended(&self) -> bool {
        self.sleep.as_ref().is_none_or(|s| s.is_elapsed())
    }

    /// The instant the sleep was armed for, once the timer driver has ended it; `None`
    /// while it runs, and before the first time it is armed.
    #[inline]
    pub(super) fn fired_at(&self) -> Option<Instant> {
        let sleep = self.sleep.as_ref()?;
        sleep.is_elapsed().then(|| sleep.deadline())
    }

    /// The instant the sleep was last armed for; `None` before the first time.
    #[inline]
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.sleep.as_ref().map(|s| s.deadline())
    }
}

/// As the `Option<Pin<Box<Sleep>>>` it wraps, so that its owners' `Debug` reads as before.
impl fmt::Debug for OneSleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.sleep.fmt(f)
    }
}
