//! [`WaitQueue`]: the sequential wait queue over ticks (no lock, no clock).

use std::sync::Weak;
use std::sync::atomic::{AtomicU64, Ordering};

use super::limit::{Limit, Told, Wake, tell};
use super::types::{
    Cancel, Order, Outcome, RegisterError, ReleaseError, Resolved, Ticket, TicketState,
};
use crate::wheel::{TimerKey, Wheel};

/// No slot: the end of the FIFO list, or of the free list.
const NIL: u32 = u32::MAX;

/// Queue ids, unique in the process: a ticket of another queue is told apart exactly.
static NEXT_QUEUE_ID: AtomicU64 = AtomicU64::new(1);

/// A FIFO wait queue of expiring, cancellable tickets for one or two limits. Sequential:
/// `&mut self`, time in ticks passed in by [`advance`](WaitQueue::advance). The
/// thread-safe form is [`AdmissionQueue`](super::AdmissionQueue).
///
/// `W` is a value kept with each waiting ticket and handed back when it resolves (who to
/// wake; `()` if nobody).
///
/// Sharing a global [`Limit`] with [`AdmissionQueue`](super::AdmissionQueue)s, it tells them
/// at once when it gives capacity back, which wakes their waiters: a waker's panic reaches the
/// caller of [`release`](WaitQueue::release), [`cancel`](WaitQueue::cancel) or the drop,
/// after this queue's own grants were made and every queue was told.
///
/// Costs: `register`, `cancel`, `detach` O(1) amortised; a grant pass O(granted + 1) in
/// [`Order::Strict`] (it stops at the first ticket that does not fit), O(waiting) in
/// [`Order::Passing`]; `advance` O(expired + 1) amortised plus the wheel's cascading.
/// Memory: one 48-byte slot per live ticket (for `W = ()`) plus its wheel timer
/// (24 bytes and a slot reference).
///
/// ```
/// use tickwheel::admission::{Outcome, WaitQueue};
///
/// let mut q: WaitQueue<&str> = WaitQueue::new(10);
/// let mut out = Vec::new();
/// let a = q.register(8, 100, "a", &mut out).unwrap(); // granted at once
/// let b = q.register(5, 50, "b", &mut out).unwrap(); // waits: 2 left
/// let c = q.register(1, 100, "c", &mut out).unwrap(); // waits behind b (strict FIFO)
/// assert_eq!(out.len(), 1);
/// q.advance(50, &mut out); // b expires at its deadline; c now fits
/// assert_eq!(out[1].outcome, Outcome::Expired { deadline: 50, at: 50 });
/// assert_eq!((out[2].ticket, out[2].outcome), (c, Outcome::Granted));
/// q.cancel(a, &mut out); // a gives its 8 back
/// assert_eq!(q.available(), 9);
/// # let _ = b;
/// ```
pub struct WaitQueue<W> {
    id: u64,
    order: Order,
    capacity: u64,
    /// Local units not held by a granted ticket nor detached.
    available: u64,
    global: Option<Limit>,
    /// Told by the global limit when capacity comes back (set by `AdmissionQueue`).
    wake: Option<Weak<dyn Wake>>,
    /// Queues to tell that global capacity came back, once our lock is released.
    to_tell: Vec<Told>,
    now: u64,
    slots: Vec<Slot<W>>,
    free: u32,
    /// The FIFO list of waiting tickets, by slot index, oldest first.
    head: u32,
    tail: u32,
    waiting: usize,
    /// Units held by granted tickets still in the queue.
    held: u64,
    /// Units handed over by `detach` and not yet given back by `release`.
    detached: u64,
    /// One timer per waiting ticket, valued with its slot index.
    timers: Wheel<u32>,
}

struct Slot<W> {
    generation: u32,
    state: State<W>,
}

enum State<W> {
    Vacant { next_free: u32 },
    Waiting(Waiting<W>),
    Granted { amount: u64 },
}

