//! One id in the journals of two queues of this member: the later deadline wins.
//!
//! A record outlives its timer when a hand-out is dropped (at least once: see
//! [`FencedDue`](crate::FencedDue)) or a write of its end failed; the id may meanwhile be
//! scheduled again in another queue. A load of the first queue then finds the id present in
//! the second (`Scheduler::import` skips it), or the other way round, whichever queue came
//! first. The stale record is always the older one (a schedule of the id is acknowledged
//! after the hand-out it follows), so the id keeps the later of the two deadlines, as an id
//! of one queue does across an offer and the journal (`journal::later_deadlines_win`), and
//! the losing record is ended so that the next load does not meet it again.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use serde::Serialize;
use tickwheel::sync::{Cancel, FrozenEntry, IdState};
use tickwheel_redis::journal::{Op, Pending};

use crate::QueueName;
use crate::journal::SAME_DEADLINE;
use crate::runtime::Shared;

/// An entry of the queue being loaded whose id the import found already present, and
/// whether the queue's journal holds it at this deadline (`false`: an offer's entry, whose
/// deadline a put must bring to the journal if it wins).
pub(crate) struct Claim<K, T> {
    pub entry: FrozenEntry<K, T>,
    pub journaled: bool,
}

impl<K, T> Claim<K, T> {
    /// Claims of entries read from `queue`'s journal.
    pub fn journaled(present: Vec<FrozenEntry<K, T>>) -> Vec<Self> {
        Self::all(present, true)
    }

    /// Claims of entries of an offer (not in the journal at these deadlines).
    pub fn offered(present: Vec<FrozenEntry<K, T>>) -> Vec<Self> {
        Self::all(present, false)
    }

    /// The claims of a handoff's target, which imported the offer (skipping `offered`), then
    /// the queue's journal (skipping `journal`): one claim per id, the later of its two
    /// deadlines, the journal's when they are within [`SAME_DEADLINE`]. O(n).
    pub fn after_handoff(
        offered: Vec<FrozenEntry<K, T>>,
        journal: Vec<FrozenEntry<K, T>>,
    ) -> Vec<Self>
    where
        K: Hash + Eq + Clone,
    {
        let mut by_id: HashMap<K, Self> = HashMap::with_capacity(offered.len());
        for c in Self::offered(offered) {
            by_id.insert(c.entry.id.clone(), c);
        }
        for c in Self::journaled(journal) {
            match by_id.get(&c.entry.id) {
                Some(o) if o.entry.at > c.entry.at + SAME_DEADLINE => {}
                _ => {
                    by_id.insert(c.entry.id.clone(), c);
                }
            }
        }
        by_id.into_values().collect()
    }

    fn all(present: Vec<FrozenEntry<K, T>>, journaled: bool) -> Vec<Self> {
        present
            .into_iter()
            .map(|entry| Claim { entry, journaled })
            .collect()
    }
}

/// How many claims [`later_wins_across`] imported, by source.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Moved {
    /// Claims read from the queue's journal.
    pub journal: usize,
    /// Claims of an offer.
    pub offer: usize,
}

/// After an import of `queue`'s timers at `token` (a journal load, an offer) skipped
/// `claims`, their ids being present already: each id whose timer is in **another** queue
/// and pending keeps the later deadline. A claim later by more than [`SAME_DEADLINE`] moves
/// the id here (the other timer cancelled, the claim imported, its deadline put in this
/// queue's journal if it is not there) and ends the id's record in the other queue's journal
/// if this member holds that queue's token; otherwise the claim's record ends in this
/// queue's journal. Ids in this queue (`later_deadlines_win`'s), in flight or forwarded, or
/// gone since the import are left alone, as is everything with the journal off.
///
/// Best effort: each change is made under the id's stripe lock (in the order of the front's
/// records), the writes are awaited, and a failed one is logged at warn level; a record left
/// unended is resolved the same way at the next load. O(claims) lookups, plus one journal
/// request per claim that changes something. Returns the number of claims imported here.
pub(crate) async fn later_wins_across<Q, K, T>(
    shared: &Arc<Shared<Q, K, T>>,
    queue: &Q,
    token: u64,
    claims: Vec<Claim<K, T>>,
) -> Moved
where
    Q: QueueName,
    K: Hash + Eq + Clone + Send + Sync + Serialize + 'static,
    T: Send + Serialize + 'static,
{
    let Some(j) = &shared.journal else {
        return Moved::default();
    };
    let mut moved = Moved::default();
    let s = &shared.scheduler;
    // (queue, what the write is, its answer)
    let mut writes: Vec<(Q, &str, Pending)> = Vec::new();
    for Claim { entry, journaled } in claims {
        let _stripe = j.stripe(&entry.id);
        let Some(info) = s.lookup(&entry.id) else {
            continue;
        };
        if info.queue == *queue || info.state != IdState::Pending {
            continue;
        }
        let id = entry.id.clone();
        let end = match Op::end_id(&id) {
            Ok(op) => op,
            Err(e) => {
                tracing::warn!(member = %shared.name, error = %e, "an id present in two queues that does not encode: left alone");
                continue;
            }
        };
        if entry.at <= info.deadline + SAME_DEADLINE {
            // The other timer is as late or later: this queue's record is the stale one.
            let p = j.journal.submit(queue.as_ref(), token, vec![end]);
            writes.push((queue.clone(), "the end of the earlier record", p));
            continue;
        }
        // Encoded before anything changes: a put that does not encode leaves the id alone.
        let put = match (!journaled).then(|| Op::put(&id, j.reference_us(entry.at), &entry.value)) {
            None => None,
            Some(Ok(op)) => Some(op),
            Some(Err(e)) => {
                tracing::warn!(member = %shared.name, error = %e, "a later deadline that does not encode: left alone");
                continue;
            }
        };
        let Cancel::Cancelled(old) = s.cancel(&id) else {
            continue;
        };
        if s.import(queue.clone(), [entry]).imported == 0 {
            // This queue froze meanwhile: the other timer goes back as it was.
            let back = FrozenEntry {
                id,
                at: info.deadline,
                value: old,
            };
            s.import(info.queue, [back]);
            continue;
        }
        if journaled {
            moved.journal += 1;
        } else {
            moved.offer += 1;
        }
        if let Some(put) = put {
            let p = j.journal.submit(queue.as_ref(), token, vec![put]);
            writes.push((queue.clone(), "the later deadline", p));
        }
        let other = shared.owned.lock().get(&info.queue).copied();
        match other {
            Some(t) => {
                let p = j.journal.submit(info.queue.as_ref(), t, vec![end]);
                writes.push((info.queue, "the end of the earlier record", p));
            }
            // Its adoption still under way, say: that load met the id first.
            None => {
                tracing::info!(member = %shared.name, queue = ?String::from_utf8_lossy(info.queue.as_ref()),
                "the earlier record of an id moved here left in a queue whose token this member does not hold")
            }
        }
    }
    for (q, what, p) in writes {
        if let Err(e) = p.await {
            tracing::warn!(member = %shared.name, queue = ?String::from_utf8_lossy(q.as_ref()), error = %e,
                "{what} of an id in two queues' journals not written: resolved at the next load");
        }
    }
    moved
}
