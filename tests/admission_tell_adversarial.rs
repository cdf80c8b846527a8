//! The global limit tells a short queue only when it has room for the least that queue asked
//! for: no wake-up may be lost by it. After every call made from one thread, every waiting
//! request that fits both its limits (the head of a strict queue, any ticket of a passing
//! one) must already be granted; the list of short queues must not grow with queues
//! created and dropped while the limit stays full. Capacity is counted in and out
//! throughout. (Each test was shown to catch a planted fault in `src/admission/limit.rs`;
//! threads and tasks racing: `admission_tell_races.rs`.)

mod support;

#[cfg(feature = "tokio")]
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use tickwheel::admission::{
    AcquireError, AdmissionQueue, Cancel, Limit, Order, Outcome, Permit, RegisterError, Resolved,
    Ticket, WaitQueue, Waiter,
};

use support::admission::{RES, far, limited, under};
use support::counting_alloc::{Counting, live_on_this_thread as live, per_thread};

#[global_allocator]
static A: Counting = Counting(per_thread);

/// A thread-safe queue of the model test, with what the test holds of it.
struct Shared {
    q: AdmissionQueue,
    capacity: u64,
    order: Order,
    /// Waiting requests, in registration order.
    waiting: Vec<(u64, Waiter)>,
    permits: Vec<Permit>,
}

impl Shared {
    fn new(global: &Limit, capacity: u64, order: Order) -> Self {
        Shared {
            q: AdmissionQueue::with_options(capacity, Some(global.clone()), order, RES),
            capacity,
            order,
            waiting: Vec::new(),
            permits: Vec::new(),
        }
    }

    fn held(&self) -> u64 {
        self.permits.iter().map(Permit::amount).sum()
    }
}

/// A sequential queue on the same limit: it is never told (nobody holds its lock), but it
/// takes and gives back global capacity, and what it gives back tells the others.
struct Sequential {
    q: WaitQueue<()>,
    /// Its live tickets: amount and whether granted.
    tickets: Vec<(Ticket, u64, bool)>,
}

impl Sequential {
    fn settle(&mut self, out: Vec<Resolved<()>>) {
        for r in out {
            assert_eq!(r.outcome, Outcome::Granted, "far deadlines never expire");
            let t = self.tickets.iter_mut().find(|t| t.0 == r.ticket);
            t.expect("a grant names a live ticket").2 = true;
        }
    }

    fn held(&self) -> u64 {
        self.tickets.iter().filter(|t| t.2).map(|t| t.1).sum()
    }
}

#[derive(Debug, Clone)]
enum Op {
    Register {
        q: usize,
        amount: u64,
    },
    DropPermit {
        q: usize,
        pick: usize,
    },
    /// Drops a waiter (`by_ticket`: cancels it through the queue first).
    Cancel {
        q: usize,
        pick: usize,
        by_ticket: bool,
    },
    SetCapacity(u64),
    /// Drops the queue with everything it holds and makes a new one in its place.
    Replace {
        q: usize,
    },
    SeqRegister(u64),
    SeqCancel(usize),
    SeqPass,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..3usize, 1..=13u64).prop_map(|(q, amount)| Op::Register { q, amount }),
        5 => (0..3usize, any::<usize>()).prop_map(|(q, pick)| Op::DropPermit { q, pick }),
        3 => (0..3usize, any::<usize>(), any::<bool>())
            .prop_map(|(q, pick, by_ticket)| Op::Cancel { q, pick, by_ticket }),
        1 => (1..=16u64).prop_map(Op::SetCapacity),
        1 => (0..3usize).prop_map(|q| Op::Replace { q }),
        2 => (1..=8u64).prop_map(Op::SeqRegister),
        2 => any::<usize>().prop_map(Op::SeqCancel),
        1 => Just(Op::SeqPass),
    ]
}

struct World {
    global: Limit,
    queues: Vec<Shared>,
    seq: Sequential,
}

