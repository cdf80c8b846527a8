//! The embedded engines behind a journal: one trait, one small adapter per engine.
//!
//! A journal keeps two tables, each keyed by the postcard encoding of a timer's id:
//! `timers` (queue, deadline, value: written once per timer) and `meta` (attempt count and
//! current deadline: written when a timer is handed out, rescheduled or retried). A timer
//! that ends deletes its keys, so both tables hold live timers only. A third table,
//! `queues`, keeps the flow control of the queues that have any (hold, limits).

use crate::error::Result;

#[cfg(feature = "fjall")]
mod fjall;
pub(crate) mod redb;

/// Which table a record goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Table {
    Timers,
    Meta,
    /// A queue's flow control (hold, limits), keyed by the queue's postcard encoding;
    /// queues without any have no key.
    Queues,
}

/// One change to a table.
#[derive(Debug)]
pub(crate) enum Op {
    Put(Table, Vec<u8>, Vec<u8>),
    /// Deletes a key written once since its last delete (LSM engines may drop the tombstone
    /// early when it meets the put).
    DeleteOnce(Table, Vec<u8>),
    Delete(Table, Vec<u8>),
}

/// A visitor of a table's keys and values.
pub(crate) type Visit<'a> = dyn FnMut(&[u8], &[u8]) -> Result<()> + 'a;

/// The storage engine of a journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Engine {
    /// [redb](https://docs.rs/redb) 5: copy-on-write B-trees, ACID, one file, no
    /// write-ahead log to replay. The default (see the crate docs for the measurements
    /// behind the choice).
    #[default]
    Redb,
    /// [fjall](https://docs.rs/fjall) 3: a log-structured merge tree, pure Rust. Needs the
    /// `fjall` feature.
    #[cfg(feature = "fjall")]
    Fjall,
}

/// An open engine. Written by one thread at a time (the writer); recovery scans it from a
/// helper thread before the writer starts.
pub(crate) trait Store: Send + Sync + 'static {
    /// Applies `ops` in order, as one atomic batch; durable after the next `sync`.
    fn write(&mut self, ops: &mut Vec<Op>) -> Result<()>;
    /// Makes every write so far survive a crash of the machine (fsync).
    fn sync(&mut self) -> Result<()>;
    /// On a clean close: writes in-memory tables out, so the next open reads tables
    /// instead of replaying the write-ahead log. Default: nothing.
    fn checkpoint(&mut self) -> Result<()> {
        Ok(())
    }
    /// Approximate number of keys in `table` (for progress reports).
    fn approximate_len(&self, table: Table) -> usize;
    /// Calls `f` with every key and value of `table`, in key order.
    fn scan(&self, table: Table, f: &mut Visit<'_>) -> Result<()>;
}

/// Opens (or creates) the engine's files in `dir`.
pub(crate) fn open(
    engine: Engine,
    dir: &std::path::Path,
    memtable_bytes: u64,
) -> Result<Box<dyn Store>> {
    let _ = memtable_bytes;
    match engine {
        Engine::Redb => Ok(Box::new(redb::RedbStore::open(dir)?)),
        #[cfg(feature = "fjall")]
        Engine::Fjall => Ok(Box::new(fjall::FjallStore::open(dir, memtable_bytes)?)),
    }
}

/// Bytes of disk allocated to the files under `dir`, recursively (as `du` counts: a
/// preallocated, partly written file counts what it holds), and how many of them are in
/// the engine's write-ahead log files (`*.jnl`, fjall's; capped at 64 MiB by the journal).
/// `(0, 0)` if `dir` cannot be read. O(files).
pub fn disk_usage(dir: &std::path::Path) -> DiskUsage {
    let mut usage = DiskUsage::default();
    add_usage(dir, &mut usage);
    usage
}

/// What [`disk_usage`] found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskUsage {
    /// Bytes allocated to every file.
    pub total: u64,
    /// Of those, bytes of write-ahead log files.
    pub log: u64,
}

fn add_usage(dir: &std::path::Path, usage: &mut DiskUsage) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        match e.metadata() {
            Ok(m) if m.is_dir() => add_usage(&e.path(), usage),
            Ok(m) => {
                let bytes = allocated(&m);
                usage.total += bytes;
                if e.path().extension().is_some_and(|x| x == "jnl") {
                    usage.log += bytes;
                }
            }
            Err(_) => {}
        }
    }
}

#[cfg(unix)]
fn allocated(m: &std::fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt;
    m.blocks() * 512
}

#[cfg(not(unix))]
fn allocated(m: &std::fs::Metadata) -> u64 {
    m.len()
}
