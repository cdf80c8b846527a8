//! The sorted run of a level-2 slot under pressure, against a plain `BTreeMap<(deadline,
//! seq)>` model kept in this file (independent of `support/model.rs`): runs of exactly the
//! sizes where the sort changes (comparison below 24 references, radix below 512, counting
//! from 512, stale references counted), deadlines that differ only in the high or only in the
//! low base-64 digit of the slot, slots at the top of the `u64` range, `poll_into` stopped
//! mid-run by limits 1, run length ± 1 and resumed, and cancels, resets, re-inserts into
//! reused entries, past inserts and `shrink_to_fit` between two limited polls.
//!
//! Checked after every step: a fired timer is due (never early), has the model's earliest
//! deadline, and comes after no never-reset timer of that deadline inserted before it; a
//! poll that stops short leaves nothing due; `elapsed`, `len`, `peek` and the keys agree with
//! the model. `PROPTEST_CASES` raises the case count.

#[path = "../support/mod.rs"]
mod support;

mod harness;
mod proptests;

use std::collections::{BTreeMap, HashMap};

use tickwheel::{IndexedWheel, TimerKey, Wheel};

use harness::Harness;

/// Stale references allowed beyond twice the live timers: 8 per slot of the levels and of
/// the due queue (`WheelStats::stale`).
pub(crate) const STALE_BOUND: usize = 8 * 706;

/// Offsets inside a 4 096-tick slot that make the radix digits disagree with each other:
/// high digit only, low digit only, both extremes, and a few repeats.
const EDGES: [u64; 16] = [
    4095, 0, 64, 63, 4032, 1, 4031, 65, 2048, 2047, 127, 128, 4094, 4033, 0, 4095,
];

/// The `i`th deadline offset of a scrambled slot: edges first, then a spread over both digits
/// with many equal deadlines (only 257 distinct offsets).
pub(crate) fn offset(i: u64) -> u64 {
    if (i as usize) < EDGES.len() {
        return EDGES[i as usize];
    }
    let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
    // High digit and low digit drawn apart, with the top of each digit common.
    let high = [0, 63, 1, 62, 32, x % 64][(x % 6) as usize];
    let low = [0, 63, 1, 62, (x >> 8) % 64][((x >> 4) % 5) as usize];
    (high << 6) | low
}

/// Every start of [`starts`] (with its block) by every `n` of `ns` by every limit of
/// `limits`: `(start, block, n, limit)`.
fn grid<'a>(
    ns: &'a [u64],
    limits: &'a [usize],
) -> impl Iterator<Item = (u64, u64, u64, usize)> + 'a {
    starts().into_iter().flat_map(move |(start, block)| {
        (ns.iter()).flat_map(move |&n| limits.iter().map(move |&limit| (start, block, n, limit)))
    })
}

/// Wheels that reach a level-2 slot (`block`): start at 0, at long-uptime ticks, and with the
/// slot at the very top of the range (its last tick `u64::MAX`).
pub(crate) fn starts() -> [(u64, u64); 6] {
    [
        (0, 4096),
        // From far below: the top slot is reached through a cascade from every level.
        (0, u64::MAX - 4095),
        (3, 4096 * 5),
        ((1 << 32) - 3 * 4096, (1 << 32) - 4096),
        ((1 << 63) + 4096, (1 << 63) + 2 * 4096),
        (u64::MAX - 8191, u64::MAX - 4095),
    ]
}

/// The sizes at which the run's sort changes, and around them.
const SIZES: [u64; 19] = [
    1, 2, 22, 23, 24, 25, 26, 63, 64, 65, 200, 510, 511, 512, 513, 514, 700, 4096, 4097,
];

#[test]
fn runs_at_every_sort_threshold_come_out_in_model_order() {
    for (start, block) in starts() {
        for n in SIZES {
            for limit in [1usize, 7, n as usize - 1, n as usize, n as usize + 1] {
                if limit == 0 {
                    continue;
                }
                let mut h = Harness::new(start);
                for i in 0..n {
                    h.insert(block + offset(i));
                }
                // Up to the slot's first tick, then through it with `limit`.
                h.drain(block, limit);
                h.drain(u64::MAX - 1, limit);
                assert!(
                    h.timers.is_empty() || h.earliest() == Some(u64::MAX),
                    "start {start}, n {n}, limit {limit}: everything fired"
                );
                h.drain(u64::MAX, limit);
                assert!(h.wheel.is_empty(), "start {start}, n {n}, limit {limit}");
            }
        }
    }
}