impl World {
    fn new(global: u64, queues: &[(u64, bool)]) -> Self {
        let global = Limit::new(global);
        let queues = queues
            .iter()
            .map(|&(capacity, passing)| {
                let order = if passing {
                    Order::Passing
                } else {
                    Order::Strict
                };
                Shared::new(&global, capacity, order)
            })
            .collect();
        let seq = Sequential {
            q: WaitQueue::with_options(8, Some(global.clone()), Order::Strict),
            tickets: Vec::new(),
        };
        World {
            global,
            queues,
            seq,
        }
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Register { q, amount } => {
                let s = &mut self.queues[q];
                match s.q.register(amount, far()) {
                    Ok(w) => s.waiting.push((amount, w)),
                    Err(RegisterError::TooLarge { .. }) => {
                        let cap = self.global.capacity().min(s.capacity);
                        assert!(amount > cap, "{amount} refused under {cap}");
                    }
                    Err(e) => panic!("refused: {e:?}"),
                }
            }
            Op::DropPermit { q, pick } => {
                let s = &mut self.queues[q];
                if !s.permits.is_empty() {
                    drop(s.permits.swap_remove(pick % s.permits.len()));
                }
            }
            Op::Cancel { q, pick, by_ticket } => {
                let s = &mut self.queues[q];
                if !s.waiting.is_empty() {
                    let (_, w) = s.waiting.remove(pick % s.waiting.len());
                    if by_ticket {
                        assert!(s.q.cancel(w.ticket()), "a waiting ticket cancels");
                        assert_eq!(
                            w.try_take().map(|r| r.err()),
                            Some(Some(AcquireError::Cancelled))
                        );
                    }
                    drop(w);
                }
            }
            Op::SetCapacity(c) => self.global.set_capacity(c),
            Op::Replace { q } => {
                let s = &mut self.queues[q];
                let (capacity, order) = (s.capacity, s.order);
                let old = std::mem::replace(s, Shared::new(&self.global, capacity, order));
                drop(old);
            }
            Op::SeqRegister(amount) => {
                let mut out = Vec::new();
                match self.seq.q.register(amount, u64::MAX, (), &mut out) {
                    Ok(t) => self.seq.tickets.push((t, amount, false)),
                    Err(RegisterError::TooLarge { .. }) => {}
                    Err(e) => panic!("refused: {e:?}"),
                }
                self.seq.settle(out);
            }
            Op::SeqCancel(pick) => {
                if !self.seq.tickets.is_empty() {
                    let (t, amount, granted) =
                        self.seq.tickets.remove(pick % self.seq.tickets.len());
                    let mut out = Vec::new();
                    match self.seq.q.cancel(t, &mut out) {
                        Cancel::Released(a) => assert!(granted && a == amount),
                        Cancel::Cancelled(()) => assert!(!granted),
                        Cancel::NotFound => panic!("a live ticket is found"),
                    }
                    self.seq.settle(out);
                }
            }
            Op::SeqPass => {
                let mut out = Vec::new();
                self.seq.q.grant_pass(&mut out);
                self.seq.settle(out);
            }
        }
    }

    /// Takes every grant made, and checks the counts and that no wake-up was lost.
    fn check(&mut self, after: &Op) {
        for s in &mut self.queues {
            let mut i = 0;
            while i < s.waiting.len() {
                match s.waiting[i].1.try_take() {
                    None => i += 1,
                    Some(Ok(p)) => {
                        assert_eq!(p.amount(), s.waiting[i].0);
                        s.permits.push(p);
                        drop(s.waiting.remove(i)); // its outcome taken: nothing to cancel
                    }
                    Some(Err(e)) => panic!("after {after:?}: a far request ended {e:?}"),
                }
            }
        }
        let held: u64 = self.queues.iter().map(Shared::held).sum::<u64>() + self.seq.held();
        let cap = self.global.capacity();
        assert_eq!(
            self.global.available(),
            cap.saturating_sub(held),
            "after {after:?}: global units add up"
        );
        let global = self.global.available();
        for (i, s) in self.queues.iter().enumerate() {
            let local = s.q.available();
            assert_eq!(
                local,
                s.capacity - s.held(),
                "after {after:?}: queue {i} adds up"
            );
            let room = local.min(global);
            let stuck: Vec<u64> = match s.order {
                Order::Strict => s.waiting.first().map(|w| w.0).into_iter().collect(),
                _ => s.waiting.iter().map(|w| w.0).collect(),
            };
            for amount in stuck {
                assert!(
                    amount > room,
                    "after {after:?}: queue {i} ({:?}) leaves {amount} waiting with {local} \
                     local and {global} global units free",
                    s.order
                );
            }
        }
    }
}

