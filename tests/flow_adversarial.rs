//! Adversarial checks of per-queue flow control (`hold_queue`, `release_queue`,
//! `set_concurrency`, `set_rate`, `flush_queue`, `pop_due_queue`, `queue_counts`) against
//! their documented behaviour. Time is simulated: every `now` is an explicit `Instant`.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tickwheel::sync::{Cancel, RateLimit, Scheduler};

mod support;

use support::flow::{
    Sched, every, expect_pops, fill, fill_with, held, limited, ms, rated, sched, take_batch,
};

/// A scheduler of 4 shards at origin `t0` holding one timer: id 1 (value 1) on queue 1,
/// due at `t0`.
fn one_due(t0: Instant) -> Sched {
    let s = sched(4, t0);
    s.schedule(1, 1, t0, 1).unwrap();
    s
}

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

#[test]
fn held_queue_hands_out_nothing_then_release_in_deadline_order() {
    for shards in [1, 2, 64] {
        let t0 = Instant::now();
        let s = sched(shards, t0);
        assert!(s.hold_queue(&1));
        // Reverse deadlines, many ids across shards, plus another queue.
        for id in 0..200u64 {
            s.schedule(1, id, t0 + ms(200 - id), id).unwrap();
            s.schedule(2, 1000 + id, t0 + ms(200 - id), id).unwrap();
        }
        let later = t0 + ms(500);
        assert_eq!(
            s.pop_due_queue(&1, later, usize::MAX).len(),
            0,
            "shards {shards}"
        );
        let others: Vec<u8> = s.pop_due(later, usize::MAX).map(|d| *d.queue()).collect();
        assert_eq!(others.len(), 200);
        assert!(others.iter().all(|&q| q == 2));
        assert_eq!(s.pop_due(later, usize::MAX).len(), 0);
        let c = s.queue_counts(&1);
        assert_eq!(
            (c.pending, c.parked, c.held, c.in_flight),
            (200, 200, true, 0)
        );
        assert_eq!(s.len(), 200);
        assert_eq!(s.release_queue(&1), 200);
        let ids: Vec<u64> = s.pop_due(later, usize::MAX).map(|d| *d.id()).collect();
        let want: Vec<u64> = (0..200).rev().collect();
        assert_eq!(ids, want, "deadline order, shards {shards}");
        assert_eq!(s.len(), 0);
    }
}

#[test]
fn held_queue_pop_due_queue_and_limit_zero() {
    let t0 = Instant::now();
    let s = one_due(t0);
    assert_eq!(s.pop_due_queue(&1, t0, 0).len(), 0, "limit 0");
    assert_eq!(s.pop_due(t0, 0).len(), 0);
    s.hold_queue(&1);
    assert_eq!(s.pop_due_queue(&1, t0, 10).len(), 0);
    // Release of a queue never held changes nothing.
    assert_eq!(s.release_queue(&9), 0);
    s.release_queue(&1);
    assert_eq!(s.pop_due_queue(&1, t0, 10).count(), 1);
    assert_eq!(s.len(), 0);
}

/// `pop_due_queue` documents "a member refused is parked, as by `pop_due`", and
/// `release_queue` returns "how many parked timers were released".
#[test]
fn pop_due_queue_parks_a_held_member() {
    let t0 = Instant::now();
    let s = one_due(t0);
    s.hold_queue(&1);
    assert_eq!(s.pop_due_queue(&1, t0, 10).len(), 0);
    assert_eq!(s.queue_counts(&1).parked, 1, "parked by pop_due_queue");
    assert_eq!(s.release_queue(&1), 1);
}

#[test]
fn held_not_yet_due_members_come_out_at_their_deadline_after_release() {
    let t0 = Instant::now();
    let s = held(2, t0);
    s.schedule(1, 1, t0 + ms(10), 1).unwrap();
    s.schedule(1, 2, t0 + ms(100), 2).unwrap();
    assert_eq!(s.pop_due(t0 + ms(50), 10).len(), 0);
    assert_eq!(s.release_queue(&1), 1, "only the due one was parked");
    assert_eq!(
        s.pop_due(t0 + ms(50), 10)
            .map(|d| *d.id())
            .collect::<Vec<_>>(),
        [1]
    );
    assert_eq!(s.pop_due(t0 + ms(99), 10).len(), 0);
    assert_eq!(s.next_deadline(), Some(t0 + ms(100)));
    assert_eq!(s.pop_due(t0 + ms(100), 10).len(), 1);
}

