//! Threads and tasks racing on queues under one global limit, which tells a short queue only
//! when it has room for the least that queue asked for: once the holders let go, every
//! request must be granted (a lost wake-up would wait until its deadline). Capacity is
//! counted in and out. (Each test was shown to catch a planted fault in
//! `src/admission/limit.rs`; the one-thread cases are in `admission_tell_adversarial.rs`.)

mod support;

use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use tickwheel::admission::{
    AcquireError, AdmissionQueue, Limit, Order, Permit, RegisterError, WaitQueue,
};

use support::admission::{RES, under};

/// How long a racing request may wait: only a lost wake-up takes that long, since every
/// holder lets go within milliseconds.
const HANG: Duration = Duration::from_secs(10);

/// The queues of the racing tests: strict and passing, local limits above, at and under
/// the global one.
fn racing_queues(global: &Limit) -> Vec<AdmissionQueue> {
    [
        (6, Order::Strict),
        (12, Order::Passing),
        (9, Order::Strict),
        (4, Order::Passing),
    ]
    .into_iter()
    .map(|(cap, order)| AdmissionQueue::with_options(cap, Some(global.clone()), order, RES))
    .collect()
}

/// The end of a racing run: nothing went wrong, every unit is back in the global limit (12)
/// and in each of [`racing_queues`], and nothing waits.
fn all_back(seed: u64, failures: &Failures, global: &Limit, queues: &[AdmissionQueue]) {
    let failures = failures.lock().unwrap();
    assert!(
        failures.is_empty(),
        "seed {seed}: not granted: {failures:?}"
    );
    assert_eq!(global.available(), 12, "seed {seed}: every unit back");
    for (q, cap) in queues.iter().zip([6, 12, 9, 4]) {
        assert_eq!((q.available(), q.waiting()), (cap, 0));
    }
}

/// What one racing thread or task saw go wrong.
type Failures = Arc<Mutex<Vec<String>>>;

/// A request's end in a racing test: a grant (held a moment and given back) or a refusal
/// while the capacity was lowered. Anything else is recorded: a request that expired after
/// [`HANG`] was never woken though capacity came back.
fn ended(r: Result<Permit, AcquireError>, amount: u64, q: usize, failures: &Failures) {
    match r {
        Ok(p) => {
            for _ in 0..(amount % 3) {
                std::thread::yield_now();
            }
            drop(p);
        }
        Err(AcquireError::Refused(RegisterError::TooLarge { .. })) => {}
        Err(e) => failures
            .lock()
            .unwrap()
            .push(format!("{amount} on queue {q}: {e:?}")),
    }
}

/// One racing thread's round: blocking acquires, waiters dropped while they wait or just
/// granted, a sequential queue taking and giving back, and short-lived queues of its own.
fn racing_round(
    rng: &mut rand::rngs::StdRng,
    global: &Limit,
    queues: &[AdmissionQueue],
    seq: &Mutex<WaitQueue<()>>,
    failures: &Failures,
) {
    use rand::Rng;
    for _ in 0..rng.gen_range(1..=4) {
        if !failures.lock().unwrap().is_empty() {
            return; // a hang costs `HANG` once, not once a request
        }
        let q = rng.gen_range(0..queues.len());
        let cap = [6, 12, 9, 4][q];
        let amount = rng.gen_range(1..=cap);
        match rng.gen_range(0..10) {
            0..=4 => ended(
                queues[q].acquire(amount, Instant::now() + HANG),
                amount,
                q,
                failures,
            ),
            5 | 6 => {
                // Dropped while it waits (a head cancelled) or once granted.
                if let Ok(w) = queues[q].register(amount, Instant::now() + HANG) {
                    std::thread::yield_now();
                    drop(w);
                }
            }
            7 => {
                let mut seq = seq.lock().unwrap();
                let mut out = Vec::new();
                if let Ok(t) = seq.register(amount.min(8), u64::MAX, (), &mut out) {
                    // Granted or not, given back (or cancelled) at once: nobody tells it.
                    std::thread::yield_now();
                    let _ = seq.cancel(t, &mut out);
                }
                for r in out {
                    let _ = seq.cancel(r.ticket, &mut Vec::new());
                }
            }
            _ => {
                let own = under(global, 12);
                let r = own.acquire(amount, Instant::now() + HANG);
                drop(own); // a queue gone while its grant is held
                ended(r, amount, 99, failures);
            }
        }
    }
}

