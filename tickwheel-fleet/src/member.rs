//! The member runtime: joins, keeps its lease, places and moves queues, filters dispatch.

use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tickwheel::sync::{DispatcherHandle, Scheduler};
use tokio::sync::broadcast;

use crate::{Error, Fence, FencedDue, FleetEvent, FleetOptions, QueueName, Recovery};

/// One process's membership in a fleet, owning some of the fleet's queues in `scheduler`.
pub struct Member<Q: QueueName, K, T> {
    scheduler: Arc<Scheduler<Q, K, T>>,
    fence: Fence,
    name: String,
    boot: String,
    events: broadcast::Sender<FleetEvent<Q>>,
}

impl<Q, K, T> Member<Q, K, T>
where
    Q: QueueName,
    K: std::hash::Hash + Eq + Clone + Send + Sync + Serialize + DeserializeOwned + 'static,
    T: Send + Sync + Serialize + DeserializeOwned + 'static,
{
    /// Joins the fleet as `name`.
    ///
    /// # Errors
    /// [`Error::EtcdUnreachable`], [`Error::NameTaken`], [`Error::Redis`], [`Error::Options`].
    pub async fn join<R: Recovery<Q, K, T>>(
        options: FleetOptions,
        name: &str,
        scheduler: Arc<Scheduler<Q, K, T>>,
        recovery: R,
    ) -> Result<Self, Error> {
        let _ = (options, name, scheduler, recovery);
        todo!()
    }

    /// The member name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// This process's boot id.
    pub fn boot_id(&self) -> &str {
        &self.boot
    }

    /// The dispatch filter.
    pub fn fence(&self) -> Fence {
        self.fence.clone()
    }

    /// The scheduler.
    pub fn scheduler(&self) -> &Arc<Scheduler<Q, K, T>> {
        &self.scheduler
    }

    /// Due timers of fenced-valid queues, each with its token.
    pub fn pop_due(&self, now: Instant, max: usize) -> Vec<FencedDue<Q, K, T>> {
        self.scheduler
            .pop_due(now, max)
            .filter_map(|d| self.fence.admit(d))
            .collect()
    }

    /// The scheduler's thread dispatcher behind the fence.
    pub fn spawn_dispatcher<F>(&self, mut handler: F) -> DispatcherHandle
    where
        F: FnMut(FencedDue<Q, K, T>) + Send + 'static,
    {
        let fence = self.fence.clone();
        self.scheduler.spawn_dispatcher(move |due| {
            if let Some(d) = fence.admit(due) {
                handler(d)
            }
        })
    }

    /// Adds `queue` to the fleet's catalogue.
    ///
    /// # Errors
    /// [`Error::Etcd`].
    pub async fn register_queue(&self, queue: &Q) -> Result<(), Error> {
        let _ = queue;
        todo!()
    }

    /// Queues this member owns now, with tokens.
    pub fn owned(&self) -> Vec<(Q, u64)> {
        todo!()
    }

    /// A receiver of this member's events.
    pub fn events(&self) -> broadcast::Receiver<FleetEvent<Q>> {
        self.events.subscribe()
    }

    /// Orderly leave.
    ///
    /// # Errors
    /// [`Error::Etcd`], [`Error::Redis`].
    pub async fn leave(self) -> Result<(), Error> {
        todo!()
    }
}

/// Adds `queues` to the catalogue of the fleet `options` names, without joining.
///
/// # Errors
/// [`Error::EtcdUnreachable`], [`Error::Etcd`].
pub async fn register_queues<I, B>(options: &FleetOptions, queues: I) -> Result<(), Error>
where
    I: IntoIterator<Item = B>,
    B: AsRef<[u8]>,
{
    let _ = (options, queues.into_iter().count());
    todo!()
}
