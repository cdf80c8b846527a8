//! Threads registering, waiting, cancelling and dropping against two wait queues that share
//! a global limit, while a housekeeping thread advances time. Bounded by the number of
//! operations, not by time; no timing is asserted. At the end: every request resolved
//! exactly once, capacity never over-granted, and all of it back.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng, rngs::StdRng};
use tickwheel::admission::{AcquireError, AdmissionQueue, Limit, Order};

const THREADS: u64 = 4;
const OPS: u64 = 1500;
const LOCAL: u64 = 40;
const GLOBAL: u64 = 60;

#[derive(Default)]
struct Counts {
    registered: AtomicU64,
    refused: AtomicU64,
    granted: AtomicU64,
    expired: AtomicU64,
    cancelled: AtomicU64,
    /// Units held by permits right now, per queue and in all.
    in_use: [AtomicU64; 3],
    over: AtomicBool,
}

fn hold(counts: &Counts, q: usize, amount: u64) {
    let local = counts.in_use[q].fetch_add(amount, Ordering::SeqCst) + amount;
    let global = counts.in_use[2].fetch_add(amount, Ordering::SeqCst) + amount;
    if local > LOCAL || global > GLOBAL {
        counts.over.store(true, Ordering::SeqCst);
    }
}

fn unhold(counts: &Counts, q: usize, amount: u64) {
    counts.in_use[q].fetch_sub(amount, Ordering::SeqCst);
    counts.in_use[2].fetch_sub(amount, Ordering::SeqCst);
}

fn worker(seed: u64, queues: Arc<[AdmissionQueue; 2]>, counts: Arc<Counts>) {
    let mut rng = StdRng::seed_from_u64(seed);
    for _ in 0..OPS {
        let q = rng.gen_range(0..2);
        let amount = rng.gen_range(0..=LOCAL);
        let deadline = Instant::now() + Duration::from_micros(rng.gen_range(0..3000));
        counts.registered.fetch_add(1, Ordering::Relaxed);
        let waiter = match queues[q].register(amount, deadline) {
            Ok(w) => w,
            Err(_) => {
                counts.refused.fetch_add(1, Ordering::Relaxed);
                continue;
            }
        };
        let result = match rng.gen_range(0..4) {
            // Cancel through the queue, then wait: cancelled, or resolved before the cancel.
            0 => {
                queues[q].cancel(waiter.ticket());
                Some(waiter.wait())
            }
            // Drop it unresolved or granted: it must give everything back.
            1 => {
                if rng.gen_bool(0.5) {
                    thread::yield_now();
                }
                drop(waiter);
                counts.cancelled.fetch_add(1, Ordering::Relaxed);
                None
            }
            _ => Some(waiter.wait()),
        };
        match result {
            Some(Ok(permit)) => {
                counts.granted.fetch_add(1, Ordering::Relaxed);
                hold(&counts, q, permit.amount());
                // Hold it a while sometimes, so that others wait, expire and are cancelled.
                if rng.gen_bool(0.5) {
                    thread::sleep(Duration::from_micros(rng.gen_range(0..2000)));
                }
                unhold(&counts, q, permit.amount());
                drop(permit);
            }
            Some(Err(AcquireError::Expired)) => {
                counts.expired.fetch_add(1, Ordering::Relaxed);
            }
            Some(Err(AcquireError::Cancelled)) => {
                counts.cancelled.fetch_add(1, Ordering::Relaxed);
            }
            Some(Err(e)) => unreachable!("registered already, so not refused: {e}"),
            None => {}
        }
    }
}

fn stress(order: Order) {
    let global = Limit::new(GLOBAL);
    let res = Duration::from_micros(200);
    let queues = Arc::new([
        AdmissionQueue::with_options(LOCAL, Some(global.clone()), order, res),
        AdmissionQueue::with_options(LOCAL, Some(global.clone()), order, res),
    ]);
    let counts = Arc::new(Counts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let ticker = {
        let (queues, stop) = (queues.clone(), stop.clone());
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                queues.iter().for_each(AdmissionQueue::advance);
                thread::sleep(Duration::from_micros(200));
            }
        })
    };
    let workers: Vec<_> = (0..THREADS)
        .map(|i| {
            let (queues, counts) = (queues.clone(), counts.clone());
            thread::spawn(move || worker(i, queues, counts))
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    stop.store(true, Ordering::Relaxed);
    ticker.join().expect("ticker");

    let c = |a: &AtomicU64| a.load(Ordering::SeqCst);
    eprintln!(
        "{order:?}: {} registered, {} refused, {} granted, {} expired, {} cancelled",
        c(&counts.registered),
        c(&counts.refused),
        c(&counts.granted),
        c(&counts.expired),
        c(&counts.cancelled)
    );
    let resolved =
        c(&counts.refused) + c(&counts.granted) + c(&counts.expired) + c(&counts.cancelled);
    assert_eq!(
        resolved,
        c(&counts.registered),
        "every request resolved exactly once"
    );
    assert_eq!(c(&counts.registered), THREADS * OPS);
    assert!(
        !counts.over.load(Ordering::SeqCst),
        "capacity never over-granted"
    );
    assert!(c(&counts.granted) > 0, "some grants happened");
    for q in queues.iter() {
        assert_eq!(
            (q.available(), q.held(), q.waiting()),
            (LOCAL, 0, 0),
            "all capacity back"
        );
    }
    assert_eq!(global.available(), GLOBAL, "all global capacity back");
}

#[test]
fn strict_capacity_in_equals_out() {
    stress(Order::Strict);
}

#[test]
fn passing_capacity_in_equals_out() {
    stress(Order::Passing);
}
