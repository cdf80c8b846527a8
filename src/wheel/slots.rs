//! The levels: per slot a vector of references and a count of the stale ones (the rest are
//! live), per level an occupancy bitmap.
//!
//! Cancel leaves its reference where it is (O(1), no search); the slot's stale count rises
//! instead. A slot with no live reference left is emptied at once, without looking. The rise
//! itself is held back a little: cancels append their slot to a short list of pending unlinks.
//! These are applied before anything reads a slot's count or the bitmaps (see
//! [`Levels::try_unlink`] for why).
//!
//! The levels count their live timers and their stale references. The wheel *sweeps* when the
//! stale ones outnumber the live ones by more than `STALE_SLACK × 704 − 2 × PENDING`
//! ([`STALE_SLACK`] per slot, 704 slots, [`PENDING`]). This is checked whenever the pending
//! unlinks are applied, which is at least every `PENDING` unlinks. A sweep compacts every slot
//! whose stale references outnumber its live ones, which leaves at most as many stale
//! references as live timers. So stale references are at most `live + STALE_SLACK × 704` at
//! every moment.
//!
//! A level-2 slot made the due queue's sorted run (`due.rs`) leaves the levels whole, stale
//! references included. The run keeps its own bound: at most twice its timers plus
//! [`STALE_SLACK`].
//!
//! Why a bound on the whole levels and not on each slot: most stale references cost nothing.
//! They go when their slot is processed or emptied, which resolves or drops them anyway. A
//! bound per slot compacts slots that would soon be processed: cancelling half the timers
//! compacted about half the slots, one extra arena lookup per cancel. A bound on the total
//! sweeps only when stale references really pile up. A sweep costs at most twice the stale
//! references it removes, since each slot it compacts has more stale than live references, plus
//! a scan of the 704 slots. At least `(STALE_SLACK × 704 − 2 × PENDING) / 2` cancels separate
//! two sweeps. Each cancel adds a stale reference and takes a live timer away, and a sweep
//! leaves no more stale references than live timers. So cancel stays amortised O(1).

use super::level::{LEVELS, SLOTS};

/// Stale references allowed beyond the live count: per slot of the levels (so
/// `STALE_SLACK × 704` for the levels together), and for the due queue.
pub(crate) const STALE_SLACK: usize = 8;

/// Stale references the levels may hold beyond their live timers.
const LEVELS_SLACK: usize = STALE_SLACK * LEVELS * SLOTS;

/// Stale references beyond the live timers at which the levels are swept: the bound is
/// checked when pending unlinks are applied, and up to [`PENDING`] unlinks (each one stale
/// reference more, one live timer fewer) may come between two checks.
const SWEEP_AT: usize = LEVELS_SLACK - 2 * PENDING;

/// Unlinks held back before the slots' live counts are lowered (see [`Levels::try_unlink`]).
/// Enough that a run of cancels rarely flushes (a flush is cheap: the level table stays in
/// cache); few enough that the list is two cache lines and that `first_occupied` with
/// unlinks pending (64 comparisons per slot passed over, at most 64 slots) stays cheap.
const PENDING: usize = 64;

/// Vectors below this capacity grow fourfold (see [`grow`]).
const QUADRUPLE_BELOW: usize = 64;

/// A slot's first vector.
const FIRST_CAPACITY: usize = 4;

/// A slot vector below this capacity grows by a fresh allocation and a copy, not `realloc`
/// (see [`grow_refs`]).
const COPY_BELOW: usize = 128;

/// The sizes of spare vectors, in references: the first three a slot's vector takes (see
/// [`grow_refs`]), so that a spare of each size stands in for one allocation and copy.
const SPARE_CAPACITIES: [usize; SPARE_SIZES] = [FIRST_CAPACITY, 16, 64];
const SPARE_SIZES: usize = 3;

/// Spare vectors of each size a wheel made `with_capacity(n)` starts with: one per
/// `TIMERS_PER_SPARE[k]` timers of `n`, at most `MAX_SPARES` of each size (see
/// [`Levels::with_capacity`]).
///
/// Every slot that fills takes a vector of 4; only a slot past 4 references one of 16, past
/// 16 one of 64, so fewer slots need the larger ones. Of the size 4, one per 16 timers left
/// about 20 of the 62 unused at 1 000 timers over a minute (their `malloc` and `free` cost
/// more than the spares saved), one per 32 ten slots short. Of 16 and 64, one per 64: the 15
/// busy level-2 slots of 1 000 timers over a minute.
const TIMERS_PER_SPARE: [usize; SPARE_SIZES] = [24, 64, 64];
const MAX_SPARES: usize = 64;

