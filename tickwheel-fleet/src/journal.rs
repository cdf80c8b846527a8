//! A member's journal of its queues' live timers in Redis ([`FleetOptions::journal`]): the
//! low-level writes a user may make beside its own scheduler calls (the journaled front in
//! `front.rs` makes them itself), and the load an adoption or a handoff's target makes.
//!
//! [`FleetOptions::journal`]: crate::FleetOptions::journal

use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};

use serde::Serialize;
use serde::de::DeserializeOwned;
use tickwheel::sync::FrozenEntry;
use tickwheel::sync::snapshot::{SnapshotEntry, to_reference};
use tickwheel_redis::journal::{Journal, JournalError, Op, Pending};
use tokio::sync::mpsc;

use crate::runtime::Shared;
use crate::{Error, FleetEvent, Member, QueueName};

/// How old the clock anchor may grow before the placement loop reads it again.
const ANCHOR_AGE: Duration = Duration::from_secs(60);

/// The stripes of id locks of the journaled front: enough that two producers rarely meet.
const STRIPES: usize = 256;

/// The journal of a member and its anchor on the reference clock (Redis `TIME`): a local
/// `Instant` read before a reading of the reference clock, µs since the Unix epoch. Shared
/// (an `Arc`) by the member, its fence and every hand-out the fence lets out.
pub(crate) struct MemberJournal {
    pub journal: Journal,
    pub anchor: Mutex<(Instant, u64)>,
    /// Id locks of the journaled front: a call changing an id holds its stripe across the
    /// scheduler change and the submit of its record, so records of one id reach Redis in
    /// the order of the changes (see `front.rs`).
    stripes: Box<[Mutex<()>]>,
    /// Picks an id's stripe (keyed per process: the stripes are this process's alone).
    hasher: RandomState,
}

impl MemberJournal {
    pub fn new(journal: Journal, anchor: (Instant, u64)) -> Self {
        MemberJournal {
            journal,
            anchor: Mutex::new(anchor),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            hasher: RandomState::new(),
        }
    }

    /// `at` on the reference clock (µs since the Unix epoch), through the anchor.
    pub fn reference_us(&self, at: Instant) -> u64 {
        let (local, reference) = *self.anchor.lock();
        to_reference(at, local, reference)
    }

    /// The lock of `id`'s stripe.
    pub fn stripe<K: Hash + ?Sized>(&self, id: &K) -> MutexGuard<'_, ()> {
        let i = self.hasher.hash_one(id) as usize % self.stripes.len();
        self.stripes[i].lock()
    }

    /// Every stripe's lock, in order (a change of many ids: a drain).
    pub fn all_stripes(&self) -> Vec<MutexGuard<'_, ()>> {
        self.stripes.iter().map(|m| m.lock()).collect()
    }
}