fn run_model(global: u64, queues: &[(u64, bool)], ops: &[Op]) {
    let mut world = World::new(global, queues);
    for op in ops {
        world.apply(op);
        world.check(op);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// One thread: every call returns with the system at rest, since a told queue runs its
    /// pass in the telling call. So a request that fits both limits and is not granted by
    /// then was lost.
    #[test]
    fn no_request_that_fits_is_left_waiting(
        global in 4..=16u64,
        queues in proptest::collection::vec((2..=12u64, any::<bool>()), 3),
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        run_model(global, &queues, &ops);
    }
}

/// A grant of `w`, which must have been made by now.
fn granted(w: &Waiter, what: &str) -> Permit {
    match w.try_take() {
        Some(Ok(p)) => p,
        other => panic!("{what}: {other:?}"),
    }
}

/// A queue's entry is taken off the list by a release, and while that release's tell is on
/// the way, the queue's own pass lists it again for a smaller head (one its local limit kept
/// from asking before). The smaller need must win when the two meet: a later release with
/// room for it, not for the older need, tells the queue.
#[test]
fn a_queue_listed_again_while_its_tell_is_on_the_way_keeps_the_smaller_need() {
    let global = Limit::new(10);
    let (x, y) = (under(&global, 10), under(&global, 10));
    let y5 = y.acquire(5, far()).unwrap();
    let y1 = y.acquire(1, far()).unwrap();
    let _y4 = y.acquire(4, far()).unwrap();
    let big = x.register(8, far()).unwrap(); // short of the global limit: listed for 8
    let five = x.register(5, far()).unwrap();
    let six = x.register(6, far()).unwrap();
    drop(y5); // 5 free: no room for 8, x stays listed for 8
    drop(big); // cancelled: 5 is granted, 6 is short of x's own limit (5 left)
    let five = granted(&five, "5 fits both limits once the head left");
    assert!(six.try_take().is_none(), "5 local units for 6");
    // x's 5 back: the release takes x off the list (for 8) and x's pass lists it again for 6.
    drop(five);
    assert!(six.try_take().is_none(), "5 global units for 6");
    drop(y1); // 6 free: room for 6
    assert_eq!(granted(&six, "6 free, 6 asked").amount(), 6);
}

/// A release of exactly what the short queue needs tells it.
#[test]
fn a_release_of_exactly_the_need_tells() {
    let (_global, [a, b]) = limited(9, 9);
    let held = a.acquire(9, far()).unwrap();
    let w = b.register(9, far()).unwrap();
    drop(held);
    assert_eq!(granted(&w, "9 free, 9 asked").amount(), 9);
}

/// The head short of the global limit expires (at its deadline, found by `advance`); the
/// smaller one behind it is what the queue waits for from then on.
#[test]
fn a_short_head_that_expires_leaves_the_smaller_one_behind_it_listed() {
    let (_global, [a, b]) = limited(10, 10);
    let seven = a.acquire(7, far()).unwrap();
    let three = a.acquire(3, far()).unwrap();
    let soon = Instant::now() + Duration::from_millis(5);
    let head = b.register(9, soon).unwrap();
    let small = b.register(2, far()).unwrap();
    let ended = loop {
        if let Some(r) = head.try_take() {
            break r;
        }
        std::thread::sleep(RES);
        b.advance();
    };
    assert_eq!(ended.err(), Some(AcquireError::Expired));
    assert!(small.try_take().is_none(), "nothing free yet");
    drop(three); // room for 2, not for 9
    assert_eq!(granted(&small, "3 free, 2 asked").amount(), 2);
    drop(seven);
}

/// A passing queue: a big ticket and a small one behind it, both short of the global limit;
/// a release with room for the small one only tells the queue.
#[test]
fn a_passing_queue_is_told_for_its_smallest_short_ticket() {
    let global = Limit::new(10);
    let a = under(&global, 10);
    let b = AdmissionQueue::with_options(10, Some(global.clone()), Order::Passing, RES);
    let eight = a.acquire(8, far()).unwrap();
    let two = a.acquire(2, far()).unwrap();
    let big = b.register(9, far()).unwrap();
    let small = b.register(2, far()).unwrap();
    drop(two);
    let small = granted(&small, "2 free, 2 asked, may pass");
    assert!(big.try_take().is_none());
    drop(eight);
    assert!(big.try_take().is_none(), "8 free for 9");
    drop(small);
    assert_eq!(granted(&big, "10 free, 9 asked").amount(), 9);
}

/// The capacity lowered under what is held, then raised in steps: each step that makes room
/// for the waiting head tells its queue; one that does not leaves it listed.
#[test]
fn a_capacity_lowered_and_raised_in_steps_tells_at_the_step_with_room() {
    let (global, [a, b]) = limited(10, 10);
    let six = a.acquire(6, far()).unwrap();
    let w = b.register(5, far()).unwrap();
    global.set_capacity(10);
    assert!(w.try_take().is_none(), "not raised, nothing told");
    global.set_capacity(3); // 6 held over 3
    drop(six); // 0 held of 3: no room for 5
    assert!(w.try_take().is_none());
    global.set_capacity(4);
    assert!(w.try_take().is_none(), "4 for 5");
    global.set_capacity(5);
    assert_eq!(granted(&w, "raised to 5, 5 asked").amount(), 5);
}

/// A sequential queue on the same limit gives back what a thread-safe queue waits for.
#[test]
fn a_sequential_queue_giving_back_tells_a_thread_safe_one() {
    let global = Limit::new(10);
    let mut seq: WaitQueue<()> = WaitQueue::with_options(10, Some(global.clone()), Order::Strict);
    let mut out = Vec::new();
    let t1 = seq.register(6, 100, (), &mut out).unwrap();
    let t2 = seq.register(4, 100, (), &mut out).unwrap();
    let b = under(&global, 10);
    let w = b.register(5, far()).unwrap();
    assert!(matches!(seq.cancel(t2, &mut out), Cancel::Released(4)));
    assert!(w.try_take().is_none(), "4 free for 5");
    let d = seq.detach(t1).unwrap();
    seq.release(d, &mut out).unwrap();
    let five = granted(&w, "10 free, 5 asked");
    drop(seq);
    assert_eq!(global.available(), 5);
    drop(five);
    assert_eq!(global.available(), 10);
}

/// The whole range: a limit of `u64::MAX`, amounts of `u64::MAX` and 1, amount 0 refused.
#[test]
fn amounts_at_the_ends_of_the_range() {
    let global = Limit::new(u64::MAX);
    let (a, b) = (under(&global, u64::MAX), under(&global, u64::MAX));
    assert_eq!(
        a.register(0, far()).err(),
        Some(RegisterError::ZeroAmount),
        "amount 0"
    );
    let all = a.acquire(u64::MAX, far()).unwrap();
    let one = b.register(1, far()).unwrap();
    let rest = b.register(u64::MAX - 1, far()).unwrap();
    drop(all);
    let one = granted(&one, "all free, 1 asked");
    let rest = granted(&rest, "MAX - 1 free, MAX - 1 asked");
    let max = a.register(u64::MAX, far()).unwrap();
    drop(one);
    assert!(max.try_take().is_none(), "1 free for MAX");
    drop(rest);
    assert_eq!(granted(&max, "all free, MAX asked").amount(), u64::MAX);
}

/// Queues made and dropped by a leak test.
const ROUNDS: usize = 4000;
/// What a leak test allows to be kept: 32 bytes a round, less than one list entry (a queue
/// id and a `Weak`, whose queue's allocation it keeps too). The rest of a round keeps
/// nothing, but the wheel of a queue that is registered on every round keeps up to about
/// 60 KiB of stale timer references (its bound, independent of the rounds).
const KEPT: isize = 32 * ROUNDS as isize;

/// Heap bytes this thread holds after `f` ran `n` more times than it had already: what a
/// list of short queues that grows with dropped queues would hold.
fn growth(mut f: impl FnMut(), n: usize) -> isize {
    for _ in 0..50 {
        f(); // warm-up: buffers and maps at their working size
    }
    let before = live();
    for _ in 0..n {
        f();
    }
    live() - before
}

/// Queues listed as short and then dropped while the limit stays full (nothing given back,
/// so no release takes them off the list): the list must not keep them.
#[test]
fn queues_dropped_while_the_limit_stays_full_are_not_kept_listed() {
    let global = Limit::new(10);
    let b = under(&global, 10);
    let all = b.acquire(10, far()).unwrap();
    let grew = growth(
        || {
            let q = under(&global, 10);
            let w = q.register(3, far()).unwrap(); // listed for 3
            drop((w, q));
        },
        ROUNDS,
    );
    assert!(
        grew < KEPT,
        "{grew} bytes kept after {ROUNDS} dropped queues"
    );
    drop(all);
    assert_eq!(global.available(), 10);
}

/// Wakes by dropping what it holds: code that runs between a release taking queues off
/// the list and telling them.
#[cfg(feature = "tokio")]
struct DropOnWake(Mutex<Option<Box<dyn std::any::Any + Send>>>);

#[cfg(feature = "tokio")]
impl std::task::Wake for DropOnWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        let held = self.0.lock().unwrap().take();
        drop(held);
    }
}

