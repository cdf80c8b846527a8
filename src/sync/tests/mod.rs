//! `pop_due` and the shards' published due bounds: which shards it locks, and that passing
//! a shard over never reorders delivery.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::sync::{Scheduler, SchedulerStats};
use interleave::{alternating, id_on};

mod flow;
mod freeze;
mod interleave;
#[cfg(loom)]
mod loom;
#[cfg(feature = "metrics")]
mod observe;
#[cfg(feature = "serde")]
mod snapshot;
#[cfg(feature = "tracing")]
mod tracing;

type Sched = Scheduler<u8, u64, u64>;

/// `n` milliseconds after `t0`.
fn ms(t0: Instant, n: u64) -> Instant {
    t0 + Duration::from_millis(n)
}

/// A scheduler of two shards whose origin is now, and that origin.
fn two_shards() -> (Sched, Instant) {
    let t0 = Instant::now();
    (Scheduler::builder().shards(2).origin(t0).build(), t0)
}

/// [`two_shards`] with one timer on each shard, both on queue 0: the first id of shard 0
/// due `at[0]` ms after the origin with value 1, the first of shard 1 due `at[1]` ms after
/// it with value 2; and those two ids.
fn one_on_each(at: [u64; 2]) -> (Sched, Instant, [u64; 2]) {
    let (s, t0) = two_shards();
    let ids = alternating();
    for (k, id) in ids.into_iter().enumerate() {
        s.schedule(0, id, ms(t0, at[k]), k as u64 + 1).unwrap();
    }
    (s, t0, ids)
}

/// Runs `f` on another thread; fails if it has not finished after 20 s (a `pop_due` that
/// waits for a lock held by this test never would).
fn finishes<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("pop_due waited for the lock of a shard with nothing due")
}

#[test]
fn pop_due_takes_no_lock_of_a_shard_with_nothing_due() {
    let t0 = Instant::now();
    let sched: Arc<Sched> = Arc::new(Scheduler::builder().shards(2).origin(t0).build());
    let [on0, on1] = alternating();
    sched
        .schedule(0, on0, t0 + Duration::from_millis(50), on0)
        .unwrap();
    sched
        .schedule(0, on1, t0 + Duration::from_millis(5), on1)
        .unwrap();

    // Nothing due at 1 ms: no lock at all.
    let guards = (
        sched.inner.shards[0].lock_unsettled(),
        sched.inner.shards[1].lock_unsettled(),
    );
    let s = Arc::clone(&sched);
    let popped = finishes(move || s.pop_due(t0 + Duration::from_millis(1), 10).len());
    assert_eq!(popped, 0);
    drop(guards);

    // At 10 ms only shard 1 has a timer due: shard 0 stays locked here, and the pop goes on.
    let guard = sched.inner.shards[0].lock_unsettled();
    let s = Arc::clone(&sched);
    let ids = finishes(move || {
        let batch = s.pop_due(t0 + Duration::from_millis(10), 10);
        batch.map(|due| due.into_value()).collect::<Vec<_>>()
    });
    assert_eq!(ids, [on1]);
    drop(guard);
    assert_eq!(sched.pop_due(t0 + Duration::from_millis(49), 10).len(), 0);
    let ids: Vec<u64> = (sched.pop_due(t0 + Duration::from_millis(50), 10))
        .map(|due| due.into_value())
        .collect();
    assert_eq!(ids, [on0]);
    sched.check_invariants();
}

