//! fjall: two keyspaces of one database; a batch per write, `persist(SyncData)` per sync.

use std::path::Path;

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};

use super::{Op, Store, Table};
use crate::error::{Error, Result};

pub(crate) struct FjallStore {
    db: Database,
    timers: Keyspace,
    meta: Keyspace,
}

impl FjallStore {
    pub(crate) fn open(dir: &Path) -> Result<Self> {
        // The journal syncs itself (group commit); fjall's own background fsync is not needed.
        let db = Database::builder(dir)
            .manual_journal_persist(true)
            .open()
            .map_err(Error::engine)?;
        let timers = db
            .keyspace("timers", KeyspaceCreateOptions::default)
            .map_err(Error::engine)?;
        let meta = db
            .keyspace("meta", KeyspaceCreateOptions::default)
            .map_err(Error::engine)?;
        Ok(FjallStore {
            db,
            timers,
            meta,
        })
    }

    fn table(&self, table: Table) -> &Keyspace {
        match table {
            Table::Timers => &self.timers,
            Table::Meta => &self.meta,
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
        self.db.persist(PersistMode::SyncData).map_err(Error::engine)
    }

    fn approximate_len(&self, table: Table) -> usize {
        self.table(table).approximate_len()
    }

    fn scan(&self, table: Table, f: &mut dyn FnMut(&[u8], &[u8]) -> Result<()>) -> Result<()> {
        for guard in self.table(table).iter() {
            let (k, v) = guard.into_inner().map_err(Error::engine)?;
            f(&k, &v)?;
        }
        Ok(())
    }
}
