//! Taking a queue whose owner is gone: `adopt` in Redis at the new token, the journal, the
//! recovery hook, the leftover offer, then dispatch. Free functions on the shared state, so
//! that several adoptions run at once.

use std::hash::Hash;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tickwheel::sync::snapshot::from_reference;
use tickwheel_redis::Adopted;
use tokio::sync::Semaphore;

use crate::crossqueue::{Claim, later_wins_across};
use crate::runtime::Shared;
use crate::{Acquisition, Error, FleetEvent, QueueName};

/// Adopts `q` at `token` (this member's owner key holds it): `adopt` in Redis at the token,
/// the journal, the recovery hook, the leftover offer, then dispatch. Runs on the shared state
/// alone, so several run at once (`Driver::adopt_all`). On an error the caller releases
/// the key and drops what was imported.
pub(crate) async fn adopt_at<Q, K, T>(
    s: Arc<Shared<Q, K, T>>,
    q: Q,
    token: u64,
    slots: Option<Arc<Semaphore>>,
) -> Result<(), Error>
where
    Q: QueueName,
    K: Hash + Eq + Clone + Send + Sync + Serialize + DeserializeOwned + 'static,
    T: Send + Sync + Serialize + DeserializeOwned + 'static,
{
    // A slot bounds the Redis and import work of adoptions running at once; it is given
    // back before the recovery hook, so a hook that hangs (a store that stopped answering)
    // holds up its own queue only, never the adoption of the others.
    let slot = match slots {
        Some(slots) => Some(
            slots
                .acquire_owned()
                .await
                .map_err(|_| Error::Recovery("adoption slots closed".into()))?,
        ),
        None => None,
    };
    let adopted = s.custody.adopt::<Q, K, T>(q.clone(), token).await?;
    // Whatever an earlier stay here left is dropped: the store is the truth.
    s.scheduler.freeze_queue(&q);
    s.scheduler.take_forwarded(&q);
    s.scheduler.unfreeze_queue(&q);
    // A leftover offer carries its source's hold and limits: applied before the first
    // recovered timer arrives (the import applies them again). Without one, the queue
    // keeps whatever flow state this scheduler has for it.
    if let Adopted::Leftover(inc) = &adopted
        && let Ok(Some(policy)) = inc.flow_policy()
    {
        s.scheduler.apply_flow_policy(&q, &policy);
    }
    // The journal first (its deadlines are the last the old owner recorded), then the
    // hook: the import skips ids already in, so the two may overlap.
    let journaled = crate::journal::recover(&s, &q, token).await?;
    drop(slot);
    let entries = s
        .recovery
        .recover(q.clone())
        .await
        .map_err(|e| Error::Recovery(e.to_string()))?;
    let recovered = journaled + s.scheduler.import(q.clone(), entries).imported;
    let leftover = match adopted {
        Adopted::Owned(_) => 0,
        Adopted::Leftover(inc) => leftover(&s, &q, token, inc).await?,
    };
    s.owned.lock().insert(q.clone(), token);
    s.fence.grant(q.as_ref(), token);
    s.emit(FleetEvent::Acquired {
        queue: q.clone(),
        token,
        how: Acquisition::Adopted {
            recovered,
            leftover,
        },
    });
    Ok(())
}

/// Imports a leftover sealed offer after the journal and the hook: the number imported. With
/// the journal on, the offer's deadlines are read first and the journal brought up to the
/// later ones before the commit (a retry at the freeze the source could not journal: else
/// fired early at the next owner); after the import, each id already in keeps the later of
/// its two deadlines here. An offered id whose timer is in another queue of
/// this member keeps the later deadline too (`crossqueue::later_wins_across`).
async fn leftover<Q, K, T>(
    s: &Arc<Shared<Q, K, T>>,
    q: &Q,
    token: u64,
    mut inc: tickwheel_redis::Incoming<'_, Q, K, T>,
) -> Result<usize, Error>
where
    Q: QueueName,
    K: Hash + Eq + Clone + Send + Sync + Serialize + DeserializeOwned + 'static,
    T: Send + Sync + Serialize + DeserializeOwned + 'static,
{
    let entries = inc
        .fetch()
        .await
        .map_err(|e| Error::Handoff(e.to_string()))?;
    let mut offered = Vec::new();
    if s.journal.is_some() {
        let reference = s.custody.reference_now_us().await?;
        let local = Instant::now();
        offered = entries
            .iter()
            .map(|e| {
                (
                    e.id.clone(),
                    from_reference(e.deadline_us, reference, local),
                )
            })
            .collect();
        // Before the commit deletes the offer: a member that dies after it leaves the next
        // owner a journal that fires nothing early. What this member holds of the queue
        // came from the journal and the hook.
        let held = |id: &K| {
            let info = s.scheduler.lookup(id)?;
            (info.queue == *q).then_some(info.deadline)
        };
        crate::journal::offer_deadlines_first(s, q, token, entries, held).await?;
    }
    let done = match s.custody.complete(inc, &s.scheduler).await {
        Ok(r) => r.imported,
        Err(e) => return Err(Error::Handoff(e.to_string())),
    };
    crate::journal::later_deadlines_win(s, q, offered);
    // An offered id with a timer in another queue here: the later deadline wins there too.
    let claims = Claim::offered(done.present);
    Ok(done.imported + later_wins_across(s, q, token, claims).await.offer)
}
