//! Shared by the fuzz targets: the reference model of `tests/support/model.rs` (included, so
//! the proptest and the fuzzer check exactly the same contracts), decoders that turn the
//! fuzzer's bytes into op sequences that keep hitting interesting ticks, and an encoder (the
//! decoders' inverse) that `examples/write_corpus.rs` uses to write the seed corpora.
//!
//! Each target's input type implements `Arbitrary` and `Debug`, so
//! `cargo fuzz fmt <target> <artifact>` prints a crash as an op list that pastes straight
//! into a regression test.

#[path = "../../tests/support/model.rs"]
pub mod model;

use arbitrary::{Arbitrary, Result, Unstructured};
use model::{KeyPick, Op, When};

/// Most ops decoded from one input: bounds the work per run.
pub const MAX_OPS: usize = 1024;

/// Long-uptime marks a wheel may start near.
pub const START_MARKS: [u64; 6] = [0, 1 << 30, 1 << 32, 1 << 36, 1 << 63, u64::MAX - (1 << 20)];

/// The input of `wheel_ops`: a starting tick and an op sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WheelInput {
    pub start: u64,
    pub ops: Vec<Op>,
}

impl<'a> Arbitrary<'a> for WheelInput {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let start = start(u)?;
        let mut ops = Vec::new();
        while !u.is_empty() && ops.len() < MAX_OPS {
            ops.push(op(u)?);
        }
        Ok(WheelInput { start, ops })
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
            times: u16::from(u.arbitrary::<u8>()?),
            level: u.int_in_range(0..=3)?,
            window: u.arbitrary()?,
        },
        61 | 62 => Op::ShrinkToFit,
        _ => Op::Clear,
    })
}

/// The decoders' inverse: bytes that decode to a chosen input. Used to write the seed
/// corpora (`examples/write_corpus.rs`), which checks every seed by decoding it again.
pub mod encode {
    use super::model::{KeyPick, Op, When};

    /// How a starting tick is chosen, as [`super::start`] decodes it.
    #[derive(Debug, Clone, Copy)]
    pub enum Start {
        /// `START_MARKS[mark] ± d`.
        Near {
            mark: u8,
            d: u16,
            below: bool,
        },
        Any(u64),
        Zero,
    }

    /// Bytes under construction.
    #[derive(Debug, Default)]
    pub struct Bytes(pub Vec<u8>);

    impl Bytes {
        /// A value `v` of `int_in_range(lo..=hi)` over a one-byte type.
        fn range(&mut self, lo: i16, v: i16) {
            self.0.push((v - lo) as u8);
        }
        fn u16(&mut self, v: u16) {
            self.0.extend(v.to_le_bytes());
        }
        fn u32(&mut self, v: u32) {
            self.0.extend(v.to_le_bytes());
        }
        fn u64(&mut self, v: u64) {
            self.0.extend(v.to_le_bytes());
        }
        fn bool(&mut self, v: bool) {
            self.0.push(u8::from(v));
        }

        pub fn start(&mut self, start: Start) {
            match start {
                Start::Near { mark, d, below } => {
                    self.range(0, i16::from(mark));
                    self.u16(d);
                    self.bool(below);
                }
                Start::Any(tick) => {
                    self.range(0, 6);
                    self.u64(tick);
                }
                Start::Zero => self.range(0, 7),
            }
        }

        pub fn deadline(&mut self, when: When) {
            match when {
                When::Ahead { level, offset } => {
                    self.range(0, 0);
                    self.range(0, i16::from(level));
                    self.u64(offset);
                }
                When::Behind { level, offset } => {
                    self.range(0, 6);
                    self.range(0, i16::from(level));
                    self.u64(offset);
                }
                When::Boundary { .. } => {
                    self.range(0, 7);
                    self.boundary(when);
                }
                When::Top { back } => {
                    self.range(0, 9);
                    self.range(0, i16::from(back));
                }
                When::Same { pick, delta } => {
                    self.range(0, 10);
                    self.u16(pick);
                    self.range(-1, i16::from(delta));
                }
                When::Elapsed => self.range(0, 13),
                When::Abs(tick) => {
                    self.range(0, 15);
                    self.u64(tick);
                }
            }
        }

