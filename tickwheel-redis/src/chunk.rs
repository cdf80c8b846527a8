//! Chunks: the serialized pieces of an offer.
//!
//! A chunk is MessagePack (rmp-serde, compact: structs as arrays) of
//! `[version, queue bytes, epoch, index, [[id, deadline_us, value], ...]]`. The reader checks
//! the version before anything else, then the queue, the epoch and the index, so a corrupt
//! chunk, a chunk of a future format, or one of another queue or offer is a distinct error.
//! Decoding is pure: it never touches Redis.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The chunk format this crate writes and reads.
pub const CHUNK_VERSION: u32 = 1;

/// Entries per chunk by default: keeps one `append` script call well under a millisecond of
/// Redis time for small values.
pub const DEFAULT_CHUNK_ENTRIES: usize = 1000;

/// One timer in a chunk: the core crate's snapshot entry (id, deadline in µs on the
/// reference clock, value).
pub use tickwheel::sync::snapshot::SnapshotEntry;

/// One chunk of an offer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunk<K, T> {
    /// Format version, [`CHUNK_VERSION`] when written by this crate.
    pub version: u32,
    /// The raw name of the queue the chunk belongs to.
    #[serde(with = "serde_bytes")]
    pub queue: Vec<u8>,
    /// The epoch the source offered under.
    pub epoch: u64,
    /// The chunk's index in the offer (0, 1, 2, ...).
    pub index: u64,
    /// The timers, in delivery order.
    pub entries: Vec<SnapshotEntry<K, T>>,
}

/// Why a chunk could not be read. Reading changes nothing anywhere.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChunkError {
    /// The bytes are not a chunk (truncated, garbage, or entries of other types).
    #[error("corrupt chunk: {0}")]
    Corrupt(String),
    /// A chunk of a format this crate does not know.
    #[error("unknown chunk version {found} (this build reads {CHUNK_VERSION})")]
    UnknownVersion {
        /// The version in the chunk.
        found: u32,
    },
    /// A chunk of another queue.
    #[error("chunk of another queue ({found:?}, expected {expected:?})")]
    OtherQueue {
        /// The queue asked for.
        expected: Vec<u8>,
        /// The queue in the chunk.
        found: Vec<u8>,
    },
    /// A chunk of another offer (epoch).
    #[error("chunk of epoch {found}, expected {expected}")]
    OtherEpoch {
        /// The epoch asked for.
        expected: u64,
        /// The epoch in the chunk.
        found: u64,
    },
    /// A chunk filed under another index.
    #[error("chunk index {found}, expected {expected}")]
    OtherIndex {
        /// The index asked for.
        expected: u64,
        /// The index in the chunk.
        found: u64,
    },
    /// Encoding failed (a value whose `Serialize` fails).
    #[error("cannot encode chunk: {0}")]
    Encode(String),
}

impl<K: Serialize, T: Serialize> Chunk<K, T> {
    /// Serializes the chunk. O(entries).
    ///
    /// # Errors
    /// [`ChunkError::Encode`] if an id or value fails to serialize.
    ///
    /// # Example
    /// ```
    /// use tickwheel_redis::chunk::{Chunk, SnapshotEntry, CHUNK_VERSION};
    /// let c = Chunk { version: CHUNK_VERSION, queue: b"q".to_vec(), epoch: 3, index: 0,
    ///     entries: vec![SnapshotEntry { id: 7u64, deadline_us: 1_000, value: "m".to_string() }] };
    /// let bytes = c.encode()?;
    /// assert_eq!(Chunk::decode(&bytes, b"q", 3, 0)?, c);
    /// # Ok::<(), tickwheel_redis::chunk::ChunkError>(())
    /// ```
    pub fn encode(&self) -> Result<Vec<u8>, ChunkError> {
        rmp_serde::to_vec(self).map_err(|e| ChunkError::Encode(e.to_string()))
    }
}