#[test]
fn bound_follows_every_kind_of_change() {
    let t0 = Instant::now();
    let ms = |n: u64| t0 + Duration::from_millis(n);
    let sched: Sched = Scheduler::builder().shards(2).origin(t0).build();
    let ids: Vec<u64> = (0..4).map(|n| id_on(n % 2, n / 2)).collect();
    for (n, &id) in ids.iter().enumerate() {
        sched.schedule(0, id, ms(100 + n as u64), id).unwrap();
        sched.check_invariants();
    }
    // An earlier deadline lowers the bound: found at its tick, not at the others'.
    sched.reschedule(&ids[3], ms(7)).unwrap();
    sched.check_invariants();
    let first: Vec<u64> = sched.pop_due(ms(7), 10).map(|d| d.into_value()).collect();
    assert_eq!(first, [ids[3]]);
    // A batch stopped at its limit leaves the next due timer staged; a dropped batch puts
    // its timers back: both must stay findable with nothing else changing.
    let batch = sched.pop_due(ms(200), 1);
    sched.check_invariants();
    assert_eq!(batch.len(), 1);
    drop(batch);
    sched.check_invariants();
    let all: Vec<u64> = sched.pop_due(ms(200), 10).map(|d| d.into_value()).collect();
    assert_eq!(all, ids[..3]);
    sched.check_invariants();
    // A cancel of the only pending timer: nothing due, and nothing found.
    sched.schedule(0, 99, ms(300), 99).unwrap();
    assert!(matches!(sched.cancel(&99), super::Cancel::Cancelled(99)));
    sched.check_invariants();
    assert_eq!(sched.pop_due(ms(400), 10).len(), 0);
    let SchedulerStats { pending, .. } = sched.stats();
    assert_eq!(pending, 0);
}

/// A producer schedules, in turn, a timer on shard 0 and one on shard 1, both already due,
/// while a dispatcher pops. All ticks are equal, so delivery must follow schedule order
/// exactly. A `pop_due` that read shard 0's bound before a schedule there, then shard 1's
/// after the next schedule there, and took shard 1's timer without going back for shard
/// 0's, would deliver out of that order (`lock_due_shards` reads the bounds again to
/// prevent it).
#[test]
fn passing_a_shard_over_never_reorders_delivery() {
    const PAIRS: usize = 50_000;
    let t0 = Instant::now();
    let sched: Arc<Sched> = Arc::new(Scheduler::builder().shards(2).origin(t0).build());
    let on = |shard| {
        let sched = Arc::clone(&sched);
        (0u64..).filter(move |id| sched.shard_index(id) == shard)
    };
    let order: Vec<u64> = (on(0).zip(on(1)).take(PAIRS))
        .flat_map(|(a, b)| [a, b])
        .collect();
    let producer = {
        let (sched, order) = (Arc::clone(&sched), order.clone());
        std::thread::spawn(move || {
            for &id in &order {
                sched.schedule(0, id, t0, id).unwrap();
            }
        })
    };
    let mut delivered = Vec::with_capacity(order.len());
    while delivered.len() < order.len() {
        let batch = sched.pop_due(Instant::now(), 16);
        delivered.extend(batch.map(|due| due.into_value()));
    }
    producer.join().unwrap();
    let first_wrong = delivered.iter().zip(&order).position(|(d, o)| d != o);
    assert_eq!(first_wrong, None, "delivery left schedule order");
}

/// A waiter sleeps until `next_deadline` and pops there: each such pop must deliver, or move
/// `next_deadline` later. (The wheel can name the tick a waiting run timer's slot would have
/// cascaded, below the shard's due bound; a `next_deadline` there made `pop_due` pass the
/// shard over, and a `DueStream` on tokio's paused clock spun at that instant forever.)
#[test]
fn popping_at_next_deadline_always_makes_progress() {
    let t0 = Instant::now();
    for shards in [1, 3] {
        let sched: Sched = Scheduler::builder().shards(shards).origin(t0).build();
        for id in 0..300u64 {
            // Deadlines in wheel levels 0 to 3, out of order.
            let at = t0 + Duration::from_millis(1 + (id * 7_919) % 600_000);
            sched.schedule(0, id, at, id).unwrap();
        }
        let (mut delivered, mut empty_pops) = (0, 0);
        while let Some(at) = sched.next_deadline() {
            let batch = sched.pop_due(at, 7);
            if batch.is_empty() {
                empty_pops += 1;
                let next = sched.next_deadline();
                assert!(
                    next > Some(at),
                    "pop_due at {at:?} changed nothing: {next:?}"
                );
            }
            delivered += batch.count();
        }
        assert_eq!(delivered, 300);
        assert!(empty_pops < 300, "{empty_pops} empty pops for 300 timers");
    }
}

