//! The wake-protocol harness: each atomic access of `signal.rs`'s protocol is a step; a
//! poller that sleeps unwoken must not sleep past a pending deadline. Two broken pollers
//! must be caught.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Wake, Waker};

use super::super::two_shards;
use super::{MS, check_all, id_on, interleavings, steps_of};

#[derive(Debug, Clone, Copy)]
enum WStep {
    Arm,
    Read(usize),
    Lower,
    Decide,
    Insert { id: u64, tick: u64 },
    Announce { tick: u64 },
}

/// How the poller under test arms.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Poller {
    /// The thread dispatcher: arm, epoch checked before sleeping.
    Thread,
    /// An async task: `arm_waker`, woken through its waker.
    Waker,
    /// Broken: never arms (reads the epoch, leaves the watermark alone).
    NoArm,
}

#[derive(Default)]
struct CountWaker(AtomicUsize);

impl Wake for CountWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn wake_run(poller: Poller, first: u64, steps: &[WStep]) -> Result<(), String> {
    let (sched, origin) = two_shards();
    let at = |tick: u64| origin + MS * tick as u32;
    let mut ticks = vec![10];
    sched
        .schedule(0, first, at(10), 0)
        .map_err(|e| e.to_string())?;
    let counter = Arc::new(CountWaker::default());
    let waker = Waker::from(Arc::clone(&counter));
    let signal = Arc::clone(sched.signal());
    let id = signal.new_poller();
    let mut epoch = (poller == Poller::NoArm).then(|| signal.epoch());
    let (mut reads, mut target, mut sleeping) = (Vec::new(), None, None);
    for &step in steps {
        match step {
            WStep::Arm if poller == Poller::Waker => epoch = Some(signal.arm_waker(id, &waker)),
            WStep::Arm if poller == Poller::Thread => epoch = Some(signal.arm()),
            WStep::Arm => {}
            WStep::Read(shard) => reads.push(sched.shard_earliest(shard)),
            WStep::Lower => {
                target = reads.iter().flatten().copied().min();
                if poller != Poller::NoArm {
                    signal.lower(target);
                }
            }
            WStep::Decide => {
                let moved = epoch.is_none_or(|e| signal.moved_since(e));
                // A thread re-checks instead of sleeping; a task returns Pending either way.
                sleeping = (poller == Poller::Waker || !moved).then_some(target);
            }
            WStep::Insert { id, tick } => {
                sched
                    .schedule_locked(0, id, at(tick), 0)
                    .map_err(|e| e.to_string())?;
                ticks.push(tick);
            }
            WStep::Announce { tick } => signal.deadline_added(tick),
        }
    }
    let Some(target) = sleeping else {
        return Ok(());
    };
    let woken = match poller {
        Poller::Waker => counter.0.load(Ordering::SeqCst) > 0,
        Poller::Thread | Poller::NoArm => epoch.is_none_or(|e| signal.moved_since(e)),
    };
    let missed: Vec<u64> = ticks
        .iter()
        .copied()
        .filter(|&t| target.is_none_or(|target| t < target))
        .collect();
    if !woken && !missed.is_empty() {
        return Err(format!(
            "lost wakeup: sleeping until tick {target:?}, not woken, deadlines {missed:?} pending"
        ));
    }
    Ok(())
}

/// The poller and two producers with deadlines before its target (tick 10, on shard 0),
/// one on each shard; with `later`, a third producer whose deadline is after it.
fn wake_threads(poller_steps: Vec<WStep>, later: bool) -> Vec<Vec<WStep>> {
    let producer = |id, tick| vec![WStep::Insert { id, tick }, WStep::Announce { tick }];
    let mut threads = vec![
        poller_steps,
        producer(id_on(0, 1), 3),
        producer(id_on(1, 1), 5),
    ];
    if later {
        threads.push(producer(id_on(1, 2), 30));
    }
    threads
}

const POLLER: [WStep; 5] = [
    WStep::Arm,
    WStep::Read(0),
    WStep::Read(1),
    WStep::Lower,
    WStep::Decide,
];

/// Checks `poller` running [`POLLER`] against the producers (with a later one if `later`)
/// in every interleaving; how many there were.
fn check_poller(poller: Poller, later: bool) -> usize {
    let first = id_on(0, 5);
    check_all(&wake_threads(POLLER.to_vec(), later), |steps| {
        wake_run(poller, first, steps)
    })
}

