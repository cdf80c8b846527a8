//! What the core wheel's [`Harness`](super::Harness) and `IndexedWheel`'s harness
//! (`indexed_model.rs`) check alike, written once: both wheels answer the same questions
//! ([`Observed`]), so the checks of those answers against the [`Model`] are generic. Each
//! check returns the failure's description; the harness panics with it and its own state.

use std::fmt;

use tickwheel::{IndexedWheel, TimerKey, Wheel, WheelStats};

use super::{Model, stale_bound};

/// Panics with the harness's state (`$h`'s `Debug`) unless `$cond` holds.
macro_rules! ensure {
    ($h:expr, $cond:expr, $($fmt:tt)+) => {
        if !$cond {
            panic!("{:?}: {}", $h, format!($($fmt)+));
        }
    };
}
pub(crate) use ensure;

/// Panics with the harness's state (`$h`'s `Debug`) if `$check` returns an error.
macro_rules! ensure_ok {
    ($h:expr, $check:expr) => {
        if let Err(why) = $check {
            panic!("{:?}: {}", $h, why);
        }
    };
}
pub(crate) use ensure_ok;

/// The observables both wheels share, by key `K` (a `TimerKey`, or an id).
pub trait Observed<K> {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool;
    fn elapsed(&self) -> u64;
    fn contains(&self, key: K) -> bool;
    fn deadline(&self, key: K) -> Option<u64>;
    fn get(&self, key: K) -> Option<&u64>;
    fn stats(&self) -> WheelStats;
}

/// Implements [`Observed`] for a wheel by calling its own methods of the same names;
/// `|$key| $arg` turns the key into the argument those methods take.
macro_rules! forward_observed {
    ($wheel:ident<$($p:ty),+>, $k:ty, |$key:ident| $arg:expr) => {
        impl Observed<$k> for $wheel<$($p),+> {
            fn len(&self) -> usize {
                $wheel::len(self)
            }
            fn is_empty(&self) -> bool {
                $wheel::is_empty(self)
            }
            fn elapsed(&self) -> u64 {
                $wheel::elapsed(self)
            }
            fn contains(&self, $key: $k) -> bool {
                $wheel::contains(self, $arg)
            }
            fn deadline(&self, $key: $k) -> Option<u64> {
                $wheel::deadline(self, $arg)
            }
            fn get(&self, $key: $k) -> Option<&u64> {
                $wheel::get(self, $arg)
            }
            fn stats(&self) -> WheelStats {
                $wheel::stats(self)
            }
        }
    };
}

forward_observed!(Wheel<u64>, TimerKey, |key| key);
forward_observed!(IndexedWheel<u8, u64>, u8, |id| &id);

/// The one-line state a harness prints with every failure.
pub fn describe<K: Ord + Copy + fmt::Debug, O: fmt::Debug>(
    f: &mut fmt::Formatter<'_>,
    step: usize,
    op: &Option<O>,
    model: &Model<K>,
    wheel: &impl Observed<K>,
) -> fmt::Result {
    write!(
        f,
        "step {} op {:?}: model elapsed {} len {} earliest {:?}; wheel elapsed {} len {}",
        step,
        op,
        model.elapsed,
        model.len(),
        model.earliest(),
        wheel.elapsed(),
        wheel.len()
    )
}

/// An op's `limit`: `u32::MAX` stands for "no limit".
pub fn limit(limit: u32) -> usize {
    if limit == u32::MAX {
        usize::MAX
    } else {
        limit as usize
    }
}

/// `len`, `is_empty`, and `elapsed`: the model's, and never past `horizon` (the largest `now`
/// seen).
pub fn check_state<K: Ord + Copy + fmt::Debug>(
    w: &impl Observed<K>,
    model: &Model<K>,
    horizon: u64,
) -> Result<(), String> {
    let live = model.len();
    if w.len() != live {
        return Err("len".into());
    }
    if w.is_empty() != (live == 0) {
        return Err("is_empty".into());
    }
    if w.elapsed() != model.elapsed {
        return Err("elapsed differs from the model's".into());
    }
    if w.elapsed() > horizon {
        return Err(format!("elapsed past the largest now {horizon}"));
    }
    Ok(())
}

/// `contains`, `deadline` and `get` of `key`, pending or not, as the model has it.
pub fn check_key<K: Ord + Copy + fmt::Debug>(
    w: &impl Observed<K>,
    model: &Model<K>,
    key: K,
) -> Result<(), String> {
    let expected = model.timers.get(&key);
    if w.contains(key) != expected.is_some() {
        return Err(format!("contains({key:?})"));
    }
    if w.deadline(key) != expected.map(|t| t.deadline) {
        return Err(format!("deadline({key:?})"));
    }
    if w.get(key) != expected.map(|t| &t.value) {
        return Err(format!("get({key:?})"));
    }
    Ok(())
}

/// `stats()`: `live` timers, and stale references within [`stale_bound`].
pub fn check_stats<K>(w: &impl Observed<K>, live: usize) -> Result<(), String> {
    let stats = w.stats();
    if stats.live != live {
        return Err(format!("stats.live {stats:?}"));
    }
    if stats.stale > stale_bound(live) {
        return Err(format!(
            "stale references over the bound {}: {stats:?}",
            stale_bound(live)
        ));
    }
    Ok(())
}

/// No stale reference left, after `shrink_to_fit`.
pub fn check_shrunk<K>(w: &impl Observed<K>) -> Result<(), String> {
    let stats = w.stats();
    if stats.stale != 0 {
        return Err(format!("stale references after shrink_to_fit: {stats:?}"));
    }
    Ok(())
}

/// What `poll_into(now, limit, out)` did to `out`, which held `prefill` copies of `junk`:
/// took at most `limit`, appended exactly what it says it took, and left the rest alone.
pub fn check_poll_into_out<E: PartialEq>(
    out: &[E],
    junk: &E,
    prefill: usize,
    taken: usize,
    limit: usize,
) -> Result<(), String> {
    if taken > limit {
        return Err(format!("poll_into took {taken} > limit {limit}"));
    }
    if out.len() != prefill + taken {
        return Err(format!(
            "poll_into said {taken} but out grew from {prefill} to {}",
            out.len()
        ));
    }
    if !out[..prefill].iter().all(|e| e == junk) {
        return Err("poll_into touched what was in out".into());
    }
    Ok(())
}
