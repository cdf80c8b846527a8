//! Decoding `scheduler_races` inputs: shard count, resolution and an interleaving of phases.

use arbitrary::{Arbitrary, Result, Unstructured};

use crate::ops;
use crate::scheduler_model::{At, SchedOp};

/// The input of `scheduler_races`: shard count, resolution, and an interleaving of phases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedInput {
    pub shards: u8,
    pub resolution: u8,
    pub ops: Vec<SchedOp>,
}

impl<'a> Arbitrary<'a> for SchedInput {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let shards = u.int_in_range(0..=7)?;
        let resolution = u.int_in_range(0..=3)?;
        let ops = ops(u, sched_op)?;
        Ok(SchedInput {
            shards,
            resolution,
            ops,
        })
    }
}

/// An instant for the scheduler: mostly within a few ticks of the clock (the due edge),
/// sometimes thousands of ticks on, behind, before the origin, or far away.
pub fn at(u: &mut Unstructured) -> Result<At> {
    Ok(match u.int_in_range(0u8..=9)? {
        0..=5 => At::Ahead {
            ticks: u32::from(u.int_in_range(0u8..=7)?),
            sub: u.arbitrary()?,
        },
        6 => At::Ahead {
            ticks: u32::from(u.arbitrary::<u16>()?),
            sub: u.arbitrary()?,
        },
        7 => At::Behind {
            ticks: u32::from(u.int_in_range(0u8..=7)?),
        },
        8 => At::BeforeOrigin { ns: u.arbitrary()? },
        _ => At::Far {
            shift: u.int_in_range(0..=63)?,
        },
    })
}

/// One scheduler phase.
pub fn sched_op(u: &mut Unstructured) -> Result<SchedOp> {
    Ok(match u.int_in_range(0u8..=39)? {
        0..=7 => SchedOp::Schedule {
            queue: u.arbitrary()?,
            id: u.arbitrary()?,
            at: at(u)?,
        },
        8..=10 => SchedOp::Reschedule {
            id: u.arbitrary()?,
            at: at(u)?,
        },
        11..=13 => SchedOp::Cancel(u.arbitrary()?),
        14 | 15 => SchedOp::Drain(u.arbitrary()?),
        16..=19 => SchedOp::PopDue {
            now: at(u)?,
            limit: match u.int_in_range(0u8..=5)? {
                5 => u8::MAX,
                n => n,
            },
        },
        20..=23 => SchedOp::Take {
            batch: u.arbitrary()?,
            n: u.int_in_range(0..=4)?,
        },
        24 | 25 => SchedOp::DropBatch(u.arbitrary()?),
        32 => SchedOp::Hold(u.arbitrary()?),
        33 => SchedOp::Release(u.arbitrary()?),
        34 | 35 => SchedOp::Limit {
            queue: u.arbitrary()?,
            limit: match u.int_in_range(0u8..=4)? {
                4 => u8::MAX,
                n => n,
            },
        },
        38 => SchedOp::Flush {
            queue: u.arbitrary()?,
            now: at(u)?,
        },
        39 => SchedOp::PopQueue {
            queue: u.arbitrary()?,
            now: at(u)?,
            limit: u.arbitrary()?,
        },
        36 | 37 => SchedOp::Rate {
            queue: u.arbitrary()?,
            interval: u.arbitrary()?,
            burst: u.arbitrary()?,
        },
        _ => SchedOp::Finish {
            due: u.arbitrary()?,
            consume: u.arbitrary()?,
        },
    })
}
