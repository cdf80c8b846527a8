//! A watch on the owner keys that wakes the placement loop when one is deleted (a lease
//! expired, a key released): a queue's grace then starts when etcd deleted its key, not at
//! the next placement period. Best effort: if the watch fails, the period still runs the loop,
//! and the driver starts another watch on its next turn.

use std::sync::Arc;

use etcd_client::{Client, EventType, WatchOptions};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// The watch's task, aborted when this is dropped.
pub(crate) struct OwnersWatch {
    task: JoinHandle<()>,
}

impl OwnersWatch {
    /// Watches every key under `prefix` (the owner keys' prefix) through `client` and calls
    /// `wake.notify_one()` on each response that deletes one (a permit is kept if the loop
    /// is busy, so a deletion during a round runs another round at once).
    pub(crate) fn start(mut client: Client, prefix: String, wake: Arc<Notify>) -> Self {
        let task = tokio::spawn(async move {
            let options = WatchOptions::new().with_prefix();
            let Ok(mut stream) = client.watch(prefix, Some(options)).await else {
                return;
            };
            while let Ok(Some(r)) = stream.message().await {
                if r.canceled() {
                    return;
                }
                if r.events()
                    .iter()
                    .any(|e| e.event_type() == EventType::Delete)
                {
                    wake.notify_one();
                }
            }
        });
        OwnersWatch { task }
    }

    /// Whether the watch ended (etcd closed or refused it).
    pub(crate) fn ended(&self) -> bool {
        self.task.is_finished()
    }
}

impl Drop for OwnersWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}