impl<Q, K, T> Member<Q, K, T>
where
    Q: QueueName,
    K: Hash + Eq + Clone + Send + Sync + Serialize + 'static,
    T: Send + Serialize + 'static,
{
    /// Records in Redis that `queue` holds the timer `id` due at `at` with `value` (a
    /// schedule, an import, a reschedule to a new deadline), under the token this member
    /// holds for the queue. The low-level call: [`Member::schedule`], [`Member::reschedule`]
    /// and [`FencedDue::retry_at`](crate::FencedDue::retry_at) make the scheduler change and
    /// this write together, in the order of the changes of each id; use this one for changes
    /// made on the scheduler directly (`scheduler().schedule(..)`, an import), beside the
    /// call that made the change, and keep two writes of one id in the order of their
    /// changes yourself. Treat the timer as accepted once
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
    /// or value does not serialize, or the id encodes to over
    /// `tickwheel_redis::journal::MAX_ID_BYTES` (`JournalError::IdTooLong`). The [`Pending`]
    /// resolves to `tickwheel_redis::journal::JournalError::Fenced` once another member holds
    /// the queue.
    pub fn journal_put(&self, queue: &Q, id: &K, at: Instant, value: &T) -> Result<Pending, Error> {
        let (j, token) = self.journal_for(queue)?;
        let deadline_us = j.reference_us(at);
        Ok(j.journal.submit(
            queue.as_ref(),
            token,
            vec![Op::put(id, deadline_us, value)?],
        ))
    }

    /// Records in Redis that the timer `id` of `queue` ended: delivered and confirmed,
    /// cancelled, drained. The low-level call: [`FencedDue::done`](crate::FencedDue::done),
    /// [`Member::cancel`] and [`Member::drain_queue`] end the timer and write its end
    /// together. Until the returned [`Pending`] resolves `Ok`, a death of this member
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
    pub(crate) fn journal_for(&self, queue: &Q) -> Result<(&MemberJournal, u64), Error> {
        let j = self.shared.journal.as_deref().ok_or(Error::JournalOff)?;
        Ok((j, self.token_for(queue)?))
    }

    /// This member's token for `queue` (see [`Member::journal_for`]).
    pub(crate) fn token_for(&self, queue: &Q) -> Result<u64, Error> {
        let token = self.shared.owned.lock().get(queue).copied();
        token.ok_or(Error::NotOwned)
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
/// scheduler, and the caller drops the queue's timers (freeze, take the forwarded). After a
/// whole load, a record whose id has a timer in another queue keeps the later deadline of
/// the two (`crossqueue::later_wins_across`).
pub(crate) async fn recover<Q, K, T>(
    shared: &Arc<Shared<Q, K, T>>,
    queue: &Q,
    token: u64,
) -> Result<usize, Error>
where
    Q: QueueName,
    K: Hash + Eq + Clone + Send + Sync + Serialize + DeserializeOwned + 'static,
    T: Send + Serialize + DeserializeOwned + 'static,
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
                let (mut imported, mut present) = (0, Vec::new());
                loop {
                    // One importer waits for the next page at a time. A statement of its own:
                    // the guard goes at its end, before the page is imported (in a `while let`
                    // it would be held through the loop's body).
                    let next = rx.lock().blocking_recv();
                    let Some(page) = next else {
                        break;
                    };
                    let frozen = page.into_iter().map(|e| e.into_frozen(reference, local));
                    let done = scheduler.import(queue.clone(), frozen);
                    imported += done.imported;
                    present.extend(done.present);
                }
                (imported, present)
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
    let (mut imported, mut present) = (0, Vec::new());
    for importer in importers {
        match importer.await {
            Ok((n, p)) => {
                imported += n;
                present.extend(p);
            }
            Err(e) => {
                return Err(Error::Recovery(format!(
                    "importing the journal panicked: {e}"
                )));
            }
        }
    }
    match loaded {
        // Pages before the bad one are in; the rest comes from the lenient read (the
        // import skips ids already in: this queue's own are not claims, the next step
        // passes over them).
        Err(JournalError::Corrupt { .. }) => {
            let rest = decodable(shared, j, queue, token).await?;
            let done = shared.scheduler.import(queue.clone(), rest);
            imported += done.imported;
            present.extend(done.present);
        }
        Err(e) => return Err(e.into()),
        Ok(_) => {}
    }
    let claims = crate::crossqueue::Claim::journaled(present);
    let moved = crate::crossqueue::later_wins_across(shared, queue, token, claims).await;
    Ok(imported + moved.journal)
}

/// Reads `queue`'s journal under `token` (an adopt or a claim at it made it current) with
/// each deadline converted to a local `Instant`; nothing is imported. Empty with the journal
/// off. O(records).
///
/// # Errors
/// [`Error::Journal`]: Redis unreachable, a record that does not decode, or `Fenced` (a
/// larger token holds the queue now); [`Error::Redis`]: the reference clock unreadable.
pub(crate) async fn load<Q, K, T>(
    shared: &Arc<Shared<Q, K, T>>,
    queue: &Q,
    token: u64,
) -> Result<Vec<FrozenEntry<K, T>>, Error>
where
    Q: QueueName,
    K: Hash + Eq + Clone + Send + Sync + DeserializeOwned + 'static,
    T: Send + DeserializeOwned + 'static,
{
    let Some(j) = &shared.journal else {
        return Ok(Vec::new());
    };
    let entries = match j.journal.load_entries::<K, T>(queue.as_ref(), token).await {
        Ok(entries) => entries,
        Err(JournalError::Corrupt { .. }) => return decodable(shared, j, queue, token).await,
        Err(e) => return Err(e.into()),
    };
    // The reference clock first, the local Instant after: a deadline can only move later.
    let reference = shared.custody.reference_now_us().await?;
    let local = Instant::now();
    Ok(entries
        .into_iter()
        .map(|e| e.into_frozen(reference, local))
        .collect())
}

/// `queue`'s journal (`j`, the member's) read under `token` as raw records, the ones that
/// decode as `K` and `T` converted as [`load`] does; the others are left in Redis, logged at
/// error level and reported ([`FleetEvent::Undecodable`]). Used once a strict load met such
/// a record. A record without a readable deadline still fails it (`JournalError::Corrupt`).
///
/// # Errors
/// As [`load`], but for records that do not decode.
async fn decodable<Q: QueueName, K: DeserializeOwned, T: DeserializeOwned>(
    shared: &Shared<Q, K, T>,
    j: &MemberJournal,
    queue: &Q,
    token: u64,
) -> Result<Vec<FrozenEntry<K, T>>, Error> {
    let records = j.journal.load(queue.as_ref(), token).await?;
    let reference = shared.custody.reference_now_us().await?;
    let local = Instant::now();
    let (mut out, mut bad) = (Vec::with_capacity(records.len()), Vec::new());
    for r in records {
        match r.entry::<K, T>() {
            Ok(e) => out.push(e.into_frozen(reference, local)),
            Err(e) => bad.push((r.id, e.to_string())),
        }
    }
    if !bad.is_empty() {
        tracing::error!(
            member = %shared.name,
            queue = ?String::from_utf8_lossy(queue.as_ref()),
            records = bad.len(),
            first = ?bad.first(),
            "journal records that do not decode: left in Redis, not imported"
        );
        shared.emit(FleetEvent::Undecodable {
            queue: queue.clone(),
            records: bad,
        });
    }
    Ok(out)
}

/// Slack below which two deadlines of one id count as the same: each crossed the reference
/// clock once (µs), and a conversion can round either way.
pub(crate) const SAME_DEADLINE: Duration = Duration::from_millis(1);

/// Before the commit that deletes an offer claimed at `token`: each offered timer whose
/// journal record is earlier than the offer's deadline (by more than [`SAME_DEADLINE`]) is
/// written again with the offer's deadline and value (a retry at the freeze that the source
/// could not journal). Done before the commit, so that a member that dies between its commit
/// and its import leaves the queue's next owner a journal that fires nothing early.
/// `journaled`: the journal's deadline of an id, where it has one. O(offered) plus one
/// journal request (awaited) for the records it rewrites.
///
/// # Errors
/// [`Error::Journal`]: a record that does not serialize, Redis unreachable, or `Fenced`.
pub(crate) async fn offer_deadlines_first<Q, K, T>(
    shared: &Arc<Shared<Q, K, T>>,
    queue: &Q,
    token: u64,
    offered: &[SnapshotEntry<K, T>],
    journaled: impl Fn(&K) -> Option<Instant>,
) -> Result<(), Error>
where
    Q: QueueName,
    K: Serialize,
    T: Serialize,
{
    let Some(j) = &shared.journal else {
        return Ok(());
    };
    let slack = u64::try_from(SAME_DEADLINE.as_micros()).unwrap_or(u64::MAX);
    let mut ops = Vec::new();
    for e in offered {
        let Some(at) = journaled(&e.id) else { continue };
        if e.deadline_us > j.reference_us(at).saturating_add(slack) {
            ops.push(Op::put_entry(e)?);
        }
    }
    if !ops.is_empty() {
        j.journal.submit(queue.as_ref(), token, ops).await?;
    }
    Ok(())
}

/// After a queue's timers came from two sources (an offer, or a leftover offer, and the
/// journal), of which the second's ids already present were skipped by the import: each
/// such id keeps the **later** of its two deadlines in the scheduler (never early, whichever
/// source is stale). The journal needs nothing more: [`offer_deadlines_first`] wrote the
/// offer's later deadlines to it before the commit. `second`: the skipped source's ids and
/// deadlines. Timers in flight are left alone, and so are ids whose timer is in another
/// queue (an earlier record left by a dropped hand-out: `crossqueue::later_wins_across`
/// applies the same rule to them). O(|second|) lookups.
pub(crate) fn later_deadlines_win<Q, K, T>(
    shared: &Shared<Q, K, T>,
    queue: &Q,
    second: Vec<(K, Instant)>,
) where
    Q: QueueName,
    K: Hash + Eq + Clone,
{
    let s = &shared.scheduler;
    for (id, other) in second {
        let Some(info) = s.lookup(&id) else { continue };
        // An id in another queue is `crossqueue::later_wins_across`'s.
        if info.state == tickwheel::sync::IdState::InFlight || info.queue != *queue {
            continue;
        }
        if other > info.deadline + SAME_DEADLINE {
            // The skipped source was later: the scheduler moves to it. An id that left the
            // queue meanwhile is not found: nothing to move.
            let _ = s.reschedule(&id, other);
        }
    }
}