/// A slot keeps an emptied vector only up to this capacity, so a burst does not pin memory.
const KEEP_CAPACITY: usize = 1024;

/// Makes room in a full vector: 4 items first, four times as many up to
/// [`QUADRUPLE_BELOW`], then doubling (as `Vec::push` would), by half again once it holds
/// `half_from` items.
///
/// Quadrupling while small takes three reallocations where doubling took five for a slot
/// that fills to a few dozen references (4, 16, 64 against 4, 8, 16, 32, 64): at 1 000
/// timers over a minute the busy level-2 slots hold about 64 each, and the reallocations
/// were more than a quarter of an insert's instructions. The price is slack in small
/// vectors (up to three quarters of one below 64 references: under 400 bytes a slot); a
/// slot of one or two references still takes 4. The bytes per timer of
/// `tickwheel-bench/examples/compare`'s memory workload did not move (44.5, 34.4 and 39.2 at
/// 1 000, 100 000 and 1 M timers). (The slots grow through [`grow_refs`]: these sizes,
/// moved by a copy below [`COPY_BELOW`].)
///
/// A big wheel's vectors hold most of its timers (at 1 M timers over a minute, each of the
/// 15 busy level-2 slots holds 68 000 references), and doubling would leave them up to half
/// empty; growing by half keeps the slack under a third, and the copies stay amortised O(1)
/// per push (about 3 instead of 2). Used by the slots from [`COPY_BELOW`] references on
/// (by half from [`KEEP_CAPACITY`]) and by the arena (see `arena.rs`).
#[cold]
#[inline(never)]
pub(crate) fn grow<E>(items: &mut Vec<E>, half_from: usize) {
    let capacity = items.capacity();
    let more = if capacity < QUADRUPLE_BELOW {
        (capacity * 3).max(4)
    } else if capacity < half_from {
        capacity
    } else {
        capacity / 2
    };
    items.reserve_exact(more);
}

/// Makes room in a slot's full vector: [`FIRST_CAPACITY`] references if the slot has none,
/// then the sizes of [`grow`] (16, 64, 128, 256, ...), below [`COPY_BELOW`] by a fresh
/// vector and a copy. A fresh vector of a size in [`SPARE_CAPACITIES`] is a spare (see
/// [`Levels::with_capacity`]) while one of that size is left. An outgrown vector of such a
/// size becomes a spare while the wheel's list of that size has room (never beyond what
/// `with_capacity` made).
///
/// Why not `realloc` for the small ones: glibc's `realloc` of a small block seldom extends it
/// in place and moves it at about twice the cost of a `malloc`, a copy and a `free`, which go
/// through the thread's cache of small blocks. At 1 000 timers over a minute (callgrind, the
/// drop-in `DelayQueue`, `tickwheel-bench/examples/dq_insert`) the copy took an insert from
/// 174 instructions to 166 (from 186 to 178 counting the queue's construction and drop).
///
/// Why the same sizes as `grow`: 4 → 64 at once held 54.8 bytes per timer instead of 44.5
/// in `compare`'s workload 8 at 1 000 timers; 16 → 128 at once (one move fewer per busy
/// level-2 slot there, 5 instructions an insert fewer) held 2 more, and made `compare`'s
/// inserts of 1 M timers 1.6–2.4 times slower on the machine it was measured on (same
/// instruction count; not explained).
#[cold]
#[inline(never)]
fn grow_refs(refs: &mut Vec<u64>, spares: &mut Spares) {
    let capacity = refs.capacity();
    if capacity == 0 {
        *refs = spares.take(FIRST_CAPACITY);
    } else if capacity < COPY_BELOW {
        let factor = if capacity < QUADRUPLE_BELOW { 4 } else { 2 };
        let mut bigger = spares.take(capacity * factor);
        bigger.extend_from_slice(refs);
        let outgrown = std::mem::replace(refs, bigger);
        spares.give_back(outgrown);
    } else {
        grow(refs, KEEP_CAPACITY);
    }
}

