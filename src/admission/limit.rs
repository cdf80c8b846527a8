//! [`Limit`]: a capacity shared by several wait queues (the global limit).

use std::fmt;
use std::sync::{Arc, Weak};

use hashbrown::HashMap;
use parking_lot::Mutex;

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
/// (each at most once per shortage; the list is bounded by the number of queues).
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
    capacity: u64,
    state: Mutex<LimitState>,
}

struct LimitState {
    available: u64,
    /// Queues whose head was short of this limit, by queue id: told once capacity returns.
    short: HashMap<u64, Weak<dyn Wake>>,
}

impl fmt::Debug for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limit")
            .field("capacity", &self.inner.capacity)
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
                capacity,
                state: Mutex::new(LimitState {
                    available: capacity,
                    short: HashMap::new(),
                }),
            }),
        }
    }

    /// The capacity it was created with.
    pub fn capacity(&self) -> u64 {
        self.inner.capacity
    }

    /// Units not held by any ticket right now. O(1), takes the limit's lock.
    pub fn available(&self) -> u64 {
        self.inner.state.lock().available
    }

    /// Whether two handles are the same limit.
    pub fn same(&self, other: &Limit) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Takes `amount` if available. When it is not and `waker` is given, remembers it (once
    /// per `queue`) to be told when capacity comes back: under the same lock as the check,
    /// so a release between the two cannot be missed.
    pub(crate) fn try_take(&self, amount: u64, queue: u64, waker: Option<&Weak<dyn Wake>>) -> bool {
        let mut state = self.inner.state.lock();
        if state.available >= amount {
            state.available -= amount;
            return true;
        }
        if let Some(waker) = waker {
            state.short.entry(queue).or_insert_with(|| waker.clone());
        }
        false
    }

    /// Gives `amount` back and returns the queues to tell. Never above `capacity`: the
    /// queues only give back what they took.
    pub(crate) fn give_back(&self, amount: u64) -> Vec<Weak<dyn Wake>> {
        let mut state = self.inner.state.lock();
        debug_assert!(
            state.available + amount <= self.inner.capacity,
            "a limit gets back no more than was taken: {} + {amount} > {}",
            state.available,
            self.inner.capacity
        );
        state.available = state
            .available
            .saturating_add(amount)
            .min(self.inner.capacity);
        if state.short.is_empty() {
            return Vec::new();
        }
        state.short.drain().map(|(_, w)| w).collect()
    }

    /// Forgets a queue that is going away.
    pub(crate) fn forget(&self, queue: u64) {
        self.inner.state.lock().short.remove(&queue);
    }
}

/// Tells the queues returned by [`Limit::give_back`]; call with no lock held.
pub(crate) fn tell(queues: Vec<Weak<dyn Wake>>) {
    for queue in queues {
        if let Some(queue) = queue.upgrade() {
            queue.capacity_returned();
        }
    }
}
