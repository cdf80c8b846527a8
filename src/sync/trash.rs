//! [`Trash`]: what a locked operation takes out of a shard of the user's `K` and `Q` — ids
//! and queue names — kept to be dropped after the shard's lock is released.
//!
//! `Drop` of an id or a queue name is user code, and user code must not run under a shard
//! lock (it could call back into the scheduler, and `parking_lot` locks are not
//! reentrant: that deadlocks). So nothing in a shard drops a `K` or a `Q`: it moves it into
//! the caller's `Trash`, declared before the guard and dropped after it.
//!
//! The first few items live inline (a cancel removes at most five: the map's id and the
//! entry's, its queue name, and the record's and the map's name of a queue it empties), so
//! single-timer operations allocate nothing; more (a settle of many done entries, a drain)
//! spill into a `Vec`.
//!
//! Ids and queue names without drop glue (integers, `&'static str`, ...) are not kept at all:
//! dropping them runs no code, so it can happen under the lock. A settle of a whole batch
//! then neither grows a `Vec` nor copies each id into it (with `u64` ids and `u32` queues,
//! the spill's growth was about 2 % of workload 7's instructions under callgrind).

/// Items held inline before spilling into the `Vec`.
const INLINE: usize = 5;

/// One thing removed from a shard.
#[derive(Debug)]
pub(crate) enum Gone<Q, K> {
    Id(K),
    Queue(Q),
}

/// Removed ids and queue names, dropped when this is (after the lock; see the module doc).
#[derive(Debug)]
pub(crate) struct Trash<Q, K> {
    inline: [Option<Gone<Q, K>>; INLINE],
    len: usize,
    spill: Vec<Gone<Q, K>>,
}

impl<Q, K> Trash<Q, K> {
    pub(crate) fn new() -> Self {
        Trash {
            inline: [const { None }; INLINE],
            len: 0,
            spill: Vec::new(),
        }
    }

    pub(crate) fn id(&mut self, id: K) {
        self.push(Gone::Id(id));
    }

    pub(crate) fn queue(&mut self, queue: Q) {
        self.push(Gone::Queue(queue));
    }

    fn push(&mut self, gone: Gone<Q, K>) {
        if !std::mem::needs_drop::<Gone<Q, K>>() {
            // Nothing of it runs when dropped: drop it here, under the lock.
            return;
        }
        match self.inline.get_mut(self.len) {
            Some(slot) => {
                *slot = Some(gone);
                self.len += 1;
            }
            None => self.spill.push(gone),
        }
    }
}