struct Waiting<W> {
    amount: u64,
    deadline: u64,
    timer: TimerKey,
    prev: u32,
    next: u32,
    waiter: W,
}

impl<W> std::fmt::Debug for WaitQueue<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitQueue")
            .field("id", &self.id)
            .field("order", &self.order)
            .field("capacity", &self.capacity)
            .field("available", &self.available)
            .field("global", &self.global)
            .field("now", &self.now)
            .field("waiting", &self.waiting)
            .field("held", &self.held)
            .field("detached", &self.detached)
            .finish()
    }
}

impl<W> WaitQueue<W> {
    /// A queue over one local limit of `capacity` units, strict FIFO, at tick 0.
    pub fn new(capacity: u64) -> Self {
        Self::with_options(capacity, None, Order::Strict)
    }

    /// A queue over a local limit of `capacity` units and, if given, a shared `global`
    /// limit: a ticket is granted only when both have room, and then takes from both.
    pub fn with_options(capacity: u64, global: Option<Limit>, order: Order) -> Self {
        WaitQueue {
            id: NEXT_QUEUE_ID.fetch_add(1, Ordering::Relaxed),
            order,
            capacity,
            available: capacity,
            global,
            wake: None,
            to_tell: Vec::new(),
            now: 0,
            slots: Vec::new(),
            free: NIL,
            head: NIL,
            tail: NIL,
            waiting: 0,
            held: 0,
            detached: 0,
            timers: Wheel::new(),
        }
    }

    pub(crate) fn set_wake(&mut self, wake: Weak<dyn Wake>) {
        self.wake = Some(wake);
    }

    /// The queue's id, carried by its tickets.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The ordering rule.
    pub fn order(&self) -> Order {
        self.order
    }

    /// The local capacity.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Local units neither held by a granted ticket nor detached.
    pub fn available(&self) -> u64 {
        self.available
    }

    /// Units held by granted tickets still in the queue.
    pub fn held(&self) -> u64 {
        self.held
    }

    /// Units handed over by [`detach`](WaitQueue::detach) and not yet released.
    pub fn detached(&self) -> u64 {
        self.detached
    }

    /// Tickets waiting.
    pub fn waiting(&self) -> usize {
        self.waiting
    }

    /// The current tick: the largest `now` passed to [`advance`](WaitQueue::advance).
    pub fn now(&self) -> u64 {
        self.now
    }

    /// The shared global limit, if any.
    pub fn global(&self) -> Option<&Limit> {
        self.global.as_ref()
    }

    /// The earliest deadline of a waiting ticket, exact. O(1) amortised.
    pub fn next_deadline(&self) -> Option<u64> {
        self.timers.peek().map(|(_, deadline)| deadline)
    }

