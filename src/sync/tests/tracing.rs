//! The `tracing` events of `observe.rs`, read back through a subscriber of the test's own:
//! one `DEBUG` event, target `tickwheel::sync`, per queue-wide operation, with the fields
//! the module doc names and the values the operation returned.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ::tracing::field::{Field, Visit};
use ::tracing::span::{Attributes, Id, Record};
use ::tracing::{Event, Level, Metadata, Subscriber};

use crate::sync::{FrozenEntry, Retried, Scheduler};

/// One event as seen: level, target and every field as text (`message` included).
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    level: Level,
    target: String,
    fields: BTreeMap<String, String>,
}

impl Seen {
    fn field(&self, name: &str) -> &str {
        self.fields.get(name).map_or("<absent>", String::as_str)
    }
}

/// Keeps every event; spans are accepted and ignored (the scheduler makes none).
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Seen>>>);

impl Capture {
    fn take(&self) -> Vec<Seen> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        let meta = event.metadata();
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(Seen {
            level: *meta.level(),
            target: meta.target().to_owned(),
            fields,
        });
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

/// Recomputes every registered callsite's interest against the capture (the thread's
/// default inside `with_default`). tracing-core caches a callsite's interest process-wide
/// when it is first reached, and while at most one dispatcher is registered it asks only the
/// reaching thread's default: a parallel test that reaches the same event with no subscriber
/// first caches "never", and the capture would see nothing from it. Called before each
/// operation whose event a test expects.
fn fresh_interest() {
    ::tracing::callsite::rebuild_interest_cache();
}

use super::ms;

/// The one event `seen` must hold: `op` as its message, the scheduler's name, and `fields`.
fn expect_one(seen: &[Seen], op: &str, name: &str, fields: &[(&str, &str)]) {
    assert_eq!(seen.len(), 1, "one event per operation, got {seen:#?}");
    let event = &seen[0];
    assert_eq!(event.level, Level::DEBUG, "{event:?}");
    assert_eq!(event.target, "tickwheel::sync", "{event:?}");
    assert_eq!(event.field("message"), op, "{event:?}");
    assert_eq!(event.field("scheduler"), name, "{event:?}");
    for (field, value) in fields {
        assert_eq!(event.field(field), *value, "{field} of {event:?}");
    }
    let names: Vec<&str> = event.fields.keys().map(String::as_str).collect();
    assert_eq!(
        names.len(),
        fields.len() + 2,
        "no other field (message, scheduler and {fields:?}): {names:?}"
    );
}

#[test]
fn each_queue_wide_operation_emits_one_event_with_its_counts() {
    let capture = Capture::default();
    let t0 = Instant::now();
    let sched: Scheduler<u8, u32, char> = Scheduler::builder()
        .name("deferred")
        .shards(2)
        .origin(t0)
        .build();
    // Exactly one event since the last look, of the scheduler named "deferred".
    let expect = |op: &str, fields: &[(&str, &str)]| {
        expect_one(&capture.take(), op, "deferred", fields);
    };
    ::tracing::subscriber::with_default(capture.clone(), || {
        for id in 0..10 {
            sched
                .schedule(id as u8 % 2, id, ms(t0, u64::from(id)), 'v')
                .unwrap();
        }
        let mut batch = sched.pop_due(ms(t0, 2), 10); // ids 0, 1, 2 in flight
        let first = batch.next().unwrap(); // id 0, queue 0
        let second = batch.next().unwrap(); // id 1, queue 1
        drop(batch); // id 2 goes back to pending
        assert!(capture.take().is_empty(), "no event per timer");

        fresh_interest();
        let drained = sched.drain_queue(&1); // 3, 5, 7, 9; 1 in flight
        assert_eq!(drained.cancelled.len(), 4);
        expect("drain_queue", &[("cancelled", "4"), ("in_flight", "1")]);
        drop(second);

        fresh_interest();
        let frozen = sched.freeze_queue(&0); // 2, 4, 6, 8; 0 in flight
        assert_eq!(frozen.pending.len(), 4);
        expect("freeze_queue", &[("pending", "4"), ("in_flight", "1")]);

        assert_eq!(first.retry_at(ms(t0, 50)), Ok(Retried::Forwarded));
        assert!(capture.take().is_empty(), "a retry is per timer: no event");
        fresh_interest();
        assert_eq!(sched.take_forwarded(&0).len(), 1);
        expect("take_forwarded", &[("taken", "1")]);

        let entry = |id| FrozenEntry {
            id,
            at: t0,
            value: 'w',
        };
        fresh_interest();
        let refused = sched.import(0, vec![entry(2)]);
        assert_eq!(refused.refused.len(), 1, "the queue is frozen");
        expect(
            "import",
            &[("imported", "0"), ("present", "0"), ("refused", "1")],
        );

        fresh_interest();
        assert_eq!(sched.unfreeze_queue(&0), 0);
        expect("unfreeze_queue", &[("pending", "0")]);

        sched.schedule(0, 4, t0, 'x').unwrap();
        fresh_interest();
        let report = sched.import(0, vec![entry(2), entry(4)]);
        assert_eq!((report.imported, report.present.len()), (1, 1));
        expect(
            "import",
            &[("imported", "1"), ("present", "1"), ("refused", "0")],
        );
    });
}

#[test]
fn an_unnamed_scheduler_reports_an_empty_name() {
    let capture = Capture::default();
    let sched: Scheduler<u8, u32, ()> = Scheduler::builder().shards(1).build();
    ::tracing::subscriber::with_default(capture.clone(), || {
        fresh_interest();
        assert!(sched.drain_queue(&7).cancelled.is_empty());
    });
    expect_one(
        &capture.take(),
        "drain_queue",
        "",
        &[("cancelled", "0"), ("in_flight", "0")],
    );
}
