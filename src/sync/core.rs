//! The scheduler's shared state: [`Inner`], which holds the [`Shard`]s, whose done lists
//! ([`DoneHome`]) link back to it. These types contain each other, so they live together.
//!
//! [`Shard`]: a shard's state mutex, and beside it the list of its **done** entries —
//! in-flight timers whose `Due` has been dropped or consumed, not yet finished in the state.
//!
//! A `Due` ends the in-flight state when it is done. Finishing it under the shard lock
//! (remove the id, leave the queue, free the entry) cost the dispatcher one shard lock per
//! timer, taken against the producers. Instead the `Due` pushes its entry index onto the
//! shard's done list, under a small lock of its own, and the shard state catches up later,
//! under its lock, **before anything can tell**: the only things a finish changes are what
//! the id and its queue answer while in flight, and the in-flight counts. So
//!
//! - every operation that reads those settles first: [`Shard::with`] settles on every lock
//!   (counts, `queues`, stats, `next_deadline`), and `pop_due` settles each shard it locks
//!   for its merge ([`Shard::lock_settled`]), which also keeps the done lists short (a
//!   shard's list holds at most the `Due`s done since a `pop_due` last found it due, so
//!   memory stays bounded by the timers popped);
//! - `schedule`, `reschedule` and `cancel` lock with [`Shard::lock_lazy`] and settle only
//!   when they meet an in-flight id (then look again); `drain_queue` settles only when its
//!   queue has in-flight members here.
//!
//! A finish therefore takes effect at the moment the `Due` is done, as before: an operation
//! that starts after it (in the same thread, or synchronized with it) takes the done
//! list's lock after the push, so it sees the entry there, and finishes it first. An entry
//! on the list is still `InFlight` in the state, and only its own `Due` frees it, so it
//! cannot be reused or finished twice meanwhile.
//!
//! Settling finishes entries, and a finished entry's id and queue name (the shard's copies)
//! are dropped: into the settling operation's `Trash`, dropped after the shard lock (see
//! `trash.rs`), never under it.
//!
//! Beside them each shard publishes its **due bound** ([`ShardState::due_from`]: no timer of
//! the shard is due at a tick below it), stored when its state lock is released
//! ([`StateGuard`]), so that `pop_due` reads it without the lock and locks only the shards
//! that may have something due: a dispatcher's idle polls take no lock at all, and producers
//! scheduling on the other shards do not wait for its merge. The bound is stored only when it
//! changes, which a producer does only when its deadline is earlier than every pending one.
//!
//! Lock order: the done list's lock is a leaf. It is taken alone (by a `Due`) or under its
//! shard's lock (to settle), never the other way round, and never with the signal lock.

use std::hash::{BuildHasherDefault, Hash};
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Weak};

use super::hash::ShardHasher;
use super::observe::Observer;
use super::padded::Padded;
use super::shard::{DoneList, ShardState};
use super::signal::Signal;
use super::trash::Trash;
use crate::clock::TickClock;
use crate::loom::{AtomicU64, Mutex, MutexGuard, Ordering};

/// State shared by the scheduler and its batches.
pub(crate) struct Inner<Q, K, T> {
    /// Lock order: ascending index; the signal lock is never held with any of these.
    pub(crate) shards: Box<[Padded<Shard<Q, K, T>>]>,
    pub(crate) signal: Arc<Signal>,
    /// Picks an id's shard; unseeded, so the same ids land on the same shards in every run
    /// of a build (delivery order never depends on it anyway). See `hash.rs`.
    pub(crate) hasher: BuildHasherDefault<ShardHasher>,
    pub(crate) clock: TickClock,
    /// The name given to the builder, if any.
    pub(crate) name: Option<Arc<str>>,
    /// Metrics and events (features `metrics`, `tracing`); a no-op without them.
    pub(crate) observer: Observer,
    /// Global schedule order, taken under the shard lock (so it rises within a shard).
    /// Padded: the producers write it on every schedule; the fields above are read-only,
    /// and the `Arc`'s counts (written per `pop_due`) sit in the padding before `Inner`.
    pub(crate) seq: Padded<AtomicU64>,
}

