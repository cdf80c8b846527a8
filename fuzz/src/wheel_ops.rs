//! Decoding `wheel_ops` inputs: a starting tick and core-wheel ops, with the tick, key and
//! limit decoders the other wheel target (`indexed_ops`) shares.

use arbitrary::{Arbitrary, Result, Unstructured};

use crate::model::{KeyPick, Op, When};
use crate::{START_MARKS, ops};

/// The input of the two wheel targets: a starting tick and an op sequence, of [`Op`]s for
/// `wheel_ops` and of `IxOp`s for `indexed_ops` (`IndexedInput`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WheelInput<O = Op> {
    pub start: u64,
    pub ops: Vec<O>,
}

impl<O> WheelInput<O> {
    /// A starting tick ([`start`]), then ops decoded by `op` ([`ops`]).
    pub fn decode<'a>(
        u: &mut Unstructured<'a>,
        op: impl FnMut(&mut Unstructured<'a>) -> Result<O>,
    ) -> Result<Self> {
        let start = start(u)?;
        Ok(WheelInput {
            start,
            ops: ops(u, op)?,
        })
    }
}

impl<'a> Arbitrary<'a> for WheelInput {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Self::decode(u, op)
    }
}

/// A starting tick: 0, anything, or within ±65535 of a long-uptime mark.
pub fn start(u: &mut Unstructured) -> Result<u64> {
    let which = u.int_in_range(0u8..=7)?;
    Ok(match which {
        0..=5 => {
            let mark = START_MARKS[which as usize];
            let d = u64::from(u.arbitrary::<u16>()?);
            if u.arbitrary()? {
                mark.saturating_sub(d)
            } else {
                mark.saturating_add(d)
            }
        }
        6 => u.arbitrary()?,
        _ => 0,
    })
}

/// A deadline: level-uniform ahead (most), the past, level boundaries, the top of the range,
/// another timer's deadline (± 1), `elapsed`, or any tick.
pub fn deadline(u: &mut Unstructured) -> Result<When> {
    Ok(match u.int_in_range(0u8..=15)? {
        0..=5 => When::Ahead {
            level: u.int_in_range(0..=10)?,
            offset: u.arbitrary()?,
        },
        6 => When::Behind {
            level: u.int_in_range(0..=10)?,
            offset: u.arbitrary()?,
        },
        7 | 8 => boundary(u)?,
        9 => When::Top {
            back: u.int_in_range(0..=3)?,
        },
        10..=12 => When::Same {
            pick: u.arbitrary()?,
            delta: u.int_in_range(-1..=1)?,
        },
        13 => When::Elapsed,
        14 => When::Ahead {
            level: 0,
            offset: u64::from(u.arbitrary::<u8>()?),
        },
        _ => When::Abs(u.arbitrary()?),
    })
}

/// A poll time: mostly small steps (timers fire a few at a time), sometimes huge jumps,
/// time going backwards, exact deadlines and one tick before them.
pub fn now(u: &mut Unstructured) -> Result<When> {
    Ok(match u.int_in_range(0u8..=15)? {
        0..=5 => When::Ahead {
            level: u.int_in_range(0..=2)?,
            offset: u.arbitrary()?,
        },
        6 | 7 => When::Ahead {
            level: u.int_in_range(0..=10)?,
            offset: u.arbitrary()?,
        },
        8 => When::Behind {
            level: u.int_in_range(0..=10)?,
            offset: u.arbitrary()?,
        },
        9 => boundary(u)?,
        10..=12 => When::Same {
            pick: u.arbitrary()?,
            delta: u.int_in_range(-1..=1)?,
        },
        13 => When::Top {
            back: u.int_in_range(0..=3)?,
        },
        _ => When::Elapsed,
    })
}

fn boundary(u: &mut Unstructured) -> Result<When> {
    Ok(When::Boundary {
        k: u.int_in_range(0..=9)?,
        delta: u.int_in_range(-1..=1)?,
        aligned: u.arbitrary()?,
    })
}

/// A key: issued (pending or stale), issued with its generation skewed, or raw.
pub fn key(u: &mut Unstructured) -> Result<KeyPick> {
    Ok(match u.int_in_range(0u8..=9)? {
        0..=6 => KeyPick::Issued(u.arbitrary()?),
        7 | 8 => KeyPick::Skewed {
            pick: u.arbitrary()?,
            dgen: u.int_in_range(-2..=2)?,
        },
        _ => KeyPick::Raw {
            index: u.arbitrary()?,
            generation: u.arbitrary()?,
        },
    })
}

/// A `poll_into` limit: mostly tiny, so polls stop and resume often.
pub fn limit(u: &mut Unstructured) -> Result<u32> {
    Ok(match u.int_in_range(0u8..=7)? {
        0..=5 => u32::from(u.int_in_range(0u8..=4)?),
        6 => u32::from(u.arbitrary::<u8>()?),
        _ => u32::MAX,
    })
}

/// One op; `clear` is rare (it wipes the state the other ops built up).
pub fn op(u: &mut Unstructured) -> Result<Op> {
    Ok(match u.int_in_range(0u8..=63)? {
        0..=17 => Op::Insert(deadline(u)?),
        18..=26 => Op::Cancel(key(u)?),
        27..=35 => Op::Reset(key(u)?, deadline(u)?),
        36..=43 => Op::Poll(now(u)?),
        44..=48 => Op::PollAll(now(u)?),
        49..=56 => Op::PollInto {
            now: now(u)?,
            limit: limit(u)?,
            prefill: u.int_in_range(0..=2)?,
        },
        57..=59 => Op::GetMut(key(u)?),
        60 => Op::Churn {
            times: u16::from(u.int_in_range(0u8..=63)?),
            level: u.int_in_range(0..=3)?,
            window: u.arbitrary()?,
        },
        61 | 62 => Op::ShrinkToFit,
        _ => Op::Clear,
    })
}
