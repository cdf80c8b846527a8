//! Adversarial checks of per-queue flow control as a whole: holds, limits and rates changing
//! while producers, drains and dispatchers race (`races_count_every_timer_once`), the counts
//! (`queue_counts`, `len`, `stats`) and the admission limit's edges. Holds, the concurrency
//! limit and the rate limit each have their own file (`flow_holds_adversarial.rs`,
//! `flow_concurrency_adversarial.rs`, `flow_rate_adversarial.rs`). Time is simulated: every
//! `now` is an explicit `Instant`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tickwheel::sync::{Cancel, RateLimit};

mod support;

use support::flow::{ms, sched};

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

#[test]
fn admission_limit_capacity_edges() {
    let l = tickwheel::admission::Limit::new(10);
    for cap in [0, 1, u64::MAX, 7, 0, u64::MAX - 1] {
        l.set_capacity(cap);
        assert_eq!((l.capacity(), l.available()), (cap, cap));
    }
}
