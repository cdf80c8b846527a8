//! `IndexedWheel<K, T>`: the id index over the core wheel.
//!
//! Hand-written cases for each method's contract, then a stateful proptest against a model
//! (`HashMap<id, (deadline, seq, value, reset)>`): every op sequence must fire what the model
//! says is due, at the model's earliest deadline, with never-reset timers of equal deadlines
//! in insertion order, and every lookup must agree after every step. Deadlines are drawn
//! level-uniformly so every level of the wheel is hit. `PROPTEST_CASES` raises the case
//! count (default 128).

mod support;

use std::collections::HashMap;

use proptest::prelude::*;
use tickwheel::{CapacityError, IndexedWheel};

#[test]
fn insert_replaces_and_returns_the_old_value() {
    let mut w = IndexedWheel::new();
    assert_eq!(w.insert("a", 10, 1), None);
    assert_eq!(w.insert("a", 20, 2), Some(1));
    assert_eq!(
        (w.len(), w.deadline(&"a"), w.get(&"a")),
        (1, Some(20), Some(&2))
    );
    assert_eq!(w.poll(15), None, "the replaced deadline 10 is gone");
    assert_eq!(w.poll(20), Some(("a", 2)));
    assert!(w.is_empty());
}

#[test]
fn replacement_counts_as_a_fresh_insert_among_equal_deadlines() {
    let mut w = IndexedWheel::new();
    w.insert(1, 5, 'x');
    w.insert(2, 5, 'y');
    w.insert(1, 5, 'z');
    assert_eq!(w.poll(5), Some((2, 'y')));
    assert_eq!(w.poll(5), Some((1, 'z')));
}

#[test]
fn try_insert_never_fails_below_capacity_and_replacing() {
    let mut w = IndexedWheel::with_capacity(4);
    assert_eq!(w.try_insert(1u8, 1, "a"), Ok(None));
    assert_eq!(w.try_insert(1u8, 2, "b"), Ok(Some("a")));
    let e: Result<Option<&str>, CapacityError<&str>> = w.try_insert(2u8, 3, "c");
    assert_eq!(e, Ok(None));
}

#[test]
fn cancel_reset_get_on_absent_ids_are_harmless() {
    let mut w: IndexedWheel<u32, &str> = IndexedWheel::new();
    assert_eq!(w.cancel(&1), None);
    assert!(!w.reset(&1, 5));
    assert!(w.get_mut(&1).is_none());
    assert_eq!(
        (w.get(&1), w.deadline(&1), w.contains(&1)),
        (None, None, false)
    );
    w.insert(1, 5, "v");
    assert_eq!(w.poll(5), Some((1, "v")));
    assert_eq!(w.cancel(&1), None, "a fired id is absent");
    assert!(!w.reset(&1, 9));
    w.insert(1, 7, "again");
    assert_eq!(
        w.get(&1),
        Some(&"again"),
        "a fired id can be inserted again at once"
    );
}

#[test]
fn get_mut_changes_the_value_that_fires() {
    let mut w = IndexedWheel::new();
    w.insert(String::from("k"), 3, 1u32);
    if let Some(v) = w.get_mut(&String::from("k")) {
        *v += 41;
    }
    assert_eq!(w.poll(3), Some((String::from("k"), 42)));
}

#[test]
fn reset_moves_in_both_directions_and_into_the_past() {
    let mut w = IndexedWheel::new();
    w.insert('a', 100, ());
    w.insert('b', 100, ());
    assert!(w.reset(&'a', 5_000));
    assert!(w.reset(&'b', 2));
    assert_eq!(w.poll(1), None);
    assert_eq!(w.poll(99), Some(('b', ())));
    assert_eq!(w.poll(4_999), None);
    assert_eq!(w.poll(5_000), Some(('a', ())));
    w.insert('c', 9_000, ());
    assert!(w.reset(&'c', 0), "a past deadline fires on the next poll");
    assert_eq!(w.poll(5_000), Some(('c', ())));
}

