//! Adversarial tests of freezing a queue (`tickwheel::sync`): threads racing a freezing
//! operator against producers and a retrying dispatcher, counting every id in and out, and
//! edge inputs (unknown queues, double freezes, duplicate imports, `Instant` extremes,
//! snapshot conversions at u64 extremes).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tickwheel::sync::{Cancel, FrozenEntry, RescheduleError, Retried, ScheduleError, Scheduler};

type Sched = Scheduler<u8, u64, u64>;

const QUEUES: u8 = 4;

/// Per id: +1 on every entry into the scheduler (schedule ok, import imported), +1 on every
/// exit (delivered, taken by freeze / take_forwarded, cancelled, drained). Plus a log.
#[derive(Default)]
struct Ledger {
    entries: HashMap<u64, u32>,
    exits: HashMap<u64, Vec<&'static str>>,
    refused: Vec<u64>,
    early: Vec<(u64, Duration)>,
    faults: Vec<String>,
}

impl Ledger {
    fn enter(&mut self, id: u64) {
        *self.entries.entry(id).or_default() += 1;
    }
    fn exit(&mut self, id: u64, how: &'static str) {
        self.exits.entry(id).or_default().push(how);
    }
}

/// What the threads of [`run_exactly_once`] share.
struct Race {
    sched: Sched,
    ledger: Mutex<Ledger>,
    /// The original (first) deadline of each id: nothing may ever come back earlier.
    first_at: Mutex<HashMap<u64, Instant>>,
    next_id: AtomicU64,
    stop: AtomicBool,
    final_phase: AtomicBool,
}

impl Race {
    /// Records a fault, reported at the end.
    fn fault(&self, what: String) {
        self.ledger.lock().unwrap().faults.push(what);
    }
}

