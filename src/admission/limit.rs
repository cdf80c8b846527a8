//! [`Limit`]: a capacity shared by several wait queues (the global limit).

use std::fmt;
use std::sync::{Arc, Weak};

use hashbrown::HashMap;
use parking_lot::Mutex;

use super::each::each;

/// Something to tell that capacity came back to a limit it waits on: a queue whose head
/// found the global limit short. Implemented by the thread-safe queue.
pub(crate) trait Wake: Send + Sync {
    /// Runs (or asks the running thread to run again) a grant pass. Called with no lock held.
    fn capacity_returned(&self);
}

/// A capacity shared by several [`WaitQueue`](super::WaitQueue)s: the *global* limit a
/// ticket needs on top of its queue's *local* one. Cheap to clone (an `Arc`); clones are
/// the same limit.
///
/// Capacity is taken from it only together with a local limit, under the taking queue's
/// lock and then this limit's lock (the one lock order), so a ticket holds both or neither.
/// When capacity comes back, the thread-safe queues whose head was short of it are told
/// (each at most once per shortage; the list is bounded by the number of queues). A queue is
/// told, which runs its grant pass, only if the limit then has room for the least amount it
/// was short of since it was last told; otherwise it stays listed for the next release. So a
/// release costs O(listed queues) lock-and-compare steps but grant passes only where one can
/// grant.
///
/// ```
/// use tickwheel::admission::Limit;
///
/// let global = Limit::new(1 << 20);
/// assert_eq!((global.capacity(), global.available()), (1 << 20, 1 << 20));
/// ```
#[derive(Clone)]
pub struct Limit {
    inner: Arc<LimitInner>,
}

struct LimitInner {
    state: Mutex<LimitState>,
}

struct LimitState {
    capacity: u64,
    /// Units held by tickets; may exceed `capacity` after it was lowered (then nothing is
    /// available until enough comes back).
    held: u64,
    /// Queues whose head was short of this limit, by queue id: told once capacity returns.
    short: HashMap<u64, Short>,
}

impl LimitState {
    /// Units free to take: none while `held` is above a lowered `capacity`.
    fn available(&self) -> u64 {
        self.capacity.saturating_sub(self.held)
    }

    /// Lists `queue` as short of `needed` units, or lowers what it is listed with to `needed`
    /// (the least it asked for since it was last told); `wake` is called only for a queue not
    /// yet listed.
    fn list(&mut self, queue: u64, needed: u64, wake: impl FnOnce() -> Weak<dyn Wake>) {
        self.short
            .entry(queue)
            .and_modify(|s| s.needed = s.needed.min(needed))
            .or_insert_with(|| Short {
                needed,
                wake: wake(),
            });
    }
}

/// A queue short of a limit: the least it asked for since it was last told, and how to
/// tell it.
struct Short {
    needed: u64,
    wake: Weak<dyn Wake>,
}

/// A queue to tell that capacity came back to `limit` (from [`Limit::give_back`]): told only
/// if the limit has room for what it asked for by then (see [`tell_one`]).
pub(crate) struct Told {
    limit: Limit,
    queue: u64,
    short: Short,
}

impl fmt::Debug for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limit")
            .field("capacity", &self.capacity())
            .field("available", &self.available())
            .finish()
    }
}

impl Limit {
    /// A limit of `capacity` units (bytes, connections: whatever the caller counts), all
    /// available.
    pub fn new(capacity: u64) -> Self {
        Limit {
            inner: Arc::new(LimitInner {
                state: Mutex::new(LimitState {
                    capacity,
                    held: 0,
                    short: HashMap::new(),
                }),
            }),
        }
    }

    /// The capacity now: as created, or as last set by
    /// [`set_capacity`](Self::set_capacity). O(1), takes the limit's lock.
    pub fn capacity(&self) -> u64 {
        self.inner.state.lock().capacity
    }

    /// Units not held by any ticket right now (0 while tickets hold more than a lowered
    /// capacity). O(1), takes the limit's lock.
    pub fn available(&self) -> u64 {
        let state = self.inner.state.lock();
        state.available()
    }

