//! Dispatch through the fence while members join and leave: per queue, every dispatch under
//! a token happens before every dispatch under a larger one, each token is one member's, and
//! no timer is delivered twice or lost.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::*;
use tickwheel::sync::{FrozenEntry, Scheduler};
use tickwheel_fleet::{FencedDue, Member, RecoveryError};

/// (queue, id, token, member, when)
type Dispatch = (String, u64, u64, String, Instant);
type Log = Arc<Mutex<Vec<Dispatch>>>;
/// The users' store of record: a timer leaves it once dispatched, as a real store's
/// delivered messages do, so an adopter's recovery hook (after a lease lapsed under load)
/// returns only what is still to go.
type Store = Arc<Mutex<BTreeMap<String, Vec<FrozenEntry<u64, String>>>>>;

/// Logs `d` as dispatched by `name` now and takes it out of the store.
fn record(log: &Log, store: &Store, d: &FencedDue<String, u64, String>, name: &str) {
    let at = Instant::now();
    if let Ok(mut s) = store.lock()
        && let Some(entries) = s.get_mut(d.due.queue())
    {
        entries.retain(|e| e.id != *d.due.id());
    }
    if let Ok(mut l) = log.lock() {
        l.push((
            d.due.queue().clone(),
            *d.due.id(),
            d.token,
            name.to_owned(),
            at,
        ));
    }
}

async fn dispatching_member(
    opts: &tickwheel_fleet::FleetOptions,
    name: &str,
    store: Store,
    log: Log,
    thread: bool,
) -> (FleetMember, Option<tickwheel::sync::DispatcherHandle>) {
    let sched: Arc<Sched> = Arc::new(Scheduler::new());
    let hook_store = Arc::clone(&store);
    let m = Member::join(opts.clone(), name, sched, move |q: String| {
        let entries = (hook_store.lock().ok())
            .and_then(|s| s.get(&q).cloned())
            .unwrap_or_default();
        async move { Ok::<_, RecoveryError>(entries) }
    })
    .await;
    let m = match m {
        Ok(m) => m,
        Err(e) => panic!("join {name}: {e}"),
    };
    let name = name.to_owned();
    if thread {
        // The scheduler's thread dispatcher, behind the fence.
        let handle = m.spawn_dispatcher(move |d| record(&log, &store, &d, &name));
        return (m, Some(handle));
    }
    let fence = m.fence();
    let sched = Arc::clone(m.scheduler());
    tokio::spawn(async move {
        loop {
            let now = Instant::now();
            for d in sched.pop_due(now, 64).filter_map(|d| fence.admit(d)) {
                record(&log, &store, &d, &name);
            }
            if Arc::strong_count(&sched) == 1 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    (m, None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tokens_order_dispatches_and_nothing_is_lost_or_doubled() {
    let Some((_etcd, _redis, opts, qs)) = fleet_with(8).await else {
        return;
    };
    // Timers due over the next 8 s, 20 a queue.
    let t0 = Instant::now();
    let store: BTreeMap<String, Vec<FrozenEntry<u64, String>>> = qs
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let entries = (0..20u64)
                .map(|k| FrozenEntry {
                    id: i as u64 * 1000 + k,
                    at: t0 + Duration::from_millis(500 + k * 400),
                    value: String::new(),
                })
                .collect();
            (q.clone(), entries)
        })
        .collect();
    let total: usize = store.values().map(Vec::len).sum();
    let store: Store = Arc::new(Mutex::new(store));
    let log: Log = Arc::default();
    let (a, _) = dispatching_member(&opts, "a", Arc::clone(&store), Arc::clone(&log), false).await;
    wait_until(Duration::from_secs(20), "a owns every queue", || {
        a.owned().len() == qs.len()
    })
    .await;
    let (b, _) = dispatching_member(&opts, "b", Arc::clone(&store), Arc::clone(&log), false).await;
    let (c, _thread) =
        dispatching_member(&opts, "c", Arc::clone(&store), Arc::clone(&log), true).await;
    wait_until(Duration::from_secs(20), "b and c have queues", || {
        !b.owned().is_empty() && !c.owned().is_empty()
    })
    .await;
    if let Err(e) = b.leave().await {
        panic!("leave: {e}");
    }
    let delivered = || -> usize {
        log.lock()
            .map(|l| l.iter().map(|e| e.1).collect::<BTreeSet<_>>().len())
            .unwrap_or(0)
    };
    wait_until(Duration::from_secs(30), "every timer delivered", || {
        delivered() == total
    })
    .await;
    let log = log.lock().map(|l| l.clone()).unwrap_or_default();
    let mut ids = BTreeSet::new();
    for e in &log {
        assert!(ids.insert(e.1), "id {} delivered twice: {log:?}", e.1);
    }
    let mut per_queue: BTreeMap<&str, Vec<&Dispatch>> = BTreeMap::new();
    for e in &log {
        per_queue.entry(e.0.as_str()).or_default().push(e);
    }
    let mut moved = 0;
    for (q, mut events) in per_queue {
        events.sort_by_key(|e| e.4);
        let mut owner_of: BTreeMap<u64, &str> = BTreeMap::new();
        let tokens: Vec<u64> = events.iter().map(|e| e.2).collect();
        assert!(
            tokens.is_sorted(),
            "{q}: tokens in dispatch order {tokens:?}"
        );
        for e in &events {
            let o = owner_of.entry(e.2).or_insert(e.3.as_str());
            assert_eq!(*o, e.3.as_str(), "{q}: token {} used by two members", e.2);
        }
        moved += owner_of.len() - 1;
    }
    eprintln!(
        "{} dispatches, {moved} changes of owner seen in the log",
        log.len()
    );
}