fn run_exactly_once(seed: u64, rounds: u64) {
    let race = Arc::new(Race {
        sched: Scheduler::builder()
            .shards(4)
            .resolution(Duration::from_micros(100))
            .origin(Instant::now())
            .build(),
        ledger: Mutex::default(),
        first_at: Mutex::default(),
        next_id: AtomicU64::new(1),
        stop: AtomicBool::new(false),
        final_phase: AtomicBool::new(false),
    });

    let mut producers = Vec::new();
    for p in 0..2u64 {
        let race = Arc::clone(&race);
        producers.push(std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(seed ^ ((p + 1) * 0x9e37));
            for _ in 0..rounds {
                let id = race.next_id.fetch_add(1, Ordering::Relaxed);
                let q = rng.gen_range(0..QUEUES);
                let at = Instant::now() + Duration::from_micros(rng.gen_range(0..3_000));
                race.first_at.lock().unwrap().insert(id, at);
                // Record the entry first (an exit can race ahead of us otherwise; the
                // ledger is only checked at the end).
                race.ledger.lock().unwrap().enter(id);
                match race.sched.schedule(q, id, at, id) {
                    Ok(()) => {}
                    Err(ScheduleError::Frozen(v)) => {
                        assert_eq!(v, id);
                        let mut l = race.ledger.lock().unwrap();
                        *l.entries.get_mut(&id).unwrap() -= 1;
                        l.refused.push(id);
                    }
                    Err(e) => {
                        let mut l = race.ledger.lock().unwrap();
                        *l.entries.get_mut(&id).unwrap() -= 1;
                        l.faults.push(format!("schedule of fresh id {id}: {e:?}"));
                    }
                }
                if rng.gen_ratio(1, 8) {
                    std::thread::yield_now();
                }
            }
        }));
    }

    // Dispatcher: pops, checks deadlines, delivers / retries / drops batches half-taken.
    let dispatcher = {
        let race = Arc::clone(&race);
        std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(seed ^ 0xd15);
            loop {
                let now = if race.final_phase.load(Ordering::Acquire) {
                    Instant::now() + Duration::from_secs(3600)
                } else {
                    Instant::now()
                };
                let mut batch = race.sched.pop_due(now, rng.gen_range(1..24));
                let mut took_any = false;
                for due in batch.by_ref() {
                    took_any = true;
                    let id = *due.id();
                    if due.deadline() > now {
                        race.ledger
                            .lock()
                            .unwrap()
                            .early
                            .push((id, due.deadline() - now));
                    }
                    if *due.value() != id {
                        race.fault(format!("id {id} carries value {}", due.value()));
                    }
                    let roll = rng.gen_range(0..100);
                    let retry = !race.final_phase.load(Ordering::Acquire) && roll < 35;
                    if retry {
                        let at = due.deadline().max(now)
                            + Duration::from_micros(rng.gen_range(0..2_000));
                        match due.retry_at(at) {
                            Ok(Retried::Pending | Retried::Forwarded) => {}
                            Err(e) => {
                                let v = e.into_value();
                                race.ledger.lock().unwrap().exit(v, "retry-closed");
                            }
                        }
                    } else {
                        // Record first, then end the Due (dropping it = delivered).
                        race.ledger.lock().unwrap().exit(id, "delivered");
                        drop(due);
                    }
                    if !race.final_phase.load(Ordering::Acquire) && rng.gen_ratio(1, 6) {
                        // A handler "panics": the rest of the batch goes back (or is
                        // forwarded if its queue is frozen meanwhile).
                        break;
                    }
                }
                drop(batch);
                if !took_any {
                    // Only once the operator has given everything back (final phase).
                    if race.stop.load(Ordering::Acquire)
                        && race.final_phase.load(Ordering::Acquire)
                        && race.sched.is_empty()
                        && race.sched.in_flight_len() == 0
                    {
                        break;
                    }
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
        })
    };

    // Operator: freeze, take forwarded, cancel, drain, import into frozen, unfreeze, import back.
    let operator = {
        let race = Arc::clone(&race);
        std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(seed ^ 0x0fe);
            let mut held: Vec<(u8, FrozenEntry<u64, u64>)> = Vec::new();
            while !race.stop.load(Ordering::Acquire) {
                let q = rng.gen_range(0..QUEUES);
                let frozen = race.sched.freeze_queue(&q);
                {
                    let mut l = race.ledger.lock().unwrap();
                    let fa = race.first_at.lock().unwrap();
                    for e in &frozen.pending {
                        l.exit(e.id, "frozen");
                        if fa.get(&e.id).is_some_and(|&a| e.at < a) {
                            l.faults
                                .push(format!("freeze gave id {} an earlier deadline", e.id));
                        }
                    }
                }
                held.extend(frozen.pending.into_iter().map(|e| (q, e)));
                if !race.sched.is_frozen(&q) {
                    race.fault(format!("queue {q} not frozen after freeze"));
                }
                // Import into the frozen queue: must all be refused.
                if !held.is_empty() && rng.gen_ratio(1, 3) {
                    let probe: Vec<_> = held.iter().map(|(_, e)| e.clone()).take(3).collect();
                    let n = probe.len();
                    let got = race.sched.import(q, probe);
                    if got.imported != 0 || got.refused.len() != n {
                        let mut l = race.ledger.lock().unwrap();
                        l.faults.push(format!(
                            "import into frozen queue {q}: imported {}, present {}, refused {}",
                            got.imported,
                            got.present.len(),
                            got.refused.len()
                        ));
                        // Keep the books right if some were imported.
                        for _ in 0..got.imported {}
                    }
                }
                for _ in 0..rng.gen_range(0..20) {
                    std::thread::yield_now();
                }
                // Cancel a few recent ids (pending, forwarded or in flight).
                let top = race.next_id.load(Ordering::Relaxed);
                for _ in 0..rng.gen_range(0..4) {
                    let id = rng.gen_range(top.saturating_sub(200).max(1)..top.max(2));
                    match race.sched.cancel(&id) {
                        Cancel::Cancelled(v) => {
                            assert_eq!(v, id);
                            race.ledger.lock().unwrap().exit(id, "cancelled");
                        }
                        Cancel::InFlight | Cancel::NotFound => {}
                    }
                }
                // Reschedule of a forwarded id must say Frozen and change nothing.
                let fwd = race.sched.take_forwarded(&q);
                {
                    let mut l = race.ledger.lock().unwrap();
                    for e in &fwd {
                        l.exit(e.id, "forwarded");
                    }
                }
                held.extend(fwd.into_iter().map(|e| (q, e)));
                if rng.gen_ratio(1, 4) {
                    // Drain another queue (maybe frozen by nobody, maybe ours).
                    let dq = rng.gen_range(0..QUEUES);
                    let drained = race.sched.drain_queue(&dq);
                    let mut l = race.ledger.lock().unwrap();
                    for (id, v) in drained.cancelled {
                        assert_eq!(id, v);
                        l.exit(id, "drained");
                    }
                }
                if rng.gen_ratio(3, 4) {
                    // Wait a little for in-flight ones to come back forwarded.
                    std::thread::sleep(Duration::from_micros(rng.gen_range(100..1_500)));
                    let fwd = race.sched.take_forwarded(&q);
                    let mut l = race.ledger.lock().unwrap();
                    for e in &fwd {
                        l.exit(e.id, "forwarded");
                    }
                    drop(l);
                    held.extend(fwd.into_iter().map(|e| (q, e)));
                }
                race.sched.unfreeze_queue(&q);
                // Import what we hold back, into a random queue (maybe frozen by nobody).
                let back: Vec<_> = std::mem::take(&mut held);
                let mut by_q: HashMap<u8, Vec<FrozenEntry<u64, u64>>> = HashMap::new();
                for (_, e) in back {
                    by_q.entry(rng.gen_range(0..QUEUES)).or_default().push(e);
                }
                for (tq, entries) in by_q {
                    let ids: Vec<u64> = entries.iter().map(|e| e.id).collect();
                    // Record entries first (they may be delivered at once).
                    {
                        let mut l = race.ledger.lock().unwrap();
                        for &id in &ids {
                            l.enter(id);
                        }
                    }
                    let got = race.sched.import(tq, entries);
                    let mut l = race.ledger.lock().unwrap();
                    for e in got.present.iter().chain(got.refused.iter()) {
                        *l.entries.get_mut(&e.id).unwrap() -= 1;
                    }
                    for e in &got.present {
                        l.faults
                            .push(format!("import: id {} we hold is still present", e.id));
                    }
                    drop(l);
                    held.extend(got.refused.into_iter().map(|e| (tq, e)));
                    held.extend(got.present.into_iter().map(|e| (tq, e)));
                }
            }
            // Give back everything held.
            for q in 0..QUEUES {
                race.sched.unfreeze_queue(&q);
            }
            let entries: Vec<_> = held.into_iter().map(|(_, e)| e).collect();
            {
                let mut l = race.ledger.lock().unwrap();
                for e in &entries {
                    l.enter(e.id);
                }
            }
            let got = race.sched.import(0, entries);
            assert!(
                got.present.is_empty() && got.refused.is_empty(),
                "final import: {got:?}"
            );
        })
    };
    for p in producers {
        p.join().unwrap();
    }
    race.stop.store(true, Ordering::Release);
    operator.join().unwrap();
    race.final_phase.store(true, Ordering::Release);
    dispatcher.join().unwrap();
    assert_eq!((race.sched.len(), race.sched.in_flight_len()), (0, 0));

    let l = race.ledger.lock().unwrap();
    let mut bad = Vec::new();
    for (&id, &n) in &l.entries {
        let exits = l.exits.get(&id).map_or(0, Vec::len) as u32;
        if exits != n {
            bad.push(format!(
                "id {id}: entered {n}, exited {exits}: {:?}",
                l.exits.get(&id)
            ));
        }
    }
    for id in &l.refused {
        if l.exits.contains_key(id) {
            bad.push(format!("refused id {id} exited: {:?}", l.exits[id]));
        }
    }
    for (&id, how) in &l.exits {
        if !l.entries.contains_key(&id) {
            bad.push(format!("id {id} exited without entering: {how:?}"));
        }
    }
    bad.sort();
    let mut kinds: HashMap<&str, usize> = HashMap::new();
    for how in l.exits.values().flatten() {
        *kinds.entry(how).or_default() += 1;
    }
    eprintln!("seed {seed}: exits {kinds:?}, refused {}", l.refused.len());
    assert!(
        l.faults.is_empty(),
        "seed {seed}: faults: {:?}",
        &l.faults[..l.faults.len().min(20)]
    );
    assert!(
        l.early.is_empty(),
        "seed {seed}: early deliveries: {:?}",
        &l.early[..l.early.len().min(20)]
    );
    assert!(
        bad.is_empty(),
        "seed {seed}: {} ids off: {:?}",
        bad.len(),
        &bad[..bad.len().min(20)]
    );
}

