//! Decoding `indexed_ops` inputs: `IndexedWheel` ops over a few colliding ids.

use arbitrary::{Arbitrary, Result, Unstructured};

use crate::indexed_model::{COMMON_IDS, IxOp, same_id};
use crate::wheel_ops::{WheelInput, deadline, limit, now};

/// The input of `indexed_ops`: a starting tick and an op sequence over colliding ids.
pub type IndexedInput = WheelInput<IxOp>;

impl<'a> Arbitrary<'a> for IndexedInput {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Self::decode(u, ix_op)
    }
}

/// An id: mostly one of the [`COMMON_IDS`] (they collide: replacements, reuse after firing),
/// else any.
pub fn id(u: &mut Unstructured) -> Result<u8> {
    let raw: u8 = u.arbitrary()?;
    Ok(if raw < 224 { raw % COMMON_IDS } else { raw })
}

/// One `IndexedWheel` op.
pub fn ix_op(u: &mut Unstructured) -> Result<IxOp> {
    Ok(match u.int_in_range(0u8..=63)? {
        0..=19 => IxOp::Insert {
            id: id(u)?,
            when: same_id(deadline(u)?),
        },
        20..=28 => IxOp::Cancel(id(u)?),
        29..=37 => IxOp::Reset(id(u)?, same_id(deadline(u)?)),
        38..=45 => IxOp::Poll(same_id(now(u)?)),
        46..=50 => IxOp::PollAll(same_id(now(u)?)),
        51..=57 => IxOp::PollInto {
            now: same_id(now(u)?),
            limit: limit(u)?,
            prefill: u.int_in_range(0..=2)?,
        },
        58..=60 => IxOp::GetMut(id(u)?),
        61 | 62 => IxOp::ShrinkToFit,
        _ => IxOp::Clear,
    })
}