/// Empty slot vectors made up front, by size (see [`Levels::with_capacity`]).
#[derive(Debug, Default)]
struct Spares {
    /// `by_size[k]` holds vectors of [`SPARE_CAPACITIES`]`[k]` references; its capacity, set
    /// when the wheel is made, is the most it ever holds.
    by_size: [Vec<Vec<u64>>; SPARE_SIZES],
}

impl Spares {
    fn with_capacity(timers: usize) -> Self {
        let by_size = std::array::from_fn(|k| {
            let count = (timers / TIMERS_PER_SPARE[k]).min(MAX_SPARES);
            (0..count)
                .map(|_| Vec::with_capacity(SPARE_CAPACITIES[k]))
                .collect()
        });
        Spares { by_size }
    }

    /// The list of spares of `capacity` references; `None` for a size not kept.
    fn list_of(&mut self, capacity: usize) -> Option<&mut Vec<Vec<u64>>> {
        let k = SPARE_CAPACITIES.iter().position(|&c| c == capacity)?;
        Some(&mut self.by_size[k])
    }

    /// An empty vector of `capacity` references: a spare if one of that size is left.
    fn take(&mut self, capacity: usize) -> Vec<u64> {
        self.list_of(capacity)
            .and_then(Vec::pop)
            .unwrap_or_else(|| Vec::with_capacity(capacity))
    }

    /// Keeps `refs`, emptied, if it has a spare size and the list of that size has room;
    /// frees it otherwise.
    fn give_back(&mut self, mut refs: Vec<u64>) {
        let Some(list) = self.list_of(refs.capacity()) else {
            return;
        };
        if list.len() < list.capacity() {
            refs.clear();
            list.push(refs);
        }
    }

    fn bytes_held(&self) -> usize {
        self.by_size
            .iter()
            .map(|list| {
                list.iter().map(|v| v.capacity() * 8).sum::<usize>()
                    + list.capacity() * std::mem::size_of::<Vec<u64>>()
            })
            .sum()
    }
}

#[derive(Debug, Default)]
pub(crate) struct Slot {
    pub(crate) refs: Vec<u64>,
    /// References in `refs` whose timers were unlinked (pending unlinks not counted yet).
    /// The rest name timers filed here, and are [`live`](Self::live).
    ///
    /// Why the stale and not the live references are counted: a slot is empty iff it has no
    /// live timer (`flush` empties a slot when its last one goes), so a push learns whether
    /// it files the slot's first timer from the vector's length, which it reads anyway, and
    /// writes no count (92.7 → 90.5 instructions an insert, callgrind at 1 000 timers).
    stale: usize,
}

impl Slot {
    /// References that name a timer filed here (pending unlinks not taken off). The slot's
    /// bit in the bitmap is set iff this is above zero.
    #[inline]
    fn live(&self) -> usize {
        self.refs.len() - self.stale
    }
}

/// Where slot `slot` of `level` sits in [`Levels::slots`].
#[inline]
fn at(level: usize, slot: usize) -> usize {
    level * SLOTS + slot
}

/// All levels of a wheel.
#[derive(Debug)]
pub(crate) struct Levels {
    /// Occupancy bitmaps, one per level, kept together (and apart from the slots) so that
    /// finding the next occupied slot reads one or two cache lines: bit `s` of `occupied[l]`
    /// is set iff slot `s` of level `l` holds at least one live timer.
    occupied: [u64; LEVELS],
    /// Bit `l` set iff `occupied[l] != 0`: the lowest occupied level in one instruction.
    levels_occupied: u16,
    /// Every level's slots in one table, level after level (see [`at`]): a pending unlink
    /// names its slot by that one index. It covers the levels up to the highest one a timer
    /// was ever filed into (64 slots, 2 KiB, per level), grown by [`Levels::push`]: a wheel
    /// whose deadlines stay within 64² ticks of `elapsed` holds two levels, not eleven. Every
    /// other access is to an occupied or pending slot, so within it.
    slots: Vec<Slot>,
    /// Live timers filed in the levels as of the last flush: the sum of the slots' live
    /// counts (the unlinks still pending are not taken off either).
    live: usize,
    /// Stale references in the levels as of the last flush: the sum over slots of
    /// references minus live count.
    stale: usize,
    /// Slots (`level * SLOTS + slot`) whose live count a cancel or move has yet to lower,
    /// in the order of the unlinks (see [`Levels::try_unlink`]); the first `pending_len`
    /// count.
    pending: [u16; PENDING],
    pending_len: usize,
    /// Empty vectors made up front, handed to slots as they fill and grow (see
    /// [`Levels::with_capacity`]) and given back when a slot outgrows one (see
    /// [`grow_refs`]). Counted in [`bytes_held`](Self::bytes_held).
    spares: Spares,
}

