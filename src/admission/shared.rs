//! [`AdmissionQueue`]: the thread-safe wait queue, its [`Waiter`]s and [`Permit`]s.

#[cfg(feature = "tokio")]
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
#[cfg(feature = "tokio")]
use std::task::Waker;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::finish::{Finish, First, Notify};
use super::limit::{Limit, Wake};
use super::locked::Locked;
use super::queue::WaitQueue;
use super::signal::Signal;
use super::types::{Cancel, Order, Outcome, RegisterError, Resolved, Ticket};
use crate::clock::TickClock;

/// The thread-safe wait queue: a [`WaitQueue`] behind a lock, with a clock, threads and
/// tasks to wake, and the grant-pass signal. Cheap to clone (an `Arc`).
///
/// Deadlines are `Instant`s, converted to ticks of the queue's resolution counted from its
/// creation (a deadline rounds up, `now` rounds down: never early, and an expiry is seen at
/// most one tick late by whoever advances the queue then). A thread blocked in
/// [`acquire`](AdmissionQueue::acquire) or [`Waiter::wait`] advances the queue itself at its
/// deadline; tasks awaiting `acquire_async` (feature `tokio`) are expired by the queue's one
/// expiry driver task (see the module doc); other tickets
/// registered with [`register`](AdmissionQueue::register) and not waited on expire when
/// someone calls [`advance`](AdmissionQueue::advance) (a housekeeping thread, every tick).
///
/// A call (dropping a [`Permit`] or [`Waiter`] too) whose wake-ups include a waker that
/// panics makes the others, and tells the queues it has to tell, before the panic reaches
/// its caller; made while another panic unwinds, it drops that waker's panic instead.
///
/// ```
/// use std::time::{Duration, Instant};
/// use tickwheel::admission::{AcquireError, AdmissionQueue};
///
/// let q = AdmissionQueue::new(100, Duration::from_millis(1));
/// let deadline = Instant::now() + Duration::from_millis(20);
/// let big = q.acquire(80, deadline).unwrap(); // granted at once
/// assert_eq!(q.acquire(30, deadline).unwrap_err(), AcquireError::Expired); // 20 ms later
/// drop(big); // 80 back
/// assert_eq!(q.available(), 100);
/// ```
#[derive(Clone)]
pub struct AdmissionQueue {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(super) core: Mutex<Locked<Arc<Cell>>>,
    pub(super) clock: TickClock,
    /// Who runs the grant passes: see [`Inner::signal`].
    run: Signal,
    /// The expiry driver of `acquire_async` waiters (see `expiry.rs`).
    #[cfg(feature = "tokio")]
    pub(super) driver: Arc<super::driver::Driver>,
}

#[cfg(feature = "tokio")]
impl Drop for Inner {
    /// The driver task holds only a `Weak`: woken, it finds the queue gone and ends.
    fn drop(&mut self) {
        self.driver.wake();
    }
}

/// Where one waiter's request stands, as its owner sees it. Written under the queue's lock
/// when the ticket resolves (the cell lock is a leaf, taken under the queue lock or alone).
#[derive(Debug)]
pub(crate) struct Cell {
    state: Mutex<CellState>,
}

#[derive(Debug)]
enum CellState {
    Waiting(Option<Notify>),
    /// Granted: the amount is detached from the queue and owned by the `Waiter` until it
    /// becomes a `Permit` (or is given back when the `Waiter` is dropped).
    Granted(u64),
    Expired,
    Cancelled,
    /// The outcome was handed to the owner.
    Taken,
}

/// Why an acquire ended without a grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AcquireError {
    /// Refused at registration; nothing changed.
    Refused(RegisterError),
    /// The deadline passed while it waited.
    Expired,
    /// Cancelled through [`AdmissionQueue::cancel`] while it waited.
    Cancelled,
}

impl std::fmt::Display for AcquireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AcquireError::Refused(e) => write!(f, "refused: {e}"),
            AcquireError::Expired => write!(f, "the deadline passed while waiting"),
            AcquireError::Cancelled => write!(f, "cancelled while waiting"),
        }
    }
}

