//! [`Signal`]: Cassandra's signal, which lets at most one thread run a queue's grant passes.

use std::sync::atomic::{AtomicU8, Ordering};

use super::each::while_unwinding;

/// No grant pass is running.
const IDLE: u8 = 0;
/// A thread is running grant passes.
const RUNNING: u8 = 1;
/// A thread is running grant passes, and was asked for one more after the current one.
const AGAIN: u8 = 2;

/// At most one thread runs passes. A signal that finds one running asks it for one more
/// pass (`RUNNING → AGAIN`) and returns at once. The runner leaves only by
/// `RUNNING → IDLE`, which fails after such a request, so every signal is followed by a
/// pass that starts after it: none is lost.
#[derive(Debug, Default)]
pub(super) struct Signal(AtomicU8);

impl Signal {
    /// Runs `pass` until no further pass is owed, unless another thread is running passes
    /// (then that thread owes one more, and this returns at once). A pass that panics leaves
    /// the signal free: the passes owed still run while the panic unwinds (a panic of theirs
    /// caught and dropped, as in `each.rs`), and the state ends `IDLE`.
    pub(super) fn signal(&self, pass: impl Fn()) {
        let mut seen = self.0.load(Ordering::Acquire);
        loop {
            let (to, run) = match seen {
                IDLE => (RUNNING, true),
                RUNNING => (AGAIN, false),
                _ => return,
            };
            match self
                .0
                .compare_exchange(seen, to, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) if run => break,
                Ok(_) => return,
                Err(now) => seen = now,
            }
        }
        let running = Running { signal: self, pass };
        while !running.pass() {}
        // Left `IDLE`: the guard has nothing to finish.
        std::mem::forget(running);
    }

    /// `RUNNING → IDLE`; else (another pass was asked for: `AGAIN`) back to `RUNNING` and
    /// `false`.
    fn stop_running(&self) -> bool {
        if self
            .0
            .compare_exchange(RUNNING, IDLE, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            return true;
        }
        self.0.store(RUNNING, Ordering::Release);
        false
    }
}

/// The thread running grant passes.
struct Running<'a, F: Fn()> {
    signal: &'a Signal,
    pass: F,
}

impl<F: Fn()> Running<'_, F> {
    /// One pass; `true` if the state is `IDLE` after it, `false` if another pass is owed.
    fn pass(&self) -> bool {
        (self.pass)();
        self.signal.stop_running()
    }
}

impl<F: Fn()> Drop for Running<'_, F> {
    /// Reached only while a pass's panic (a waker it woke) unwinds; the passes owed still run
    /// and the state is left `IDLE`. Else every later signal would find a pass "running" and
    /// return: the queue would neither expire nor grant through the signal again.
    fn drop(&mut self) {
        while !self.signal.stop_running() {
            while_unwinding(|| (self.pass)());
        }
    }
}
