//! The shared queue's resolution buffer, kept between calls under the queue lock: calls that
//! run while another call's resolutions are being handed out (a waker that gives capacity
//! back, queues told through a shared `Limit`), bursts far over the kept room, and panics
//! while permits and waiters are held. Each test ends by checking that every request
//! resolved once, nothing was over-granted and all capacity came back.

#![cfg(feature = "tokio")]

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Wake, Waker};
use std::thread;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng, rngs::StdRng};
use tickwheel::admission::{Acquire, AcquireError, AdmissionQueue, Limit, Order, Permit, Waiter};

mod support;
use support::admission::{RES, enter_idle, far, full, limited, poll_once, under};
use support::tasks::{idle_runtime, panics};

/// Each waiter's permit, taken; panics, naming `who`, at the first that was not granted.
fn granted(waiters: &[Waiter], who: &str) -> Vec<Permit> {
    waiters
        .iter()
        .map(|w| match w.try_take() {
            Some(Ok(p)) => p,
            other => panic!("{who} got {other:?}"),
        })
        .collect()
}

/// Every queue and the limit are back to their full capacity, nothing held or waiting.
fn assert_all_back(queues: &[AdmissionQueue], local: u64, global: Option<&Limit>) {
    for (i, q) in queues.iter().enumerate() {
        assert_eq!(
            (q.available(), q.held(), q.waiting()),
            (local, 0, 0),
            "queue {i}: {q:?}"
        );
    }
    if let Some(g) = global {
        assert_eq!(g.available(), g.capacity(), "global limit: {g:?}");
    }
}

/// Units held right now by the grants seen, per queue and in all; records any excess.
struct InUse {
    per_queue: Vec<AtomicU64>,
    all: AtomicU64,
    local: u64,
    global: u64,
    over: AtomicBool,
}

impl InUse {
    fn new(queues: usize, local: u64, global: u64) -> Self {
        InUse {
            per_queue: (0..queues).map(|_| AtomicU64::new(0)).collect(),
            all: AtomicU64::new(0),
            local,
            global,
            over: AtomicBool::new(false),
        }
    }
    fn hold(&self, q: usize, amount: u64) {
        let l = self.per_queue[q].fetch_add(amount, Ordering::SeqCst) + amount;
        let g = self.all.fetch_add(amount, Ordering::SeqCst) + amount;
        if l > self.local || g > self.global {
            self.over.store(true, Ordering::SeqCst);
        }
    }
    fn unhold(&self, q: usize, amount: u64) {
        self.per_queue[q].fetch_sub(amount, Ordering::SeqCst);
        self.all.fetch_sub(amount, Ordering::SeqCst);
    }
}

/// A held permit, counted in `InUse` until dropped (uncounted first, so a grant made by the
/// permit's own release is never counted alongside it).
struct Held<'a> {
    q: usize,
    permit: Option<Permit>,
    in_use: &'a InUse,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let Some(p) = self.permit.take() {
            self.in_use.unhold(self.q, p.amount());
            drop(p);
        }
    }
}

