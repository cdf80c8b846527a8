//! Group commit: callers append records to one queue under a mutex and get a commit
//! number; one writer thread owns the engine, writes whatever is queued as one batch, syncs
//! at most once per window, and then publishes the highest commit number now on disk.
//! A caller that must wait sleeps until that number reaches its own.
//!
//! Numbers are taken under the queue's mutex, so they follow the order of the queue: when
//! commit `n` is durable, so is every record queued before it.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::clock::WallClock;
use crate::error::{Error, Result};
use crate::store::{Op, Store};

/// When a journaled call returns, relative to its record reaching the disk, and what a
/// crash loses.
///
/// "Crash" means the process or the machine stopping at any instant; "lost" means the
/// change is not there on recovery (the timer is back as before the call). The engine's
/// fsync decides what survives a power loss: the journal relies on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Each call waits until an fsync covering its record has finished. Concurrent calls
    /// share one fsync (group commit, no added wait). A crash loses no acknowledged
    /// change. Latency: one or two fsyncs per call.
    Sync,
    /// The default, with a 1 ms window: the writer syncs at most once per window, so one
    /// fsync covers every record of every caller queued meanwhile; each call waits for the
    /// sync that covers it (at most about the window plus one fsync). A crash loses no
    /// acknowledged change.
    Batched(Duration),
    /// Calls do not wait; the writer syncs once per window. A crash loses the changes of
    /// at most the last window plus the time of one write and fsync before it (with fjall
    /// a killed process loses only those not yet handed to the engine, a power loss those
    /// not yet synced; redb commits at the sync, so both lose what was not synced).
    /// [`Durable::flush`](crate::Durable::flush) waits for everything so far.
    Async(Duration),
}

impl Default for Durability {
    fn default() -> Self {
        Durability::Batched(Duration::from_millis(1))
    }
}

impl Durability {
    fn window(self) -> Duration {
        match self {
            Durability::Sync => Duration::ZERO,
            Durability::Batched(w) | Durability::Async(w) => w,
        }
    }

    /// Whether a journaled call waits for its record to be durable.
    pub(crate) fn waits(self) -> bool {
        !matches!(self, Durability::Async(_))
    }
}

struct Queue {
    ops: Vec<Op>,
    /// The commit number of the last call queued.
    queued: u64,
    closing: bool,
}

struct Progress {
    /// Every call numbered up to this is on disk.
    durable: u64,
    /// Why the writer stopped, once it has.
    failed: Option<Arc<str>>,
}

/// Writer statistics, for benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Batches handed to the engine.
    pub writes: u64,
    /// fsyncs (durable commits).
    pub syncs: u64,
    /// Records written.
    pub records: u64,
}

pub(crate) struct Shared {
    queue: Mutex<Queue>,
    work: Condvar,
    progress: Mutex<Progress>,
    durable: Condvar,
    stats: Mutex<WriterStats>,
}

impl Shared {
    /// Queues `ops` (in order, after everything queued before) and returns their commit
    /// number. Fails without queuing once the writer has stopped.
    pub(crate) fn push(&self, ops: impl IntoIterator<Item = Op>) -> Result<u64> {
        let mut q = self.queue.lock();
        if q.closing {
            drop(q);
            return Err(self.closed_error());
        }
        let was_empty = q.ops.is_empty();
        let before = q.ops.len();
        q.ops.extend(ops);
        if q.ops.len() == before {
            // Nothing to write: waiting for the calls before it is waiting for this one. A
            // new number here would wait for a commit the idle writer never makes.
            return Ok(q.queued);
        }
        q.queued += 1;
        let n = q.queued;
        drop(q);
        if was_empty {
            self.work.notify_one();
        }
        Ok(n)
    }

    /// Fails, changing nothing, once the writer has stopped (failed or closed): for a call
    /// to check before it changes memory.
    pub(crate) fn check(&self) -> Result<()> {
        let closing = self.queue.lock().closing;
        if closing || self.progress.lock().failed.is_some() {
            return Err(self.closed_error());
        }
        Ok(())
    }

    /// Waits until commit `n` is durable.
    pub(crate) fn wait(&self, n: u64) -> Result<()> {
        let mut p = self.progress.lock();
        loop {
            if p.durable >= n {
                return Ok(());
            }
            if let Some(why) = &p.failed {
                return Err(Error::Closed(why.clone()));
            }
            self.durable.wait(&mut p);
        }
    }

    /// The number of the last call queued.
    pub(crate) fn last_queued(&self) -> u64 {
        self.queue.lock().queued
    }

    pub(crate) fn stats(&self) -> WriterStats {
        *self.stats.lock()
    }

