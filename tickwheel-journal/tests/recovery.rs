//! Every change of custody survives a close and re-open, against the real engines.

use std::time::{Duration, Instant};

use tickwheel::sync::{Cancel, FrozenEntry, ScheduleError};
use tickwheel_journal::{Durability, Durable, Engine, Options};

mod support;

use support::{J, each_engine, open};

/// Schedules a new timer. Panics if the journal fails or refuses it.
fn add(j: &J, q: &str, id: u64, at: Instant, value: &str) {
    j.schedule(q.to_owned(), id, at, value.to_owned())
        .expect("journal")
        .expect("a new id");
}

/// (queue, id, value, attempt) of every pending timer, sorted by id, by draining a copy of
/// the view through `pop_due` far in the future and retrying nothing.
fn contents(j: &J) -> Vec<(String, u64, String)> {
    let mut all: Vec<_> = j
        .scheduler()
        .queues()
        .into_iter()
        .flat_map(|q| {
            j.scheduler()
                .queue_members(&q)
                .into_iter()
                .map(move |m| (q.clone(), m.id))
        })
        .map(|(q, id)| {
            let v = j
                .scheduler()
                .with_value(&id, |s| s.value().clone())
                .expect("a member has a value");
            (q, id, v)
        })
        .collect();
    all.sort_by_key(|&(_, id, _)| id);
    all
}

#[test]
fn every_operation_round_trips() {
    each_engine(|engine, dir| {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(3600);
        {
            let j = open(dir, engine);
            for id in 0..10u64 {
                let q = format!("q{}", id % 3);
                add(&j, &q, id, later, &format!("v{id}"));
            }
            // Refusals record nothing.
            assert!(matches!(
                j.schedule("q0".into(), 0, later, "dup".into())
                    .expect("journal"),
                Err(ScheduleError::Pending(_))
            ));
            assert_eq!(
                j.cancel(&1).expect("journal"),
                Cancel::Cancelled("v1".into())
            );
            assert_eq!(j.cancel(&1).expect("journal"), Cancel::NotFound);
            j.reschedule(&2, t0).expect("journal").expect("pending");
            // q2 holds 2, 5, 8: drain it.
            let drained = j.drain_queue(&"q2".to_string()).expect("journal");
            assert_eq!(drained.cancelled.len(), 3);
            // q1 holds 4, 7 (1 cancelled): freeze it, take everything.
            let frozen = j.freeze_queue(&"q1".to_string()).expect("journal");
            assert_eq!(frozen.pending.len(), 2);
            // Import two into q9.
            let imported = j
                .import(
                    &"q9".to_string(),
                    vec![
                        FrozenEntry {
                            id: 100,
                            at: later,
                            value: "i100".into(),
                        },
                        FrozenEntry {
                            id: 0,
                            at: later,
                            value: "present".into(),
                        },
                    ],
                )
                .expect("journal");
            assert_eq!((imported.imported, imported.present.len()), (1, 1));
            j.close().expect("close");
        }
        let j = open(dir, engine);
        let got = contents(&j);
        let want: Vec<(String, u64, String)> = vec![
            ("q0".into(), 0, "v0".into()),
            ("q0".into(), 3, "v3".into()),
            ("q0".into(), 6, "v6".into()),
            ("q0".into(), 9, "v9".into()),
            ("q9".into(), 100, "i100".into()),
        ];
        assert_eq!(got, want, "{engine:?}");
        // The queue frozen before the crash comes back unfrozen (the freeze is not recorded).
        assert!(!j.scheduler().is_frozen("q1"));
        // Deadlines: a rescheduled timer would be due now, but 2 was drained with q2.
        assert_eq!(j.pop_due(Instant::now(), 100).expect("journal").len(), 0);
        // Deadlines come back from the wall clock, never earlier (µs rounding up).
        for id in [0u64, 3, 6, 9, 100] {
            let at = j.scheduler().lookup(&id).expect("recovered").deadline;
            assert!(at + Duration::from_secs(2) >= later && at <= later + Duration::from_secs(2));
        }
    });
}

