//! The task waiting in `DelayQueue::poll_expired`, and when a change to the queue must wake
//! it.
//!
//! # Ground rules
//!
//! `poll_expired` is the only place that arms the queue's sleep, and it records the tick the
//! sleep was armed for (`wake_at`) beside the waker it registered. The sleep will wake the task
//! at `wake_at` at the latest; so a change to the queue must wake the task *now* exactly when
//! the task's answer can change before `wake_at`:
//!
//! | change | wakes the waiting task when |
//! |---|---|
//! | insert, reset, reset to the past | the new deadline is before `wake_at` (or nothing is armed) |
//! | remove, try_remove, clear | the queue became empty (the answer is now `Ready(None)`) |
//!
//! Anything else cannot make the answer change before `wake_at`. A change that moves the
//! earliest deadline *later* (removing or resetting the earliest entry) leaves the sleep
//! armed early: the task wakes at `wake_at`, finds nothing due, and sleeps again. That is a
//! spurious wakeup, never a lost one.
//!
//! These are the cases where tokio-util's `DelayQueue` lost wakeups over the years: a reset
//! to an earlier or past deadline, the removal of the last entry, and `clear`.
//!
//! # The sleep's waker
//!
//! The sleep is polled with [`Waiter::sleep_waker`], a waker of the queue's own that wakes
//! whichever task is registered here when the sleep ends, never with the task's waker. That
//! waker never changes, so a sleep registered with the timer driver need not be polled again
//! while it runs (see `OneSleep::poll_at`): a poll that finds nothing due only swaps the
//! task's waker here, under an uncontended lock, and not even that when the waker is the one
//! registered last (`Waiter::register_again`).

use std::sync::Arc;
use std::task::{Wake, Waker};

use crate::loom::{AtomicBool, Mutex, Ordering};

/// The task that last got `Pending` or `Ready(None)` from `poll_expired`.
#[derive(Debug)]
pub(super) struct Waiter {
    /// The waiting task's waker, shared with `sleep_waker`: taken by whichever wakes it first.
    slot: Arc<Slot>,
    /// Wakes the task in `slot`; the only waker the sleep is ever polled with.
    sleep_waker: Waker,
    /// The tick the armed sleep wakes the task at; `None` when no sleep will wake it (the
    /// queue was empty), so that any new deadline must.
    wake_at: Option<u64>,
    /// A task was registered and neither `forget` nor `wake` has run since (the sleep may
    /// have taken it meanwhile): `false` spares inserts into a queue nobody waits on the
    /// lock.
    waiting: bool,
    /// A clone of the waker last put in `slot`, kept while `waiting`: a poll whose waker
    /// `will_wake` it need not take the lock (see [`Waiter::register_again`]). Holding it
    /// keeps that waker's task alive, so `will_wake` cannot match a new task at its address.
    last: Option<Waker>,
}

/// Where the waiting task's waker lives.
#[derive(Debug, Default)]
struct Slot {
    waker: Mutex<Option<Waker>>,
    /// `waker` holds one: set under the lock when one is put there, cleared under it when
    /// one is taken, read without it by [`Waiter::register_again`].
    held: AtomicBool,
}

impl Slot {
    fn put(&self, waker: &Waker) {
        let mut slot = self.waker.lock();
        match &mut *slot {
            Some(old) if old.will_wake(waker) => {}
            slot => *slot = Some(waker.clone()),
        }
        self.held.store(true, Ordering::Release);
    }

    fn clear(&self) {
        let mut slot = self.waker.lock();
        self.held.store(false, Ordering::Release);
        *slot = None;
    }