    /// Changes the capacity at run time (Cassandra's native-transport limits change the same
    /// way). Raising it grants at once: every thread-safe queue whose head waits on this limit
    /// is told, as when capacity comes back.
    ///
    /// Lowering it takes nothing from the tickets holding units. Nothing more is granted until
    /// they have given back enough to be under the new capacity. A waiting ticket larger than
    /// the new capacity waits until the capacity is raised again or the ticket expires. A new
    /// ticket larger than it is refused as `TooLarge`.
    ///
    /// O(queues told); takes the limit's lock once, and tells the queues with no lock held.
    ///
    /// # Panics
    ///
    /// When a waker that a told queue wakes panics: after every queue was told.
    ///
    /// ```
    /// use tickwheel::admission::Limit;
    ///
    /// let global = Limit::new(10);
    /// global.set_capacity(4);
    /// assert_eq!((global.capacity(), global.available()), (4, 4));
    /// global.set_capacity(16);
    /// assert_eq!(global.available(), 16);
    /// ```
    pub fn set_capacity(&self, capacity: u64) {
        let told = {
            let mut state = self.inner.state.lock();
            let grew = capacity > state.capacity;
            state.capacity = capacity;
            if grew && !state.short.is_empty() {
                self.drain(&mut state)
            } else {
                Vec::new()
            }
        };
        tell(told);
    }

    /// Whether two handles are the same limit.
    pub fn same(&self, other: &Limit) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Takes `amount` if available. When it is not and `waker` is given, remembers it (once
    /// per `queue`, with the least amount it asked for) to be told when capacity comes back:
    /// under the same lock as the check, so a release between the two cannot be missed.
    pub(crate) fn try_take(&self, amount: u64, queue: u64, waker: Option<&Weak<dyn Wake>>) -> bool {
        let mut state = self.inner.state.lock();
        if state.available() >= amount {
            state.held += amount;
            return true;
        }
        if let Some(waker) = waker {
            state.list(queue, amount, || waker.clone());
        }
        false
    }

    /// Every queue short of this limit, forgotten here: the caller tells them.
    fn drain(&self, state: &mut LimitState) -> Vec<Told> {
        state
            .short
            .drain()
            .map(|(queue, short)| Told {
                limit: self.clone(),
                queue,
                short,
            })
            .collect()
    }

    /// For [`tell_one`]: whether the limit now has room for what the queue asked for. If not,
    /// it is remembered again (as by [`try_take`](Self::try_take), under the same lock as
    /// the check), to be told by a later release, and `None`.
    fn room_for(&self, queue: u64, short: Short) -> Option<Weak<dyn Wake>> {
        let mut state = self.inner.state.lock();
        if state.available() >= short.needed {
            return Some(short.wake);
        }
        // A queue dropped since the drain (its `forget` already ran) is not listed again:
        // nothing would ever remove it.
        if short.wake.strong_count() > 0 {
            state.list(queue, short.needed, || short.wake);
        }
        None
    }

    /// Gives `amount` back and returns the queues to tell. The queues only give back what
    /// they took.
    pub(crate) fn give_back(&self, amount: u64) -> Vec<Told> {
        let mut state = self.inner.state.lock();
        debug_assert!(
            amount <= state.held,
            "a limit gets back no more than was taken: {amount} > {} held",
            state.held
        );
        state.held = state.held.saturating_sub(amount);
        if state.short.is_empty() || state.held >= state.capacity {
            return Vec::new();
        }
        self.drain(&mut state)
    }

    /// Forgets a queue that is going away.
    pub(crate) fn forget(&self, queue: u64) {
        self.inner.state.lock().short.remove(&queue);
    }
}

/// Tells the queues returned by [`Limit::give_back`]; call with no lock held. A told queue's
/// grant pass wakes its waiters: if a waker panics, the queues left are still told and then
/// the panic goes on (see `each.rs`).
pub(crate) fn tell(queues: Vec<Told>) {
    each(queues, tell_one);
}

/// Tells one queue, if it still lives and the limit has room for the least it asked for: a
/// queue that could not take now is not made to run a grant pass, but stays listed for the
/// next release. O(1) then, where a pass costs the queue's lock and cache lines.
pub(crate) fn tell_one(told: Told) {
    let Told {
        limit,
        queue,
        short,
    } = told;
    if let Some(queue) = limit.room_for(queue, short).and_then(|q| q.upgrade()) {
        queue.capacity_returned();
    }
}