    /// Registers a request for `amount` units until tick `deadline`.
    ///
    /// It is granted at once — a [`Resolved`] with [`Outcome::Granted`] pushed to `out` —
    /// if no ticket waits (or the order is [`Order::Passing`]) and both limits have room;
    /// otherwise it waits at the tail. Either way the ticket is returned.
    ///
    /// # Errors
    ///
    /// Nothing changes, and `waiter` is dropped, on [`RegisterError::ZeroAmount`],
    /// [`RegisterError::TooLarge`] (above the local or the global capacity),
    /// [`RegisterError::DeadlinePassed`] (`deadline <= now()` and no immediate grant) and
    /// [`RegisterError::Full`].
    pub fn register(
        &mut self,
        amount: u64,
        deadline: u64,
        waiter: W,
        out: &mut Vec<Resolved<W>>,
    ) -> Result<Ticket, RegisterError> {
        if amount == 0 {
            return Err(RegisterError::ZeroAmount);
        }
        let limit = self
            .global
            .as_ref()
            .map_or(self.capacity, |g| g.capacity().min(self.capacity));
        if amount > limit {
            return Err(RegisterError::TooLarge { amount, limit });
        }
        let may_pass = self.waiting == 0 || self.order == Order::Passing;
        if may_pass && self.try_take(amount) {
            return match self.alloc(State::Granted { amount }) {
                Some(ticket) => {
                    self.held += amount;
                    out.push(Resolved {
                        ticket,
                        amount,
                        outcome: Outcome::Granted,
                        waiter,
                    });
                    Ok(ticket)
                }
                None => {
                    self.untake(amount);
                    Err(RegisterError::Full)
                }
            };
        }
        if deadline <= self.now {
            return Err(RegisterError::DeadlinePassed {
                deadline,
                now: self.now,
            });
        }
        let placeholder = State::Vacant { next_free: NIL };
        let ticket = self.alloc(placeholder).ok_or(RegisterError::Full)?;
        let timer = match self.timers.try_insert(deadline, ticket.index) {
            Ok(timer) => timer,
            Err(_) => {
                self.free_slot(ticket.index);
                return Err(RegisterError::Full);
            }
        };
        let prev = self.tail;
        self.slots[ticket.index as usize].state = State::Waiting(Waiting {
            amount,
            deadline,
            timer,
            prev,
            next: NIL,
            waiter,
        });
        self.link_tail(ticket.index);
        Ok(ticket)
    }

    /// Cancels a ticket. O(1), plus a grant pass when capacity came back or a blocking head
    /// went away (grants pushed to `out`).
    ///
    /// A waiting ticket is [`Cancel::Cancelled`] (its waiter handed back); a granted one is
    /// [`Cancel::Released`] (its amount goes back to both limits). A stale or foreign ticket
    /// is [`Cancel::NotFound`] and changes nothing.
    pub fn cancel(&mut self, ticket: Ticket, out: &mut Vec<Resolved<W>>) -> Cancel<W> {
        let Some(index) = self.live(ticket) else {
            return Cancel::NotFound;
        };
        match self.slots[index as usize].state {
            State::Granted { amount } => {
                self.held -= amount;
                self.free_slot(index);
                self.give_back(amount, out);
                Cancel::Released(amount)
            }
            State::Waiting(_) => {
                let was_head = index == self.head;
                let waiting = self.unlink(index);
                self.timers.cancel(waiting.timer);
                self.free_slot(index);
                if was_head || self.order == Order::Passing {
                    self.grant_pass(out);
                }
                Cancel::Cancelled(waiting.waiter)
            }
            State::Vacant { .. } => Cancel::NotFound,
        }
    }

    /// Hands a granted ticket's amount over to the caller: the ticket ends (it is stale
    /// afterwards) and the amount counts as *detached* until given back with
    /// [`release`](WaitQueue::release). `None`, changing nothing, if the ticket is not
    /// granted (waiting, stale or foreign). O(1).
    pub fn detach(&mut self, ticket: Ticket) -> Option<u64> {
        let index = self.live(ticket)?;
        let State::Granted { amount } = self.slots[index as usize].state else {
            return None;
        };
        self.held -= amount;
        self.detached += amount;
        self.free_slot(index);
        Some(amount)
    }

    /// Gives back `amount` detached units, to the local and the global limit, and grants
    /// what now fits (pushed to `out`, in FIFO order).
    ///
    /// # Errors
    ///
    /// [`ReleaseError`] if `amount` is more than is detached: capacity is never created.
    pub fn release(&mut self, amount: u64, out: &mut Vec<Resolved<W>>) -> Result<(), ReleaseError> {
        if amount > self.detached {
            return Err(ReleaseError {
                amount,
                detached: self.detached,
            });
        }
        self.detached -= amount;
        self.give_back(amount, out);
        Ok(())
    }

