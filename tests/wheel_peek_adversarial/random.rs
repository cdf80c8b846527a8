//! Random operation sequences against the model, from fixed and random starts.

use super::*;

#[derive(Clone, Debug)]
enum Op {
    Insert(u8, u32),
    /// `n` inserts into one level-2 slot ahead, in a scrambled order of ticks.
    Burst(u8, u8, u32),
    Reset(u16, u8, u32),
    /// Reset of the timer `peek` names.
    ResetPeeked(u8, u32),
    Cancel(u16),
    CancelPeeked,
    /// A key built from raw parts near an issued one (another index, another generation),
    /// or a key of another wheel: reset (with a deadline kind) or cancelled. Whatever it
    /// names here, if anything, the model applies the same operation to.
    RawKey(u16, i8, u8, u8, u32, bool),
    ForeignKey(u16, u8, u32, bool),
    Poll(u8, u32),
    PollOne(u8, u32),
    PollInto(u8, u32, u8),
    PeekThenPoll,
    Shrink,
    Clear,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (any::<u8>(), any::<u32>()).prop_map(|(k, x)| Op::Insert(k, x)),
        2 => (1..40u8, any::<u8>(), any::<u32>()).prop_map(|(n, k, x)| Op::Burst(n, k, x)),
        6 => (any::<u16>(), any::<u8>(), any::<u32>()).prop_map(|(p, k, x)| Op::Reset(p, k, x)),
        4 => (any::<u8>(), any::<u32>()).prop_map(|(k, x)| Op::ResetPeeked(k, x)),
        3 => any::<u16>().prop_map(Op::Cancel),
        2 => Just(Op::CancelPeeked),
        2 => (any::<u16>(), -3..4i8, 0..3u8, any::<u8>(), any::<u32>(), any::<bool>())
            .prop_map(|(p, g, i, k, x, c)| Op::RawKey(p, g, i, k, x, c)),
        1 => (any::<u16>(), any::<u8>(), any::<u32>(), any::<bool>())
            .prop_map(|(p, k, x, c)| Op::ForeignKey(p, k, x, c)),
        2 => (any::<u8>(), any::<u32>()).prop_map(|(k, x)| Op::Poll(k, x)),
        2 => (any::<u8>(), any::<u32>()).prop_map(|(k, x)| Op::PollOne(k, x)),
        4 => (any::<u8>(), any::<u32>(), 1..6u8).prop_map(|(k, x, l)| Op::PollInto(k, x, l)),
        2 => Just(Op::PeekThenPoll),
        1 => prop_oneof![15 => Just(Op::Shrink), 1 => Just(Op::Clear)],
    ]
}

/// Operations that keep a level-2 slot the earliest most of the time: inserts into the next
/// few level-2 slots (edges, ties, the model's earliest and around it), bursts, resets within
/// the slot both ways, just past the earliest, to the past and to `u64::MAX`, cancels of the
/// earliest, and polls up to the earliest a timer or a few at a time.
fn op_level_2() -> impl Strategy<Value = Op> {
    let insert_kinds = prop::sample::select(vec![2u8, 3, 4, 5, 11, 12, 13, 14, 16, 9]);
    let reset_kinds = prop::sample::select(vec![0u8, 0, 0, 2, 3, 3, 4, 6, 7, 8, 9, 10, 10]);
    prop_oneof![
        6 => (insert_kinds, any::<u32>()).prop_map(|(k, x)| Op::Insert(k, x)),
        3 => (1..60u8, any::<u8>(), any::<u32>()).prop_map(|(n, k, x)| Op::Burst(n, k, x)),
        5 => (any::<u16>(), reset_kinds.clone(), any::<u32>()).prop_map(|(p, k, x)| Op::Reset(p, k, x)),
        6 => (reset_kinds, any::<u32>()).prop_map(|(k, x)| Op::ResetPeeked(k, x)),
        2 => any::<u16>().prop_map(Op::Cancel),
        2 => Just(Op::CancelPeeked),
        1 => (prop::sample::select(vec![2u8, 3, 5, 7]), any::<u32>()).prop_map(|(k, x)| Op::PollOne(k, x)),
        1 => (prop::sample::select(vec![2u8, 3, 5]), any::<u32>(), 1..4u8)
            .prop_map(|(k, x, l)| Op::PollInto(k, x, l)),
        1 => Just(Op::PeekThenPoll),
    ]
}

/// Where the wheel starts: fresh, and after "years of ticks", up to the top of `u64`.
const STARTS: [u64; 10] = [
    0,
    4096 - 3,
    (1 << 30) - 5000,
    (1 << 32) - 3,
    (1 << 36) - 100_000,
    1 << 63,
    (1 << 63) - 262_144 + 17,
    u64::MAX - 300_000,
    u64::MAX - 9000,
    u64::MAX - 100,
];

