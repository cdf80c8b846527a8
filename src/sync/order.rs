//! [`in_order`]: timers gathered from the shards, put in delivery order (deadline tick, then
//! `seq`) for drains, freezes and member lists.
//!
//! A drain gathers a queue's members shard after shard, each shard's newest first. Sorting
//! those tuples (32 bytes each with `u64` ids and values) moved each one about log n times:
//! two stable sorts, by `seq` and then by tick, took a tenth of workload 7's instructions
//! (`sched_ops` under callgrind, 1 M timers). Here 8-byte keys are sorted instead, each the
//! item's `seq` (as an offset from the smallest) above its index; the items then move once
//! each, into place, by following the cycles of that permutation.
//!
//! The ticks of one queue's members usually span few ticks, fewer than there are members.
//! Then the keys are first dealt into one bucket per tick, in the order gathered, and each
//! bucket is sorted by `seq` on its own: a bucket holds a descending run of `seq`s from
//! each shard, which a run-adaptive sort merges in about one pass. Ticks spread wider go
//! into the key too, above the `seq`. Keys that do not fit in 64 bits (`seq`s spread over
//! about 2^40 or more, with many items) fall back to a stable sort of the tuples.

/// Sorts `items` by `(tick, seq)`, equal pairs in the order given (as a stable sort would),
/// and drops the keys. O(n log n), and about O(n) for one queue's members; allocates one
/// `u64` per item besides the result, and one word per tick of their span when bucketed.
pub(crate) fn in_order<E>(mut items: Vec<(u64, u64, E)>) -> Vec<E> {
    if items.len() > 1 {
        match sorted_keys(&items) {
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

/// At most this many ticks per item in the span for the keys to be dealt into buckets.
const TICKS_PER_ITEM: u64 = 2;

/// One key per item, in `(tick, seq, index)` order: `seq - min seq` above the item's index,
/// and, when the ticks span too many for buckets, `tick - min tick` above both; each part
/// in as many bits as its largest value needs. `None` when those do not fit in 64 bits.
/// Keys are distinct (the indexes are). Returns the keys and the index's bits.
fn sorted_keys<E>(items: &[(u64, u64, E)]) -> Option<(Vec<u64>, u32)> {
    let (mut tick_lo, mut tick_hi) = (u64::MAX, 0);
    let (mut seq_lo, mut seq_hi) = (u64::MAX, 0);
    for &(tick, seq, _) in items {
        (tick_lo, tick_hi) = (tick_lo.min(tick), tick_hi.max(tick));
        (seq_lo, seq_hi) = (seq_lo.min(seq), seq_hi.max(seq));
    }
    let n = items.len();
    let index_bits = bits(n as u64 - 1);
    let seq_bits = bits(seq_hi - seq_lo);
    let span = tick_hi - tick_lo;
    if span / TICKS_PER_ITEM < n as u64 && seq_bits + index_bits <= u64::BITS {
        // One bucket per tick; `ends[b]` first counts bucket `b - 1`, then is where bucket
        // `b` starts, then (once dealt) where it ends.
        let mut ends = vec![0usize; span as usize + 2];
        for &(tick, _, _) in items {
            ends[(tick - tick_lo) as usize + 1] += 1;
        }
        for b in 1..ends.len() {
            ends[b] += ends[b - 1];
        }
        // Dealt last first: each shard's members, gathered newest first, then come in
        // ascending runs.
        let mut keys = vec![0u64; n];
        for (index, &(tick, seq, _)) in items.iter().enumerate().rev() {
            let end = &mut ends[(tick - tick_lo) as usize];
            keys[*end] = shl(seq - seq_lo, index_bits) | index as u64;
            *end += 1;
        }
        let (mut start, mut scratch) = (0, Vec::new());
        for &end in &ends[..ends.len() - 1] {
            sort_runs(&mut keys[start..end], &mut scratch);
            start = end;
        }
        return Some((keys, index_bits));
    }
    if bits(span) + seq_bits + index_bits > u64::BITS {
        return None;
    }
    let mut keys: Vec<u64> = (items.iter().enumerate())
        .map(|(index, &(tick, seq, _))| {
            shl(shl(tick - tick_lo, seq_bits) | (seq - seq_lo), index_bits) | index as u64
        })
        .collect();
    keys.sort_unstable();
    Some((keys, index_bits))
}

/// Sorts `keys`, which usually come as one or two ascending runs (a bucket of a drain over
/// one or two shards): those in one pass (two runs merged through `scratch`), others by a
/// sort.
fn sort_runs(keys: &mut [u64], scratch: &mut Vec<u64>) {
    let descent = |keys: &[u64]| keys.windows(2).position(|w| w[0] > w[1]);
    let Some(mid) = descent(keys).map(|i| i + 1) else {
        return;
    };
    if descent(&keys[mid..]).is_some() {
        keys.sort_unstable();
        return;
    }
    scratch.clear();
    scratch.extend_from_slice(&keys[..mid]);
    let (mut i, mut j) = (0, mid);
    for k in 0..keys.len() {
        // The first run's rest goes last: once it is used up, the second run's rest is in
        // place already.
        if i == scratch.len() {
            break;
        }
        if j == keys.len() || scratch[i] < keys[j] {
            keys[k] = scratch[i];
            i += 1;
        } else {
            keys[k] = keys[j];
            j += 1;
        }
    }
}

/// Moves `items` so that position `j` holds the item whose index is in the low
/// `index_bits` bits of `keys[j]`: each cycle of the permutation is followed once, one swap
/// per item moved.
fn permute<E>(items: &mut [E], mut keys: Vec<u64>, index_bits: u32) {
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
                let items: Vec<(u64, u64, usize)> =
                    (0..n).map(|i| (next() % ticks, next() % seqs, i)).collect();
                assert_eq!(
                    in_order(items.clone()),
                    reference(&items),
                    "{n} items, ticks mod {ticks}, seqs mod {seqs}"
                );
            }
        }
    }

    #[test]
    fn orders_runs_as_a_drain_gathers_them() {
        // Two shards' members, each newest first, over a few ticks; one moved (a
        // reschedule takes a new seq, and keeps its place in the list).
        let mut items: Vec<(u64, u64, usize)> = Vec::new();
        for shard in 0..2u64 {
            for seq in (0..300u64).rev() {
                let seq = seq * 2 + shard;
                items.push((100 + seq * 7 % 11, seq, items.len()));
            }
        }
        items[10].1 = 10_000;
        assert_eq!(in_order(items.clone()), reference(&items));
    }

    #[test]
    fn buckets_or_packs_when_it_fits_and_falls_back_when_not() {
        let near: Vec<(u64, u64, ())> = vec![(u64::MAX - 1, 5, ()), (u64::MAX, 9, ())];
        assert!(sorted_keys(&near).is_some());
        let spread: Vec<(u64, u64, ())> = vec![(0, 9, ()), (1 << 40, 5, ())];
        assert!(sorted_keys(&spread).is_some());
        let far: Vec<(u64, u64, ())> = vec![(0, 0, ()), (u64::MAX, u64::MAX, ())];
        assert!(sorted_keys(&far).is_none());
    }
}