/// Many queues over one global limit; threads register, wait, take, drop permits and
/// waiters (granted or not) and cancel one another's tickets. Dropping a permit of one
/// queue tells the queues short of the global limit, whose passes resolve their own
/// tickets while other threads are inside their calls.
#[test]
fn queues_sharing_a_limit_resolve_each_request_once_and_give_everything_back() {
    const QUEUES: usize = 5;
    const LOCAL: u64 = 12;
    const GLOBAL: u64 = 20;
    const THREADS: u64 = 4;
    const OPS: usize = 1500;
    let global = Limit::new(GLOBAL);
    let queues: Arc<Vec<AdmissionQueue>> = Arc::new(
        (0..QUEUES)
            .map(|i| {
                let order = if i % 2 == 0 {
                    Order::Strict
                } else {
                    Order::Passing
                };
                AdmissionQueue::with_options(LOCAL, Some(global.clone()), order, RES)
            })
            .collect(),
    );
    let in_use = Arc::new(InUse::new(QUEUES, LOCAL, GLOBAL));
    // Tickets any thread may cancel, and how many requests ended, by how.
    let tickets = Arc::new(Mutex::new(Vec::new()));
    let ends = Arc::new([(); 5].map(|_| AtomicU64::new(0)));
    let registered = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..THREADS)
        .map(|seed| {
            let (queues, in_use, tickets, ends, registered) = (
                queues.clone(),
                in_use.clone(),
                tickets.clone(),
                ends.clone(),
                registered.clone(),
            );
            thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed);
                let mut held: Vec<Held<'_>> = Vec::new();
                let mut pending: Vec<(usize, Waiter)> = Vec::new();
                for _ in 0..OPS {
                    let q = rng.gen_range(0..QUEUES);
                    let amount = rng.gen_range(1..=LOCAL);
                    let deadline = Instant::now() + Duration::from_micros(rng.gen_range(0..4000));
                    match queues[q].register(amount, deadline) {
                        Ok(w) => {
                            registered.fetch_add(1, Ordering::SeqCst);
                            tickets.lock().unwrap().push((q, w.ticket()));
                            pending.push((q, w));
                        }
                        Err(_) => {
                            ends[0].fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    // Cancel someone's ticket (maybe stale, maybe granted: then nothing).
                    if rng.gen_bool(0.2) {
                        let pick = {
                            let t = tickets.lock().unwrap();
                            (!t.is_empty()).then(|| t[rng.gen_range(0..t.len())])
                        };
                        if let Some((q, t)) = pick {
                            queues[q].cancel(t);
                        }
                    }
                    // Look at a pending waiter, wait for one, or drop one unresolved.
                    if !pending.is_empty() {
                        let i = rng.gen_range(0..pending.len());
                        let roll = rng.gen_range(0..10);
                        let outcome = if roll < 5 {
                            pending[i].1.try_take()
                        } else if roll < 8 {
                            let (q, w) = pending.swap_remove(i);
                            finish(q, w.wait(), &in_use, &ends, &mut held);
                            None
                        } else {
                            let (_, w) = pending.swap_remove(i);
                            // Dropped while waiting or granted-untaken: ends either way.
                            ends[4].fetch_add(1, Ordering::SeqCst);
                            drop(w);
                            None
                        };
                        if let Some(r) = outcome {
                            let (q, _) = pending.swap_remove(i);
                            finish(q, r, &in_use, &ends, &mut held);
                        }
                    }
                    // Give back a permit now and then.
                    if !held.is_empty() && rng.gen_bool(0.5) {
                        let i = rng.gen_range(0..held.len());
                        held.swap_remove(i);
                    }
                    queues[rng.gen_range(0..QUEUES)].advance();
                }
                for (q, w) in pending {
                    let r = w.wait();
                    finish(q, r, &in_use, &ends, &mut held);
                }
                drop(held);
            })
        })
        .collect();
    for h in handles {
        h.join().expect("a worker panicked");
    }
    assert!(!in_use.over.load(Ordering::SeqCst), "over-granted");
    let ended: u64 = ends[1..].iter().map(|e| e.load(Ordering::SeqCst)).sum();
    assert_eq!(
        ended,
        registered.load(Ordering::SeqCst),
        "every registered request ends once"
    );
    assert_all_back(&queues, LOCAL, Some(&global));
}

fn finish<'a>(
    q: usize,
    r: Result<Permit, AcquireError>,
    in_use: &'a InUse,
    ends: &[AtomicU64; 5],
    held: &mut Vec<Held<'a>>,
) {
    match r {
        Ok(p) => {
            ends[1].fetch_add(1, Ordering::SeqCst);
            in_use.hold(q, p.amount());
            held.push(Held {
                q,
                permit: Some(p),
                in_use,
            });
        }
        Err(AcquireError::Expired) => {
            ends[2].fetch_add(1, Ordering::SeqCst);
        }
        Err(AcquireError::Cancelled) => {
            ends[3].fetch_add(1, Ordering::SeqCst);
        }
        Err(e) => panic!("a registered request ended {e:?}"),
    }
}

