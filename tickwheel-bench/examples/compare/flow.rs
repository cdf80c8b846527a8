//! The flow-control workload (`--flow`): what ineligible queues cost `pop_due`.
//!
//! 10 000 queues; 1 000 of them eligible, each with `PER_QUEUE` timers due. In the **flow**
//! variant the other 9 000 also hold `PER_QUEUE` due timers each, but are ineligible: half
//! held (`hold_queue`), half at their concurrency limit of 1 (one `Due` of each kept in
//! flight). Their timers were met and parked by an earlier `pop_due` (untimed, as in a
//! steady state: a held queue's due timers are parked once). In the **empty** variant
//! those 9 000 queues have no timers. Timed: `pop_due` in batches of 1 024 until the
//! eligible timers are all handed out (each `Due` taken and dropped); the figure is ns per
//! timer handed out. The target: flow ÷ empty ≤ 1.5 (ineligible queues are never scanned).
//!
//! A third figure, **first look**, times the same with the 9 000 queues' timers not parked
//! yet (all due at once, parked by the timed pops): the one-time cost of parking, paid per
//! ineligible timer.
//!
//! A fourth, **not due**, gives the 9 000 queues as many timers (and as many in flight) as
//! the flow variant, due an hour later and without flow control: what the same number of
//! live timers costs the pops (a larger id map and slab, more cache misses), apart from
//! anything holds or limits do. Flow ÷ not due is what flow control itself costs.

use std::time::{Duration, Instant};

use tickwheel::sync::Scheduler;

const QUEUES: u32 = 10_000;
const ELIGIBLE: u32 = 1_000;
const PER_QUEUE: u32 = 50;
const BATCH: usize = 1024;

type Sched = Scheduler<u32, u32, u32>;

/// Which variant a repetition measures.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    Empty,
    Flow,
    FirstLook,
    /// The 9 000 queues hold as many timers (and as many in flight) as in `Flow`, not due
    /// and without flow control: what the same number of live timers costs the pops.
    Waiting,
}

/// One repetition: ns per timer handed out.
fn run(variant: Variant) -> f64 {
    let t0 = Instant::now();
    let sched: Sched = Scheduler::builder().origin(t0).build();
    let ms = |n: u64| t0 + Duration::from_millis(n);
    let mut id = 0u32;
    let mut open = Vec::new();
    if variant != Variant::Empty {
        for queue in ELIGIBLE..QUEUES {
            if variant == Variant::Waiting {
                break;
            }
            if queue % 2 == 0 {
                sched.hold_queue(&queue);
            } else {
                sched.set_concurrency(&queue, Some(1));
            }
        }
        // The limited queues each get one timer in flight first (kept open).
        for queue in (ELIGIBLE..QUEUES).filter(|q| q % 2 == 1) {
            sched.schedule(queue, id, ms(0), 0).expect("a new id");
            id += 1;
        }
        let batch: Vec<_> = sched.pop_due(ms(0), usize::MAX).collect();
        open.extend(batch);
        let at = match variant {
            Variant::Flow => 1,
            Variant::Waiting => 3_600_000,
            _ => 2,
        };
        for queue in ELIGIBLE..QUEUES {
            for _ in 0..PER_QUEUE {
                sched.schedule(queue, id, ms(at), 0).expect("a new id");
                id += 1;
            }
        }
        if variant == Variant::Flow {
            // Untimed: the first look parks them all (nothing eligible is due yet).
            let batch = sched.pop_due(ms(1), usize::MAX);
            assert!(batch.is_empty(), "the ineligible queues hand nothing out");
        }
    }
    for n in 0..PER_QUEUE {
        for queue in 0..ELIGIBLE {
            sched.schedule(queue, id, ms(2), n).expect("a new id");
            id += 1;
        }
    }
    let expected = (ELIGIBLE * PER_QUEUE) as usize;
    let started = Instant::now();
    let mut handed = 0;
    loop {
        let batch = sched.pop_due(ms(2), BATCH);
        if batch.is_empty() {
            break;
        }
        for due in batch {
            handed += 1;
            drop(due);
        }
    }
    let elapsed = started.elapsed();
    assert_eq!(handed, expected, "every eligible timer, and no other");
    drop(open);
    elapsed.as_nanos() as f64 / handed as f64
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Runs `reps` repetitions of each variant, interleaved, and prints the medians and the
/// ratios.
pub fn report(reps: usize) {
    let (mut empty, mut flow, mut first) = (Vec::new(), Vec::new(), Vec::new());
    let (mut ratios, mut waiting, mut flow_by_waiting) = (Vec::new(), Vec::new(), Vec::new());
    run(Variant::Empty); // warm-up
    for _ in 0..reps {
        let e = run(Variant::Empty);
        let f = run(Variant::Flow);
        let w = run(Variant::Waiting);
        first.push(run(Variant::FirstLook) / e);
        ratios.push(f / e);
        waiting.push(w / e);
        flow_by_waiting.push(f / w);
        empty.push(e);
        flow.push(f);
    }
    println!(
        "flow: pop_due ns per timer handed out, {QUEUES} queues, {ELIGIBLE} eligible with {PER_QUEUE} due each; median of {reps}"
    );
    println!(
        "  9 000 queues empty                         {:>8.1}",
        median(empty)
    );
    println!(
        "  9 000 queues held or at their limit, parked {:>8.1}  ({:.2}× empty, target ≤ 1.5×)",
        median(flow),
        median(ratios)
    );
    println!(
        "  9 000 queues with as many timers, not due  {:>8}  ({:.2}× empty; parked ÷ this: {:.2}×)",
        "",
        median(waiting),
        median(flow_by_waiting)
    );
    println!(
        "  the same, not parked yet (first look)       {:>8}  ({:.2}× empty: parking {} timers once)",
        "",
        median(first),
        (QUEUES - ELIGIBLE) * PER_QUEUE
    );
}
