//! The entry arena: generation-stamped storage for pending timers.
//!
//! Why not `slab`: a slab forgets everything about a vacant entry, but a generation must
//! outlive its timer; that is what makes stale keys harmless. With `slab`, the generations
//! would sit in a second array, and every operation would touch two cache lines. Here an entry
//! is one 24-byte enum for `T = u64` (the vacant variant fits beside the niche of `stamp`), so
//! a cancel touches one cache line.
//!
//! # The stamp
//!
//! Besides the key's generation, every entry carries a 32-bit *stamp* describing where the
//! wheel filed it:
//!
//! ```text
//!  31                      12 11          0
//! +--------------------------+-------------+
//! |  epoch (20 bits)         | position    |   position: 1 + level·64 + slot, or DUE
//! +--------------------------+-------------+
//! ```
//!
//! Each time the wheel files the entry somewhere, the epoch goes up by one, also across reuse
//! of the index. Filing means an insert, a cascade, a reset that moves the entry, or entering
//! the due queue. A slot holds *references*: the index and the epoch, and the deadline's low
//! digits (see [`make_ref`]). A reference is current exactly when its epoch equals the entry's.
//! So a reference left behind by a cancel or a move is recognised as stale without being found
//! and removed. The position stays in the entry: it says where to unlink a cancelled timer.
//! Positions are never 0, so the stamp is never 0, which gives the enum its niche.
//!
//! The epoch wraps after 2^20 filings of one index. A stale reference that outlived that many
//! filings would look current again, and could put a timer out of order. So whenever an epoch
//! reaches a multiple of [`SWEEP_EVERY`], the arena raises `sweep_due`, and the wheel removes
//! every stale reference before its operation returns. A stale reference made at epoch `e` is
//! gone by the time its index reaches the next multiple of 2^19 after `e`, plus the few filings
//! of one operation. That is well before `e + 2^20`. A sweep costs O(references) and comes at
//! most once per 2^19 filings of one index.
//!
//! # Generations
//!
//! Each arena starts every index's generations at its own *offset* ([`next_offset`]). So a key
//! of another wheel rarely names a timer here (see [`TimerKey`] for exactly what holds). The
//! offset costs nothing on the hot paths: a key still compares with one `==`, and the offset is
//! read only when a generation could wrap.
//!
//! An entry whose generation reaches the last before the offset (`offset - 1`, wrapping) is
//! retired when it ends, instead of going back on the free list (as slotmap does). So a key can
//! never alias a later timer through generation wrap-around. That leaks one entry per 2^32
//! reuses of an index. `shrink_to_fit` never truncates a retired entry.

use std::num::NonZeroU32;
// Plain std atomics, also under `cfg(loom)`: the wheel counter is no part of any model.
use std::sync::atomic::{AtomicU32, Ordering};

use super::key::TimerKey;
use super::slots::grow;

/// Bits of the stamp that hold the position.
const POS_BITS: u32 = 12;
const POS_MASK: u32 = (1 << POS_BITS) - 1;
/// Position of an entry in the due queue.
pub(crate) const POS_DUE: u32 = POS_MASK;
/// Position of an entry between its insertion and its first filing.
pub(crate) const POS_UNFILED: u32 = POS_MASK - 1;
/// References whose entries are prefetched together by [`Arena::prefetch`] when a slot is
/// processed or compacted (the run has its own distance and step, `due.rs`): enough to keep
/// the memory system busy, few enough to stay in L1.
pub(crate) const PREFETCH_BATCH: usize = 16;
/// Slots with fewer references than this are processed without prefetching their entries.
pub(crate) const PREFETCH_MIN: usize = 8;
/// No next free entry.
const NIL: u32 = u32::MAX;
/// `next` of a retired entry: its generation is exhausted and it is never reused.
const RETIRED: u32 = u32::MAX - 1;
/// An epoch reaching a multiple of this asks for a sweep of stale references.
pub(crate) const SWEEP_EVERY: u32 = 1 << 19;

/// Arenas created so far in this process, for [`next_offset`].
static ARENAS: AtomicU32 = AtomicU32::new(0);

/// The generation offset of a new arena: the count of arenas created before it, through
/// murmur3's 32-bit finalizer (`fmix32`, Appleby). The finalizer is a bijection, so the first
/// 2^32 arenas of a process get distinct offsets, and it spreads consecutive counts over the
/// whole `u32` range, so the offsets of two arenas are rarely close.
fn next_offset() -> u32 {
    fmix32(ARENAS.fetch_add(1, Ordering::Relaxed))
}