/// A waker that, when woken, runs `on_wake` (once): code that runs right after a call of
/// the queue handed out its resolutions, and calls into the queues again.
struct Hook {
    on_wake: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    woken: AtomicUsize,
}

impl Wake for Hook {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.fetch_add(1, Ordering::SeqCst);
        let f = self.on_wake.lock().unwrap().take();
        if let Some(f) = f {
            f();
        }
    }
}

/// Re-entrancy: a grant wakes a task whose waker drops permits and waiters of the same
/// queue and of a queue sharing the limit, and registers new requests; those calls run
/// their own passes (and tell the other queue) while the first call is finishing.
#[test]
fn a_waker_that_gives_back_and_registers_while_woken_keeps_the_queues_consistent() {
    let rt = idle_runtime();
    let (global, [a, b]) = limited(10, 10);
    let _guard = rt.enter();
    for round in 0..50u64 {
        // b holds 6 of the global 10; a holds 4 and waits for 3 more.
        let b_big = b.acquire(6, far()).unwrap();
        let a_hold = a.acquire(4, far()).unwrap();
        let mut fut = a.acquire_async(3, far());
        // b waits too: its head (8) does not fit the global limit when b_big comes back,
        // and blocks the one behind it; a is told and gets its 3.
        let b_wait = b.register(8, far()).unwrap();
        let b_wait2 = b.register(1 + round % 3, far()).unwrap();
        let stash: Arc<Mutex<Vec<Box<dyn Send>>>> = Arc::new(Mutex::new(Vec::new()));
        let (a2, b2, st) = (a.clone(), b.clone(), stash.clone());
        let hook = Arc::new(Hook {
            on_wake: Mutex::new(Some(Box::new(move || {
                // From inside the wake of a grant: more calls on both queues.
                drop(b_wait2); // a waiter of b dropped (waiting or granted)
                let w = a2.register(2, far()).unwrap();
                let w2 = b2.register(1, far()).unwrap();
                st.lock().unwrap().push(Box::new(w));
                drop(w2);
                st.lock().unwrap().push(Box::new(a_hold)); // kept; dropped below
            }))),
            woken: AtomicUsize::new(0),
        });
        let waker = Waker::from(hook.clone());
        assert!(poll_once(&mut fut, &waker).is_pending());
        drop(b_big); // 6 back to the limit: a's waiter gets 3, its waker runs the hook
        assert_eq!(hook.woken.load(Ordering::SeqCst), 1, "round {round}");
        let Poll::Ready(Ok(p)) = poll_once(&mut fut, &waker) else {
            panic!("round {round}: the grant is lost");
        };
        assert_eq!(p.amount(), 3);
        // Global: 4 (a_hold) + 3 (p) = 7 of 10 while the stash lives.
        assert!(
            a.held() + b.held() <= global.capacity(),
            "round {round}: over-granted {a:?} {b:?}"
        );
        drop(p);
        stash.lock().unwrap().clear();
        drop(b_wait);
        drop(fut);
        assert_all_back(&[a.clone(), b.clone()], 10, Some(&global));
    }
}