#[test]
fn wake_protocol_thread_poller_loses_no_wakeup() {
    assert_eq!(check_poller(Poller::Thread, true), 41_580);
}

#[test]
fn wake_protocol_waker_poller_loses_no_wakeup() {
    assert_eq!(check_poller(Poller::Waker, false), 756);
}

/// Counts the interleavings in which `poller` with `steps` loses a wakeup.
fn count_lost(poller: Poller, steps: Vec<WStep>) -> usize {
    let threads = wake_threads(steps, false);
    let first = id_on(0, 5);
    let lens: Vec<usize> = threads.iter().map(Vec::len).collect();
    let mut lost = 0;
    interleavings(&lens, &mut |order| {
        let steps = steps_of(&threads, order);
        lost += usize::from(wake_run(poller, first, &steps).is_err());
    });
    lost
}

#[test]
fn wake_harness_catches_a_poller_that_never_arms() {
    assert!(count_lost(Poller::NoArm, POLLER.to_vec()) > 0);
}

#[test]
fn wake_harness_catches_a_poller_that_arms_after_reading() {
    let late = vec![
        WStep::Read(0),
        WStep::Read(1),
        WStep::Arm,
        WStep::Lower,
        WStep::Decide,
    ];
    assert!(count_lost(Poller::Thread, late) > 0);
}

// ------------------------------------------------------ the async layer's entry points

fn counting_waker() -> (Arc<CountWaker>, Waker) {
    let counter = Arc::new(CountWaker::default());
    let waker = Waker::from(Arc::clone(&counter));
    (counter, waker)
}

#[test]
fn register_waker_wakes_once_on_the_next_added_deadline() {
    let (sched, origin) = two_shards();
    let (count, waker) = counting_waker();
    let poller = sched.new_poller();
    sched.register_waker(poller, &waker);
    sched.register_waker(poller, &waker.clone()); // same poller: replaced, not doubled
    sched.schedule(0, 1, origin + MS * 50, 0).unwrap();
    assert_eq!(count.0.load(Ordering::SeqCst), 1);
    sched.schedule(0, 2, origin + MS * 10, 0).unwrap();
    assert_eq!(
        count.0.load(Ordering::SeqCst),
        1,
        "woken wakers are forgotten until re-registered"
    );
    assert_eq!(sched.clock_origin(), origin);
    assert_eq!(
        sched.deadline_tick(origin + MS * 3 / 2),
        2,
        "deadlines round up"
    );
    assert_eq!(
        sched.now_tick(origin + MS * 3 / 2),
        Some(1),
        "now rounds down"
    );
    assert_eq!(sched.tick_instant(7), origin + MS * 7);
}

#[test]
fn arm_waker_wakes_only_for_an_earlier_deadline() {
    let (sched, origin) = two_shards();
    let (count, waker) = counting_waker();
    let poller = sched.new_poller();
    assert_eq!(
        sched.arm_waker(poller, &waker),
        None,
        "nothing pending: sleep without deadline"
    );
    sched.schedule(0, 1, origin + MS * 40, 0).unwrap();
    assert_eq!(
        count.0.load(Ordering::SeqCst),
        1,
        "anything is earlier than no deadline"
    );

    assert_eq!(sched.arm_waker(poller, &waker), Some(origin + MS * 40));
    sched.schedule(0, 2, origin + MS * 40, 0).unwrap();
    sched.schedule(0, 3, origin + MS * 90, 0).unwrap();
    sched.reschedule(&3, origin + MS * 60).unwrap();
    assert_eq!(
        count.0.load(Ordering::SeqCst),
        1,
        "not earlier than the target: no wakeup"
    );
    sched.reschedule(&3, origin + MS * 20).unwrap();
    assert_eq!(
        count.0.load(Ordering::SeqCst),
        2,
        "a reschedule to earlier wakes"
    );

    // A batch dropped with untaken timers puts due timers back: that wakes a poller that
    // sleeps past them.
    let batch = sched.pop_due(origin + MS * 45, 10);
    assert_eq!(batch.len(), 3);
    assert_eq!(
        sched.arm_waker(poller, &waker),
        None,
        "all three are in flight"
    );
    drop(batch);
    assert_eq!(count.0.load(Ordering::SeqCst), 3);
}