impl Levels {
    /// Levels for a wheel that expects `timers` timers: no level table yet, and spare slot
    /// vectors ([`Spares`]): of 4 references (32 bytes) one per 24 timers, of 16 and of 64
    /// references (128 and 512 bytes) one each per 64 timers, at most [`MAX_SPARES`] of each
    /// size (42 KiB, 46.5 KiB with the lists): about 11 bytes per expected timer (13 with the
    /// lists), none below 24 timers.
    ///
    /// Why: a fresh wheel's slots start empty, and each slot's first vector was a `malloc`
    /// inside an insert. At 1 000 timers over a minute about 55 slots fill (about 40 of level
    /// 1, with one to four timers each, and 14 of level 2). Made here, those allocations
    /// happen once when the wheel is built, as the arena's do: an insert went from 166 to
    /// 157 instructions (callgrind, the drop-in `DelayQueue`,
    /// `tickwheel-bench/examples/dq_insert`), and from 178 to 177 counting the queue's
    /// construction and drop. The busy level-2 slots there grow to 16 and then 64
    /// references; spares of those sizes took the core `Wheel`'s insert from 107 to 100
    /// instructions and the drop-in's from 152 to 145, and `compare`'s inserts of 1 000
    /// timers 4–6 % faster (six alternated runs, every one faster). Counting construction
    /// and drop they cost what they save (172 and 173 instructions an insert at 1 000
    /// timers; 268 and 277 at 100, where spares of 64 go unused): they move allocations out
    /// of the inserts, as a capacity hint does.
    pub(crate) fn with_capacity(timers: usize) -> Self {
        Levels {
            spares: Spares::with_capacity(timers),
            occupied: [0; LEVELS],
            levels_occupied: 0,
            slots: Vec::new(),
            live: 0,
            stale: 0,
            pending: [0; PENDING],
            pending_len: 0,
        }
    }

    #[inline]
    fn mark_empty(&mut self, level: usize, slot: usize) {
        mark_empty(&mut self.occupied, &mut self.levels_occupied, level, slot);
    }

    /// Files reference `r` in `slot` of `level`. Returns whether it is the slot's first (the
    /// slot was empty and is now marked occupied): only then can the slot start before the
    /// wheel's `quiet_until`, which is no later than the start of any occupied slot.
    #[inline]
    pub(crate) fn push(&mut self, level: usize, slot: usize, r: u64) -> bool {
        self.push_then(level, slot, r, || {})
    }

    /// [`push`](Self::push), calling `on_first` when the reference is the slot's first.
    ///
    /// Why a closure: run before the vector grows, the caller's own work for a first
    /// reference (lowering `quiet_until`) needs the level and deadline only up to there,
    /// not across the call that grows the vector; kept for after `push` returned, they were
    /// spilled to the stack on every insert.
    #[inline(always)]
    pub(crate) fn push_then(
        &mut self,
        level: usize,
        slot: usize,
        r: u64,
        on_first: impl FnOnce(),
    ) -> bool {
        // One bounds check: a check for the table's growth followed by indexing took two.
        let Some(s) = self.slots.get_mut(at(level, slot)) else {
            let first = self.push_beyond_table(level, slot, r);
            if first {
                on_first();
            }
            return first;
        };
        // The bits are set iff the slot has live timers (pending unlinks lower neither
        // before the flush), so only a slot's first live timer sets them: two
        // read-modify-writes fewer on the other inserts. A slot without live timers holds
        // no references.
        let first = s.refs.is_empty();
        if first {
            self.occupied[level] |= 1 << slot;
            self.levels_occupied |= 1 << level;
            on_first();
        }
        if s.refs.len() == s.refs.capacity() {
            grow_refs(&mut s.refs, &mut self.spares);
        }
        s.refs.push(r);
        self.live += 1;
        first
    }

