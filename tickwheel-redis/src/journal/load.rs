//! Reading a queue's journal back, for its adopter.

use std::collections::HashMap;
use std::sync::LazyLock;

use redis::{Script, Value};

use super::batch::{number, text};
use super::record::decode;
use super::{JournalError, JournalRecord};
use crate::error::Error;
use crate::keys::JournalKeys;
use crate::protocol::{Protocol, map_redis};

static LOAD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/journal_prelude.lua"),
        include_str!("../lua/journal_load.lua")
    ))
});

/// Every live record of `queue`, read `page` buckets a script call, each call fenced.
pub(crate) async fn load(
    protocol: &Protocol,
    queue: &[u8],
    token: u64,
    page: u64,
) -> Result<Vec<JournalRecord>, JournalError> {
    let keys = JournalKeys::new(&protocol.options().prefix, queue);
    let owner = protocol.keys(queue).owner;
    let token_text = token.to_string();
    let page = page.max(1);
    let bad =
        |what: &str| JournalError::Redis(Error::UnexpectedReply(format!("journal load: {what}")));
    let corrupt = |message: String| JournalError::Corrupt {
        queue: queue.to_vec(),
        message,
    };
    let mut out: Vec<JournalRecord> = Vec::new();
    let mut at: HashMap<Vec<u8>, usize> = HashMap::new();
    let mut from: u64 = 0;
    loop {
        let mut conn = protocol.conn.clone();
        let value: Value = LOAD
            .key(&owner)
            .key(&keys.meta)
            .arg(&keys.bucket_prefix)
            .arg(&token_text)
            .arg(from)
            .arg(page)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| map_redis(e, &protocol.url, protocol.password.as_deref()))?;
        let Value::Array(items) = value else {
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
        let buckets = items
            .get(2)
            .and_then(number)
            .ok_or_else(|| bad("no bucket count"))?;
        let Some(Value::Array(flat)) = items.get(3) else {
            return Err(bad("no records"));
        };
        for pair in flat.chunks(2) {
            let (Some(Value::BulkString(id)), Some(Value::BulkString(stored))) =
                (pair.first(), pair.get(1))
            else {
                return Err(bad("a record is not two strings"));
            };
            let (deadline_us, value) = decode(stored).ok_or_else(|| {
                corrupt(format!("the record of id {id:?} has no readable deadline"))
            })?;
            let record = JournalRecord {
                id: id.clone(),
                deadline_us,
                value: value.to_vec(),
            };
            // A bucket split between two pages by a write under this same token can show a
            // record twice: the later read is the newer.
            match at.get(id) {
                Some(&i) => out[i] = record,
                None => {
                    at.insert(id.clone(), out.len());
                    out.push(record);
                }
            }
        }
        from = from.saturating_add(page);
        if from >= buckets {
            return Ok(out);
        }
    }
}
