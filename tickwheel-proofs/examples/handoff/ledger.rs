//! The custody ledger, computed by the parent from every host's spool and sink, what each
//! host reported holding at the end, and the ids left in Redis:
//!
//! - every accepted id is in exactly one place: delivered, held by a host's scheduler, in
//!   Redis, or a value handed back;
//! - an id delivered more than once was delivered under one (id, epoch), and every delivery
//!   but the last came from a process that was then killed (at-least-once across a crash,
//!   never across a move);
//! - no delivery before its deadline on the reference clock;
//! - an imported deadline is never earlier than the accepted one by more than the tolerance.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::spool::{Delivery, Holdings, Record};

/// Everything the ledger reads.
#[derive(Debug, Default)]
pub struct Inputs {
    /// Each host's spool records, by host name.
    pub spools: BTreeMap<String, Vec<Record>>,
    /// Every sink line of every host.
    pub deliveries: Vec<Delivery>,
    /// (held in the scheduler, handed back) as each host's last process reported them.
    pub reported: BTreeMap<String, (usize, usize)>,
    /// Ids of the entries of chunks still in Redis.
    pub in_redis: Vec<u64>,
    /// (host, boot) of every process killed during the run.
    pub killed: BTreeSet<(String, u32)>,
    /// How much earlier than the accepted deadline an imported one may be (µs).
    pub tolerance_us: u64,
}

/// The counts the last line shows.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Counts {
    pub ids: usize,
    pub delivered: usize,
    pub held: BTreeMap<String, usize>,
    pub handed_back: usize,
    pub in_redis: usize,
    pub imported: usize,
    pub redeliveries: usize,
    pub max_import_shift_us: i64,
}

/// The ledger's answer: the counts and every problem found (none: custody holds).
#[derive(Debug)]
pub struct Verdict {
    pub counts: Counts,
    pub problems: Vec<String>,
}

impl Verdict {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }

    /// The program's last line.
    pub fn last_line(&self) -> String {
        let c = &self.counts;
        let mut held = String::new();
        for (host, n) in &c.held {
            let _ = write!(held, "held by {host} {n}, ");
        }
        let counts = format!(
            "{} ids: delivered {}, {held}in Redis {}, handed back {}; imported {}, \
             at-least-once redeliveries {}, largest import shift {} µs",
            c.ids,
            c.delivered,
            c.in_redis,
            c.handed_back,
            c.imported,
            c.redeliveries,
            c.max_import_shift_us
        );
        if self.ok() {
            format!("custody: OK ({counts})")
        } else {
            format!(
                "custody: FAILED {} problem(s): {} ({counts})",
                self.problems.len(),
                self.problems.join("; ")
            )
        }
    }
}

/// Problems of one kind are listed up to this many ids, then counted.
const SHOWN: usize = 5;

fn problem(out: &mut Vec<String>, what: &str, ids: &[u64]) {
    if ids.is_empty() {
        return;
    }
    let shown: Vec<String> = ids.iter().take(SHOWN).map(u64::to_string).collect();
    let more = if ids.len() > SHOWN {
        format!(" and {} more", ids.len() - SHOWN)
    } else {
        String::new()
    };
    out.push(format!(
        "{} id(s) {what}: {}{more}",
        ids.len(),
        shown.join(", ")
    ));
}

