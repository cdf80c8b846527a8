//! Flow control under real threads (`tickwheel::sync`): producers, two dispatchers that
//! deliver, retry and drop half-taken batches, a canceller and an operator that holds and
//! releases queues and changes their concurrency limits, all at once. Checked from the
//! test's own ledger (the operator also flushes queues): every timer ends exactly once, no queue ever has more in flight than
//! its limit, and nothing of a queue is handed out by a `pop_due` that started after its
//! hold returned and ended before its release began.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tickwheel::sync::{Cancel, Retried, Scheduler};

type Sched = Scheduler<u8, u64, u64>;

const QUEUES: u8 = 6;
/// Queues 0..3 have a fixed limit, checked; queue 3 has its limit changed at run time (not
/// checked: a lowered limit lets the ones in flight finish); queues 4 and 5 are held and
/// released by the operator.
const LIMITS: [usize; 3] = [1, 2, 3];

#[derive(Default)]
struct Ledger {
    /// Per token: how many times it ended (delivered, cancelled, drained).
    ended: HashMap<u64, u32>,
    scheduled: Vec<u64>,
    faults: Vec<String>,
}

struct World {
    sched: Sched,
    ledger: Mutex<Ledger>,
    tokens: AtomicU64,
    /// Per queue: handed out and not yet dropped, counted by the dispatchers.
    flying: Vec<AtomicUsize>,
    /// Per queue: held with the hold complete (set after `hold_queue` returns, cleared
    /// before `release_queue` starts).
    held: Vec<AtomicBool>,
    stop: AtomicBool,
}

fn producer(w: &World, mut rng: StdRng, t0: Instant, ops: usize) {
    for _ in 0..ops {
        let token = w.tokens.fetch_add(1, Ordering::SeqCst);
        let queue = rng.gen_range(0..QUEUES);
        let at = t0 + Duration::from_micros(rng.gen_range(0..20_000));
        // Ids are tokens: each scheduled once.
        if w.sched.schedule(queue, token, at, token).is_ok() {
            w.ledger.lock().unwrap().scheduled.push(token);
        }
        if rng.gen_ratio(1, 8) {
            std::thread::yield_now();
        }
    }
}

fn dispatcher(w: &World, mut rng: StdRng) {
    while !w.stop.load(Ordering::SeqCst) {
        let held_before: Vec<bool> = w.held.iter().map(|h| h.load(Ordering::SeqCst)).collect();
        let mut batch = w.sched.pop_due(Instant::now(), rng.gen_range(1..8));
        let held_after: Vec<bool> = w.held.iter().map(|h| h.load(Ordering::SeqCst)).collect();
        let mut open = Vec::new();
        let take = rng.gen_range(0..=batch.len());
        for _ in 0..take {
            let Some(due) = batch.next() else { break };
            let q = usize::from(*due.queue());
            if held_before[q] && held_after[q] {
                let fault = format!("queue {q} handed out {} while held", due.id());
                w.ledger.lock().unwrap().faults.push(fault);
            }
            let now = w.flying[q].fetch_add(1, Ordering::SeqCst) + 1;
            if q < LIMITS.len() && now > LIMITS[q] {
                let fault = format!("queue {q}: {now} in flight, limit {}", LIMITS[q]);
                w.ledger.lock().unwrap().faults.push(fault);
            }
            open.push(due);
        }
        drop(batch); // the untaken rest goes back
        for due in open {
            let q = usize::from(*due.queue());
            // Counted out before the slot is given back (the drop or the retry).
            w.flying[q].fetch_sub(1, Ordering::SeqCst);
            if rng.gen_ratio(1, 5) {
                let later = Instant::now() + Duration::from_micros(rng.gen_range(0..2_000));
                assert_eq!(due.retry_at(later), Ok(Retried::Pending));
            } else {
                let token = due.into_value();
                *w.ledger.lock().unwrap().ended.entry(token).or_default() += 1;
            }
        }
    }
}

