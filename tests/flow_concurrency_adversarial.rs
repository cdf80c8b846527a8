//! Adversarial checks of the per-queue concurrency limit (`set_concurrency`, `concurrency`)
//! against its documented behaviour, alone and with holds and rates changing at run time.
//! Time is simulated: every `now` is an explicit `Instant`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tickwheel::sync::{RateLimit, Scheduler};

mod support;

use support::flow::{Sched, fill, fill_with, held, limited, ms, sched, take_batch};

/// Counts a `Due` of queue `q` into `flying`, and records a fault when that puts more than
/// `limits[q]` in flight.
fn count_in(flying: &[AtomicUsize], limits: &[usize], q: usize, faults: &Mutex<Vec<String>>) {
    let f = flying[q].fetch_add(1, Ordering::SeqCst) + 1;
    if f > limits[q] {
        faults
            .lock()
            .unwrap()
            .push(format!("q{q}: {f} in flight > {}", limits[q]));
    }
}

/// Several threads pop and finish out of order, retry, drop half-taken batches and
/// panic in handlers; the in-flight count per limited queue never exceeds its limit,
/// and every timer ends exactly once.
#[test]
fn concurrency_limit_never_exceeded_under_threads() {
    for shards in [1, 2, 64] {
        let t0 = Instant::now();
        let s = Arc::new(sched(shards, t0));
        let limits = [1usize, 2, 3, 5];
        for (q, l) in limits.iter().enumerate() {
            s.set_concurrency(&(q as u8), Some(*l));
        }
        let n = 2000u64;
        for id in 0..n {
            s.schedule((id % 4) as u8, id, t0 + Duration::from_micros(id % 50), id)
                .unwrap();
        }
        let flying: Arc<Vec<AtomicUsize>> = Arc::new((0..4).map(|_| AtomicUsize::new(0)).collect());
        let done = Arc::new(Mutex::new(HashMap::<u64, u32>::new()));
        let faults = Arc::new(Mutex::new(Vec::<String>::new()));
        let retries = Arc::new(AtomicUsize::new(0));
        let mut threads = Vec::new();
        for t in 0..4u64 {
            let (s, flying, done, faults, retries) = (
                Arc::clone(&s),
                Arc::clone(&flying),
                Arc::clone(&done),
                Arc::clone(&faults),
                Arc::clone(&retries),
            );
            threads.push(std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(t + 7 * shards as u64);
                let mut open = Vec::new();
                let mut now = t0 + ms(1);
                let mut idle = 0;
                while idle < 20_000 {
                    if done.lock().unwrap().len() as u64 == n {
                        break;
                    }
                    let mut batch = s.pop_due(now, rng.gen_range(1..6));
                    if batch.is_empty() && open.is_empty() {
                        idle += 1;
                        now += Duration::from_micros(1);
                        std::thread::yield_now();
                    }
                    let take = rng.gen_range(0..=batch.len());
                    for _ in 0..take {
                        let Some(due) = batch.next() else { break };
                        count_in(&flying, &limits, usize::from(*due.queue()), &faults);
                        open.push(due);
                    }
                    drop(batch); // untaken ones go back
                    // Finish a random subset, out of order.
                    while !open.is_empty() && rng.gen_bool(0.6) {
                        let i = rng.gen_range(0..open.len());
                        let due = open.swap_remove(i);
                        let q = usize::from(*due.queue());
                        let id = *due.id();
                        match rng.gen_range(0..10) {
                            0 if retries.load(Ordering::SeqCst) < 500 => {
                                retries.fetch_add(1, Ordering::SeqCst);
                                flying[q].fetch_sub(1, Ordering::SeqCst);
                                // Decrement first: the slot is free once retry_at returns,
                                // so counting after would race with a new hand-out.
                                due.retry_at(now).unwrap();
                            }
                            1 => {
                                // A panicking handler: the Due is dropped in the unwind.
                                flying[q].fetch_sub(1, Ordering::SeqCst);
                                *done.lock().unwrap().entry(id).or_default() += 1;
                                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(
                                    move || {
                                        let _d = due;
                                        panic!("handler fails");
                                    },
                                ));
                                assert!(r.is_err());
                            }
                            _ => {
                                flying[q].fetch_sub(1, Ordering::SeqCst);
                                *done.lock().unwrap().entry(id).or_default() += 1;
                                drop(due);
                            }
                        }
                    }
                }
                for due in open {
                    let q = usize::from(*due.queue());
                    flying[q].fetch_sub(1, Ordering::SeqCst);
                    *done.lock().unwrap().entry(*due.id()).or_default() += 1;
                }
            }));
        }
        std::panic::set_hook(Box::new(|_| {}));
        for t in threads {
            t.join().unwrap();
        }
        let _ = std::panic::take_hook();
        // Each thread keeps its own clock and stops after 20 000 idle polls, so a timer
        // retried at one thread's `now` can be due later than the clocks of the threads still
        // running reach before they stop. One thread at a time past every clock hands out
        // what is left, still counted against the limits; a lost timer stays missing.
        let end = t0 + Duration::from_secs(3600);
        loop {
            let batch = s.pop_due(end, 64);
            if batch.is_empty() {
                break;
            }
            for due in batch {
                let q = usize::from(*due.queue());
                count_in(&flying, &limits, q, &faults);
                flying[q].fetch_sub(1, Ordering::SeqCst);
                *done.lock().unwrap().entry(*due.id()).or_default() += 1;
            }
        }
        let faults = faults.lock().unwrap();
        assert!(
            faults.is_empty(),
            "shards {shards}: {:?}",
            &faults[..faults.len().min(5)]
        );
        let done = done.lock().unwrap();
        assert_eq!(done.len() as u64, n, "shards {shards}: every timer ended");
        assert!(done.values().all(|&c| c == 1), "exactly once");
        assert_eq!((s.len(), s.in_flight_len()), (0, 0));
    }
}

