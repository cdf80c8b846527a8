//! Many threads, many queues over one limit, every kind of panicking waker: the harness of
//! `admission_panic_adversarial.rs`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Poll, Waker};
use std::thread;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng, rngs::StdRng};
use tickwheel::admission::{Acquire, AcquireError, AdmissionQueue, Limit, Permit};

use super::wakers::*;

const QUEUES: usize = 3;
const LOCAL: u64 = 6;
const GLOBAL: u64 = 10;

/// Units held by the grants seen, per queue and in all; records any excess.
#[derive(Default)]
struct InUse {
    per_queue: [AtomicU64; QUEUES],
    all: AtomicU64,
    over: AtomicBool,
}

impl InUse {
    fn hold(&self, q: usize, amount: u64) {
        let l = self.per_queue[q].fetch_add(amount, Ordering::SeqCst) + amount;
        let g = self.all.fetch_add(amount, Ordering::SeqCst) + amount;
        if l > LOCAL || g > GLOBAL {
            self.over.store(true, Ordering::SeqCst);
        }
    }
}

/// A permit counted in `InUse` until dropped (uncounted before its release).
struct Held {
    q: usize,
    permit: Option<Permit>,
    in_use: Arc<InUse>,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(p) = self.permit.take() {
            self.in_use.per_queue[self.q].fetch_sub(p.amount(), Ordering::SeqCst);
            self.in_use.all.fetch_sub(p.amount(), Ordering::SeqCst);
            drop(p);
        }
    }
}

struct World {
    queues: Vec<AdmissionQueue>,
    global: Limit,
    in_use: Arc<InUse>,
    /// Permits any thread's wakers may give back from inside a wake or a drop.
    bank: Mutex<Vec<Held>>,
    created: AtomicU64,
    ended: AtomicU64,
    /// The wake counts of futures seen resolved after a pending poll while none of their
    /// wakers was woken yet: the resolving thread may still be about to wake it, so they
    /// are looked at once every thread is done.
    unwoken: Mutex<Vec<Arc<AtomicUsize>>>,
    /// Calls that panicked, and grants seen: the run did exercise what it tests.
    caught: AtomicU64,
    granted: AtomicU64,
    /// Futures that answered a poll after their outcome with anything but `Cancelled`.
    twice: AtomicU64,
}

