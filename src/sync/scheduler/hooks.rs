//! The scheduler's crate-internal hooks for the async layer (`src/tokio`): its tick clock
//! and the wake-up signal's task wakers.

use std::hash::Hash;
use std::task::Waker;
use std::time::Instant;

use super::Scheduler;
use crate::sync::signal::PollerId;

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> Scheduler<Q, K, T> {
    /// The instant of tick 0. For the async layer, which shares the scheduler's clock.
    #[allow(dead_code)] // used by src/tokio (feature "tokio")
    pub(crate) fn clock_origin(&self) -> Instant {
        self.inner.clock.origin()
    }

    /// The tick a deadline at `at` files under (rounded up; see `TickClock::deadline_tick`).
    #[allow(dead_code)] // used by src/tokio (feature "tokio")
    pub(crate) fn deadline_tick(&self, at: Instant) -> u64 {
        self.inner.clock.deadline_tick(at)
    }

    /// The tick `now` falls in (rounded down); `None` before the origin.
    #[allow(dead_code)] // used by src/tokio (feature "tokio")
    pub(crate) fn now_tick(&self, now: Instant) -> Option<u64> {
        self.inner.clock.now_tick(now)
    }

    /// The instant tick `tick` starts at (saturating far in the future).
    pub(crate) fn tick_instant(&self, tick: u64) -> Instant {
        self.inner.clock.instant_saturating(tick)
    }

    /// A new async poller id, for [`arm_waker`](Self::arm_waker) and
    /// [`forget_waker`](Self::forget_waker): each `DueStream` takes one.
    #[allow(dead_code)] // used by src/tokio (feature "tokio")
    pub(crate) fn new_poller(&self) -> PollerId {
        self.inner.signal.new_poller()
    }

    /// Registers an async poller's waker under its id, replacing the one it registered
    /// before. It is woken (once; register again on every poll) by the next `schedule`,
    /// `reschedule` or dropped `DueBatch` that may make the earliest deadline earlier —
    /// since this call knows no target, that is any of them — and by `notify`s such as a
    /// dispatcher shutdown. Register *before* calling `pop_due`/`next_deadline`, so nothing
    /// added in between is missed. [`arm_waker`](Self::arm_waker) is the precise variant.
    #[allow(dead_code)] // used by src/tokio (feature "tokio")
    pub(crate) fn register_waker(&self, poller: PollerId, waker: &Waker) {
        self.inner.signal.arm_waker(poller, waker);
    }

    /// Registers the waker like [`register_waker`](Self::register_waker), computes the
    /// earliest deadline, and returns it: the poller sleeps until then (forever on `None`)
    /// and is woken only by a deadline earlier than that. No lost wakeup: see `signal.rs`.
    #[allow(dead_code)] // used by src/tokio (feature "tokio")
    pub(crate) fn arm_waker(&self, poller: PollerId, waker: &Waker) -> Option<Instant> {
        self.inner.signal.arm_waker(poller, waker);
        let target = self.earliest_tick();
        self.inner.signal.lower(target);
        target.map(|tick| self.tick_instant(tick))
    }

    /// An async poller goes away: forgets the waker it registered under `poller`, so a
    /// dropped poller's waker does not stay stored until the next notify. Wakes nobody (the
    /// registration was that poller's alone). Returns whether one was stored.
    #[allow(dead_code)] // used by src/tokio (feature "tokio")
    pub(crate) fn forget_waker(&self, poller: PollerId) -> bool {
        self.inner.signal.forget_waker(poller)
    }

    /// Wakers registered by async pollers and not yet woken or forgotten.
    #[cfg(all(test, feature = "tokio"))]
    pub(crate) fn waker_count(&self) -> usize {
        self.inner.signal.waker_count()
    }
}
