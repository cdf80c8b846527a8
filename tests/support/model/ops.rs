//! The op vocabulary of the wheel's model tests: ticks chosen relative to the wheel's state
//! ([`When`]), key picks, ops, and how a [`When`] resolves to a tick.

/// `64^level`, saturating at `u64::MAX`.
pub fn pow64(level: u32) -> u64 {
    1u64.checked_shl(6 * level).unwrap_or(u64::MAX)
}

/// A tick, chosen relative to the wheel's state when the op runs, so that generated
/// sequences keep hitting interesting deadlines whatever `elapsed` has become.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// `elapsed + d` with `d` uniform in level `level`'s distance range `[64^L, 64^(L+1))`
    /// (level 0: `[1, 64)`), saturating at `u64::MAX`. Drawing the level first and then the
    /// distance hits every level equally often.
    Ahead { level: u8, offset: u64 },
    /// `elapsed - d` with `d` drawn as for `Ahead`, saturating at 0: the past.
    Behind { level: u8, offset: u64 },
    /// A level boundary: `64^k + delta` past `elapsed` or, if `aligned`, past the first
    /// multiple of `64^k` after `elapsed` (where slots of level `k` begin).
    Boundary { k: u8, delta: i8, aligned: bool },
    /// `u64::MAX - back`.
    Top { back: u8 },
    /// The last known deadline of an issued key, plus `delta`: equal deadlines, and polls
    /// exactly at (or one tick before) a deadline.
    Same { pick: u16, delta: i8 },
    /// `elapsed` itself.
    Elapsed,
    /// Exactly this tick.
    Abs(u64),
}

/// Which key an op uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyPick {
    /// An issued key (pending or stale), by position in issue order, modulo their count.
    Issued(u16),
    /// An issued key with its generation moved by `dgen`: stale, or naming whatever timer has
    /// that index and generation now (a foreign key that happens to match).
    Skewed { pick: u16, dgen: i8 },
    /// A key built from raw parts.
    Raw { index: u32, generation: u32 },
}

/// One step of a sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Insert(When),
    Cancel(KeyPick),
    Reset(KeyPick, When),
    /// One `poll(now)`.
    Poll(When),
    /// `poll(now)` until it returns `None`.
    PollAll(When),
    /// `poll_into(now, limit, out)` with `prefill` timers' worth of junk already in `out`.
    PollInto {
        now: When,
        limit: u32,
        prefill: u8,
    },
    /// `get_mut` and overwrite the value.
    GetMut(KeyPick),
    /// `times` rounds (at most [`MAX_CHURN`]) of: insert a timer at `Ahead { level, .. }`,
    /// reset one of the last `window + 1` churned timers to another such deadline (often
    /// earlier, which leaves a stale reference), and cancel the oldest of them once there are
    /// more. Keeps the live count steady while stale references pile up, which single ops
    /// never do enough of to reach the memory bound or to make slots compact.
    Churn {
        times: u16,
        level: u8,
        window: u8,
    },
    Clear,
    ShrinkToFit,
}

/// Most rounds one [`Op::Churn`] runs.
pub const MAX_CHURN: u16 = 512;

/// The tick a [`When`] names, given `elapsed` and, for [`When::Same`], the last known
/// deadline of the picked timer (`None`: nothing to pick, use `elapsed`).
pub fn resolve_when(when: When, elapsed: u64, same: impl Fn(u16) -> Option<u64>) -> u64 {
    let distance = |level: u8, offset: u64| {
        let level = u32::from(level % 11);
        let lo = pow64(level);
        let hi = if level == 10 {
            u64::MAX
        } else {
            pow64(level + 1)
        };
        lo + offset % (hi - lo)
    };
    match when {
        When::Ahead { level, offset } => elapsed.saturating_add(distance(level, offset)),
        When::Behind { level, offset } => elapsed.saturating_sub(distance(level, offset)),
        When::Boundary { k, delta, aligned } => {
            let k = u32::from(k % 10) + 1;
            let base = if aligned {
                let shift = 6 * k;
                ((elapsed >> shift) + 1)
                    .checked_shl(shift)
                    .unwrap_or(u64::MAX)
            } else {
                elapsed.saturating_add(pow64(k))
            };
            base.saturating_add_signed(i64::from(delta.signum()))
        }
        When::Top { back } => u64::MAX - u64::from(back % 4),
        When::Same { pick, delta } => match same(pick) {
            Some(deadline) => deadline.saturating_add_signed(i64::from(delta.signum())),
            None => elapsed,
        },
        When::Elapsed => elapsed,
        When::Abs(tick) => tick,
    }
}