#[test]
fn threads_exactly_once_across_freeze_retry_import() {
    let seed = std::env::var("FREEZE_RACES_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_u64);
    for i in 0..4 {
        run_exactly_once(seed.wrapping_add(i), 20_000);
    }
}

// ---------------------------------------------------------------------------------------
// Deterministic edge cases.

fn sched(t0: Instant) -> Scheduler<&'static str, u32, u32> {
    Scheduler::builder().shards(4).origin(t0).build()
}

/// A scheduler of 4 shards whose origin is now, and that origin.
fn started() -> (Instant, Scheduler<&'static str, u32, u32>) {
    let t0 = Instant::now();
    (t0, sched(t0))
}

/// A frozen entry: `id` due at `at` with `value`.
fn entry<K, T>(id: K, at: Instant, value: T) -> FrozenEntry<K, T> {
    FrozenEntry { id, at, value }
}

#[test]
fn freeze_unknown_queue_then_unfreeze_leaves_nothing() {
    let (t0, s) = started();
    let f = s.freeze_queue(&"nobody");
    assert!(f.pending.is_empty() && f.in_flight.is_empty());
    assert!(s.is_frozen(&"nobody"));
    // A frozen queue without members is not a queue: must not show up.
    assert!(s.queues().is_empty(), "queues() lists {:?}", s.queues());
    assert_eq!(s.queue_len(&"nobody"), 0);
    assert_eq!(s.unfreeze_queue(&"nobody"), 0);
    assert!(!s.is_frozen(&"nobody"));
    assert_eq!(
        s.unfreeze_queue(&"nobody"),
        0,
        "unfreeze of an unfrozen queue"
    );
    s.schedule("nobody", 1, t0, 1).unwrap();
}

