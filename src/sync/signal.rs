//! Waking pollers when the earliest deadline moves earlier, without a lost wakeup.
//!
//! A poller (the thread dispatcher, or an async task) computes the earliest deadline `E`,
//! then sleeps until `E`. A timer scheduled *after* the poller read its shard but *before* it
//! sleeps, with a deadline earlier than `E`, must wake it. Producers must not take a global
//! lock for that on every schedule, so the signal keeps an atomic **watermark**:
//!
//! > a producer that adds a deadline tick `d` calls [`Signal::notify`] iff `d < watermark`.
//!
//! The poller's protocol, and why it loses nothing:
//!
//! ```text
//!  poller                                   producer
//!  ------                                   --------
//!  1 arm: under the signal lock, read the   a lock shard, insert d, unlock shard
//!    epoch e0, watermark := MAX             b if d < watermark: notify
//!  2 read every shard (lock/unlock each):      (signal lock: epoch += 1,
//!    E = earliest tick                          watermark := 0, take wakers;
//!  3 watermark := min(watermark, E)            then wake wakers, notify condvar)
//!  4 under the signal lock: sleep until E
//!    unless epoch != e0
//! ```
//!
//! If step 2 read the producer's shard after (a), it saw `d` and `E ≤ d`. Otherwise (a)
//! came after the poller's read of that shard, hence after its step 1, so (b) loads `MAX`
//! (notifies), or the poller's own `E` or something lower (notifies iff `d` is earlier than
//! that), or 0 from a `notify` — which bumped the epoch after `e0`, so the poller does not
//! sleep (or is woken). The watermark is only ever raised to `MAX` by an arm and reset to 0
//! by a notify that wakes everyone; otherwise it only goes down (`fetch_min`). With several
//! pollers on one scheduler, the watermark is the lowest armed target, so for each new
//! deadline at least one poller — the one waiting for the earliest target — wakes in time.
//!
//! `notify` sets the watermark to 0 because every armed poller is woken by it (the epoch
//! moved, the wakers are taken): nobody is left to notify until someone arms again.
//! The epoch protocol is exhaustively model-checked in `model/wake.rs` (`wake_protocol_*`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::Waker;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

/// See the module doc. Lock order: the signal lock is a leaf, never held together with a
/// shard lock.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    state: Mutex<SignalState>,
    cond: Condvar,
    /// Producers notify for a deadline tick strictly below this. 0: nobody is armed.
    watermark: AtomicU64,
}

#[derive(Debug, Default)]
struct SignalState {
    /// Bumped by every `notify`; a poller sleeps only if it has not moved since it armed.
    epoch: u64,
    /// Registered async pollers, at most one per task (`will_wake`); taken by `notify`.
    wakers: Vec<Waker>,
}

impl Signal {
    /// A deadline at `tick` was added (schedule, reschedule, or a dropped batch putting timers
    /// back): wake the pollers if it is earlier than what they wait for. One atomic load
    /// when nothing needs waking. Call with no shard lock held.
    pub(crate) fn deadline_added(&self, tick: u64) {
        if tick < self.watermark.load(Ordering::SeqCst) {
            self.notify();
        }
    }

    /// Wakes every poller: bumps the epoch, wakes and forgets the wakers, wakes the
    /// condvar sleepers. Nobody stays armed, so the watermark drops to 0.
    pub(crate) fn notify(&self) {
        let wakers = {
            let mut state = self.state.lock();
            state.epoch = state.epoch.wrapping_add(1);
            self.watermark.store(0, Ordering::SeqCst);
            std::mem::take(&mut state.wakers)
        };
        self.cond.notify_all();
        for waker in wakers {
            waker.wake();
        }
    }

    /// Step 1 of the protocol: from now on every added deadline notifies, until
    /// [`lower`](Self::lower) narrows it. Returns the epoch to hand to
    /// [`wait`](Self::wait).
    pub(crate) fn arm(&self) -> u64 {
        let state = self.state.lock();
        self.watermark.store(u64::MAX, Ordering::SeqCst);
        state.epoch
    }

    /// [`arm`](Self::arm) for an async poller: also stores its waker, replacing a stored
    /// waker that [`will_wake`](Waker::will_wake) the same task.
    pub(crate) fn arm_waker(&self, waker: &Waker) -> u64 {
        let mut state = self.state.lock();
        match state.wakers.iter_mut().find(|w| w.will_wake(waker)) {
            Some(old) => old.clone_from(waker),
            None => state.wakers.push(waker.clone()),
        }
        self.watermark.store(u64::MAX, Ordering::SeqCst);
        state.epoch
    }

    /// An async poller goes away (a `DueStream` is dropped): forgets the stored waker that
    /// [`will_wake`](Waker::will_wake) the same task as `waker`, so wakers of dropped
    /// pollers do not pile up until the next notify. Returns whether one was stored.
    ///
    /// Wakers are stored per task, not per poller: another poller in the same task may be
    /// relying on that registration. So a forgotten waker is woken once — a spurious wakeup
    /// at worst, after which any poller still in that task arms again. Never lost.
    pub(crate) fn forget_waker(&self, waker: &Waker) -> bool {
        let forgotten = {
            let mut state = self.state.lock();
            let index = state.wakers.iter().position(|w| w.will_wake(waker));
            index.map(|i| state.wakers.swap_remove(i))
        };
        match forgotten {
            Some(stored) => {
                stored.wake();
                true
            }
            None => false,
        }
    }

