//! What an [`AdmissionQueue`](super::AdmissionQueue) call does once its lock is released:
//! wake the waiters it resolved and tell the queues short of the global limit, all of it
//! even if a waker panics (see `each.rs`).

use std::sync::Weak;
use std::task::Waker;
use std::thread::Thread;

use super::each::each;
use super::limit::{Wake, tell_one};

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
/// short of the global limit. All of it runs even if a waker panics (see `each.rs`).
#[must_use]
pub(super) struct Finish {
    /// Before the rest: the waker of the request this call ended itself.
    pub(super) first: Option<Job>,
    pub(super) notify: Vec<Notify>,
    pub(super) tell: Vec<Weak<dyn Wake>>,
}

/// One step of a [`Finish`]: each runs the caller's code (a waker) or may (a told queue
/// wakes its own waiters).
pub(super) enum Job {
    Wake(Notify),
    /// A cancelled request's waker, dropped unwoken: its owner cancelled it.
    Drop(Notify),
    Tell(Weak<dyn Wake>),
}

impl Job {
    pub(super) fn run(self) {
        match self {
            Job::Wake(notify) => notify.notify(),
            Job::Drop(notify) => drop(notify),
            Job::Tell(queue) => tell_one(queue),
        }
    }
}

impl Finish {
    pub(super) fn run(self) {
        let wake = self.notify.into_iter().map(Job::Wake);
        let tell = self.tell.into_iter().map(Job::Tell);
        each(self.first.into_iter().chain(wake).chain(tell), Job::run);
    }
}
