//! What the ledger file says: each message's fate, queue and deliveries, read back after a
//! kill.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::path::Path;

use crate::args::Args;
use crate::workload::Workload;

/// A message's state as the ledger file tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fate {
    #[default]
    Unborn,
    Pending,
    Delivered,
    Drained,
    Bounced,
}

/// What the ledger file says.
#[derive(Debug, Default)]
pub struct Book {
    pub fate: Vec<Fate>,
    pub queue: Vec<u32>,
    /// Attempt of each delivery of each message that was delivered more than once.
    pub deliveries: HashMap<u32, Vec<u32>>,
    pub last_attempt: Vec<u32>,
    /// Terminal events seen for a message that had already ended otherwise.
    pub conflicts: u64,
    /// The next plan index to do, and an action begun and not ended.
    pub plan_next: u64,
    pub open: Option<(u64, Vec<u64>)>,
    pub suspended_until: Vec<u64>,
    /// The first message id not yet accepted.
    pub cursor: u32,
    pub now: u64,
    /// Redeliveries allowed: the sum over rounds of delivered messages found in flight.
    pub in_flight: u64,
    pub rounds: u64,
}

impl Book {
    /// Reads the ledger file (a missing file is an empty ledger); a last line cut short by
    /// a kill is dropped and cut off the file.
    pub fn read(path: &Path, args: &Args, work: &Workload) -> Result<Book, String> {
        let n = args.messages as usize;
        let mut b = Book {
            fate: vec![Fate::Unborn; n],
            queue: work.queue_of.clone(),
            last_attempt: vec![0; n],
            suspended_until: vec![0; args.queues as usize],
            ..Book::default()
        };
        let good = tickwheel_testkit::lines::read_complete(path, |_, line| {
            b.apply(line)
                .ok_or_else(|| format!("{}: bad line {line:?}", path.display()))
        })?;
        let Some(good) = good else {
            return Ok(b);
        };
        let f = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| e.to_string())?;
        f.set_len(good).map_err(|e| e.to_string())?;
        Ok(b)
    }

    fn apply(&mut self, line: &str) -> Option<()> {
        let mut w = line.split_whitespace();
        let tag = w.next()?;
        let nums: Vec<u64> = w.map(|x| x.parse().ok()).collect::<Option<_>>()?;
        let id = nums.first().map(|&i| i as usize);
        let arg = |k: usize| nums.get(k).copied();
        match tag {
            "q" => {
                let id = id?;
                if *self.fate.get(id)? == Fate::Unborn {
                    self.fate[id] = Fate::Pending;
                }
                self.cursor = self.cursor.max(id as u32 + 1);
            }
            "d" => {
                let (id, attempt) = (id?, arg(1)? as u32);
                match *self.fate.get(id)? {
                    Fate::Pending => {}
                    Fate::Delivered => {
                        let first = self.last_attempt[id];
                        self.deliveries
                            .entry(id as u32)
                            .or_insert_with(|| vec![first])
                            .push(attempt);
                    }
                    _ => self.conflicts += 1,
                }
                self.fate[id] = Fate::Delivered;
                self.last_attempt[id] = attempt;
            }
            "b" | "x" => {
                let id = id?;
                if *self.fate.get(id)? != Fate::Pending {
                    self.conflicts += 1;
                }
                self.fate[id] = if tag == "b" {
                    Fate::Bounced
                } else {
                    Fate::Drained
                };
            }
            "m" => *self.queue.get_mut(id?)? = arg(1)? as u32,
            "o" => {
                if nums.get(1) == Some(&2) {
                    let (q, until) = (arg(2)? as usize, arg(3)?);
                    let s = self.suspended_until.get_mut(q)?;
                    *s = (*s).max(until);
                }
                self.open = Some((arg(0)?, nums));
            }
            "e" => {
                self.plan_next = arg(0)? + 1;
                self.open = None;
            }
            "c" => {
                self.rounds += 1;
                self.in_flight += arg(1)?;
            }
            "t" => self.now = self.now.max(arg(0)?),
            _ => return None,
        }
        Some(())
    }

    /// Whether message `id` is pending per the ledger.
    pub fn pending(&self, id: u32) -> bool {
        self.fate.get(id as usize) == Some(&Fate::Pending)
    }
}
