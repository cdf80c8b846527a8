//! Adversarial checks of a queue's flow control through the journal: changes made
//! through `scheduler()` (documented as bypassing the journal), policies of drained
//! queues, odd queue names, many threads changing policy while scheduling, re-opening with
//! another shard count or resolution, and rates whose values do not round-trip.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use tickwheel::sync::RateLimit;
use tickwheel_journal::{Durability, Durable, Options};

type J = Durable<String, u64, String>;

fn open(dir: &std::path::Path) -> J {
    open_with(dir, Options::new().durability(Durability::Sync))
}

fn open_with(dir: &std::path::Path, options: Options) -> J {
    Durable::open(dir, options).expect("open the journal")
}

/// The policy a scheduler applies to `queue`: (held, concurrency, rate).
type Seen = (bool, Option<usize>, Option<(Duration, u64)>);

fn policy(j: &J, queue: &str) -> Seen {
    let s = j.scheduler();
    (s.is_held(queue), s.concurrency(queue), s.rate(queue))
}

/// `scheduler()` is documented "Changing it through this reference bypasses the journal;
/// only read": a hold and limits set there are gone after a re-open.
#[test]
fn a_hold_through_the_scheduler_is_not_recorded() {
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let j = open(dir.path());
        j.scheduler().hold_queue("q");
        j.scheduler().set_concurrency("q", Some(3));
        j.close().expect("close");
    }
    let j = open(dir.path());
    assert_eq!(policy(&j, "q"), (false, None, None));
}

/// But a recorded change of the same queue records the queue's whole policy, the
/// unrecorded hold included: the hold made through `scheduler()` survives a re-open once
/// any recorded change of the queue follows. (Pins what happens; the docs of `scheduler()`
/// and `set_rate` do not say it.)
#[test]
fn a_recorded_change_records_what_was_set_through_the_scheduler() {
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let j = open(dir.path());
        j.scheduler().hold_queue("q");
        j.set_rate(&"q".into(), Some(RateLimit::per_second(2)))
            .expect("rate");
        j.close().expect("close");
    }
    let j = open(dir.path());
    assert_eq!(
        policy(&j, "q"),
        (true, None, Some((Duration::from_millis(500), 1)))
    );
}

/// A release through `scheduler()` of a hold recorded through the journal: the hold
/// comes back after a re-open (the documented consequence of bypassing the journal).
#[test]
fn a_release_through_the_scheduler_comes_back_held() {
    let dir = tempfile::tempdir().expect("temp dir");
    let t0 = Instant::now();
    {
        let j = open(dir.path());
        j.hold_queue(&"q".into()).expect("hold");
        j.schedule("q".into(), 1, t0, "a".into())
            .expect("journal")
            .expect("new");
        assert_eq!(j.scheduler().release_queue("q"), 0, "nothing parked yet");
        assert!(!j.scheduler().is_held("q"));
        j.close().expect("close");
    }
    let j = open(dir.path());
    assert!(j.scheduler().is_held("q"));
    assert_eq!(j.pop_due(Instant::now(), 10).expect("pop").count(), 0);
}

/// A queue's policy outlives its timers: drained, frozen away, all handed out and done.
#[test]
fn the_policy_of_a_queue_with_no_timers_left_survives() {
    let dir = tempfile::tempdir().expect("temp dir");
    let t0 = Instant::now();
    {
        let j = open(dir.path());
        for q in ["drained", "frozen", "done"] {
            j.hold_queue(&q.into()).expect("hold");
            j.set_concurrency(&q.into(), Some(2)).expect("concurrency");
            for id in 0..3 {
                let id = id + 10 * q.len() as u64;
                j.schedule(q.into(), id, t0, String::new())
                    .expect("journal")
                    .expect("new");
            }
        }
        assert_eq!(
            j.drain_queue(&"drained".into())
                .expect("drain")
                .cancelled
                .len(),
            3
        );
        assert_eq!(
            j.freeze_queue(&"frozen".into())
                .expect("freeze")
                .pending
                .len(),
            3
        );
        j.release_queue(&"done".into()).expect("release");
        for _ in 0..5 {
            for due in j.pop_due(Instant::now(), 10).expect("pop") {
                due.done().expect("done");
            }
        }
        j.hold_queue(&"done".into()).expect("hold again");
        assert!(j.is_empty());
        j.close().expect("close");
    }
    let j = open(dir.path());
    for q in ["drained", "frozen", "done"] {
        assert_eq!(policy(&j, q), (true, Some(2), None), "{q}");
    }
    assert!(j.is_empty());
}