impl<K: DeserializeOwned, T: DeserializeOwned> Chunk<K, T> {
    /// Reads a chunk and checks that it is chunk `index` of the offer of `queue` made under
    /// `epoch`. O(bytes).
    ///
    /// # Errors
    /// [`ChunkError::UnknownVersion`] (checked first, before the rest is parsed),
    /// [`ChunkError::Corrupt`], [`ChunkError::OtherQueue`], [`ChunkError::OtherEpoch`],
    /// [`ChunkError::OtherIndex`].
    pub fn decode(bytes: &[u8], queue: &[u8], epoch: u64, index: u64) -> Result<Self, ChunkError> {
        let found = version(bytes)?;
        if found != CHUNK_VERSION {
            return Err(ChunkError::UnknownVersion { found });
        }
        let chunk: Chunk<K, T> =
            rmp_serde::from_slice(bytes).map_err(|e| ChunkError::Corrupt(e.to_string()))?;
        if chunk.queue != queue {
            return Err(ChunkError::OtherQueue {
                expected: queue.to_vec(),
                found: chunk.queue,
            });
        }
        if chunk.epoch != epoch {
            return Err(ChunkError::OtherEpoch {
                expected: epoch,
                found: chunk.epoch,
            });
        }
        if chunk.index != index {
            return Err(ChunkError::OtherIndex {
                expected: index,
                found: chunk.index,
            });
        }
        Ok(chunk)
    }
}

/// The version field alone: the first element of the top-level array.
fn version(mut bytes: &[u8]) -> Result<u32, ChunkError> {
    let corrupt = |what: String| ChunkError::Corrupt(what);
    let len = rmp::decode::read_array_len(&mut bytes).map_err(|e| corrupt(e.to_string()))?;
    if len == 0 {
        return Err(corrupt("empty array".into()));
    }
    rmp::decode::read_int(&mut bytes).map_err(|e| corrupt(format!("version: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk() -> Chunk<String, Vec<u8>> {
        Chunk {
            version: CHUNK_VERSION,
            queue: b"a}\n\x00".to_vec(),
            epoch: 9,
            index: 2,
            entries: (0..5)
                .map(|i| SnapshotEntry {
                    id: format!("m{i}"),
                    deadline_us: u64::MAX - i,
                    value: vec![i as u8; 3],
                })
                .collect(),
        }
    }

    #[test]
    fn round_trip_and_distinct_errors() {
        let c = chunk();
        let bytes = c.encode().expect("encode");
        type C = Chunk<String, Vec<u8>>;
        assert_eq!(C::decode(&bytes, &c.queue, 9, 2).expect("decode"), c);
        assert!(matches!(
            C::decode(&bytes, b"other", 9, 2),
            Err(ChunkError::OtherQueue { .. })
        ));
        assert!(matches!(
            C::decode(&bytes, &c.queue, 8, 2),
            Err(ChunkError::OtherEpoch {
                expected: 8,
                found: 9
            })
        ));
        assert!(matches!(
            C::decode(&bytes, &c.queue, 9, 1),
            Err(ChunkError::OtherIndex { .. })
        ));
        for cut in [0, 1, bytes.len() / 2, bytes.len() - 1] {
            assert!(
                matches!(
                    C::decode(&bytes[..cut], &c.queue, 9, 2),
                    Err(ChunkError::Corrupt(_))
                ),
                "{cut}"
            );
        }
        assert!(matches!(
            C::decode(b"\xc1garbage", &c.queue, 9, 2),
            Err(ChunkError::Corrupt(_))
        ));
        let mut future = c.clone();
        future.version = 2;
        let bytes = future.encode().expect("encode");
        assert_eq!(
            C::decode(&bytes, &c.queue, 9, 2),
            Err(ChunkError::UnknownVersion { found: 2 })
        );
        // Entries of other types: corrupt, not a panic.
        let bytes = c.encode().expect("encode");
        assert!(matches!(
            Chunk::<u64, u64>::decode(&bytes, &c.queue, 9, 2),
            Err(ChunkError::Corrupt(_))
        ));
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_decode_without_panic(bytes: Vec<u8>) {
            let _ = Chunk::<String, Vec<u8>>::decode(&bytes, b"q", 1, 0);
        }
    }
}
