//! The metrics of `observe.rs`, read back through a recorder of the test's own: every
//! counter and gauge agrees with the scheduler's own counts through each kind of move.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ::metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};

use crate::sync::{Cancel, FrozenEntry, Retried, Scheduler};

/// Counters and gauges as atomics (a gauge holds `f64` bits), histograms as lists, by name;
/// each with the labels it was registered with.
#[derive(Default)]
struct Store {
    atomics: Mutex<HashMap<String, Arc<AtomicU64>>>,
    samples: Arc<Samples>,
    labels: Mutex<Vec<(String, String, String)>>,
}

#[derive(Default)]
struct Samples(Mutex<Vec<f64>>);

impl HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0.lock().unwrap().push(value);
    }
}

impl Store {
    fn atomic(&self, key: &Key) -> Arc<AtomicU64> {
        for label in key.labels() {
            let entry = (
                key.name().to_owned(),
                label.key().to_owned(),
                label.value().to_owned(),
            );
            self.labels.lock().unwrap().push(entry);
        }
        let mut map = self.atomics.lock().unwrap();
        Arc::clone(map.entry(key.name().to_owned()).or_default())
    }

    fn count(&self, name: &str) -> u64 {
        self.atomics.lock().unwrap()[name].load(Ordering::Relaxed)
    }

    fn gauge(&self, name: &str) -> f64 {
        f64::from_bits(self.count(name))
    }
}

impl Recorder for Store {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.atomic(key))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.atomic(key))
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(Arc::clone(&self.samples))
    }
}

use super::ms;

fn check_gauges(store: &Store, sched: &Scheduler<u8, u32, char>) {
    assert_eq!(
        store.gauge("tickwheel_pending"),
        sched.len() as f64,
        "pending"
    );
    assert_eq!(
        store.gauge("tickwheel_in_flight"),
        sched.in_flight_len() as f64,
        "in flight"
    );
}

#[test]
fn counters_and_gauges_follow_every_move() {
    let store = Store::default();
    let t0 = Instant::now();
    let sched: Scheduler<u8, u32, char> = ::metrics::with_local_recorder(&store, || {
        Scheduler::builder()
            .name("deferred")
            .shards(2)
            .origin(t0)
            .build()
    });
    let labels = store.labels.lock().unwrap().clone();
    assert!(
        labels
            .iter()
            .any(|(n, k, v)| n == "tickwheel_pending" && k == "scheduler" && v == "deferred")
    );

    for id in 0..10 {
        sched
            .schedule(id as u8 % 2, id, ms(t0, u64::from(id)), 'v')
            .unwrap();
    }
    assert!(
        sched.schedule(0, 0, t0, 'x').is_err(),
        "a refusal counts nothing"
    );
    check_gauges(&store, &sched);

    let mut batch = sched.pop_due(ms(t0, 13), 4); // ids 0..4, 13 to 10 ms late
    check_gauges(&store, &sched);
    let late = store.samples.0.lock().unwrap().clone();
    assert_eq!(late, [0.013, 0.012, 0.011, 0.010]);

    drop(batch.next()); // delivered
    let retried = batch.next().unwrap().retry_at(ms(t0, 50)); // id 1 pending again
    assert_eq!(retried, Ok(Retried::Pending));
    let held = batch.next().unwrap(); // id 2 stays in flight
    drop(batch); // id 3 goes back
    check_gauges(&store, &sched);

    assert_eq!(sched.cancel(&4), Cancel::Cancelled('v'));
    let drained = sched.drain_queue(&1); // 1, 3, 5, 7, 9
    assert_eq!(drained.cancelled.len(), 5);
    let frozen = sched.freeze_queue(&0); // 6, 8; 2 in flight
    assert_eq!((frozen.pending.len(), frozen.in_flight), (2, vec![2]));
    assert_eq!(held.retry_at(t0), Ok(Retried::Forwarded));
    assert_eq!(sched.take_forwarded(&0).len(), 1);
    check_gauges(&store, &sched);
    sched.unfreeze_queue(&0);
    let back = vec![FrozenEntry {
        id: 6,
        at: t0,
        value: 'w',
    }];
    assert_eq!(sched.import(0, back).imported, 1);
    check_gauges(&store, &sched);

    let counts = |name: &str| store.count(name);
    assert_eq!(counts("tickwheel_scheduled_total"), 11);
    assert_eq!(counts("tickwheel_delivered_total"), 1);
    assert_eq!(counts("tickwheel_retried_total"), 2);
    assert_eq!(counts("tickwheel_cancelled_total"), 1);
    assert_eq!(counts("tickwheel_drained_total"), 5);
    assert_eq!(counts("tickwheel_handed_over_total"), 3);
    // At rest: every accepted timer is delivered, returned, or still here.
    let ended: u64 = ["delivered", "cancelled", "drained", "handed_over"]
        .iter()
        .map(|n| counts(&format!("tickwheel_{n}_total")))
        .sum();
    assert_eq!(
        counts("tickwheel_scheduled_total"),
        ended + sched.len() as u64
    );
}