        /// # Panics
        /// On `When::Abs`, which [`super::now`] never produces.
        pub fn now(&mut self, when: When) {
            match when {
                When::Ahead { level, offset } => {
                    if level <= 2 {
                        self.range(0, 0);
                    } else {
                        self.range(0, 6);
                    }
                    self.range(0, i16::from(level));
                    self.u64(offset);
                }
                When::Behind { level, offset } => {
                    self.range(0, 8);
                    self.range(0, i16::from(level));
                    self.u64(offset);
                }
                When::Boundary { .. } => {
                    self.range(0, 9);
                    self.boundary(when);
                }
                When::Same { pick, delta } => {
                    self.range(0, 10);
                    self.u16(pick);
                    self.range(-1, i16::from(delta));
                }
                When::Top { back } => {
                    self.range(0, 13);
                    self.range(0, i16::from(back));
                }
                When::Elapsed => self.range(0, 14),
                When::Abs(_) => panic!("a poll time is never When::Abs"),
            }
        }

        fn boundary(&mut self, when: When) {
            let When::Boundary { k, delta, aligned } = when else {
                unreachable!()
            };
            self.range(0, i16::from(k));
            self.range(-1, i16::from(delta));
            self.bool(aligned);
        }

        pub fn key(&mut self, pick: KeyPick) {
            match pick {
                KeyPick::Issued(i) => {
                    self.range(0, 0);
                    self.u16(i);
                }
                KeyPick::Skewed { pick, dgen } => {
                    self.range(0, 7);
                    self.u16(pick);
                    self.range(-2, i16::from(dgen));
                }
                KeyPick::Raw { index, generation } => {
                    self.range(0, 9);
                    self.u32(index);
                    self.u32(generation);
                }
            }
        }

        /// # Panics
        /// On a limit [`super::limit`] cannot produce (5..=255 and `u32::MAX` only).
        pub fn limit(&mut self, limit: u32) {
            match limit {
                0..=4 => {
                    self.range(0, 0);
                    self.range(0, limit as i16);
                }
                5..=255 => {
                    self.range(0, 6);
                    self.0.push(limit as u8);
                }
                u32::MAX => self.range(0, 7),
                _ => panic!("limit {limit} cannot be encoded"),
            }
        }

        pub fn op(&mut self, op: Op) {
            match op {
                Op::Insert(when) => {
                    self.range(0, 0);
                    self.deadline(when);
                }
                Op::Cancel(pick) => {
                    self.range(0, 18);
                    self.key(pick);
                }
                Op::Reset(pick, when) => {
                    self.range(0, 27);
                    self.key(pick);
                    self.deadline(when);
                }
                Op::Poll(when) => {
                    self.range(0, 36);
                    self.now(when);
                }
                Op::PollAll(when) => {
                    self.range(0, 44);
                    self.now(when);
                }
                Op::PollInto {
                    now,
                    limit,
                    prefill,
                } => {
                    self.range(0, 49);
                    self.now(now);
                    self.limit(limit);
                    self.range(0, i16::from(prefill));
                }
                Op::GetMut(pick) => {
                    self.range(0, 57);
                    self.key(pick);
                }
                Op::Churn {
                    times,
                    level,
                    window,
                } => {
                    self.range(0, 60);
                    self.0
                        .push(u8::try_from(times).expect("churn times fit a byte"));
                    self.range(0, i16::from(level));
                    self.0.push(window);
                }
                Op::ShrinkToFit => self.range(0, 61),
                Op::Clear => self.range(0, 63),
            }
        }
    }

    /// The bytes of a `wheel_ops` input.
    pub fn wheel_input(start: Start, ops: &[Op]) -> Vec<u8> {
        let mut bytes = Bytes::default();
        bytes.start(start);
        for &op in ops {
            bytes.op(op);
        }
        bytes.0
    }
}