/// murmur3's 32-bit finalizer: a bijection of `u32` that spreads nearby inputs apart.
pub(crate) const fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// The position code for a wheel slot (never 0, never DUE/UNFILED).
#[inline]
pub(crate) fn slot_position(level: usize, slot: usize) -> u32 {
    1 + (level * super::level::SLOTS + slot) as u32
}

/// The (level, slot) of a slot position code; `None` for DUE/UNFILED.
#[inline]
pub(crate) fn position_slot(pos: u32) -> Option<(usize, usize)> {
    if pos == 0 || pos >= POS_UNFILED {
        return None;
    }
    let p = (pos - 1) as usize;
    Some((p / super::level::SLOTS, p % super::level::SLOTS))
}

/// A pending timer.
#[derive(Debug)]
pub(crate) struct Live<T> {
    pub(crate) deadline: u64,
    pub(crate) value: T,
    pub(crate) stamp: NonZeroU32,
    pub(crate) generation: u32,
}

impl<T> Live<T> {
    #[inline]
    pub(crate) fn position(&self) -> u32 {
        self.stamp.get() & POS_MASK
    }
}

/// What [`Arena::take_if_due`] found.
pub(crate) enum TakeDue<T> {
    /// The timer, taken out: it is due.
    Taken(TimerKey, Live<T>),
    /// The reference is stale: the timer was cancelled or moved.
    Stale,
    /// The timer is current but its deadline (here) was moved past `elapsed`.
    Later(u32, u64),
}

#[derive(Debug)]
struct Free {
    next: u32,
    generation: u32,
    stamp: u32,
}

#[derive(Debug)]
enum Entry<T> {
    Live(Live<T>),
    Free(Free),
}

/// Generation-stamped storage; indexes are stable while an entry is live.
#[derive(Debug)]
pub(crate) struct Arena<T> {
    entries: Vec<Entry<T>>,
    free_head: u32,
    len: usize,
    /// The first generation of every index (see the module doc): the arena's offset.
    offset: u32,
    /// Generation for entries pushed at indexes that `shrink_to_fit` truncated: at least the
    /// generation those indexes had (counted from `offset`), so a stale key for a truncated
    /// index stays stale.
    fresh_generation: u32,
    /// Some epoch reached a multiple of [`SWEEP_EVERY`]: stale references must be swept.
    sweep_due: bool,
}

/// The stamp after `old` for a filing at `pos`, and whether its epoch asks for a sweep.
#[inline]
fn next_stamp(old: u32, pos: u32) -> (NonZeroU32, bool) {
    let stamp = (old & !POS_MASK).wrapping_add(1 << POS_BITS) | pos;
    let sweep = (stamp >> POS_BITS) % SWEEP_EVERY == 0;
    (NonZeroU32::new(stamp).unwrap_or(NonZeroU32::MIN), sweep)
}

/// A reference as slots hold it: index in the high half, then the stamp's epoch, then the
/// two lowest base-64 digits of the deadline the entry had when it was filed:
///
/// ```text
///  63            32 31               12 11          0
/// +----------------+-------------------+-------------+
/// |  index         |  epoch (20 bits)  | deadline %  |
/// |                |                   |   4096      |
/// +----------------+-------------------+-------------+
/// ```
///
/// The epoch alone tells a current reference from a stale one (every filing moves it on).
/// The deadline digits let a level-2 slot be sorted into the due queue's run
/// without loading any entry (see `due.rs`): within such a slot they *are* the deadline.
#[inline]
pub(crate) fn make_ref(index: u32, stamp: NonZeroU32, deadline: u64) -> u64 {
    ((index as u64) << 32) | (stamp.get() & !POS_MASK) as u64 | (deadline & POS_MASK as u64)
}

/// The deadline reference `r` was filed for, given the start tick of the level-2 slot that
/// holds it: a level-2 slot spans 4 096 ticks from a multiple of 4 096, so the digits a
/// reference carries are the low bits of that deadline. While `r` is current the timer's
/// deadline is never earlier (a level-2 timer reset earlier is filed again: see
/// `Wheel::reset`).
#[inline]
pub(crate) fn filed_deadline(r: u64, level_2_start: u64) -> u64 {
    debug_assert_eq!(level_2_start & POS_MASK as u64, 0, "a level-2 slot's start");
    level_2_start | (r & POS_MASK as u64)
}

/// Whether reference `r` was made at the entry's latest filing (`stamp`): the epochs match.
#[inline]
fn is_current(stamp: NonZeroU32, r: u64) -> bool {
    (stamp.get() ^ r as u32) & !POS_MASK == 0
}