/// Ticks polled one by one through the slot, with each limit: the run's head taken directly
/// and the quiet mark after each tick's last timer.
#[test]
fn runs_polled_tick_by_tick_with_limits() {
    for (start, block, n, limit) in grid(&[23u64, 24, 25, 511, 512, 513], &[1usize, 2, 3]) {
        let mut h = Harness::new(start);
        for i in 0..n {
            h.insert(block + offset(i));
        }
        let mut now = block;
        loop {
            h.drain(now, limit);
            if now == block + 4095 {
                break;
            }
            now += 1;
        }
        assert!(h.wheel.is_empty(), "start {start}, n {n}, limit {limit}");
    }
}

/// Stale references count towards the sort thresholds (the sort sees the slot's references,
/// not its timers): 24 or 512 references with one live timer, or with all but one stale,
/// and entries reused into the same slot with new generations.
#[test]
fn stale_references_at_the_thresholds() {
    for (start, block) in starts() {
        for refs in [23u64, 24, 25, 511, 512, 513] {
            for live_every in [1u64, 2, 5, refs] {
                let mut h = Harness::new(start);
                let keys: Vec<(u64, TimerKey)> = (0..refs)
                    .map(|i| {
                        let k = h.insert(block + offset(i));
                        (h.next_id - 1, k)
                    })
                    .collect();
                for (i, &(id, key)) in keys.iter().enumerate() {
                    if i as u64 % live_every != 0 {
                        h.cancel_id(id, key);
                    }
                }
                // Reuse the freed entries in the same slot: new generations, same offsets.
                for i in 0..refs / 3 {
                    h.insert(block + offset(refs - 1 - i));
                }
                h.check("after cancels and reuses");
                h.drain(block, 1);
                h.drain(block + 4095, 3);
                assert!(h.wheel.is_empty(), "start {start}, refs {refs}");
            }
        }
    }
}

/// Between two limited polls inside the run: cancel the next timer (the run's head) and the
/// one after, reset others earlier, later, past the slot and into the past, insert at the
/// run's ticks and at or before `elapsed`, reuse freed entries, shrink; then resume.
#[test]
fn edits_between_limited_polls_inside_the_run() {
    for (start, block) in starts() {
        for n in [24u64, 25, 100, 512, 513] {
            for limit in [1usize, 2, n as usize - 1] {
                let mut h = Harness::new(start);
                for i in 0..n {
                    h.insert(block + offset(i));
                }
                h.poll_into(block, usize::MAX);
                let mut round = 0u64;
                while !h.timers.is_empty() && round < 400 {
                    round += 1;
                    let now = h.earliest().unwrap_or(block).min(block + 4095);
                    h.poll_into(now, limit);
                    edit(&mut h, block, round);
                    if round % 7 == 0 {
                        h.shrink();
                    }
                }
                h.drain(u64::MAX, limit);
                assert!(h.wheel.is_empty(), "start {start}, n {n}, limit {limit}");
            }
        }
    }
}

/// One round of edits chosen by `round`, aimed at the model's next timers.
fn edit(h: &mut Harness, block: u64, round: u64) {
    let next = h.next(4);
    let e = h.elapsed;
    match round % 6 {
        0 => {
            if let Some(&(id, key)) = next.first() {
                h.cancel_id(id, key);
            }
        }
        1 => {
            if let Some(&(id, key)) = next.get(1) {
                // Later, inside the slot: stays in the run.
                let d = h.timers[&id]
                    .deadline
                    .saturating_add(64 * (round % 5))
                    .min(block + 4095);
                h.reset_id(id, key, d);
            }
            h.insert(e);
        }
        2 => {
            if let Some(&(id, key)) = next.get(2) {
                h.reset_id(id, key, e.saturating_sub(round % 3));
            }
            if let Some(&(id, key)) = next.first() {
                h.cancel_id(id, key);
                // The freed entry again, at the same deadline as the run's next timers.
                let d = h.earliest().unwrap_or(e);
                h.insert(d.max(e));
            }
        }
        3 => {
            if let Some(&(id, key)) = next.get(3) {
                // Past the slot's end: filed again when the run reaches it.
                h.reset_id(id, key, block.saturating_add(4096 + round));
            }
            if let Some(&(id, key)) = next.first() {
                // Earlier than its place, still ahead of elapsed when possible.
                let d = h.timers[&id].deadline.saturating_sub(1).max(e);
                h.reset_id(id, key, d);
            }
        }
        4 => {
            // Stale keys: everything issued, fired and cancelled ones included.
            let ids = h.ids.clone();
            for &(id, key) in ids.iter().step_by(1 + (round as usize % 5)) {
                if !h.timers.contains_key(&id) {
                    h.cancel_id(id, key);
                    h.reset_id(id, key, e);
                }
            }
            h.insert(block + offset(round));
            h.insert(e.saturating_sub(1));
        }
        _ => {
            for &(id, key) in &next {
                h.cancel_id(id, key);
            }
            for i in 0..next.len() as u64 {
                h.insert(block + offset(round + i));
            }
        }
    }
    h.check(&format!("edit round {round}"));
}