impl std::error::Error for AcquireError {}

impl std::fmt::Debug for AdmissionQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdmissionQueue")
            .field("queue", &*self.inner.core.lock())
            .finish()
    }
}

impl AdmissionQueue {
    /// A queue over one local limit of `capacity` units, strict FIFO, with ticks of
    /// `resolution` counted from now.
    ///
    /// # Panics
    ///
    /// If `resolution` is zero, or too long for `Instant` to represent one tick after now
    /// (see [`TickClock::new`]).
    #[track_caller]
    pub fn new(capacity: u64, resolution: Duration) -> Self {
        Self::with_options(capacity, None, Order::Strict, resolution)
    }

    /// A queue over a local limit and, if given, a shared global one (see
    /// [`WaitQueue::with_options`]).
    ///
    /// # Panics
    ///
    /// If `resolution` is zero, or too long for `Instant` to represent one tick after now
    /// (see [`TickClock::new`]).
    #[track_caller]
    pub fn with_options(
        capacity: u64,
        global: Option<Limit>,
        order: Order,
        resolution: Duration,
    ) -> Self {
        let clock = TickClock::new(Instant::now(), resolution);
        let inner = Arc::new_cyclic(|me: &Weak<Inner>| {
            let mut core = WaitQueue::with_options(capacity, global, order);
            let me: Weak<dyn Wake> = me.clone();
            core.set_wake(me);
            Inner {
                core: Mutex::new(Locked::new(core)),
                clock,
                run: Signal::default(),
                #[cfg(feature = "tokio")]
                driver: Arc::default(),
            }
        });
        AdmissionQueue { inner }
    }

    /// The queue's expiry driver, for the tests.
    #[cfg(all(test, feature = "tokio"))]
    pub(super) fn driver(&self) -> &Arc<super::driver::Driver> {
        &self.inner.driver
    }

    /// The queue's clock (tick ↔ `Instant`).
    pub fn clock(&self) -> TickClock {
        self.inner.clock
    }

    /// Local units not held. Takes the lock.
    pub fn available(&self) -> u64 {
        self.inner.core.lock().available()
    }

    /// Tickets waiting. Takes the lock.
    pub fn waiting(&self) -> usize {
        self.inner.core.lock().waiting()
    }

    /// Units held by permits and by granted waiters not yet turned into permits.
    pub fn held(&self) -> u64 {
        let core = self.inner.core.lock();
        core.held() + core.detached()
    }

    /// Heap bytes of the queue's slots and wheel. Takes the lock.
    pub fn bytes_held(&self) -> usize {
        self.inner.core.lock().bytes_held()
    }

    /// Registers a request for `amount` until `deadline` and returns its [`Waiter`],
    /// granted already if the queue allows (see [`WaitQueue::register`]). O(1).
    ///
    /// # Errors
    ///
    /// As [`WaitQueue::register`], but a passed deadline is
    /// [`RegisterError::DeadlinePassedAt`] (instants, not ticks). The deadline rounds up to
    /// a tick boundary (never early), so a deadline still ahead is never refused, even one
    /// closer than the next tick: its ticket expires at that tick, up to one resolution
    /// late. Only a deadline whose tick has begun counts as passed. A deadline too far ahead
    /// for a tick (what a saturating `now + Duration::MAX` gives) is never due: its ticket
    /// waits until it is granted or cancelled and never expires, and neither `acquire` nor
    /// `acquire_async` panics on it (README, "One saturation rule").
    pub fn register(&self, amount: u64, deadline: Instant) -> Result<Waiter, RegisterError> {
        let cell = Arc::new(Cell {
            state: Mutex::new(CellState::Waiting(None)),
        });
        let tick = self.inner.clock.deadline_tick(deadline);
        let mut core = self.inner.core.lock();
        let mut out = core.take_buffer();
        core.advance(self.inner.now_tick(), &mut out);
        let ticket = core.register(amount, tick, cell.clone(), &mut out);
        // A waiting ticket due before the driver's armed tick re-arms it.
        #[cfg(feature = "tokio")]
        let rearm = matches!(ticket, Ok(t) if self.inner.driver.rearm(tick)
            && matches!(core.state(t), Some(super::TicketState::Waiting { .. })));
        let finish = self.inner.settle(&mut core, out);
        drop(core);
        #[cfg(feature = "tokio")]
        if rearm {
            self.inner.driver.wake();
        }
        let waiter = ticket
            .map(|ticket| Waiter {
                inner: self.inner.clone(),
                ticket,
                cell,
                wake_at: self.inner.clock.instant_saturating(tick),
            })
            .map_err(|e| match e {
                // In the caller's terms: instants, not ticks.
                RegisterError::DeadlinePassed { .. } => RegisterError::DeadlinePassedAt {
                    deadline,
                    now: Instant::now().max(deadline),
                },
                e => e,
            });
        // The ticket has its owner before other wakers run: if one panics, the unwinding
        // drops the `Waiter`, which cancels the ticket or gives its grant back.
        finish.run();
        waiter
    }

