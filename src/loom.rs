//! The synchronization primitives of the scheduler, swappable for loom's.
//!
//! The scheduler's lock-free parts and the locks around them import their atomics, mutexes
//! and condition variable from here. They never import them from `std::sync` or
//! `parking_lot` directly. A normal build re-exports `std`'s atomics and `parking_lot`'s
//! locks, so this module compiles away. Under `RUSTFLAGS="--cfg loom"` they are [loom]'s.
//! Loom records every atomic access and lock. Its model checker can then run a test under
//! every interleaving and every outcome the memory model allows. See `.ci/loom.sh`, and the
//! tests named `loom_*`.
//!
//! Two shapes differ. [`Mutex`] and [`Condvar`] adapt loom's to `parking_lot`'s, the one the
//! crate is written against:
//!
//! - `lock()` returns the guard itself (no poisoning);
//! - `Condvar::wait` takes `&mut MutexGuard`.
//!
//! Loom has no timed wait: `wait_until` a deadline not yet passed waits for a notification.
//! So a model in which a poller would only wake at its (far) deadline deadlocks. That is how
//! a lost wake-up shows.
//!
//! Not swapped:
//!
//! - `Arc` and `Weak` stay `std`'s. Loom's `Arc` has no `Weak` nor `new_cyclic`, and the
//!   scheduler uses both. The models check no reference count.
//! - `spawn_dispatcher` starts a `std` thread, because loom's handles cannot say whether the
//!   thread finished. The models run the dispatcher's loop in a loom thread of their own.
//!
//! # What the models are known to catch
//!
//! Each model was run against a planted fault, and failed:
//!
//! | model | planted fault | loom's report |
//! |---|---|---|
//! | `loom_earlier_schedule_is_never_missed_by_a_later_poll` | a shard's due bound stored after its lock is released | timer 3 missed: a stale bound published last |
//! | `loom_done_due_racing_a_settle_and_a_schedule_of_its_id` | a settle copies the done list and clears it in two critical sections | the id stays in flight for ever |
//! | `loom_poller_going_to_sleep_is_woken_by_an_earlier_schedule` | `Signal::wait` checks the epoch and sleeps in two critical sections | deadlock: a lost wake-up |
//! | `loom_stream_replacing_its_waker_racing_a_wake` | `arm_waker` reads the epoch and replaces the waker in two critical sections | the replaced waker woken, the new one not |
//! | `loom_shutdown_racing_a_schedule` | the stop flag stored after the notify | deadlock: the dispatcher sleeps through its stop |
//! | `loom_end_racing_a_pop_at_the_limit` | a merge that found no slot counts itself parked after its second try | timer 2 parked for good: a lost wake-up |
//!
//! One experiment weakened several orderings to `Relaxed` at once: those of the due bound
//! (`Release`/`Acquire`), the watermark and the stop flag (`SeqCst`). The first five models
//! still passed. In these protocols, every lock-free read that decides anything is ordered
//! by a lock taken on both sides. The shard lock orders the bound. The signal lock orders
//! the watermark, the epoch and the flag. The stronger orderings are kept as they were. The
//! models show them not needed here, but not harmful, and each step's comment relies on them
//! on its own.
//!
//! [loom]: https://docs.rs/loom

#[cfg(not(loom))]
pub(crate) use parking_lot::{Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use portable_atomic::AtomicU128;
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

#[cfg(loom)]
pub(crate) use ::loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(loom)]
pub(crate) use mocked::{AtomicU128, Condvar, Mutex, MutexGuard};

/// loom's lock and condition variable in `parking_lot`'s shape.
#[cfg(loom)]
mod mocked {
    use std::ops::{Deref, DerefMut};
    use std::time::Instant;

    /// `parking_lot::Mutex` over `::loom::sync::Mutex`.
    #[derive(Debug, Default)]
    pub(crate) struct Mutex<T>(::loom::sync::Mutex<T>);

