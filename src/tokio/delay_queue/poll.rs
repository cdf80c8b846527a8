//! `poll_expired` and the `Stream`: the only place that arms the queue's sleep. The rules for
//! waking a task that waits here are in `waiter.rs`.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::time::Instant;

use super::{DelayQueue, Expired, Key};
use crate::tokio::ticks;
use crate::wheel;

impl<T> DelayQueue<T> {
    /// Takes out the next expired entry, registering the current task to be woken when one
    /// may be due; `Ready(None)` when the queue is empty.
    ///
    /// - `Ready(Some(entry))`: an entry whose deadline has passed, in deadline order, equal
    ///   deadlines in insertion order.
    /// - `Pending`: entries wait, none is due. The task is woken when the earliest one is, or
    ///   sooner if an insert or reset brings a deadline earlier, when `remove`, `try_remove`
    ///   or `clear` empties the queue, and at once when the entry it waits for is reset or
    ///   removed (to re-arm for the new earliest deadline).
    /// - `Ready(None)`: the queue is empty. This does not end the queue: after a later insert,
    ///   polling yields again, and the task that saw `Ready(None)` is woken by that insert.
    ///
    /// "Due" means: the queue's sleep armed for the entry's deadline tick has ended (tokio's
    /// driver fires it up to 1 ms after that instant, as it does tokio-util's), or the clock
    /// (`Instant::now()`) is a whole tick past it. Two shortcuts never make an entry early:
    /// - after a `Ready(Some)`, the next call first takes what is due at the `now` that call
    ///   read, and reads the clock only when nothing is left there (a drain loop reads it
    ///   about twice, not once per entry);
    /// - between a `Pending` and the end of the sleep it armed, while the queue has not
    ///   changed in a way that wakes the task (see above) and the timer driver has not yet
    ///   ended that sleep, a call answers `Pending` without reading the clock, as
    ///   tokio-util's does. The driver ends the sleep at its deadline and wakes the task, so
    ///   an entry comes out at most one driver turn late.
    ///
    /// Only the task that polled last is woken. Cancellation safe: an entry is taken out only
    /// when it is returned. Cost: O(1) amortised per entry returned, O(levels) when nothing
    /// is due.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::future::poll_fn;
    /// use std::time::Duration;
    ///
    /// use tickwheel::tokio::DelayQueue;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let mut queue = DelayQueue::new();
    /// queue.insert("foo", Duration::from_millis(10));
    /// let expired = poll_fn(|cx| queue.poll_expired(cx)).await.unwrap();
    /// assert_eq!(expired.into_inner(), "foo");
    /// assert!(poll_fn(|cx| queue.poll_expired(cx)).await.is_none());
    /// # }
    /// ```
    pub fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<Option<Expired<T>>> {
        if let Some(expired) = self.drain_now.and_then(|now| self.take_due(now)) {
            // Still draining what was due at the last `Ready(Some)`'s `now`.
            return Poll::Ready(Some(expired));
        }
        if self.waiter.armed() {
            let ended = self.sleep.ended();
            if self.quiet_until.is_none() || !ended {
                // Nothing changed that could make an entry due before the armed tick, and
                // the timer driver has not ended the sleep armed for it: still `Pending`,
                // without reading the clock.
                self.waiter
                    .register_again(cx.waker(), self.sleep.registered());
                return self.wait(cx);
            }
        }
        // Twice at most: a sleep armed for a tick the timer driver has already passed ends
        // when polled, and the entry it was armed for is then due.
        for _ in 0..2 {
            let now = self.due_tick();
            self.drain_now = None;
            if let Some(expired) = self.take_due(now) {
                self.waiter.forget();
                self.drain_now = Some(now);
                return Poll::Ready(Some(expired));
            }
            let Some((_, next)) = self.peek.peek(&self.wheel) else {
                self.waiter.register(cx.waker(), None);
                return Poll::Ready(None);
            };
            // `take_due` found nothing due at `now`, so the earliest deadline lies ahead.
            debug_assert!(next > now, "next deadline {next} is ahead of now {now}");
            self.waiter.register(cx.waker(), Some(next));
            self.quiet_until = ticks::tick_instant(self.origin, next);
            if self.arm().is_pending() {
                return Poll::Pending;
            }
        }
        // The clock passed the armed tick after `now` was read. Poll again via the scheduler
        // rather than looping here.
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// The tick up to which entries count as due: the latest tick a sleep of the queue was
    /// armed for and the timer driver has ended, or the tick before the clock's, whichever
    /// is later (tick 0, the queue's creation, is always due).
    ///
    /// Why not the clock's tick itself: tokio's driver fires a sleep armed for an instant up
    /// to 1 ms after it (it counts whole milliseconds from its own start), and tokio-util
    /// yields an entry only once its sleep has fired. So an entry whose deadline the clock
    /// has just reached comes out when the sleep armed for it fires, as there; one the clock
    /// passed by a whole tick (the driver fires a sleep for it by then) comes out at once,
    /// also when no sleep was armed for it.
    fn due_tick(&mut self) -> u64 {
        if let Some(at) = self.sleep.fired_at() {
            self.fired = self.fired.max(ticks::now_tick(self.origin, at));
        }
        let clock = ticks::now_tick(self.origin, Instant::now());
        self.fired.max(clock.saturating_sub(1))
    }

    /// Arms the sleep for `quiet_until` and polls it: `Ready` when the driver has already
    /// passed that instant (the entry armed for is due now), `Pending` when the sleep will
    /// wake the registered task, or no instant is to be slept for.
    fn arm(&mut self) -> Poll<()> {
        let Some(at) = self.quiet_until else {
            return Poll::Pending;
        };
        let mut sleep_cx = Context::from_waker(self.waiter.sleep_waker());
        self.sleep.poll_at(at, &mut sleep_cx, true)
    }

    /// Polls the sleep armed for `quiet_until` (re-arming it if needed) and answers
    /// `Pending`. A tick past the end of `Instant`'s range is never reached: nothing to
    /// sleep for.
    fn wait(&mut self, cx: &mut Context<'_>) -> Poll<Option<Expired<T>>> {
        let Some(at) = self.quiet_until else {
            return Poll::Pending;
        };
        // The sleep wakes the registered task through the waiter, with a waker that never
        // changes: once registered, the sleep needs no further poll until it ends.
        let mut sleep_cx = Context::from_waker(self.waiter.sleep_waker());
        if self.sleep.poll_at(at, &mut sleep_cx, true).is_ready() {
            // The clock passed `at` after `now` was read. Poll again via the scheduler
            // rather than looping here: `now` will then be at least `at`.
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }

    /// The next entry due at tick `now`, if any: the cached `peek` answer when it is due (so
    /// that `peek` and `poll_expired` agree), else the wheel's next due timer.
    fn take_due(&mut self, now: u64) -> Option<Expired<T>> {
        let expired = match self.peek.take_due(&self.wheel, now) {
            Some(key) => {
                let deadline = self.wheel.deadline(key)?;
                let value = self.wheel.cancel(key)?;
                wheel::Expired {
                    key,
                    deadline,
                    value,
                }
            }
            None => self.wheel.poll(now)?,
        };
        self.peek.removed(expired.key);
        Some(self.expired(expired))
    }

    fn expired(&self, e: wheel::Expired<T>) -> Expired<T> {
        Expired {
            data: e.value,
            origin: self.origin,
            tick: e.deadline,
            key: Key(e.key),
        }
    }
}

impl<T> futures_core::Stream for DelayQueue<T> {
    type Item = Expired<T>;

    /// [`DelayQueue::poll_expired`]: `None` when the queue is empty, which does not end it
    /// for good (see there).
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Expired<T>>> {
        self.get_mut().poll_expired(cx)
    }
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;
    use tokio::time::Duration;

    use super::*;

    /// The quiet path (armed, sleep not ended: `Pending` without reading the clock) gives
    /// way as soon as a change could make an entry due before the armed tick, or the sleep
    /// ends.
    #[tokio::test(start_paused = true)]
    async fn quiet_polls_yield_to_earlier_inserts_and_to_the_sleep_ending() {
        let start = Instant::now();
        let mut q = DelayQueue::new();
        q.insert_at("late", start + Duration::from_millis(10));
        let pending = std::future::poll_fn(|cx| Poll::Ready(q.poll_expired(cx))).await;
        assert!(pending.is_pending(), "nothing due yet");
        let again = std::future::poll_fn(|cx| Poll::Ready(q.poll_expired(cx))).await;
        assert!(again.is_pending(), "quiet path: still nothing due");
        q.insert_at("past", start);
        assert_eq!(q.next().await.map(Expired::into_inner), Some("past"));
        q.insert_at("early", start + Duration::from_millis(5));
        assert_eq!(q.next().await.map(Expired::into_inner), Some("early"));
        assert_eq!(Instant::now(), start + Duration::from_millis(5));
        assert_eq!(q.next().await.map(Expired::into_inner), Some("late"));
        assert_eq!(Instant::now(), start + Duration::from_millis(10));
        assert!(q.next().await.is_none());
    }

    /// A drain keeps the `now` of its first `Ready(Some)` until nothing is due there, then
    /// reads the clock again: deadline order holds across the two, and an insert due before
    /// that `now` comes out within the drain.
    #[tokio::test(start_paused = true)]
    async fn a_drain_reads_the_clock_again_only_when_nothing_is_left() {
        let start = Instant::now();
        let ms = |n: u64| start + Duration::from_millis(n);
        let mut q = DelayQueue::new();
        for (name, at) in [("a", 1), ("b", 2), ("c", 3), ("late", 50)] {
            q.insert_at(name, ms(at));
        }
        tokio::time::advance(Duration::from_millis(2)).await;
        let mut poll = || {
            let waker = futures_util::task::noop_waker();
            let mut cx = Context::from_waker(&waker);
            match q.poll_expired(&mut cx) {
                Poll::Ready(Some(e)) => Some(e.into_inner()),
                _ => None,
            }
        };
        assert_eq!(poll(), Some("a"));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(poll(), Some("b"), "due at the drain's now (2 ms)");
        assert_eq!(
            poll(),
            Some("c"),
            "nothing left at 2 ms: the clock says 3 ms"
        );
        assert_eq!(poll(), None, "late is not due");
        q.insert_at("past", start);
        tokio::time::advance(Duration::from_millis(47)).await;
        assert_eq!(q.next().await.map(Expired::into_inner), Some("past"));
        assert_eq!(q.next().await.map(Expired::into_inner), Some("late"));
    }

    /// Counts `Sleep`s made rather than comparing addresses: a `Box<Sleep>` dropped and made
    /// again usually lands at the same address, so an address check could not fail.
    #[tokio::test(start_paused = true)]
    async fn one_sleep_is_reset_never_reallocated() {
        let start = Instant::now();
        let mut q = DelayQueue::new();
        for i in 0..100u64 {
            // Deadlines in every level from 0 to 3, out of order.
            q.insert_at(i, start + Duration::from_millis(1 + (i * 7_919) % 600_000));
        }
        assert_eq!(q.sleep.made, 0, "no sleep before the first poll");
        let mut made = Vec::new();
        while let Some(e) = q.next().await {
            assert_eq!(Instant::now(), e.deadline(), "out exactly at its deadline");
            assert!(q.sleep.deadline().is_some(), "a sleep was armed");
            made.push(q.sleep.made);
        }
        assert_eq!(
            made, [1; 100],
            "one sleep, made at the first wait, then reset"
        );
    }
}
