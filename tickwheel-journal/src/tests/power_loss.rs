//! Power loss under the journal: a redb journal on a simulated disk loses power at a
//! random call while a random workload runs; the image it leaves must hold every
//! acknowledged change (timers and queue holds), and nothing the workload never did.
//!
//! For each id the ledger keeps its acknowledged states in order. After the loss, an id
//! must be found in the state of its last change acknowledged before the power failed,
//! or in a later one (a change on its way to the disk may have reached it); never in an
//! earlier one (an acknowledged change lost, or an ended timer back) and never in one that
//! no call produced.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tickwheel::sync::Cancel;

use super::disk::{Disk, Loss};
use crate::store::redb::RedbStore;
use crate::{Durability, Durable, Options};

type J = Durable<u8, u64, String>;

/// A timer's state as the caller last saw it acknowledged.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Absent,
    /// Pending or in flight (an in-flight timer comes back pending): its queue, value and
    /// deadline.
    Live(u8, String, Instant),
}

struct Ledger {
    /// Per id: (number of acknowledged changes before this one, state after it).
    states: HashMap<u64, Vec<(u64, Seen)>>,
    /// Per queue: (the same count, whether the queue is held after the change).
    holds: HashMap<u8, Vec<(u64, bool)>>,
    acked: u64,
}

impl Ledger {
    fn record(&mut self, id: u64, seen: Seen) {
        self.states.entry(id).or_default().push((self.acked, seen));
        self.acked += 1;
    }

    fn record_hold(&mut self, queue: u8, held: bool) {
        self.holds
            .entry(queue)
            .or_default()
            .push((self.acked, held));
        self.acked += 1;
    }
}

/// The states an item may be found in after the loss: the last one acknowledged before
/// it (or `initial`, if none was) and every later one.
fn allowed<S: Clone>(history: &[(u64, S)], acked_at_loss: u64, initial: S) -> Vec<S> {
    let from = history
        .iter()
        .rposition(|(n, _)| *n < acked_at_loss)
        .unwrap_or(0);
    let mut allowed: Vec<S> = history[from..].iter().map(|(_, s)| s.clone()).collect();
    if history.first().is_none_or(|(n, _)| *n >= acked_at_loss) {
        allowed.insert(0, initial);
    }
    allowed
}

fn open(disk: Disk, durability: Durability) -> J {
    let store = RedbStore::open_backend(disk).expect("redb opens the simulated disk");
    Durable::open_store(
        Box::new(store),
        Options::new().durability(durability),
        |_, _| {},
    )
    .expect("the journal recovers")
}

/// Runs `steps` random changes against a journal on `disk`, acknowledging each; returns
/// the ledger and how many changes were acknowledged when the power failed.
fn run(disk: &Disk, durability: Durability, steps: usize, rng: &mut StdRng) -> (Ledger, u64) {
    let j = open(disk.clone(), durability);
    let t0 = Instant::now();
    let mut ledger = Ledger {
        states: HashMap::new(),
        holds: HashMap::new(),
        acked: 0,
    };
    let mut live: Vec<u64> = Vec::new();
    let mut next_id = 0u64;
    let mut acked_at_loss = None;
    let mut before_step = 0;
    for _ in 0..steps {
        let pick = rng.gen_range(0..100);
        if pick >= 95 {
            // Hold or release a queue: its hold must survive as acknowledged too.
            let queue = rng.gen_range(0..3u8);
            if rng.gen_bool(0.5) {
                j.hold_queue(&queue).expect("journal");
                ledger.record_hold(queue, true);
            } else {
                j.release_queue(&queue).expect("journal");
                ledger.record_hold(queue, false);
            }
        } else if pick < 45 || live.is_empty() {
            let id = next_id;
            next_id += 1;
            let queue = rng.gen_range(0..3u8);
            // A fifth are due at once, for the hand-outs below.
            let at = if rng.gen_bool(0.2) {
                t0
            } else {
                t0 + Duration::from_secs(10 * rng.gen_range(1..360))
            };
            let value = format!("v{id}");
            j.schedule(queue, id, at, value.clone())
                .expect("journal")
                .expect("a fresh id is accepted");
            ledger.record(id, Seen::Live(queue, value, at));
            live.push(id);
        } else if pick < 60 {
            let id = live.swap_remove(rng.gen_range(0..live.len()));
            match j.cancel(&id).expect("journal") {
                Cancel::Cancelled(_) => ledger.record(id, Seen::Absent),
                _ => live.push(id), // in flight: not cancellable; left as it is
            }
        } else if pick < 75 {
            let id = live[rng.gen_range(0..live.len())];
            let at = t0 + Duration::from_secs(10 * rng.gen_range(1..360));
            if j.reschedule(&id, at).expect("journal").is_ok() {
                let Some(Seen::Live(q, v, _)) = last(&ledger, id) else {
                    unreachable!("a live id has a live state");
                };
                ledger.record(id, Seen::Live(q, v, at));
            }
        } else {
            let mut batch = j.pop_due(Instant::now(), 1).expect("journal");
            if let Some(due) = batch.next() {
                let id = *due.id();
                let Some(Seen::Live(q, v, at)) = last(&ledger, id) else {
                    unreachable!("a handed-out id has a live state");
                };
                // The hand-out itself is a change (attempt count) of the same state.
                ledger.record(id, Seen::Live(q, v.clone(), at));
                if rng.gen_bool(0.5) {
                    due.done().expect("journal");
                    ledger.record(id, Seen::Absent);
                    live.retain(|&x| x != id);
                } else {
                    let at = t0 + Duration::from_secs(10 * rng.gen_range(1..360));
                    due.retry_at(at)
                        .expect("journal")
                        .expect("a retry is accepted");
                    ledger.record(id, Seen::Live(q, v, at));
                }
            }
        }
        // The changes of this step may have been acknowledged after the loss: only those
        // acknowledged by the last check that found the power on are known to precede it.
        if acked_at_loss.is_none() {
            if disk.after_loss().is_some() {
                acked_at_loss = Some(before_step);
            } else {
                before_step = ledger.acked;
            }
        }
    }
    drop(j);
    let acked = acked_at_loss.unwrap_or(ledger.acked);
    (ledger, acked)
}

