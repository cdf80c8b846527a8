//! Shared by the fuzz targets: the reference model of `tests/support/model.rs` (included, so
//! the proptest and the fuzzer check exactly the same contracts), decoders that turn the
//! fuzzer's bytes into op sequences that keep hitting interesting ticks, and an encoder (the
//! decoders' inverse) that `examples/write_corpus.rs` uses to write the seed corpora.
//!
//! Each target's input type implements `Arbitrary` and `Debug`, so
//! `cargo fuzz fmt <target> <artifact>` prints a crash as an op list that pastes straight
//! into a regression test.

#[path = "../../tests/support/delay_queue_model.rs"]
pub mod delay_queue_model;
#[path = "../../tests/support/indexed_model.rs"]
pub mod indexed_model;
#[path = "../../tests/support/model.rs"]
pub mod model;
#[path = "../../tests/support/scheduler_model.rs"]
pub mod scheduler_model;

use arbitrary::{Arbitrary, Result, Unstructured};
use delay_queue_model::{DqAt, DqOp, Dur};
use indexed_model::IxOp;
use model::{KeyPick, Op, When};
use scheduler_model::{At, SchedOp};

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

/// The input of `indexed_ops`: a starting tick and an op sequence over colliding ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedInput {
    pub start: u64,
    pub ops: Vec<IxOp>,
}

impl<'a> Arbitrary<'a> for IndexedInput {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let start = start(u)?;
        let mut ops = Vec::new();
        while !u.is_empty() && ops.len() < MAX_OPS {
            ops.push(ix_op(u)?);
        }
        Ok(IndexedInput { start, ops })
    }
}

/// An id: mostly one of six (they collide: replacements, reuse after firing), else any.
pub fn id(u: &mut Unstructured) -> Result<u8> {
    let raw: u8 = u.arbitrary()?;
    Ok(if raw < 224 { raw % 6 } else { raw })
}

/// [`When::Same`] picks by id in `indexed_ops`: keep its picks among the common ids.
fn same_id(when: When) -> When {
    match when {
        When::Same { pick, delta } => When::Same {
            pick: pick % 6,
            delta,
        },
        other => other,
    }
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
        let mut ops = Vec::new();
        while !u.is_empty() && ops.len() < MAX_OPS {
            ops.push(sched_op(u)?);
        }
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
    Ok(match u.int_in_range(0u8..=31)? {
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
        _ => SchedOp::Finish {
            due: u.arbitrary()?,
            consume: u.arbitrary()?,
        },
    })
}

/// The input of `tokio_delay_queue`: a sequence of queue operations, clock advances and
/// polls by two tasks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelayQueueInput {
    pub ops: Vec<DqOp>,
}

impl<'a> Arbitrary<'a> for DelayQueueInput {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let mut ops = Vec::new();
        while !u.is_empty() && ops.len() < MAX_OPS {
            ops.push(dq_op(u)?);
        }
        Ok(DelayQueueInput { ops })
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

/// The decoders' inverse: bytes that decode to a chosen input. Used to write the seed
/// corpora (`examples/write_corpus.rs`), which checks every seed by decoding it again.
pub mod encode {
    use super::delay_queue_model::{DqAt, DqOp, Dur};
    use super::indexed_model::IxOp;
    use super::model::{KeyPick, Op, When};
    use super::scheduler_model::{At, SchedOp};

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

    /// An id `< 224` decodes as `id % 6`, any other byte as itself.
    fn id_byte(id: u8) -> u8 {
        assert!(!(6..224).contains(&id), "ids 6..224 cannot be encoded");
        id
    }

    impl Bytes {
        /// An op of `indexed_ops`. `When::Same` picks must be ids `< 6`.
        pub fn ix_op(&mut self, op: IxOp) {
            match op {
                IxOp::Insert { id, when } => {
                    self.range(0, 0);
                    self.0.push(id_byte(id));
                    self.deadline(when);
                }
                IxOp::Cancel(id) => {
                    self.range(0, 20);
                    self.0.push(id_byte(id));
                }
                IxOp::Reset(id, when) => {
                    self.range(0, 29);
                    self.0.push(id_byte(id));
                    self.deadline(when);
                }
                IxOp::Poll(when) => {
                    self.range(0, 38);
                    self.now(when);
                }
                IxOp::PollAll(when) => {
                    self.range(0, 46);
                    self.now(when);
                }
                IxOp::PollInto {
                    now,
                    limit,
                    prefill,
                } => {
                    self.range(0, 51);
                    self.now(now);
                    self.limit(limit);
                    self.range(0, i16::from(prefill));
                }
                IxOp::GetMut(id) => {
                    self.range(0, 58);
                    self.0.push(id_byte(id));
                }
                IxOp::ShrinkToFit => self.range(0, 61),
                IxOp::Clear => self.range(0, 63),
            }
        }
    }

    /// The bytes of an `indexed_ops` input.
    pub fn indexed_input(start: Start, ops: &[IxOp]) -> Vec<u8> {
        let mut bytes = Bytes::default();
        bytes.start(start);
        for &op in ops {
            bytes.ix_op(op);
        }
        bytes.0
    }

