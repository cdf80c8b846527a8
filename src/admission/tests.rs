//! Unit tests of the wait queue: the FIFO rule, expiry wherever a ticket waits, cancel
//! before and after a grant, both limits or neither, and every bad input.

use std::time::{Duration, Instant};

use super::*;

type Q = WaitQueue<u32>;

fn granted(out: &[Resolved<u32>]) -> Vec<u32> {
    out.iter()
        .filter(|r| r.outcome == Outcome::Granted)
        .map(|r| r.waiter)
        .collect()
}

fn expired(out: &[Resolved<u32>]) -> Vec<u32> {
    out.iter()
        .filter(|r| matches!(r.outcome, Outcome::Expired { .. }))
        .map(|r| r.waiter)
        .collect()
}

/// `q` with `tickets` registered in turn, each `(amount, deadline, waiter)`: their tickets,
/// and what the registrations resolved.
fn registered(mut q: Q, tickets: &[(u64, u64, u32)]) -> (Q, Vec<Ticket>, Vec<Resolved<u32>>) {
    let mut out = Vec::new();
    let tickets = (tickets.iter())
        .map(|&(amount, deadline, waiter)| q.register(amount, deadline, waiter, &mut out).unwrap())
        .collect();
    (q, tickets, out)
}

/// A thread-safe queue of `capacity` (1 ms resolution), a deadline a minute away, and a
/// permit for the whole capacity.
fn held_in_full(capacity: u64) -> (AdmissionQueue, Instant, Permit) {
    let q = AdmissionQueue::new(capacity, Duration::from_millis(1));
    let far = Instant::now() + Duration::from_secs(60);
    let held = q.acquire(capacity, far).unwrap();
    (q, far, held)
}

/// A thread-safe queue of `capacity` (strict order, 1 ms resolution) under `global`.
fn under(global: &Limit, capacity: u64) -> AdmissionQueue {
    let res = Duration::from_millis(1);
    AdmissionQueue::with_options(capacity, Some(global.clone()), Order::Strict, res)
}

/// A global limit of `capacity`, two queues `a` and `b` of as much under it, and a deadline
/// a minute away.
fn two_under(capacity: u64) -> (Limit, AdmissionQueue, AdmissionQueue, Instant) {
    let global = Limit::new(capacity);
    let (a, b) = (under(&global, capacity), under(&global, capacity));
    (global, a, b, Instant::now() + Duration::from_secs(60))
}

#[test]
fn strict_head_blocks_smaller_tickets_behind_it() {
    let (mut q, tickets, mut out) =
        registered(Q::new(10), &[(6, 100, 1), (8, 100, 2), (1, 100, 3)]);
    assert_eq!(granted(&out), [1], "3 fits but waits behind 2");
    out.clear();
    assert_eq!(q.cancel(tickets[0], &mut out), Cancel::Released(6));
    assert_eq!(granted(&out), [2, 3], "in registration order");
    assert_eq!(q.available(), 1);
}

#[test]
fn passing_lets_a_fitting_ticket_pass() {
    let passing = Q::with_options(10, None, Order::Passing);
    let (q, _, out) = registered(passing, &[(6, 100, 1), (8, 100, 2), (1, 100, 3)]);
    assert_eq!(granted(&out), [1, 3]);
    assert_eq!(q.waiting(), 1);
}

#[test]
fn a_ticket_expires_at_its_deadline_behind_a_blocked_head() {
    // 2 is the blocked head.
    let tickets = [(10, 1000, 1), (5, 1000, 2), (1, 30, 3), (1, 20, 4)];
    let (mut q, _, mut out) = registered(Q::new(10), &tickets);
    out.clear();
    q.advance(29, &mut out);
    assert_eq!(expired(&out), [4], "20 expired, 30 not yet: never early");
    q.advance(30, &mut out);
    assert_eq!(expired(&out), [4, 3]);
    assert_eq!(
        out[1].outcome,
        Outcome::Expired {
            deadline: 30,
            at: 30
        }
    );
    assert_eq!(q.waiting(), 1);
}

