//! [`DoneList`]: a shard's in-flight entries whose `Due` is done, waiting to be settled
//! (see `core.rs`).

use std::hash::Hash;

use super::ShardState;
use crate::loom::Mutex;
use crate::sync::trash::Trash;

/// Entry indexes of in-flight timers whose `Due` is done, in the order they were done.
#[derive(Debug, Default)]
pub(crate) struct DoneList(pub(in crate::sync) Mutex<Vec<u32>>);

impl DoneList {
    /// The `Due` of in-flight entry `entry` is done. Takes only the done list's lock.
    pub(crate) fn push(&self, entry: u32) {
        self.0.lock().push(entry);
    }

    /// Finishes every entry on the list in `state` (whose lock the caller holds); returns
    /// whether there was any. The finished ids and queue names go to `trash`, which the
    /// caller drops after the lock.
    pub(crate) fn settle<Q, K, T>(
        &self,
        state: &mut ShardState<Q, K, T>,
        trash: &mut Trash<Q, K>,
    ) -> bool
    where
        Q: Hash + Eq + Clone,
        K: Hash + Eq + Clone,
    {
        let mut entries = state.take_done_buffer();
        std::mem::swap(&mut *self.0.lock(), &mut entries);
        let any = !entries.is_empty();
        for entry in entries.drain(..) {
            state.finish(entry, trash);
        }
        state.return_done_buffer(entries);
        any
    }
}
