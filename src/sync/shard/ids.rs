//! The shard's id map: id → entry index. A `HashTable` rather than a `HashMap`, so that
//! looking an id up never takes it by value: `schedule` keeps its id until it knows
//! whether the id is taken, and a refused id goes to the caller's `Trash`, to be dropped
//! after the lock (see `trash.rs`). One hash per lookup, as with `HashMap::entry`.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

use hashbrown::hash_table::{Entry, VacantEntry};
use hashbrown::{DefaultHashBuilder, HashTable};

#[derive(Debug)]
pub(super) struct IdMap<K> {
    table: HashTable<(K, u32)>,
    hasher: DefaultHashBuilder,
}

/// What [`IdMap::slot`] found.
pub(super) enum Slot<'a, K> {
    /// The id is in the map, at this entry.
    Taken(u32),
    /// The id is not; insert it here.
    Free(VacantEntry<'a, (K, u32)>),
}

impl<K> Default for IdMap<K> {
    fn default() -> Self {
        IdMap {
            table: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
        }
    }
}

impl<K: Hash + Eq> IdMap<K> {
    /// The entry of `id`, looked up by any borrowed form of it (hashed as `B`, which
    /// `Borrow` requires to hash as `K` does).
    pub(super) fn get<B: Hash + Eq + ?Sized>(&self, id: &B) -> Option<u32>
    where
        K: Borrow<B>,
    {
        let hash = self.hasher.hash_one(id);
        self.table
            .find(hash, |(k, _)| k.borrow() == id)
            .map(|&(_, i)| i)
    }

    /// Looks `id` up, ready to insert it if absent.
    #[inline]
    pub(super) fn slot(&mut self, id: &K) -> Slot<'_, K> {
        let hasher = &self.hasher;
        let hash = hasher.hash_one(id);
        match self
            .table
            .entry(hash, |(k, _)| k == id, |(k, _)| hasher.hash_one(k))
        {
            Entry::Occupied(o) => Slot::Taken(o.get().1),
            Entry::Vacant(v) => Slot::Free(v),
        }
    }

    /// Removes `id`; returns the map's copy of it, for the caller to drop after the lock.
    pub(super) fn remove<B: Hash + Eq + ?Sized>(&mut self, id: &B) -> Option<K>
    where
        K: Borrow<B>,
    {
        let hash = self.hasher.hash_one(id);
        let found = self
            .table
            .find_entry(hash, |(k, _)| k.borrow() == id)
            .ok()?;
        Some(found.remove().0.0)
    }

    pub(super) fn len(&self) -> usize {
        self.table.len()
    }

    #[cfg(test)]
    pub(super) fn iter(&self) -> impl Iterator<Item = (&K, u32)> {
        self.table.iter().map(|(k, i)| (k, *i))
    }

    pub(super) fn shrink_to_fit(&mut self) {
        let hasher = &self.hasher;
        self.table.shrink_to_fit(|(k, _)| hasher.hash_one(k));
    }

    /// Heap bytes of the table, by capacity.
    pub(super) fn bytes_held(&self) -> usize {
        self.table.allocation_size()
    }
}