/// Timers that sit in a run's slot as stale references while their entry is reused 2^20
/// times (the epoch's range): the epoch sweep must drop them before they look current again.
#[test]
fn run_references_survive_a_full_epoch_of_reuse() {
    let (start, block) = (0, 4096);
    let mut h = Harness::new(start);
    for i in 0..30u64 {
        h.insert(block + offset(i));
    }
    h.poll_into(block + 64, 1);
    // The next timer in the run, cancelled: its reference stays in the run.
    let (&id, &key) = h
        .queue
        .values()
        .next()
        .map(|id| (id, &h.timers[id].key))
        .expect("timers pending");
    h.cancel_id(id, key);
    // Reuse its entry (the free list hands it back first) for a full epoch.
    for _ in 0..(1u32 << 20) + 5 {
        let k = h.wheel.insert(u64::MAX, 0);
        assert_eq!(h.wheel.cancel(k), Some(0));
    }
    // Then reuse it once more inside the slot, ahead of the run's remaining timers.
    h.insert(block + 4095);
    h.check("after a full epoch of reuse");
    h.drain(block + 4095, 2);
    assert!(h.wheel.is_empty());
}

/// A run whose live timers come first and whose stale references sit at its end: taking
/// the live ones one at a time must keep compacting the run (the inline drop of stale
/// references behind a taken head checks the run's bound too), or the stale references
/// outnumber the last timer by far more than the bound.
#[test]
fn taking_a_run_keeps_its_stale_references_bounded() {
    for (start, block) in starts() {
        for limit in [1usize, 2, 5] {
            let mut h = Harness::new(start);
            for i in 0..3000u64 {
                h.insert(block + i);
            }
            let doomed: Vec<(u64, TimerKey)> = (0..6000u64)
                .map(|i| (h.next_id, h.insert(block + 3500 + i % 590)))
                .collect();
            h.insert(block + 4095);
            h.poll_into(block, limit);
            for (id, key) in doomed {
                h.cancel_id(id, key);
            }
            h.check("after the cancels");
            h.drain(block + 2999, limit);
            assert_eq!(
                h.timers.len(),
                1,
                "start {start}: only the last timer is left"
            );
            h.drain(block + 4095, limit);
            assert!(h.wheel.is_empty());
        }
    }
}

/// Heads moved later while they waited in the slot: after a head is taken, the next heads
/// at the same tick are current but not due, and must be filed again by their new deadline
/// (inside the slot, at its last tick, past it, at `u64::MAX`), one or many in a row, with
/// limited polls stopping among them and cancels and resets between the polls.
#[test]
fn heads_moved_later_behind_a_taken_head() {
    for (start, block, n, limit) in grid(&[10u64, 23, 24, 300, 511, 512], &[1usize, 2, 31]) {
        let mut h = Harness::new(start);
        let tick = block + 100;
        // Per tick: one timer left alone, then a stretch moved later, then another.
        let mut moved = Vec::new();
        for t in 0..3u64 {
            h.insert(tick + t);
            for i in 0..n / 3 {
                let id = h.next_id;
                let key = h.insert(tick + t);
                moved.push((id, key, i));
            }
            h.insert(tick + t);
        }
        for (j, &(id, key, i)) in moved.iter().enumerate() {
            let d = match i % 5 {
                0 => tick + 1,
                1 => block + 4095,
                2 => block.saturating_add(4096 + i),
                3 => u64::MAX,
                _ => tick + 2 + (j as u64 % 3),
            };
            h.reset_id(id, key, d.max(tick + 1));
        }
        h.poll_into(block, limit);
        let mut round = 0;
        while h.earliest().is_some_and(|d| d <= block + 4095) {
            round += 1;
            let n = h.poll_into(block + 4095, limit);
            if round % 3 == 0 {
                // Cancel and reset the model's next two between the polls.
                let next = h.next(2);
                if let Some(&(id, key)) = next.first() {
                    h.cancel_id(id, key);
                }
                if let Some(&(id, key)) = next.get(1) {
                    let d = h.timers[&id].deadline.saturating_add(1);
                    h.reset_id(id, key, d);
                }
            }
            if n < limit {
                break;
            }
        }
        h.drain(u64::MAX, limit);
        assert!(h.wheel.is_empty(), "start {start}, n {n}, limit {limit}");
    }
}

