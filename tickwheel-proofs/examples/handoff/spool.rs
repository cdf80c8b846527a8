//! A host's durable spool, as an MTA keeps one: an append-only file in the run's directory,
//! one record a line, fsync'd per batch before the host acts on it. A restarted host reads it
//! back to learn what it still holds; the ledger reads every spool and sink at the end.
//!
//! Records (tab-separated):
//!
//! ```text
//! A  id queue epoch deadline_us   accepted from a producer, under the queue's epoch then
//! I  id queue epoch deadline_us   imported from an offer, under the claim's epoch
//! D  id epoch                     delivered (its sink line is written first)
//! H  id                           refused by a frozen queue: a value handed back
//! F  queue epoch                  frozen for an offer (every later A of it is refused)
//! M  queue epoch                  the offer sealed: the queue's copy dropped here
//! B  queue epoch                  the offer fenced or aborted: the copy stays, unfrozen
//! C  queue epoch                  the claim committed: the I records of that epoch are held
//! P  queue epoch index ids        a chunk of the offer made at epoch, before its append
//!                                 (ids comma-separated)
//! X  queue epoch                  an imported copy dropped (the claim was lost before commit)
//! ```
//!
//! A sink line is `id epoch host boot delivered_us deadline_us`, both times on the reference
//! clock (Redis `TIME`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::Mutex;

/// One spool record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Accepted(Entry),
    Imported(Entry),
    Done { id: u64, epoch: u64 },
    HandedBack { id: u64 },
    Frozen { queue: String, epoch: u64 },
    Moved { queue: String, epoch: u64 },
    Back { queue: String, epoch: u64 },
    Dropped { queue: String, epoch: u64 },
    Committed { queue: String, epoch: u64 },
    Chunk(Chunk),
}

/// The ids of one chunk of an offer (`P`), spooled before its append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub queue: String,
    pub epoch: u64,
    pub index: u64,
    pub ids: Vec<u64>,
}

/// A timer a host holds, as its spool stamps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub id: u64,
    pub queue: String,
    pub epoch: u64,
    pub deadline_us: u64,
}

/// One delivery, as a sink line records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub id: u64,
    pub epoch: u64,
    pub host: String,
    pub boot: u32,
    pub delivered_us: u64,
    pub deadline_us: u64,
}

impl fmt::Display for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let entry = |f: &mut fmt::Formatter<'_>, tag, e: &Entry| {
            write!(
                f,
                "{tag}\t{}\t{}\t{}\t{}",
                e.id, e.queue, e.epoch, e.deadline_us
            )
        };
        match self {
            Record::Accepted(e) => entry(f, "A", e),
            Record::Imported(e) => entry(f, "I", e),
            Record::Done { id, epoch } => write!(f, "D\t{id}\t{epoch}"),
            Record::HandedBack { id } => write!(f, "H\t{id}"),
            Record::Frozen { queue, epoch } => write!(f, "F\t{queue}\t{epoch}"),
            Record::Moved { queue, epoch } => write!(f, "M\t{queue}\t{epoch}"),
            Record::Back { queue, epoch } => write!(f, "B\t{queue}\t{epoch}"),
            Record::Dropped { queue, epoch } => write!(f, "X\t{queue}\t{epoch}"),
            Record::Committed { queue, epoch } => write!(f, "C\t{queue}\t{epoch}"),
            Record::Chunk(c) => {
                let ids: Vec<String> = c.ids.iter().map(u64::to_string).collect();
                let ids = ids.join(",");
                write!(f, "P\t{}\t{}\t{}\t{ids}", c.queue, c.epoch, c.index)
            }
        }
    }
}

fn num<N: std::str::FromStr>(s: &str) -> Result<N, String> {
    s.parse().map_err(|_| format!("`{s}` is not a number"))
}