impl<Q, K, T> Inner<Q, K, T> {
    /// The next `seq` (schedule order); taken under the shard lock.
    pub(crate) fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }
}

/// One shard: its state, and the entries whose `Due` is done (see the module doc).
///
/// The scheduler keeps its shards [`Padded`], and the done list is padded in its own
/// allocation (each `Due` holds an `Arc` of it): producers write the state's lock, the
/// dispatcher writes the done list and its reference count, and neither shares a cache
/// line with the other.
#[derive(Debug)]
pub(crate) struct Shard<Q, K, T> {
    state: Mutex<ShardState<Q, K, T>>,
    /// The state's [`ShardState::due_from`] as of its last unlock, so that `pop_due` can
    /// pass over a shard with nothing due without taking its lock. Its own lines: every
    /// `pop_due` reads it, and it is written only when it changes (by a `pop_due`, or by a
    /// producer whose deadline is earlier than every pending one here).
    due_from: Padded<DueBound>,
    done: Arc<Padded<DoneHome<Q, K, T>>>,
}

/// What a `Due` holds of its shard: the done list, and a weak link to the scheduler's shared
/// state, which `Due::retry_at` upgrades (only then: a `Due` that is simply dropped touches
/// no count of the shared state, whose line the producers read).
#[derive(Debug)]
pub(crate) struct DoneHome<Q, K, T> {
    pub(crate) list: DoneList,
    pub(crate) owner: Weak<Inner<Q, K, T>>,
    /// This shard's index in `owner`.
    pub(crate) shard: usize,
    /// The scheduler's metrics, for a done `Due` to count itself delivered.
    pub(crate) observer: Observer,
}

/// A shard's published due bound, and how many times it was lowered: a reader that sees
/// the count unchanged across its reads of several shards knows that none of them became
/// due in between (see `Scheduler::quiet_except`).
#[derive(Debug)]
pub(crate) struct DueBound {
    bound: AtomicU64,
    lowered: AtomicU64,
}

/// The locked state of a shard. Releasing it publishes the shard's `due_from` (under the
/// lock, before the unlock): whoever reads it with `Acquire` and sees a store also sees
/// everything done under the lock before it.
pub(crate) struct StateGuard<'a, Q, K, T> {
    state: MutexGuard<'a, ShardState<Q, K, T>>,
    due_from: &'a DueBound,
}

impl<Q, K, T> Deref for StateGuard<'_, Q, K, T> {
    type Target = ShardState<Q, K, T>;

    fn deref(&self) -> &ShardState<Q, K, T> {
        &self.state
    }
}

impl<Q, K, T> DerefMut for StateGuard<'_, Q, K, T> {
    fn deref_mut(&mut self) -> &mut ShardState<Q, K, T> {
        &mut self.state
    }
}

