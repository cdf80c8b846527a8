//! Unit tests of the arena: growth, generations, stamps, references.

use super::*;

#[test]
fn a_big_arena_grows_by_half() {
    let mut arena = Arena::<u64>::with_capacity(0);
    while arena.capacity() < GROW_BY_HALF_FROM {
        arena.insert(1, 0).expect("room");
    }
    while arena.len() < arena.capacity() {
        arena.insert(1, 0).expect("room");
    }
    let full = arena.capacity();
    arena.insert(1, 0).expect("room");
    assert!(
        arena.capacity() <= full + full / 2 + 16,
        "grew from {full} to {}",
        arena.capacity()
    );
    assert!(arena.capacity() > full);
}

#[test]
fn entry_for_u64_is_24_bytes() {
    // The vacant variant lives beside the niche of `stamp`; if a compiler change stopped
    // that, every timer would cost 8 more bytes and this test says so.
    assert_eq!(std::mem::size_of::<Entry<u64>>(), 24);
}

#[test]
fn stale_key_after_reuse() {
    let mut arena = Arena::with_capacity(0);
    let a = arena.insert(5, "a").unwrap();
    assert!(arena.remove(a.index).is_some());
    let b = arena.insert(6, "b").unwrap();
    assert_eq!(a.index, b.index, "the index is reused");
    assert_ne!(a.generation, b.generation);
    assert!(arena.get(a).is_none());
    assert_eq!(arena.get(b).map(|l| l.value), Some("b"));
}

#[test]
fn refile_makes_old_reference_stale() {
    let mut arena = Arena::with_capacity(0);
    let k = arena.insert(5, ()).unwrap();
    let r1 = arena.refile(k.index, slot_position(0, 5)).unwrap();
    assert_eq!(arena.resolve(r1), Some(k.index));
    let r2 = arena.refile(k.index, slot_position(0, 5)).unwrap();
    assert_eq!(arena.resolve(r1), None, "same position, older epoch");
    assert_eq!(arena.resolve(r2), Some(k.index));
    arena.remove(k.index);
    assert_eq!(arena.resolve(r2), None);
}

#[test]
fn exhausted_generation_retires_the_entry() {
    let mut arena = Arena::with_capacity(0);
    let k = arena.insert(1, 'a').unwrap();
    assert_eq!(k.generation, arena.offset, "an index starts at the offset");
    // Jump the generation to its last value, as 2^32 - 1 reuses would.
    let last = arena.offset.wrapping_sub(1);
    if let Some(Entry::Live(live)) = arena.entries.get_mut(k.index as usize) {
        live.generation = last;
    }
    assert!(arena.remove(k.index).is_some());
    let next = arena.insert(2, 'b').unwrap();
    assert_ne!(next.index, k.index, "a retired index is never reused");
    for generation in [arena.offset, last] {
        let old = TimerKey {
            index: k.index,
            generation,
        };
        assert!(arena.get(old).is_none(), "{old:?}");
    }
    arena.remove(next.index);
    arena.shrink_to_fit();
    let after = arena.insert(3, 'c').unwrap();
    assert_eq!(
        after.index, next.index,
        "shrink truncates the free tail but keeps the retired entry"
    );
    assert_eq!(
        after.generation,
        next.generation.wrapping_add(1),
        "and remembers the truncated index's generations were used"
    );
    assert!(
        arena
            .get(TimerKey {
                index: k.index,
                generation: last
            })
            .is_none(),
        "the last key of the retired index names nothing"
    );
}

#[test]
fn arenas_start_at_distinct_offsets() {
    let offsets: Vec<u32> = (0..64)
        .map(|_| Arena::<()>::with_capacity(0).offset)
        .collect();
    let mut sorted = offsets.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), offsets.len(), "offsets repeat: {offsets:?}");
}