    /// Moves time to tick `now` (never backwards: an earlier `now` is ignored), expires
    /// every waiting ticket whose deadline is at or before it — wherever it waits, in
    /// deadline order, equal deadlines in registration order — and then grants what now
    /// fits. All pushed to `out`.
    pub fn advance(&mut self, now: u64, out: &mut Vec<Resolved<W>>) {
        self.now = self.now.max(now);
        let mut expired_head = false;
        while let Some(fired) = self.timers.poll(self.now) {
            let index = fired.value;
            expired_head |= index == self.head;
            let ticket = self.ticket_of(index);
            let w = self.unlink(index);
            self.free_slot(index);
            let outcome = Outcome::Expired {
                deadline: w.deadline,
                at: self.now,
            };
            out.push(Resolved {
                ticket,
                amount: w.amount,
                outcome,
                waiter: w.waiter,
            });
        }
        if expired_head || self.order == Order::Passing {
            self.grant_pass(out);
        }
    }

    /// Grants what fits now. Needed only when capacity came back to the global limit
    /// through another queue: every operation of this queue runs it itself.
    pub fn grant_pass(&mut self, out: &mut Vec<Resolved<W>>) {
        let mut cur = self.head;
        while cur != NIL && self.available > 0 {
            let State::Waiting(w) = &self.slots[cur as usize].state else {
                unreachable!("the FIFO list holds waiting tickets only");
            };
            let (amount, next) = (w.amount, w.next);
            if self.try_take(amount) {
                self.grant(cur, out);
            } else if self.order == Order::Strict {
                break;
            }
            cur = next;
        }
    }

    /// Where a ticket stands: `None` if stale or foreign. O(1).
    pub fn state(&self, ticket: Ticket) -> Option<TicketState> {
        let index = self.live(ticket)?;
        match &self.slots[index as usize].state {
            State::Waiting(w) => Some(TicketState::Waiting {
                amount: w.amount,
                deadline: w.deadline,
            }),
            State::Granted { amount } => Some(TicketState::Granted { amount: *amount }),
            State::Vacant { .. } => None,
        }
    }