#[test]
fn double_freeze_reports_in_flight_again_takes_nothing_twice() {
    let (t0, s) = started();
    for id in 0..10 {
        s.schedule("q", id, t0 + Duration::from_millis(u64::from(id)), id)
            .unwrap();
    }
    let mut batch = s.pop_due(t0 + Duration::from_millis(2), 10);
    let d0 = batch.next().unwrap();
    let f1 = s.freeze_queue(&"q");
    assert_eq!(f1.pending.len(), 7);
    assert_eq!(f1.in_flight, [0, 1, 2]);
    let f2 = s.freeze_queue(&"q");
    assert!(f2.pending.is_empty());
    assert_eq!(f2.in_flight, [0, 1, 2]);
    // Dropping the half-taken batch forwards 1 and 2.
    drop(batch);
    let f3 = s.freeze_queue(&"q");
    assert!(f3.pending.is_empty(), "freeze must not take forwarded");
    assert_eq!(f3.in_flight, [0]);
    assert_eq!(s.stats().forwarded, 2);
    assert_eq!(s.queue_in_flight(&"q"), [0]);
    drop(d0);
    assert!(s.queue_in_flight(&"q").is_empty());
    let fwd = s.take_forwarded(&"q");
    assert_eq!(fwd.iter().map(|e| e.id).collect::<Vec<_>>(), [1, 2]);
    // Their deadlines are the originals (not rounded, not changed).
    assert_eq!(fwd[0].at, t0 + Duration::from_millis(1));
    assert!(s.is_empty());
    assert_eq!(s.unfreeze_queue(&"q"), 0);
    assert_eq!(s.unfreeze_queue(&"q"), 0);
}

#[test]
fn frozen_queue_refuses_schedule_import_reschedule_and_pop_delivers_nothing() {
    let (t0, s) = started();
    s.schedule("q", 1, t0, 10).unwrap();
    s.schedule("other", 2, t0, 20).unwrap();
    let due = s.pop_due(t0, 1).next().unwrap();
    assert_eq!(*due.id(), 1);
    s.freeze_queue(&"q");
    assert_eq!(s.schedule("q", 3, t0, 30), Err(ScheduleError::Frozen(30)));
    // schedule of an id in flight into a frozen queue: Frozen (checked first).
    assert_eq!(s.schedule("q", 1, t0, 11), Err(ScheduleError::Frozen(11)));
    // An id pending in another queue, imported into a frozen one: refused, not present.
    let got = s.import("q", vec![entry(2, t0, 21)]);
    assert_eq!(
        (got.imported, got.present.len(), got.refused.len()),
        (0, 0, 1)
    );
    assert_eq!(due.retry_at(t0), Ok(Retried::Forwarded));
    assert_eq!(s.reschedule(&1, t0), Err(RescheduleError::Frozen));
    assert_eq!(
        s.schedule("other", 1, t0, 12),
        Err(ScheduleError::Pending(12))
    );
    let popped: Vec<_> = s
        .pop_due(t0 + Duration::from_secs(1), 100)
        .map(|d| *d.id())
        .collect();
    assert_eq!(popped, [2], "a forwarded timer must never be due");
    assert_eq!(s.cancel(&1), Cancel::Cancelled(10));
    assert!(s.is_empty());
}