    /// Wakers stored now.
    #[cfg(test)]
    pub(crate) fn waker_count(&self) -> usize {
        self.state.lock().wakers.len()
    }

    /// Step 3: the armed poller will sleep until tick `target` (`None`: no timer, no
    /// deadline), so only deadlines before it need a notify.
    pub(crate) fn lower(&self, target: Option<u64>) {
        if let Some(target) = target {
            self.watermark.fetch_min(target, Ordering::SeqCst);
        }
    }

    /// Whether a notify happened since the arm that returned `epoch`.
    #[cfg(test)]
    pub(crate) fn moved_since(&self, epoch: u64) -> bool {
        self.state.lock().epoch != epoch
    }

    /// Step 4 for a thread: sleeps until `deadline` (forever if `None`), unless a notify
    /// happened since the arm that returned `epoch` or `stop` is set; returns early when
    /// notified. Spurious returns are possible; callers loop.
    pub(crate) fn wait(&self, epoch: u64, deadline: Option<Instant>, stop: &AtomicBool) {
        let mut state = self.state.lock();
        if state.epoch != epoch || stop.load(Ordering::SeqCst) {
            return;
        }
        match deadline {
            Some(at) => {
                self.cond.wait_until(&mut state, at);
            }
            None => self.cond.wait(&mut state),
        }
    }

    #[cfg(test)]
    pub(crate) fn epoch(&self) -> u64 {
        self.state.lock().epoch
    }

    #[cfg(test)]
    pub(crate) fn watermark(&self) -> u64 {
        self.watermark.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    use super::*;

    #[derive(Default)]
    struct CountWaker(AtomicUsize);

    impl Wake for CountWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn watermark_follows_arm_lower_notify() {
        let s = Signal::default();
        assert_eq!(s.watermark(), 0, "nobody armed: nothing notifies");
        s.deadline_added(0);
        assert_eq!(s.epoch(), 0);
        let e = s.arm();
        assert_eq!(
            s.watermark(),
            u64::MAX,
            "armed, no target yet: everything notifies"
        );
        s.lower(Some(50));
        s.lower(None);
        assert_eq!(s.watermark(), 50);
        s.deadline_added(50);
        assert_eq!(s.epoch(), e, "a deadline at the target needs no wakeup");
        s.deadline_added(49);
        assert_eq!(s.epoch(), e + 1, "an earlier deadline notifies");
        assert_eq!(s.watermark(), 0, "everyone was woken: nobody is armed");
    }

    #[test]
    fn wakers_are_replaced_per_task_and_taken_by_notify() {
        let s = Signal::default();
        let (a, b) = (
            Arc::new(CountWaker::default()),
            Arc::new(CountWaker::default()),
        );
        let (wa, wb) = (Waker::from(Arc::clone(&a)), Waker::from(Arc::clone(&b)));
        s.arm_waker(&wa);
        s.arm_waker(&wa.clone());
        s.arm_waker(&wb);
        assert_eq!(s.state.lock().wakers.len(), 2, "one waker per task");
        s.deadline_added(7);
        assert_eq!(
            (a.0.load(Ordering::SeqCst), b.0.load(Ordering::SeqCst)),
            (1, 1)
        );
        s.notify();
        assert_eq!(a.0.load(Ordering::SeqCst), 1, "a woken waker is forgotten");
    }

    #[test]
    fn forget_waker_removes_that_task_only_and_wakes_it_once() {
        let s = Signal::default();
        let (a, b) = (
            Arc::new(CountWaker::default()),
            Arc::new(CountWaker::default()),
        );
        let (wa, wb) = (Waker::from(Arc::clone(&a)), Waker::from(Arc::clone(&b)));
        s.arm_waker(&wa);
        s.arm_waker(&wb);
        assert!(s.forget_waker(&wa.clone()), "matched by will_wake");
        assert_eq!(s.waker_count(), 1);
        assert_eq!(
            (a.0.load(Ordering::SeqCst), b.0.load(Ordering::SeqCst)),
            (1, 0),
            "a shared registration is not lost silently"
        );
        assert!(!s.forget_waker(&wa), "already gone");
        assert_eq!(a.0.load(Ordering::SeqCst), 1);
        s.notify();
        assert_eq!(
            b.0.load(Ordering::SeqCst),
            1,
            "the other task stays registered"
        );
    }

    #[test]
    fn wait_returns_at_once_after_a_notify_or_stop() {
        let s = Signal::default();
        let stop = AtomicBool::new(false);
        let e = s.arm();
        s.notify();
        s.wait(e, None, &stop); // would block forever if the epoch check were missing
        let e = s.arm();
        stop.store(true, Ordering::SeqCst);
        s.wait(e, None, &stop);
    }
}
