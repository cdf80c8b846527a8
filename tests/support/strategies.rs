//! Proptest strategies shared by the model tests (`wheel_model.rs`, `indexed_model.rs`):
//! level-uniform deadlines, boundaries, the top of the range, equal deadlines, poll times
//! with jumps in both directions, long-uptime starts; and the two proptests both run
//! ([`model_proptests`]). A sibling of `model.rs` (as `super::model`).

use proptest::prelude::*;

use super::model::{OrderRule, When};

/// `TICKWHEEL_MODEL_ORDER=fresh-insert` demands that a reset timer orders among equal
/// deadlines like a fresh insert (more than the wheel promises; see `support/model.rs`).
pub fn rule() -> OrderRule {
    match std::env::var("TICKWHEEL_MODEL_ORDER").as_deref() {
        Ok("fresh-insert") => OrderRule::FreshInsert,
        _ => OrderRule::Documented,
    }
}

pub fn cases() -> u32 {
    super::cases_or(96)
}

/// A deadline: every level equally, plus boundaries, the top, the past and equal deadlines.
pub fn deadline() -> BoxedStrategy<When> {
    prop_oneof![
        8 => (0u8..=10, any::<u64>()).prop_map(|(level, offset)| When::Ahead { level, offset }),
        2 => (0u8..=10, any::<u64>()).prop_map(|(level, offset)| When::Behind { level, offset }),
        4 => (1u8..=10, -1i8..=1, any::<bool>())
            .prop_map(|(k, delta, aligned)| When::Boundary { k: k - 1, delta, aligned }),
        1 => (0u8..=3).prop_map(|back| When::Top { back }),
        4 => (any::<u16>(), -1i8..=1).prop_map(|(pick, delta)| When::Same { pick, delta }),
        1 => Just(When::Elapsed),
        1 => any::<u64>().prop_map(When::Abs),
    ]
    .boxed()
}

/// A poll time: mostly small steps so timers fire one by one, sometimes huge jumps, the
/// past (time going backwards), exact deadlines and the deadline minus one.
pub fn now() -> BoxedStrategy<When> {
    prop_oneof![
        8 => (0u8..=2, any::<u64>()).prop_map(|(level, offset)| When::Ahead { level, offset }),
        2 => (0u8..=10, any::<u64>()).prop_map(|(level, offset)| When::Ahead { level, offset }),
        2 => (0u8..=10, any::<u64>()).prop_map(|(level, offset)| When::Behind { level, offset }),
        2 => (1u8..=10, -1i8..=1, any::<bool>())
            .prop_map(|(k, delta, aligned)| When::Boundary { k: k - 1, delta, aligned }),
        4 => (any::<u16>(), -1i8..=1).prop_map(|(pick, delta)| When::Same { pick, delta }),
        1 => (0u8..=3).prop_map(|back| When::Top { back }),
        1 => Just(When::Elapsed),
    ]
    .boxed()
}

pub fn limit() -> impl Strategy<Value = u32> {
    prop_oneof![4 => 0u32..=4, 1 => 5u32..=64, 1 => Just(u32::MAX)]
}

/// Starting ticks: 0, anywhere, and just around long-uptime marks, so that level
/// boundaries of the high levels are crossed early in a sequence.
pub fn start() -> impl Strategy<Value = u64> {
    let marks = prop_oneof![
        Just(1u64 << 30),
        Just(1 << 32),
        Just(1 << 36),
        Just(1 << 63),
        Just(u64::MAX - (1 << 20))
    ];
    prop_oneof![
        2 => Just(0u64),
        1 => any::<u64>(),
        4 => (marks, 0u64..(1 << 13), any::<bool>())
            .prop_map(|(mark, d, below)| if below { mark - d } else { mark + d }),
    ]
}

/// Ticks of a small window: many timers share a deadline, resets keep colliding, and
/// polls walk through the window slot by slot.
pub fn small_deadline() -> BoxedStrategy<When> {
    prop_oneof![
        4 => (0u8..=1, 0u64..80).prop_map(|(level, offset)| When::Ahead { level, offset }),
        4 => (any::<u16>(), -1i8..=1).prop_map(|(pick, delta)| When::Same { pick, delta }),
        1 => (0u8..=0, any::<u64>()).prop_map(|(level, offset)| When::Behind { level, offset }),
        1 => Just(When::Elapsed),
    ]
    .boxed()
}

pub fn small_now() -> BoxedStrategy<When> {
    prop_oneof![
        6 => (0u8..=0, 0u64..8).prop_map(|(level, offset)| When::Ahead { level, offset }),
        3 => (any::<u16>(), -1i8..=1).prop_map(|(pick, delta)| When::Same { pick, delta }),
        1 => (0u8..=0, any::<u64>()).prop_map(|(level, offset)| When::Behind { level, offset }),
    ]
    .boxed()
}

/// The two model proptests of a wheel harness, each its own `#[test]`: `$whole` over the
/// whole range (level-uniform deadlines, boundaries, the top, long-uptime starts), and
/// `$crowded` in a narrow window (many equal deadlines, resets among them, slot-by-slot
/// polling with limits, so the order of equal deadlines is tested hard). `$op(deadline,
/// now)` is the op strategy; `$harness::run(start, &ops, rule)` checks one sequence.
macro_rules! model_proptests {
    ($harness:ident, $op:ident, $whole:ident, $crowded:ident) => {
        proptest::proptest! {
            #![proptest_config(proptest::prelude::ProptestConfig {
                cases: $crate::support::strategies::cases(),
                ..proptest::prelude::ProptestConfig::default()
            })]

            #[test]
            fn $whole(
                start in $crate::support::strategies::start(),
                ops in proptest::collection::vec(
                    $op($crate::support::strategies::deadline(), $crate::support::strategies::now()),
                    1..160,
                ),
            ) {
                $harness::run(start, &ops, $crate::support::strategies::rule());
            }

            #[test]
            fn $crowded(
                start in $crate::support::strategies::start(),
                ops in proptest::collection::vec(
                    $op(
                        $crate::support::strategies::small_deadline(),
                        $crate::support::strategies::small_now(),
                    ),
                    1..200,
                ),
            ) {
                $harness::run(start, &ops, $crate::support::strategies::rule());
            }
        }
    };
}
pub(crate) use model_proptests;