/// Threads race on four queues under one limit, round after round, while the capacity is
/// lowered and raised. Every request is granted: none waits for its far deadline.
fn race_threads(seed: u64) {
    use rand::SeedableRng;
    const THREADS: usize = 5;
    const ROUNDS: u64 = 600;
    let global = Limit::new(12);
    let queues = racing_queues(&global);
    let seq = Mutex::new(WaitQueue::with_options(
        8,
        Some(global.clone()),
        Order::Strict,
    ));
    let failures: Failures = Arc::default();
    let barrier = Barrier::new(THREADS + 1);
    std::thread::scope(|s| {
        for t in 0..THREADS as u64 {
            let (global, queues, seq, failures, barrier) =
                (&global, &queues, &seq, &failures, &barrier);
            s.spawn(move || {
                for round in 0..ROUNDS {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ (t << 32) ^ round);
                    racing_round(&mut rng, global, queues, seq, failures);
                    barrier.wait();
                }
            });
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(!seed);
        for _ in 0..ROUNDS {
            use rand::Rng;
            if rng.gen_bool(0.3) {
                global.set_capacity(rng.gen_range(4..12));
                std::thread::yield_now();
                global.set_capacity(12);
            }
            barrier.wait();
        }
    });
    all_back(seed, &failures, &global, &queues);
}

#[test]
fn racing_threads_are_all_granted() {
    for seed in [1, 2, 3] {
        race_threads(seed);
    }
}

/// Tasks on a two-worker runtime (`acquire_async`, futures dropped while they wait) race
/// with threads (`acquire`) on the same queues and limit. Every request is granted.
#[cfg(feature = "tokio")]
#[test]
fn racing_tasks_and_threads_are_all_granted() {
    use rand::{Rng, SeedableRng};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    for seed in [7u64, 8] {
        let global = Limit::new(12);
        let queues = Arc::new(racing_queues(&global));
        let failures: Failures = Arc::default();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads: Vec<_> = (0..2u64)
            .map(|t| {
                let (queues, failures, stop) = (queues.clone(), failures.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ (t << 40));
                    while !stop.load(std::sync::atomic::Ordering::Relaxed)
                        && failures.lock().unwrap().is_empty()
                    {
                        let q = rng.gen_range(0..queues.len());
                        let amount = rng.gen_range(1..=[6, 12, 9, 4][q]);
                        let r = queues[q].acquire(amount, Instant::now() + HANG);
                        ended(r, amount, q, &failures);
                    }
                })
            })
            .collect();
        rt.block_on(async {
            for round in 0..300u64 {
                if !failures.lock().unwrap().is_empty() {
                    break;
                }
                let tasks: Vec<_> = (0..8u64)
                    .map(|t| {
                        let (queues, failures) = (queues.clone(), failures.clone());
                        let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ (round << 8) ^ t);
                        tokio::spawn(async move {
                            for _ in 0..rng.gen_range(1..=4) {
                                if !failures.lock().unwrap().is_empty() {
                                    return;
                                }
                                let q = rng.gen_range(0..queues.len());
                                let amount = rng.gen_range(1..=[6, 12, 9, 4][q]);
                                let fut = queues[q].acquire_async(amount, Instant::now() + HANG);
                                if rng.gen_bool(0.2) {
                                    // Dropped after a poll or two: cancelled, or given back.
                                    let _ =
                                        tokio::time::timeout(Duration::from_micros(50), fut).await;
                                    continue;
                                }
                                match fut.await {
                                    Ok(p) => {
                                        tokio::task::yield_now().await;
                                        drop(p);
                                    }
                                    Err(e) => failures
                                        .lock()
                                        .unwrap()
                                        .push(format!("task: {amount} on queue {q}: {e:?}")),
                                }
                            }
                        })
                    })
                    .collect();
                for t in tasks {
                    t.await.unwrap();
                }
            }
        });
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in threads {
            t.join().unwrap();
        }
        all_back(seed, &failures, &global, &queues);
    }
}
