//! Reading a queue's journal back, for its adopter.

use std::collections::HashMap;
use std::sync::LazyLock;

use redis::{Script, Value};
use serde::de::DeserializeOwned;
use tickwheel::sync::snapshot::SnapshotEntry;

use super::batch::text;
use super::record::{decode, entry_of};
use super::{JournalError, JournalRecord};
use crate::connect::map_redis;
use crate::error::Error;
use crate::keys::JournalKeys;
use crate::protocol::{Protocol, number};

static LOAD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/journal_prelude.lua"),
        include_str!("../lua/journal_load.lua")
    ))
});

/// How a load reads: `page` buckets a script call, `depth` calls a round trip.
#[derive(Clone, Copy)]
pub(crate) struct Paging {
    pub page: u64,
    pub depth: u64,
}

/// Reads every bucket of `queue` under `token`, in bucket order, and hands each page's
/// flattened `(id, stored)` values to `each`, in the order Redis ran the calls. Each round
/// trip is one pipeline of `depth` fenced script calls (run in order, nothing between them
/// reordered); the next one is sent as soon as the last answered, before `each` runs on its
/// pages, so Redis reads while the caller decodes. A round trip is sent only after the one
/// before answered: the calls run in bucket order, as one call after another would.
///
/// Returns whether every page saw the same bucket count, i.e. the same linear-hashing layout:
/// then each id was in exactly one bucket at every read, and each bucket was read once, so no
/// id came twice. A split between two pages (a write under `token` during the load) can
/// show a moved record twice; the later read is the newer.
pub(crate) async fn read_pages(
    protocol: &Protocol,
    queue: &[u8],
    token: u64,
    paging: Paging,
    mut each: impl FnMut(Vec<Value>) -> Result<(), JournalError>,
) -> Result<bool, JournalError> {
    let keys = JournalKeys::new(&protocol.options().prefix, queue);
    let owner = protocol.keys(queue).owner;
    let token_text = token.to_string();
    let (page, depth) = (paging.page.max(1), paging.depth.max(1));
    let bad =
        |what: &str| JournalError::Redis(Error::UnexpectedReply(format!("journal load: {what}")));
    let request = |from: u64| {
        let mut pipe = redis::pipe();
        // Cheap when cached, and no call of this pipeline meets NOSCRIPT after a flush.
        pipe.load_script(&LOAD);
        for i in 0..depth {
            pipe.cmd("EVALSHA")
                .arg(LOAD.get_hash())
                .arg(2)
                .arg(&owner)
                .arg(&keys.meta)
                .arg(&keys.bucket_prefix)
                .arg(&token_text)
                .arg(from.saturating_add(i.saturating_mul(page)))
                .arg(page);
        }
        let mut conn = protocol.conn.clone();
        let (url, password) = (protocol.url.clone(), protocol.password.clone());
        // Spawned: it runs (and Redis reads) while this task decodes the previous answer.
        tokio::spawn(async move {
            pipe.query_async::<Vec<Value>>(&mut conn)
                .await
                .map_err(|e| map_redis(e, &url, password.as_deref()))
        })
    };
    let stride = page.saturating_mul(depth);
    let mut next = Some(request(0));
    let mut from = stride;
    let mut layout: Option<u64> = None;
    let mut stable = true;
    while let Some(sent) = next.take() {
        let replies = match sent.await {
            Ok(r) => r?,
            Err(e) => {
                return Err(JournalError::Redis(Error::Redis {
                    url: protocol.url.clone(),
                    message: format!("journal load: the read task ended: {e}"),
                }));
            }
        };
        if replies.len() != 1 + depth as usize {
            return Err(bad("a reply per call"));
        }
        // Every call's status first: a fenced page stops the load before anything of this
        // round trip is handed on.
        let mut pages = Vec::with_capacity(replies.len() - 1);
        let mut buckets = 0;
        for value in replies.into_iter().skip(1) {
            let Value::Array(mut items) = value else {
                return Err(bad("not an array"));
            };
            match items.first().and_then(text) {
                Some("OK") => {}
                Some("FENCED") => {
                    return Err(JournalError::Fenced {
                        queue: queue.to_vec(),
                        token,
                        current: items.get(1).and_then(number),
                    });
                }
                _ => return Err(bad("unknown status")),
            }
            buckets = items
                .get(2)
                .and_then(number)
                .ok_or_else(|| bad("no bucket count"))?;
            if *layout.get_or_insert(buckets) != buckets {
                stable = false;
            }
            match items.pop() {
                Some(Value::Array(flat)) if items.len() == 3 => pages.push(flat),
                _ => return Err(bad("no records")),
            }
        }
        if from < buckets {
            next = Some(request(from));
            from = from.saturating_add(stride);
            // A task spawned from a worker waits in its LIFO slot, which no other worker
            // steals from: yield so that it sends now, not after the pages are decoded.
            tokio::task::yield_now().await;
        }
        for flat in pages {
            each(flat)?;
        }
    }
    Ok(stable)
}