    /// [`push`](Self::push) into a level the table does not cover yet: grows the table to
    /// cover `level` (and every level below it) first.
    #[cold]
    #[inline(never)]
    fn push_beyond_table(&mut self, level: usize, slot: usize, r: u64) -> bool {
        let len = at(level + 1, 0);
        self.slots.reserve_exact(len - self.slots.len());
        self.slots.resize_with(len, Slot::default);
        self.push(level, slot, r)
    }

    /// One live timer left the slot (cancelled or moved); its reference stays behind and
    /// counts as stale from now on. O(1).
    ///
    /// The slot's own count (and with it the occupancy bitmap) is updated later, in
    /// [`flush`](Self::flush): before anything reads it, or once [`PENDING`] unlinks wait.
    /// Why: the slot comes from the entry the cancel has just read, usually a cache miss,
    /// and with the count lowered here (a read-modify-write at an address that waits for
    /// that miss) the misses of consecutive cancels overlapped less: at 1 M timers, random
    /// cancels took 27–30 ns with it and 20–21 ns with only the level-wide counts updated
    /// (a scratch driver, AMD EPYC guest; how the processor serialises them was not
    /// measured, as the guest has no hardware counters). Appending to `pending` writes at an
    /// address known in advance. `tickwheel-bench/examples/compare` at f56240d, workload 2 at 1 M: 24–25 ns
    /// per cancel instead of 29–31.
    ///
    /// The level-wide counts are lowered in the flush too: [`over_bound`](Self::over_bound)
    /// adds the pending unlinks itself. Each instruction after the miss costs: at 1 M timers,
    /// each cancel's entry miss overlaps with those of the cancels the processor has already
    /// decoded, and the fewer instructions a cancel takes, the more of them fit in its
    /// window. The sweep check (the caller's, on a full list: see `Wheel::unlink`) and the
    /// level-wide counts took 1.5–2 ns of a 24 ns cancel there.
    ///
    /// `slot` is the index in all levels (`level * SLOTS + slot`). `false`, and nothing
    /// done, when [`PENDING`] unlinks already wait: [`flush`](Self::flush) first.
    #[inline]
    pub(crate) fn try_unlink(&mut self, slot: usize) -> bool {
        match self.pending.get_mut(self.pending_len) {
            Some(next) => {
                *next = slot as u16;
                self.pending_len += 1;
                true
            }
            None => false,
        }
    }

    /// Counts the unlinks that [`try_unlink`](Self::try_unlink) left pending as stale
    /// references of their slots, and in the level-wide counts. A slot with no live reference
    /// left is emptied at once, without looking: all its references are stale. O(pending
    /// unlinks).
    #[cold]
    #[inline(never)]
    fn flush_pending(&mut self) {
        let pending_len = std::mem::take(&mut self.pending_len);
        self.live -= pending_len;
        self.stale += pending_len;
        for &p in &self.pending[..pending_len] {
            let p = p as usize;
            let s = &mut self.slots[p];
            debug_assert!(s.live() > 0, "unlink from a slot with no live timers: {p}");
            s.stale += 1;
            if s.live() == 0 {
                self.stale -= s.refs.len();
                s.refs.clear();
                s.stale = 0;
                mark_empty(
                    &mut self.occupied,
                    &mut self.levels_occupied,
                    p / SLOTS,
                    p % SLOTS,
                );
            }
        }
    }

    /// Applies the pending unlinks, so that every slot's live count and the occupancy
    /// bitmaps are exact. Cheap when none is pending. Returns whether it applied some and
    /// they took the levels [`over_bound`](Self::over_bound): the caller should sweep.
    #[inline]
    pub(crate) fn flush(&mut self) -> bool {
        if self.pending_len == 0 {
            return false;
        }
        self.flush_pending();
        self.over_bound()
    }

    /// Pending unlinks of a slot.
    fn pending_in(&self, level: usize, slot: usize) -> usize {
        let p = at(level, slot) as u16;
        let pending = &self.pending[..self.pending_len];
        pending.iter().filter(|&&q| q == p).count()
    }

    /// Whether stale references outnumber live timers by more than [`SWEEP_AT`]: time to
    /// sweep. Exact also while unlinks are pending (each is one live timer fewer, one stale
    /// reference more).
    #[inline]
    pub(crate) fn over_bound(&self) -> bool {
        self.stale + 2 * self.pending_len > self.live + SWEEP_AT
    }

