//! The dispatch filter: a `Due` leaves the member only with its queue's fencing token, and
//! only while this member owns the queue and its lease is valid by its own monotonic clock.
//!
//! Kleppmann ("How to do distributed locking", 2016): a lease alone does not give mutual
//! exclusion, so each dispatched `Due` carries the token (the owner key's etcd revision) and
//! whatever holds the data should reject a token lower than one it has seen.

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tickwheel::sync::Due;

use crate::journal::MemberJournal;

/// A `Due` handed out under a fencing token: `token` is the etcd revision of the queue's owner
/// key when this member became its owner. Tokens of one queue rise with every change of owner.
///
/// With [`FleetOptions::journal`](crate::FleetOptions::journal) on, end it with
/// [`FencedDue::done`] or [`FencedDue::retry_at`]: each changes the scheduler and writes the
/// queue's journal (the end, or the new deadline) under `token`. A hand-out itself writes
/// nothing, so a timer in flight when this member dies comes back at the queue's next owner.
///
/// **Dropping it** (or `due`, or taking `due`'s value) ends the timer in the scheduler as
/// delivered, as with any `Due`, and writes nothing: its record stays in the journal, so the
/// queue's next owner (after a death, or an adoption after a handoff) delivers it again — at
/// least once, never lost — and the record stays in Redis until a later write of the same id
/// in that queue replaces or ends it. Scheduled again in **another** queue, the id has two
/// records: a member that loads both queues keeps the later deadline of the two and ends the
/// other record (the crate docs' journal section). Without the journal, dropping it is how
/// a hand-out ends.
pub struct FencedDue<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> {
    /// The queue's fencing token at hand-out.
    pub token: u64,
    /// The timer (mark it done by dropping it or taking its value, as with any `Due`; see
    /// the type's docs for the journal).
    pub due: Due<Q, K, T>,
    /// The member's journal (`None`: off), for [`FencedDue::done`] and
    /// [`FencedDue::retry_at`].
    pub(crate) journal: Option<Arc<MemberJournal>>,
}

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> FencedDue<Q, K, T> {
    /// Whether this hand-out writes the journal when ended ([`FencedDue::done`],
    /// [`FencedDue::retry_at`]): the member that handed it out has
    /// [`FleetOptions::journal`](crate::FleetOptions::journal) on.
    pub fn is_journaled(&self) -> bool {
        self.journal.is_some()
    }
}

impl<Q, K, T> fmt::Debug for FencedDue<Q, K, T>
where
    Q: Hash + Eq + Clone + fmt::Debug,
    K: Hash + Eq + Clone + fmt::Debug,
    T: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencedDue")
            .field("token", &self.token)
            .field("due", &self.due)
            .field("journaled", &self.journal.is_some())
            .finish()
    }
}

/// The least delay before a timer refused by [`Fence::admit`] is due again: 10 ms.
pub const RECHECK: Duration = Duration::from_millis(10);

#[derive(Default)]
struct State {
    /// Queue bytes → token, for the queues this member may dispatch.
    tokens: HashMap<Vec<u8>, u64>,
    /// End of the lease by this member's monotonic clock; `None`: fenced (no lease).
    valid_until: Option<Instant>,
}

/// The member's view of what it may dispatch. Cheap to clone (an `Arc` inside); every clone
/// sees the member's updates.
#[derive(Clone, Default)]
pub struct Fence {
    state: Arc<Mutex<State>>,
    /// The member's journal, handed to each [`FencedDue`] (`None`: off).
    journal: Option<Arc<MemberJournal>>,
}

impl fmt::Debug for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.state.lock();
        f.debug_struct("Fence")
            .field("queues", &s.tokens.len())
            .field("valid_until", &s.valid_until)
            .field("journaled", &self.journal.is_some())
            .finish()
    }
}

impl Fence {
    /// A fence whose hand-outs write `journal` when ended (`None`: the journal is off).
    pub(crate) fn journaled(journal: Option<Arc<MemberJournal>>) -> Self {
        Fence {
            state: Arc::default(),
            journal,
        }
    }

    /// The token under which `queue` may be dispatched now: `Some` only if this member owns
    /// the queue and `Instant::now()` (monotonic) is before the lease end, which is the send
    /// time of the last acknowledged keep-alive plus the TTL etcd granted minus the margin.
    /// O(1) (a hash lookup under a mutex).
    pub fn token(&self, queue: &[u8]) -> Option<u64> {
        self.token_at(queue, Instant::now())
    }