    /// Calls `f` with the value of every waiting ticket, in FIFO order. O(waiting).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn for_each_waiting(&self, mut f: impl FnMut(&W)) {
        let mut cur = self.head;
        while let Some(State::Waiting(w)) = self.slots.get(cur as usize).map(|s| &s.state) {
            f(&w.waiter);
            cur = w.next;
        }
    }

    /// Heap bytes held: slots and the wheel, by capacity.
    pub fn bytes_held(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot<W>>() + self.timers.stats().bytes_held
    }

    // --- internals -------------------------------------------------------------------

    fn grant(&mut self, index: u32, out: &mut Vec<Resolved<W>>) {
        let w = self.unlink(index);
        self.timers.cancel(w.timer);
        self.held += w.amount;
        self.slots[index as usize].state = State::Granted { amount: w.amount };
        let ticket = self.ticket_of(index);
        out.push(Resolved {
            ticket,
            amount: w.amount,
            outcome: Outcome::Granted,
            waiter: w.waiter,
        });
    }

    /// Takes `amount` from both limits or from neither.
    /// When the global limit is short, this queue (if thread-safe) is listed there to be
    /// told when capacity comes back, under the limit's lock.
    fn try_take(&mut self, amount: u64) -> bool {
        if amount > self.available {
            return false;
        }
        if let Some(global) = &self.global {
            if !global.try_take(amount, self.id, self.wake.as_ref()) {
                return false;
            }
        }
        self.available -= amount;
        true
    }

    fn untake(&mut self, amount: u64) {
        self.available += amount;
        if let Some(global) = &self.global {
            let others = global.give_back(amount);
            self.tell_later(others);
        }
    }

    fn give_back(&mut self, amount: u64, out: &mut Vec<Resolved<W>>) {
        self.available += amount;
        debug_assert!(
            self.available + self.held + self.detached == self.capacity,
            "local units add up"
        );
        let others = self.global.as_ref().map(|global| global.give_back(amount));
        self.grant_pass(out);
        // After the pass: a sequential queue tells at once, and a told queue's waker may
        // panic; the pass is done by then.
        if let Some(others) = others {
            self.tell_later(others);
        }
    }

    /// Queues short of the global limit are told at once by a sequential queue (no lock of
    /// ours is held), and by the thread-safe one after it released its lock
    /// ([`take_to_tell`](WaitQueue::take_to_tell)): telling runs their grant pass.
    fn tell_later(&mut self, others: Vec<Told>) {
        if self.wake.is_none() {
            tell(others);
        } else {
            self.to_tell.extend(others);
        }
    }

    pub(crate) fn take_to_tell(&mut self) -> Vec<Told> {
        std::mem::take(&mut self.to_tell)
    }

    fn live(&self, ticket: Ticket) -> Option<u32> {
        if ticket.queue != self.id {
            return None;
        }
        let slot = self.slots.get(ticket.index as usize)?;
        let live =
            slot.generation == ticket.generation && !matches!(slot.state, State::Vacant { .. });
        live.then_some(ticket.index)
    }

    fn ticket_of(&self, index: u32) -> Ticket {
        Ticket {
            queue: self.id,
            index,
            generation: self.slots[index as usize].generation,
        }
    }

    fn alloc(&mut self, state: State<W>) -> Option<Ticket> {
        let index = if self.free != NIL {
            let index = self.free;
            let State::Vacant { next_free } = self.slots[index as usize].state else {
                unreachable!("the free list holds vacant slots only");
            };
            self.free = next_free;
            self.slots[index as usize].state = state;
            index
        } else {
            let index = u32::try_from(self.slots.len())
                .ok()
                .filter(|&i| i < NIL - 1)?;
            self.slots.push(Slot {
                generation: 0,
                state,
            });
            index
        };
        Some(self.ticket_of(index))
    }

    /// Ends the slot's ticket: its generation moves on (a slot whose generation would wrap
    /// is retired, never reused, so no ticket ever names a later request).
    fn free_slot(&mut self, index: u32) {
        let slot = &mut self.slots[index as usize];
        slot.generation = slot.generation.wrapping_add(1);
        if slot.generation == u32::MAX {
            slot.state = State::Vacant { next_free: NIL };
            return;
        }
        slot.state = State::Vacant {
            next_free: self.free,
        };
        self.free = index;
    }

    fn link_tail(&mut self, index: u32) {
        if self.tail == NIL {
            self.head = index;
        } else if let State::Waiting(t) = &mut self.slots[self.tail as usize].state {
            t.next = index;
        }
        self.tail = index;
        self.waiting += 1;
    }

    /// Takes a waiting ticket out of the FIFO list; its slot is left vacant-to-be.
    fn unlink(&mut self, index: u32) -> Waiting<W> {
        let state = std::mem::replace(
            &mut self.slots[index as usize].state,
            State::Vacant { next_free: NIL },
        );
        let State::Waiting(w) = state else {
            unreachable!("only waiting tickets are unlinked");
        };
        match w.prev {
            NIL => self.head = w.next,
            p => self.set_next(p, w.next),
        }
        match w.next {
            NIL => self.tail = w.prev,
            n => self.set_prev(n, w.prev),
        }
        self.waiting -= 1;
        w
    }

    fn set_next(&mut self, index: u32, next: u32) {
        if let State::Waiting(w) = &mut self.slots[index as usize].state {
            w.next = next;
        }
    }

    fn set_prev(&mut self, index: u32, prev: u32) {
        if let State::Waiting(w) = &mut self.slots[index as usize].state {
            w.prev = prev;
        }
    }
}

impl<W> Drop for WaitQueue<W> {
    /// The units this queue's tickets hold of the global limit — granted and detached —
    /// go back to it: the queue and what it granted end together.
    fn drop(&mut self) {
        if let Some(global) = self.global.take() {
            global.forget(self.id);
            tell(global.give_back(self.held + self.detached));
        }
    }
}