    /// Blocks the calling thread until `amount` is granted (a [`Permit`]) or `deadline`
    /// passes.
    ///
    /// # Errors
    ///
    /// [`AcquireError::Refused`] for a refused registration, [`AcquireError::Expired`],
    /// [`AcquireError::Cancelled`].
    pub fn acquire(&self, amount: u64, deadline: Instant) -> Result<Permit, AcquireError> {
        self.register(amount, deadline)
            .map_err(AcquireError::Refused)?
            .wait()
    }

    /// Cancels a waiting ticket: its waiter ends [`AcquireError::Cancelled`]. `false` for a
    /// ticket that is not waiting (granted, ended, stale or foreign): a granted one is given
    /// back by dropping its [`Waiter`] or [`Permit`]. O(1) plus a grant pass.
    pub fn cancel(&self, ticket: Ticket) -> bool {
        let mut core = self.inner.core.lock();
        let mut out = core.take_buffer();
        let cancelled = match core.cancel(ticket, &mut out) {
            Cancel::Cancelled(cell) => Some(cell),
            Cancel::Released(_) | Cancel::NotFound => None,
        };
        let notify = cancelled
            .as_ref()
            .and_then(|cell| cell.resolve(CellState::Cancelled));
        let mut finish = self.inner.settle(&mut core, out);
        drop(core);
        finish.first = notify.map(First::Wake);
        finish.run();
        cancelled.is_some()
    }

    /// Moves the queue to the current tick: expires the tickets whose deadline passed and
    /// grants what fits. Runs the grant pass, or asks the thread running one to run it again
    /// (see the module doc).
    pub fn advance(&self) {
        self.inner.signal();
    }
}

impl Inner {
    fn now_tick(&self) -> u64 {
        let now = self.clock.now_tick(Instant::now()).unwrap_or(0);
        // Tokio's clock, as the driver last saw it: ahead of `Instant::now()` only while
        // paused (see `expiry.rs`, "Clock").
        #[cfg(feature = "tokio")]
        let now = now.max(self.driver.tokio_tick.load(Ordering::Relaxed));
        now
    }

    /// Cassandra's signal: runs grant passes, or asks the thread running them for one more
    /// (see [`Signal`]).
    pub(crate) fn signal(&self) {
        self.run.signal(|| self.pass());
    }

    /// One grant pass: advances to now, grants what fits, wakes and tells after the lock.
    fn pass(&self) {
        let mut core = self.core.lock();
        let mut out = core.take_buffer();
        core.advance(self.now_tick(), &mut out);
        core.grant_pass(&mut out);
        let finish = self.settle(&mut core, out);
        drop(core);
        finish.run();
    }

    /// Under the queue lock: hands each resolution to its waiter's cell (a grant is
    /// detached from the queue into the cell at once, so the cell owns it from here on).
    fn settle(&self, core: &mut Locked<Arc<Cell>>, mut out: Vec<Resolved<Arc<Cell>>>) -> Finish {
        // The first waiter to wake apart: no allocation when there is one.
        let (mut one, mut notify) = (None, Vec::new());
        for r in out.drain(..) {
            let state = match r.outcome {
                Outcome::Granted => {
                    let amount = core.detach(r.ticket);
                    debug_assert_eq!(amount, Some(r.amount), "a fresh grant detaches");
                    CellState::Granted(r.amount)
                }
                Outcome::Expired { .. } => CellState::Expired,
            };
            if let Some(n) = r.waiter.resolve(state) {
                match one {
                    None => one = Some(n),
                    Some(_) => notify.push(n),
                }
            }
        }
        core.give_back(out);
        Finish::new(one, notify, core.take_to_tell())
    }

