//! `--journal`: one round of the run on `tickwheel_journal::Durable`, resumable after a
//! SIGKILL at any point.
//!
//! One thread does the operator's actions, the producers' arrivals and the dispatcher's
//! pops in MTA-time order, on the journaled scheduler in `Async` mode with an explicit
//! `flush` (one group commit) before anything is acknowledged. Beside the journal, the run
//! appends what it acknowledged to a ledger file (`ledger.log`, one line per event, written
//! to the kernel before the journal change that makes it matter, so a SIGKILL loses
//! neither; power loss is not simulated):
//!
//! - `q ID`: message accepted (its schedule is durable);
//! - `d ID ATTEMPT`: delivered (written before its `Due` ends);
//! - `b ID`, `x ID`: bounced, transferred away (after the journal recorded the end);
//! - `m ID QUEUE`: moved to another queue by a rebind;
//! - `o I KIND ...` and `e I`: operator action I begins (before touching the journal) and
//!   ends; an `o` without its `e` is finished by the next round from what the journal
//!   shows (a drain whose messages left the journal was done);
//! - `c ROUND N`: round ROUND recovered N delivered messages still in the journal (in
//!   flight at the kill: they are delivered again, with a higher attempt);
//! - `t NOW`: MTA time reached.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tickwheel::sync::Cancel;
use tickwheel_journal::{Durability, Durable, Options};

use crate::args::Args;
use crate::workload::{ActionKind, Workload, nanos};

/// How far ahead of their arrival messages are queued (MTA time).
const LEAD: u64 = 60_000_000_000;
/// The delay before rebound messages are due (MTA time).
const SLACK: u64 = 30_000_000_000;
/// The least step of MTA time between two pops: what is due within it goes in one batch.
const STEP: u64 = 5_000_000_000;
/// Most messages scheduled in one group commit by the producer.
const CHUNK: u32 = 8192;

/// The value each journaled timer carries.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct JMsg {
    /// The MTA time of the deadline it was scheduled for.
    pub due: u64,
}

/// The journaled scheduler as the run uses it: queue, message id, message.
pub type Journal = Durable<u32, u32, JMsg>;

/// Where a kill point is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    Batch,
    Drain,
    Freeze,
}

impl Point {
    pub const ALL: [Point; 3] = [Point::Batch, Point::Drain, Point::Freeze];

    pub fn name(self) -> &'static str {
        match self {
            Point::Batch => "batch",
            Point::Drain => "drain",
            Point::Freeze => "freeze",
        }
    }
}

/// The journal's directory and the ledger file inside `dir`.
pub fn paths(dir: &Path) -> (PathBuf, PathBuf) {
    (dir.join("timers"), dir.join("ledger.log"))
}

/// Opens the journal: `Async` with the run's own `flush`es as acknowledgements, or, with
/// the planted fault, `Async` with a long window and no flush (acknowledged before
/// durable).
pub fn open(dir: &Path, args: &Args) -> Result<Journal, String> {
    let window = if args.child.unsynced_acks {
        Duration::from_secs(10)
    } else {
        Duration::from_millis(1)
    };
    let options = Options::new()
        .durability(Durability::Async(window))
        .resolution(args.resolution);
    Journal::open(paths(dir).0, options).map_err(|e| format!("opening the journal: {e}"))
}

/// Every timer in the journal: id -> (queue, attempt). Takes each out of the in-memory
/// scheduler and puts it back unchanged (the journal's records are not touched).
pub fn inventory(j: &Journal, queues: u32, clock: &Anchor) -> HashMap<u32, (u32, u32)> {
    let mut found = HashMap::new();
    let sched = j.scheduler();
    for q in 0..queues {
        let drained = sched.drain_queue(&q);
        for (id, slot) in drained.cancelled {
            found.insert(id, (q, slot.attempt()));
            let at = clock.instant(slot.value().due);
            let _ = sched.schedule(q, id, at, slot);
        }
    }
    found
}

mod book;

pub use book::{Book, Fate};

/// MTA time 0 as a wall-clock instant shared by every round, so the journal's wall-clock
/// deadlines mean the same MTA times after a restart.
pub struct Anchor {
    start: Instant,
}

impl Anchor {
    /// The anchor of a run whose MTA time 0 was `wall_ns` (UNIX nanoseconds).
    pub fn new(wall_ns: u64) -> Result<Anchor, String> {
        let now_ns = nanos(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default(),
        );
        let back = Duration::from_nanos(now_ns.saturating_sub(wall_ns));
        let start = Instant::now()
            .checked_sub(back)
            .ok_or("the run's anchor is too far in the past")?;
        Ok(Anchor { start })
    }

