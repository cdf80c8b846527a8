//! The stored form of one live timer, and the ops that change it.

use serde::Serialize;
use serde::de::DeserializeOwned;
use tickwheel::sync::snapshot::SnapshotEntry;

use super::{JournalError, MAX_ID_BYTES};

/// One change to a queue's journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Insert or replace the record of `id`: a schedule, an import, a reschedule (a retry
    /// at a new deadline).
    Put {
        /// The timer's id, as bytes (see [`Op::put_entry`] for a typed id).
        id: Vec<u8>,
        /// Its deadline: µs since the Unix epoch on the reference clock (Redis `TIME`), as
        /// in a handoff's snapshot entries.
        deadline_us: u64,
        /// Its value, as bytes.
        value: Vec<u8>,
    },
    /// Delete the record of `id`: the timer ended (delivered and confirmed, cancelled,
    /// drained). Deleting an absent id does nothing.
    End {
        /// The timer's id, as bytes.
        id: Vec<u8>,
    },
    /// Delete every record of the queue (a new owner that writes the queue afresh).
    Clear,
}

impl Op {
    /// The id this op writes or deletes; `None` for [`Op::Clear`].
    pub fn id(&self) -> Option<&[u8]> {
        match self {
            Op::Put { id, .. } | Op::End { id } => Some(id),
            Op::Clear => None,
        }
    }

    /// [`Op::Put`] of a snapshot entry, id and value in MessagePack (`rmp-serde`, compact,
    /// the encoding of a handoff's chunks). O(size of id and value).
    ///
    /// # Errors
    /// [`JournalError::Corrupt`] (empty queue name) if either does not serialize;
    /// [`JournalError::IdTooLong`] if the encoded id is over [`MAX_ID_BYTES`] (the value is
    /// then not encoded).
    pub fn put_entry<K: Serialize, T: Serialize>(
        entry: &SnapshotEntry<K, T>,
    ) -> Result<Op, JournalError> {
        Op::put(&entry.id, entry.deadline_us, &entry.value)
    }

    /// [`Op::Put`] of a typed id and value, encoded as [`Op::put_entry`] encodes them, without
    /// taking them (a caller that hands the value to its scheduler next).
    ///
    /// # Errors
    /// As [`Op::put_entry`]: [`JournalError::Corrupt`] if either does not serialize,
    /// [`JournalError::IdTooLong`] if the id is too long for the journal. A caller that
    /// encodes before changing its scheduler so refuses such an id with nothing changed.
    pub fn put<K: Serialize, T: Serialize>(
        id: &K,
        deadline_us: u64,
        value: &T,
    ) -> Result<Op, JournalError> {
        Ok(Op::Put {
            id: id_bytes(id)?,
            deadline_us,
            value: to_bytes(value)?,
        })
    }

    /// [`Op::End`] of a typed id, encoded as [`Op::put_entry`] encodes it.
    ///
    /// # Errors
    /// [`JournalError::Corrupt`] if the id does not serialize; [`JournalError::IdTooLong`] if
    /// it encodes to over [`MAX_ID_BYTES`] (no put of it can have been written either).
    pub fn end_id<K: Serialize>(id: &K) -> Result<Op, JournalError> {
        Ok(Op::End { id: id_bytes(id)? })
    }
}

/// An id's bytes, refused over [`MAX_ID_BYTES`] here already, so that a caller learns it
/// before it changes anything ([`Journal::submit`](super::Journal::submit) checks again, for
/// ops built by hand).
fn id_bytes<K: Serialize>(id: &K) -> Result<Vec<u8>, JournalError> {
    let bytes = to_bytes(id)?;
    check_id_len(bytes.len())?;
    Ok(bytes)
}

/// [`JournalError::IdTooLong`] for an encoded id of `len` bytes over [`MAX_ID_BYTES`].
pub(super) fn check_id_len(len: usize) -> Result<(), JournalError> {
    if len > MAX_ID_BYTES {
        return Err(JournalError::IdTooLong {
            len,
            max: MAX_ID_BYTES,
        });
    }
    Ok(())
}

fn to_bytes<V: Serialize>(v: &V) -> Result<Vec<u8>, JournalError> {
    rmp_serde::to_vec(v).map_err(|e| JournalError::Corrupt {
        queue: Vec::new(),
        message: e.to_string(),
    })
}

/// One live timer as [`Journal::load`](super::Journal::load) read it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalRecord {
    /// The id bytes, as put.
    pub id: Vec<u8>,
    /// The deadline, µs since the Unix epoch on the reference clock.
    pub deadline_us: u64,
    /// The value bytes, as put.
    pub value: Vec<u8>,
}