#[test]
fn an_expired_head_unblocks_the_tickets_behind() {
    let (mut q, _, mut out) = registered(Q::new(10), &[(5, 1000, 1), (9, 10, 2), (5, 1000, 3)]);
    out.clear();
    q.advance(10, &mut out);
    assert_eq!((expired(&out), granted(&out)), (vec![2], vec![3]));
}

#[test]
fn cancel_waiting_then_stale_then_foreign() {
    let mut q = Q::new(1);
    let mut other = Q::new(1);
    let mut out = Vec::new();
    q.register(1, 100, 1, &mut out).unwrap();
    let t = q.register(1, 100, 2, &mut out).unwrap();
    assert_eq!(q.cancel(t, &mut out), Cancel::Cancelled(2));
    assert_eq!(q.cancel(t, &mut out), Cancel::NotFound, "stale");
    assert_eq!(q.state(t), None);
    let reuse = q.register(1, 100, 3, &mut out).unwrap();
    assert_eq!(reuse.index, t.index, "the slot is reused");
    assert_eq!(
        q.cancel(t, &mut out),
        Cancel::NotFound,
        "the stale ticket leaves it alone"
    );
    assert_eq!(
        q.state(reuse),
        Some(TicketState::Waiting {
            amount: 1,
            deadline: 100
        })
    );
    assert_eq!(other.cancel(reuse, &mut out), Cancel::NotFound, "foreign");
    assert_eq!(other.detach(reuse), None);
}

#[test]
fn bad_inputs_are_refused_without_change() {
    let mut q = Q::with_options(10, Some(Limit::new(8)), Order::Strict);
    let mut out = Vec::new();
    assert_eq!(
        q.register(0, 5, 0, &mut out),
        Err(RegisterError::ZeroAmount)
    );
    assert_eq!(
        q.register(9, 5, 0, &mut out),
        Err(RegisterError::TooLarge {
            amount: 9,
            limit: 8
        })
    );
    q.advance(50, &mut out);
    let t = q.register(8, 40, 1, &mut out).unwrap(); // a past deadline, granted at once
    assert_eq!(
        q.register(1, 50, 2, &mut out),
        Err(RegisterError::DeadlinePassed {
            deadline: 50,
            now: 50
        })
    );
    assert_eq!(
        q.release(1, &mut out),
        Err(ReleaseError {
            amount: 1,
            detached: 0
        })
    );
    assert_eq!(q.detach(t), Some(8));
    assert_eq!(
        q.release(9, &mut out),
        Err(ReleaseError {
            amount: 9,
            detached: 8
        })
    );
    assert_eq!(q.release(8, &mut out), Ok(()));
    assert_eq!((q.available(), q.global().unwrap().available()), (10, 8));
    assert_eq!(granted(&out), [1]);
}

#[test]
fn both_limits_or_neither() {
    let global = Limit::new(10);
    let mut a = Q::with_options(8, Some(global.clone()), Order::Strict);
    let mut b = Q::with_options(8, Some(global.clone()), Order::Strict);
    let mut out = Vec::new();
    let ta = a.register(7, 100, 1, &mut out).unwrap();
    b.register(5, 100, 2, &mut out).unwrap(); // local fits, global does not
    assert_eq!((b.available(), global.available()), (8, 3), "neither taken");
    assert_eq!(granted(&out), [1]);
    a.cancel(ta, &mut out);
    b.grant_pass(&mut out);
    assert_eq!(granted(&out), [1, 2]);
    assert_eq!(
        (a.available(), b.available(), global.available()),
        (8, 3, 5)
    );
    drop(b);
    assert_eq!(
        global.available(),
        10,
        "a dropped queue gives its holdings back"
    );
}

