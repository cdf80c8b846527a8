//! The target side of a handoff, one method per step.

use std::hash::Hash;
use std::time::Instant;

use serde::de::DeserializeOwned;
use tickwheel::sync::{Imported, Scheduler};

use super::{Custody, CustodyError};
use crate::chunk::{Chunk, SnapshotEntry};
use crate::error::{Error, Rejection};
use crate::policy::{FlowPolicy, PolicyError, PolicyText};
use crate::record::{Record, State, Token};

/// Fetched entries, the reference clock at the fetch (µs) and the local `Instant` after it.
type Fetched<K, T> = (Vec<SnapshotEntry<K, T>>, u64, Instant);

/// What [`Incoming::import`] and [`Custody::receive`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received<K, T> {
    /// The epoch this member now owns the queue under: stamp every dispatch of its timers
    /// with (id, epoch) so a sink can de-duplicate across a crash.
    pub epoch: u64,
    /// What [`Scheduler::import`] did (ids already present are reported, not doubled).
    pub imported: Imported<K, T>,
}

/// The target side of moving one queue: a claim this member holds. Created by
/// [`Custody::claim`], [`Custody::reclaim`] or [`Custody::resume`]; then
/// [`fetch`](Self::fetch) → (the caller makes the entries durable) → [`commit`](Self::commit)
/// → [`import`](Self::import). A step that fails keeps the state: call it again.
///
/// # Example
/// ```no_run
/// # async fn demo(c: tickwheel_redis::Custody, s: tickwheel::sync::Scheduler<String, u64, String>)
/// # -> Result<(), tickwheel_redis::CustodyError<u64, String>> {
/// let mut inc = c.claim("example.com".to_string()).await?;
/// let epoch = inc.epoch();
/// for e in inc.fetch().await? {
///     // write (e.id, epoch, e.deadline_us, e.value) to a durable spool
/// #   let _ = (e, epoch);
/// }
/// inc.commit().await?;                 // CLAIMED → OWNED: the queue is this member's
/// let received = inc.import(&s)?;      // dispatched from now on
/// # let _ = received; Ok(()) }
/// ```
pub struct Incoming<'a, Q, K, T> {
    custody: &'a Custody,
    queue: Q,
    record: Record,
    source_epoch: u64,
    /// The claimed offer's stored flow policy (the record loses it at the commit).
    policy: Option<String>,
    /// Fetched entries, and (reference µs, local Instant read after it) of the fetch.
    fetched: Option<Fetched<K, T>>,
    committed: bool,
    token: Option<Token>,
}

impl<'a, Q: AsRef<[u8]>, K, T> Incoming<'a, Q, K, T> {
    pub(crate) fn new(custody: &'a Custody, queue: Q, record: Record) -> Result<Self, Error> {
        let mine = record.state == State::Claimed && record.is_held_by(custody.protocol.member());
        let source_epoch = record.source.as_ref().map(|(_, e)| *e);
        match source_epoch {
            Some(source_epoch) if mine => Ok(Incoming {
                custody,
                queue,
                policy: record.policy.clone(),
                record,
                source_epoch,
                fetched: None,
                committed: false,
                token: None,
            }),
            _ => Err(Error::Rejected(Box::new(Rejection::WrongState(record)))),
        }
    }

    /// The epoch of the claim: the queue's epoch once committed. Stamp dispatches with it.
    pub fn epoch(&self) -> u64 {
        self.record.epoch
    }

    /// The record as the claim (or the last step) left it.
    pub fn record(&self) -> &Record {
        &self.record
    }

    /// The queue.
    pub fn queue(&self) -> &Q {
        &self.queue
    }

    /// The flow policy the offer was sealed with (held or not, concurrency and rate
    /// limits), which [`import`](Self::import) applies before it imports a timer; `Ok(None)`
    /// for an offer sealed without one (nothing is applied). A caller that puts timers of
    /// the queue into the scheduler before the import (e.g. from its own store) applies it
    /// first with [`Scheduler::apply_flow_policy`]. O(1).
    ///
    /// # Errors
    /// [`PolicyError`] for a policy this build cannot read (a newer format):
    /// [`fetch`](Self::fetch) refuses the offer then.
    pub fn flow_policy(&self) -> Result<Option<FlowPolicy>, PolicyError> {
        self.policy.as_deref().map(FlowPolicy::decode).transpose()
    }

    /// The fetched entries, to change before the import (e.g. stamp each value with
    /// [`epoch`](Self::epoch)); `None` before [`fetch`](Self::fetch) or after the import.
    /// An entry removed here is the caller's: the import will not see it.
    ///
    /// ```no_run
    /// # async fn demo(mut inc: tickwheel_redis::Incoming<'_, String, u64, (u64, String)>) {
    /// let epoch = inc.epoch();
    /// for e in inc.fetched_mut().into_iter().flatten() {
    ///     e.value.0 = epoch;
    /// }
    /// # }
    /// ```
    pub fn fetched_mut(&mut self) -> Option<&mut Vec<SnapshotEntry<K, T>>> {
        self.fetched.as_mut().map(|(entries, _, _)| entries)
    }
}