    impl Bytes {
        /// # Panics
        /// On values [`super::at`] cannot produce.
        pub fn at(&mut self, at: At) {
            match at {
                At::Ahead { ticks, sub } if ticks < 8 => {
                    self.range(0, 0);
                    self.range(0, ticks as i16);
                    self.u32(sub);
                }
                At::Ahead { ticks, sub } => {
                    self.range(0, 6);
                    self.u16(u16::try_from(ticks).expect("ticks fit u16"));
                    self.u32(sub);
                }
                At::Behind { ticks } => {
                    assert!(ticks < 8);
                    self.range(0, 7);
                    self.range(0, ticks as i16);
                }
                At::BeforeOrigin { ns } => {
                    self.range(0, 8);
                    self.u32(ns);
                }
                At::Far { shift } => {
                    self.range(0, 9);
                    self.range(0, i16::from(shift));
                }
            }
        }

        pub fn sched_op(&mut self, op: SchedOp) {
            match op {
                SchedOp::Schedule { queue, id, at } => {
                    self.range(0, 0);
                    self.0.extend([queue, id]);
                    self.at(at);
                }
                SchedOp::Reschedule { id, at } => {
                    self.range(0, 8);
                    self.0.push(id);
                    self.at(at);
                }
                SchedOp::Cancel(id) => {
                    self.range(0, 11);
                    self.0.push(id);
                }
                SchedOp::Drain(queue) => {
                    self.range(0, 14);
                    self.0.push(queue);
                }
                SchedOp::PopDue { now, limit } => {
                    self.range(0, 16);
                    self.at(now);
                    self.range(
                        0,
                        if limit == u8::MAX {
                            5
                        } else {
                            i16::from(limit)
                        },
                    );
                }
                SchedOp::Take { batch, n } => {
                    self.range(0, 20);
                    self.0.push(batch);
                    self.range(0, i16::from(n));
                }
                SchedOp::DropBatch(batch) => {
                    self.range(0, 24);
                    self.0.push(batch);
                }
                SchedOp::Finish { due, consume } => {
                    self.range(0, 26);
                    self.0.push(due);
                    self.bool(consume);
                }
            }
        }
    }

    /// The bytes of a `scheduler_races` input.
    pub fn sched_input(shards: u8, resolution: u8, ops: &[SchedOp]) -> Vec<u8> {
        let mut bytes = Bytes::default();
        bytes.range(0, i16::from(shards));
        bytes.range(0, i16::from(resolution));
        for &op in ops {
            bytes.sched_op(op);
        }
        bytes.0
    }

    impl Bytes {
        fn dur(&mut self, d: Dur) {
            self.range(0, i16::from(d.level));
            self.u64(d.ms);
            self.u32(d.nanos);
        }

        fn dq_at(&mut self, at: DqAt) {
            match at {
                DqAt::Ahead(d) => {
                    self.range(0, 0);
                    self.dur(d);
                }
                DqAt::Behind(d) => {
                    self.range(0, 6);
                    self.dur(d);
                }
                DqAt::BeforeOrigin { ms } => {
                    self.range(0, 8);
                    self.u16(ms);
                }
                DqAt::Far { shift } => {
                    self.range(0, 9);
                    self.range(0, i16::from(shift));
                }
            }
        }

        pub fn dq_op(&mut self, op: DqOp) {
            match op {
                DqOp::Insert(d) => {
                    self.range(0, 0);
                    self.dur(d);
                }
                DqOp::InsertAt(at) => {
                    self.range(0, 6);
                    self.dq_at(at);
                }
                DqOp::Remove(k) => {
                    self.range(0, 9);
                    self.u16(k);
                }
                DqOp::Reset(k, d) => {
                    self.range(0, 12);
                    self.u16(k);
                    self.dur(d);
                }
                DqOp::ResetAt(k, at) => {
                    self.range(0, 14);
                    self.u16(k);
                    self.dq_at(at);
                }
                DqOp::Advance(d) => {
                    assert!(d.level <= 3, "advances are levels 0..=3");
                    self.range(0, 16);
                    self.dur(d);
                }
                DqOp::Poll { task } => {
                    self.range(0, 21);
                    self.bool(task);
                }
                DqOp::Drain { task } => {
                    self.range(0, 26);
                    self.bool(task);
                }
                DqOp::Peek => self.range(0, 28),
                DqOp::Clear => self.range(0, 30),
                DqOp::Compact => {
                    self.range(0, 31);
                    self.bool(true);
                }
                DqOp::ShrinkToFit => {
                    self.range(0, 31);
                    self.bool(false);
                }
            }
        }
    }

    /// The bytes of a `tokio_delay_queue` input.
    pub fn delay_queue_input(ops: &[DqOp]) -> Vec<u8> {
        let mut bytes = Bytes::default();
        for &op in ops {
            bytes.dq_op(op);
        }
        bytes.0
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
