//! Recovery: one pass over the live records, into a fresh scheduler.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Instant;

use serde::de::DeserializeOwned;
use tickwheel::sync::Scheduler;

use crate::clock::WallClock;
use crate::codec;
use crate::durable::{Policy, Slot};
use crate::error::{Error, Result};
use crate::store::{Store, Table};

/// How many timers between two progress reports.
const PROGRESS_EVERY: u64 = 1 << 16;

/// Schedules every timer of `store` into `sched`: the queues' flow control first, the
/// `meta` table next (attempts and
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
    // Flow control first: a held queue hands out none of its timers, from the first.
    store.scan(Table::Queues, &mut |k, v| {
        let queue: Q = codec::decode(k)?;
        // A fresh scheduler: applying the policy exactly only sets what it has.
        sched.apply_flow_policy(&queue, &codec::decode::<Policy>(v)?.into());
        Ok(())
    })?;
    let mut meta: HashMap<Vec<u8>, (u32, u64)> = HashMap::new();
    store.scan(Table::Meta, &mut |k, v| {
        meta.insert(k.to_vec(), codec::decode(v)?);
        Ok(())
    })?;
    let total = store.approximate_len(Table::Timers) as u64;
    let mut done = 0u64;
    // One reading of both clocks for the whole pass: every deadline maps the same way.
    let now = Instant::now();
    // Two stages on two threads: the engine's scan (a helper thread, copying records into
    // chunks) and decoding and scheduling (this thread). Recovery takes the longer of the
    // two instead of their sum.
    let (tx, rx) = std::sync::mpsc::sync_channel::<Chunk>(4);
    let decoded = std::thread::scope(|s| {
        let scanner = s.spawn(move || scan_chunks(store, &tx));
        let mut result = Ok(());
        'chunks: for chunk in rx {
            for (k, v) in chunk.records() {
                result = restore(sched, clock, &meta, now, k, v);
                if result.is_err() {
                    // Dropping the receiver stops the scanner at its next chunk.
                    break 'chunks;
                }
                done += 1;
                if done.is_multiple_of(PROGRESS_EVERY) {
                    progress(done, total);
                }
            }
        }
        let scanned = scanner
            .join()
            .unwrap_or_else(|_| Err(Error::engine("the recovery scan panicked")));
        result.and(scanned)
    });
    decoded?;
    progress(done, total.max(done));
    Ok(())
}

/// Records copied out of the engine: keys and values back to back in `bytes`.
#[derive(Default)]
struct Chunk {
    bytes: Vec<u8>,
    /// End of each record's key and of its value in `bytes`.
    ends: Vec<(usize, usize)>,
}

/// Records per chunk handed from the scanner to the decoder.
const CHUNK: usize = 4096;

impl Chunk {
    fn records(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let mut start = 0;
        self.ends.iter().map(move |&(k, v)| {
            let record = (&self.bytes[start..k], &self.bytes[k..v]);
            start = v;
            record
        })
    }
}

/// Scans the `timers` table into chunks sent to `tx`; stops early (with an error nobody
/// reads) when the receiver is gone.
fn scan_chunks(store: &dyn Store, tx: &std::sync::mpsc::SyncSender<Chunk>) -> Result<()> {
    let mut chunk = Chunk::default();
    store.scan(Table::Timers, &mut |k, v| {
        chunk.bytes.extend_from_slice(k);
        let key_end = chunk.bytes.len();
        chunk.bytes.extend_from_slice(v);
        chunk.ends.push((key_end, chunk.bytes.len()));
        if chunk.ends.len() == CHUNK {
            tx.send(std::mem::take(&mut chunk))
                .map_err(|_| Error::engine("recovery stopped"))?;
        }
        Ok(())
    })?;
    if !chunk.ends.is_empty() {
        tx.send(chunk)
            .map_err(|_| Error::engine("recovery stopped"))?;
    }
    Ok(())
}

/// Decodes one timer record and schedules it.
fn restore<Q, K, T>(
    sched: &Scheduler<Q, K, Slot<T>>,
    clock: &WallClock,
    meta: &HashMap<Vec<u8>, (u32, u64)>,
    now: Instant,
    k: &[u8],
    v: &[u8],
) -> Result<()>
where
    Q: Hash + Eq + Clone + DeserializeOwned,
    K: Hash + Eq + Clone + DeserializeOwned,
    T: DeserializeOwned,
{
    let (id, queue, mut wall, value): (K, Q, u64, T) = codec::decode(v)?;
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
        .map_err(|e| Error::decode(format!("a stored timer was refused: {e}")))
}
