//! A member's journal of its queues' live timers in Redis ([`FleetOptions::journal`]): the
//! writes the user makes beside its scheduler calls, and the load an adoption makes.
//!
//! [`FleetOptions::journal`]: crate::FleetOptions::journal

use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tickwheel::sync::FrozenEntry;
use tickwheel::sync::snapshot::{SnapshotEntry, from_reference, to_reference};
use tickwheel_redis::journal::{Journal, Op, Pending};
use tokio::sync::mpsc;

use crate::runtime::Shared;
use crate::{Error, Member, QueueName};

/// How old the clock anchor may grow before the placement loop reads it again.
const ANCHOR_AGE: Duration = Duration::from_secs(60);

/// The journal of a member and its anchor on the reference clock (Redis `TIME`): a local
/// `Instant` read before a reading of the reference clock, µs since the Unix epoch.
pub(crate) struct MemberJournal {
    pub journal: Journal,
    pub anchor: Mutex<(Instant, u64)>,
}

impl<Q, K, T> Member<Q, K, T>
where
    Q: QueueName,
    K: Hash + Eq + Clone + Send + Sync + Serialize + 'static,
    T: Send + Serialize + 'static,
{
    /// Records in Redis that `queue` holds the timer `id` due at `at` with `value` (a
    /// schedule, an import, a reschedule to a new deadline), under the token this member
    /// holds for the queue. Call it beside the scheduler call that made the change
    /// (`scheduler().schedule(..)`, `reschedule`, a retry); treat the timer as accepted once
    /// the returned [`Pending`] resolves `Ok`: it is then durable in Redis, and the queue's
    /// next owner loads it if this member dies. The deadline goes to Redis on the reference
    /// clock (Redis `TIME`) through an anchor, a local `Instant` and then `TIME`, read at join
    /// and again by the placement loop once a minute: it comes out later by the anchor's round
    /// trip, and off by however far Redis's clock drifted or was stepped from this host's
    /// monotonic clock since the anchor. O(size of id and value); group-committed.
    ///
    /// # Errors
    /// [`Error::JournalOff`] without [`FleetOptions::journal`](crate::FleetOptions::journal);
    /// [`Error::NotOwned`] if this member does not own `queue` now; [`Error::Journal`] if the id
    /// or value does not serialize. The [`Pending`] resolves to
    /// `tickwheel_redis::journal::JournalError::Fenced` once another member holds the queue.
    pub fn journal_put(&self, queue: &Q, id: &K, at: Instant, value: &T) -> Result<Pending, Error> {
        let (j, token) = self.journal_for(queue)?;
        let (local, reference) = *j.anchor.lock();
        let deadline_us = to_reference(at, local, reference);
        Ok(j.journal.submit(
            queue.as_ref(),
            token,
            vec![Op::put(id, deadline_us, value)?],
        ))
    }

    /// Records in Redis that the timer `id` of `queue` ended: delivered and confirmed,
    /// cancelled, drained. Until the returned [`Pending`] resolves `Ok`, a death of this member
    /// lets the next owner fire it again (at least once). O(size of id); group-committed.
    ///
    /// # Errors
    /// As [`Member::journal_put`].
    pub fn journal_end(&self, queue: &Q, id: &K) -> Result<Pending, Error> {
        let (j, token) = self.journal_for(queue)?;
        Ok(j.journal
            .submit(queue.as_ref(), token, vec![Op::end_id(id)?]))
    }

    /// The journal and this member's token for `queue`: the owner key's, which stays this
    /// member's until a handoff's target committed (so the ends of timers in flight during
    /// an offer still land).
    fn journal_for(&self, queue: &Q) -> Result<(&MemberJournal, u64), Error> {
        let j = self.shared.journal.as_ref().ok_or(Error::JournalOff)?;
        let token = self.shared.owned.lock().get(queue).copied();
        Ok((j, token.ok_or(Error::NotOwned)?))
    }
}

/// Reads the clock anchor again once it is [`ANCHOR_AGE`] old; keeps the old one if Redis does
/// not answer.
pub(crate) async fn refresh_anchor<Q: QueueName, K, T>(shared: &Shared<Q, K, T>) {
    let Some(j) = &shared.journal else {
        return;
    };
    if j.anchor.lock().0.elapsed() < ANCHOR_AGE {
        return;
    }
    let before = Instant::now();
    if let Ok(reference) = shared.custody.reference_now_us().await {
        *j.anchor.lock() = (before, reference);
    }
}

/// Threads importing one queue's journal pages into the scheduler while its load reads and
/// decodes the next (the import costs more than the read: about 1 µs a timer).
const IMPORTERS: usize = 2;

/// Imports `queue`'s journal, read under `token` (this member's adopt made it current), into
/// the scheduler a page at a time as the pages arrive, on [`IMPORTERS`] blocking threads: the
/// number imported (ids already there are skipped). 0 with the journal off. Returns once every
/// page handed on is imported, also on an error: the pages before it are then in the
/// scheduler, and the caller drops the queue's timers (freeze, take the forwarded).
pub(crate) async fn recover<Q, K, T>(
    shared: &Arc<Shared<Q, K, T>>,
    queue: &Q,
    token: u64,
) -> Result<usize, Error>
where
    Q: QueueName,
    K: Hash + Eq + Clone + Send + Sync + DeserializeOwned + 'static,
    T: Send + DeserializeOwned + 'static,
{
    let Some(j) = &shared.journal else {
        return Ok(0);
    };
    // The reference clock first, the local Instant after: a deadline can only move later.
    let reference = shared.custody.reference_now_us().await?;
    let local = Instant::now();
    let (tx, rx) = mpsc::unbounded_channel::<Vec<SnapshotEntry<K, T>>>();
    let rx = Arc::new(Mutex::new(rx));
    let importers: Vec<_> = (0..IMPORTERS)
        .map(|_| {
            let (rx, scheduler, queue) = (
                Arc::clone(&rx),
                Arc::clone(&shared.scheduler),
                queue.clone(),
            );
            tokio::task::spawn_blocking(move || {
                let mut imported = 0;
                loop {
                    // One importer waits for the next page at a time. A statement of its own:
                    // the guard goes at its end, before the page is imported (in a `while let`
                    // it would be held through the loop's body).
                    let next = rx.lock().blocking_recv();
                    let Some(page) = next else {
                        break;
                    };
                    let frozen = page.into_iter().map(|e| FrozenEntry {
                        id: e.id,
                        at: from_reference(e.deadline_us, reference, local),
                        value: e.value,
                    });
                    imported += scheduler.import(queue.clone(), frozen).imported;
                }
                imported
            })
        })
        .collect();
    let loaded = j
        .journal
        .load_each::<K, T>(queue.as_ref(), token, |page| {
            // The importers end only once this sender is dropped.
            let _ = tx.send(page);
        })
        .await;
    drop(tx);
    let mut imported = 0;
    for importer in importers {
        match importer.await {
            Ok(n) => imported += n,
            Err(e) => {
                return Err(Error::Recovery(format!(
                    "importing the journal panicked: {e}"
                )));
            }
        }
    }
    loaded?;
    Ok(imported)
}