impl JournalRecord {
    /// The record as a snapshot entry, id and value decoded from MessagePack (what
    /// [`Op::put_entry`] wrote), ready for `Scheduler::import` after
    /// `snapshot::from_reference`. O(size).
    ///
    /// # Errors
    /// [`JournalError::Corrupt`] (empty queue name) if the id or value is not a `K` or `T`.
    pub fn entry<K: DeserializeOwned, T: DeserializeOwned>(
        &self,
    ) -> Result<SnapshotEntry<K, T>, JournalError> {
        entry_of(&self.id, self.deadline_us, &self.value)
    }
}

/// [`JournalRecord::entry`] of a record's parts.
pub(crate) fn entry_of<K: DeserializeOwned, T: DeserializeOwned>(
    id: &[u8],
    deadline_us: u64,
    value: &[u8],
) -> Result<SnapshotEntry<K, T>, JournalError> {
    let bad = |e: rmp_serde::decode::Error| JournalError::Corrupt {
        queue: Vec::new(),
        message: e.to_string(),
    };
    Ok(SnapshotEntry {
        id: rmp_serde::from_slice(id).map_err(bad)?,
        deadline_us,
        value: rmp_serde::from_slice(value).map_err(bad)?,
    })
}

/// The stored bytes of a record: the deadline as an LEB128 varint (8 bytes for a deadline in
/// this century's µs, 1 for 0), then the value's bytes. The id is the hash field.
pub(crate) fn encode(deadline_us: u64, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(10 + value.len());
    let mut d = deadline_us;
    loop {
        let low = (d & 0x7f) as u8;
        d >>= 7;
        if d == 0 {
            out.push(low);
            break;
        }
        out.push(low | 0x80);
    }
    out.extend_from_slice(value);
    out
}

/// The deadline and the value of stored bytes; `None` if the varint is cut short or longer
/// than a `u64`.
pub(crate) fn decode(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let mut d: u64 = 0;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        let part = u64::from(b & 0x7f);
        let shift = 7 * i as u32;
        if shift == 63 && part > 1 {
            return None;
        }
        d |= part << shift;
        if b & 0x80 == 0 {
            return Some((d, &bytes[i + 1..]));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #[test]
        fn round_trip(d: u64, v: Vec<u8>) {
            let bytes = encode(d, &v);
            proptest::prop_assert_eq!(decode(&bytes), Some((d, v.as_slice())));
        }

        #[test]
        fn truncated_varint_is_refused(d in 128u64.., cut in 0usize..1) {
            let bytes = encode(d, b"");
            proptest::prop_assert_eq!(decode(&bytes[..bytes.len() - 1 - cut]), None);
        }
    }

    #[test]
    fn too_long_varint_is_refused() {
        assert_eq!(decode(&[0xff; 10]), None);
        assert_eq!(
            decode(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]),
            None
        );
        assert_eq!(decode(&encode(u64::MAX, b"x")), Some((u64::MAX, &b"x"[..])));
    }

    #[test]
    fn typed_entry_round_trip() {
        let e = SnapshotEntry {
            id: 42u64,
            deadline_us: 1_700_000_000_000_000,
            value: "v".to_string(),
        };
        let Op::Put {
            id,
            deadline_us,
            value,
        } = Op::put_entry(&e).expect("encode")
        else {
            panic!("not a put");
        };
        let r = JournalRecord {
            id,
            deadline_us,
            value,
        };
        assert_eq!(r.entry::<u64, String>().expect("decode"), e);
        assert!(r.entry::<String, String>().is_err());
    }

    #[test]
    fn constructors_refuse_an_id_over_the_limit() {
        // MessagePack: a str8 header for up to 255 bytes, a str16 (3 bytes) above.
        let at = "x".repeat(MAX_ID_BYTES - 3);
        let over = "x".repeat(MAX_ID_BYTES - 2);
        assert_eq!(
            Op::put(&at, 1, &())
                .expect("at the limit")
                .id()
                .map(<[u8]>::len),
            Some(MAX_ID_BYTES)
        );
        let too_long = |r: Result<Op, JournalError>| {
            matches!(r, Err(JournalError::IdTooLong { len, max })
                if len == MAX_ID_BYTES + 1 && max == MAX_ID_BYTES)
        };
        assert!(too_long(Op::put(&over, 1, &())));
        assert!(too_long(Op::end_id(&over)));
        let entry = SnapshotEntry {
            id: over,
            deadline_us: 1,
            value: (),
        };
        assert!(too_long(Op::put_entry(&entry)));
        assert!(Op::end_id(&at).is_ok());
    }
}