/// Bursts: thousands of waiters granted in one pass, then thousands expired in one pass,
/// then ordinary traffic: every waiter sees its one outcome, and the queue is whole.
#[test]
fn bursts_far_over_the_kept_room_lose_nothing() {
    const N: usize = 4000;
    let q = AdmissionQueue::new(N as u64, RES);
    let empty = q.bytes_held();
    for round in 0..3 {
        // A big release: N waiters of 1 granted in one pass.
        let all = q.acquire(N as u64, far()).unwrap();
        let waiters: Vec<Waiter> = (0..N).map(|_| q.register(1, far()).unwrap()).collect();
        assert_eq!(q.waiting(), N);
        drop(all);
        assert_eq!(q.waiting(), 0);
        let permits = granted(&waiters, &format!("round {round}: a waiter of the burst"));
        assert!(
            waiters.iter().all(|w| w.try_take().is_none()),
            "taken twice"
        );
        assert_eq!((q.available(), q.held()), (0, N as u64));
        drop(waiters);
        drop(permits);
        assert_eq!((q.available(), q.held()), (N as u64, 0));

        // A mass expiry: N waiters behind a full queue, all due at once.
        let all = q.acquire(N as u64, far()).unwrap();
        // Far enough for the registrations of a loaded machine, all due at one tick.
        let soon = Instant::now() + Duration::from_millis(300);
        let waiters: Vec<Waiter> = (0..N).map(|_| q.register(1, soon).unwrap()).collect();
        while Instant::now() < soon + 2 * RES {
            thread::sleep(RES);
        }
        q.advance();
        assert_eq!(q.waiting(), 0, "round {round}: all expired in one pass");
        for w in &waiters {
            assert!(matches!(w.try_take(), Some(Err(AcquireError::Expired))));
        }
        drop(waiters);
        drop(all);

        // Ordinary traffic after it.
        for i in 0..2000u64 {
            let p = q.acquire(1 + i % 7, far()).unwrap();
            let w = q.register(N as u64, far()).unwrap();
            assert!(w.try_take().is_none());
            drop(p);
            assert!(matches!(w.try_take(), Some(Ok(_))));
        }
        assert_all_back(std::slice::from_ref(&q), N as u64, None);
    }
    // What the queue reports holding: slots and wheel only (the resolution buffer is not
    // counted anywhere the API shows).
    eprintln!(
        "bytes_held: empty {empty}, after {N}-waiter bursts {}",
        q.bytes_held()
    );
}

/// A burst made by a dropped waiter: the waiting head is dropped and the thousands of
/// small waiters behind it are granted in that drop's pass.
#[test]
fn a_dropped_head_grants_a_burst_behind_it() {
    const N: usize = 3000;
    let q = AdmissionQueue::new(N as u64, RES);
    for round in 0..3 {
        let one = q.acquire(1, far()).unwrap();
        let head = q.register(N as u64, far()).unwrap();
        let behind: Vec<Waiter> = (0..N - 1).map(|_| q.register(1, far()).unwrap()).collect();
        assert_eq!(q.waiting(), N);
        drop(head);
        assert_eq!(q.waiting(), 0, "round {round}");
        let permits = granted(&behind, &format!("round {round}: a waiter behind the head"));
        assert_eq!((q.available(), q.held()), (0, N as u64));
        drop((one, permits, behind));
        assert_all_back(std::slice::from_ref(&q), N as u64, None);
    }
}

/// Panics: threads that panic holding permits, granted-untaken waiters and waiting
/// waiters, some while a grant they would get is being made; unwinding drops them all.
#[test]
fn panics_while_holding_permits_and_waiters_leave_the_queue_whole() {
    const LOCAL: u64 = 8;
    let global = Limit::new(12);
    let queues: Vec<AdmissionQueue> = (0..3).map(|_| under(&global, LOCAL)).collect();
    for round in 0..200u64 {
        let handles: Vec<_> = (0..3u64)
            .map(|t| {
                let qs = queues.clone();
                thread::spawn(move || {
                    let mut rng = StdRng::seed_from_u64(round * 7 + t);
                    let mut keep: Vec<Box<dyn Send>> = Vec::new();
                    for _ in 0..6 {
                        let q = &qs[rng.gen_range(0..qs.len())];
                        let amount = rng.gen_range(1..=4);
                        let soon = Instant::now() + Duration::from_micros(rng.gen_range(0..2000));
                        if rng.gen_bool(0.5) {
                            if let Ok(p) = q.acquire(amount, soon) {
                                keep.push(Box::new(p));
                            }
                        } else if let Ok(w) = q.register(amount, far()) {
                            keep.push(Box::new(w));
                        }
                    }
                    if rng.gen_bool(0.7) {
                        panic!("unwinding with {} held", keep.len());
                    }
                })
            })
            .collect();
        for h in handles {
            let _ = h.join();
        }
        assert_all_back(&queues, LOCAL, Some(&global));
        // Still usable: the full local capacity is granted at once.
        let p = queues[(round % 3) as usize].acquire(LOCAL, far()).unwrap();
        drop(p);
    }
    assert_all_back(&queues, LOCAL, Some(&global));
}

