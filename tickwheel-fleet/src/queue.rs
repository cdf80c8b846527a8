//! What a queue name must offer the fleet.

use std::hash::Hash;

/// A queue name usable in a fleet: bytes for the etcd and Redis keys, and back from the bytes
/// found in the etcd catalogue. Implemented for `String` (UTF-8 names only; other catalogue
/// entries are skipped) and `Vec<u8>`.
pub trait QueueName: AsRef<[u8]> + Hash + Eq + Clone + Ord + Send + Sync + 'static {
    /// The name from its bytes; `None` if these bytes name no queue of this type.
    fn from_bytes(bytes: &[u8]) -> Option<Self>;
}

impl QueueName for String {
    fn from_bytes(bytes: &[u8]) -> Option<Self> {
        String::from_utf8(bytes.to_vec()).ok()
    }
}

impl QueueName for Vec<u8> {
    fn from_bytes(bytes: &[u8]) -> Option<Self> {
        Some(bytes.to_vec())
    }
}