/// A queue dropped while a release's tell to it is on the way, with no room for it: it is
/// not listed again (nothing would take it off), however many such queues come and go.
/// The release wakes the waiter it granted before it tells, and that waiter's waker drops
/// the short queue.
#[cfg(feature = "tokio")]
#[test]
fn a_queue_dropped_while_its_tell_is_on_the_way_is_not_listed_again() {
    use std::task::{Poll, Waker};
    use support::admission::{enter_idle, poll_once};
    enter_idle!();
    let global = Limit::new(10);
    let a = under(&global, 2);
    let b = under(&global, 10);
    let eight = b.acquire(8, far()).unwrap();
    let mut two = Some(a.acquire(2, far()).unwrap()); // the limit is full
    let grew = growth(
        || {
            let q = under(&global, 10);
            let w = q.register(3, far()).unwrap(); // listed for 3
            let wake = Arc::new(DropOnWake(Mutex::new(Some(Box::new((q, w))))));
            let waker = Waker::from(wake.clone());
            let mut next = a.acquire_async(2, far());
            assert!(poll_once(&mut next, &waker).is_pending(), "a's 2 are held");
            // 2 back: q is taken off the list, `next` granted and woken (dropping q), and
            // then q told: the 2 were taken again, so no room for it.
            drop(two.take());
            assert!(wake.0.lock().unwrap().is_none(), "woken");
            match poll_once(&mut next, &waker) {
                Poll::Ready(Ok(p)) => two = Some(p),
                other => panic!("2 free, 2 asked: {other:?}"),
            }
        },
        ROUNDS,
    );
    assert!(
        grew < KEPT,
        "{grew} bytes kept after {ROUNDS} dropped queues"
    );
    drop((two, eight));
    assert_eq!(global.available(), 10);
}
