//! Recovery: one pass over the live records, into a fresh scheduler.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Instant;

use serde::de::DeserializeOwned;
use tickwheel::sync::Scheduler;

use crate::clock::WallClock;
use crate::codec;
use crate::durable::Slot;
use crate::error::{Error, Result};
use crate::store::{Store, Table};

/// How many timers between two progress reports.
const PROGRESS_EVERY: u64 = 1 << 16;

/// Schedules every timer of `store` into `sched`: the `meta` table first (attempts and
/// moved deadlines of the timers handed out, rescheduled or retried: few), then one pass
/// over `timers`.
pub(crate) fn replay<Q, K, T>(
    store: &dyn Store,
    sched: &Scheduler<Q, K, Slot<T>>,
    clock: &WallClock,
    mut progress: impl FnMut(u64, u64),
) -> Result<()>
where
    Q: Hash + Eq + Clone + DeserializeOwned,
    K: Hash + Eq + Clone + DeserializeOwned,
    T: DeserializeOwned,
{
    let mut meta: HashMap<Vec<u8>, (u32, u64)> = HashMap::new();
    store.scan(Table::Meta, &mut |k, v| {
        meta.insert(k.to_vec(), codec::decode(v)?);
        Ok(())
    })?;
    let total = store.approximate_len(Table::Timers) as u64;
    let mut done = 0u64;
    // One reading of both clocks for the whole pass: every deadline maps the same way.
    let now = Instant::now();
    store.scan(Table::Timers, &mut |k, v| {
        let id: K = codec::decode(k)?;
        let (queue, mut wall, value): (Q, u64, T) = codec::decode(v)?;
        let (attempt, has_meta) = match meta.get(k) {
            Some(&(attempt, at)) => {
                wall = at;
                (attempt, true)
            }
            None => (0, false),
        };
        let at = clock.instant_of(wall, now);
        sched
            .schedule(queue, id, at, Slot::new(value, attempt, has_meta))
            .map_err(|e| Error::decode(format!("a stored timer was refused: {e}")))?;
        done += 1;
        if done.is_multiple_of(PROGRESS_EVERY) {
            progress(done, total);
        }
        Ok(())
    })?;
    progress(done, total.max(done));
    Ok(())
}
