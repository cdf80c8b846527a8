//! The user's recovery hook: rebuilds a queue from the user's durable store when this member
//! adopts it (its previous owner died or its lease lapsed).

use std::future::Future;
use std::pin::Pin;

use tickwheel::sync::FrozenEntry;

/// A boxed error of a recovery hook.
pub type RecoveryError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The future a [`Recovery`] returns.
pub type RecoveryFuture<K, T> =
    Pin<Box<dyn Future<Output = Result<Vec<FrozenEntry<K, T>>, RecoveryError>> + Send + 'static>>;

/// Returns every timer of a queue that the user's durable store still holds (an MTA re-reads
/// its spool for that queue), with local deadlines. Called when this member adopts a queue,
/// before it dispatches any of it, for each of a dead member's queues at once (they are
/// adopted together), each call on a task of its own; a call that never returns holds up
/// its own queue and the member's placement round, not the other queues' adoptions; entries whose id is already in the
/// scheduler are skipped (de-duplicated by id), as are ids a leftover Redis offer also holds.
///
/// An `Err` (or a panic) is logged, what the adoption imported is dropped and the queue's
/// owner key released: the queue is adopted again after the grace, here or by the member then
/// desired. The queues adopted alongside it go on.
///
/// With [`FleetOptions::journal`](crate::FleetOptions::journal) on, the queue's journal in
/// Redis is imported first (what the previous owners recorded with `Member::journal_put` and
/// `journal_end`); a hook may then return nothing (`|_| async { Ok(Vec::new()) }`), or what
/// the user's store holds that was never journaled.
///
/// Flow control: a queue adopted from a dead owner does not get that owner's hold or limits
/// (they lived in its memory), unless it had sealed an offer of the queue, whose policy is
/// applied before the hook's timers are imported. Otherwise the scheduler keeps whatever it
/// has for the queue (a hold set here during an earlier stay included). A hook that holds an
/// `Arc` of the scheduler may apply a policy kept in the user's store itself
/// (`hold_queue`, `set_concurrency`, `set_rate`) before it returns: it runs before the
/// timers are imported and before the fence lets any of them out.
///
/// Implemented for every `Fn(Q) -> impl Future<Output = Result<Vec<FrozenEntry<K, T>>,
/// RecoveryError>>`:
/// ```
/// use tickwheel_fleet::{Recovery, RecoveryError};
/// use tickwheel::sync::FrozenEntry;
/// fn assert_recovery<R: Recovery<String, u64, String>>(_: R) {}
/// assert_recovery(|queue: String| async move {
///     let _ = queue; // read the spool of `queue` here
///     Ok::<Vec<FrozenEntry<u64, String>>, RecoveryError>(Vec::new())
/// });
/// ```
pub trait Recovery<Q, K, T>: Send + Sync + 'static {
    /// The timers of `queue` (any order).
    fn recover(&self, queue: Q) -> RecoveryFuture<K, T>;
}

impl<Q, K, T, F, Fut> Recovery<Q, K, T> for F
where
    F: Fn(Q) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Vec<FrozenEntry<K, T>>, RecoveryError>> + Send + 'static,
{
    fn recover(&self, queue: Q) -> RecoveryFuture<K, T> {
        Box::pin(self(queue))
    }
}