impl Record {
    pub fn parse(line: &str) -> Result<Record, String> {
        let f: Vec<&str> = line.split('\t').collect();
        let entry = |id: &str, q: &str, e: &str, d: &str| -> Result<Entry, String> {
            Ok(Entry {
                id: num(id)?,
                queue: q.to_string(),
                epoch: num(e)?,
                deadline_us: num(d)?,
            })
        };
        let queue =
            |q: &str, e: &str| -> Result<(String, u64), String> { Ok((q.to_string(), num(e)?)) };
        Ok(match f[..] {
            ["A", id, q, e, d] => Record::Accepted(entry(id, q, e, d)?),
            ["I", id, q, e, d] => Record::Imported(entry(id, q, e, d)?),
            ["D", id, e] => Record::Done {
                id: num(id)?,
                epoch: num(e)?,
            },
            ["H", id] => Record::HandedBack { id: num(id)? },
            ["F", q, e] => queue(q, e).map(|(queue, epoch)| Record::Frozen { queue, epoch })?,
            ["M", q, e] => queue(q, e).map(|(queue, epoch)| Record::Moved { queue, epoch })?,
            ["B", q, e] => queue(q, e).map(|(queue, epoch)| Record::Back { queue, epoch })?,
            ["X", q, e] => queue(q, e).map(|(queue, epoch)| Record::Dropped { queue, epoch })?,
            ["C", q, e] => queue(q, e).map(|(queue, epoch)| Record::Committed { queue, epoch })?,
            ["P", q, e, i, ids] => Record::Chunk(Chunk {
                queue: q.to_string(),
                epoch: num(e)?,
                index: num(i)?,
                ids: ids
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(num)
                    .collect::<Result<_, _>>()?,
            }),
            _ => return Err(format!("not a spool record: {line:?}")),
        })
    }
}

impl fmt::Display for Delivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}\t{}\t{}\t{}\t{}\t{}",
            self.id, self.epoch, self.host, self.boot, self.delivered_us, self.deadline_us
        )
    }
}

impl Delivery {
    pub fn parse(line: &str) -> Result<Delivery, String> {
        match line.split('\t').collect::<Vec<_>>()[..] {
            [id, epoch, host, boot, at, deadline] => Ok(Delivery {
                id: num(id)?,
                epoch: num(epoch)?,
                host: host.to_string(),
                boot: num(boot)?,
                delivered_us: num(at)?,
                deadline_us: num(deadline)?,
            }),
            _ => Err(format!("not a sink line: {line:?}")),
        }
    }
}

/// An append-only file of lines, fsync'd per batch. Shared by a host's threads.
pub struct Log {
    file: Mutex<File>,
}

impl Log {
    pub fn open(path: &Path) -> io::Result<Log> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Log {
            file: Mutex::new(file),
        })
    }

    /// Appends the lines in one write and waits until they are on disk.
    pub fn append<D: fmt::Display>(&self, lines: &[D]) -> io::Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        let mut buf = String::new();
        for l in lines {
            buf.push_str(&l.to_string());
            buf.push('\n');
        }
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        file.write_all(buf.as_bytes())?;
        file.sync_data()
    }
}

/// Reads a log back. A last line cut short by a kill (no newline) was never acknowledged and
/// is skipped; any other line that does not parse is an error naming the file and line.
pub fn read<R>(path: &Path, parse: impl Fn(&str) -> Result<R, String>) -> Result<Vec<R>, String> {
    let mut out = Vec::new();
    tickwheel_testkit::lines::read_complete(path, |n, line| {
        out.push(parse(line).map_err(|e| format!("{}:{n}: {e}", path.display()))?);
        Ok(())
    })?;
    Ok(out)
}

/// What a spool says its host holds.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Holdings {
    /// Timers in the host's custody (to be in its scheduler), by id.
    pub held: BTreeMap<u64, Entry>,
    /// Values refused by a frozen queue: in the host's custody outside its scheduler.
    pub handed_back: BTreeSet<u64>,
    /// Queues frozen for an offer not yet sealed or given back, with the offer's epoch.
    pub frozen: BTreeMap<String, u64>,
    /// Queues whose copy was dropped (moved away): a later A of one was refused.
    pub moved: BTreeSet<String>,
    /// Imported entries of a claim not yet committed, by (queue, epoch): not yet held.
    pub uncommitted: BTreeMap<(String, u64), Vec<Entry>>,
    /// The chunks of each offer (queue, epoch) as logged before their append: index → ids.
    pub chunks: BTreeMap<(String, u64), BTreeMap<u64, Vec<u64>>>,
}

impl Holdings {
    /// Replays a spool's records in order.
    pub fn replay(records: &[Record]) -> Holdings {
        let mut h = Holdings::default();
        for r in records {
            h.apply(r);
        }
        h
    }

