//! Changes of custody over a whole queue: drain, freeze, forwarded timers, import. Each
//! holds every id lock while it changes the scheduler and queues its records, so no
//! single-id call interleaves with it (see the record order in the parent module).

use std::hash::Hash;

use serde::Serialize;
use serde::de::DeserializeOwned;
#[cfg(doc)]
use tickwheel::sync::Scheduler;
use tickwheel::sync::{Drained, Frozen, FrozenEntry, Imported};

use super::{Durable, Slot, end_ops};
use crate::codec;
use crate::error::Result;
use crate::store::{Op, Table};

/// The records ending some timers, and the entries handed back.
type Ended<K, T> = (Vec<Op>, Vec<FrozenEntry<K, T>>);

impl<Q, K, T> Durable<Q, K, T>
where
    Q: Hash + Eq + Clone + Serialize + DeserializeOwned + Send + 'static,
    K: Hash + Eq + Clone + Serialize + DeserializeOwned + Send + 'static,
    T: Serialize + DeserializeOwned + Send + 'static,
{
    /// Drains a queue, as [`Scheduler::drain_queue`], and records the end of every timer
    /// taken. Blocks every other change for its duration (it holds every id lock).
    ///
    /// # Errors
    ///
    /// The journal's (see the type's docs).
    pub fn drain_queue(&self, queue: &Q) -> Result<Drained<K, T>> {
        self.with_all_stripes(|| {
            let drained = self.sched.drain_queue(queue);
            let mut ops = Vec::with_capacity(drained.cancelled.len());
            let mut cancelled = Vec::with_capacity(drained.cancelled.len());
            for (id, slot) in drained.cancelled {
                ops.extend(end_ops(codec::key(&id)?, slot.has_meta()));
                cancelled.push((id, slot.value));
            }
            let drained = Drained {
                cancelled,
                in_flight: drained.in_flight,
            };
            Ok((ops, drained))
        })
    }

    /// Freezes a queue, as [`Scheduler::freeze_queue`], and records the end of every
    /// pending timer handed back (the caller now has custody of them). The freeze itself is
    /// not recorded: after a crash the queue comes back unfrozen, its forwarded timers
    /// pending.
    ///
    /// # Errors
    ///
    /// The journal's (see the type's docs).
    pub fn freeze_queue(&self, queue: &Q) -> Result<Frozen<K, T>> {
        self.with_all_stripes(|| {
            let frozen = self.sched.freeze_queue(queue);
            let (ops, pending) = self.end_entries(frozen.pending)?;
            let frozen = Frozen {
                pending,
                in_flight: frozen.in_flight,
            };
            Ok((ops, frozen))
        })
    }

    /// Takes a frozen queue's forwarded timers, as [`Scheduler::take_forwarded`], and
    /// records their end.
    ///
    /// # Errors
    ///
    /// The journal's (see the type's docs).
    pub fn take_forwarded(&self, queue: &Q) -> Result<Vec<FrozenEntry<K, T>>> {
        self.with_all_stripes(|| self.end_entries(self.sched.take_forwarded(queue)))
    }

    /// Lifts a freeze, as [`Scheduler::unfreeze_queue`] (nothing to record: forwarded
    /// timers kept their records). Returns how many forwarded timers became pending.
    pub fn unfreeze_queue(&self, queue: &Q) -> usize {
        self.sched.unfreeze_queue(queue)
    }

    /// Imports entries into `queue`, as [`Scheduler::import`], and records every timer
    /// imported (with attempt 0: attempt counts do not travel with a handoff).
    ///
    /// # Errors
    ///
    /// The journal's (see the type's docs).
    pub fn import(&self, queue: &Q, entries: Vec<FrozenEntry<K, T>>) -> Result<Imported<K, T>> {
        let mut records = Vec::with_capacity(entries.len());
        let earliest = entries.iter().map(|e| e.at).min();
        for e in &entries {
            records.push((
                codec::key(&e.id)?,
                codec::timer(&e.id, queue, self.core.clock.to_wall(e.at), &e.value)?,
            ));
        }
        let keys: Vec<(K, Vec<u8>, Vec<u8>)> = entries
            .iter()
            .zip(records)
            .map(|(e, (k, r))| (e.id.clone(), k, r))
            .collect();
        let guards = self.all_stripes();
        self.core.shared.check()?;
        let imported = self.sched.import(
            queue,
            entries.into_iter().map(|e| FrozenEntry {
                id: e.id,
                at: e.at,
                value: Slot::new(e.value, 0, false),
            }),
        );
        let back = |v: Vec<FrozenEntry<K, Slot<T>>>| -> Vec<FrozenEntry<K, T>> {
            v.into_iter()
                .map(|e| FrozenEntry {
                    id: e.id,
                    at: e.at,
                    value: e.value.value,
                })
                .collect()
        };
        let present = back(imported.present);
        let refused = back(imported.refused);
        let not_taken: std::collections::HashSet<&K> =
            present.iter().chain(&refused).map(|e| &e.id).collect();
        let ops = keys
            .into_iter()
            .filter(|(id, _, _)| !not_taken.contains(id))
            .map(|(_, k, r)| Op::Put(Table::Timers, k, r));
        let n = self.core.queue(ops)?;
        drop(guards);
        if let Some(at) = earliest {
            self.core.wake.deadline_added(at);
        }
        self.core.settle(n)?;
        Ok(Imported {
            imported: imported.imported,
            present,
            refused,
        })
    }

    fn end_entries(&self, entries: Vec<FrozenEntry<K, Slot<T>>>) -> Result<Ended<K, T>> {
        let mut ops = Vec::with_capacity(entries.len());
        let mut out = Vec::with_capacity(entries.len());
        for e in entries {
            ops.extend(end_ops(codec::key(&e.id)?, e.value.has_meta()));
            out.push(FrozenEntry {
                id: e.id,
                at: e.at,
                value: e.value.value,
            });
        }
        Ok((ops, out))
    }
}