#[test]
fn import_duplicate_ids_in_one_call() {
    let (t0, s) = started();
    let e = |id, v| FrozenEntry {
        id,
        at: t0 + Duration::from_millis(5),
        value: v,
    };
    let got = s.import("q", vec![e(1, 1), e(1, 2), e(2, 3), e(1, 4)]);
    assert_eq!(got.imported, 2);
    assert_eq!(got.present, vec![e(1, 2), e(1, 4)]);
    assert_eq!(s.len(), 2);
    let vals: Vec<_> = s
        .pop_due(t0 + Duration::from_secs(1), 10)
        .map(|d| d.into_value())
        .collect();
    assert_eq!(vals, [1, 3], "first of the duplicates wins, in input order");
}

#[test]
fn import_of_an_id_in_flight_or_forwarded_is_present() {
    let (t0, s) = started();
    s.schedule("q", 1, t0, 1).unwrap();
    s.schedule("q", 2, t0, 2).unwrap();
    let mut batch = s.pop_due(t0, 10);
    let d1 = batch.next().unwrap();
    let got = s.import("z", vec![entry(1, t0, 9)]);
    assert_eq!(got.present.len(), 1, "in flight");
    s.freeze_queue(&"q");
    drop(batch); // 2 forwarded
    let got = s.import("z", vec![entry(2, t0, 9)]);
    assert_eq!(got.present.len(), 1, "forwarded");
    drop(d1);
    let got = s.import("z", vec![entry(1, t0, 9)]);
    assert_eq!(got.imported, 1, "delivered: free again");
}

/// The latest `Instant` the platform holds, from `from` on.
fn latest(from: Instant) -> Instant {
    let mut at = from;
    let mut step = Duration::MAX;
    while !step.is_zero() {
        while let Some(l) = at.checked_add(step) {
            at = l;
        }
        step /= 2;
    }
    at
}

#[test]
fn instant_extremes_do_not_panic_or_drop() {
    let t0 = Instant::now() + Duration::from_secs(1000);
    let s = sched(t0);
    // Far future: the latest Instant the platform holds.
    let far = latest(t0);
    // Before the origin.
    let early = Instant::now()
        .checked_sub(Duration::from_secs(1))
        .unwrap_or_else(Instant::now);
    s.schedule("q", 1, far, 1).unwrap();
    s.schedule("q", 2, early, 2).unwrap();
    let got = s.import("q", vec![entry(3, far, 3), entry(4, early, 4)]);
    assert_eq!(got.imported, 2);
    // pop at the far end: due ones come out, not the saturated ones; nothing panics.
    let popped: Vec<_> = s.pop_due(far, 10).map(|d| *d.id()).collect();
    assert_eq!(popped, [2, 4]);
    let f = s.freeze_queue(&"q");
    assert_eq!(
        f.pending.iter().map(|e| (e.id, e.at)).collect::<Vec<_>>(),
        [(1, far), (3, far)]
    );
    // retry_at with extremes.
    s.unfreeze_queue(&"q");
    s.schedule("q", 5, early, 5).unwrap();
    let due = s.pop_due(t0, 1).next().unwrap();
    assert_eq!(due.retry_at(far), Ok(Retried::Pending));
    let due_none = s.pop_due(far, 10).count();
    assert_eq!(due_none, 0);
    assert_eq!(s.cancel(&5), Cancel::Cancelled(5));
}

#[test]
fn retry_at_earlier_than_original_deadline_is_honoured_but_never_before_it() {
    // retry_at to a time in the past: due now, delivered next pop, not early w.r.t. the
    // new deadline.
    let (t0, s) = started();
    s.schedule("q", 1, t0 + Duration::from_millis(10), 1)
        .unwrap();
    let now = t0 + Duration::from_millis(10);
    let due = s.pop_due(now, 1).next().unwrap();
    assert_eq!(due.retry_at(t0), Ok(Retried::Pending));
    let d = s.pop_due(now, 1).next().unwrap();
    assert_eq!(d.deadline(), t0);
}