    pub fn apply(&mut self, r: &Record) {
        match r {
            // Frozen: the freeze lock orders this after the F record, so it was refused
            // (its H may not have reached the spool before a kill).
            Record::Accepted(e)
                if self.frozen.contains_key(&e.queue) || self.moved.contains(&e.queue) =>
            {
                self.handed_back.insert(e.id);
            }
            Record::Accepted(e) => {
                self.held.insert(e.id, e.clone());
            }
            Record::Imported(e) => {
                let key = (e.queue.clone(), e.epoch);
                self.uncommitted.entry(key).or_default().push(e.clone());
            }
            Record::Committed { queue, epoch } => {
                for e in self
                    .uncommitted
                    .remove(&(queue.clone(), *epoch))
                    .unwrap_or_default()
                {
                    self.held.insert(e.id, e);
                }
            }
            Record::Done { id, .. } => {
                self.held.remove(id);
            }
            Record::HandedBack { id } => {
                self.held.remove(id);
                self.handed_back.insert(*id);
            }
            Record::Frozen { queue, epoch } => {
                self.frozen.insert(queue.clone(), *epoch);
            }
            Record::Moved { queue, epoch } => {
                self.frozen.remove(queue);
                self.moved.insert(queue.clone());
                self.held.retain(|_, e| e.queue != *queue);
                // Every id that went into the offer, whatever its spool says of it.
                let key = (queue.clone(), *epoch);
                for id in self.chunks.get(&key).into_iter().flat_map(|c| c.values()) {
                    for id in id {
                        self.held.remove(id);
                    }
                }
            }
            Record::Chunk(c) => {
                let offer = self.chunks.entry((c.queue.clone(), c.epoch)).or_default();
                offer.insert(c.index, c.ids.clone());
            }
            Record::Back { queue, .. } => {
                self.frozen.remove(queue);
                self.moved.remove(queue);
            }
            Record::Dropped { queue, epoch } => {
                self.uncommitted.remove(&(queue.clone(), *epoch));
                self.held
                    .retain(|_, e| !(e.queue == *queue && e.epoch == *epoch));
            }
        }
    }
}

impl Holdings {
    /// The records that settle an offer of `queue` made at `epoch` that another member took
    /// over with its first `taken` chunks: every held timer of the queue that is not in one
    /// of those chunks is the host's again, handed back (`H`); the rest is dropped (`M`).
    pub fn reclaimed(&self, queue: &str, epoch: u64, taken: u64) -> Vec<Record> {
        let key = (queue.to_string(), epoch);
        let gone: BTreeSet<u64> = (self.chunks.get(&key).into_iter())
            .flat_map(|c| c.range(..taken).flat_map(|(_, ids)| ids.iter().copied()))
            .collect();
        let mut out: Vec<Record> = (self.held.values())
            .filter(|e| e.queue == queue && !gone.contains(&e.id))
            .map(|e| Record::HandedBack { id: e.id })
            .collect();
        out.push(Record::Moved {
            queue: queue.to_string(),
            epoch,
        });
        out
    }
}