    /// Now, as an anchor (UNIX nanoseconds).
    pub fn now_wall_ns() -> u64 {
        nanos(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default(),
        )
    }

    pub fn instant(&self, t: u64) -> Instant {
        self.start + Duration::from_nanos(t)
    }

    fn mta(&self, i: Instant) -> u64 {
        nanos(i.saturating_duration_since(self.start))
    }
}

/// The kill point a round is armed with: the first point of `kind` at or after MTA time
/// `at` (or of any kind once `at` is 10 minutes past).
pub struct Arm {
    pub at: u64,
    pub kind: Point,
}

/// One round: the journal, the ledger file, and where the run stands.
pub struct Round<'a> {
    args: &'a Args,
    work: &'a Workload,
    j: Journal,
    clock: Anchor,
    book: Book,
    out: BufWriter<File>,
    now: u64,
    arm: Option<Arm>,
    sync: bool,
}

type Res<T> = Result<T, String>;

fn jerr(e: tickwheel_journal::Error) -> String {
    format!("journal: {e}")
}

impl<'a> Round<'a> {
    /// Opens the journal and the ledger file of `dir` and finishes what the last round
    /// left half done.
    pub fn start(
        dir: &Path,
        args: &'a Args,
        work: &'a Workload,
        clock: Anchor,
        round: u32,
        arm: Option<Arm>,
    ) -> Res<Round<'a>> {
        let (_, ledger) = paths(dir);
        let book = Book::read(&ledger, args, work)?;
        let j = open(dir, args)?;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&ledger)
            .map_err(|e| format!("{}: {e}", ledger.display()))?;
        let mut r = Round {
            args,
            work,
            j,
            clock,
            now: book.now,
            book,
            out: BufWriter::new(file),
            arm,
            sync: !args.child.unsynced_acks,
        };
        r.recover(round)?;
        Ok(r)
    }

    fn log(&mut self, line: std::fmt::Arguments) -> Res<()> {
        self.out.write_fmt(line).map_err(|e| e.to_string())
    }

    /// Hands what the ledger buffered to the kernel: a kill no longer loses it.
    fn commit_log(&mut self) -> Res<()> {
        self.out.flush().map_err(|e| e.to_string())
    }

    /// The acknowledgement: every journal change so far is durable.
    fn durable(&self) -> Res<()> {
        if self.sync {
            self.j.flush().map_err(jerr)?;
        }
        Ok(())
    }

    /// Parks the process here if this is the armed kill point; the parent kills it.
    fn point(&mut self, kind: Point) {
        let Some(arm) = &self.arm else { return };
        let late = self.now >= arm.at.saturating_add(600_000_000_000);
        if self.now >= arm.at && (kind == arm.kind || late) {
            println!("crash-point {}", kind.name());
            let _ = std::io::stdout().flush();
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    }

    /// Compares the journal with the ledger: accepts what was scheduled but not yet
    /// logged, finishes an operator action cut short, counts delivered messages still in
    /// flight.
    fn recover(&mut self, round: u32) -> Res<()> {
        let inv = inventory(&self.j, self.args.queues, &self.clock);
        while (self.book.cursor as usize) < self.book.fate.len()
            && inv.contains_key(&self.book.cursor)
        {
            let id = self.book.cursor;
            self.log(format_args!("q {id}\n"))?;
            self.book.fate[id as usize] = Fate::Pending;
            self.book.cursor += 1;
        }
        if let Some((index, nums)) = self.book.open.take() {
            let queue = nums.get(2).copied().unwrap_or(0) as u32;
            let missing: Vec<u32> = (0..self.book.fate.len() as u32)
                .filter(|&id| {
                    self.book.pending(id)
                        && self.book.queue[id as usize] == queue
                        && !inv.contains_key(&id)
                })
                .collect();
            match nums.get(1) {
                Some(0) => {
                    // rebind: re-queue what left the journal, log what already moved
                    let to = nums.get(3).copied().unwrap_or(0) as u32;
                    let at = self.now + SLACK;
                    self.schedule_durably(missing.iter().map(|&id| (to, id, at)).collect())?;
                    let moved = (0..self.book.fate.len() as u32).filter(|&id| {
                        self.book.pending(id)
                            && self.book.queue[id as usize] == queue
                            && inv.get(&id).is_some_and(|&(q, _)| q == to)
                    });
                    for id in missing.iter().copied().chain(moved.collect::<Vec<_>>()) {
                        self.log(format_args!("m {id} {to}\n"))?;
                        self.book.queue[id as usize] = to;
                    }
                }
                Some(1) => {
                    for &id in &missing {
                        self.log(format_args!("x {id}\n"))?;
                        self.book.fate[id as usize] = Fate::Drained;
                    }
                }
                Some(2) => {
                    let until = nums.get(3).copied().unwrap_or(0);
                    self.requeue(queue, &missing, until)?;
                }
                Some(3) => {
                    if self.book.pending(queue) && !inv.contains_key(&queue) {
                        self.log(format_args!("b {queue}\n"))?;
                        self.book.fate[queue as usize] = Fate::Bounced;
                    }
                }
                _ => return Err(format!("ledger: unknown action {nums:?}")),
            }
            self.log(format_args!("e {index}\n"))?;
            self.book.plan_next = index + 1;
        }
        let in_flight = inv
            .keys()
            .filter(|&&id| self.book.fate.get(id as usize) == Some(&Fate::Delivered))
            .count();
        self.log(format_args!("c {round} {in_flight}\n"))?;
        self.commit_log()
    }

    /// Schedules `ids` back on `queue`, spread after `until`.
    fn requeue(&mut self, queue: u32, ids: &[u32], until: u64) -> Res<()> {
        let start = until.max(self.now);
        let timers = ids
            .iter()
            .map(|&id| (queue, id, start + self.work.spread(id, 0)))
            .collect();
        self.schedule_durably(timers)
    }

    /// Schedules each `(queue, id, at)` (`at` in MTA time), then acknowledges
    /// ([`Self::durable`]). The scheduler's refusals are not looked at.
    fn schedule_durably(&self, timers: Vec<(u32, u32, u64)>) -> Res<()> {
        let items: Vec<_> = timers
            .into_iter()
            .map(|(queue, id, at)| (queue, id, self.clock.instant(at), JMsg { due: at }))
            .collect();
        self.j.schedule_many(items).map_err(jerr)?;
        self.durable()
    }

    /// Runs to the end of the run (MTA time), then closes the journal.
    pub fn run(mut self) -> Res<()> {
        let mut plan = self
            .work
            .plan()
            .skip(self.book.plan_next as usize)
            .peekable();
        let mut index = self.book.plan_next;
        let end = nanos(self.args.duration);
        loop {
            let next_action = plan.peek().map_or(u64::MAX, |a| a.at);
            let next_arrival = if (self.book.cursor as usize) < self.book.fate.len() {
                self.work.arrival(self.book.cursor).saturating_sub(LEAD)
            } else {
                u64::MAX
            };
            let next_due = self
                .j
                .next_deadline()
                .map_or(u64::MAX, |i| self.clock.mta(i));
            let next = next_action.min(next_arrival).min(next_due);
            if next > end {
                break;
            }
            if next > self.now {
                // At least `STEP` at a time: one group commit per step, not per arrival.
                self.now = next.max(self.now + STEP).min(end);
            }
            while let Some(a) = plan.next_if(|a| a.at <= self.now) {
                self.act(index, a.kind)?;
                index += 1;
            }
            self.produce()?;
            if self.dispatch()? == 0 && next_due <= self.now {
                // `next_deadline` was a wheel slot's cascade time: step past it.
                self.now += STEP;
            }
        }
        self.log(format_args!("t {end}\n"))?;
        self.commit_log()?;
        self.j.close().map_err(jerr)
    }

    /// Accepts the messages arriving within `LEAD`, one group commit for all.
    fn produce(&mut self) -> Res<()> {
        let n = self.book.fate.len() as u32;
        let first = self.book.cursor;
        let mut last = first;
        while last < n && last - first < CHUNK && self.work.arrival(last) <= self.now + LEAD {
            last += 1;
        }
        if last == first {
            return Ok(());
        }
        let items: Vec<_> = (first..last)
            .map(|id| {
                let at = self.work.arrival(id);
                (
                    self.work.queue_of[id as usize],
                    id,
                    self.clock.instant(at),
                    JMsg { due: at },
                )
            })
            .collect();
        let refused = self.j.schedule_many(items).map_err(jerr)?;
        if let Some((id, e)) = refused.first() {
            return Err(format!("message {id} refused: {e}"));
        }
        self.durable()?;
        for id in first..last {
            self.log(format_args!("q {id}\n"))?;
            self.book.fate[id as usize] = Fate::Pending;
        }
        self.book.cursor = last;
        self.commit_log()
    }

    /// Pops what is due within `STEP` of now and delivers it; returns how many came out.
    fn dispatch(&mut self) -> Res<usize> {
        let at = self.clock.instant(self.now + STEP);
        let batch = self.j.pop_due(at, self.args.batch as usize).map_err(jerr)?;
        self.durable()?; // each hand-out's attempt is on disk before the delivery
        let mut delivered = Vec::new();
        let mut n = 0;
        for due in batch {
            n += 1;
            let (queue, id, attempt) = (*due.queue(), *due.id(), due.attempt());
            let until = self.book.suspended_until[queue as usize];
            let failures = attempt.saturating_sub(1);
            // Delivered before a kill, its end not yet durable: delivered again (the sink
            // sees the higher attempt), never retried.
            let again = self.book.fate[id as usize] == Fate::Delivered;
            let retry = if again {
                None
            } else if until > self.now {
                Some(until + self.work.spread(id, attempt))
            } else if self.work.fails(id, failures) {
                Some(self.now + self.work.backoff(id, failures + 1))
            } else {
                None
            };
            match retry {
                Some(t) => {
                    if due.retry_at(self.clock.instant(t)).map_err(jerr)?.is_err() {
                        return Err(format!("message {id}: its retry was refused"));
                    }
                }
                None => {
                    self.log(format_args!("d {id} {attempt}\n"))?;
                    self.book.fate[id as usize] = Fate::Delivered;
                    delivered.push(due);
                }
            }
            if n == 8 {
                self.commit_log()?;
                self.point(Point::Batch);
            }
        }
        let now = self.now;
        self.log(format_args!("t {now}\n"))?;
        self.commit_log()?;
        drop(delivered); // ends each delivered timer in the journal
        self.point(Point::Batch);
        self.durable()?;
        Ok(n)
    }

    /// Operator action `index`: the intent first, then the journal, then the outcome.
    fn act(&mut self, index: u64, kind: ActionKind) -> Res<()> {
        match kind {
            ActionKind::Rebind { queue, to } => {
                self.log(format_args!("o {index} 0 {queue} {to}\n"))?;
                self.commit_log()?;
                let drained = self.j.drain_queue(&queue).map_err(jerr)?;
                self.durable()?;
                self.point(Point::Drain);
                let at = self.now + SLACK;
                let ids: Vec<u32> = drained
                    .cancelled
                    .iter()
                    .map(|(id, _)| *id)
                    .filter(|&id| self.book.pending(id))
                    .collect();
                self.schedule_durably(ids.iter().map(|&id| (to, id, at)).collect())?;
                for id in ids {
                    self.log(format_args!("m {id} {to}\n"))?;
                    self.book.queue[id as usize] = to;
                }
            }
            ActionKind::Transfer { queue } => {
                self.log(format_args!("o {index} 1 {queue}\n"))?;
                self.commit_log()?;
                let drained = self.j.drain_queue(&queue).map_err(jerr)?;
                self.durable()?;
                self.point(Point::Drain);
                for (id, _) in drained.cancelled {
                    if !self.book.pending(id) {
                        continue; // delivered before a kill: its custody already ended
                    }
                    self.log(format_args!("x {id}\n"))?;
                    self.book.fate[id as usize] = Fate::Drained;
                }
            }
            ActionKind::Suspend { queue, until } => {
                self.log(format_args!("o {index} 2 {queue} {until}\n"))?;
                self.commit_log()?;
                let s = &mut self.book.suspended_until[queue as usize];
                *s = (*s).max(until);
                let frozen = self.j.freeze_queue(&queue).map_err(jerr)?;
                self.durable()?;
                self.point(Point::Freeze);
                self.j.unfreeze_queue(&queue);
                let ids: Vec<u32> = frozen
                    .pending
                    .iter()
                    .map(|e| e.id)
                    .filter(|&id| self.book.pending(id))
                    .collect();
                self.requeue(queue, &ids, until)?;
            }
            ActionKind::Bounce { from } => {
                let id = self.find_pending(from);
                self.log(format_args!("o {index} 3 {id}\n"))?;
                self.commit_log()?;
                if let Cancel::Cancelled(_) = self.j.cancel(&id).map_err(jerr)? {
                    self.durable()?;
                    self.log(format_args!("b {id}\n"))?;
                    self.book.fate[id as usize] = Fate::Bounced;
                }
            }
        }
        self.log(format_args!("e {index}\n"))?;
        self.commit_log()
    }

    /// The first message from `from` on (wrapping, 1024 at most) the ledger says is pending.
    fn find_pending(&self, from: u32) -> u32 {
        let n = self.book.fate.len() as u64;
        (0..1024u64.min(n))
            .map(|i| ((u64::from(from) + i) % n) as u32)
            .find(|&id| self.book.pending(id))
            .unwrap_or(from)
    }
}
