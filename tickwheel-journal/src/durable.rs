//! [`Durable`]: a `sync::Scheduler` whose every change of custody is recorded.
//!
//! **Record order.** Records of one id must reach the engine in the order of the changes
//! they describe, or a put could land after the delete that ended it (a cancelled timer
//! back from the dead). Each call queues its record while nothing else can change that id:
//! single-id calls hold the id's stripe lock across the scheduler call and the queuing;
//! calls over many ids (drain, freeze, take_forwarded, import) hold every stripe; and a
//! `Due` queues its records while its timer is still in flight, which no other call can
//! change.

use std::hash::Hash;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tickwheel::sync::{Cancel, RescheduleError, ScheduleError, Scheduler};

use crate::clock::WallClock;
use crate::codec;
use crate::dispatcher::Wake;
use crate::due::DueBatch;
use crate::error::{Error, Result};
use crate::recover;
use crate::store::{Engine, Op, Table};
use crate::writer::{Durability, Shared, Writer, WriterStats};

mod flow;
mod queues;

pub(crate) use flow::Policy;

/// The stripes of id locks: enough that two producers rarely meet on one.
const STRIPES: usize = 256;

/// What the scheduler holds for each timer: the value, and how often it was handed out.
#[derive(Debug)]
pub struct Slot<T> {
    pub(crate) value: T,
    pub(crate) attempt: u32,
    /// Whether the timer may have a `meta` record (to be deleted with it).
    pub(crate) meta: AtomicBool,
}

impl<T> Slot<T> {
    pub(crate) fn new(value: T, attempt: u32, meta: bool) -> Self {
        Slot {
            value,
            attempt,
            meta: AtomicBool::new(meta),
        }
    }

    /// The timer's value.
    pub fn value(&self) -> &T {
        &self.value
    }

    /// How often the timer was handed out by `pop_due` (0: never).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    pub(crate) fn has_meta(&self) -> bool {
        self.meta.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// How to open a journal: durability, engine, and the scheduler's settings.
#[derive(Debug, Clone)]
pub struct Options {
    pub(crate) durability: Durability,
    pub(crate) engine: Engine,
    pub(crate) shards: Option<usize>,
    pub(crate) resolution: Option<Duration>,
    pub(crate) memtable_bytes: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            durability: Durability::default(),
            engine: Engine::default(),
            shards: None,
            resolution: None,
            memtable_bytes: 16 << 20,
        }
    }
}

impl Options {
    /// The defaults: [`Durability::Batched`] with a 1 ms window, [`Engine::Redb`], the
    /// scheduler's own shard count and resolution (1 ms).
    pub fn new() -> Self {
        Self::default()
    }

    /// When calls return relative to their records reaching the disk.
    pub fn durability(mut self, d: Durability) -> Self {
        self.durability = d;
        self
    }

    /// The storage engine.
    pub fn engine(mut self, e: Engine) -> Self {
        self.engine = e;
        self
    }

    /// The scheduler's shard count (see `SchedulerBuilder::shards`; out-of-range counts are
    /// clamped there).
    pub fn shards(mut self, n: usize) -> Self {
        self.shards = Some(n);
        self
    }

    /// fjall only: the size (bytes of memory) at which a table's in-memory part is written
    /// out, dropping every timer that ended within it. Default 16 MiB. Smaller bounds the
    /// disk and memory taken by churn more tightly, at more frequent (smaller) flushes.
    /// Taken when a journal is created; an existing journal keeps its own.
    pub fn memtable_bytes(mut self, bytes: u64) -> Self {
        self.memtable_bytes = bytes.max(1 << 20);
        self
    }

    /// The scheduler's tick length (see `SchedulerBuilder::resolution`).
    pub fn resolution(mut self, d: Duration) -> Self {
        self.resolution = Some(d);
        self
    }
}

/// What a journal's calls and its `Due`s share.
pub(crate) struct Core {
    pub(crate) shared: Arc<Shared>,
    pub(crate) clock: Arc<WallClock>,
    pub(crate) durability: Durability,
    pub(crate) wake: Arc<Wake>,
}

impl Core {
    /// Queues `ops` and, if the durability mode says so, waits until they are on disk.
    pub(crate) fn commit(&self, ops: impl IntoIterator<Item = Op>) -> Result<()> {
        let n = self.shared.push(ops)?;
        if self.durability.waits() {
            self.shared.wait(n)?;
        }
        Ok(())
    }

    /// Queues `ops` and returns their commit number, without waiting.
    pub(crate) fn queue(&self, ops: impl IntoIterator<Item = Op>) -> Result<u64> {
        self.shared.push(ops)
    }

