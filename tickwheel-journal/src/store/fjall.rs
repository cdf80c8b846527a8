//! fjall: three keyspaces of one database; a batch per write, `persist(SyncData)` per sync.

use std::path::Path;

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};

use super::{Op, Store, Table, Visit};
use crate::error::{Error, Result};

pub(crate) struct FjallStore {
    db: Database,
    timers: Keyspace,
    meta: Keyspace,
    queues: Keyspace,
}

impl FjallStore {
    pub(crate) fn open(dir: &Path, memtable_bytes: u64) -> Result<Self> {
        // The journal syncs itself (group commit): no background fsync. The write-ahead log
        // is capped at fjall's minimum (64 MiB), which bounds both the disk it takes and
        // what recovery replays; a memtable flushes at `memtable_bytes`, and the flush drops
        // every timer that ended within it.
        let db = Database::builder(dir)
            .manual_journal_persist(true)
            .max_journaling_size(64 << 20)
            .open()
            .map_err(Error::engine)?;
        let options = || KeyspaceCreateOptions::default().max_memtable_size(memtable_bytes);
        let timers = db.keyspace("timers", options).map_err(Error::engine)?;
        let meta = db.keyspace("meta", options).map_err(Error::engine)?;
        let queues = db.keyspace("queues", options).map_err(Error::engine)?;
        Ok(FjallStore {
            db,
            timers,
            meta,
            queues,
        })
    }

    fn table(&self, table: Table) -> &Keyspace {
        match table {
            Table::Timers => &self.timers,
            Table::Meta => &self.meta,
            Table::Queues => &self.queues,
        }
    }
}

impl Store for FjallStore {
    fn write(&mut self, ops: &mut Vec<Op>) -> Result<()> {
        let mut batch = self.db.batch();
        for op in ops.drain(..) {
            match op {
                Op::Put(t, k, v) => batch.insert(self.table(t), k, v),
                Op::DeleteOnce(t, k) => batch.remove_weak(self.table(t), k),
                Op::Delete(t, k) => batch.remove(self.table(t), k),
            }
        }
        batch.commit().map_err(Error::engine)?;
        // Into the OS's page cache: a killed process then loses nothing written.
        self.db.persist(PersistMode::Buffer).map_err(Error::engine)
    }

    fn sync(&mut self) -> Result<()> {
        self.db
            .persist(PersistMode::SyncData)
            .map_err(Error::engine)
    }

    fn checkpoint(&mut self) -> Result<()> {
        for ks in [&self.timers, &self.meta, &self.queues] {
            ks.rotate_memtable_and_wait().map_err(Error::engine)?;
        }
        Ok(())
    }

    fn approximate_len(&self, table: Table) -> usize {
        self.table(table).approximate_len()
    }

    fn scan(&self, table: Table, f: &mut Visit<'_>) -> Result<()> {
        for guard in self.table(table).iter() {
            let (k, v) = guard.into_inner().map_err(Error::engine)?;
            f(&k, &v)?;
        }
        Ok(())
    }
}