/// `IndexedWheel` over a run: an id replaced by `insert` while the run is partly taken
/// counts as freshly inserted (the back of its tick), at the tick being taken, at a later
/// tick of the run, and behind `elapsed`.
#[test]
fn indexed_replacements_inside_a_partly_taken_run() {
    for (start, block) in starts() {
        for n in [24u64, 25, 511, 512, 513] {
            let mut w = IndexedWheel::starting_at(start);
            // Model: (deadline, seq) -> id, and id -> (deadline, seq).
            let mut queue = BTreeMap::new();
            let mut ids = HashMap::new();
            let mut seq = 0u64;
            let mut put = |w: &mut IndexedWheel<u64, u64>,
                           queue: &mut BTreeMap<(u64, u64), u64>,
                           ids: &mut HashMap<u64, (u64, u64)>,
                           id: u64,
                           d: u64| {
                seq += 1;
                let old = w.insert(id, d, id);
                match ids.insert(id, (d, seq)) {
                    Some(prev) => {
                        assert_eq!(old, Some(id), "replacing id {id}");
                        queue.remove(&prev);
                    }
                    None => assert_eq!(old, None, "new id {id}"),
                }
                queue.insert((d, seq), id);
            };
            for id in 0..n {
                put(
                    &mut w,
                    &mut queue,
                    &mut ids,
                    id,
                    block + offset(id) % 8 * 64,
                );
            }
            let mut out = Vec::new();
            let mut round = 0u64;
            loop {
                round += 1;
                out.clear();
                let got = w.poll_into(block + 4095, 3, &mut out);
                for &(id, v) in &out {
                    assert_eq!(id, v);
                    let (&(d, s), &want) = queue.iter().next().expect("model has a timer");
                    assert_eq!(
                        (id, ids[&id].0),
                        (want, d),
                        "start {start}, n {n}, round {round}: fired id {id}, model's next id {want} (seq {s})"
                    );
                    queue.remove(&(d, s));
                    ids.remove(&id);
                }
                if got < 3 {
                    break;
                }
                let e = w.elapsed();
                // Replace the model's next id at its own tick, another at a later tick of
                // the run, and one behind elapsed.
                let next: Vec<u64> = queue.values().take(3).copied().collect();
                if let Some(&id) = next.first() {
                    let d = ids[&id].0;
                    put(&mut w, &mut queue, &mut ids, id, d);
                }
                if let Some(&id) = next.get(1) {
                    put(&mut w, &mut queue, &mut ids, id, block + 64 * (round % 8));
                }
                if let Some(&id) = next.get(2) {
                    if round % 4 == 0 {
                        put(&mut w, &mut queue, &mut ids, id, e.saturating_sub(1));
                    }
                }
                assert_eq!(w.len(), ids.len());
            }
            assert!(queue.keys().next().is_none_or(|&(d, _)| d > block + 4095));
            assert_eq!(w.len(), ids.len());
        }
    }
}

/// `Wheel::next_expiration` after a timer moved later from before the earliest one: the
/// moved timer keeps its place (a level-0 slot, or the sorted run), so the answer is its old
/// tick, never later than the earliest deadline; a poll at that tick returns nothing and
/// files it anew, and the answer is then exact.
#[test]
fn next_expiration_after_a_reset_later_is_early_until_polled_then_exact() {
    // A timer at `at` is moved 10 later than the earliest pending one, at `at + 10`; in
    // level 0 (elapsed 0), and in the sorted run (after a poll to elapsed 4096).
    for (at, poll_to, place) in [(10, None, "level 0"), (4100, Some(4096), "run")] {
        let mut w = Wheel::new();
        let moved = w.insert(at, 'm');
        let earliest = w.insert(at + 10, 'e');
        assert!(w.reset(moved, at + 20));
        if let Some(now) = poll_to {
            assert!(w.poll(now).is_none());
        }
        assert_eq!(w.peek(), Some((earliest, at + 10)));
        let first = w.next_expiration().expect("two timers pending");
        assert!(
            first <= at + 10,
            "never later than the earliest deadline: {first}"
        );
        assert!(w.poll(first).is_none(), "nothing is due at {first}");
        assert_eq!(
            w.next_expiration(),
            Some(at + 10),
            "{place}, after the poll"
        );
    }
}