pub fn check(inputs: &Inputs) -> Verdict {
    let mut problems = Vec::new();
    let mut counts = Counts::default();

    // Accepted ids with their deadlines; an id accepted twice is a producer's fault.
    let mut accepted: BTreeMap<u64, u64> = BTreeMap::new();
    let mut twice = Vec::new();
    let mut imported: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    // The earliest imported deadline of each offer (queue, epoch): a timer already due at
    // the export is due "now" on the reference clock, the offer's earliest deadline.
    let mut floor: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    let mut offer_floor: BTreeMap<(String, u64), u64> = BTreeMap::new();
    for records in inputs.spools.values() {
        for r in records {
            if let Record::Imported(e) = r {
                let f = offer_floor
                    .entry((e.queue.clone(), e.epoch))
                    .or_insert(u64::MAX);
                *f = (*f).min(e.deadline_us);
            }
        }
    }
    for records in inputs.spools.values() {
        for r in records {
            match r {
                Record::Accepted(e) if accepted.insert(e.id, e.deadline_us).is_some() => {
                    twice.push(e.id);
                }
                Record::Imported(e) => {
                    imported.insert((e.id, e.epoch), e.deadline_us);
                    let f = offer_floor.get(&(e.queue.clone(), e.epoch)).copied();
                    floor.insert((e.id, e.epoch), f.unwrap_or(0));
                }
                _ => {}
            }
        }
    }
    problem(&mut problems, "accepted twice", &twice);
    counts.ids = accepted.len();
    counts.imported = imported.len();

    // Where each id is now.
    let mut places: BTreeMap<u64, Vec<&str>> = BTreeMap::new();
    for (host, records) in &inputs.spools {
        let h = Holdings::replay(records);
        counts.held.insert(host.clone(), h.held.len());
        counts.handed_back += h.handed_back.len();
        if let Some(&(held, back)) = inputs.reported.get(host)
            && (held, back) != (h.held.len(), h.handed_back.len())
        {
            problems.push(format!(
                "{host} reported {held} held and {back} handed back, its spool says {} and {}",
                h.held.len(),
                h.handed_back.len()
            ));
        }
        for id in h.held.keys() {
            places.entry(*id).or_default().push("held");
        }
        for id in &h.handed_back {
            places.entry(*id).or_default().push("handed back");
        }
    }
    for id in &inputs.in_redis {
        places.entry(*id).or_default().push("in Redis");
    }
    counts.in_redis = inputs.in_redis.len();

    let mut by_id: BTreeMap<u64, Vec<&Delivery>> = BTreeMap::new();
    for d in &inputs.deliveries {
        by_id.entry(d.id).or_default().push(d);
    }
    counts.delivered = by_id.len();
    let (mut epochs, mut unkilled, mut early) = (Vec::new(), Vec::new(), Vec::new());
    for (id, ds) in &by_id {
        places.entry(*id).or_default().push("delivered");
        if ds.iter().any(|d| d.epoch != ds[0].epoch) {
            epochs.push(*id);
        }
        // Every delivery but the last must be by a process that was killed afterwards.
        let earlier = &ds[..ds.len() - 1];
        if earlier
            .iter()
            .any(|d| !inputs.killed.contains(&(d.host.clone(), d.boot)))
        {
            unkilled.push(*id);
        }
        counts.redeliveries += earlier.len();
        if ds.iter().any(|d| d.delivered_us < d.deadline_us) {
            early.push(*id);
        }
    }
    problem(&mut problems, "delivered under two epochs", &epochs);
    problem(
        &mut problems,
        "delivered twice without a kill in between",
        &unkilled,
    );
    problem(&mut problems, "delivered before their deadline", &early);

    let (mut lost, mut doubled, mut unknown) = (Vec::new(), Vec::new(), Vec::new());
    for id in accepted.keys() {
        match places.get(id).map_or(0, Vec::len) {
            0 => lost.push(*id),
            1 => {}
            _ => doubled.push(*id),
        }
    }
    for id in places.keys() {
        if !accepted.contains_key(id) {
            unknown.push(*id);
        }
    }
    problem(&mut problems, "lost (in no place)", &lost);
    problem(&mut problems, "in two places", &doubled);
    problem(&mut problems, "never accepted", &unknown);

    let mut earlier_import = Vec::new();
    for (&(id, epoch), &deadline) in &imported {
        let Some(&source) = accepted.get(&id) else {
            continue;
        };
        let shift = deadline as i64 - source as i64;
        // Past due at the export: moved to "now", later by design; not a clock difference.
        let due_now = shift > 0 && floor.get(&(id, epoch)) == Some(&deadline);
        if !due_now && shift.abs() > counts.max_import_shift_us.abs() {
            counts.max_import_shift_us = shift;
        }
        if deadline + inputs.tolerance_us < source {
            earlier_import.push(id);
        }
    }
    problem(
        &mut problems,
        "imported with an earlier deadline",
        &earlier_import,
    );
    Verdict { counts, problems }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spool::Entry;

    fn acc(id: u64, queue: &str) -> Record {
        Record::Accepted(Entry {
            id,
            queue: queue.into(),
            epoch: 1,
            deadline_us: 100,
        })
    }

    fn imp(id: u64, queue: &str, deadline_us: u64) -> Record {
        Record::Imported(Entry {
            id,
            queue: queue.into(),
            epoch: 2,
            deadline_us,
        })
    }

    fn dlv(id: u64, epoch: u64, host: &str, boot: u32, at: u64) -> Delivery {
        Delivery {
            id,
            epoch,
            host: host.into(),
            boot,
            delivered_us: at,
            deadline_us: 100,
        }
    }

    /// Source accepted 1..=4, delivered 1, moved q1 (3, 4) to the target, which delivered 3
    /// and holds 4; 2 was handed back.
    fn clean() -> Inputs {
        let mut i = Inputs::default();
        i.spools.insert(
            "source".into(),
            vec![
                acc(1, "q0"),
                Record::Done { id: 1, epoch: 1 },
                acc(3, "q1"),
                acc(4, "q1"),
                Record::Frozen {
                    queue: "q1".into(),
                    epoch: 1,
                },
                acc(2, "q1"),
                Record::HandedBack { id: 2 },
                Record::Moved {
                    queue: "q1".into(),
                    epoch: 1,
                },
            ],
        );
        i.spools.insert(
            "target".into(),
            vec![
                imp(3, "q1", 100),
                imp(4, "q1", 101),
                Record::Committed {
                    queue: "q1".into(),
                    epoch: 2,
                },
                Record::Done { id: 3, epoch: 2 },
            ],
        );
        i.deliveries = vec![dlv(1, 1, "source", 1, 150), dlv(3, 2, "target", 1, 100)];
        i
    }

    #[test]
    fn a_clean_run_is_ok() {
        let v = check(&clean());
        assert!(v.ok(), "{:?}", v.problems);
        assert_eq!(v.counts.ids, 4);
        assert_eq!(v.counts.held["target"], 1);
        assert!(
            v.last_line().starts_with("custody: OK (4 ids: delivered 2"),
            "{}",
            v.last_line()
        );
    }

    #[test]
    fn a_lost_id_a_doubled_id_and_an_unknown_id_fail() {
        let mut i = clean();
        i.in_redis = vec![4, 9];
        i.spools.get_mut("target").unwrap().pop();
        let v = check(&i);
        let line = v.last_line();
        assert!(line.starts_with("custody: FAILED"), "{line}");
        // 3 is both held by the target and delivered; 4 both held and in Redis.
        assert!(line.contains("in two places: 3, 4"), "{line}");
        assert!(line.contains("never accepted: 9"), "{line}");
    }

    #[test]
    fn redelivery_needs_a_kill_and_one_epoch() {
        let mut i = clean();
        i.deliveries.insert(1, dlv(3, 2, "target", 1, 100));
        i.deliveries.last_mut().unwrap().boot = 2;
        assert!(!check(&i).ok());
        i.killed.insert(("target".into(), 1));
        let v = check(&i);
        assert!(v.ok(), "{:?}", v.problems);
        assert_eq!(v.counts.redeliveries, 1);
        i.deliveries[1].epoch = 1;
        assert!(check(&i).last_line().contains("two epochs"));
    }

    #[test]
    fn early_deliveries_earlier_imports_and_wrong_reports_fail() {
        let mut i = clean();
        i.deliveries[0].delivered_us = 99;
        assert!(check(&i).last_line().contains("before their deadline: 1"));
        let mut i = clean();
        i.spools.get_mut("target").unwrap()[1] = imp(4, "q1", 89);
        i.tolerance_us = 10;
        assert!(check(&i).last_line().contains("earlier deadline: 4"));
        i.tolerance_us = 11;
        assert!(check(&i).ok());
        i.reported.insert("target".into(), (0, 0));
        assert!(check(&i).last_line().contains("target reported 0 held"));
    }
}
