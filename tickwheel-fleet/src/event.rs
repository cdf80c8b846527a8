//! What a member reports about itself, for logs and tests.

/// One change in a member's state, sent on [`Member::events`](crate::Member::events) (a
/// broadcast channel: a slow receiver misses the oldest events and is told how many).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FleetEvent<Q> {
    /// Registered under a lease (at join).
    Joined {
        /// Boot id of this process.
        boot: String,
        /// etcd lease id.
        lease: i64,
    },
    /// Became the dispatching owner of `queue` under `token`.
    Acquired {
        /// The queue.
        queue: Q,
        /// Its fencing token (the owner key's etcd revision).
        token: u64,
        /// How it came.
        how: Acquisition,
    },
    /// Handed `queue` to `to` (rebalancing or leave), after `to` committed.
    Released {
        /// The queue.
        queue: Q,
        /// The new owner's name.
        to: String,
    },
    /// Lost `queue` without handing it over (its owner key changed hands or vanished, e.g.
    /// after this member's lease lapsed).
    Lost {
        /// The queue.
        queue: Q,
    },
    /// Records of `queue`'s journal whose id or value does not decode as this program's
    /// types (written by another build of it, say) were left in Redis and not imported:
    /// the queue is taken without them rather than left unowned, since every adopter would
    /// fail on them alike. Their ids, as stored (MessagePack bytes); the message says why.
    Undecodable {
        /// The queue.
        queue: Q,
        /// Each skipped record's stored id and the decoder's message.
        records: Vec<(Vec<u8>, String)>,
    },
    /// The lease lapsed by this member's clock, or etcd said it is gone: every queue is
    /// fenced off (nothing of it dispatched) until the member rejoins.
    Fenced,
    /// Registered again under a new lease after being fenced (same name and boot).
    Rejoined {
        /// The new etcd lease id.
        lease: i64,
    },
}

/// How a queue was acquired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquisition {
    /// It had no live owner: the recovery hook rebuilt it (after the queue's journal in Redis
    /// when [`FleetOptions::journal`](crate::FleetOptions::journal) is on), plus a leftover
    /// offer in Redis.
    Adopted {
        /// Timers imported from the journal and from what the recovery hook returned (an id
        /// the journal already gave counts once).
        recovered: usize,
        /// Timers of a leftover sealed offer that were imported.
        leftover: usize,
    },
    /// Handed over by its previous owner (claim, fetch, commit, import; with
    /// [`FleetOptions::journal`](crate::FleetOptions::journal) on, then the queue's journal).
    HandedOver {
        /// Timers imported from the offer.
        imported: usize,
        /// Timers imported from the queue's journal that the offer did not carry (0 with the
        /// journal off): a timer the source no longer held, yet never ended in the journal.
        journaled: usize,
    },
}

/// A short form of an event for the log.
pub(crate) struct DebugEvent<'a, Q>(pub(crate) &'a FleetEvent<Q>);

impl<Q> std::fmt::Debug for DebugEvent<'_, Q> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            FleetEvent::Joined { lease, .. } => write!(f, "joined (lease {lease})"),
            FleetEvent::Acquired { token, how, .. } => {
                write!(f, "acquired (token {token}, {how:?})")
            }
            FleetEvent::Released { to, .. } => write!(f, "released to {to}"),
            FleetEvent::Lost { .. } => write!(f, "lost a queue"),
            FleetEvent::Undecodable { records, .. } => {
                write!(f, "{} journal records undecodable", records.len())
            }
            FleetEvent::Fenced => write!(f, "fenced"),
            FleetEvent::Rejoined { lease } => write!(f, "rejoined (lease {lease})"),
        }
    }
}