/// A waker that gives back the permit it holds (if any) when it is dropped.
struct HoldsPermit(#[allow(dead_code)] Mutex<Option<Permit>>);

impl Wake for HoldsPermit {
    fn wake(self: Arc<Self>) {}
}

fn holding(permit: Option<Permit>) -> Waker {
    Waker::from(Arc::new(HoldsPermit(Mutex::new(permit))))
}

/// On a thread with a tokio runtime entered: a queue of 4 whose 4 units are held by the
/// waker that a waiting `acquire_async(2)` recorded (its last copy), handed to `then`.
/// `then`'s answer, or `None` if it did not come within 20 s: a deadlock fails the test
/// rather than hanging it.
fn with_a_permit_in_the_recorded_waker<R: Send + 'static>(
    then: impl FnOnce(&AdmissionQueue, Acquire) -> R + Send + 'static,
) -> Option<R> {
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        enter_idle!();
        let (q, held) = full(4);
        let mut fut = q.acquire_async(2, far());
        let waker = holding(Some(held));
        assert!(poll_once(&mut fut, &waker).is_pending());
        drop(waker); // the cell's copy is the last one now
        let _ = tx.send(then(&q, fut));
    });
    rx.recv_timeout(Duration::from_secs(20)).ok()
}

/// A dropped `acquire_async` future (or `Waiter`) drops the waker it recorded, whose drop
/// gives a permit of the same queue back: that must not need a lock the drop holds.
#[test]
fn a_waker_dropped_by_a_cancelled_future_may_give_capacity_back() {
    let got = with_a_permit_in_the_recorded_waker(|q, fut| {
        drop(fut); // cancels; dropping the recorded waker gives the 4 back
        (q.available(), q.held(), q.waiting())
    });
    assert_eq!(
        got,
        Some((4, 0, 0)),
        "dropping the future deadlocked or lost capacity"
    );
}

/// The recorded waker replaced by a second poll with another waker: its drop gives the 4
/// back, which grants this very ticket while its cell is being updated.
#[test]
fn a_waker_replaced_on_poll_may_give_capacity_back() {
    let got = with_a_permit_in_the_recorded_waker(|q, mut fut| {
        let second = holding(None);
        let r = match poll_once(&mut fut, &second) {
            Poll::Ready(r) => r.map(|p| p.amount()),
            Poll::Pending => match poll_once(&mut fut, &second) {
                Poll::Ready(r) => r.map(|p| p.amount()),
                Poll::Pending => Err(AcquireError::Cancelled),
            },
        };
        (r, q.available(), q.held())
    });
    assert_eq!(
        got,
        Some((Ok(2), 4, 0)),
        "the second poll deadlocked or lost the grant"
    );
}

/// A waker that panics when woken, among the resolutions of one release: the panic reaches
/// the thread dropping the permit, but the queues short of the global limit that the same
/// release must tell are still told, so a waiter that fits is granted.
#[test]
fn a_panicking_waker_does_not_stop_the_other_queues_being_told() {
    enter_idle!();
    let (global, [a, b]) = limited(10, 10);
    let all = a.acquire(10, far()).unwrap();
    let mut on_a = a.acquire_async(2, far());
    let mut on_b = b.acquire_async(5, far()); // short of the global limit: listed there
    let panics = panics();
    let quiet = Waker::noop();
    assert!(poll_once(&mut on_a, &panics).is_pending());
    assert!(poll_once(&mut on_b, quiet).is_pending());
    // The 10 come back: a grants its 2 (whose waker panics), and b must be told.
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(all)));
    assert!(unwound.is_err(), "the waker's panic reaches the dropper");
    // a's 2 and b's 5 taken: b was granted by the release that panicked.
    assert_eq!(global.available(), 3, "{global:?}");
    assert!(
        matches!(poll_once(&mut on_b, quiet), Poll::Ready(Ok(_))),
        "b's waiter fits the 8 left but was never granted: {b:?}, {global:?}"
    );
    drop((on_a, on_b));
    assert_all_back(&[a, b], 10, Some(&global));
}