    /// The guard of [`Mutex`]. `None` only while [`Condvar::wait`] has it.
    #[derive(Debug)]
    pub(crate) struct MutexGuard<'a, T>(Option<::loom::sync::MutexGuard<'a, T>>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Mutex(::loom::sync::Mutex::new(value))
        }

        /// Nothing poisons in the crate's use: no user code panics under a lock in the
        /// models. So a poisoned lock is a failed model.
        #[track_caller]
        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            MutexGuard(Some(self.0.lock().expect("a model panicked under a lock")))
        }
    }

    impl<T> Deref for MutexGuard<'_, T> {
        type Target = T;

        fn deref(&self) -> &T {
            self.0.as_deref().expect("the guard is back from the wait")
        }
    }

    impl<T> DerefMut for MutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            self.0
                .as_deref_mut()
                .expect("the guard is back from the wait")
        }
    }

    /// `portable_atomic::AtomicU128`'s operations the crate uses, over a loom mutex. Loom
    /// has no 128-bit atomic. Every operation is one step of the model, as an atomic's.
    #[derive(Debug)]
    pub(crate) struct AtomicU128(::loom::sync::Mutex<u128>);

    impl AtomicU128 {
        pub(crate) fn new(value: u128) -> Self {
            AtomicU128(::loom::sync::Mutex::new(value))
        }

        fn cell(&self) -> ::loom::sync::MutexGuard<'_, u128> {
            self.0.lock().expect("a model panicked under a lock")
        }

        pub(crate) fn load(&self, _: super::Ordering) -> u128 {
            *self.cell()
        }

        pub(crate) fn store(&self, value: u128, _: super::Ordering) {
            *self.cell() = value;
        }

        pub(crate) fn compare_exchange(
            &self,
            current: u128,
            new: u128,
            _: super::Ordering,
            _: super::Ordering,
        ) -> Result<u128, u128> {
            let mut cell = self.cell();
            if *cell != current {
                return Err(*cell);
            }
            *cell = new;
            Ok(current)
        }

        pub(crate) fn fetch_min(&self, value: u128, _: super::Ordering) -> u128 {
            let mut cell = self.cell();
            let old = *cell;
            *cell = old.min(value);
            old
        }

        pub(crate) fn fetch_max(&self, value: u128, _: super::Ordering) -> u128 {
            let mut cell = self.cell();
            let old = *cell;
            *cell = old.max(value);
            old
        }
    }

    /// `parking_lot::Condvar` over `::loom::sync::Condvar`.
    #[derive(Debug, Default)]
    pub(crate) struct Condvar(::loom::sync::Condvar);

    impl Condvar {
        pub(crate) fn wait<T>(&self, guard: &mut MutexGuard<'_, T>) {
            let inner = guard.0.take().expect("the guard is held");
            guard.0 = Some(self.0.wait(inner).expect("a model panicked under a lock"));
        }

        /// Loom has no clock. Returns at once if `deadline` has passed (the timeout a real
        /// wait would take). Otherwise waits for a notification, however near `deadline` is.
        pub(crate) fn wait_until<T>(&self, guard: &mut MutexGuard<'_, T>, deadline: Instant) {
            if Instant::now() < deadline {
                self.wait(guard);
            }
        }

        pub(crate) fn notify_all(&self) {
            self.0.notify_all();
        }
    }
}

/// The preemption bound of a model run when `LOOM_MAX_PREEMPTIONS` is not set. Every model
/// here finishes in well under a minute with it. Bugs of this kind need one or two.
#[cfg(all(test, loom))]
const DEFAULT_PREEMPTIONS: usize = 3;

/// Runs `f` under every interleaving loom explores, with at most `LOOM_MAX_PREEMPTIONS`
/// preemptions per run ([`DEFAULT_PREEMPTIONS`] if unset).
#[cfg(all(test, loom))]
pub(crate) fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = ::loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(DEFAULT_PREEMPTIONS);
    }
    builder.check(f);
}

#[cfg(all(test, loom))]
pub(crate) use ::loom::thread;

/// Between a `SeqCst` write and a `SeqCst` read of another location. It serves a handshake
/// that relies on their single total order. (Dekker: two threads each write one location
/// and then read the other's; one of them reads the other's write.) C11 gives that to
/// `SeqCst` accesses, so a normal build needs nothing here (this compiles away). Loom treats
/// `SeqCst` accesses as `AcqRel` (its README, "Unsupported features"; loom #180). That lets
/// both reads miss, and loom reports a lost wake-up that cannot happen. A `SeqCst` fence,
/// which loom does model, restores the order under `--cfg loom`.
#[inline(always)]
pub(crate) fn dekker_fence() {
    #[cfg(loom)]
    ::loom::sync::atomic::fence(Ordering::SeqCst);
}