impl<Q, K, T> Drop for StateGuard<'_, Q, K, T> {
    fn drop(&mut self) {
        let bound = self.state.due_from();
        // Every store happens under the lock, so this load sees the last one; storing only
        // a change keeps the line shared with the readers while the bound holds.
        let old = self.due_from.bound.load(Ordering::Relaxed);
        if old != bound {
            self.due_from.bound.store(bound, Ordering::Release);
            if bound < old {
                // After the store: whoever reads the new count also reads the new bound.
                self.due_from.lowered.fetch_add(1, Ordering::Release);
            }
        }
    }
}

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> Shard<Q, K, T> {
    /// Shard `shard` of the scheduler state `owner` (being built: see `Arc::new_cyclic`).
    pub(crate) fn new(owner: Weak<Inner<Q, K, T>>, shard: usize, observer: Observer) -> Self {
        let state = ShardState::new();
        Shard {
            due_from: Padded(DueBound {
                bound: AtomicU64::new(state.due_from()),
                lowered: AtomicU64::new(0),
            }),
            state: Mutex::new(state),
            done: Arc::new(Padded(DoneHome {
                list: DoneList::default(),
                owner,
                shard,
                observer,
            })),
        }
    }

    /// Locks the state, finishes every done entry first — the state is then exactly as if
    /// each `Due` had finished its timer when it was done — and runs `f` on it. The ids and
    /// queue names the settle removes are dropped after the lock is released.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut ShardState<Q, K, T>) -> R) -> R {
        let mut trash = Trash::new();
        let result = {
            let mut state = self.lock_unsettled();
            self.done.list.settle(&mut state, &mut trash);
            f(&mut state)
        };
        drop(trash);
        result
    }

    /// [`with`](Self::with), and then gives back what the done list does not use. For
    /// `Scheduler::shrink_to_fit`.
    pub(crate) fn shrink_to_fit(&self) {
        self.with(|state| {
            state.shrink_to_fit();
            // Settled just now: the list holds only what was pushed since (a leaf lock).
            self.done.list.0.lock().shrink_to_fit();
        });
    }

    /// Bytes the shard holds on the heap, by capacity: its state's (see
    /// `ShardState::bytes_held`) and its done list's, whose `Arc` allocation is counted
    /// too. Settles first (the state is counted as every observer sees it).
    pub(crate) fn bytes_held(&self) -> usize {
        let state = self.with(|state| state.bytes_held());
        let list = self.done.list.0.lock().capacity() * std::mem::size_of::<u32>();
        state
            + list
            + std::mem::size_of::<Padded<DoneHome<Q, K, T>>>()
            + 2 * std::mem::size_of::<usize>()
    }

    /// Locks the state without settling, for the operations that settle through the
    /// returned list only if they meet an in-flight id.
    pub(crate) fn lock_lazy(&self) -> (StateGuard<'_, Q, K, T>, &DoneList) {
        (self.lock_unsettled(), &self.done.list)
    }

    /// Locks the state and nothing else (a dropped batch putting timers back: it touches
    /// only its own in-flight entries, which are not done).
    pub(crate) fn lock_unsettled(&self) -> StateGuard<'_, Q, K, T> {
        StateGuard {
            state: self.state.lock(),
            due_from: &self.due_from,
        }
    }

    /// Whether a `pop_due` at tick `now` may find a timer here, judged without the lock from
    /// the bound the last unlock published: `false` means nothing was due at that unlock, nor
    /// at any unlock that happened before this call (see [`StateGuard`]).
    pub(crate) fn may_be_due(&self, now: u64) -> bool {
        now >= self.due_from.bound.load(Ordering::Acquire)
    }

    /// How many times the published bound was lowered so far; read it before
    /// [`may_be_due`](Self::may_be_due), and again after reading other shards, to know the
    /// bound did not drop in between.
    pub(crate) fn lowered(&self) -> u64 {
        self.due_from.lowered.load(Ordering::Acquire)
    }

    /// Locks the state and finishes every done entry first, into `trash` (which the caller
    /// drops after the lock): for `pop_due`'s merge, which takes its shards' locks once.
    pub(crate) fn lock_settled(&self, trash: &mut Trash<Q, K>) -> StateGuard<'_, Q, K, T> {
        let mut state = self.lock_unsettled();
        self.done.list.settle(&mut state, trash);
        state
    }

    /// Whether the published bound is the state's own (it must be whenever the lock is
    /// free). Test-only.
    #[cfg(test)]
    pub(crate) fn bound_published(&self) -> bool {
        let state = self.state.lock();
        self.due_from.bound.load(Ordering::Relaxed) == state.due_from()
    }

    /// Runs `f` on the state and the done list as they are, without settling. Test-only.
    #[cfg(test)]
    pub(crate) fn inspect<R>(&self, f: impl FnOnce(&ShardState<Q, K, T>, &[u32]) -> R) -> R {
        let state = self.state.lock();
        let done = self.done.list.0.lock();
        f(&state, &done)
    }

    /// The done list, for a `Due` to hold.
    pub(crate) fn done_list(&self) -> Arc<Padded<DoneHome<Q, K, T>>> {
        Arc::clone(&self.done)
    }
}
