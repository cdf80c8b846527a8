//! [`ShardHasher`]: how an id picks its shard.

use std::hash::Hasher;

/// 2^64 divided by the golden ratio, odd: multiplying by it spreads every input bit over
/// the high bits of the product (Fibonacci hashing).
const SPREAD: u64 = 0x9E37_79B9_7F4A_7C15;

/// The hash that picks an id's shard: FxHash's step (rotate, xor the next word, multiply
/// by [`SPREAD`]) with no seed, so the same ids land on the same shards in every run of a
/// build (delivery order never depends on it anyway). An id of a word or two costs a
/// multiply or two, where the SipHash used before cost about 80 instructions per schedule.
///
/// Only the **high** bits of the result are well mixed (a low bit of the product depends
/// only on the input bits at and below it), so [`shard_of_hash`] reduces by them. It is no
/// defence against ids chosen to collide, and needs none: a crowded shard is slower, never
/// wrong. Inside a shard, ids live in a hashbrown map with its own hasher.
///
/// Why not `foldhash::fast::FixedState` (hashbrown's default hasher, already a dependency):
/// side by side on workload 7 at 1 M timers (`tickwheel-bench`'s `compare`, five alternating
/// runs of each build on a 2-core Intel Xeon guest under load), tickwheel's median went from
/// 542 to 633 ns per operation and its ratio to `Mutex<BTreeMap>` from 1.0 to 0.9: no gain
/// and a likely cost for a dozen lines.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ShardHasher(u64);

impl ShardHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SPREAD);
    }
}

impl Hasher for ShardHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_u16(&mut self, n: u16) {
        self.add(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// The shard, out of `shards`, of an id whose [`ShardHasher`] hash is `hash`: the high bits
/// of `hash × shards` (Lemire's multiply-shift reduction), always below `shards`.
pub(crate) fn shard_of_hash(hash: u64, shards: usize) -> usize {
    ((u128::from(hash) * shards as u128) >> 64) as usize
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;
    use std::hash::BuildHasherDefault;

    use super::*;

    #[test]
    fn sequential_and_strided_ids_spread_over_the_shards() {
        let build = BuildHasherDefault::<ShardHasher>::default();
        for shards in [2usize, 3, 4, 8, 64] {
            for stride in [1u64, 2, 64, 1024] {
                let mut counts = vec![0usize; shards];
                let n = 4096 * shards as u64;
                for i in 0..n {
                    counts[shard_of_hash(build.hash_one(i * stride), shards)] += 1;
                }
                let expected = n as usize / shards;
                assert!(
                    counts
                        .iter()
                        .all(|&c| c > expected * 3 / 4 && c < expected * 5 / 4),
                    "{shards} shards, stride {stride}: {counts:?}"
                );
            }
        }
    }

    #[test]
    fn reduction_stays_in_range_at_the_edges() {
        for shards in [1usize, 2, 7, 64] {
            assert_eq!(shard_of_hash(0, shards), 0);
            assert_eq!(shard_of_hash(u64::MAX, shards), shards - 1);
        }
    }

    #[test]
    fn strings_hash_by_content() {
        let build = BuildHasherDefault::<ShardHasher>::default();
        assert_eq!(
            build.hash_one("example.com"),
            build.hash_one(String::from("example.com"))
        );
        assert_ne!(build.hash_one("example.com"), build.hash_one("example.org"));
    }
}
