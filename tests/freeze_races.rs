//! Adversarial tests of freezing a queue (`tickwheel::sync`): threads racing a freezing
//! operator against producers and a retrying dispatcher, counting every id in and out;
//! concurrent imports of the same ids; freezes racing unfreezes. The edge inputs are in
//! `freeze_edges_adversarial.rs`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tickwheel::sync::{Cancel, FrozenEntry, Retried, ScheduleError, Scheduler};

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