impl<Q, K, T> Incoming<'_, Q, K, T>
where
    Q: AsRef<[u8]> + Hash + Eq + Clone,
    K: Hash + Eq + Clone + DeserializeOwned,
    T: DeserializeOwned,
{
    /// Reads every chunk of the claimed offer and checks each one (version, queue, the
    /// source's epoch, index), the total count and the offer's flow policy, then reads the reference clock (Redis
    /// `TIME`, then the local `Instant` after it) for the import. Read only: nothing changes
    /// in Redis. Returns the entries (deadlines in µs on the reference clock) for the
    /// caller's durable step. Fetching again re-reads.
    ///
    /// # Errors
    /// [`CustodyError::Chunk`] (corrupt, unknown version, another queue/epoch/index),
    /// [`CustodyError::Incomplete`], [`CustodyError::Policy`] (a flow policy this build
    /// cannot read: commit nothing, leave the offer to a member that can),
    /// [`CustodyError::Protocol`] (`Fenced`: another member took the claim over;
    /// `MissingChunk`; `Unavailable`: call again).
    pub async fn fetch(&mut self) -> Result<&[SnapshotEntry<K, T>], CustodyError<K, T>> {
        if self.committed {
            return Err(CustodyError::Step {
                called: "fetch",
                expected: "import",
            });
        }
        self.flow_policy()
            .map_err(|error| CustodyError::Policy { error })?;
        let c = self.custody;
        let (q, epoch) = (self.queue.as_ref(), self.record.epoch);
        let renew_every = c.protocol.options().lease / 3;
        let mut renewed = Instant::now();
        let mut entries = Vec::new();
        for index in 0..self.record.chunks {
            let bytes = c.retrying(|| c.protocol.fetch(q, epoch, index)).await?;
            let chunk = Chunk::<K, T>::decode(&bytes, q, self.source_epoch, index)
                .map_err(|error| CustodyError::Chunk { index, error })?;
            entries.extend(chunk.entries);
            if renewed.elapsed() >= renew_every {
                let t = Token::generate();
                c.retrying(|| c.protocol.renew(q, epoch, &t)).await?;
                renewed = Instant::now();
            }
        }
        let found = entries.len() as u64;
        if found != self.record.entries {
            return Err(CustodyError::Incomplete {
                expected: self.record.entries,
                found,
            });
        }
        // The local Instant read after the reference clock: deadlines only move later.
        let (_, reference, local) = c.reference_reading().await?;
        let (entries, _, _) = self.fetched.insert((entries, reference, local));
        Ok(entries)
    }

    /// `commit` (CLAIMED → OWNED by this member; the offer's data deleted in Redis), retried
    /// with one token. Call it once the fetched entries are durable on this member.
    ///
    /// # Errors
    /// [`CustodyError::Step`] before [`fetch`](Self::fetch); [`CustodyError::Protocol`]
    /// (`Fenced`: the claim was taken over, drop the fetched copy; `Unavailable`: call
    /// again).
    pub async fn commit(&mut self) -> Result<&Record, CustodyError<K, T>> {
        if self.fetched.is_none() || self.committed {
            return Err(CustodyError::Step {
                called: "commit",
                expected: if self.committed { "import" } else { "fetch" },
            });
        }
        let c = self.custody;
        let t = self.token.get_or_insert_with(Token::generate).clone();
        let (q, epoch) = (self.queue.as_ref(), self.record.epoch);
        let a = c.retrying(|| c.protocol.commit(q, epoch, &t)).await?;
        self.token = None;
        self.committed = true;
        self.record = a.record;
        Ok(&self.record)
    }

    /// Puts the committed entries into `scheduler` ([`Scheduler::import`], idempotent by id),
    /// each deadline converted with [`from_reference`](tickwheel::sync::snapshot::from_reference) against the fetch's reading, after
    /// applying the offer's flow policy to the queue there ([`Scheduler::apply_flow_policy`]: a held
    /// queue is held before its first timer arrives, so none is handed out in between; the
    /// concurrency and rate limits replace the scheduler's; nothing for an offer without a
    /// policy) and unfreezing it (a queue this member offered away before is frozen until it
    /// comes back). O(entries + shards).
    ///
    /// # Errors
    /// [`CustodyError::Step`] before [`commit`](Self::commit) (nothing is dispatched before
    /// it) or if already imported.
    pub fn import(
        &mut self,
        scheduler: &Scheduler<Q, K, T>,
    ) -> Result<Received<K, T>, CustodyError<K, T>> {
        if !self.committed {
            return Err(CustodyError::Step {
                called: "import",
                expected: if self.fetched.is_some() {
                    "commit"
                } else {
                    "fetch"
                },
            });
        }
        let Some((entries, reference, local)) = self.fetched.take() else {
            return Err(CustodyError::Step {
                called: "import",
                expected: "(none: imported)",
            });
        };
        let entries = entries.into_iter().map(|e| e.into_frozen(reference, local));
        // The hold and limits first: no timer of a held queue may be handed out here.
        // Checked at fetch, so this decodes.
        if let Ok(Some(policy)) = self.flow_policy() {
            scheduler.apply_flow_policy(&self.queue, &policy);
        }
        // A queue this member offered away earlier is still frozen here (to refuse its
        // producers); committed, it is this member's again.
        scheduler.unfreeze_queue(&self.queue);
        Ok(Received {
            epoch: self.record.epoch,
            imported: scheduler.import(self.queue.clone(), entries),
        })
    }
}
