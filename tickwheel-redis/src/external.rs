//! Steps under an external epoch: a coordinator (an etcd owner key's revision, say) hands
//! out fencing tokens, and the record's epoch becomes that token instead of counting by one.
//!
//! `adopt` takes a queue whose holder is gone; `claim_at` and `reclaim_at` are `claim` and
//! `reclaim` with the epoch given. Each refuses a token not above the record's epoch with
//! [`Rejection::Fenced`](crate::Rejection::Fenced) (a newer holder exists: the caller is fenced off; see [`Error::is_fenced`]), so Redis itself
//! rejects a stale holder, Kleppmann's fencing check made by the data's keeper. Every other
//! step keeps checking (name, boot, epoch) equality, so a member that still holds an older
//! token is refused by all of them.

use std::hash::Hash;

use serde::de::DeserializeOwned;
use tickwheel::sync::Scheduler;

use crate::custody::{Custody, CustodyError, Incoming, Received};
use crate::error::Error;
use crate::protocol::{ADOPT, Applied, CLAIM, Protocol, RECLAIM};
use crate::record::{State, Token};

impl Protocol {
    /// One step at an external epoch, after the durability check.
    async fn at_epoch(
        &self,
        script: &redis::Script,
        queue: &[u8],
        epoch: u64,
        token: &Token,
    ) -> Result<Applied, Error> {
        self.check_durability().await?;
        self.step(script, queue, token, Some(epoch)).await
    }

    /// adopt at the external epoch `epoch` (≥ 1): makes this member the holder of `queue`.
    ///
    /// - no record → OWNED by this member at `epoch`;
    /// - OWNED or PREPARING → OWNED by this member at `epoch`; an unsealed offer's chunks are
    ///   deleted (its source still holds the values: a dead source's durable store is re-read
    ///   by the new holder) and recorded as none taken, so a live but fenced source gets
    ///   every value back;
    /// - OFFERED or CLAIMED (a sealed offer nobody committed) → CLAIMED by this member at
    ///   `epoch`, deadline now + lease: fetch, make durable and commit the leftover through
    ///   [`Custody::resume`](crate::Custody::resume) (de-duplicate by id against the store).
    ///
    /// A retry with the same token reports [`Effect::Repeated`](crate::Effect::Repeated).
    /// One round trip; O(chunks) in Redis when it deletes an unsealed offer.
    ///
    /// # Errors
    /// [`Rejection::Fenced`](crate::Rejection::Fenced) if `epoch` ≤ the record's epoch (nothing changed);
    /// [`Rejection::OtherQueue`](crate::Rejection::OtherQueue); [`Error::UnexpectedReply`] for `epoch` 0;
    /// [`Error::Unavailable`] (retry with the same token); [`Error::UnsafeServer`].
    pub async fn adopt(&self, queue: &[u8], epoch: u64, token: &Token) -> Result<Applied, Error> {
        self.at_epoch(&ADOPT, queue, epoch, token).await
    }

    /// claim at the external epoch `epoch`: as [`Protocol::claim`] (OFFERED for this member,
    /// for anyone, or lapsed → CLAIMED by this member), but the record's epoch becomes
    /// `epoch`, which must exceed the current one.
    ///
    /// # Errors
    /// As [`Protocol::claim`], and [`Rejection::Fenced`](crate::Rejection::Fenced) if `epoch` ≤ the record's epoch.
    pub async fn claim_at(
        &self,
        queue: &[u8],
        epoch: u64,
        token: &Token,
    ) -> Result<Applied, Error> {
        self.at_epoch(&CLAIM, queue, epoch, token).await
    }

    /// reclaim at the external epoch `epoch`: as [`Protocol::reclaim`] (PREPARING, OFFERED
    /// or CLAIMED past its deadline → CLAIMED by this member), the record's epoch becoming
    /// `epoch`, which must exceed the current one.
    ///
    /// # Errors
    /// As [`Protocol::reclaim`], and [`Rejection::Fenced`](crate::Rejection::Fenced) if `epoch` ≤ the record's epoch.
    pub async fn reclaim_at(
        &self,
        queue: &[u8],
        epoch: u64,
        token: &Token,
    ) -> Result<Applied, Error> {
        self.at_epoch(&RECLAIM, queue, epoch, token).await
    }
}

