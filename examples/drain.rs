//! Two threads schedule retries into per-destination queues, a dispatcher thread delivers the
//! due ones, and a third thread keeps draining one destination's queue (an operator rerouting
//! it) while the dispatcher is busy. At the end it prints the counts that show every message
//! ended exactly once: delivered, or taken back by a drain — none lost, none doubled.
//!
//! ```sh
//! cargo run --example drain
//! ```
//!
//! `tests/scheduler_example.rs` runs [`run`] at a smaller size and checks the same counts.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tickwheel::sync::Scheduler;

const PER_PRODUCER: u64 = 20_000;
const DESTINATIONS: [&str; 3] = ["example.com", "example.org", "example.net"];
const DRAINED: &str = "example.com";

/// What happened to the messages of one run.
#[derive(Debug)]
pub struct Counts {
    pub scheduled: usize,
    pub delivered: usize,
    pub drained: usize,
    /// Members a drain found in flight (left to the dispatcher, delivered by it).
    pub seen_in_flight: usize,
    pub drains: usize,
    /// Messages that ended neither delivered nor drained.
    pub lost: usize,
    /// Messages that ended twice.
    pub doubled: usize,
}

fn main() {
    let c = run(PER_PRODUCER);
    println!("scheduled            {}", c.scheduled);
    println!("delivered            {}", c.delivered);
    println!("drained ({DRAINED}) {} in {} drains", c.drained, c.drains);
    println!(
        "  in flight at a drain, left to the dispatcher: {}",
        c.seen_in_flight
    );
    println!("delivered + drained  {}", c.delivered + c.drained);
    println!("lost                 {}", c.lost);
    println!("doubled              {}", c.doubled);
    if c.lost != 0 || c.doubled != 0 || c.delivered + c.drained != c.scheduled {
        eprintln!("exactly-once violated");
        std::process::exit(1);
    }
}

/// Two producers schedule `per_producer` messages each while the drainer works; returns
/// once every message has ended.
pub fn run(per_producer: u64) -> Counts {
    let sched: Arc<Scheduler<&'static str, u64, String>> = Arc::new(Scheduler::new());
    let delivered = Arc::new(Mutex::new(Vec::new()));

    // The dispatcher: phase one (pop) and phase two (deliver) run on its thread.
    let log = Arc::clone(&delivered);
    let dispatcher = sched.spawn_dispatcher(move |due| {
        let id = *due.id();
        let _message = due.into_value(); // "send" it; the id is done from here on
        log.lock().expect("delivery log").push(id);
    });

    let producing = AtomicBool::new(true);
    let (mut drained, mut seen_in_flight, mut drains) = (Vec::new(), 0usize, 0usize);
    std::thread::scope(|scope| {
        let producers: Vec<_> = (0..2u64)
            .map(|p| {
                let sched = &sched;
                scope.spawn(move || {
                    for i in 0..per_producer {
                        let id = p * 1_000_000 + i;
                        let queue = DESTINATIONS[(i % 3) as usize];
                        let at = Instant::now() + Duration::from_millis(i % 40);
                        let message = format!("message {id} for {queue}");
                        sched
                            .schedule(queue, id, at, message)
                            .expect("ids are unique, so none is pending or in flight");
                    }
                })
            })
            .collect();

        // The operator: drain one destination over and over while the others work, and once
        // more after they stop (they may finish before this thread first runs).
        let drainer = scope.spawn(|| {
            loop {
                let last = !producing.load(Ordering::Relaxed);
                let d = sched.drain_queue(&DRAINED);
                drained.extend(d.cancelled.into_iter().map(|(id, _message)| id));
                seen_in_flight += d.in_flight.len(); // these stay the dispatcher's
                drains += 1;
                if last {
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        for p in producers {
            p.join().expect("producer");
        }
        producing.store(false, Ordering::Relaxed);
        drainer.join().expect("drainer");
    });

    // Let the dispatcher deliver what is left (all due within 40 ms).
    while !sched.is_empty() || sched.in_flight_len() > 0 {
        std::thread::sleep(Duration::from_millis(5));
    }
    dispatcher.shutdown();

    let delivered = delivered.lock().expect("delivery log");
    let scheduled = 2 * per_producer as usize;
    let mut ended = HashSet::new();
    let doubled = delivered
        .iter()
        .chain(&drained)
        .filter(|id| !ended.insert(**id))
        .count();
    Counts {
        scheduled,
        delivered: delivered.len(),
        drained: drained.len(),
        seen_in_flight,
        drains,
        lost: scheduled.saturating_sub(ended.len()),
        doubled,
    }
}
