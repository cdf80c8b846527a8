//! What an [`AdmissionQueue`](super::AdmissionQueue) call does once its lock is released:
//! wake the waiters it resolved and tell the queues short of the global limit, all of it
//! even if a waker panics (see `each.rs`).

use std::task::Waker;
use std::thread::Thread;
use std::vec;

use super::each::while_unwinding;
use super::limit::{Told, tell_one};

/// Who to wake when a request resolves: a thread blocked in `wait`, or a task.
#[derive(Debug)]
pub(super) enum Notify {
    Thread(Thread),
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    Task(Waker),
}

impl Notify {
    pub(super) fn notify(self) {
        match self {
            Notify::Thread(t) => t.unpark(),
            Notify::Task(w) => w.wake(),
        }
    }
}

/// What to do once the queue lock is released: wake the waiters resolved, tell the queues
/// short of the global limit. All of it runs even if a waker panics: what a panic in
/// [`run`](Finish::run) leaves, its `drop` runs while that panic unwinds (see `each.rs`).
/// Plain loops rather than `each` over one chained iterator: that chain cost about 30 ns a
/// waiter in a batch of wake-ups.
#[must_use]
pub(super) struct Finish {
    /// Before the rest: the waker of the request this call ended itself.
    pub(super) first: Option<First>,
    /// The first waiter resolved, kept apart from the rest: most calls resolve at most one,
    /// and then make no allocation for it.
    one: Option<Notify>,
    notify: vec::IntoIter<Notify>,
    tell: vec::IntoIter<Told>,
}

/// The waker of the request a call ended itself.
pub(super) enum First {
    /// Cancelled by [`AdmissionQueue::cancel`](super::AdmissionQueue::cancel): woken.
    Wake(Notify),
    /// Cancelled by its own waiter's drop: dropped unwoken.
    Drop(Notify),
}

impl First {
    fn run(self) {
        match self {
            First::Wake(notify) => notify.notify(),
            First::Drop(notify) => drop(notify),
        }
    }
}

impl Finish {
    /// The waiters to wake, in order (`one` and then `notify`), and then the queues to tell.
    pub(super) fn new(one: Option<Notify>, notify: Vec<Notify>, tell: Vec<Told>) -> Self {
        Finish {
            first: None,
            one,
            notify: notify.into_iter(),
            tell: tell.into_iter(),
        }
    }

    /// Call with no lock held. A panic of a waker goes on to the caller once the rest ran.
    /// Called while a panic unwinds (a permit dropped by it), it leaves everything to `drop`,
    /// which catches: a waker's panic escaping then would abort the process.
    pub(super) fn run(mut self) {
        if std::thread::panicking() {
            return;
        }
        if let Some(first) = self.first.take() {
            first.run();
        }
        if let Some(one) = self.one.take() {
            one.notify();
        }
        for notify in self.notify.by_ref() {
            notify.notify();
        }
        for queue in self.tell.by_ref() {
            tell_one(queue);
        }
    }
}

impl Finish {
    /// What a panic left (see `drop`), each call caught.
    #[cold]
    #[inline(never)]
    fn run_rest(&mut self) {
        if let Some(first) = self.first.take() {
            while_unwinding(|| first.run());
        }
        if let Some(one) = self.one.take() {
            while_unwinding(|| one.notify());
        }
        for notify in self.notify.by_ref() {
            while_unwinding(|| notify.notify());
        }
        for queue in self.tell.by_ref() {
            while_unwinding(|| tell_one(queue));
        }
    }
}

impl Drop for Finish {
    /// Nothing is left unless a call in [`run`](Finish::run) panicked, or `run` was called
    /// while a panic unwinds.
    #[inline]
    fn drop(&mut self) {
        if self.first.is_some()
            || self.one.is_some()
            || self.notify.len() > 0
            || self.tell.len() > 0
        {
            self.run_rest();
        }
    }
}