#[test]
fn dispatcher_delivers_nothing_of_a_held_queue_until_release() {
    let s: Arc<Sched> = Arc::new(Scheduler::builder().shards(4).build());
    s.hold_queue(&1);
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = Arc::clone(&got);
    let (tx, rx) = std::sync::mpsc::channel();
    let d = s.spawn_dispatcher(move |due| {
        g.lock().unwrap().push((*due.queue(), *due.id()));
        let _ = tx.send(());
    });
    let now = Instant::now();
    fill(&s, 1, 20, now);
    // A marker in another queue: once it is delivered, the dispatcher has polled past the
    // held ones.
    s.schedule(2, 99, now, 0).unwrap();
    rx.recv_timeout(Duration::from_secs(30)).unwrap();
    // Give the dispatcher further polls (not a pass/fail timing: only more chances to fail).
    for k in 0..5 {
        s.schedule(2, 100 + k, Instant::now(), 0).unwrap();
        rx.recv_timeout(Duration::from_secs(30)).unwrap();
    }
    assert!(
        got.lock().unwrap().iter().all(|&(q, _)| q == 2),
        "{:?}",
        got.lock().unwrap()
    );
    assert_eq!(s.queue_counts(&1).pending, 20);
    assert_eq!(s.release_queue(&1), 20);
    for _ in 0..20 {
        rx.recv_timeout(Duration::from_secs(30)).unwrap();
    }
    d.shutdown();
    let got = got.lock().unwrap();
    let ones: Vec<u64> = got.iter().filter(|p| p.0 == 1).map(|p| p.1).collect();
    assert_eq!(
        ones,
        (0..20).collect::<Vec<_>>(),
        "schedule order at equal deadlines"
    );
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

/// Rate limit with a simulated clock: no window of the period sees more hand-outs than the
/// GCRA allows, none is lost, and `next_deadline` names an instant at which one is permitted.
#[test]
fn rate_limit_by_simulated_clock() {
    for shards in [1, 2, 64] {
        let t0 = Instant::now();
        let s = sched(shards, t0);
        let limit = RateLimit::per_second(10).with_burst(3);
        s.set_rate(&1, Some(limit));
        let n = 60u64;
        fill_with(&s, 1, n, |id| t0 + ms(id * 7));
        let mut times: Vec<Duration> = Vec::new();
        let mut seen = HashSet::new();
        let mut now = t0;
        let mut steps = 0;
        loop {
            steps += 1;
            assert!(
                steps < 100_000,
                "shards {shards}: throttled timers lost: {}",
                seen.len()
            );
            for d in s.pop_due(now, 7) {
                assert!(seen.insert(*d.id()));
                assert!(d.deadline() <= now);
                times.push(now - t0);
            }
            if seen.len() as u64 == n {
                break;
            }
            // Jump to what the scheduler says is next (the permitted instant), or step.
            match s.next_deadline() {
                Some(next) if next > now => {
                    // Nothing is handed out before it.
                    if next - now > Duration::from_nanos(1) {
                        assert_eq!(
                            s.pop_due(next - Duration::from_nanos(1), 100).len(),
                            0,
                            "shards {shards}: hand-out before next_deadline"
                        );
                    }
                    now = next;
                }
                Some(_) => {}
                None => panic!(
                    "shards {shards}: {} left but no next_deadline",
                    n - seen.len() as u64
                ),
            }
        }
        // In any window of one second: at most burst + count hand-outs (GCRA bound:
        // burst - 1 + ceil(window / interval)), checked as at most 3 + 10.
        for (i, &a) in times.iter().enumerate() {
            let in_window = times[i..]
                .iter()
                .take_while(|&&b| b < a + Duration::from_secs(1))
                .count();
            assert!(
                in_window <= 12,
                "shards {shards}: {in_window} in one second from {a:?}"
            );
        }
        // Sustained: the last hand-out is no earlier than (n - burst) intervals.
        assert!(*times.last().unwrap() >= ms(100) * (n as u32 - 3));
        assert_eq!((s.len(), s.in_flight_len()), (0, 0));
    }
}

/// Drives `pop_due` by `next_deadline` (a simulated clock) until `want` came out or
/// `steps` polls passed; returns how many came out.
fn drive(s: &Sched, t0: Instant, steps: usize) -> (usize, Vec<Instant>) {
    let mut now = t0;
    let mut out = 0;
    let mut stuck = Vec::new();
    for _ in 0..steps {
        let got = s.pop_due(now, 100).count();
        out += got;
        match s.next_deadline() {
            None => break,
            Some(next) if next > now => now = next,
            Some(next) => {
                if got == 0 {
                    // Due by next_deadline, yet nothing came out.
                    stuck.push(next);
                }
            }
        }
    }
    (out, stuck)
}

#[test]
fn rate_limit_edge_values_do_not_panic() {
    let t0 = Instant::now();
    let cases = [
        RateLimit {
            count: 0,
            per: Duration::from_secs(1),
            burst: 0,
        },
        RateLimit {
            count: u32::MAX,
            per: Duration::ZERO,
            burst: u32::MAX,
        },
        RateLimit {
            count: u32::MAX,
            per: Duration::from_nanos(1),
            burst: 1,
        },
        RateLimit::per_second(u32::MAX).with_burst(u32::MAX),
        every(Duration::from_secs(86_400 * 365 * 100), 2),
    ];
    for (i, limit) in cases.into_iter().enumerate() {
        let s = rated(2, t0, limit, 5);
        let _ = s.queue_counts(&1);
        let _ = s.rate(&1);
        let (out, stuck) = drive(&s, t0, 50);
        assert!(
            stuck.len() < 3,
            "case {i}: next_deadline due but nothing handed out: {stuck:?}"
        );
        assert_eq!(out, 5, "case {i}");
        assert_eq!(s.len(), 0, "case {i}");
    }
}

/// One hand-out per `Duration::MAX`: the next permitted instant cannot be represented.
/// No panic; the rest stay pending and come out once the rate is lifted.
#[test]
fn rate_limit_with_duration_max_period() {
    let t0 = Instant::now();
    let s = rated(2, t0, every(Duration::MAX, 1), 5);
    assert_eq!(s.pop_due(t0, 100).count(), 1);
    let year = Duration::from_secs(86_400 * 365);
    // The interval saturates (documented: `interval_nanos` saturates at u64::MAX ns, about
    // 584 years); nothing more within a century, and next_deadline says so.
    assert_eq!(s.pop_due(t0 + year * 100, 100).count(), 0);
    if let Some(next) = s.next_deadline() {
        assert!(
            next >= t0 + year * 500,
            "next_deadline {:?} after t0",
            next - t0
        );
    }
    assert_eq!(s.len(), 4);
    assert_eq!(s.queue_counts(&1).pending, 4);
    s.set_rate(&1, None);
    let late = t0 + Duration::from_secs(3600);
    assert_eq!(
        s.pop_due(late, 100).count(),
        4,
        "lifting the rate frees them"
    );
}

#[test]
fn flush_held_in_flight_and_before_origin() {
    let t0 = Instant::now() + Duration::from_secs(10);
    let s = sched(4, t0);
    fill_with(&s, 1, 6, |id| t0 + Duration::from_secs(100 - id));
    // Before the origin: documented as nothing for pop_due_queue; flush must not panic.
    let before = t0 - Duration::from_secs(5);
    let _ = s.flush_queue(&1, before);
    assert_eq!(s.pop_due_queue(&1, before, 10).len(), 0);
    assert_eq!(s.len(), 6);
    // In flight: flush one id, hand it out, then flush again; in flight one is left alone.
    assert_eq!(s.flush_queue(&1, t0), 6);
    let first: Vec<_> = s.pop_due(t0, 1).collect();
    assert_eq!(*first[0].id(), 5, "deadline order");
    s.hold_queue(&1);
    assert_eq!(s.flush_queue(&1, t0), 0, "already due");
    assert_eq!(s.pop_due(t0, 10).len(), 0, "held after flush");
    let c = s.queue_counts(&1);
    assert_eq!((c.pending, c.in_flight, c.parked), (5, 1, 5));
    first
        .into_iter()
        .next()
        .unwrap()
        .retry_at(t0 + Duration::from_secs(500))
        .unwrap();
    assert_eq!(s.release_queue(&1), 5);
    let ids: Vec<u64> = s.pop_due(t0, 10).map(|d| *d.id()).collect();
    assert_eq!(ids, [4, 3, 2, 1, 0]);
    assert_eq!(
        s.queue_counts(&1).pending,
        1,
        "retried one at its own deadline"
    );
}

#[test]
fn flush_of_held_queue_releases_in_flush_order() {
    let t0 = Instant::now();
    let s = held(8, t0);
    fill_with(&s, 1, 30, |id| t0 + Duration::from_secs(1000 - id));
    assert_eq!(s.flush_queue(&1, t0 + ms(3)), 30);
    assert_eq!(s.pop_due(t0 + ms(3), 100).len(), 0);
    assert_eq!(s.release_queue(&1), 30);
    let ids: Vec<u64> = s.pop_due(t0 + ms(3), 100).map(|d| *d.id()).collect();
    assert_eq!(ids, (0..30).rev().collect::<Vec<_>>());
}

/// Hold/release/limit changes race with schedule, cancel, drain, freeze, reschedule and
/// retry from several threads; every token ends exactly once, the counts add up.
#[test]
fn races_count_every_timer_once() {
    for shards in [1, 2, 64] {
        let t0 = Instant::now();
        let s = Arc::new(sched(shards, t0));
        let ended = Arc::new(Mutex::new(HashMap::<u64, u32>::new()));
        let scheduled = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let end =
            |e: &Mutex<HashMap<u64, u32>>, id: u64| *e.lock().unwrap().entry(id).or_default() += 1;
        let mut hs = Vec::new();
        for p in 0..2u64 {
            let (s, scheduled) = (Arc::clone(&s), Arc::clone(&scheduled));
            hs.push(std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(p);
                for i in 0..3000u64 {
                    let id = p * 1_000_000 + i;
                    let q = rng.gen_range(0..4u8);
                    if s.schedule(
                        q,
                        id,
                        t0 + Duration::from_micros(rng.gen_range(0..3000)),
                        id,
                    )
                    .is_ok()
                    {
                        scheduled.fetch_add(1, Ordering::SeqCst);
                    }
                    if rng.gen_ratio(1, 10) {
                        let _ = s.reschedule(
                            &(id / 2),
                            t0 + Duration::from_micros(rng.gen_range(0..3000)),
                        );
                    }
                }
            }));
        }
        // Operator: holds, releases, limits, flushes, cancels, drains, freezes.
        {
            let (s, ended, stop) = (Arc::clone(&s), Arc::clone(&ended), Arc::clone(&stop));
            hs.push(std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(99);
                while !stop.load(Ordering::SeqCst) {
                    let q = rng.gen_range(0..4u8);
                    match rng.gen_range(0..9) {
                        0 => {
                            s.hold_queue(&q);
                        }
                        1 | 2 => {
                            s.release_queue(&q);
                        }
                        3 => s.set_concurrency(
                            &q,
                            [None, Some(0), Some(1), Some(3)][rng.gen_range(0..4)],
                        ),
                        4 => s.set_rate(
                            &q,
                            if rng.gen_bool(0.5) {
                                None
                            } else {
                                Some(RateLimit::per_second(2000).with_burst(4))
                            },
                        ),
                        5 => {
                            s.flush_queue(&q, t0 + Duration::from_micros(rng.gen_range(0..5000)));
                        }
                        6 => {
                            let id = rng.gen_range(0..2u64) * 1_000_000 + rng.gen_range(0..3000);
                            if let Cancel::Cancelled(v) = s.cancel(&id) {
                                end(&ended, v);
                            }
                        }
                        7 if rng.gen_ratio(1, 20) => {
                            let d = s.drain_queue(&q);
                            for (_, v) in d.cancelled {
                                end(&ended, v);
                            }
                        }
                        8 if rng.gen_ratio(1, 30) => {
                            let f = s.freeze_queue(&q);
                            for e in f.pending {
                                end(&ended, e.value);
                            }
                            std::thread::yield_now();
                            for e in s.take_forwarded(&q) {
                                end(&ended, e.value);
                            }
                            s.unfreeze_queue(&q);
                        }
                        _ => {}
                    }
                    std::thread::yield_now();
                }
            }));
        }
        for t in 0..2u64 {
            let (s, ended, stop) = (Arc::clone(&s), Arc::clone(&ended), Arc::clone(&stop));
            hs.push(std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(1000 + t);
                let mut now = t0;
                while !stop.load(Ordering::SeqCst) {
                    now += Duration::from_micros(50);
                    for d in s.pop_due(now, 8) {
                        if rng.gen_ratio(1, 6) {
                            let id = *d.id();
                            if let Err(e) = d.retry_at(now + Duration::from_micros(100)) {
                                panic!("{id}: {e:?}");
                            }
                        } else {
                            end(&ended, d.into_value());
                        }
                    }
                }
            }));
        }
        let producers: Vec<_> = hs.drain(..2).collect();
        for h in producers {
            h.join().unwrap();
        }
        std::thread::sleep(ms(200));
        stop.store(true, Ordering::SeqCst);
        for h in hs {
            h.join().unwrap();
        }
        // Settle: lift everything and take what is left.
        for q in 0..4u8 {
            s.release_queue(&q);
            s.set_concurrency(&q, None);
            s.set_rate(&q, None);
            s.unfreeze_queue(&q);
        }
        assert_eq!(s.in_flight_len(), 0);
        let mut left = 0;
        let far = t0 + Duration::from_secs(3600);
        loop {
            let b: Vec<_> = s.pop_due(far, 1000).collect();
            if b.is_empty() {
                break;
            }
            for d in b {
                left += 1;
                end(&ended, d.into_value());
            }
        }
        assert_eq!(
            s.len(),
            0,
            "shards {shards}: {} pending after popping everything ({left} popped)",
            s.len()
        );
        let ended = ended.lock().unwrap();
        let twice: Vec<_> = ended.iter().filter(|e| *e.1 != 1).take(5).collect();
        assert!(
            twice.is_empty(),
            "shards {shards}: ended more than once: {twice:?}"
        );
        assert_eq!(
            ended.len(),
            scheduled.load(Ordering::SeqCst),
            "shards {shards}: every timer ended"
        );
    }
}