/// Queue names that encode oddly: empty, long, unicode, control characters, names that
/// are prefixes of one another.
#[test]
fn odd_queue_names_round_trip() {
    let dir = tempfile::tempdir().expect("temp dir");
    let long = "x".repeat(64 * 1024);
    let names: Vec<String> = vec![
        String::new(),
        "\0".into(),
        "a".into(),
        "ab".into(),
        "a\0".into(),
        "é".into(),
        "e\u{301}".into(),
        "🦀 queue".into(),
        "\u{10FFFF}".into(),
        long.clone(),
        format!("{long}y"),
    ];
    {
        let j = open(dir.path());
        for (i, q) in names.iter().enumerate() {
            let i = i as u32;
            if i.is_multiple_of(2) {
                j.hold_queue(q).expect("hold");
            }
            j.set_concurrency(q, Some(i as usize + 1))
                .expect("concurrency");
            j.set_rate(q, Some(RateLimit::per_second(i + 1).with_burst(i + 1)))
                .expect("rate");
        }
        j.close().expect("close");
    }
    let j = open(dir.path());
    for (i, q) in names.iter().enumerate() {
        let n = i as u32 + 1;
        let want = (
            i % 2 == 0,
            Some(n as usize),
            Some((RateLimit::per_second(n).interval(), u64::from(n))),
        );
        assert_eq!(policy(&j, q), want, "queue #{i} ({} bytes)", q.len());
    }
    // Lift everything: the records go, and nothing is left for another re-open.
    for q in &names {
        j.release_queue(q).expect("release");
        j.set_concurrency(q, None).expect("lift");
        j.set_rate(q, None).expect("lift");
    }
    j.close().expect("close");
    let j = open(dir.path());
    for q in &names {
        assert_eq!(policy(&j, q), (false, None, None));
    }
}

