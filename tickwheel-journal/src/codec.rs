//! Record encodings (postcard: varints, no schema, no field names). A `timers` value is
//! `(id, queue, deadline µs, value)`; a `meta` value is `(attempt, deadline µs)`. Keys are
//! in `keycodec`. A `queues` key is the queue's encoding, its value the queue's flow
//! control.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

pub(crate) use crate::keycodec::key;

pub(crate) fn timer<K: Serialize, Q: Serialize, T: Serialize>(
    id: &K,
    queue: &Q,
    deadline_us: u64,
    value: &T,
) -> Result<Vec<u8>> {
    postcard::to_allocvec(&(id, queue, deadline_us, value)).map_err(Error::decode)
}

pub(crate) fn meta(attempt: u32, deadline_us: u64) -> Vec<u8> {
    // Two varints: at most 5 + 10 bytes; encoding into a Vec cannot fail.
    postcard::to_allocvec(&(attempt, deadline_us)).unwrap_or_default()
}

/// A `queues` key: the queue's postcard encoding (queues are few; no order is needed).
pub(crate) fn policy_key<Q: Serialize>(queue: &Q) -> Result<Vec<u8>> {
    encode(queue)
}

pub(crate) fn encode<V: Serialize>(value: &V) -> Result<Vec<u8>> {
    postcard::to_allocvec(value).map_err(Error::decode)
}

pub(crate) fn decode<V: DeserializeOwned>(bytes: &[u8]) -> Result<V> {
    postcard::from_bytes(bytes).map_err(Error::decode)
}

/// FNV-1a over the key bytes: picks the id's stripe lock.
pub(crate) fn stripe(key: &[u8], stripes: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    (h as usize) % stripes
}