    fn closed_error(&self) -> Error {
        let why = self.progress.lock().failed.clone();
        Error::Closed(why.unwrap_or_else(|| "the journal is closed".into()))
    }
}

/// The writer thread's handle: closing it writes and syncs what is queued, then joins.
pub(crate) struct Writer {
    pub(crate) shared: Arc<Shared>,
    thread: Option<JoinHandle<Box<dyn Store>>>,
}

impl Writer {
    pub(crate) fn start(
        store: Box<dyn Store>,
        mode: Durability,
        clock: Arc<WallClock>,
    ) -> Result<Writer> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                ops: Vec::new(),
                queued: 0,
                closing: false,
            }),
            work: Condvar::new(),
            progress: Mutex::new(Progress {
                durable: 0,
                failed: None,
            }),
            durable: Condvar::new(),
            stats: Mutex::new(WriterStats::default()),
        });
        let for_thread = shared.clone();
        let thread = std::thread::Builder::new()
            .name("tickwheel-journal".into())
            .spawn(move || run(store, &for_thread, mode.window(), &clock))
            .map_err(Error::engine)?;
        Ok(Writer {
            shared,
            thread: Some(thread),
        })
    }

    /// Stops the writer after it has written and synced everything queued; gives the
    /// engine back (dropped by the caller, which closes its files).
    pub(crate) fn close(&mut self) -> Result<()> {
        self.shared.queue.lock().closing = true;
        self.shared.work.notify_one();
        if let Some(thread) = self.thread.take() {
            let store = thread
                .join()
                .map_err(|_| Error::Closed("the journal's writer panicked".into()))?;
            drop(store);
        }
        match self.shared.progress.lock().failed.clone() {
            Some(why) if &*why != CLOSED => Err(Error::Closed(why)),
            _ => Ok(()),
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

const CLOSED: &str = "the journal is closed";

/// The writer loop. Returns the engine when closed (or failed).
fn run(
    mut store: Box<dyn Store>,
    shared: &Shared,
    window: Duration,
    clock: &WallClock,
) -> Box<dyn Store> {
    let mut batch = Vec::new();
    let mut refreshed = Instant::now();
    let mut last_sync = Instant::now()
        .checked_sub(window)
        .unwrap_or_else(Instant::now);
    loop {
        // Take what is queued, waiting for work if there is none.
        let (mut upto, closing) = {
            let mut q = shared.queue.lock();
            while q.ops.is_empty() && !q.closing {
                shared.work.wait(&mut q);
            }
            std::mem::swap(&mut batch, &mut q.ops);
            (q.queued, q.closing)
        };
        let mut result = write(&mut *store, shared, &mut batch);
        // Within the window since the last sync, keep absorbing records until it ends.
        let sync_at = last_sync + window;
        while result.is_ok() && !closing {
            let mut q = shared.queue.lock();
            if q.ops.is_empty()
                && !q.closing
                && shared.work.wait_until(&mut q, sync_at).timed_out()
                && q.ops.is_empty()
            {
                break;
            }
            if Instant::now() >= sync_at && q.ops.is_empty() {
                break;
            }
            std::mem::swap(&mut batch, &mut q.ops);
            upto = q.queued;
            let closing_now = q.closing;
            drop(q);
            result = write(&mut *store, shared, &mut batch);
            if closing_now || Instant::now() >= sync_at {
                break;
            }
        }
        let result = result.and_then(|()| store.sync());
        last_sync = Instant::now();
        if last_sync.duration_since(refreshed) >= Duration::from_secs(1) {
            clock.refresh();
            refreshed = last_sync;
        }
        let drained = {
            let q = shared.queue.lock();
            q.closing && q.ops.is_empty() && q.queued == upto
        };
        let mut p = shared.progress.lock();
        match result {
            Ok(()) => {
                p.durable = upto;
                shared.stats.lock().syncs += 1;
            }
            Err(e) => p.failed = Some(e.to_string().into()),
        }
        let stop = p.failed.is_some() || drained;
        if stop && p.failed.is_none() {
            p.failed = Some(CLOSED.into());
        }
        drop(p);
        shared.durable.notify_all();
        if stop {
            // Refuse further records: nothing would write them.
            shared.queue.lock().closing = true;
            if drained {
                // Everything is durable already; a failed checkpoint only costs the next
                // open a longer replay.
                let _ = store.checkpoint();
            }
            return store;
        }
    }
}

fn write(store: &mut dyn Store, shared: &Shared, batch: &mut Vec<Op>) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let n = batch.len() as u64;
    store.write(batch)?;
    batch.clear();
    let mut s = shared.stats.lock();
    s.writes += 1;
    s.records += n;
    Ok(())
}