    /// Waits for commit `n` if the durability mode says so.
    pub(crate) fn settle(&self, n: u64) -> Result<()> {
        if self.durability.waits() {
            self.shared.wait(n)?;
        }
        Ok(())
    }
}

/// The records that end a timer: its `timers` key, and its `meta` key if it may have one.
pub(crate) fn end_ops(key: Vec<u8>, meta: bool) -> impl Iterator<Item = Op> {
    let meta = meta.then(|| Op::Delete(Table::Meta, key.clone()));
    std::iter::once(Op::DeleteOnce(Table::Timers, key)).chain(meta)
}

/// A [`Scheduler`] whose every change of custody is recorded in a journal on disk, and which
/// recovery rebuilds. See the [crate docs](crate) for the model, the durability modes and
/// the recovery bound.
///
/// `Q`, `K` and `T` are stored with serde (postcard); ids are looked up by their encoding,
/// so two ids that are equal must encode equally (true of every derived `Serialize`).
/// Every changing call returns `Err` when the journal failed or is closed: the change is
/// then not acknowledged, and after such an error the journal refuses every later change
/// (re-open it; recovery brings back what is on disk). A call that finds the journal
/// failed or closed when it starts returns [`Error::Closed`] and changes nothing in memory
/// (so does [`pop_due`](Self::pop_due)); only a call racing the failure itself (its record
/// queued before the writer stopped, or not yet written) may have changed memory without
/// being acknowledged.
pub struct Durable<Q, K, T> {
    sched: Scheduler<Q, K, Slot<T>>,
    stripes: Box<[Mutex<()>]>,
    /// Serializes changes of flow control (their records, per queue, in order).
    policy: Mutex<()>,
    core: Arc<Core>,
    writer: Writer,
}