// ---------------------------------------------------------------------------------------
// Snapshot conversions (feature serde).

#[cfg(feature = "serde")]
mod snapshots {
    use super::*;
    use tickwheel::sync::snapshot::{
        SNAPSHOT_VERSION, Snapshot, SnapshotError, from_reference, to_reference,
    };

    #[test]
    fn to_reference_extremes() {
        let now = Instant::now();
        assert_eq!(to_reference(now, now, u64::MAX), u64::MAX);
        assert_eq!(to_reference(now, now, 0), 0);
        assert_eq!(
            to_reference(now + Duration::from_nanos(1), now, u64::MAX),
            u64::MAX
        );
        assert_eq!(to_reference(now + Duration::from_nanos(1), now, 0), 2);
        assert_eq!(to_reference(latest(now), now, 0), u64::MAX);
        assert_eq!(to_reference(latest(now), now, u64::MAX - 1), u64::MAX);
        // Never earlier: at least the reference reading.
        let early = now.checked_sub(Duration::from_secs(5)).unwrap_or(now);
        assert_eq!(to_reference(early, now, 7), 7);
    }

    #[test]
    fn from_reference_extremes() {
        let now = Instant::now();
        assert_eq!(from_reference(0, u64::MAX, now), now);
        assert_eq!(from_reference(0, 0, now), now);
        // u64::MAX is the saturated deadline: the latest Instant, whatever the reading.
        let far = from_reference(u64::MAX, 0, now);
        assert!(far >= now + Duration::from_micros(u64::MAX / 2));
        assert_eq!(from_reference(u64::MAX, u64::MAX, now), far);
        assert_eq!(from_reference(u64::MAX, u64::MAX - 1, now), far);
        // ~584 000 years of µs fits in a Duration; whether it fits in an Instant is the
        // platform's call. Either way: no panic, never earlier than now + something large.
        let far2 = from_reference(u64::MAX / 2, 0, now);
        assert!(far2 > now + Duration::from_secs(1_000_000));
    }

    #[test]
    fn round_trip_never_earlier_through_scheduler() {
        let (t0, s) = started();
        let ats = [
            t0,
            t0 + Duration::from_nanos(1),
            t0 + Duration::from_nanos(999),
            t0 + Duration::from_micros(1),
            t0 + Duration::from_secs(3600),
            latest(t0),
        ];
        for (i, &at) in ats.iter().enumerate() {
            s.schedule("q", i as u32, at, i as u32).unwrap();
        }
        let frozen = s.freeze_queue(&"q");
        for reference in [0u64, 1, u64::MAX / 2, u64::MAX - 1, u64::MAX] {
            let local = Instant::now();
            let snap = Snapshot::export("q", frozen.pending.clone(), local, reference);
            let json = serde_json::to_string(&snap).unwrap();
            let back: Snapshot<String, u32, u32> = serde_json::from_str(&json).unwrap();
            assert_eq!(back.version, SNAPSHOT_VERSION);
            let local2 = Instant::now();
            let entries = back.into_entries(reference, local2).unwrap();
            assert_eq!(entries.len(), frozen.pending.len());
            for (a, b) in frozen.pending.iter().zip(&entries) {
                assert_eq!((a.id, a.value), (b.id, b.value));
                if a.at == latest(t0) {
                    continue; // clamped at the latest Instant on both sides
                }
                // Never earlier (left relative to the reading).
                let left_a = a.at.saturating_duration_since(local);
                let left_b = b.at.saturating_duration_since(local2);
                // At u64::MAX the reference saturates: the time left collapses to zero.
                // That makes a future deadline due NOW on the target: earlier.
                assert!(
                    left_b >= left_a,
                    "reference {reference}: id {} left {left_a:?} before, {left_b:?} after",
                    a.id
                );
            }
        }
    }