#[test]
fn queue_counts_consistent_with_len_and_stats() {
    let t0 = Instant::now();
    let s = sched(4, t0);
    s.set_concurrency(&1, Some(2));
    s.set_rate(&2, Some(RateLimit::per_second(1)));
    s.hold_queue(&3);
    for id in 0..40 {
        s.schedule((id % 4) as u8, id, t0 + ms(id % 5), id).unwrap();
    }
    let out: Vec<_> = s.pop_due(t0 + ms(10), 100).collect();
    let per_q = |q: u8| out.iter().filter(|d| *d.queue() == q).count();
    assert_eq!(per_q(0), 10);
    assert_eq!(per_q(1), 2);
    assert_eq!(per_q(2), 1);
    assert_eq!(per_q(3), 0);
    let cs: Vec<_> = (0..4u8).map(|q| s.queue_counts(&q)).collect();
    assert_eq!(cs.iter().map(|c| c.pending).sum::<usize>(), s.len());
    assert_eq!(
        cs.iter().map(|c| c.in_flight).sum::<usize>(),
        s.in_flight_len()
    );
    assert_eq!(s.stats().pending, s.len());
    assert_eq!((cs[1].in_flight, cs[1].parked), (2, 8));
    assert_eq!(
        (cs[2].in_flight, cs[2].parked, cs[2].throttled),
        (1, 9, true)
    );
    assert_eq!((cs[3].parked, cs[3].held), (10, true));
    for c in &cs {
        assert!(c.parked <= c.pending);
    }
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

#[cfg(feature = "tokio")]
mod stream {
    use std::sync::Arc;

    use futures_util::StreamExt;
    use tickwheel::sync::{RateLimit, Scheduler};
    use tokio::time::{Duration, Instant};

    /// The async stream hands out nothing of a held queue, wakes for a release, and
    /// sleeps until a throttle wake-up rather than polling (paused clock: time jumps to
    /// the next timer; a missed wake-up shows as a hand-out at the far marker).
    #[tokio::test(start_paused = true)]
    async fn due_stream_respects_hold_and_rate() {
        let t0 = Instant::now().into_std();
        let s: Arc<Scheduler<u8, u64, u64>> = Arc::new(Scheduler::builder().origin(t0).build());
        s.hold_queue(&1);
        s.set_rate(&2, Some(RateLimit::per_second(10)));
        for id in 0..5 {
            s.schedule(1, id, t0, id).unwrap();
            s.schedule(2, 10 + id, t0, id).unwrap();
        }
        // A far marker: if a wake-up is missed, the next hand-out is at 1 h.
        s.schedule(3, 99, t0 + std::time::Duration::from_secs(3600), 0)
            .unwrap();
        let mut stream = s.due_stream();
        let mut got = Vec::new();
        for _ in 0..5 {
            let due = stream.next().await.unwrap();
            got.push((*due.queue(), *due.id(), Instant::now().into_std() - t0));
        }
        for (k, (q, id, at)) in got.iter().enumerate() {
            assert_eq!((*q, *id), (2, 10 + k as u64), "{got:?}");
            assert!(*at >= Duration::from_millis(100) * k as u32, "{got:?}");
            assert!(
                *at < Duration::from_millis(100) * k as u32 + Duration::from_millis(20),
                "no poll wait: {got:?}"
            );
        }
        let s2 = Arc::clone(&s);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(10)).await;
            s2.release_queue(&1);
        });
        let mut ones = Vec::new();
        for _ in 0..5 {
            let due = stream.next().await.unwrap();
            assert_eq!(*due.queue(), 1, "held queue before its release");
            ones.push(*due.id());
            let at = Instant::now().into_std() - t0;
            assert!(
                at >= Duration::from_secs(10) && at < Duration::from_secs(11),
                "{at:?}"
            );
        }
        assert_eq!(ones, [0, 1, 2, 3, 4]);
    }
}