#[test]
fn reschedule_and_retry_deadlines_survive() {
    each_engine(|engine, dir| {
        let t0 = Instant::now();
        let hour = t0 + Duration::from_secs(3600);
        {
            let j = open(dir, engine);
            add(&j, "q", 1, hour, "a");
            add(&j, "q", 2, t0, "b");
            j.reschedule(&1, t0).expect("journal").expect("pending");
            let mut batch = j.pop_due(Instant::now(), 10).expect("journal");
            assert_eq!(batch.len(), 2);
            for due in batch.by_ref() {
                if *due.id() == 2 {
                    due.retry_at(hour)
                        .expect("journal")
                        .expect("scheduler alive");
                } else {
                    due.done().expect("journal");
                }
            }
            j.close().expect("close");
        }
        let j = open(dir, engine);
        assert_eq!(j.len(), 1);
        assert_eq!(
            j.pop_due(Instant::now(), 10).expect("journal").len(),
            0,
            "retried to the hour"
        );
        let due = j
            .pop_due(Instant::now() + Duration::from_secs(3601), 10)
            .expect("journal")
            .next()
            .expect("2 is back");
        assert_eq!(
            (*due.id(), due.attempt(), due.value().as_str()),
            (2, 2, "b")
        );
    });
}

#[test]
fn in_flight_comes_back_pending_with_its_attempt() {
    each_engine(|engine, dir| {
        let t0 = Instant::now();
        for round in 1..=3u32 {
            let j = open(dir, engine);
            if round == 1 {
                add(&j, "q", 7, t0, "x");
                add(&j, "q", 8, t0, "y");
            }
            assert_eq!(j.len(), 2, "round {round}");
            let batch = j.pop_due(Instant::now(), 10).expect("journal");
            let dues: Vec<_> = batch.collect();
            assert_eq!(dues.len(), 2);
            for due in &dues {
                assert_eq!(due.attempt(), round, "{engine:?} id {}", due.id());
            }
            assert_eq!(j.scheduler().in_flight_len(), 2);
            // Crash with both in flight: neither Due ends.
            dues.into_iter().for_each(std::mem::forget);
            j.close().expect("close");
        }
        // Done at last: gone for good.
        let j = open(dir, engine);
        for due in j.pop_due(Instant::now(), 10).expect("journal") {
            assert_eq!(due.attempt(), 4);
            due.done().expect("journal");
        }
        j.close().expect("close");
        assert!(open(dir, engine).is_empty());
    });
}

#[test]
fn untaken_items_of_a_dropped_batch_stay() {
    let dir = tempfile::tempdir().expect("temp dir");
    let t0 = Instant::now();
    let j = open(dir.path(), Engine::Redb);
    for id in 0..3 {
        add(&j, "q", id, t0, "v");
    }
    let mut batch = j.pop_due(Instant::now(), 10).expect("journal");
    assert_eq!(batch.len(), 3);
    drop(batch.next());
    drop(batch);
    assert_eq!((j.len(), j.scheduler().in_flight_len()), (2, 0));
    j.close().expect("close");
    let j = open(dir.path(), Engine::Redb);
    let attempts: Vec<u32> = j
        .pop_due(Instant::now(), 10)
        .expect("journal")
        .map(|d| d.attempt())
        .collect();
    assert_eq!(attempts, vec![2, 2]);
}

#[test]
fn progress_reports_reach_the_total() {
    let dir = tempfile::tempdir().expect("temp dir");
    let n = 70_000u64;
    let at = Instant::now() + Duration::from_secs(60);
    {
        let j: J = Durable::open(
            dir.path(),
            Options::new().durability(Durability::Async(Duration::from_millis(5))),
        )
        .expect("open");
        j.schedule_many((0..n).map(|id| ("q".to_string(), id, at, String::new())))
            .expect("journal");
        j.close().expect("close");
    }
    let mut calls = Vec::new();
    let j: J = Durable::open_with_progress(dir.path(), Options::new(), |done, total| {
        calls.push((done, total))
    })
    .expect("open");
    assert_eq!(j.len() as u64, n);
    assert!(calls.len() >= 2, "{calls:?}");
    assert!(calls.windows(2).all(|w| w[0].0 < w[1].0), "{calls:?}");
    let &(done, total) = calls.last().expect("a final report");
    assert_eq!(done, n);
    assert!(total >= done);
}

#[test]
fn a_closed_journal_refuses_changes_and_a_second_open_fails() {
    let dir = tempfile::tempdir().expect("temp dir");
    let j = open(dir.path(), Engine::Redb);
    // The engine locks its directory: a second journal on it fails instead of corrupting.
    assert!(Durable::<String, u64, String>::open(dir.path(), Options::new()).is_err());
    j.close().expect("close");
    assert!(Durable::<String, u64, String>::open(dir.path(), Options::new()).is_ok());
}