/// Eight threads change the policies of three queues and schedule into them at once; the
/// policy in memory at close is the policy after a re-open, and every timer comes back.
#[test]
fn threads_changing_policy_and_scheduling_agree_with_the_record() {
    let dir = tempfile::tempdir().expect("temp dir");
    let t0 = Instant::now();
    let queues = ["a", "b", "c"];
    let before: Vec<Seen>;
    {
        let j = Arc::new(open_with(
            dir.path(),
            Options::new().durability(Durability::Batched(Duration::from_micros(200))),
        ));
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let j = Arc::clone(&j);
                std::thread::spawn(move || {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(t);
                    for step in 0..150u64 {
                        let q: String = queues[rng.gen_range(0..3)].into();
                        match rng.gen_range(0..6) {
                            0 => {
                                j.hold_queue(&q).expect("hold");
                            }
                            1 => {
                                j.release_queue(&q).expect("release");
                            }
                            2 => {
                                let n = rng.gen_range(0..4usize);
                                j.set_concurrency(&q, (n > 0).then_some(n)).expect("c");
                            }
                            3 => {
                                let r = rng.gen_range(0..4u32);
                                let limit = (r > 0).then(|| RateLimit::per_second(r).with_burst(r));
                                j.set_rate(&q, limit).expect("rate");
                            }
                            _ => {
                                j.schedule(
                                    q,
                                    t * 1000 + step,
                                    t0 + Duration::from_secs(3600),
                                    String::new(),
                                )
                                .expect("journal")
                                .expect("new");
                            }
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        before = queues.iter().map(|q| policy(&j, q)).collect();
        assert!(j.len() > 100, "scheduled {}", j.len());
        let j = Arc::into_inner(j).expect("the last handle");
        let len = j.len();
        j.close().expect("close");
        let j = open(dir.path());
        assert_eq!(j.len(), len);
    }
    let j = open(dir.path());
    let after: Vec<Seen> = queues.iter().map(|q| policy(&j, q)).collect();
    assert_eq!(before, after);
}

/// Re-opened with another shard count and resolution: the hold and limits apply from the
/// first pop.
#[test]
fn reopen_with_other_shards_and_resolution_keeps_policy() {
    let dir = tempfile::tempdir().expect("temp dir");
    let t0 = Instant::now();
    {
        let j = open_with(dir.path(), Options::new().shards(1));
        j.hold_queue(&"held".into()).expect("hold");
        j.set_concurrency(&"one".into(), Some(1))
            .expect("concurrency");
        j.set_rate(&"slow".into(), Some(RateLimit::per_second(3).with_burst(2)))
            .expect("rate");
        for (i, q) in ["held", "one", "slow"].iter().enumerate() {
            for id in 0..5 {
                j.schedule((*q).into(), i as u64 * 100 + id, t0, String::new())
                    .expect("journal")
                    .expect("new");
            }
        }
        j.close().expect("close");
    }
    for (shards, resolution) in [
        (16, Duration::from_millis(10)),
        (3, Duration::from_micros(100)),
    ] {
        let j = open_with(
            dir.path(),
            Options::new().shards(shards).resolution(resolution),
        );
        let now = Instant::now() + Duration::from_millis(20);
        let mut out = [0usize; 3];
        let batch: Vec<_> = j.pop_due(now, 100).expect("pop").collect();
        for due in &batch {
            out[(*due.id() / 100) as usize] += 1;
        }
        assert_eq!(
            out,
            [0, 1, 2],
            "shards {shards}: held, one at a time, burst of 2"
        );
        assert_eq!(
            j.scheduler().rate("slow"),
            Some((RateLimit::per_second(3).interval(), 2))
        );
        drop(batch); // handed back untaken: every timer stays
        j.close().expect("close");
    }
}

/// A rate whose burst saturates the scheduler's tolerance (one per 300 years, burst 3)
/// reads back with another burst, and the journal records what it reads back: the
/// re-opened queue has a different limit from the one set.
#[test]
fn a_rate_with_a_saturated_burst_round_trips() {
    let dir = tempfile::tempdir().expect("temp dir");
    let limit = RateLimit {
        count: 1,
        per: Duration::from_secs(86_400 * 365 * 300),
        burst: 3,
    };
    {
        let j = open(dir.path());
        j.set_rate(&"q".into(), Some(limit)).expect("rate");
        assert_eq!(
            j.scheduler().rate("q"),
            Some((limit.interval(), 3)),
            "in memory"
        );
        j.close().expect("close");
    }
    let j = open(dir.path());
    assert_eq!(j.scheduler().rate("q"), Some((limit.interval(), 3)));
}

/// Extreme but unsaturated values round-trip exactly: a rate of u32::MAX a nanosecond
/// (interval 1 ns), u32::MAX per Duration::MAX, a burst of u32::MAX, concurrency 0.
#[test]
fn extreme_rates_round_trip() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cases = [
        RateLimit {
            count: u32::MAX,
            per: Duration::from_nanos(1),
            burst: u32::MAX,
        },
        RateLimit {
            count: u32::MAX,
            per: Duration::MAX,
            burst: 1,
        },
        RateLimit {
            count: 0,
            per: Duration::ZERO,
            burst: 0,
        },
        RateLimit::per_second(7).with_burst(u32::MAX),
    ];
    let mut want = Vec::new();
    {
        let j = open(dir.path());
        for (i, limit) in cases.iter().enumerate() {
            let q = format!("q{i}");
            j.set_rate(&q, Some(*limit)).expect("rate");
            j.set_concurrency(&q, Some(0)).expect("zero");
            want.push(policy(&j, &q));
        }
        j.close().expect("close");
    }
    let j = open(dir.path());
    for (i, w) in want.iter().enumerate() {
        assert_eq!(&policy(&j, &format!("q{i}")), w, "case {i}");
    }
}
