//! Producers, dispatchers and ends racing two joins and a leave.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use crate::support::checks::assert_none;
use crate::support::*;

// ---------------------------------------------------------------------------------------
// Producers, dispatchers and ends racing two joins and a leave.

#[derive(Default)]
struct Race {
    ledger: Mutex<Ledger>,
    intended: Mutex<HashMap<u64, Instant>>,
    /// Puts acknowledged: (queue, id).
    acked_puts: Mutex<BTreeSet<(String, u64)>>,
    /// Ends acknowledged: (queue, id, token of the hand-out they ended).
    acked_ends: Mutex<Vec<(String, u64, u64)>>,
    members: Mutex<Vec<Arc<FleetMember>>>,
}

impl Race {
    /// Waits (at most 30 s, failing as `what`) until each queue of `qs` has one owner among
    /// the members, then 1 s more.
    async fn settled(&self, qs: &[String], what: &str) {
        let ms: Vec<Arc<FleetMember>> = self.members.lock().expect("lock").clone();
        wait_until(Duration::from_secs(30), what, || {
            let refs: Vec<&FleetMember> = ms.iter().map(|m| &**m).collect();
            exactly_one(&refs, qs)
        })
        .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Hands out what is due at `m` every 5 ms; per batch, journals each end, waits for the
/// acknowledgements, then drops the `Due`s (confirmed deliveries). Returns `m` when `stop`.
fn dispatcher(
    race: Arc<Race>,
    m: Arc<FleetMember>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Arc<FleetMember>> {
    tokio::spawn(async move {
        while !stop.load(Ordering::SeqCst) {
            let now = Instant::now();
            let batch = m.pop_due(now, 500);
            let mut ends = Vec::new();
            {
                let intended = race.intended.lock().expect("lock").clone();
                let mut l = race.ledger.lock().expect("lock");
                for d in &batch {
                    l.record(m.name(), now, d, &intended);
                }
            }
            for d in &batch {
                let (q, id) = (d.due.queue().clone(), *d.due.id());
                if let Ok(w) = m.journal_end(&q, &id) {
                    ends.push((q, id, d.token, w));
                }
            }
            for (q, id, t, w) in ends {
                if w.await.is_ok() {
                    race.acked_ends.lock().expect("lock").push((q, id, t));
                }
            }
            drop(batch);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        m
    })
}

/// Every 10 ms, one timer per queue into the scheduler of whichever member may dispatch the
/// queue now, due 0 to 400 ms later, journaled; the acknowledged puts go to `race`. With
/// `put_first`, each round's puts are journaled and acknowledged before the timers are
/// scheduled (a schedule refused then, say by a queue frozen for its offer, leaves the
/// timer in the journal alone, which its next owner loads).
fn producer(
    race: Arc<Race>,
    qs: Vec<String>,
    stop: Arc<AtomicBool>,
    put_first: bool,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut next = 1_000_000u64;
        while !stop.load(Ordering::SeqCst) {
            let members: Vec<Arc<FleetMember>> = race.members.lock().expect("lock").clone();
            let mut puts = Vec::new();
            for q in &qs {
                let Some(m) = members
                    .iter()
                    .find(|m| m.fence().token(q.as_bytes()).is_some())
                else {
                    continue;
                };
                let id = next;
                next += 1;
                let at = Instant::now() + Duration::from_millis(id % 400);
                let v = format!("{q}:{id}");
                race.intended.lock().expect("lock").insert(id, at);
                if !put_first
                    && m.scheduler()
                        .schedule(q.clone(), id, at, v.clone())
                        .is_err()
                {
                    continue;
                }
                if let Ok(w) = m.journal_put(q, &id, at, &v) {
                    puts.push((Arc::clone(m), q.clone(), id, at, v, w));
                }
            }
            drop(members);
            for (m, q, id, at, v, w) in puts {
                if w.await.is_ok() {
                    race.acked_puts
                        .lock()
                        .expect("lock")
                        .insert((q.clone(), id));
                    if put_first {
                        let _ = m.scheduler().schedule(q, id, at, v);
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
}

/// `a` alone with 12 queues; producers and dispatchers run throughout; `b` joins, `c` joins,
/// then `a` leaves holding one handed-out, unended timer of each queue it still owns (dropped,
/// delivered without an end, a second into the leave). Afterwards: every acknowledged put
/// handed out, none early, no `(id, token)` twice, no id handed out under a larger token
/// than the one whose end was acknowledged, and each timer in flight at the leave handed
/// out again under a larger token (its end never ran).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn producers_and_ends_racing_two_joins_and_a_leave_keep_the_ledger() {
    racing_joins_and_a_leave(false).await;
}

/// As above, each producer round journaling its puts before it schedules them: a put
/// acknowledged whose schedule the freeze refused is the journal's alone, and must come out.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn puts_before_schedules_racing_two_joins_and_a_leave_keep_the_ledger() {
    racing_joins_and_a_leave(true).await;
}

async fn racing_joins_and_a_leave(put_first: bool) {
    let Some((_etcd, _redis, opts)) = fleet() else {
        return;
    };
    let qs = queues(12);
    register(&opts, &qs).await;
    let race = Arc::new(Race::default());
    let a = Arc::new(join_journaling(&opts, "a", true).await);
    wait_until(Duration::from_secs(30), "a owns every queue", || {
        a.owned().len() == qs.len()
    })
    .await;
    race.members.lock().expect("lock").push(Arc::clone(&a));
    let stop_p = Arc::new(AtomicBool::new(false));
    let prod = producer(
        Arc::clone(&race),
        qs.clone(),
        Arc::clone(&stop_p),
        put_first,
    );
    let stop_a = Arc::new(AtomicBool::new(false));
    let disp_a = dispatcher(Arc::clone(&race), Arc::clone(&a), Arc::clone(&stop_a));
    drop(a);
    tokio::time::sleep(Duration::from_secs(1)).await;

    let mut others = Vec::new();
    for name in ["b", "c"] {
        let m = Arc::new(join_journaling(&opts, name, true).await);
        race.members.lock().expect("lock").push(Arc::clone(&m));
        let stop = Arc::new(AtomicBool::new(false));
        others.push((
            dispatcher(Arc::clone(&race), Arc::clone(&m), Arc::clone(&stop)),
            stop,
        ));
        wait_until(
            Duration::from_secs(30),
            "the new member owns a queue",
            || !m.owned().is_empty(),
        )
        .await;
        race.settled(&qs, "one owner each").await;
    }

    // a leaves: its dispatcher stops, the producer stops using it.
    stop_a.store(true, Ordering::SeqCst);
    let a = disp_a.await.expect("dispatcher of a");
    race.members
        .lock()
        .expect("lock")
        .retain(|m| m.name() != "a");
    let a_tokens: BTreeMap<String, u64> = a.owned().into_iter().collect();
    // One timer of each of a's queues in flight when the leave starts.
    let mut in_flight = Vec::new();
    for q in a_tokens.keys() {
        let id = 9_000_000 + in_flight.len() as u64;
        let at = Instant::now();
        race.intended.lock().expect("lock").insert(id, at);
        schedule_and_put(&a, q, id, at).await;
        race.acked_puts
            .lock()
            .expect("lock")
            .insert((q.clone(), id));
        in_flight.push(id);
    }
    let mut held = Vec::new();
    let until = Instant::now() + Duration::from_secs(10);
    while held.len() < in_flight.len() && Instant::now() < until {
        let now = Instant::now();
        for d in a.pop_due(now, 1000) {
            let intended = race.intended.lock().expect("lock").clone();
            race.ledger
                .lock()
                .expect("lock")
                .record("a", now, &d, &intended);
            if in_flight.contains(d.due.id()) {
                held.push(d);
            }
            // Anything else due now is delivered without an end: it may come again.
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(held.len(), in_flight.len(), "a's in-flight timers");
    let mut a = a;
    let a = loop {
        match Arc::try_unwrap(a) {
            Ok(m) => break m,
            Err(back) => {
                a = back;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    let leave = tokio::spawn(async move { a.leave().await });
    tokio::time::sleep(Duration::from_secs(1)).await;
    drop(held);
    leave.await.expect("leave task").expect("leave");
    race.settled(&qs, "b and c own every queue").await;
    stop_p.store(true, Ordering::SeqCst);
    prod.await.expect("producer");

    // Every acknowledged put handed out (ends keep running meanwhile).
    let acked: BTreeSet<(String, u64)> = race.acked_puts.lock().expect("lock").clone();
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let got = race.ledger.lock().expect("lock").ids();
        if acked.is_subset(&got) || Instant::now() > until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (h, stop) in others {
        stop.store(true, Ordering::SeqCst);
        drop(h.await.expect("dispatcher"));
    }
    let ledger = race.ledger.lock().expect("lock");
    let ends = race.acked_ends.lock().expect("lock").clone();
    eprintln!(
        "{} puts acknowledged, {} hand-outs of {} ids, {} ends acknowledged; a held {:?} at its leave",
        acked.len(),
        ledger.dispatches.len(),
        ledger.ids().len(),
        ends.len(),
        a_tokens
    );
    assert!(!ends.is_empty() && !acked.is_empty());
    check_timely(&ledger);
    let got = ledger.ids();
    let lost: Vec<_> = acked.difference(&got).collect();
    let what = format!("of {} acknowledged puts never handed out", acked.len());
    assert_none(&lost, &what);
    let mut again = Vec::new();
    for (q, id, t) in &ends {
        for (m, q2, id2, t2) in &ledger.dispatches {
            if q2 == q && id2 == id && t2 > t {
                again.push((q.clone(), *id, *t, m.clone(), *t2));
            }
        }
    }
    let what = "hand-outs after an acknowledged end, (queue, id, token ended, by, token)";
    assert_none(&again, what);
    for id in &in_flight {
        let q = ledger
            .dispatches
            .iter()
            .find(|(_, _, i, _)| i == id)
            .map(|(_, q, _, _)| q.clone())
            .expect("handed out by a");
        let t_a = a_tokens[&q];
        assert!(
            ledger
                .dispatches
                .iter()
                .any(|(_, q2, i, t)| i == id && *q2 == q && *t > t_a),
            "{q}/{id} was in flight at a's leave and never ended, yet not handed out again \
             under a larger token than {t_a}"
        );
    }
}
