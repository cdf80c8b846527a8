//! [`in_order`]: timers gathered from the shards, put in delivery order (deadline tick, then
//! `seq`) for drains, freezes and member lists.
//!
//! A drain gathers a queue's members shard after shard, each shard's newest first. Sorting
//! those tuples (32 bytes each with `u64` ids and values) moved each one about log n times:
//! two stable sorts, by `seq` and then by tick, took a tenth of workload 7's instructions
//! (`sched_ops` under callgrind, 1 M timers). Here the sort moves 8-byte keys instead. A key
//! packs the tick and the `seq`, as offsets from the smallest of each, above the item's
//! index; ordering the keys orders the items, which then move once each, into place, by
//! following the cycles of that permutation. Keys that do not fit in 64 bits (ticks or
//! `seq`s spread over about 2^40 or more, with many items) fall back to a stable sort of the
//! tuples.

/// Sorts `items` by `(tick, seq)`, equal pairs in the order given (as a stable sort would),
/// and drops the keys. O(n log n), allocating one `u64` per item besides the result.
pub(crate) fn in_order<E>(mut items: Vec<(u64, u64, E)>) -> Vec<E> {
    if items.len() > 1 {
        match packed_keys(&items) {
            Some((keys, index_bits)) => permute(&mut items, keys, index_bits),
            None => items.sort_by_key(|&(tick, seq, _)| (tick, seq)),
        }
    }
    items.into_iter().map(|(_, _, e)| e).collect()
}

/// Bits needed to write `x`.
fn bits(x: u64) -> u32 {
    u64::BITS - x.leading_zeros()
}

/// `x << n`, where a shift by the whole width (`x` is then 0, having 0 bits) gives 0.
fn shl(x: u64, n: u32) -> u64 {
    x.checked_shl(n).unwrap_or(0)
}

/// One key per item: `tick - min tick`, then `seq - min seq`, then the item's index, each in
/// as many bits as its largest value needs; `None` when those do not fit in 64 bits. Keys are
/// distinct (the indexes are), and their order is `(tick, seq, index)`.
fn packed_keys<E>(items: &[(u64, u64, E)]) -> Option<(Vec<u64>, u32)> {
    let (mut tick_lo, mut tick_hi) = (u64::MAX, 0);
    let (mut seq_lo, mut seq_hi) = (u64::MAX, 0);
    for &(tick, seq, _) in items {
        (tick_lo, tick_hi) = (tick_lo.min(tick), tick_hi.max(tick));
        (seq_lo, seq_hi) = (seq_lo.min(seq), seq_hi.max(seq));
    }
    let index_bits = bits(items.len() as u64 - 1);
    let seq_bits = bits(seq_hi - seq_lo);
    if bits(tick_hi - tick_lo) + seq_bits + index_bits > u64::BITS {
        return None;
    }
    let keys = (items.iter().enumerate())
        .map(|(index, &(tick, seq, _))| {
            shl(shl(tick - tick_lo, seq_bits) | (seq - seq_lo), index_bits) | index as u64
        })
        .collect();
    Some((keys, index_bits))
}

/// Sorts `keys` and moves `items` so that position `j` holds the item whose index is in the
/// low `index_bits` bits of the `j`-th key: each cycle of the permutation is followed once,
/// one swap per item moved.
fn permute<E>(items: &mut [E], mut keys: Vec<u64>, index_bits: u32) {
    keys.sort_unstable();
    let mask = u64::MAX.checked_shr(u64::BITS - index_bits).unwrap_or(0);
    for start in 0..keys.len() {
        let mut j = start;
        loop {
            let from = (keys[j] & mask) as usize;
            // Done: from now on `j` maps to itself, so a later start here stops at once.
            keys[j] = j as u64;
            if from == start {
                break;
            }
            items.swap(j, from);
            j = from;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `in_order` must give: a stable sort by `(tick, seq)`.
    fn reference<E: Clone>(items: &[(u64, u64, E)]) -> Vec<E> {
        let mut sorted = items.to_vec();
        sorted.sort_by_key(|&(tick, seq, _)| (tick, seq));
        sorted.into_iter().map(|(_, _, e)| e).collect()
    }

    #[test]
    fn orders_by_tick_then_seq_keeping_ties_in_place() {
        let mut rng = 0x9e37_79b9_u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for n in [0usize, 1, 2, 3, 17, 600, 5000] {
            for (ticks, seqs) in [(1, 1), (4, 1 << 20), (1 << 30, 3), (u64::MAX, u64::MAX)] {
                let items: Vec<(u64, u64, usize)> = (0..n)
                    .map(|i| (next() % ticks, next() % seqs, i))
                    .collect();
                assert_eq!(
                    in_order(items.clone()),
                    reference(&items),
                    "{n} items, ticks mod {ticks}, seqs mod {seqs}"
                );
            }
        }
    }

    #[test]
    fn packs_when_it_fits_and_falls_back_when_not() {
        let near: Vec<(u64, u64, ())> = vec![(u64::MAX - 1, 5, ()), (u64::MAX, 9, ())];
        assert!(packed_keys(&near).is_some());
        let far: Vec<(u64, u64, ())> = vec![(0, 0, ()), (u64::MAX, u64::MAX, ())];
        assert!(packed_keys(&far).is_none());
    }
}