#[test]
fn poll_into_limits_and_resumes_in_order() {
    let mut w = IndexedWheel::new();
    for id in 0..100u64 {
        w.insert(id, 1_000 - id * 7, id);
    }
    let mut out = Vec::new();
    let mut rounds = 0;
    while w.poll_into(u64::MAX, 9, &mut out) > 0 {
        rounds += 1;
    }
    assert_eq!(rounds, 12);
    let ids: Vec<u64> = out.iter().map(|&(id, _)| id).collect();
    assert_eq!(ids, (0..100).rev().collect::<Vec<_>>());
    assert_eq!(w.poll_into(u64::MAX, 0, &mut out), 0);
}

#[test]
fn clear_and_next_expiration() {
    let mut w = IndexedWheel::starting_at(1 << 40);
    assert_eq!(w.elapsed(), 1 << 40);
    assert_eq!(w.next_expiration(), None);
    w.insert(1, (1 << 40) + 10, ());
    w.insert(2, (1 << 40) + 3, ());
    assert_eq!(w.next_expiration(), Some((1 << 40) + 3));
    w.clear();
    assert!(w.is_empty() && !w.contains(&1) && w.next_expiration().is_none());
    w.insert(1, 0, ());
    assert_eq!(w.poll(0), Some((1, ())), "ids are free after clear");
}

#[test]
fn stats_and_shrink_keep_ids() {
    let mut w = IndexedWheel::new();
    for id in 0..1_000u32 {
        w.insert(id, u64::from(id) * 100, ());
    }
    for id in 0..990u32 {
        w.cancel(&id);
    }
    assert_eq!(w.stats().live, 10);
    w.shrink_to_fit();
    assert_eq!(w.len(), 10);
    assert!((990..1_000).all(|id| w.deadline(&id) == Some(u64::from(id) * 100)));
}

// ------------------------------------------------------------------ model-based proptest

const IDS: u32 = 12;

#[derive(Debug, Clone)]
enum Op {
    Insert { id: u32, when: When },
    Cancel { id: u32 },
    Reset { id: u32, when: When },
    Poll { when: When },
    PollInto { when: When, limit: usize },
    Clear,
}

/// A tick relative to the wheel's `elapsed`: `level` picks the distance's magnitude, so
/// every level is as likely as level 0.
#[derive(Debug, Clone, Copy)]
struct When {
    level: u32,
    offset: u64,
    behind: bool,
}

impl When {
    fn tick(self, elapsed: u64) -> u64 {
        let span = 64u64.checked_pow(self.level + 1).unwrap_or(u64::MAX);
        let distance = self.offset % span;
        if self.behind {
            elapsed.saturating_sub(distance)
        } else {
            elapsed.saturating_add(distance)
        }
    }
}

fn when() -> impl Strategy<Value = When> {
    (0u32..=10, any::<u64>(), prop::bool::weighted(0.1)).prop_map(|(level, offset, behind)| When {
        level,
        offset,
        behind,
    })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..IDS, when()).prop_map(|(id, when)| Op::Insert { id, when }),
        2 => (0..IDS).prop_map(|id| Op::Cancel { id }),
        2 => (0..IDS, when()).prop_map(|(id, when)| Op::Reset { id, when }),
        4 => when().prop_map(|when| Op::Poll { when }),
        2 => (when(), 0usize..5).prop_map(|(when, limit)| Op::PollInto { when, limit }),
        1 => Just(Op::Clear),
    ]
}

#[derive(Debug, Clone, Copy)]
struct Rec {
    deadline: u64,
    seq: u64,
    value: u64,
    reset: bool,
}

#[derive(Default)]
struct Model {
    pending: HashMap<u32, Rec>,
    seq: u64,
}

