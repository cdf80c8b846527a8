//! Keys of one wheel used on another (*foreign* keys): `Wheel`, `TimerWheel` and the tokio
//! `DelayQueue` answer them like stale keys and touch nothing. Without per-wheel generation
//! offsets the first key of one wheel named the first timer of every other.
//!
//! The proptest drives two wheels with the same operations (each index then ends the same
//! number of timers in both, where offsets guarantee a miss) and then one more differently
//! (a miss everywhere but for offsets that happen to be close: a chance near 2^-24 per case
//! here, see `TimerKey`).

use std::time::{Duration, Instant};

use proptest::prelude::*;
use tickwheel::{TimerKey, TimerWheel, Wheel};

#[test]
fn the_first_key_of_one_wheel_misses_the_first_timer_of_another() {
    let mut a = Wheel::new();
    let mut b = Wheel::new();
    let ka = a.insert(10, "a");
    let kb = b.insert(10, "b");
    assert_eq!(ka.index(), kb.index(), "same slot in both arenas");
    assert_ne!(ka, kb, "the generations differ by the wheels' offsets");
    assert_eq!(b.cancel(ka), None, "a foreign key cancelled b's timer");
    assert!(!b.reset(ka, 99), "a foreign key reset b's timer");
    assert_eq!(b.get(ka), None);
    assert_eq!(b.get_mut(ka), None);
    assert_eq!(b.deadline(ka), None);
    assert!(!b.contains(ka));
    let fired = b.poll(10).map(|e| (e.key, e.deadline, e.value));
    assert_eq!(fired, Some((kb, 10, "b")), "b's timer is untouched");
    assert_eq!(a.cancel(ka), Some("a"));
}

#[test]
fn timer_wheel_keys_are_foreign_to_another_timer_wheel() {
    let origin = Instant::now();
    let ms = Duration::from_millis(1);
    let mut a = TimerWheel::with_origin(origin, ms);
    let mut b = TimerWheel::with_origin(origin, ms);
    let ka = a.insert_at(origin + 5 * ms, 1u32);
    let kb = b.insert_at(origin + 5 * ms, 2u32);
    assert_eq!(b.cancel(ka), None);
    assert!(!b.reset_at(ka, origin + 9 * ms));
    assert_eq!(b.deadline(ka), None);
    assert_eq!(b.get(ka), None);
    assert!(!b.contains(ka));
    assert_eq!(
        b.poll(origin + 5 * ms).map(|e| (e.key, e.value)),
        Some((kb, 2))
    );
}

#[test]
fn keys_of_one_wheel_never_collide_with_a_wheel_made_next() {
    // Two wheels made one after the other, each index reused a few hundred times in both,
    // by different amounts: their offsets are further apart than that (see `TimerKey`).
    let mut a: Wheel<u32> = Wheel::new();
    let mut b: Wheel<u32> = Wheel::new();
    let mut keys_a = Vec::new();
    for round in 0..300u32 {
        let k = a.insert(1, round);
        if round % 3 != 0 {
            a.cancel(k);
        }
        keys_a.push(k);
        let kb = b.insert(1, round);
        b.cancel(kb);
        b.insert(2, round);
    }
    let before = b.len();
    for k in keys_a {
        assert_eq!(b.cancel(k), None, "{k:?}");
    }
    assert_eq!(b.len(), before);
}

/// Operations on a wheel: insert at a deadline, cancel the n-th key issued, poll to a tick.
#[derive(Debug, Clone)]
enum Op {
    Insert(u64),
    Cancel(usize),
    Poll(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u64..200).prop_map(Op::Insert),
        2 => any::<usize>().prop_map(Op::Cancel),
        1 => (0u64..200).prop_map(Op::Poll),
    ]
}

/// Runs `ops` on `wheel`; returns every key it issued.
fn drive(wheel: &mut Wheel<u64>, ops: &[Op]) -> Vec<TimerKey> {
    let mut keys = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Insert(at) => keys.push(wheel.insert(wheel.elapsed() + at, i as u64)),
            Op::Cancel(n) if !keys.is_empty() => {
                wheel.cancel(keys[n % keys.len()]);
            }
            Op::Cancel(_) => {}
            Op::Poll(dt) => while wheel.poll(wheel.elapsed() + dt).is_some() {},
        }
    }
    keys
}

/// Every key of `keys` misses `wheel`, and using them changed nothing there.
fn assert_all_miss(wheel: &mut Wheel<u64>, keys: &[TimerKey]) -> Result<(), TestCaseError> {
    let len = wheel.len();
    let next = wheel.next_expiration();
    for &k in keys {
        prop_assert!(
            !wheel.contains(k),
            "{:?} names a timer of the other wheel",
            k
        );
        prop_assert_eq!(wheel.get(k), None);
        prop_assert_eq!(wheel.deadline(k), None);
        prop_assert!(!wheel.reset(k, 0));
        prop_assert_eq!(wheel.cancel(k), None);
    }
    prop_assert_eq!(wheel.len(), len);
    prop_assert_eq!(wheel.next_expiration(), next);
    Ok(())
}

proptest! {
    #[test]
    fn foreign_keys_miss(
        same in proptest::collection::vec(op(), 1..120),
        more in proptest::collection::vec(op(), 0..120),
    ) {
        let mut a = Wheel::new();
        let mut b = Wheel::new();
        let keys_a = drive(&mut a, &same);
        let keys_b = drive(&mut b, &same);
        assert_all_miss(&mut b, &keys_a)?;
        assert_all_miss(&mut a, &keys_b)?;
        // Now the wheels part ways: index reuse counts differ by fewer than 120.
        let more_a = drive(&mut a, &more);
        assert_all_miss(&mut b, &keys_a)?;
        assert_all_miss(&mut b, &more_a)?;
    }
}

#[cfg(feature = "tokio")]
#[tokio::test(start_paused = true)]
async fn delay_queue_keys_are_foreign_to_another_queue() {
    use tickwheel::tokio::DelayQueue;

    let mut a = DelayQueue::new();
    let mut b = DelayQueue::new();
    let ka = a.insert("a", Duration::from_secs(1));
    let kb = b.insert("b", Duration::from_secs(1));
    assert_ne!(ka, kb);
    assert!(!b.contains(&ka));
    assert!(
        b.try_remove(&ka).is_none(),
        "a foreign key removed b's entry"
    );
    assert!(!b.try_reset(&ka, Duration::from_secs(5)));
    assert_eq!(b.try_deadline(&ka), None);
    let removed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| b.remove(&ka)));
    assert!(
        removed.is_err(),
        "remove panics on a foreign key, as on a stale one"
    );
    assert_eq!(b.len(), 1);
    assert_eq!(b.remove(&kb).into_inner(), "b");
    assert_eq!(a.remove(&ka).into_inner(), "a");
}