#[test]
fn concurrency_changes_at_run_time() {
    let t0 = Instant::now();
    let s = sched(8, t0);
    fill_with(&s, 1, 10, |id| t0 + ms(id));
    let now = t0 + ms(20);
    s.set_concurrency(&1, Some(2));
    let a: Vec<_> = s.pop_due(now, 100).collect();
    assert_eq!(a.iter().map(|d| *d.id()).collect::<Vec<_>>(), [0, 1]);
    assert_eq!(s.queue_counts(&1).in_flight, 2);
    // Raise: one more slot, earliest parked one first.
    s.set_concurrency(&1, Some(3));
    let b: Vec<_> = s.pop_due(now, 100).collect();
    assert_eq!(b.iter().map(|d| *d.id()).collect::<Vec<_>>(), [2]);
    // Lower below in flight: nothing more, even after one ends.
    s.set_concurrency(&1, Some(1));
    drop(b);
    assert_eq!(s.pop_due(now, 100).len(), 0, "2 in flight, limit 1");
    let mut a = a;
    a.pop();
    assert_eq!(s.pop_due(now, 100).len(), 0, "1 in flight, limit 1");
    // Zero: nothing, even with none in flight.
    s.set_concurrency(&1, Some(0));
    drop(a);
    assert_eq!(s.queue_counts(&1).in_flight, 0);
    assert_eq!(s.pop_due(now, 100).len(), 0, "limit 0");
    assert_eq!(
        s.pop_due_queue(&1, now, 100).len(),
        0,
        "limit 0 via pop_due_queue"
    );
    // Lift: everything left, in order.
    s.set_concurrency(&1, None);
    let rest: Vec<u64> = s.pop_due(now, 100).map(|d| *d.id()).collect();
    assert_eq!(rest, (3..10).collect::<Vec<_>>());
    assert_eq!(s.len(), 0);
}

#[test]
fn concurrency_edge_values() {
    let t0 = Instant::now();
    let s = limited(2, t0, usize::MAX, 50);
    drop(take_batch(&s, t0, usize::MAX, 50, "no limit"));
    assert_eq!(s.queue_counts(&1).in_flight, 0);
}

/// Documented: a limit of `usize::MAX` is no limit and reads back `None`; all members
/// come out at once.
#[test]
fn concurrency_usize_max_is_no_limit() {
    let t0 = Instant::now();
    let s = limited(2, t0, usize::MAX, 50);
    assert_eq!(s.concurrency(&1), None);
    s.set_concurrency(&1, Some(usize::MAX - 1));
    assert_eq!(s.concurrency(&1), Some(usize::MAX - 1));
    s.set_concurrency(&1, Some(usize::MAX));
    let _all = take_batch(&s, t0, 100, 50, "no limit");
    assert_eq!(s.queue_counts(&1).parked, 0);
}