    /// Gives back a permit's (or an untaken grant's) amount.
    fn give_back(&self, amount: u64) {
        let mut core = self.core.lock();
        let mut out = core.take_buffer();
        let released = core.release(amount, &mut out);
        debug_assert!(released.is_ok(), "a permit holds detached units");
        let finish = self.settle(&mut core, out);
        drop(core);
        finish.run();
    }
}

impl Wake for Inner {
    fn capacity_returned(&self) {
        self.signal();
    }
}

impl Cell {
    /// The waker of the task waiting on it, if a task waits.
    #[cfg(feature = "tokio")]
    pub(super) fn task_waker(&self) -> Option<Waker> {
        match &*self.state.lock() {
            CellState::Waiting(Some(Notify::Task(w))) => Some(w.clone()),
            _ => None,
        }
    }

    /// Records the outcome of a waiting request; returns who to wake.
    fn resolve(&self, to: CellState) -> Option<Notify> {
        let mut state = self.state.lock();
        match std::mem::replace(&mut *state, to) {
            CellState::Waiting(notify) => notify,
            other => {
                debug_assert!(false, "a ticket resolves once; it was {other:?}");
                None
            }
        }
    }
}

/// A registered request, from [`AdmissionQueue::register`]: wait for it
/// ([`wait`](Waiter::wait), or `acquire_async` with feature `tokio`), look
/// ([`try_take`](Waiter::try_take)), or drop it — which cancels it if it still waits and
/// gives its amount back if it was granted, so a dropped waiter never leaks capacity.
#[derive(Debug)]
#[must_use = "dropping the waiter cancels the request (or gives back what was granted)"]
pub struct Waiter {
    inner: Arc<Inner>,
    ticket: Ticket,
    cell: Arc<Cell>,
    /// The instant the deadline tick begins: from then on an advance expires it.
    wake_at: Instant,
}

impl Waiter {
    /// The ticket, for [`AdmissionQueue::cancel`].
    pub fn ticket(&self) -> Ticket {
        self.ticket
    }

    /// The outcome if it is resolved, taking it (a grant becomes a [`Permit`]); `None`
    /// while it waits, and after the outcome was taken.
    pub fn try_take(&self) -> Option<Result<Permit, AcquireError>> {
        let mut state = self.cell.state.lock();
        let result = match *state {
            CellState::Waiting(_) | CellState::Taken => return None,
            CellState::Granted(amount) => Ok(Permit {
                inner: self.inner.clone(),
                amount,
            }),
            CellState::Expired => Err(AcquireError::Expired),
            CellState::Cancelled => Err(AcquireError::Cancelled),
        };
        *state = CellState::Taken;
        Some(result)
    }

    /// Blocks until the request resolves. At its deadline the thread advances the queue
    /// itself, so it returns [`AcquireError::Expired`] at most one tick late (plus the
    /// time the thread takes to be scheduled).
    ///
    /// # Errors
    ///
    /// [`AcquireError::Expired`], [`AcquireError::Cancelled`].
    pub fn wait(self) -> Result<Permit, AcquireError> {
        loop {
            if let Some(result) = self.try_take() {
                return result;
            }
            if !self.set_notify(Notify::Thread(std::thread::current())) {
                continue; // resolved between the look and the registration: look again
            }
            let now = Instant::now();
            if now >= self.wake_at {
                self.inner.signal();
                if let Some(result) = self.try_take() {
                    return result;
                }
                // Another thread is running the pass (it was asked to run again), or the
                // clock has not reached the tick yet: try again within a tick.
                std::thread::park_timeout(self.inner.clock.resolution());
            } else {
                std::thread::park_timeout(self.wake_at - now);
            }
        }
    }