    #[test]
    fn versions() {
        let now = Instant::now();
        for v in [0u32, 2, u32::MAX] {
            let s: Snapshot<&str, u32, ()> = Snapshot {
                version: v,
                queue: "q",
                entries: vec![],
            };
            assert_eq!(
                s.into_entries(0, now),
                Err(SnapshotError::UnknownVersion(v))
            );
        }
        // Missing version field in JSON: refused by serde, not defaulted.
        let r: Result<Snapshot<String, u32, u32>, _> =
            serde_json::from_str(r#"{"queue":"q","entries":[]}"#);
        assert!(r.is_err());
        // Negative / overflowing deadline_us: serde error, not a wrap.
        let r: Result<Snapshot<String, u32, u32>, _> = serde_json::from_str(
            r#"{"version":1,"queue":"q","entries":[{"id":1,"deadline_us":18446744073709551616,"value":1}]}"#,
        );
        assert!(r.is_err());
    }
}

#[test]
fn concurrent_imports_of_the_same_ids_import_each_once() {
    let t0 = Instant::now();
    let s: Arc<Scheduler<u8, u32, u32>> =
        Arc::new(Scheduler::builder().shards(8).origin(t0).build());
    let entries: Vec<_> = (0..5_000u32)
        .map(|id| FrozenEntry {
            id,
            at: t0 + Duration::from_millis(u64::from(id % 7)),
            value: id,
        })
        .collect();
    let handles: Vec<_> = (0..4u8)
        .map(|q| {
            let (s, entries) = (Arc::clone(&s), entries.clone());
            std::thread::spawn(move || s.import(q, entries))
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let imported: usize = results.iter().map(|r| r.imported).sum();
    let present: usize = results.iter().map(|r| r.present.len()).sum();
    assert_eq!((imported, present), (5_000, 15_000));
    assert_eq!(s.len(), 5_000);
    let mut seen: Vec<u32> = s
        .pop_due(t0 + Duration::from_secs(1), usize::MAX)
        .map(|d| d.into_value())
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..5_000).collect::<Vec<_>>());
}

#[test]
fn racing_freeze_and_unfreeze_keep_custody() {
    // Two operators freeze and unfreeze the same queue at once while a producer schedules and
    // a dispatcher retries: the queue may end half-frozen across shards, but no id is lost or
    // doubled, and is_frozen answers for any shard.
    let t0 = Instant::now();
    let s: Arc<Scheduler<u8, u64, u64>> =
        Arc::new(Scheduler::builder().shards(4).origin(t0).build());
    let stop = Arc::new(AtomicBool::new(false));
    let taken = Arc::new(Mutex::new(Vec::<u64>::new()));
    let delivered = Arc::new(Mutex::new(Vec::<u64>::new()));
    let mut hs = Vec::new();
    for _ in 0..2 {
        let (s, stop, taken) = (Arc::clone(&s), Arc::clone(&stop), Arc::clone(&taken));
        hs.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                let f = s.freeze_queue(&0);
                let fw = s.take_forwarded(&0);
                let mut t = taken.lock().unwrap();
                t.extend(f.pending.iter().map(|e| e.id));
                t.extend(fw.iter().map(|e| e.id));
                drop(t);
                s.unfreeze_queue(&0);
            }
        }));
    }
    {
        let (s, stop, delivered) = (Arc::clone(&s), Arc::clone(&stop), Arc::clone(&delivered));
        hs.push(std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Acquire) {
                for due in s.pop_due(Instant::now(), 8) {
                    n += 1;
                    if n % 3 == 0 {
                        let at = Instant::now();
                        let _ = due.retry_at(at);
                    } else {
                        delivered.lock().unwrap().push(*due.id());
                    }
                }
            }
        }));
    }
    let mut scheduled = Vec::new();
    for id in 0..30_000u64 {
        if s.schedule(0, id, Instant::now(), id).is_ok() {
            scheduled.push(id);
        }
    }
    stop.store(true, Ordering::Release);
    for h in hs {
        h.join().unwrap();
    }
    // Whatever state the marks are in now, unfreeze fully and collect the rest.
    s.unfreeze_queue(&0);
    let f = s.freeze_queue(&0);
    let mut t = taken.lock().unwrap();
    t.extend(f.pending.iter().map(|e| e.id));
    t.extend(s.take_forwarded(&0).iter().map(|e| e.id));
    assert!(f.in_flight.is_empty());
    let mut all: Vec<u64> = t
        .iter()
        .copied()
        .chain(delivered.lock().unwrap().iter().copied())
        .collect();
    all.sort_unstable();
    assert_eq!(all, scheduled, "ids lost or doubled");
    assert!(s.is_empty());
}