    /// Compacts every slot whose stale references outnumber its live ones: `retain` keeps
    /// the current references of a vector. Afterwards stale references are at most as many
    /// as live timers.
    pub(crate) fn sweep(&mut self, mut retain: impl FnMut(&mut Vec<u64>)) {
        let _ = self.flush();
        self.compact_where(|s| s.refs.len() > 2 * s.live(), &mut retain);
    }

    /// Compacts every occupied slot: `retain` keeps the current references of a vector.
    pub(crate) fn compact_all(&mut self, mut retain: impl FnMut(&mut Vec<u64>)) {
        let _ = self.flush();
        self.compact_where(|_| true, &mut retain);
    }

    fn compact_where(
        &mut self,
        pick: impl Fn(&Slot) -> bool,
        retain: &mut impl FnMut(&mut Vec<u64>),
    ) {
        for (level, &bits) in self.occupied.iter().enumerate() {
            let mut occupied = bits;
            while occupied != 0 {
                let s = &mut self.slots[at(level, occupied.trailing_zeros() as usize)];
                occupied &= occupied - 1;
                if pick(s) {
                    let before = s.refs.len();
                    retain(&mut s.refs);
                    // Every reference dropped was stale. One that stays may be too: a reset
                    // unlinks its timer before filing it anew, and a sweep in between keeps
                    // the old reference, still current until the filing.
                    let dropped = before - s.refs.len();
                    s.stale -= dropped;
                    self.stale -= dropped;
                }
            }
        }
    }

    /// Takes every reference out of a slot, leaving it empty; returns them and how many are
    /// live.
    #[inline]
    pub(crate) fn take(&mut self, level: usize, slot: usize) -> (Vec<u64>, usize) {
        // The wheel flushed (and swept if need be) when its poll began; this flush finds
        // nothing pending, and processing the slot is followed by the sweep check anyway.
        let _ = self.flush();
        self.mark_empty(level, slot);
        let s = &mut self.slots[at(level, slot)];
        let live = s.live();
        self.stale -= s.refs.len() - live;
        self.live -= live;
        s.stale = 0;
        (std::mem::take(&mut s.refs), live)
    }

    /// Gives an emptied vector back to the slot so its capacity is reused.
    #[inline]
    pub(crate) fn restore(&mut self, level: usize, slot: usize, mut refs: Vec<u64>) {
        let s = &mut self.slots[at(level, slot)];
        if s.refs.capacity() == 0 && refs.capacity() <= KEEP_CAPACITY {
            refs.clear();
            s.refs = refs;
        }
    }

    /// The lowest occupied slot of the lowest occupied level.
    ///
    /// Exact also while unlinks are pending (a slot whose only live timers were unlinked is
    /// not occupied), at O(pending unlinks) per slot passed over; the wheel's `&mut` paths
    /// [`flush`](Self::flush) first and take the fast path.
    #[inline]
    pub(crate) fn first_occupied(&self) -> Option<(usize, usize)> {
        if self.levels_occupied == 0 {
            return None;
        }
        if self.pending_len != 0 {
            return self.first_occupied_pending();
        }
        self.first_marked()
    }

    /// The lowest slot of the lowest level whose bit is set, pending unlinks not taken off:
    /// [`first_occupied`](Self::first_occupied) once they are applied, or an earlier slot
    /// whose live timers all have pending unlinks. O(1).
    #[inline]
    pub(crate) fn first_marked(&self) -> Option<(usize, usize)> {
        if self.levels_occupied == 0 {
            return None;
        }
        let level = self.levels_occupied.trailing_zeros() as usize;
        Some((level, self.occupied[level].trailing_zeros() as usize))
    }

    #[cold]
    #[inline(never)]
    fn first_occupied_pending(&self) -> Option<(usize, usize)> {
        for (level, &bits) in self.occupied.iter().enumerate() {
            let mut occupied = bits;
            while occupied != 0 {
                let slot = occupied.trailing_zeros() as usize;
                occupied &= occupied - 1;
                let s = &self.slots[at(level, slot)];
                if s.live() > self.pending_in(level, slot) {
                    return Some((level, slot));
                }
            }
        }
        None
    }

