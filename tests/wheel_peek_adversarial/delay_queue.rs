//! The drop-in `DelayQueue`: `peek` names the entry `poll_expired` yields first.

use std::collections::HashMap;
use std::task::{Context, Poll, Waker};

use proptest::prelude::*;
use tickwheel::tokio::{DelayQueue, Key};
use tokio::time::{Duration, Instant};

#[derive(Clone, Debug)]
enum Op {
    /// Insert with a timeout in ms of a kind (level 0..3, ties).
    Insert(u8, u32),
    Reset(u16, u8, u32),
    ResetPeeked(u8, u32),
    Remove(u16),
    RemovePeeked,
    /// Advance the clock (ms) and take out what is due.
    Advance(u8, u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (any::<u8>(), any::<u32>()).prop_map(|(k, x)| Op::Insert(k, x)),
        4 => (any::<u16>(), any::<u8>(), any::<u32>()).prop_map(|(p, k, x)| Op::Reset(p, k, x)),
        3 => (any::<u8>(), any::<u32>()).prop_map(|(k, x)| Op::ResetPeeked(k, x)),
        2 => any::<u16>().prop_map(Op::Remove),
        1 => Just(Op::RemovePeeked),
        3 => (any::<u8>(), any::<u32>()).prop_map(|(k, x)| Op::Advance(k, x)),
    ]
}

fn timeout_ms(kind: u8, x: u32) -> u64 {
    let x = x as u64;
    match kind % 6 {
        0 => x % 64,
        1 => x % 4096,
        2 | 3 => 4096 + ((x % 16_384) & !7),
        4 => 262_144 + x % 1_000_000,
        _ => (x % 8) * 4096,
    }
}

#[derive(Clone, Copy)]
struct Entry {
    at: Instant,
    seq: u64,
    reset: bool,
}

struct Model {
    entries: HashMap<Key, Entry>,
    keys: Vec<Key>,
    seq: u64,
}

impl Model {
    fn min(&self) -> Option<Instant> {
        self.entries.values().map(|e| e.at).min()
    }
}

fn check(q: &DelayQueue<u64>, m: &Model, what: &str) {
    assert_eq!(q.len(), m.entries.len(), "{what}: len");
    let got = q.peek();
    let Some(min) = m.min() else {
        assert_eq!(got, None, "{what}: empty");
        return;
    };
    let key = got.unwrap_or_else(|| panic!("{what}: peek None"));
    let e = m
        .entries
        .get(&key)
        .unwrap_or_else(|| panic!("{what}: peek names a key not in the queue"));
    assert_eq!(e.at, min, "{what}: peek's deadline");
    assert_eq!(q.deadline(&key), min, "{what}: the queue's deadline");
    let tied: Vec<&Entry> = m.entries.values().filter(|e| e.at == min).collect();
    if tied.iter().all(|e| !e.reset) {
        let first = tied.iter().map(|e| e.seq).min();
        assert_eq!(Some(e.seq), first, "{what}: ties in insertion order");
    }
}

fn run(ops: &[Op]) -> u64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let mut q: DelayQueue<u64> = DelayQueue::new();
        let mut m = Model {
            entries: HashMap::new(),
            keys: Vec::new(),
            seq: 0,
        };
        let mut checks = 0;
        let mut cx = Context::from_waker(Waker::noop());
        for (i, op) in ops.iter().enumerate() {
            let now = Instant::now();
            match *op {
                Op::Insert(k, x) => {
                    let t = Duration::from_millis(timeout_ms(k, x));
                    let seq = m.seq;
                    m.seq += 1;
                    let key = q.insert(seq, t);
                    m.entries.insert(
                        key,
                        Entry {
                            at: now + t,
                            seq,
                            reset: false,
                        },
                    );
                    m.keys.push(key);
                }
                Op::Reset(p, k, x) => {
                    if m.keys.is_empty() {
                        continue;
                    }
                    let key = m.keys[p as usize % m.keys.len()];
                    let t = Duration::from_millis(timeout_ms(k, x));
                    let done = q.try_reset(&key, t);
                    match m.entries.get_mut(&key) {
                        Some(e) => {
                            assert!(done, "step {i}: reset refused");
                            (e.at, e.reset) = (now + t, true);
                        }
                        None => assert!(!done, "step {i}: reset of a stale key"),
                    }
                }
                Op::ResetPeeked(k, x) => {
                    if let Some(key) = q.peek() {
                        let cur = m.entries[&key].at;
                        // Later by a little (stays in its slot), or a new timeout.
                        let at = if k % 2 == 0 {
                            cur + Duration::from_millis(1 + x as u64 % 50)
                        } else {
                            now + Duration::from_millis(timeout_ms(k / 2, x))
                        };
                        q.reset_at(&key, at);
                        let e = m.entries.get_mut(&key).unwrap();
                        (e.at, e.reset) = (at, true);
                    }
                }
                Op::Remove(p) => {
                    if m.keys.is_empty() {
                        continue;
                    }
                    let key = m.keys[p as usize % m.keys.len()];
                    let got = q.try_remove(&key).map(|e| e.into_inner());
                    assert_eq!(got, m.entries.remove(&key).map(|e| e.seq), "step {i}");
                }
                Op::RemovePeeked => {
                    if let Some(key) = q.peek() {
                        q.remove(&key);
                        m.entries.remove(&key);
                    }
                }
                Op::Advance(k, x) => {
                    let peeked = q.peek();
                    let by = match k % 4 {
                        0 => x as u64 % 64,
                        1 => x as u64 % 5000,
                        // To the earliest and one tick past it.
                        2 => m.min().map_or(0, |at| {
                            (at.saturating_duration_since(now).as_millis() as u64) + 1
                        }),
                        _ => x as u64 % 40_000,
                    };
                    tokio::time::advance(Duration::from_millis(by)).await;
                    let now = Instant::now();
                    let mut first = true;
                    while let Poll::Ready(Some(e)) = q.poll_expired(&mut cx) {
                        let key = e.key();
                        let entry = m
                            .entries
                            .remove(&key)
                            .unwrap_or_else(|| panic!("step {i}: expired a removed key"));
                        assert_eq!(*e.get_ref(), entry.seq);
                        assert!(entry.at <= now, "step {i}: early");
                        if first {
                            assert_eq!(
                                Some(key),
                                peeked,
                                "step {i}: poll_expired yields what peek named"
                            );
                            first = false;
                        }
                    }
                }
            }
            check(&q, &m, &format!("step {i} ({op:?})"));
            checks += 1;
        }
        checks
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: super::cases(150),
        max_shrink_iters: 10_000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn delay_queue_peek_matches_the_model(ops in prop::collection::vec(op(), 1..120)) {
        run(&ops);
    }
}

/// Thousands of entries in one level-2 slot (4.1 s to 8.2 s ahead), the earliest moved
/// a little later again and again: `peek` names the model's earliest each time, and the
/// queue yields exactly it when the clock gets there.
#[test]
fn delay_queue_busy_level_2_slot() {
    let mut ops = Vec::new();
    for i in 0..1500u32 {
        ops.push(Op::Insert(2, i.wrapping_mul(2_654_435_761)));
    }
    for i in 0..600u32 {
        ops.push(Op::ResetPeeked(2 * (i % 3) as u8, i.wrapping_mul(40_503)));
        if i % 50 == 49 {
            ops.push(Op::Advance(2, 0));
        }
        if i % 31 == 7 {
            ops.push(Op::RemovePeeked);
        }
    }
    assert!(run(&ops) > 2000);
}