/// Several dispatcher threads on one scheduler hand timers to workers that finish out of
/// order; some handlers panic. A queue's in-flight count never passes its limit, and
/// every timer is delivered or ends in a panic exactly once.
#[test]
fn concurrency_limit_with_several_dispatchers_and_panicking_handlers() {
    let s: Arc<Sched> = Arc::new(Scheduler::builder().shards(4).build());
    let limits = [1usize, 2, 4];
    for (q, l) in limits.iter().enumerate() {
        s.set_concurrency(&(q as u8), Some(*l));
    }
    let flying: Arc<Vec<AtomicUsize>> = Arc::new((0..3).map(|_| AtomicUsize::new(0)).collect());
    let faults = Arc::new(Mutex::new(Vec::<String>::new()));
    let (work_tx, work_rx) = std::sync::mpsc::channel::<tickwheel::sync::Due<u8, u64, u64>>();
    let work_rx = Arc::new(Mutex::new(work_rx));
    let (end_tx, end_rx) = std::sync::mpsc::channel::<u64>();
    let mut dispatchers = Vec::new();
    for _ in 0..3 {
        let (flying, faults, work_tx, end_tx) = (
            Arc::clone(&flying),
            Arc::clone(&faults),
            work_tx.clone(),
            end_tx.clone(),
        );
        dispatchers.push(s.spawn_dispatcher(move |due| {
            let q = usize::from(*due.queue());
            count_in(&flying, &limits, q, &faults);
            if due.value() % 7 == 0 {
                flying[q].fetch_sub(1, Ordering::SeqCst);
                end_tx.send(*due.id()).unwrap();
                panic!("handler fails on {}", due.id()); // the Due drops in the unwind
            }
            work_tx.send(due).unwrap();
        }));
    }
    drop((work_tx, end_tx.clone()));
    let mut workers = Vec::new();
    for w in 0..3u64 {
        let (rx, flying, end_tx) = (Arc::clone(&work_rx), Arc::clone(&flying), end_tx.clone());
        workers.push(std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(w);
            let mut held: Vec<tickwheel::sync::Due<u8, u64, u64>> = Vec::new();
            loop {
                let next = rx.lock().unwrap().recv_timeout(Duration::from_millis(2));
                match next {
                    Ok(due) => held.push(due),
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) if held.is_empty() => {
                        return;
                    }
                    Err(_) => {}
                }
                // Finish a random one of those held: out of order.
                if !held.is_empty() && (rng.gen_bool(0.5) || next_is_idle(&held)) {
                    let due = held.swap_remove(rng.gen_range(0..held.len()));
                    let q = usize::from(*due.queue());
                    let id = *due.id();
                    flying[q].fetch_sub(1, Ordering::SeqCst);
                    drop(due);
                    end_tx.send(id).unwrap();
                }
            }
        }));
    }
    drop(end_tx);
    std::panic::set_hook(Box::new(|_| {}));
    let n = 600u64;
    let now = Instant::now();
    for id in 0..n {
        s.schedule((id % 3) as u8, id, now, id).unwrap();
    }
    let mut ended = HashMap::<u64, u32>::new();
    while (ended.len() as u64) < n {
        let id = end_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("a timer was lost");
        *ended.entry(id).or_default() += 1;
    }
    let panics: u64 = dispatchers.iter().map(|d| d.panics()).sum();
    for d in dispatchers {
        d.shutdown();
    }
    let _ = std::panic::take_hook();
    assert_eq!(panics, (0..n).filter(|v| v % 7 == 0).count() as u64);
    let faults = faults.lock().unwrap();
    assert!(faults.is_empty(), "{:?}", &faults[..faults.len().min(5)]);
    assert!(ended.values().all(|&c| c == 1));
    assert_eq!((s.len(), s.in_flight_len()), (0, 0));
    drop(work_rx);
    for w in workers {
        w.join().unwrap();
    }
}

fn next_is_idle<T>(held: &[T]) -> bool {
    held.len() > 3
}

#[test]
fn release_under_a_concurrency_limit_and_rate_changes_at_run_time() {
    let t0 = Instant::now();
    let s = held(8, t0);
    s.set_concurrency(&1, Some(1));
    fill(&s, 1, 4, t0);
    assert_eq!(s.pop_due(t0, 10).len(), 0);
    s.release_queue(&1);
    let first = take_batch(&s, t0, 10, 1, "released, but limit 1");
    s.set_concurrency(&1, Some(0));
    drop(first);
    assert_eq!(s.pop_due(t0, 10).len(), 0, "limit 0 after release");
    s.set_concurrency(&1, None);
    s.set_rate(&1, Some(RateLimit::per_second(1)));
    let a: Vec<u64> = s.pop_due(t0, 10).map(|d| *d.id()).collect();
    assert_eq!(a, [1], "rate 1/s");
    assert!(s.queue_counts(&1).throttled);
    // Lifting the rate takes effect at once.
    s.set_rate(&1, None);
    let b: Vec<u64> = s.pop_due(t0 + ms(1), 10).map(|d| *d.id()).collect();
    assert_eq!(b, [2, 3], "rate lifted: the throttled ones at once");
    assert_eq!(s.len(), 0);
}