fn run(start: u64, ops: &[Op]) -> u64 {
    let mut h = Harness::new(start);
    // Keys of another wheel, driven alike.
    let mut other = Wheel::starting_at(start);
    let foreign: Vec<TimerKey> = (0..64u64)
        .map(|i| other.insert(start.wrapping_add(i), i))
        .collect();
    for key in foreign.iter().step_by(3) {
        other.cancel(*key);
    }
    for (i, op) in ops.iter().enumerate() {
        let pick =
            |h: &Harness, p: u16| (!h.keys.is_empty()).then(|| h.keys[p as usize % h.keys.len()]);
        match *op {
            Op::Insert(k, x) => {
                let d = deadline(&h, k, x);
                h.insert(d);
            }
            Op::Burst(n, k, x) => {
                let e = h.wheel.elapsed();
                let base = l2_slot_start(e, 1 + (k as u64) % 3).unwrap_or(u64::MAX - 4095);
                for j in 0..n as u64 {
                    // Scrambled ticks, some equal.
                    let off = (j.wrapping_mul(2_654_435_761).wrapping_add(x as u64)) % 4096;
                    let off = if k & 1 == 0 { off & !15 } else { off };
                    h.insert(base + off);
                }
            }
            Op::Reset(p, k, x) => {
                if let Some(key) = pick(&h, p) {
                    let c = h.by_key.get(&key).map_or(h.wheel.elapsed(), |t| t.deadline);
                    let d = reset_deadline(&h, c, k, x);
                    h.reset(key, d);
                }
            }
            Op::ResetPeeked(k, x) => {
                if let Some((key, c)) = h.wheel.peek() {
                    let d = reset_deadline(&h, c, k, x);
                    h.reset(key, d);
                }
            }
            Op::Cancel(p) => {
                if let Some(key) = pick(&h, p) {
                    h.cancel(key);
                }
            }
            Op::RawKey(p, g, i, k, x, cancel) => {
                if let Some(key) = pick(&h, p) {
                    let raw = TimerKey::from_raw_parts(
                        key.index().wrapping_add(i as u32),
                        key.generation().wrapping_add(g as i32 as u32),
                    );
                    if cancel {
                        h.cancel(raw);
                    } else {
                        let c = h.by_key.get(&raw).map_or(h.wheel.elapsed(), |t| t.deadline);
                        let d = reset_deadline(&h, c, k, x);
                        h.reset(raw, d);
                    }
                }
            }
            Op::ForeignKey(p, k, x, cancel) => {
                let key = foreign[p as usize % foreign.len()];
                if cancel {
                    h.cancel(key);
                } else {
                    let d = deadline(&h, k, x);
                    h.reset(key, d);
                }
            }
            Op::CancelPeeked => {
                if let Some((key, _)) = h.wheel.peek() {
                    h.cancel(key);
                }
            }
            Op::Poll(k, x) => {
                let t = poll_tick(&h, k, x);
                h.poll_all(t);
            }
            Op::PollOne(k, x) => {
                let t = poll_tick(&h, k, x);
                h.poll_one(t);
            }
            Op::PollInto(k, x, l) => {
                let t = poll_tick(&h, k, x);
                h.poll_into(t, l as usize);
            }
            Op::PeekThenPoll => h.peek_then_poll(),
            Op::Shrink => h.wheel.shrink_to_fit(),
            Op::Clear => {
                h.wheel.clear();
                h.by_key.clear();
                h.order.clear();
                h.by_seq.clear();
            }
        }
        h.check_peek(&format!("step {i} ({op:?})"));
    }
    h.peeks
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(400),
        max_shrink_iters: 20_000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Random operations from every start in `STARTS`; `peek` checked after each.
    #[test]
    fn peek_matches_the_model_under_random_operations(
        start in prop::sample::select(&STARTS[..]),
        ops in prop::collection::vec(op(), 1..160),
    ) {
        run(start, &ops);
        print_stats("random operations");
    }

    /// Operations that keep a level-2 slot the earliest, from every start in `STARTS`.
    #[test]
    fn peek_matches_the_model_with_a_level_2_slot_earliest(
        start in prop::sample::select(&STARTS[..]),
        ops in prop::collection::vec(op_level_2(), 1..200),
    ) {
        run(start, &ops);
        print_stats("level 2");
    }

    /// As above, from a random start (any `u64`).
    #[test]
    fn peek_matches_the_model_from_any_start(
        start in any::<u64>(),
        ops in prop::collection::vec(op(), 1..100),
    ) {
        run(start, &ops);
    }
}