#[test]
fn consecutive_counts_get_offsets_far_apart() {
    // Arenas made one after another get offsets further apart than any index is reused in
    // practice, so small generation counts never bridge two of them.
    for n in 0..4096u32 {
        let (a, b) = (fmix32(n), fmix32(n + 1));
        let gap = a.wrapping_sub(b).min(b.wrapping_sub(a));
        assert!(
            gap > 1 << 16,
            "fmix32({n}) = {a:#x} and the next {b:#x} are {gap} apart"
        );
    }
}

#[test]
fn fmix32_is_a_bijection_on_a_sample() {
    // Distinct inputs, distinct outputs (it is invertible; a sample shows no collision).
    let mut seen: Vec<u32> = (0..100_000u32).map(fmix32).collect();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), 100_000);
}

#[test]
fn epoch_multiples_ask_for_a_sweep() {
    let mut arena = Arena::with_capacity(0);
    let k = arena.insert(5, ()).unwrap();
    let mut asked = 0;
    for _ in 0..(3 * SWEEP_EVERY) {
        arena.refile(k.index, slot_position(0, 1));
        asked += u32::from(arena.take_sweep_due());
    }
    assert_eq!(asked, 3);
    assert!(!arena.take_sweep_due(), "the request is cleared once taken");
}

#[test]
fn an_insert_into_a_reused_entry_returns_the_sweep_request_instead_of_raising_it() {
    let mut arena = Arena::with_capacity(0);
    let (first, _, sweep) = arena.insert_at(5, (), slot_position(0, 1)).unwrap();
    assert!(!sweep, "a fresh entry never asks");
    arena.remove(first.index);
    let mut asked = 0;
    for _ in 0..(3 * SWEEP_EVERY) {
        let (key, _, sweep) = arena.insert_at(5, (), slot_position(0, 1)).unwrap();
        assert_eq!(key.index, first.index, "the freed entry is reused");
        asked += u32::from(sweep);
        assert!(!arena.take_sweep_due(), "returned, not raised");
        arena.remove(key.index);
    }
    assert_eq!(asked, 3);
}

#[test]
fn retain_current_keeps_current_references_in_order_across_batches() {
    // Lengths around the prefetch batch: empty, shorter, exact multiples and not.
    for len in [
        0,
        1,
        PREFETCH_BATCH - 1,
        PREFETCH_BATCH,
        PREFETCH_BATCH + 1,
        3 * PREFETCH_BATCH + 5,
    ] {
        let mut arena = Arena::with_capacity(0);
        let mut refs = Vec::new();
        let mut want = Vec::new();
        for i in 0..len {
            let key = arena.insert(i as u64, i).expect("room");
            let r = arena.refile(key.index, slot_position(1, 3)).expect("live");
            match i % 3 {
                0 => want.push(r), // current
                1 => {
                    arena.remove(key.index); // cancelled
                }
                _ => {
                    // Moved: this reference is stale, the new one is current.
                    let moved = arena.refile(key.index, slot_position(0, 7)).expect("live");
                    refs.push(r);
                    want.push(moved);
                    refs.push(moved);
                    continue;
                }
            }
            refs.push(r);
        }
        arena.retain_current(&mut refs);
        assert_eq!(refs, want, "len {len}");
    }
}

#[test]
fn positions_round_trip() {
    for level in 0..super::super::level::LEVELS {
        for slot in 0..super::super::level::SLOTS {
            let pos = slot_position(level, slot);
            assert!(pos != 0 && pos < POS_UNFILED);
            assert_eq!(position_slot(pos), Some((level, slot)));
        }
    }
    assert_eq!(position_slot(POS_DUE), None);
    assert_eq!(position_slot(POS_UNFILED), None);
}

#[test]
fn shrink_keeps_truncated_keys_stale() {
    let mut arena = Arena::with_capacity(0);
    let keys: Vec<_> = (0..4).map(|i| arena.insert(i, i).unwrap()).collect();
    for k in &keys[1..] {
        arena.remove(k.index);
    }
    arena.shrink_to_fit();
    let fresh = arena.insert(9, 9).unwrap();
    assert_eq!(fresh.index, 1);
    for k in &keys[1..] {
        assert!(arena.get(*k).is_none(), "{k:?} must stay stale");
    }
}