/// The `(id, deadline, value)` pairs of a page's flattened values, ids and values moved out.
fn records(
    queue: &[u8],
    flat: Vec<Value>,
    mut each: impl FnMut(Vec<u8>, u64, Vec<u8>) -> Result<(), JournalError>,
) -> Result<(), JournalError> {
    let bad = || {
        JournalError::Redis(Error::UnexpectedReply(
            "journal load: a record is not two strings".into(),
        ))
    };
    let mut values = flat.into_iter();
    while let Some(id) = values.next() {
        let (Value::BulkString(id), Some(Value::BulkString(mut stored))) = (id, values.next())
        else {
            return Err(bad());
        };
        let Some((deadline_us, value)) = decode(&stored) else {
            return Err(JournalError::Corrupt {
                queue: queue.to_vec(),
                message: format!("the record of id {id:?} has no readable deadline"),
            });
        };
        // The value is the stored bytes after the varint: shifted down in place, no copy.
        let head = stored.len() - value.len();
        stored.drain(..head);
        each(id, deadline_us, stored)?;
    }
    Ok(())
}

/// Every live record of `queue`, each id once (see [`read_pages`]: the later read of an id
/// wins, at the place of the first).
pub(crate) async fn load(
    protocol: &Protocol,
    queue: &[u8],
    token: u64,
    paging: Paging,
) -> Result<Vec<JournalRecord>, JournalError> {
    let mut out: Vec<JournalRecord> = Vec::new();
    let stable = read_pages(protocol, queue, token, paging, |flat| {
        records(queue, flat, |id, deadline_us, value| {
            out.push(JournalRecord {
                id,
                deadline_us,
                value,
            });
            Ok(())
        })
    })
    .await?;
    if stable {
        return Ok(out);
    }
    let mut at: HashMap<Vec<u8>, usize> = HashMap::with_capacity(out.len());
    let mut unique: Vec<JournalRecord> = Vec::with_capacity(out.len());
    for record in out {
        match at.get(&record.id) {
            Some(&i) => unique[i] = record,
            None => {
                at.insert(record.id.clone(), unique.len());
                unique.push(record);
            }
        }
    }
    Ok(unique)
}

/// Every live record of `queue` decoded as a snapshot entry, handed to `each` a page at a
/// time as the pages arrive. The number of entries handed on.
pub(crate) async fn load_each<K, T>(
    protocol: &Protocol,
    queue: &[u8],
    token: u64,
    paging: Paging,
    mut each: impl FnMut(Vec<SnapshotEntry<K, T>>),
) -> Result<usize, JournalError>
where
    K: DeserializeOwned,
    T: DeserializeOwned,
{
    let mut count = 0usize;
    read_pages(protocol, queue, token, paging, |flat| {
        let mut entries = Vec::with_capacity(flat.len() / 2);
        records(queue, flat, |id, deadline_us, value| {
            let e = entry_of(&id, deadline_us, &value).map_err(|e| match e {
                JournalError::Corrupt { message, .. } => JournalError::Corrupt {
                    queue: queue.to_vec(),
                    message,
                },
                other => other,
            })?;
            entries.push(e);
            Ok(())
        })?;
        count += entries.len();
        each(entries);
        Ok(())
    })
    .await?;
    Ok(count)
}