impl<Q, K, T> Durable<Q, K, T>
where
    Q: Hash + Eq + Clone + Serialize + DeserializeOwned + Send + 'static,
    K: Hash + Eq + Clone + Serialize + DeserializeOwned + Send + 'static,
    T: Serialize + DeserializeOwned + Send + 'static,
{
    /// Opens the journal in `dir` (created if missing) and recovers every timer in it; see
    /// [`open_with_progress`](Self::open_with_progress).
    ///
    /// # Errors
    ///
    /// [`Error::Engine`] if the engine cannot open or read its files (another process holds
    /// them, a corrupt file), [`Error::Decode`] if a stored record does not decode as
    /// `(Q, K, T)`.
    pub fn open(dir: impl AsRef<Path>, options: Options) -> Result<Self> {
        Self::open_with_progress(dir, options, |_, _| {})
    }

    /// Opens the journal in `dir` and recovers every timer in it, calling `progress(done,
    /// total)` about every 65 536 timers and once at the end (`total` is the engine's
    /// estimate of the live timers, so `done` may pass it).
    ///
    /// Recovered timers are pending with their queue, id, deadline (mapped from the wall
    /// clock: a deadline that passed while the process was down is due at once) and
    /// value; timers that were in flight come back pending, and the next hand-out gives
    /// them their attempt count plus one. Frozen queues come back unfrozen, their
    /// forwarded timers pending. Work: the engine's own replay of its write-ahead log, then
    /// one pass over the live timers (and the tombstones not yet compacted away):
    /// O(live timers), never the history.
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open).
    pub fn open_with_progress(
        dir: impl AsRef<Path>,
        options: Options,
        progress: impl FnMut(u64, u64),
    ) -> Result<Self> {
        let store = crate::store::open(options.engine, dir.as_ref(), options.memtable_bytes)?;
        Self::open_store(store, options, progress)
    }

    /// Recovers from an open engine and starts the writer: [`open_with_progress`]'s work
    /// after the engine's files are open (tests open an engine over a simulated disk).
    ///
    /// [`open_with_progress`]: Self::open_with_progress
    pub(crate) fn open_store(
        store: Box<dyn crate::store::Store>,
        options: Options,
        progress: impl FnMut(u64, u64),
    ) -> Result<Self> {
        let clock = Arc::new(WallClock::new());
        let mut builder = Scheduler::builder();
        if let Some(n) = options.shards {
            builder = builder.shards(n);
        }
        if let Some(r) = options.resolution {
            builder = builder.resolution(r);
        }
        let sched = builder.try_build().map_err(Error::engine)?;
        recover::replay(&*store, &sched, &clock, progress)?;
        let writer = Writer::start(store, options.durability, clock.clone())?;
        let core = Arc::new(Core {
            shared: writer.shared.clone(),
            clock,
            durability: options.durability,
            wake: Arc::new(Wake::new()),
        });
        Ok(Durable {
            sched,
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            policy: Mutex::new(()),
            core,
            writer,
        })
    }

    fn stripe(&self, key: &[u8]) -> MutexGuard<'_, ()> {
        self.stripes[codec::stripe(key, STRIPES)].lock()
    }

    fn all_stripes(&self) -> Vec<MutexGuard<'_, ()>> {
        self.stripes.iter().map(|m| m.lock()).collect()
    }

    /// Runs `change` holding every id lock (once the journal is found open), queues the
    /// records it returns, releases the locks and returns once the records are durable (per
    /// the mode). A queue-wide change: nothing else changes the journal meanwhile.
    fn with_all_stripes<R>(&self, change: impl FnOnce() -> Result<(Vec<Op>, R)>) -> Result<R> {
        let guards = self.all_stripes();
        self.core.shared.check()?;
        let (ops, out) = change()?;
        let n = self.core.queue(ops)?;
        drop(guards);
        self.core.settle(n)?;
        Ok(out)
    }

    /// Adds a timer, as [`Scheduler::schedule`], and records it. Returns once the record
    /// is durable (per the [`Durability`] mode). O(1) plus the encoding of the record.
    ///
    /// # Errors
    ///
    /// The outer `Err` is the journal's (see the type's docs): [`Error::Closed`], adding
    /// nothing, if the journal had failed or was closed when the call started; otherwise
    /// the timer may be pending in memory but is not acknowledged. `Ok(Err(..))` is the scheduler's refusal, with
    /// the value back; nothing is recorded then.
    pub fn schedule(
        &self,
        queue: Q,
        id: K,
        at: Instant,
        value: T,
    ) -> Result<Result<(), ScheduleError<T>>> {
        match self.schedule_queued(queue, id, at, value)? {
            Ok(n) => self.core.settle(n).map(Ok),
            Err(e) => Ok(Err(e)),
        }
    }

    fn schedule_queued(
        &self,
        queue: Q,
        id: K,
        at: Instant,
        value: T,
    ) -> Result<Result<u64, ScheduleError<T>>> {
        let key = codec::key(&id)?;
        let record = codec::timer(&id, &queue, self.core.clock.to_wall(at), &value)?;
        let _guard = self.stripe(&key);
        self.core.shared.check()?;
        if let Err(e) = self
            .sched
            .schedule(queue, id, at, Slot::new(value, 0, false))
        {
            return Ok(Err(map_schedule_error(e)));
        }
        let n = self.core.queue([Op::Put(Table::Timers, key, record)])?;
        self.core.wake.deadline_added(at);
        Ok(Ok(n))
    }

    /// Schedules every `(queue, id, at, value)` of `items` and waits once for all their
    /// records (group commit from one caller). Returns the refused ones with their ids.
    ///
    /// # Errors
    ///
    /// The journal's (see the type's docs): none of the items is then acknowledged.
    pub fn schedule_many(
        &self,
        items: impl IntoIterator<Item = (Q, K, Instant, T)>,
    ) -> Result<Vec<(K, ScheduleError<T>)>> {
        let mut refused = Vec::new();
        let mut last = None;
        for (queue, id, at, value) in items {
            match self.schedule_queued(queue, id.clone(), at, value)? {
                Ok(n) => last = Some(n),
                Err(e) => refused.push((id, e)),
            }
        }
        if let Some(n) = last {
            self.core.settle(n)?;
        }
        Ok(refused)
    }

    /// Moves a pending timer, as [`Scheduler::reschedule`], and records its new deadline.
    ///
    /// # Errors
    ///
    /// The outer `Err` is the journal's; `Ok(Err(..))` the scheduler's refusal (nothing
    /// recorded).
    pub fn reschedule(&self, id: &K, at: Instant) -> Result<Result<(), RescheduleError>> {
        let key = codec::key(id)?;
        let _guard = self.stripe(&key);
        self.core.shared.check()?;
        let attempt = self.sched.with_value(id, |slot| {
            slot.meta.store(true, std::sync::atomic::Ordering::Relaxed);
            slot.attempt
        });
        let Some(attempt) = attempt else {
            return Ok(Err(RescheduleError::NotFound));
        };
        if let Err(e) = self.sched.reschedule(id, at) {
            return Ok(Err(e));
        }
        self.core.wake.deadline_added(at);
        let op = Op::Put(
            Table::Meta,
            key,
            codec::meta(attempt, self.core.clock.to_wall(at)),
        );
        let n = self.core.queue([op])?;
        drop(_guard);
        self.core.settle(n).map(Ok)
    }

    /// Cancels a pending timer, as [`Scheduler::cancel`], and records its end.
    ///
    /// # Errors
    ///
    /// The journal's (see the type's docs).
    pub fn cancel(&self, id: &K) -> Result<Cancel<T>> {
        let key = codec::key(id)?;
        let guard = self.stripe(&key);
        self.core.shared.check()?;
        let slot = match self.sched.cancel(id) {
            Cancel::Cancelled(slot) => slot,
            Cancel::InFlight => return Ok(Cancel::InFlight),
            Cancel::NotFound => return Ok(Cancel::NotFound),
        };
        let n = self.core.queue(end_ops(key, slot.has_meta()))?;
        drop(guard);
        self.core.settle(n)?;
        Ok(Cancel::Cancelled(slot.value))
    }

    /// Takes up to `limit` due timers, as [`Scheduler::pop_due`], records each hand-out
    /// (its attempt count, now one higher) and returns once those records are durable (per
    /// the mode), so a sink never sees one attempt number twice for a timer. O(returned)
    /// plus one commit.
    ///
    /// Each [`Due`](crate::Due) is done when [`done`](crate::Due::done) or dropped, or goes
    /// back with [`retry_at`](crate::Due::retry_at). Items of the batch left untaken when it
    /// is dropped go back pending at their deadline, their attempt counted.
    ///
    /// # Errors
    ///
    /// [`Error::Closed`], taking nothing, if the journal had failed or was closed when the
    /// call started. Otherwise the journal's (see the type's docs): the timers taken stay
    /// in flight in memory then (the journal is dead; re-open it).
    pub fn pop_due(&self, now: Instant, limit: usize) -> Result<DueBatch<Q, K, T>> {
        self.core.shared.check()?;
        let mut taken = Vec::new();
        let mut ops = Vec::new();
        for mut due in self.sched.pop_due(now, limit) {
            let slot = due.value_mut();
            slot.attempt = slot.attempt.saturating_add(1);
            slot.meta.store(true, std::sync::atomic::Ordering::Relaxed);
            let attempt = slot.attempt;
            let key = codec::key(due.id())?;
            let wall = self.core.clock.to_wall(due.deadline());
            ops.push(Op::Put(
                Table::Meta,
                key.clone(),
                codec::meta(attempt, wall),
            ));
            taken.push((due, key));
        }
        if !ops.is_empty() {
            self.core.commit(ops)?;
        }
        Ok(DueBatch::new(taken, self.core.clone()))
    }

    /// Waits until every record queued so far (by any caller) is durable. With
    /// [`Durability::Async`] this is how a caller gets an acknowledgement.
    ///
    /// # Errors
    ///
    /// [`Error::Closed`] if the writer failed or the journal is closed.
    pub fn flush(&self) -> Result<()> {
        let n = self.core.shared.last_queued();
        self.core.shared.wait(n)
    }

    /// Writes and syncs what is queued, stops the writer and closes the engine's files.
    /// Dropping the journal does the same and ignores the error.
    ///
    /// # Errors
    ///
    /// [`Error::Closed`] with the reason if the last write or sync failed.
    pub fn close(mut self) -> Result<()> {
        self.writer.close()
    }

    /// The scheduler inside, for what does not change custody: `len`, `in_flight_len`,
    /// `queue_len`, `lookup`, `queue_members`, `next_deadline`, `stats` and the like.
    /// Changing it through this reference bypasses the journal; only read.
    pub fn scheduler(&self) -> &Scheduler<Q, K, Slot<T>> {
        &self.sched
    }

    /// Pending and forwarded timers (as [`Scheduler::len`]).
    pub fn len(&self) -> usize {
        self.sched.len()
    }

    /// Whether no timer is pending or forwarded.
    pub fn is_empty(&self) -> bool {
        self.sched.is_empty()
    }

    /// The earliest pending deadline (as [`Scheduler::next_deadline`]).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.sched.next_deadline()
    }

    /// Batches written, fsyncs and records so far (for benchmarks and monitoring).
    pub fn writer_stats(&self) -> WriterStats {
        self.core.shared.stats()
    }

    pub(crate) fn wake(&self) -> &Arc<Wake> {
        &self.core.wake
    }
}

fn map_schedule_error<T>(e: ScheduleError<Slot<T>>) -> ScheduleError<T> {
    match e {
        ScheduleError::Pending(s) => ScheduleError::Pending(s.value),
        ScheduleError::InFlight(s) => ScheduleError::InFlight(s.value),
        ScheduleError::Full(s) => ScheduleError::Full(s.value),
        ScheduleError::Frozen(s) => ScheduleError::Frozen(s.value),
        // A variant added later: the value is in it, the reason is not known here.
        other => ScheduleError::Pending(other.into_value().value),
    }
}

impl<Q, K, T> std::fmt::Debug for Durable<Q, K, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Durable")
            .field("durability", &self.core.durability)
            .finish_non_exhaustive()
    }
}
