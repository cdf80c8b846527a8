//! Decoding `tokio_delay_queue` inputs: queue operations, clock advances and polls by two
//! tasks.

use arbitrary::{Arbitrary, Result, Unstructured};

use crate::delay_queue_model::{DqAt, DqOp, Dur};
use crate::ops;

/// The input of `tokio_delay_queue`: a sequence of queue operations, clock advances and
/// polls by two tasks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelayQueueInput {
    pub ops: Vec<DqOp>,
}

impl<'a> Arbitrary<'a> for DelayQueueInput {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(DelayQueueInput {
            ops: ops(u, dq_op)?,
        })
    }
}

/// A duration: level 0 (zero) to 6 (up to 2^36 ms) drawn level-uniformly, 7 = `MAX`.
pub fn dur(u: &mut Unstructured, max_level: u8) -> Result<Dur> {
    Ok(Dur {
        level: u.int_in_range(0..=max_level)?,
        ms: u.arbitrary()?,
        nanos: u.arbitrary()?,
    })
}

pub fn dq_at(u: &mut Unstructured) -> Result<DqAt> {
    Ok(match u.int_in_range(0u8..=9)? {
        0..=5 => DqAt::Ahead(dur(u, 7)?),
        6 | 7 => DqAt::Behind(dur(u, 7)?),
        8 => DqAt::BeforeOrigin { ms: u.arbitrary()? },
        _ => DqAt::Far {
            shift: u.int_in_range(0..=63)?,
        },
    })
}

/// One `DelayQueue` step.
pub fn dq_op(u: &mut Unstructured) -> Result<DqOp> {
    Ok(match u.int_in_range(0u8..=31)? {
        0..=5 => DqOp::Insert(dur(u, 7)?),
        6..=8 => DqOp::InsertAt(dq_at(u)?),
        9..=11 => DqOp::Remove(u.arbitrary()?),
        12 | 13 => DqOp::Reset(u.arbitrary()?, dur(u, 7)?),
        14 | 15 => DqOp::ResetAt(u.arbitrary()?, dq_at(u)?),
        16..=20 => DqOp::Advance(dur(u, 3)?),
        21..=25 => DqOp::Poll {
            task: u.arbitrary()?,
        },
        26 | 27 => DqOp::Drain {
            task: u.arbitrary()?,
        },
        28 | 29 => DqOp::Peek,
        30 => DqOp::Clear,
        _ => match u.arbitrary::<bool>()? {
            true => DqOp::Compact,
            false => DqOp::ShrinkToFit,
        },
    })
}