    fn wake_task(&self) {
        // Take it under the lock, wake it outside.
        let waker = {
            let mut slot = self.waker.lock();
            self.held.store(false, Ordering::Release);
            slot.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    fn held(&self) -> bool {
        self.held.load(Ordering::Acquire)
    }
}

/// The sleep ended: wake the waiting task, if any.
impl Wake for Slot {
    fn wake(self: Arc<Self>) {
        self.wake_task();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.wake_task();
    }
}

impl Default for Waiter {
    fn default() -> Self {
        let slot = Arc::new(Slot::default());
        Waiter {
            sleep_waker: Waker::from(slot.clone()),
            slot,
            wake_at: None,
            waiting: false,
            last: None,
        }
    }
}

impl Waiter {
    /// `poll_expired` answers `Pending` (`wake_at` = the tick its sleep is armed for) or
    /// `Ready(None)` (`wake_at` = `None`): remember whom to wake.
    pub(super) fn register(&mut self, waker: &Waker, wake_at: Option<u64>) {
        self.slot.put(waker);
        match &self.last {
            Some(last) if last.will_wake(waker) => {}
            _ => self.last = Some(waker.clone()),
        }
        self.wake_at = wake_at;
        self.waiting = true;
    }

    /// `poll_expired` answers `Pending` again for the same armed tick: [`Waiter::register`]
    /// keeping `wake_at`, without the lock when the queue's sleep is registered with the timer
    /// driver (`sleep_registered`: `OneSleep::registered`, polled with coop budget left and
    /// not ended), the slot still holds a waker, and `waker` `will_wake` the one registered
    /// last.
    ///
    /// Why no wakeup is lost then: the slot holds the waker registered last unless a wake of
    /// the sleep's waker took it, and whatever takes it clears `held` under the lock before
    /// waking that waker. Two things wake the sleep's waker: the sleep's end, and tokio's
    /// coop after a poll of the sleep found the task's budget spent, a wake tokio may defer
    /// past later polls of the task. So a poll that reads `held` set either runs before the
    /// take, whose wake then reaches the same task as `waker` and makes it poll again, or
    /// (reading it cleared) puts the waker back under the lock. A sleep polled with the budget
    /// spent never reached the driver: `sleep_registered` is false until a later poll
    /// registers it with budget left.
    #[inline]
    pub(super) fn register_again(&mut self, waker: &Waker, sleep_registered: bool) {
        if self.waiting
            && sleep_registered
            && self.slot.held()
            && self.last.as_ref().is_some_and(|last| last.will_wake(waker))
        {
            return;
        }
        self.register(waker, self.wake_at);
    }

    #[inline]
    pub(super) fn sleep_waker(&self) -> &Waker {
        &self.sleep_waker
    }

    /// Whether a sleep is armed for the tick recorded by the last `register`, with no
    /// change since that could make an entry due before it: every pending deadline is at or
    /// after that tick (an earlier one would have woken the task and cleared it).
    #[inline]
    pub(super) fn armed(&self) -> bool {
        self.wake_at.is_some()
    }

    /// `poll_expired` answered `Ready(Some(_))`: the caller will poll again, nobody waits.
    #[inline]
    pub(super) fn forget(&mut self) {
        if std::mem::take(&mut self.waiting) {
            self.slot.clear();
            self.last = None;
        }
        self.wake_at = None;
    }

    /// A deadline at `tick` was inserted or reset: wake the waiting task if its sleep would
    /// wake it only later.
    #[inline]
    pub(super) fn deadline_added(&mut self, tick: u64) {
        match self.wake_at {
            // No sleep armed: only a task waiting on an empty queue is woken. Inserts into a
            // queue nobody polls (the common fill) stop at this one load.
            None if !self.waiting => {}
            Some(at) if tick >= at => {}
            _ => self.wake(),
        }
    }

    /// An entry due at `tick` was removed or reset (`empty`: the queue is now empty): wake
    /// the waiting task if its sleep was armed for that tick, so that it re-arms for the
    /// new earliest deadline at once instead of waking at the old one, and if the queue is
    /// empty, so that it sees `Ready(None)`.
    #[inline]
    pub(super) fn deadline_removed(&mut self, tick: u64, empty: bool) {
        if empty || self.wake_at == Some(tick) {
            self.wake();
        }
    }

    /// The queue's answer changed for certain (it became empty): wake the waiting task.
    #[inline]
    pub(super) fn wake(&mut self) {
        self.wake_at = None;
        if std::mem::take(&mut self.waiting) {
            self.last = None;
            self.slot.wake_task();
        }
    }

    #[cfg(test)]
    fn waiting(&self) -> bool {
        self.slot.waker.lock().is_some()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::test_tasks::counting;

    #[test]
    fn only_earlier_deadlines_wake_a_task_that_sleeps_until_wake_at() {
        let (count, waker) = counting();
        let mut w = Waiter::default();
        w.register(&waker, Some(100));
        w.deadline_added(100);
        w.deadline_added(500);
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            0,
            "its sleep wakes it at 100 anyway"
        );
        w.deadline_added(99);
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert!(!w.waiting(), "a wakeup is used once");
        w.deadline_added(1);
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "nobody is registered any more"
        );
    }

    #[test]
    fn any_deadline_wakes_a_task_that_saw_an_empty_queue() {
        let (count, waker) = counting();
        let mut w = Waiter::default();
        w.register(&waker, None);
        w.deadline_added(u64::MAX);
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn the_sleep_waker_wakes_whichever_task_registered_last_once() {
        let (first, first_waker) = counting();
        let (second, second_waker) = counting();
        let mut w = Waiter::default();
        let sleep_waker = w.sleep_waker().clone();
        w.register(&first_waker, Some(10));
        w.register_again(&second_waker, false);
        sleep_waker.wake_by_ref();
        sleep_waker.wake_by_ref();
        assert_eq!(
            first.0.load(Ordering::SeqCst),
            0,
            "replaced before the sleep ended"
        );
        assert_eq!(
            second.0.load(Ordering::SeqCst),
            1,
            "woken once: the waker is taken"
        );
        w.register(&first_waker, Some(10));
        w.forget();
        sleep_waker.wake_by_ref();
        assert_eq!(first.0.load(Ordering::SeqCst), 0, "forgotten: nobody waits");
    }

    #[test]
    fn forget_drops_the_waker() {
        let (count, waker) = counting();
        let mut w = Waiter::default();
        w.register(&waker, Some(10));
        w.forget();
        w.wake();
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
    }
}
