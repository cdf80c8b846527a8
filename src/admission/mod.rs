//! Layer 6: admission, a FIFO wait queue of expiring, cancellable tickets for scarce capacity.
//!
//! A server that cannot get capacity for a request yet (bytes of memory, connection slots)
//! parks it. It registers a **ticket** for `amount` units with a deadline in a **wait queue**.
//! Capacity given back is **granted** to waiting tickets in FIFO order. Each queue has a local
//! **limit**, and optionally a shared global [`Limit`]: one per endpoint and one for the
//! process, say. A ticket is granted only when both have room. It then takes from both, under
//! the queue lock and then the limit's lock: both or neither.
//!
//! [`WaitQueue`] is the sequential core: ticks, `&mut self`, results pushed to a vector.
//! [`AdmissionQueue`] puts it behind a lock with a clock. It offers a blocking
//! [`acquire`](AdmissionQueue::acquire) and, with feature `tokio`, a cancellation-safe
//! `acquire_async(..).await`.
//!
//! # The states of a ticket
//!
//! ```text
//!   (absent) ── register, fits now ─────────────────────▶ GRANTED    resolved
//!   (absent) ── register, must wait ────────────────────▶ WAITING
//!   WAITING  ── grant pass: capacity back, head gone ───▶ GRANTED    resolved
//!   WAITING  ── advance to or past its deadline ────────▶ EXPIRED    resolved, ended
//!   WAITING  ── cancel ─────────────────────────────────▶ CANCELLED  resolved, ended
//!   GRANTED  ── cancel: the amount back to the limits ──▶ ended
//!   GRANTED  ── detach: the amount to the caller ───────▶ ended (release gives it back)
//! ```
//!
//! A ticket that has *ended* is stale: every operation through it answers
//! `NotFound`/`None`/`false`.
//!
//! Each ticket **resolves exactly once**: granted, expired or cancelled. A granted ticket holds
//! its amount until it is cancelled (the amount goes back) or detached (the amount is the
//! caller's, to [`release`](WaitQueue::release)). The argument: a waiting ticket is in the FIFO
//! list and has one wheel timer. Every resolution takes it out of both in one step under
//! `&mut self` (the lock, for [`AdmissionQueue`]), and moves its slot's generation on. So no
//! later operation can find it waiting again, and a stale ticket is answered `NotFound`/`None`.
//!
//! Capacity is conserved: `available + held + detached == capacity` after every operation (a
//! debug assertion). The global limit only gets back what its queues took.
//! [`release`](WaitQueue::release) refuses more than is detached.
//!
//! # The FIFO rule
//!
//! [`Order::Strict`] (the default): tickets are granted in registration order. A head that does
//! not fit blocks those behind it, however small, so a large request is never starved. A new
//! request is granted at once only if nothing waits. [`Order::Passing`] is the explicit opt-in
//! to let a ticket that fits pass one that does not.
//!
//! **Expiry is not FIFO.** Every waiting ticket has a timer in a [`Wheel`](crate::Wheel), with
//! O(1) insert and cancel. So it expires at its deadline wherever it waits, at most one tick
//! late for whoever advances time then. A cancelled ticket leaves at once, in O(1), through its
//! generation-stamped key. When the head expires or is cancelled, the tickets behind it are
//! granted in the same step if they now fit.
//!
//! # Where it comes from
//!
//! Apache Cassandra's inbound message handler (`AbstractMessageHandler.WaitQueue`,
//! `org.apache.cassandra.net`). There, a connection that cannot reserve bytes from its endpoint
//! or global limit registers a ticket and stops reading. When capacity is released, the queue
//! is *signalled* and reactivates tickets from the head while capacity allows. At most one
//! signaller runs at a time; the others ask it to run again. Closed connections invalidate
//! their tickets. Its own TODO names the flaw fixed here: tickets that expired or were
//! invalidated *behind* a head that cannot be satisfied are only looked at once they reach the
//! head. So a handler waits far past its deadline, and dead tickets hold memory. Here both
//! leave at once, wherever they wait.
//!
//! # Ground rules of [`AdmissionQueue`]
//!
//! **Locks.** The queue lock guards the core. A global limit's lock is taken under it: queue,
//! then limit, the one order. A waiter's *cell* (its outcome and who to wake) is a leaf. It is
//! taken under the queue lock when the ticket resolves, or alone by its owner. Threads are
//! woken, and other queues told of returned global capacity, after the queue lock is released.
//!
//! **A waker that panics.** Resolutions are written under the lock, so a waker's panic
//! afterwards loses no capacity and resolves nothing twice. The call that woke it still wakes
//! every other waiter it resolved and tells every queue it has to tell, and then passes the
//! first panic on to its caller: a drop guard runs what is left while that panic unwinds,
//! at next to no cost when nothing panics. A pass that panics leaves the signal below free
//! for the next one. A waker that panics in a call made while another panic unwinds (a
//! permit dropped by it) is caught and dropped, since it would abort the process.
//!
//! **The signal.** `register`, `cancel` and giving back capacity resolve what they change under
//! the lock, at once. Two things go through the *signal*, as in Cassandra: advancing time
//! (blocked threads at their deadline, the expiry driver, [`advance`](AdmissionQueue::advance))
//! and global capacity returned by another queue. The signal is an atomic state
//! `IDLE → RUNNING`. A signal that finds a pass running turns it into `AGAIN` and returns at
//! once. The runner leaves only by `RUNNING → IDLE`, which fails after such a request, so it
//! runs another pass. At most one thread runs passes, and every signal is followed by a pass
//! that started after it.
//!
//! **The expiry driver** (feature `tokio`). An `acquire_async` future has no timer of its own.
//! As in Cassandra, where one expiry covers the whole queue, each queue has at most one tokio
//! task. It sleeps until the earliest waiting deadline tick, advances the queue (the signal
//! above) and wakes the tasks it resolved. The first future that has to wait spawns it on its
//! own runtime. It holds the queue weakly and ends when the queue is dropped. A registration
//! with an earlier deadline than the one it sleeps for wakes it to re-arm, at most once per new
//! earliest deadline.
//!
//! If the driver's runtime shuts down while the queue lives, every waiting task is woken. The
//! next one polled spawns a new driver on its own runtime, so waiters on other runtimes still
//! expire. A driver whose runtime lives but is not being run (a current-thread runtime outside
//! `block_on`) expires nothing until it runs again. Grants and cancellations never wait for it.
//! Under a paused tokio clock (`start_paused`) the driver advances to tokio's `now`, so
//! expiries follow the paused clock. Compute deadlines from `tokio::time::Instant::now()` then.
//!
//! **Dropping.** A dropped [`Waiter`] (or `acquire_async` future) cancels its ticket if it
//! waits, and gives its amount back if it was granted. Both are decided under the queue lock,
//! where grants are written, so a grant racing with the drop is never lost. A dropped
//! [`Permit`] gives its amount back.
//!
//! # Bad input
//!
//! | input | answer |
//! |---|---|
//! | amount 0 | `Err(RegisterError::ZeroAmount)` |
//! | amount above the local or global capacity | `Err(RegisterError::TooLarge)` |
//! | deadline at or before now | granted if it would be at once, else `Err(RegisterError::DeadlinePassed)` (`DeadlinePassedAt`, in instants, from `AdmissionQueue`) |
//! | stale or foreign ticket | `Cancel::NotFound`, `None`, `false`: nothing changes |
//! | `release` of more than is detached | `Err(ReleaseError)`: nothing changes |
//!
//! None of them panics or changes anything.

#[cfg(feature = "tokio")]
mod acquire_async;
#[cfg(feature = "tokio")]
mod driver;
#[cfg(all(test, feature = "tokio"))]
mod driver_tests;
mod each;
#[cfg(feature = "tokio")]
mod expiry;
mod finish;
mod limit;
mod locked;
#[cfg(all(test, feature = "tokio"))]
mod panic_tests;
mod queue;
mod shared;
mod signal;
#[cfg(test)]
mod tests;
mod types;

#[cfg(feature = "tokio")]
pub use acquire_async::Acquire;
pub use limit::Limit;
pub use queue::WaitQueue;
pub use shared::{AcquireError, AdmissionQueue, Permit, Waiter};
pub use types::{
    Cancel, Order, Outcome, RegisterError, ReleaseError, Resolved, Ticket, TicketState,
};