fn last(ledger: &Ledger, id: u64) -> Option<Seen> {
    ledger.states.get(&id)?.last().map(|(_, s)| s.clone())
}

/// Whether `found` is `expected`: same queue and value, and a deadline no earlier (the
/// journal rounds up to a microsecond) and not much later (the wall clock's mapping back
/// to an `Instant`), or both already due.
fn matches(found: &Seen, expected: &Seen, now: Instant) -> bool {
    match (found, expected) {
        (Seen::Absent, Seen::Absent) => true,
        (Seen::Live(fq, fv, fa), Seen::Live(eq, ev, ea)) => {
            fq == eq
                && fv == ev
                && ((*fa + Duration::from_millis(50) >= *ea && *fa <= *ea + Duration::from_secs(1))
                    || (*ea <= now && *fa <= now + Duration::from_secs(1)))
        }
        _ => false,
    }
}

/// Checks the journal recovered from `image` against `ledger`; the first id out of place.
fn check(image: Vec<u8>, ledger: &Ledger, acked_at_loss: u64) -> Result<usize, String> {
    let j = open(
        Disk::new(image, u64::MAX, Loss::Everything, 0),
        Durability::Sync,
    );
    let now = Instant::now();
    let mut found_live = 0;
    for (&id, states) in &ledger.states {
        let found = match j.scheduler().lookup(&id) {
            None => Seen::Absent,
            Some(info) => {
                found_live += 1;
                let value = j
                    .scheduler()
                    .with_value(&id, |s| s.value().clone())
                    .ok_or_else(|| format!("id {id} listed without a value"))?;
                Seen::Live(info.queue, value, info.deadline)
            }
        };
        let allowed = allowed(states, acked_at_loss, Seen::Absent);
        if !allowed.iter().any(|s| matches(&found, s, now)) {
            return Err(format!(
                "id {id}: recovered {found:?}, allowed {allowed:?} (history {states:?})"
            ));
        }
    }
    for (&queue, history) in &ledger.holds {
        let held = j.scheduler().is_held(&queue);
        let allowed = allowed(history, acked_at_loss, false);
        if !allowed.contains(&held) {
            return Err(format!(
                "queue {queue}: recovered held={held}, allowed {allowed:?} (history {history:?})"
            ));
        }
    }
    if j.len() != found_live {
        return Err(format!(
            "{} timers recovered, {found_live} of them ever scheduled",
            j.len()
        ));
    }
    Ok(found_live)
}

fn rounds(loss: Loss, durability: Durability, rounds: u64) {
    let (mut lost_any, mut recovered) = (0, 0);
    for round in 0..rounds {
        let seed = 0x5eed_0000 + round;
        let mut rng = StdRng::seed_from_u64(seed);
        // How many backend calls a run makes, to place the loss anywhere in it.
        let probe = Disk::new(Vec::new(), u64::MAX, loss, seed);
        let _ = run(&probe, durability, 300, &mut StdRng::seed_from_u64(seed));
        let fail_at = rng.gen_range(1..=probe.calls());
        let disk = Disk::new(Vec::new(), fail_at, loss, seed);
        let (ledger, acked_at_loss) = run(&disk, durability, 300, &mut StdRng::seed_from_u64(seed));
        let Some(image) = disk.after_loss() else {
            continue; // this run made fewer calls than the probe
        };
        lost_any += 1;
        match check(image, &ledger, acked_at_loss) {
            Ok(live) => recovered += live,
            Err(e) => panic!(
                "{loss:?}, {durability:?}, seed {seed:#x}, power lost at call {fail_at}: {e}"
            ),
        }
    }
    assert!(
        lost_any * 2 >= rounds,
        "the power failed in only {lost_any} of {rounds} runs"
    );
    // Not a vacuous pass: the images held timers to check.
    assert!(
        recovered > rounds as usize,
        "only {recovered} timers recovered in all"
    );
}

#[test]
fn power_loss_keeps_every_acknowledged_change_sync() {
    rounds(Loss::Everything, Durability::Sync, 40);
}

#[test]
fn power_loss_keeps_every_acknowledged_change_batched() {
    rounds(
        Loss::Everything,
        Durability::Batched(Duration::from_millis(1)),
        40,
    );
}

#[test]
fn torn_page_cache_keeps_every_acknowledged_change() {
    rounds(Loss::SomePages, Durability::Sync, 40);
}