/// What [`Custody::adopt`] found.
pub enum Adopted<'a, Q, K, T> {
    /// The queue is OWNED by this member at the new epoch; nothing of it is left in Redis.
    /// Rebuild it from the durable store.
    Owned(Applied),
    /// A sealed offer nobody committed is CLAIMED by this member at the new epoch: fetch it,
    /// make it durable, commit, import (as after a claim), besides rebuilding from the store.
    Leftover(Incoming<'a, Q, K, T>),
}

impl<Q: AsRef<[u8]>, K, T> std::fmt::Debug for Adopted<'_, Q, K, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Adopted::Owned(a) => f.debug_tuple("Owned").field(a).finish(),
            Adopted::Leftover(i) => f.debug_tuple("Leftover").field(i.record()).finish(),
        }
    }
}

impl Custody {
    /// [`Protocol::adopt`] at `epoch`, retried with one token while Redis is unreachable.
    ///
    /// # Errors
    /// As [`Protocol::adopt`] ([`Rejection::Fenced`](crate::Rejection::Fenced): `epoch` is stale); [`Error::Unavailable`]
    /// after [`CustodyOptions::retry_for`](crate::CustodyOptions::retry_for).
    pub async fn adopt<Q: AsRef<[u8]>, K, T>(
        &self,
        queue: Q,
        epoch: u64,
    ) -> Result<Adopted<'_, Q, K, T>, Error> {
        let t = Token::generate();
        let a = self
            .retrying(|| self.protocol().adopt(queue.as_ref(), epoch, &t))
            .await?;
        if a.record.state == State::Claimed {
            Ok(Adopted::Leftover(Incoming::new(self, queue, a.record)?))
        } else {
            Ok(Adopted::Owned(a))
        }
    }

    /// [`Protocol::claim_at`], retried with one token; then [`Incoming::fetch`].
    ///
    /// # Errors
    /// As [`Protocol::claim_at`]; [`Error::Unavailable`] after the retry time.
    pub async fn claim_at<Q: AsRef<[u8]>, K, T>(
        &self,
        queue: Q,
        epoch: u64,
    ) -> Result<Incoming<'_, Q, K, T>, Error> {
        self.take(&CLAIM, queue, Some(epoch)).await
    }

    /// [`Protocol::reclaim_at`], retried with one token; then [`Incoming::fetch`].
    ///
    /// # Errors
    /// As [`Protocol::reclaim_at`]; [`Error::Unavailable`] after the retry time.
    pub async fn reclaim_at<Q: AsRef<[u8]>, K, T>(
        &self,
        queue: Q,
        epoch: u64,
    ) -> Result<Incoming<'_, Q, K, T>, Error> {
        self.take(&RECLAIM, queue, Some(epoch)).await
    }

    /// Fetches (unless the caller fetched already), commits (retried until Redis answers, as
    /// in [`Custody::receive`]) and imports a claim: the target side after
    /// [`Custody::claim_at`] or an [`Adopted::Leftover`]. A caller with a durable step of its
    /// own between the fetch and the commit (a journal brought up to the offer's deadlines,
    /// say) fetches, makes it, and then calls this; what it changed through
    /// [`Incoming::fetched_mut`] is what is imported.
    ///
    /// # Errors
    /// As the [`Incoming`] steps.
    pub async fn complete<Q, K, T>(
        &self,
        mut incoming: Incoming<'_, Q, K, T>,
        scheduler: &Scheduler<Q, K, T>,
    ) -> Result<Received<K, T>, CustodyError<K, T>>
    where
        Q: AsRef<[u8]> + Hash + Eq + Clone,
        K: Hash + Eq + Clone + DeserializeOwned,
        T: DeserializeOwned,
    {
        if incoming.fetched_mut().is_none() {
            incoming.fetch().await?;
        }
        loop {
            match incoming.commit().await {
                Err(e) if e.is_retryable() => {
                    tracing::warn!(error = %e, "commit outcome unknown; retrying");
                    tokio::time::sleep(self.options().poll_interval).await;
                }
                Err(e) => return Err(e),
                Ok(_) => break,
            }
        }
        incoming.import(scheduler)
    }
}