/// Parked timers stay in custody: cancel, reschedule, drain, freeze and retry reach them,
/// and the counts follow.
#[test]
fn parked_timers_answer_cancel_reschedule_drain_freeze() {
    let t0 = Instant::now();
    let s = held(4, t0);
    fill_with(&s, 1, 6, |id| t0 + ms(id));
    let now = t0 + ms(10);
    assert_eq!(s.pop_due(now, 10).len(), 0);
    assert_eq!(s.queue_counts(&1).parked, 6);
    assert!(matches!(s.cancel(&0), Cancel::Cancelled(0)));
    assert_eq!(s.queue_counts(&1).parked, 5);
    // Rescheduled into the future: no longer parked, due at its new deadline.
    s.reschedule(&1, t0 + ms(50)).unwrap();
    let c = s.queue_counts(&1);
    assert_eq!(
        (c.pending, c.parked),
        (5, 4),
        "a rescheduled member is not due any more"
    );
    assert_eq!(s.release_queue(&1), 4);
    let ids: Vec<u64> = s.pop_due(now, 10).map(|d| *d.id()).collect();
    assert_eq!(ids, [2, 3, 4, 5]);
    assert_eq!(
        s.pop_due(t0 + ms(50), 10)
            .map(|d| *d.id())
            .collect::<Vec<_>>(),
        [1]
    );

    // Retry of an in-flight timer into a held queue: parked, not handed out.
    s.schedule(1, 10, now, 10).unwrap();
    let due = s.pop_due(now, 10).next().unwrap();
    s.hold_queue(&1);
    due.retry_at(now).unwrap();
    assert_eq!(s.pop_due(now, 10).len(), 0, "retried into a held queue");
    // Drain takes the parked one; the hold stays.
    let d = s.drain_queue(&1);
    assert_eq!(d.cancelled.iter().map(|p| p.0).collect::<Vec<_>>(), [10]);
    assert_eq!(s.queue_counts(&1).parked, 0);
    assert!(s.is_held(&1));
    // Freeze hands parked ones back.
    s.schedule(1, 11, now, 11).unwrap();
    assert_eq!(s.pop_due(now, 10).len(), 0);
    let f = s.freeze_queue(&1);
    assert_eq!(f.pending.iter().map(|e| e.id).collect::<Vec<_>>(), [11]);
    assert_eq!((s.len(), s.queue_counts(&1).parked), (0, 0));
    s.unfreeze_queue(&1);
    assert!(s.is_held(&1), "a freeze does not lift the hold");
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

/// Documented: "Changes take effect at once": a raised rate frees a throttled queue at
/// the new rate, not at the old rate's next permitted instant.
#[test]
fn raising_the_rate_takes_effect_at_once() {
    let t0 = Instant::now();
    let s = rated(2, t0, every(Duration::from_secs(3600), 1), 4);
    assert_eq!(s.pop_due(t0, 10).count(), 1);
    s.set_rate(&1, Some(RateLimit::per_second(1000).with_burst(10)));
    // Documented: changes take effect at once. Within a second at the
    // new rate, the remaining three must be permitted, not wait out the hour.
    let late = s.next_deadline();
    let out = s.pop_due(t0 + Duration::from_secs(1), 10).count();
    assert_eq!(
        out,
        3,
        "still throttled by the old rate; next_deadline {:?}",
        late.map(|l| l - t0)
    );
}

/// A raised rate counts the last hand-out as made under it: no more than the new rate's
/// allowance (interval 100 ms, burst 2) from there, whatever the old rate was.
#[test]
fn a_raised_rate_hands_out_no_more_than_its_allowance() {
    let t0 = Instant::now();
    let s = sched(2, t0);
    let hourly = every(Duration::from_secs(3600), 1);
    s.set_rate(&1, Some(hourly));
    fill(&s, 1, 6, t0);
    assert_eq!(s.pop_due(t0, 10).count(), 1);
    s.set_rate(&1, Some(RateLimit::per_second(10).with_burst(2)));
    assert_eq!(
        s.pop_due(t0, 10).count(),
        1,
        "the burst's second, with the first"
    );
    assert_eq!(s.pop_due(t0 + ms(99), 10).count(), 0);
    assert!(s.queue_counts(&1).throttled);
    assert_eq!(s.next_deadline(), Some(t0 + ms(100)));
    assert_eq!(s.pop_due(t0 + ms(100), 10).count(), 1);
}

/// A lowered rate applies to the next hand-out at once; a lift then a new limit counts
/// from the last hand-out under the earlier one.
#[test]
fn lowering_the_rate_takes_effect_at_once() {
    let t0 = Instant::now();
    let s = rated(2, t0, RateLimit::per_second(1000), 4);
    assert_eq!(s.pop_due(t0, 10).count(), 1);
    s.set_rate(&1, Some(RateLimit::per_second(1)));
    assert_eq!(
        s.pop_due(t0 + ms(2), 10).count(),
        0,
        "the old rate's next instant"
    );
    assert_eq!(s.next_deadline(), Some(t0 + ms(1000)));
    assert_eq!(s.pop_due(t0 + ms(1000), 10).count(), 1);
    s.set_rate(&1, None);
    s.set_rate(&1, Some(RateLimit::per_second(1000)));
    assert_eq!(
        s.pop_due(t0 + ms(1000), 10).count(),
        0,
        "1 ms after the last"
    );
    expect_pops(&s, t0, &[(1001, 1), (1001, 0), (1002, 1)]);
    assert_eq!(s.len(), 0);
}

/// Between `hold_queue` returning and `release_queue` starting, no `pop_due`,
/// `pop_due_queue` or `flush_queue` that started after the hold hands out a timer of the
/// queue, while producers keep scheduling into it.
#[test]
fn hold_is_watertight_while_pollers_and_flushes_run() {
    use std::sync::atomic::AtomicU64;
    for shards in [1, 2, 64] {
        let t0 = Instant::now();
        let s = &sched(shards, t0);
        // Epoch: odd while held (hold returned, release not started).
        let epoch = &AtomicU64::new(0);
        let stop = &std::sync::atomic::AtomicBool::new(false);
        let faults = &Mutex::new(Vec::<String>::new());
        std::thread::scope(|threads| {
            for t in 0..2u64 {
                threads.spawn(move || {
                    let mut k = 0u64;
                    while !stop.load(Ordering::SeqCst) {
                        k += 1;
                        let before = epoch.load(Ordering::SeqCst);
                        let far = t0 + Duration::from_secs(10);
                        let out: Vec<_> = if (k + t) % 3 == 0 {
                            s.flush_queue(&1, t0);
                            s.pop_due_queue(&1, far, 5).collect()
                        } else {
                            s.pop_due(far, 5).collect()
                        };
                        let after = epoch.load(Ordering::SeqCst);
                        for d in &out {
                            if *d.queue() == 1 && before == after && before % 2 == 1 {
                                faults
                                    .lock()
                                    .unwrap()
                                    .push(format!("{} handed out in held epoch {before}", d.id()));
                            }
                        }
                    }
                });
            }
            let mut id = 0u64;
            for round in 0..200 {
                for _ in 0..5 {
                    s.schedule(1, id, t0 + Duration::from_micros(id % 100), id)
                        .unwrap();
                    id += 1;
                }
                if round % 2 == 0 {
                    s.hold_queue(&1);
                    epoch.fetch_add(1, Ordering::SeqCst);
                } else {
                    epoch.fetch_add(1, Ordering::SeqCst);
                    s.release_queue(&1);
                }
                std::thread::yield_now();
            }
            stop.store(true, Ordering::SeqCst);
        });
        let faults = faults.lock().unwrap();
        assert!(
            faults.is_empty(),
            "shards {shards}: {:?}",
            &faults[..faults.len().min(5)]
        );
        let left: usize = s.pop_due(t0 + Duration::from_secs(10), usize::MAX).count();
        assert_eq!(
            s.len(),
            0,
            "shards {shards}: {left} popped at the end, {} pending",
            s.len()
        );
    }
}

#[test]
fn admission_limit_capacity_edges() {
    let l = tickwheel::admission::Limit::new(10);
    for cap in [0, 1, u64::MAX, 7, 0, u64::MAX - 1] {
        l.set_capacity(cap);
        assert_eq!((l.capacity(), l.available()), (cap, cap));
    }
}

#[test]
fn counts_of_unknown_queue_and_rate_through_pop_due_queue() {
    let t0 = Instant::now();
    let s = sched(4, t0);
    let c = s.queue_counts(&42);
    assert_eq!(
        (c.pending, c.in_flight, c.parked, c.held, c.throttled),
        (0, 0, 0, false, false)
    );
    s.set_rate(&1, Some(RateLimit::per_second(10)));
    s.set_rate(&2, Some(RateLimit::per_second(4)));
    for id in 0..3 {
        s.schedule(1, id, t0, id).unwrap();
        s.schedule(2, 10 + id, t0, id).unwrap();
    }
    assert_eq!(
        s.pop_due_queue(&1, t0, 10).count(),
        1,
        "rate applies to pop_due_queue"
    );
    assert_eq!(s.pop_due_queue(&2, t0, 10).count(), 1);
    // (pop_due_queue leaves the refused ones due, see below; a pop_due parks them.)
    assert_eq!(s.pop_due(t0, 10).count(), 0);
    // The earliest permitted instant of the two throttled queues.
    assert_eq!(s.next_deadline(), Some(t0 + ms(100)));
    assert_eq!(
        s.pop_due(t0 + ms(100), 10)
            .map(|d| *d.id())
            .collect::<Vec<_>>(),
        [1]
    );
    assert_eq!(
        s.pop_due(t0 + ms(250), 10)
            .map(|d| *d.id())
            .collect::<Vec<_>>(),
        [11, 2],
        "schedule order at one deadline"
    );
    // Far future flush and release of an empty held queue: no panic, counts hold.
    s.hold_queue(&3);
    assert_eq!(
        s.flush_queue(&3, t0 + Duration::from_secs(86_400 * 365 * 50)),
        0
    );
    assert_eq!(s.release_queue(&3), 0);
    s.schedule(1, 100, t0 + Duration::from_secs(86_400 * 365 * 30), 0)
        .unwrap();
    assert_eq!(
        s.flush_queue(&1, t0 + Duration::from_secs(86_400 * 365 * 50)),
        0,
        "already due then"
    );
    assert_eq!(s.flush_queue(&1, t0 + Duration::from_secs(1)), 1);
    assert_eq!(
        s.pop_due(t0 + Duration::from_secs(1), 10)
            .map(|d| *d.id())
            .collect::<Vec<_>>(),
        [12, 100]
    );
}

/// `pop_due_queue`: "a member refused is parked, as by `pop_due`"; `set_rate`: the queue
/// gets a wake-up at the permitted instant and `queue_counts` shows `throttled`.
#[test]
fn pop_due_queue_parks_a_throttled_member() {
    let t0 = Instant::now();
    let s = rated(4, t0, RateLimit::per_second(10), 3);
    assert_eq!(s.pop_due_queue(&1, t0, 10).count(), 1);
    let c = s.queue_counts(&1);
    assert_eq!((c.parked, c.throttled), (2, true));
    assert_eq!(s.next_deadline(), Some(t0 + ms(100)));
}
