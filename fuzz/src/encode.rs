//! The decoders' inverse: bytes that decode to a chosen input. Used to write the seed
//! corpora (`examples/write_corpus.rs`), which checks every seed by decoding it again.

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
            SchedOp::Hold(queue) => {
                self.range(0, 32);
                self.0.push(queue);
            }
            SchedOp::Release(queue) => {
                self.range(0, 33);
                self.0.push(queue);
            }
            SchedOp::Flush { queue, now } => {
                self.range(0, 38);
                self.0.push(queue);
                self.at(now);
            }
            SchedOp::PopQueue { queue, now, limit } => {
                self.range(0, 39);
                self.0.push(queue);
                self.at(now);
                self.0.push(limit);
            }
            SchedOp::Rate {
                queue,
                interval,
                burst,
            } => {
                self.range(0, 36);
                self.0.extend([queue, interval, burst]);
            }
            SchedOp::Limit { queue, limit } => {
                self.range(0, 34);
                self.0.push(queue);
                self.range(
                    0,
                    if limit == u8::MAX {
                        4
                    } else {
                        i16::from(limit)
                    },
                );
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