    /// The slots whose bitmap bit is set, lowest level first and in slot order within a
    /// level (which is the order their start ticks come in), with their references, live or
    /// stale. A slot whose last live timer has a pending unlink may still be listed.
    pub(crate) fn occupied_in_order(&self) -> impl Iterator<Item = (usize, usize, &[u64])> {
        self.occupied
            .iter()
            .enumerate()
            .flat_map(move |(level, &bits)| {
                let mut occupied = bits;
                std::iter::from_fn(move || {
                    if occupied == 0 {
                        return None;
                    }
                    let slot = occupied.trailing_zeros() as usize;
                    occupied &= occupied - 1;
                    Some((level, slot, self.slots[at(level, slot)].refs.as_slice()))
                })
            })
    }

    /// Live timers in a slot, pending unlinks taken off.
    #[cfg(test)]
    pub(crate) fn live_in(&self, level: usize, slot: usize) -> u32 {
        let empty = Slot::default();
        let s = self.slots.get(at(level, slot)).unwrap_or(&empty);
        let pending = self.pending_in(level, slot);
        assert!(
            s.live() >= pending,
            "more pending unlinks than live timers: L{level} S{slot}"
        );
        assert_eq!(
            self.occupied[level] >> slot & 1 == 1,
            s.live() > 0,
            "bitmap bit iff the slot's count (pending unlinks not yet taken off) is positive: L{level} S{slot}"
        );
        (s.live() - pending) as u32
    }

    #[cfg(test)]
    pub(crate) fn refs_in(&self, level: usize, slot: usize) -> &[u64] {
        self.slots
            .get(at(level, slot))
            .map_or(&[], |s| s.refs.as_slice())
    }

    /// The occupancy bitmap of a level with pending unlinks applied: bit `s` iff slot `s`
    /// holds a live timer.
    #[cfg(test)]
    pub(crate) fn occupied(&self, level: usize) -> u64 {
        debug_assert_eq!(
            self.levels_occupied >> level & 1 == 1,
            self.occupied[level] != 0,
            "level bit iff the level has an occupied slot: L{level}"
        );
        (0..SLOTS)
            .filter(|&slot| self.live_in(level, slot) > 0)
            .fold(0, |bits, slot| bits | 1 << slot)
    }

    /// References in all slots, live or stale.
    pub(crate) fn total_refs(&self) -> usize {
        self.live + self.stale
    }

    /// Checks the level-wide counts against the slots.
    #[cfg(test)]
    pub(crate) fn check_counts(&self) {
        let (live, refs) = self
            .slots
            .iter()
            .fold((0, 0), |(l, r), s| (l + s.live(), r + s.refs.len()));
        assert_eq!(
            self.live, live,
            "the live count is the sum of the slots' (pending unlinks not yet taken off)"
        );
        assert_eq!(
            self.stale,
            refs - live,
            "the stale count is references minus live"
        );
        // Exact counts: each pending unlink is one live timer fewer, one stale reference more.
        let (live, stale) = (live - self.pending_len, self.stale + self.pending_len);
        assert!(
            stale <= live + LEVELS_SLACK,
            "stale references {stale} stay within live {live} + {LEVELS_SLACK}"
        );
    }

    pub(crate) fn bytes_held(&self) -> usize {
        let refs: usize = self.slots.iter().map(|s| s.refs.capacity() * 8).sum();
        refs + self.spares.bytes_held() + self.slots.capacity() * std::mem::size_of::<Slot>()
    }

    pub(crate) fn clear(&mut self) {
        self.occupied = [0; LEVELS];
        self.levels_occupied = 0;
        self.live = 0;
        self.stale = 0;
        self.pending_len = 0;
        for s in self.slots.iter_mut() {
            s.refs.clear();
            s.stale = 0;
        }
    }

    /// Compacts every slot with `current` and gives spare capacity back.
    pub(crate) fn shrink_to_fit(&mut self, current: impl Fn(u64) -> bool) {
        let _ = self.flush();
        for s in self.slots.iter_mut() {
            s.refs.retain(|&r| current(r));
            s.refs.shrink_to_fit();
            s.stale = 0;
        }
        self.spares = Spares::default();
        self.stale = 0;
    }
}

/// Clears a slot's bit in its level's bitmap, and the level's bit once the level is empty.
#[inline]
fn mark_empty(occupied: &mut [u64; LEVELS], levels_occupied: &mut u16, level: usize, slot: usize) {
    occupied[level] &= !(1 << slot);
    if occupied[level] == 0 {
        *levels_occupied &= !(1 << level);
    }
}