#[test]
fn thread_safe_queue_grants_expires_and_cancels() {
    let (q, far, held) = held_in_full(4);
    let cancelled = q.register(2, far).unwrap();
    assert!(q.cancel(cancelled.ticket()));
    assert!(!q.cancel(cancelled.ticket()), "stale");
    assert_eq!(cancelled.wait().unwrap_err(), AcquireError::Cancelled);
    let soon = Instant::now() + Duration::from_millis(5);
    assert_eq!(q.acquire(1, soon).unwrap_err(), AcquireError::Expired);
    let waiting = q.register(3, far).unwrap();
    let q2 = q.clone();
    let t = std::thread::spawn(move || waiting.wait().map(|p| p.amount()));
    drop(held);
    assert_eq!(t.join().unwrap(), Ok(3));
    assert_eq!((q.available(), q.held(), q.waiting()), (4, 0, 0));
    assert_eq!(
        q2.acquire(0, far).unwrap_err(),
        AcquireError::Refused(RegisterError::ZeroAmount)
    );
}

#[test]
fn a_dropped_waiter_gives_a_grant_back() {
    let (q, far, held) = held_in_full(4);
    let w = q.register(4, far).unwrap();
    drop(held); // w is granted, its permit never taken
    assert_eq!(q.available(), 0);
    drop(w);
    assert_eq!(q.available(), 4);
}

#[test]
fn a_global_release_wakes_another_queue() {
    let (global, a, b, far) = two_under(5);
    let held = a.acquire(5, far).unwrap();
    let w = b.register(3, far).unwrap();
    assert!(w.try_take().is_none());
    drop(held);
    assert_eq!(w.try_take().unwrap().unwrap().amount(), 3, "b was told");
    assert_eq!(global.available(), 5);
}

#[test]
fn a_raised_global_capacity_grants_a_waiter_and_a_lowered_one_grants_nothing_more() {
    let global = Limit::new(4);
    let q = under(&global, 10);
    let far = Instant::now() + Duration::from_secs(60);
    let held = q.acquire(4, far).unwrap();
    let w = q.register(3, far).unwrap();
    assert!(w.try_take().is_none(), "the global limit is short");
    global.set_capacity(7);
    let granted = w.try_take().unwrap().unwrap();
    assert_eq!(
        (granted.amount(), global.available()),
        (3, 0),
        "granted at once"
    );
    // Lowered below what is held: nothing more until enough comes back.
    global.set_capacity(5);
    assert_eq!((global.capacity(), global.available()), (5, 0));
    let w2 = q.register(1, far).unwrap();
    drop(held); // 3 held now, 2 available
    let small = w2.try_take().unwrap().unwrap();
    assert_eq!((small.amount(), global.available()), (1, 1));
    drop((granted, small));
    assert_eq!(global.available(), 5);
}

/// A release too small for a short queue's head leaves the queue listed: the next release
/// that makes room grants it.
#[test]
fn a_queue_not_told_for_a_small_release_is_told_by_the_next() {
    let (_global, a, b, far) = two_under(10);
    let (four, six) = (a.acquire(4, far).unwrap(), a.acquire(6, far).unwrap());
    let w = b.register(8, far).unwrap();
    drop(four);
    assert!(w.try_take().is_none(), "4 available, 8 asked");
    drop(six);
    assert_eq!(
        w.try_take().unwrap().unwrap().amount(),
        8,
        "told by the second"
    );
}

/// The head that was short leaves; the smaller one behind it is what the queue waits for,
/// and a release with room for it (not for the first) tells the queue.
#[test]
fn a_short_queue_is_told_for_its_new_smaller_head() {
    let (_global, a, b, far) = two_under(10);
    let (seven, three) = (a.acquire(7, far).unwrap(), a.acquire(3, far).unwrap());
    let big = b.register(9, far).unwrap();
    let small = b.register(2, far).unwrap();
    drop(big); // cancelled: the small one is the head, still short
    assert!(small.try_take().is_none());
    drop(three);
    assert_eq!(small.try_take().unwrap().unwrap().amount(), 2, "told");
    drop(seven);
}