impl World {
    /// Runs `f`, counting its panic.
    fn guarded(&self, f: impl FnOnce()) {
        if catch_unwind(AssertUnwindSafe(f)).is_err() {
            self.caught.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn bank_pop(&self) -> Option<Held> {
        self.bank
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
    }
}

/// How a future's wakers behave: quiet, panic on every wake, on the second wake, when
/// dropped, after giving a banked permit back when woken, after giving one back when dropped.
const KINDS: usize = 6;

struct Pending {
    q: usize,
    fut: Acquire,
    kind: usize,
    wakes: Arc<AtomicUsize>,
    was_pending: bool,
}

/// A fresh waker of `kind` (a new one each poll: the one it replaces is dropped by the poll).
fn kind_waker(world: &Arc<World>, kind: usize, wakes: &Arc<AtomicUsize>) -> Waker {
    let give_back = |w: &Arc<World>| -> Mutex<Option<Hook>> {
        let w = Arc::downgrade(w);
        Mutex::new(Some(Box::new(move || {
            if let Some(w) = w.upgrade() {
                drop(w.bank_pop());
            }
        })))
    };
    let mut adv = Spec {
        wakes: wakes.clone(),
        ..Spec::default()
    };
    match kind {
        1 => adv.panic_on = Some(always),
        2 => adv.panic_on = Some(second_only),
        3 => adv.drop_panics = true,
        4 => {
            adv.panic_on = Some(always);
            adv.on_wake = give_back(world);
        }
        5 => {
            adv.drop_panics = true;
            adv.on_drop = give_back(world);
        }
        _ => {}
    }
    waker(adv)
}

/// Polls `p` with a fresh waker of its kind (or a quiet one); `true` once it ended.
fn poll_pending(world: &Arc<World>, p: &mut Pending, quiet: bool, held: &mut Vec<Held>) -> bool {
    let w = if quiet {
        Waker::noop().clone()
    } else {
        kind_waker(world, p.kind, &p.wakes)
    };
    let polled = catch_unwind(AssertUnwindSafe(|| poll_once(&mut p.fut, &w)));
    if polled.is_err() {
        world.caught.fetch_add(1, Ordering::SeqCst);
    }
    let done = match polled {
        Ok(Poll::Ready(r)) => {
            if p.was_pending && p.wakes.load(Ordering::SeqCst) == 0 {
                let mut unwoken = world.unwoken.lock().unwrap_or_else(PoisonError::into_inner);
                unwoken.push(p.wakes.clone());
            }
            // Resolved once: a poll after the outcome answers `Cancelled`, never again.
            let again = catch_unwind(AssertUnwindSafe(|| poll_once(&mut p.fut, Waker::noop())));
            if !matches!(again, Ok(Poll::Ready(Err(AcquireError::Cancelled)))) {
                world.twice.fetch_add(1, Ordering::SeqCst);
            }
            if let Ok(permit) = r {
                world.granted.fetch_add(1, Ordering::SeqCst);
                world.in_use.hold(p.q, permit.amount());
                held.push(Held {
                    q: p.q,
                    permit: Some(permit),
                    in_use: world.in_use.clone(),
                });
            }
            true
        }
        // A poll that panicked (a replaced waker's drop) recorded its waker all the same.
        Ok(Poll::Pending) | Err(_) => {
            p.was_pending = true;
            false
        }
    };
    world.guarded(move || drop(w));
    done
}

fn worker(world: Arc<World>, seed: u64, ops: usize, expiries: bool) {
    let rt = idle_runtime();
    let guard = rt.enter();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut pending: Vec<Pending> = Vec::new();
    let mut held: Vec<Held> = Vec::new();
    for _ in 0..ops {
        let q = rng.gen_range(0..QUEUES);
        match rng.gen_range(0..100) {
            0..=19 => {
                let deadline = if expiries && rng.gen_bool(0.3) {
                    Instant::now() + Duration::from_micros(rng.gen_range(0..3000))
                } else {
                    far()
                };
                let amount = if rng.gen_bool(0.1) {
                    LOCAL
                } else {
                    rng.gen_range(1..=3)
                };
                let Ok(fut) = catch_unwind(AssertUnwindSafe(|| {
                    world.queues[q].acquire_async(amount, deadline)
                })) else {
                    continue; // see the `register` tests above
                };
                world.created.fetch_add(1, Ordering::SeqCst);
                let mut p = Pending {
                    q,
                    fut,
                    kind: rng.gen_range(0..KINDS),
                    wakes: Arc::default(),
                    was_pending: false,
                };
                if poll_pending(&world, &mut p, false, &mut held) {
                    world.ended.fetch_add(1, Ordering::SeqCst);
                } else {
                    pending.push(p);
                }
            }
            20..=39 if !pending.is_empty() => {
                let i = rng.gen_range(0..pending.len());
                if poll_pending(&world, &mut pending[i], false, &mut held) {
                    pending.swap_remove(i);
                    world.ended.fetch_add(1, Ordering::SeqCst);
                }
            }
            40..=49 => {
                // Every pending future polled, as an executor would after their wake-ups.
                let before = pending.len();
                pending.retain_mut(|p| !poll_pending(&world, p, false, &mut held));
                let n = (before - pending.len()) as u64;
                world.ended.fetch_add(n, Ordering::SeqCst);
            }
            50..=57 if !pending.is_empty() => {
                let p = pending.swap_remove(rng.gen_range(0..pending.len()));
                world.ended.fetch_add(1, Ordering::SeqCst);
                world.guarded(move || drop(p));
            }
            58..=74 if !held.is_empty() => {
                let h = held.swap_remove(rng.gen_range(0..held.len()));
                if rng.gen_bool(0.5) {
                    world.guarded(move || drop(h));
                } else {
                    world
                        .bank
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(h);
                }
            }
            75..=82 => {
                let to = if rng.gen_bool(0.5) {
                    GLOBAL
                } else {
                    GLOBAL - 3
                };
                world.guarded(|| world.global.set_capacity(to));
            }
            83..=92 => {
                world.guarded(|| world.queues[q].advance());
            }
            93..=95 => {
                world.guarded(|| drop(world.bank_pop()));
            }
            96 => {
                // A panic that unwinds through futures and permits: their drops run then.
                let n = rng.gen_range(0..=pending.len());
                let doomed: Vec<Pending> = pending.drain(..n).collect();
                world.ended.fetch_add(n as u64, Ordering::SeqCst);
                let k = rng.gen_range(0..=held.len());
                let doomed_held: Vec<Held> = held.drain(..k).collect();
                world.guarded(move || {
                    let _dropped_by_the_panic = (doomed, doomed_held);
                    panic!("{MARK}: the holder panics");
                });
            }
            _ => {}
        }
    }
    for h in held.drain(..) {
        world.guarded(move || drop(h));
    }
    // What still waits: looked at once more, then dropped.
    for mut p in pending.drain(..) {
        poll_pending(&world, &mut p, true, &mut held);
        world.ended.fetch_add(1, Ordering::SeqCst);
        world.guarded(move || drop(p));
    }
    for h in held.drain(..) {
        world.guarded(move || drop(h));
    }
    drop(guard);
    world.guarded(move || drop(rt));
}

pub fn many_threads(expiries: bool) {
    for round in 0..6u64 {
        let global = Limit::new(GLOBAL);
        let world = Arc::new(World {
            queues: (0..QUEUES).map(|_| under(&global, LOCAL)).collect(),
            global,
            in_use: Arc::default(),
            bank: Mutex::new(Vec::new()),
            created: AtomicU64::new(0),
            ended: AtomicU64::new(0),
            unwoken: Mutex::default(),
            caught: AtomicU64::new(0),
            granted: AtomicU64::new(0),
            twice: AtomicU64::new(0),
        });
        let w = world.clone();
        within("the threads", move || {
            let handles: Vec<_> = (0..3u64)
                .map(|t| {
                    let w = w.clone();
                    thread::spawn(move || worker(w, round * 16 + t, 1000, expiries))
                })
                .collect();
            for h in handles {
                h.join().expect("a worker's own code panicked");
            }
        });
        while let Some(h) = world.bank_pop() {
            world.guarded(move || drop(h));
        }
        world.guarded(|| world.global.set_capacity(GLOBAL));
        assert!(
            !world.in_use.over.load(Ordering::SeqCst),
            "round {round}: over-granted"
        );
        assert_eq!(
            world.ended.load(Ordering::SeqCst),
            world.created.load(Ordering::SeqCst),
            "round {round}: every request ends once"
        );
        assert_eq!(
            world.twice.load(Ordering::SeqCst),
            0,
            "round {round}: resolved twice"
        );
        let unwoken = world.unwoken.lock().unwrap_or_else(PoisonError::into_inner);
        let never = unwoken.iter().filter(|w| w.load(Ordering::SeqCst) == 0);
        assert_eq!(never.count(), 0, "round {round}: resolved, never woken");
        for q in &world.queues {
            assert_back(q, LOCAL);
        }
        assert_eq!(world.global.available(), GLOBAL, "round {round}");
        let (caught, granted) = (
            world.caught.load(Ordering::SeqCst),
            world.granted.load(Ordering::SeqCst),
        );
        assert!(
            caught > 50 && granted > 30,
            "round {round}: {caught} panics caught, {granted} grants: too few to test"
        );
        eprintln!("round {round}: {caught} panics caught, {granted} grants");
    }
}
