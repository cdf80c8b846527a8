//! Snapshots across hosts: export on one scheduler, serialize, import on another, with
//! random clock anchors, reference-clock offsets and skew between the hosts.

use std::time::{Duration, Instant};

use proptest::prelude::*;

use crate::sync::snapshot::{
    SNAPSHOT_VERSION, Snapshot, SnapshotError, from_reference, to_reference,
};
use crate::sync::{FrozenEntry, Scheduler};

type Sched = Scheduler<String, u64, u64>;

const NS: fn(u64) -> Duration = Duration::from_nanos;

/// One move: everything in ns of a shared "real" time line.
#[derive(Debug, Clone)]
struct Move {
    /// Where each host's monotonic clock stands at real time 0 (their skew is the
    /// difference), after a common base.
    source_anchor: u64,
    target_anchor: u64,
    /// The reference clock at real time 0, µs, and the phase of its µs truncation.
    reference_base_us: u64,
    phase: u64,
    /// Source: local clock read at `t1`, the reference `read1` later.
    t1: u64,
    read1: u64,
    /// Target: the reference read `gap` after the source's, its local clock `read2` later.
    gap: u64,
    read2: u64,
    /// Real deadlines (some before `t1`: past on export), and each entry's value.
    deadlines: Vec<(u64, u64)>,
}

/// Below `max` ns, often 0 or a whole number of µs: the edges where rounding has no slack
/// (readings that take no time, deadlines on µs boundaries).
fn edgy(max: u64) -> impl Strategy<Value = u64> {
    prop_oneof![Just(0), (0..max / 1_000).prop_map(|us| us * 1_000), 0..max,]
}

fn moves() -> impl Strategy<Value = Move> {
    (
        (0u64..1_000_000_000_000, 0u64..1_000_000_000_000),
        (0u64..(1 << 62), 0u64..1_000),
        (edgy(10_000_000_000), edgy(10_000_000)),
        (edgy(10_000_000_000), edgy(10_000_000)),
        prop::collection::vec((0u64..20_000_000_000, any::<u64>()), 0..40),
    )
        .prop_map(
            |((sa, ta), (rb, phase), (t1, read1), (gap, read2), mut deadlines)| {
                // Scheduled in deadline order: then delivery order is schedule order, on both
                // hosts, whatever their tick boundaries (ties: equal deadlines are common, the
                // range is narrow against the values).
                // A third on 100 ms boundaries (equal deadlines), the rest to the ns.
                for (d, v) in deadlines.iter_mut() {
                    if *v % 3 == 0 {
                        *d -= *d % 100_000_000;
                    }
                }
                deadlines.sort_by_key(|&(d, _)| d);
                Move {
                    source_anchor: sa,
                    target_anchor: ta,
                    reference_base_us: rb,
                    phase,
                    t1,
                    read1,
                    gap,
                    read2,
                    deadlines,
                }
            },
        )
}

impl Move {
    /// The reference clock's reading at real time `t` (truncated to µs, as Redis `TIME`).
    fn reference(&self, t: u64) -> u64 {
        self.reference_base_us + (t + self.phase) / 1_000
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn export_import_keeps_ids_values_order_and_no_deadline_gets_earlier(m in moves()) {
        let base = Instant::now();
        let source_clock = |t: u64| base + NS(m.source_anchor + t);
        let target_clock = |t: u64| base + NS(m.target_anchor + t);
        let source: Sched = Scheduler::builder().shards(3).origin(base).build();
        for (id, &(d, value)) in m.deadlines.iter().enumerate() {
            source.schedule("q".into(), id as u64, source_clock(d), value).unwrap();
        }
        let order: Vec<u64> = (0..m.deadlines.len() as u64).collect();

        let frozen = source.freeze_queue(&"q".to_string());
        prop_assert_eq!(frozen.pending.iter().map(|e| e.id).collect::<Vec<_>>(), order.clone());
        let t2 = m.t1 + m.read1;
        let snapshot =
            Snapshot::export("q".to_string(), frozen.pending, source_clock(m.t1), m.reference(t2));
        let bytes = serde_json::to_vec(&snapshot).unwrap();
        let snapshot: Snapshot<String, u64, u64> = serde_json::from_slice(&bytes).unwrap();
        prop_assert_eq!(snapshot.version, SNAPSHOT_VERSION);

        let t3 = t2 + m.gap;
        let t4 = t3 + m.read2;
        let entries = snapshot.into_entries(m.reference(t3), target_clock(t4)).unwrap();
        let target: Sched = Scheduler::builder().shards(2).origin(base).build();
        // Delivery order: take every entry back out in order.
        for (e, &(d, _)) in entries.iter().zip(&m.deadlines) {
            // In real time: never earlier; late by at most the readings' spans plus 3 µs.
            let real = e.at.duration_since(base + NS(m.target_anchor)).as_nanos() as u64;
            let due_at_export = d.max(m.t1);
            prop_assert!(real >= d, "earlier: {} < {}", real, d);
            prop_assert!(
                real <= due_at_export.max(t4) + m.read1 + m.read2 + 3_000,
                "too late: {} for {} (t4 {})", real, d, t4
            );
        }
        let out = target.import("q".to_string(), entries);
        prop_assert_eq!((out.imported, out.present.len(), out.refused.len()), (order.len(), 0, 0));
        let last = target_clock(t4 + 40_000_000_000);
        let delivered: Vec<(u64, u64)> =
            target.pop_due(last, usize::MAX).map(|d| (*d.id(), d.into_value())).collect();
        let expected: Vec<(u64, u64)> =
            m.deadlines.iter().enumerate().map(|(id, &(_, v))| (id as u64, v)).collect();
        prop_assert_eq!(delivered, expected);
    }
}

#[test]
fn conversions_saturate_and_never_panic() {
    let now = Instant::now();
    let far = now + Duration::from_secs(1 << 40);
    assert_eq!(to_reference(far, now, u64::MAX), u64::MAX);
    assert_eq!(
        to_reference(now, far, u64::MAX),
        u64::MAX,
        "past: the reading"
    );
    assert_eq!(to_reference(now, now, 7), 7, "at the reading: due now");
    assert_eq!(
        to_reference(now + NS(1), now, 7),
        9,
        "1 ns: up to 1 µs, plus 1"
    );
    assert_eq!(to_reference(now + NS(1_000), now, 7), 9);
    assert_eq!(from_reference(0, u64::MAX, now), now);
    // u64::MAX is the saturated deadline: never due, whatever the reference reading.
    let latest = from_reference(u64::MAX, u64::MAX, now);
    assert!(latest >= far, "a saturated deadline stays saturated");
    assert_eq!(from_reference(u64::MAX, 0, now), latest);
    assert!(from_reference(u64::MAX, 0, far) >= far);
}

#[test]
fn an_unknown_version_is_refused() {
    let mut s = Snapshot::export(
        "q",
        vec![FrozenEntry {
            id: 1,
            at: Instant::now(),
            value: (),
        }],
        Instant::now(),
        5,
    );
    s.version = SNAPSHOT_VERSION + 1;
    assert_eq!(
        s.into_entries(0, Instant::now()),
        Err(SnapshotError::UnknownVersion(SNAPSHOT_VERSION + 1))
    );
}
