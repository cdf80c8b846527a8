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
//! The epoch protocol is exhaustively checked by the interleaving harness in `tests/interleave/wake.rs` (`wake_protocol_*`),
//! and run on real threads under loom below (`loom_*`: a poller going to sleep, a stream
//! replacing its waker).

use std::task::Waker;
use std::time::Instant;

use crate::loom::{AtomicBool, AtomicU64, Condvar, Mutex, Ordering};

/// See the module doc. Lock order: the signal lock is a leaf, never held together with a
/// shard lock.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    state: Mutex<SignalState>,
    cond: Condvar,
    /// Producers notify for a deadline tick strictly below this. 0: nobody is armed.
    watermark: AtomicU64,
    /// The next [`PollerId`] to hand out.
    next_poller: AtomicU64,
}

#[derive(Debug, Default)]
struct SignalState {
    /// Bumped by every `notify`; a poller sleeps only if it has not moved since it armed.
    epoch: u64,
    /// The wakers of armed async pollers, at most one per [`PollerId`]; taken by `notify`.
    wakers: Vec<(PollerId, Waker)>,
}

/// Names one async poller (a `DueStream`) in the signal: its waker is stored under this id,
/// replaced when it arms again and removed when it goes away.
///
/// Registrations are per poller, not per task, because the only way to tell two wakers of
/// one task apart is [`Waker::will_wake`], and that may answer `false` for the same task:
/// std allows it, and tokio's waker does it in release builds with several codegen units
/// (a clone's vtable is another copy of the same vtable). Matched by `will_wake`, a poller
/// took its own previous waker for another task's, forgot it and woke it — its own task,
/// on every wait: a busy spin. An id never mistakes one poller for another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PollerId(u64);

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
        for (_, waker) in wakers {
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

    /// A new poller id, never handed out before by this signal (a `u64` counter: it would
    /// take centuries of making a stream every nanosecond to wrap).
    pub(crate) fn new_poller(&self) -> PollerId {
        PollerId(self.next_poller.fetch_add(1, Ordering::Relaxed))
    }

    /// [`arm`](Self::arm) for an async poller: also stores its waker under `poller`,
    /// replacing the one that poller stored before (the clone is skipped when
    /// [`will_wake`](Waker::will_wake) says they are the same; a `false` there costs a
    /// clone, nothing else). Nobody is woken.
    pub(crate) fn arm_waker(&self, poller: PollerId, waker: &Waker) -> u64 {
        let mut state = self.state.lock();
        match state.wakers.iter_mut().find(|(id, _)| *id == poller) {
            Some((_, old)) => old.clone_from(waker),
            None => state.wakers.push((poller, waker.clone())),
        }
        self.watermark.store(u64::MAX, Ordering::SeqCst);
        state.epoch
    }

    /// An async poller goes away (a `DueStream` is dropped): forgets the waker stored
    /// under `poller`, so wakers of dropped pollers do not pile up until the next notify.
    /// Returns whether one was stored. Nobody is woken: the registration was that poller's
    /// alone (see [`PollerId`]). The waker is dropped after the signal lock.
    pub(crate) fn forget_waker(&self, poller: PollerId) -> bool {
        let forgotten = {
            let mut state = self.state.lock();
            let index = state.wakers.iter().position(|(id, _)| *id == poller);
            index.map(|i| state.wakers.swap_remove(i))
        };
        forgotten.is_some()
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

    use super::*;
    use crate::test_tasks::{CountWake, counting};

    /// A signal with two pollers, each with a counting waker (not armed yet).
    fn two_pollers() -> (Signal, [(Arc<CountWake>, Waker, PollerId); 2]) {
        let s = Signal::default();
        let each = [(); 2].map(|()| {
            let (count, waker) = counting();
            (count, waker, s.new_poller())
        });
        (s, each)
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
    fn wakers_are_replaced_per_poller_and_taken_by_notify() {
        let (s, [(a, wa, p), (b, wb, q)]) = two_pollers();
        assert_ne!(p, q);
        s.arm_waker(p, &wa);
        s.arm_waker(p, &wa.clone());
        s.arm_waker(q, &wb);
        assert_eq!(s.waker_count(), 2, "one waker per poller");
        // A waker that `will_wake` does not match (another `Arc`, same task behind it)
        // replaces the poller's own; it neither wakes the old one nor piles up.
        let (a2, wa2) = counting();
        s.arm_waker(p, &wa2);
        assert_eq!(s.waker_count(), 2);
        assert_eq!(a.0.load(Ordering::SeqCst), 0, "replaced, not woken");
        s.deadline_added(7);
        assert_eq!(
            (
                a.0.load(Ordering::SeqCst),
                a2.0.load(Ordering::SeqCst),
                b.0.load(Ordering::SeqCst)
            ),
            (0, 1, 1)
        );
        s.notify();
        assert_eq!(a2.0.load(Ordering::SeqCst), 1, "a woken waker is forgotten");
    }

    #[test]
    fn forget_waker_removes_that_poller_only_and_wakes_nobody() {
        let (s, [(a, wa, p), (b, wb, q)]) = two_pollers();
        s.arm_waker(p, &wa);
        s.arm_waker(q, &wb);
        assert!(s.forget_waker(p));
        assert_eq!(s.waker_count(), 1);
        assert_eq!(
            (a.0.load(Ordering::SeqCst), b.0.load(Ordering::SeqCst)),
            (0, 0),
            "the registration was p's alone: nobody to wake"
        );
        assert!(!s.forget_waker(p), "already gone");
        s.notify();
        assert_eq!(
            (a.0.load(Ordering::SeqCst), b.0.load(Ordering::SeqCst)),
            (0, 1),
            "the other poller stays registered"
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