/// A producer schedules X (due) on shard 0, then cancels Y (due, staged) on the last shard,
/// while a dispatcher pops: X or Y is due at every instant, so a `pop_due` overlapping both
/// must return one of them. A check of the bounds that read shard 0 before the schedule and
/// the last shard after the cancel, and returned nothing, broke that (6 758 of 50 000 pops
/// in release); `quiet_except` reads the lowering counts twice.
#[test]
fn an_empty_pop_means_nothing_was_due_at_one_instant() {
    const SHARDS: usize = 1024;
    const ROUNDS: usize = 3_000;
    let t0 = Instant::now();
    let sched: Arc<Sched> = Arc::new(Scheduler::builder().shards(SHARDS).origin(t0).build());
    let on = |shard: usize| -> Vec<u64> {
        (0u64..)
            .filter(|id| sched.shard_index(id) == shard)
            .take(ROUNDS)
            .collect()
    };
    let (xs, ys) = (on(0), on(SHARDS - 1));
    // The round the producer may run (0: none yet), and the last round it finished with
    // whether its cancel found Y pending.
    let go = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let cancelled = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producer = {
        let (sched, go, done, cancelled) = (
            Arc::clone(&sched),
            Arc::clone(&go),
            Arc::clone(&done),
            Arc::clone(&cancelled),
        );
        let (xs, ys) = (xs.clone(), ys.clone());
        std::thread::spawn(move || {
            use std::sync::atomic::Ordering::{Acquire, Release};
            for round in 1..=ROUNDS {
                while go.load(Acquire) != round {
                    std::hint::spin_loop();
                }
                sched.schedule(0, xs[round - 1], t0, 0).unwrap();
                let c = sched.cancel(&ys[round - 1]);
                cancelled.store(matches!(c, super::Cancel::Cancelled(_)), Release);
                done.store(round, Release);
            }
        })
    };
    use std::sync::atomic::Ordering::{Acquire, Release};
    let mut empty_while_due = 0;
    for round in 1..=ROUNDS {
        let (x, y) = (xs[round - 1], ys[round - 1]);
        sched.schedule(0, y, t0, 0).unwrap();
        drop(sched.pop_due(t0, 10)); // Y popped and put back: staged, its wheel quiet
        go.store(round, Release);
        let got: Vec<u64> = sched.pop_due(t0, 100).map(|due| *due.id()).collect();
        while done.load(Acquire) != round {
            std::hint::spin_loop();
        }
        if got.is_empty() && cancelled.load(Acquire) {
            empty_while_due += 1;
        }
        let rest: Vec<u64> = sched.pop_due(t0, 100).map(|due| *due.id()).collect();
        assert!(
            got.contains(&x) || rest.contains(&x),
            "round {round}: X lost"
        );
    }
    producer.join().unwrap();
    assert_eq!(
        empty_while_due, 0,
        "pops that found nothing while X or Y was due"
    );
}

/// The dispatcher's loop (`dispatcher.rs`) with simulated time: an empty pop is followed by
/// a sleep until `next_deadline`. It must never be told to wake at once (it would spin).
#[test]
fn a_waiting_dispatcher_never_spins() {
    let t0 = Instant::now();
    let ms = |n: u64| t0 + Duration::from_millis(n);
    for shards in [1, 2] {
        let sched: Sched = Scheduler::builder().shards(shards).origin(t0).build();
        sched.schedule(0, 1, ms(5000), 1).unwrap();
        sched.schedule(0, 2, ms(70_000), 2).unwrap();
        let mut now = t0;
        let mut delivered = Vec::new();
        for _ in 0..1000 {
            delivered.extend(sched.pop_due(now, 64).map(|due| due.into_value()));
            let Some(next) = sched.next_deadline() else {
                break;
            };
            assert!(next > now, "told to wake at once at {:?}", now - t0);
            now = next;
        }
        assert_eq!(delivered, [1, 2]);
    }
}