    /// [`Fence::token`] at a given instant (`None` at or after the lease end).
    pub fn token_at(&self, queue: &[u8], now: Instant) -> Option<u64> {
        let s = self.state.lock();
        match s.valid_until {
            Some(end) if now < end => s.tokens.get(queue).copied(),
            _ => None,
        }
    }

    /// The lease end by this member's monotonic clock; `None` while fenced.
    pub fn valid_until(&self) -> Option<Instant> {
        self.state.lock().valid_until
    }

    /// Whether the lease is valid now (the member is not self-fenced).
    pub fn is_valid(&self) -> bool {
        self.valid_until().is_some_and(|end| Instant::now() < end)
    }

    /// Lets `due` out with its queue's token, or puts it back: when its queue is not
    /// fenced-valid now, the timer is retried (pending again, or forwarded if the queue is
    /// frozen) at its own deadline or [`RECHECK`] from now, whichever is later — so a
    /// dispatcher does not pop the same refused timer in a busy loop — and `None` is
    /// returned. This is the filter for `Scheduler::pop_due`, the thread dispatcher
    /// (`spawn_dispatcher`) and `due_stream`. The fence of a member with the journal on
    /// (`Member::fence`) lets each `Due` out journaled: see [`FencedDue::done`]. O(1).
    pub fn admit<Q, K, T>(&self, due: Due<Q, K, T>) -> Option<FencedDue<Q, K, T>>
    where
        Q: Hash + Eq + Clone + AsRef<[u8]>,
        K: Hash + Eq + Clone,
    {
        match self.token(due.queue().as_ref()) {
            Some(token) => Some(FencedDue {
                token,
                due,
                journal: self.journal.clone(),
            }),
            None => {
                let at = due.deadline().max(Instant::now() + RECHECK);
                // Err only when the scheduler is gone or the id's shard is full: the value is
                // then dropped with the Due, as the scheduler itself would.
                if let Err(e) = due.retry_at(at) {
                    tracing::warn!(error = %e, "a fenced-off timer could not be put back");
                }
                None
            }
        }
    }

    /// Extends the lease end; never moves it earlier than a later acknowledgement set it
    /// (replies can arrive out of order).
    pub(crate) fn extend(&self, end: Instant) {
        let mut s = self.state.lock();
        if s.valid_until.is_none_or(|e| e < end) {
            s.valid_until = Some(end);
        }
    }

    pub(crate) fn grant(&self, queue: &[u8], token: u64) {
        self.state.lock().tokens.insert(queue.to_vec(), token);
    }

    pub(crate) fn revoke(&self, queue: &[u8]) -> Option<u64> {
        self.state.lock().tokens.remove(queue)
    }

    pub(crate) fn revoke_all(&self) {
        let mut s = self.state.lock();
        s.tokens.clear();
        s.valid_until = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_needs_ownership_and_a_valid_lease() {
        let f = Fence::default();
        let now = Instant::now();
        f.grant(b"q", 7);
        assert_eq!(f.token_at(b"q", now), None, "no lease yet");
        f.extend(now + Duration::from_secs(1));
        assert_eq!(f.token_at(b"q", now), Some(7));
        assert_eq!(f.token_at(b"r", now), None, "not owned");
        assert_eq!(
            f.token_at(b"q", now + Duration::from_secs(1)),
            None,
            "lease end"
        );
        f.extend(now + Duration::from_millis(500));
        assert_eq!(
            f.valid_until(),
            Some(now + Duration::from_secs(1)),
            "never earlier"
        );
        f.revoke_all();
        assert_eq!(f.token_at(b"q", now), None);
    }

    #[test]
    fn admit_puts_an_unfenced_due_back() {
        let now = Instant::now();
        let sched: tickwheel::sync::Scheduler<String, u32, ()> =
            tickwheel::sync::Scheduler::builder().origin(now).build();
        sched.schedule("q".into(), 1, now, ()).ok();
        sched.schedule("r".into(), 2, now, ()).ok();
        let f = Fence::default();
        f.grant(b"q", 3);
        f.extend(now + Duration::from_secs(60));
        let out: Vec<_> = sched.pop_due(now, 10).filter_map(|d| f.admit(d)).collect();
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].token, *out[0].due.id()), (3, 1));
        drop(out);
        assert_eq!(sched.len(), 1, "r is pending again");
        assert_eq!(sched.pop_due(now, 10).count(), 0, "not due again at once");
    }
}