impl Model {
    /// Checks one fired timer against the model and removes it.
    fn fire(&mut self, id: u32, value: u64, bound: u64) -> Result<(), TestCaseError> {
        let rec = self
            .pending
            .remove(&id)
            .ok_or_else(|| TestCaseError::fail(format!("fired absent id {id}")))?;
        prop_assert_eq!(rec.value, value, "value of id {}", id);
        prop_assert!(
            rec.deadline <= bound,
            "id {} fired early: deadline {} > {}",
            id,
            rec.deadline,
            bound
        );
        let earliest = self
            .pending
            .values()
            .map(|r| r.deadline)
            .min()
            .unwrap_or(u64::MAX);
        prop_assert!(
            rec.deadline <= earliest,
            "id {} (deadline {}) fired before one due at {}",
            id,
            rec.deadline,
            earliest
        );
        if !rec.reset {
            let earlier = self
                .pending
                .values()
                .any(|r| !r.reset && r.deadline == rec.deadline && r.seq < rec.seq);
            prop_assert!(
                !earlier,
                "id {} overtook an earlier insert with the same deadline",
                id
            );
        }
        Ok(())
    }

    fn none_due(&self, bound: u64) -> Result<(), TestCaseError> {
        let due: Vec<_> = self
            .pending
            .iter()
            .filter(|(_, r)| r.deadline <= bound)
            .collect();
        prop_assert!(due.is_empty(), "poll ended with due timers left: {:?}", due);
        Ok(())
    }
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut w: IndexedWheel<u32, u64> = IndexedWheel::new();
    let mut m = Model::default();
    for (step, op) in ops.into_iter().enumerate() {
        let elapsed = w.elapsed();
        match op {
            Op::Insert { id, when } => {
                let deadline = when.tick(elapsed);
                m.seq += 1;
                let value = step as u64;
                let old = m
                    .pending
                    .insert(
                        id,
                        Rec {
                            deadline,
                            seq: m.seq,
                            value,
                            reset: false,
                        },
                    )
                    .map(|r| r.value);
                prop_assert_eq!(w.insert(id, deadline, value), old);
            }
            Op::Cancel { id } => {
                prop_assert_eq!(w.cancel(&id), m.pending.remove(&id).map(|r| r.value))
            }
            Op::Reset { id, when } => {
                let deadline = when.tick(elapsed);
                let model = m.pending.get_mut(&id).map(|r| {
                    r.deadline = deadline;
                    r.reset = true;
                });
                prop_assert_eq!(w.reset(&id, deadline), model.is_some());
            }
            Op::Poll { when } => {
                let now = when.tick(elapsed);
                let bound = now.max(elapsed);
                match w.poll(now) {
                    Some((id, value)) => m.fire(id, value, bound)?,
                    None => m.none_due(bound)?,
                }
            }
            Op::PollInto { when, limit } => {
                let now = when.tick(elapsed);
                let bound = now.max(elapsed);
                let mut out = Vec::new();
                let n = w.poll_into(now, limit, &mut out);
                prop_assert_eq!(n, out.len());
                prop_assert!(n <= limit);
                for (id, value) in out {
                    m.fire(id, value, bound)?;
                }
                if n < limit {
                    m.none_due(bound)?;
                }
            }
            Op::Clear => {
                w.clear();
                m.pending.clear();
            }
        }
        prop_assert_eq!(w.len(), m.pending.len());
        prop_assert_eq!(w.is_empty(), m.pending.is_empty());
        for id in 0..IDS {
            let rec = m.pending.get(&id);
            prop_assert_eq!(w.contains(&id), rec.is_some());
            prop_assert_eq!(w.deadline(&id), rec.map(|r| r.deadline));
            prop_assert_eq!(w.get(&id).copied(), rec.map(|r| r.value));
        }
        if let Some(next) = w.next_expiration() {
            let earliest = m.pending.values().map(|r| r.deadline).min();
            prop_assert!(
                earliest.is_some_and(|e| next <= e),
                "next_expiration {} after the earliest {:?}",
                next,
                earliest
            );
        } else {
            prop_assert!(m.pending.is_empty());
        }
    }
    Ok(())
}

fn cases() -> u32 {
    support::cases_or(128)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn matches_the_model(ops in prop::collection::vec(op(), 1..200)) {
        run(ops)?;
    }
}