/// Entries from which the arena grows by half again instead of doubling (`slots::grow`):
/// doubling leaves a big arena up to half empty (just past 2^20 timers, 24 bytes of slack per
/// timer on top of the 24-byte entry: 58 heap bytes per timer instead of 36).
const GROW_BY_HALF_FROM: usize = 4096;

impl<T> Arena<T> {
    pub(crate) fn with_capacity(n: usize) -> Self {
        let offset = next_offset();
        Arena {
            entries: Vec::with_capacity(n),
            free_head: NIL,
            len: 0,
            offset,
            fresh_generation: offset,
            sweep_due: false,
        }
    }

    /// How many generations an index used before `generation`: its distance from the offset.
    #[inline]
    fn generations_before(&self, generation: u32) -> u32 {
        generation.wrapping_sub(self.offset)
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn capacity(&self) -> usize {
        self.entries.capacity()
    }

    pub(crate) fn bytes_held(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<Entry<T>>()
    }

    /// Stores a new, not yet filed timer. `Err` gives the value back when all `u32::MAX`
    /// indexes are in use.
    pub(crate) fn insert(&mut self, deadline: u64, value: T) -> Result<TimerKey, T> {
        let (key, _, sweep) = self.insert_at(deadline, value, POS_UNFILED)?;
        self.sweep_due |= sweep;
        Ok(key)
    }

    /// Stores a new timer already filed at `pos`, in one write, and returns its key, the
    /// reference to store at `pos`, and whether the stamp's epoch asks for a sweep (which
    /// the caller then runs before it returns, as for `sweep_due`). `Err` gives the value
    /// back when all `u32::MAX` indexes are in use.
    ///
    /// Why the flag is returned and not raised: the insert then tests a value it already
    /// holds, where reading and clearing `sweep_due` took a load and a store on every insert
    /// (96 → 95 instructions an insert at 1 000 timers, with the single bounds check of
    /// `Levels::push`).
    #[inline(always)]
    pub(crate) fn insert_at(
        &mut self,
        deadline: u64,
        value: T,
        pos: u32,
    ) -> Result<(TimerKey, u64, bool), T> {
        if self.free_head != NIL {
            let index = self.free_head;
            let slot = &mut self.entries[index as usize];
            let Entry::Free(free) = slot else {
                unreachable!("free list points at a live entry");
            };
            let (stamp, sweep) = next_stamp(free.stamp, pos);
            let generation = free.generation;
            self.free_head = free.next;
            *slot = Entry::Live(Live {
                deadline,
                value,
                stamp,
                generation,
            });
            self.len += 1;
            return Ok((
                TimerKey { index, generation },
                make_ref(index, stamp, deadline),
                sweep,
            ));
        }
        let Ok(index) = u32::try_from(self.entries.len()) else {
            return Err(value);
        };
        if index >= RETIRED {
            return Err(value);
        }
        let generation = self.fresh_generation;
        let (stamp, _) = next_stamp(0, pos);
        if self.entries.len() == self.entries.capacity() {
            grow(&mut self.entries, GROW_BY_HALF_FROM);
        }
        self.entries.push(Entry::Live(Live {
            deadline,
            value,
            stamp,
            generation,
        }));
        self.len += 1;
        Ok((
            TimerKey { index, generation },
            make_ref(index, stamp, deadline),
            false,
        ))
    }

    /// The live entry a key names; `None` when the key is stale or foreign.
    #[inline]
    pub(crate) fn get(&self, key: TimerKey) -> Option<&Live<T>> {
        match self.entries.get(key.index as usize) {
            Some(Entry::Live(live)) if live.generation == key.generation => Some(live),
            _ => None,
        }
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, key: TimerKey) -> Option<&mut Live<T>> {
        match self.entries.get_mut(key.index as usize) {
            Some(Entry::Live(live)) if live.generation == key.generation => Some(live),
            _ => None,
        }
    }

    /// Starts loading the entries that `refs` name, so that the cache misses of a batch
    /// overlap instead of waiting one after another. No state changes.
    ///
    /// On x86 with SSE (every x86-64 target) this is the `prefetcht0` instruction, through
    /// `safe_arch` (the crate forbids unsafe code): it retires at once, so the work on earlier
    /// timers goes on while the lines arrive. An entry that straddles two cache lines (a
    /// 24-byte entry does at two of every eight indexes) gets both: the second through the
    /// next entry, whose first byte shares the line. Measured at 1 M timers on x86, one-poll
    /// expiry took about 30 % less time than with the loads below.
    #[cfg(all(
        any(target_arch = "x86", target_arch = "x86_64"),
        target_feature = "sse"
    ))]
    #[inline]
    pub(crate) fn prefetch(&self, refs: &[u64]) {
        for &r in refs {
            let index = (r >> 32) as usize;
            if let Some(entry) = self.entries.get(index) {
                safe_arch::prefetch_t0(entry);
            }
            if let Some(next) = self.entries.get(index + 1) {
                safe_arch::prefetch_t0(next);
            }
        }
    }

    /// Starts loading the entries that `refs` name, so that the cache misses of a batch
    /// overlap instead of waiting one after another: without a prefetch instruction, each
    /// entry is read without branching on what is found, and the reads are kept by
    /// `black_box`. The processor waits for them before going on, but they overlap each other.
    #[cfg(not(all(
        any(target_arch = "x86", target_arch = "x86_64"),
        target_feature = "sse"
    )))]
    #[inline]
    pub(crate) fn prefetch(&self, refs: &[u64]) {
        let live: u32 = refs
            .iter()
            .map(|&r| {
                let entry = self.entries.get((r >> 32) as usize);
                u32::from(matches!(entry, Some(Entry::Live(_))))
            })
            .sum();
        std::hint::black_box(live);
    }

    /// Keeps the current references of `refs`, in order: a compaction of a slot or of the
    /// run. The entries are scattered over the arena, so each batch's are prefetched one
    /// batch ahead of the batch being checked (a plain `retain` waited for each miss in turn:
    /// which references are stale looks random, and every wrong guess of the branch threw
    /// away the loads started after it).
    pub(crate) fn retain_current(&self, refs: &mut Vec<u64>) {
        let len = refs.len();
        let mut kept = 0;
        self.prefetch(&refs[..len.min(PREFETCH_BATCH)]);
        for start in (0..len).step_by(PREFETCH_BATCH) {
            let end = len.min(start + PREFETCH_BATCH);
            self.prefetch(&refs[end..len.min(end + PREFETCH_BATCH)]);
            for i in start..end {
                let r = refs[i];
                if self.resolve(r).is_some() {
                    refs[kept] = r;
                    kept += 1;
                }
            }
        }
        refs.truncate(kept);
    }

    /// The index a slot reference names, if the reference is current (its epoch matches).
    #[inline]
    pub(crate) fn resolve(&self, r: u64) -> Option<u32> {
        self.resolve_deadline(r).map(|(index, _)| index)
    }

    /// The key and deadline of the timer a current reference names; `None` when `r` is stale.
    #[inline]
    pub(crate) fn resolve_key(&self, r: u64) -> Option<(TimerKey, u64)> {
        let index = (r >> 32) as u32;
        match self.entries.get(index as usize) {
            Some(Entry::Live(live)) if is_current(live.stamp, r) => Some((
                TimerKey::from_raw_parts(index, live.generation),
                live.deadline,
            )),
            _ => None,
        }
    }

    /// [`resolve`](Self::resolve), and the entry's deadline, in one lookup.
    #[inline]
    pub(crate) fn resolve_deadline(&self, r: u64) -> Option<(u32, u64)> {
        let index = (r >> 32) as u32;
        match self.entries.get(index as usize) {
            Some(Entry::Live(live)) if is_current(live.stamp, r) => Some((index, live.deadline)),
            _ => None,
        }
    }

    #[inline]
    pub(crate) fn live_mut(&mut self, index: u32) -> Option<&mut Live<T>> {
        match self.entries.get_mut(index as usize) {
            Some(Entry::Live(live)) => Some(live),
            _ => None,
        }
    }

    /// Files a live entry at `pos`: a new epoch, so every older reference becomes stale.
    /// Returns the reference to store there.
    #[inline]
    pub(crate) fn refile(&mut self, index: u32, pos: u32) -> Option<u64> {
        let live = self.live_mut(index)?;
        let (stamp, sweep) = next_stamp(live.stamp.get(), pos);
        live.stamp = stamp;
        let r = make_ref(index, stamp, live.deadline);
        self.sweep_due |= sweep;
        Some(r)
    }

    /// Files the live entry a current reference names at the position `place` picks from
    /// its deadline, in one lookup: a new epoch, so every older reference becomes stale.
    /// Returns the deadline and the reference to store there; `None` for a stale reference.
    #[inline]
    pub(crate) fn refile_current(
        &mut self,
        r: u64,
        place: impl FnOnce(u64) -> u32,
    ) -> Option<(u64, u64)> {
        let index = (r >> 32) as u32;
        let Some(Entry::Live(live)) = self.entries.get_mut(index as usize) else {
            return None;
        };
        if !is_current(live.stamp, r) {
            return None;
        }
        let (stamp, sweep) = next_stamp(live.stamp.get(), place(live.deadline));
        live.stamp = stamp;
        self.sweep_due |= sweep;
        Some((live.deadline, make_ref(index, stamp, live.deadline)))
    }

    /// Takes out the live entry a current reference names if its deadline is at or before
    /// `elapsed`: a timer of the due queue's sorted run, whose deadline may have moved later
    /// while it waited there (see `Wheel::reset`).
    #[inline]
    pub(crate) fn take_if_due(&mut self, r: u64, elapsed: u64) -> TakeDue<T> {
        let index = (r >> 32) as u32;
        let deadline = match self.entries.get(index as usize) {
            Some(Entry::Live(live)) if is_current(live.stamp, r) => live.deadline,
            _ => return TakeDue::Stale,
        };
        if deadline > elapsed {
            return TakeDue::Later(index, deadline);
        }
        let live = self.vacate(index);
        let generation = live.generation;
        TakeDue::Taken(TimerKey { index, generation }, live)
    }

    /// Vacates a live entry; its generation moves on, so its key becomes stale.
    pub(crate) fn remove(&mut self, index: u32) -> Option<Live<T>> {
        match self.entries.get(index as usize) {
            Some(Entry::Live(_)) => Some(self.vacate(index)),
            _ => None,
        }
    }

    /// Vacates the live entry a key names, in one lookup; returns its position and the timer.
    /// `None` when the key is stale or foreign.
    #[inline]
    pub(crate) fn take(&mut self, key: TimerKey) -> Option<(u32, Live<T>)> {
        let pos = self.get(key)?.position();
        Some((pos, self.vacate(key.index)))
    }

    /// Vacates entry `index`, which the caller has just seen live.
    #[inline]
    fn vacate(&mut self, index: u32) -> Live<T> {
        let offset = self.offset;
        let slot = &mut self.entries[index as usize];
        let Entry::Live(live) = slot else {
            unreachable!("vacate of a free entry");
        };
        // An exhausted generation retires the entry: reusing it would let the key of its
        // first timer (generation `offset`) alias a later one.
        let retire = live.generation.wrapping_add(1) == offset;
        let free = Free {
            next: if retire { RETIRED } else { self.free_head },
            generation: live.generation.wrapping_add(1),
            stamp: live.stamp.get(),
        };
        let Entry::Live(live) = std::mem::replace(slot, Entry::Free(free)) else {
            unreachable!("vacate of a free entry");
        };
        if !retire {
            self.free_head = index;
        }
        self.len -= 1;
        live
    }

    /// Whether an epoch asked for a sweep since the last call; clears the request.
    #[inline]
    pub(crate) fn take_sweep_due(&mut self) -> bool {
        std::mem::take(&mut self.sweep_due)
    }

    /// Indexes of every live entry, in index order.
    pub(crate) fn live_indexes(&self) -> impl Iterator<Item = u32> + '_ {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| match e {
                Entry::Live(_) => Some(i as u32),
                Entry::Free(_) => None,
            })
    }

    /// Drops vacant entries at the end and gives spare capacity back. Callers must first
    /// remove every reference to a truncated index (they are all stale: the entries are free).
    pub(crate) fn shrink_to_fit(&mut self) {
        // A retired entry stays: every generation of its index has been handed out, so no
        // timer may take the index again (a truncated index would be pushed anew).
        while let Some(Entry::Free(free)) = self.entries.last() {
            if free.next == RETIRED {
                break;
            }
            if self.generations_before(free.generation)
                > self.generations_before(self.fresh_generation)
            {
                self.fresh_generation = free.generation;
            }
            self.entries.pop();
        }
        // Rebuild the free list: truncation may have cut it anywhere.
        self.free_head = NIL;
        for (i, e) in self.entries.iter_mut().enumerate().rev() {
            if let Entry::Free(free) = e {
                if free.next != RETIRED {
                    free.next = self.free_head;
                    self.free_head = i as u32;
                }
            }
        }
        self.entries.shrink_to_fit();
    }

    pub(crate) fn reserve(&mut self, additional: usize) {
        let free = self.entries.len() - self.len;
        self.entries.reserve(additional.saturating_sub(free));
    }
}

#[cfg(test)]
mod tests;