fn canceller(w: &World, mut rng: StdRng) {
    while !w.stop.load(Ordering::SeqCst) {
        let top = w.tokens.load(Ordering::SeqCst).max(1);
        let id = rng.gen_range(0..top);
        if let Cancel::Cancelled(token) = w.sched.cancel(&id) {
            *w.ledger.lock().unwrap().ended.entry(token).or_default() += 1;
        }
        if rng.gen_ratio(1, 200) {
            let queue = rng.gen_range(0..QUEUES);
            for (_, token) in w.sched.drain_queue(&queue).cancelled {
                *w.ledger.lock().unwrap().ended.entry(token).or_default() += 1;
            }
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}

fn operator(w: &World, mut rng: StdRng) {
    while !w.stop.load(Ordering::SeqCst) {
        let q = rng.gen_range(4..QUEUES);
        w.sched.hold_queue(&q);
        w.held[usize::from(q)].store(true, Ordering::SeqCst);
        std::thread::sleep(Duration::from_micros(rng.gen_range(0..1_000)));
        w.held[usize::from(q)].store(false, Ordering::SeqCst);
        w.sched.release_queue(&q);
        let limit = [None, Some(0), Some(1), Some(4)][rng.gen_range(0..4)];
        w.sched.set_concurrency(&3, limit);
        // Re-setting a checked limit to its value exercises the path without lowering it.
        let q = rng.gen_range(0..3u8);
        w.sched.set_concurrency(&q, Some(LIMITS[usize::from(q)]));
        // A flush of any queue: its pending timers due now, racing the dispatchers.
        w.sched
            .flush_queue(&rng.gen_range(0..QUEUES), Instant::now());
        std::thread::sleep(Duration::from_micros(rng.gen_range(0..500)));
    }
}

fn run(seed: u64) {
    let t0 = Instant::now();
    let w = Arc::new(World {
        sched: Scheduler::builder()
            .shards(4)
            .resolution(Duration::from_micros(100))
            .origin(t0)
            .build(),
        ledger: Mutex::default(),
        tokens: AtomicU64::new(0),
        flying: (0..QUEUES).map(|_| AtomicUsize::new(0)).collect(),
        held: (0..QUEUES).map(|_| AtomicBool::new(false)).collect(),
        stop: AtomicBool::new(false),
    });
    for (q, &limit) in LIMITS.iter().enumerate() {
        w.sched.set_concurrency(&(q as u8), Some(limit));
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let spawn = |f: fn(&World, StdRng), seed: u64| {
        let w = Arc::clone(&w);
        std::thread::spawn(move || f(&w, StdRng::seed_from_u64(seed)))
    };
    let others = vec![
        spawn(dispatcher, rng.r#gen()),
        spawn(dispatcher, rng.r#gen()),
        spawn(canceller, rng.r#gen()),
        spawn(operator, rng.r#gen()),
    ];
    let producers: Vec<_> = (0..2)
        .map(|_| {
            let (w, seed) = (Arc::clone(&w), rng.r#gen());
            std::thread::spawn(move || producer(&w, StdRng::seed_from_u64(seed), t0, 3_000))
        })
        .collect();
    for p in producers {
        p.join().unwrap();
    }
    std::thread::sleep(Duration::from_millis(30));
    w.stop.store(true, Ordering::SeqCst);
    for t in others {
        t.join().unwrap();
    }
    // Everything left: lift every hold and limit, and deliver the rest.
    for q in 0..QUEUES {
        w.sched.release_queue(&q);
        w.sched.set_concurrency(&q, None);
    }
    let end = Instant::now() + Duration::from_secs(1);
    while !w.sched.is_empty() || w.sched.in_flight_len() > 0 {
        for due in w.sched.pop_due(end, usize::MAX) {
            let token = due.into_value();
            *w.ledger.lock().unwrap().ended.entry(token).or_default() += 1;
        }
    }
    let ledger = w.ledger.lock().unwrap();
    assert!(
        ledger.faults.is_empty(),
        "seed {seed}: {:?}",
        &ledger.faults[..ledger.faults.len().min(5)]
    );
    assert!(
        ledger.scheduled.len() > 1_000,
        "seed {seed}: too few scheduled"
    );
    for token in &ledger.scheduled {
        assert_eq!(
            ledger.ended.get(token),
            Some(&1),
            "seed {seed}: token {token}"
        );
    }
    assert_eq!(
        ledger.ended.len(),
        ledger.scheduled.len(),
        "seed {seed}: an unknown token ended"
    );
}

#[test]
fn exactly_once_and_the_limits_hold_under_holds_limits_retries_and_cancels() {
    for seed in 0..4 {
        run(seed);
    }
}
