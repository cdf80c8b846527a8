//! redb: three tables of one file; one `Durability::Immediate` transaction per sync, holding
//! every write since the last.

use std::path::Path;

use redb::{Database, Durability, ReadableDatabase, TableDefinition};

use super::{Op, Store, Table, Visit};
use crate::error::{Error, Result};

const TIMERS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("timers");
const META: TableDefinition<&[u8], &[u8]> = TableDefinition::new("meta");
const QUEUES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("queues");

pub(crate) struct RedbStore {
    db: Database,
    /// Writes since the last sync: one transaction per sync (a redb commit is its unit of
    /// durability; a non-durable commit would not survive a killed process either).
    pending: Vec<Op>,
}

fn def(table: Table) -> TableDefinition<'static, &'static [u8], &'static [u8]> {
    match table {
        Table::Timers => TIMERS,
        Table::Meta => META,
        Table::Queues => QUEUES,
    }
}

impl RedbStore {
    pub(crate) fn open(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(Error::engine)?;
        let db = Database::create(dir.join("journal.redb")).map_err(Error::engine)?;
        Self::with_database(db)
    }

    /// An engine over a storage backend of the caller's (tests: a simulated disk).
    #[cfg(test)]
    pub(crate) fn open_backend(backend: impl redb::StorageBackend) -> Result<Self> {
        let db = Database::builder()
            .create_with_backend(backend)
            .map_err(Error::engine)?;
        Self::with_database(db)
    }

    fn with_database(db: Database) -> Result<Self> {
        let txn = db.begin_write().map_err(Error::engine)?;
        for t in [TIMERS, META, QUEUES] {
            txn.open_table(t).map_err(Error::engine)?;
        }
        txn.commit().map_err(Error::engine)?;
        Ok(RedbStore {
            db,
            pending: Vec::new(),
        })
    }

    fn commit(&self, ops: &mut Vec<Op>, durability: Durability) -> Result<()> {
        let mut txn = self.db.begin_write().map_err(Error::engine)?;
        txn.set_durability(durability).map_err(Error::engine)?;
        {
            let mut timers = txn.open_table(TIMERS).map_err(Error::engine)?;
            let mut meta = txn.open_table(META).map_err(Error::engine)?;
            let mut queues = txn.open_table(QUEUES).map_err(Error::engine)?;
            for op in ops.drain(..) {
                let (t, k, v) = match op {
                    Op::Put(t, k, v) => (t, k, Some(v)),
                    Op::DeleteOnce(t, k) | Op::Delete(t, k) => (t, k, None),
                };
                let table = match t {
                    Table::Timers => &mut timers,
                    Table::Meta => &mut meta,
                    Table::Queues => &mut queues,
                };
                match v {
                    Some(v) => drop(
                        table
                            .insert(k.as_slice(), v.as_slice())
                            .map_err(Error::engine)?,
                    ),
                    None => drop(table.remove(k.as_slice()).map_err(Error::engine)?),
                }
            }
        }
        txn.commit().map_err(Error::engine)
    }
}

impl Store for RedbStore {
    fn write(&mut self, ops: &mut Vec<Op>) -> Result<()> {
        self.pending.append(ops);
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        let mut ops = std::mem::take(&mut self.pending);
        self.commit(&mut ops, Durability::Immediate)
    }

    fn approximate_len(&self, table: Table) -> usize {
        let Ok(txn) = self.db.begin_read() else {
            return 0;
        };
        let Ok(t) = txn.open_table(def(table)) else {
            return 0;
        };
        redb::ReadableTableMetadata::len(&t).map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX))
    }

    fn scan(&self, table: Table, f: &mut Visit<'_>) -> Result<()> {
        let txn = self.db.begin_read().map_err(Error::engine)?;
        let t = txn.open_table(def(table)).map_err(Error::engine)?;
        for entry in redb::ReadableTable::iter(&t).map_err(Error::engine)? {
            let (k, v) = entry.map_err(Error::engine)?;
            f(k.value(), v.value())?;
        }
        Ok(())
    }
}