    /// Records who to wake, if it still waits; `false` if it no longer does.
    fn set_notify(&self, notify: Notify) -> bool {
        match &mut *self.cell.state.lock() {
            CellState::Waiting(slot) => {
                *slot = Some(notify);
                true
            }
            _ => false,
        }
    }

    /// For a task: the outcome if it is resolved, taking it (as
    /// [`try_take`](Waiter::try_take)); else records `waker` to be woken when it resolves
    /// and answers [`Polled::Pending`] with the waker it replaced. One cell lock. After the
    /// outcome was taken: `Cancelled`.
    #[cfg(feature = "tokio")]
    pub(super) fn poll_take(&self, waker: &Waker) -> Polled {
        let mut state = self.cell.state.lock();
        let result = match &mut *state {
            CellState::Waiting(slot) => {
                if matches!(slot, Some(Notify::Task(w)) if w.will_wake(waker)) {
                    return Polled::Pending(None);
                }
                return Polled::Pending(slot.replace(Notify::Task(waker.clone())));
            }
            CellState::Taken => return Polled::Ready(Err(AcquireError::Cancelled)),
            CellState::Granted(amount) => Ok(Permit {
                inner: self.inner.clone(),
                amount: *amount,
            }),
            CellState::Expired => Err(AcquireError::Expired),
            CellState::Cancelled => Err(AcquireError::Cancelled),
        };
        *state = CellState::Taken;
        Polled::Ready(result)
    }

    #[cfg(feature = "tokio")]
    pub(super) fn queue(&self) -> &Arc<Inner> {
        &self.inner
    }
}

/// What [`Waiter::poll_take`] found.
#[cfg(feature = "tokio")]
pub(super) enum Polled {
    /// The outcome, taken.
    Ready(Result<Permit, AcquireError>),
    /// Still waiting, the waker recorded. The one it replaced is the caller's to drop, with
    /// no lock held and last: dropping a waker may run any code, even code that gives
    /// capacity back and so resolves this very request, or that panics.
    Pending(Option<Notify>),
}

impl Drop for Waiter {
    /// Cancels the request if it still waits; gives the amount back if it was granted and
    /// not taken. Both under the queue lock, where resolutions are written, so a grant
    /// racing with the drop is given back, never lost.
    fn drop(&mut self) {
        if matches!(*self.cell.state.lock(), CellState::Taken) {
            // The outcome was taken: the ticket left the queue when it resolved, and a grant
            // became a `Permit`. Nothing to give back, no queue lock needed.
            return;
        }
        let mut core = self.inner.core.lock();
        let mut out = core.take_buffer();
        // The waker a cancelled request recorded: dropped only once the locks are released,
        // since dropping a waker may run any code, giving capacity back to this queue too.
        let mut recorded = None;
        if let Cancel::Cancelled(_) = core.cancel(self.ticket, &mut out) {
            let state = std::mem::replace(&mut *self.cell.state.lock(), CellState::Cancelled);
            if let CellState::Waiting(notify) = state {
                recorded = notify;
            }
        } else {
            let granted = std::mem::replace(&mut *self.cell.state.lock(), CellState::Taken);
            if let CellState::Granted(amount) = granted {
                let released = core.release(amount, &mut out);
                debug_assert!(released.is_ok(), "a grant is detached into its waiter");
            }
        }
        let mut finish = self.inner.settle(&mut core, out);
        drop(core);
        // Its drop may panic too: the wakes and tells still run.
        finish.first = recorded.map(First::Drop);
        finish.run();
    }
}

/// Capacity granted: `amount` units of the queue's local limit (and of its global one, if
/// any), given back when the permit is dropped.
#[derive(Debug)]
#[must_use = "dropping the permit gives its capacity back at once"]
pub struct Permit {
    inner: Arc<Inner>,
    amount: u64,
}

impl Permit {
    /// The units held.
    pub fn amount(&self) -> u64 {
        self.amount
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.inner.give_back(self.amount);
    }
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("run", &self.run)
            .finish_non_exhaustive()
    }
}