/// The `D` records a restarted host owes its spool: deliveries in its own sink (written
/// first) of timers its spool still holds, because a kill came between the two writes. Without
/// them the host would reload a delivered timer and deliver it again — or, worse, put it in
/// an offer, where another host delivers it under another epoch.
pub fn unrecorded_deliveries(h: &Holdings, sink: &[Delivery]) -> Vec<Record> {
    let mut seen = BTreeSet::new();
    sink.iter()
        .filter(|d| h.held.contains_key(&d.id) && seen.insert(d.id))
        .map(|d| Record::Done {
            id: d.id,
            epoch: d.epoch,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(id: u64, queue: &str, epoch: u64) -> Entry {
        Entry {
            id,
            queue: queue.into(),
            epoch,
            deadline_us: 1_000 + id,
        }
    }

    #[test]
    fn records_and_deliveries_round_trip() {
        let records = [
            Record::Accepted(e(1, "q0", 1)),
            Record::Imported(e(2, "q1", 3)),
            Record::Done { id: 1, epoch: 1 },
            Record::HandedBack { id: 7 },
            Record::Frozen {
                queue: "q0".into(),
                epoch: 1,
            },
            Record::Moved {
                queue: "q0".into(),
                epoch: 1,
            },
            Record::Back {
                queue: "q0".into(),
                epoch: 1,
            },
            Record::Dropped {
                queue: "q1".into(),
                epoch: 3,
            },
            Record::Committed {
                queue: "q1".into(),
                epoch: 3,
            },
            Record::Chunk(Chunk {
                queue: "q0".into(),
                epoch: 2,
                index: 1,
                ids: vec![4, 5, 6],
            }),
        ];
        for r in records {
            assert_eq!(Record::parse(&r.to_string()), Ok(r));
        }
        let d = Delivery {
            id: 9,
            epoch: 2,
            host: "target".into(),
            boot: 3,
            delivered_us: 5,
            deadline_us: 4,
        };
        assert_eq!(Delivery::parse(&d.to_string()), Ok(d));
        assert!(Record::parse("A\t1\tq").is_err());
        assert!(Delivery::parse("x\t1\t2\t3\t4\t5").is_err());
    }

    #[test]
    fn replay_follows_freeze_move_and_back() {
        let h = Holdings::replay(&[
            Record::Accepted(e(1, "q0", 1)),
            Record::Accepted(e(2, "q0", 1)),
            Record::Accepted(e(3, "q1", 1)),
            Record::Done { id: 2, epoch: 1 },
            Record::Frozen {
                queue: "q0".into(),
                epoch: 1,
            },
            // refused: the kill came before its H record
            Record::Accepted(e(4, "q0", 1)),
            Record::Accepted(e(5, "q0", 1)),
            Record::HandedBack { id: 5 },
            Record::Moved {
                queue: "q0".into(),
                epoch: 1,
            },
            Record::Frozen {
                queue: "q1".into(),
                epoch: 1,
            },
            Record::Back {
                queue: "q1".into(),
                epoch: 1,
            },
        ]);
        assert_eq!(h.held.keys().copied().collect::<Vec<_>>(), [3]);
        assert_eq!(h.handed_back.iter().copied().collect::<Vec<_>>(), [4, 5]);
        assert!(h.frozen.is_empty());
    }

    #[test]
    fn a_delivery_in_the_sink_without_its_d_record_is_recorded_on_restart() {
        let records = vec![
            Record::Accepted(e(1, "q0", 1)),
            Record::Accepted(e(2, "q0", 1)),
            Record::Accepted(e(3, "q1", 1)),
            Record::Done { id: 1, epoch: 1 },
        ];
        let d = |id| Delivery {
            id,
            epoch: 1,
            host: "source".into(),
            boot: 1,
            delivered_us: 9,
            deadline_us: 8,
        };
        // 1: delivered and recorded; 2: delivered, killed before its D (twice in the sink).
        let h = Holdings::replay(&records);
        let owed = unrecorded_deliveries(&h, &[d(1), d(2), d(2)]);
        assert_eq!(owed, [Record::Done { id: 2, epoch: 1 }]);
        let mut h = h;
        owed.iter().for_each(|r| h.apply(r));
        assert_eq!(h.held.keys().copied().collect::<Vec<_>>(), [3]);
    }

    /// A source restarted after another member reclaimed its unsealed offer keeps exactly the
    /// timers outside the chunks taken: in later chunks, never appended, or never chunked.
    #[test]
    fn a_reclaimed_offer_keeps_what_was_not_taken() {
        let chunk = |index, ids: &[u64]| {
            Record::Chunk(Chunk {
                queue: "q0".into(),
                epoch: 1,
                index,
                ids: ids.to_vec(),
            })
        };
        let mut records: Vec<Record> = (1..=7).map(|id| Record::Accepted(e(id, "q0", 1))).collect();
        records.push(Record::Accepted(e(9, "q1", 1)));
        records.push(Record::Frozen {
            queue: "q0".into(),
            epoch: 1,
        });
        records.extend([chunk(0, &[1, 2]), chunk(1, &[3, 4]), chunk(2, &[5])]);
        let mut h = Holdings::replay(&records);
        let settle = h.reclaimed("q0", 1, 2);
        settle.iter().for_each(|r| h.apply(r));
        assert_eq!(h.handed_back.iter().copied().collect::<Vec<_>>(), [5, 6, 7]);
        assert_eq!(h.held.keys().copied().collect::<Vec<_>>(), [9]);
        assert!(h.frozen.is_empty());
        // Sealed (every chunk taken): nothing comes back.
        let h = Holdings::replay(&records);
        let settle = h.reclaimed("q0", 1, 3);
        assert_eq!(settle.len(), 3, "{settle:?}"); // 6 and 7 were never chunked
    }

    #[test]
    fn a_torn_last_line_is_skipped_and_a_bad_one_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spool");
        let log = Log::open(&path).unwrap();
        log.append(&[
            Record::Accepted(e(1, "q0", 1)),
            Record::Done { id: 1, epoch: 1 },
        ])
        .unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"A\t2\tq")
            .unwrap();
        assert_eq!(read(&path, Record::parse).unwrap().len(), 2);
        std::fs::write(&path, "A\t2\tq\nD\t1\t1\n").unwrap();
        let err = read(&path, Record::parse).unwrap_err();
        assert!(err.contains(":1:"), "{err}");
        assert!(
            read(&dir.path().join("none"), Record::parse)
                .unwrap()
                .is_empty()
        );
    }
}
