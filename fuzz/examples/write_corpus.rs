//! Writes the hand-made seed corpora to `fuzz/corpus/<target>/`, checking that every seed
//! decodes back to the input it was built from. Run from `fuzz/`:
//! `cargo run --example write_corpus`.

use std::fmt::Debug;
use std::path::Path;

use arbitrary::{Arbitrary, Unstructured};
use tickwheel_fuzz::delay_queue_model::{DqAt, DqOp, Dur};
use tickwheel_fuzz::encode::{self, Start};
use tickwheel_fuzz::indexed_model::IxOp;
use tickwheel_fuzz::model::{KeyPick::*, Op, Op::*, When, When::*};
use tickwheel_fuzz::scheduler_model::{At, SchedOp};
use tickwheel_fuzz::{DelayQueueInput, IndexedInput, SchedInput, WheelInput};

fn write(target: &str, name: &str, bytes: &[u8]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    std::fs::create_dir_all(&dir).expect("create corpus dir");
    std::fs::write(dir.join(name), bytes).expect("write seed");
    println!("{target}/{name}: {} bytes", bytes.len());
}

/// Checks that `bytes` decode (as an `I`) to `ops`, then writes them as the seed `name` of
/// `target`.
///
/// # Panics
/// If they do not decode, or decode to other ops.
fn seed<I: for<'a> Arbitrary<'a>, O: PartialEq + Debug>(
    target: &str,
    name: &str,
    bytes: &[u8],
    ops: &[O],
    ops_of: fn(&I) -> &[O],
) {
    let decoded = I::arbitrary(&mut Unstructured::new(bytes)).expect("decodes");
    assert_eq!(
        ops_of(&decoded),
        ops,
        "{name}: the seed decodes to what was meant"
    );
    write(target, name, bytes);
}

/// `When::Ahead { level, offset }`: most seeds' deadlines and poll times.
fn ahead(level: u8, offset: u64) -> When {
    Ahead { level, offset }
}

/// `When::Behind { level, offset }`.
fn behind(level: u8, offset: u64) -> When {
    Behind { level, offset }
}

fn wheel_seed(name: &str, start: Start, ops: Vec<Op>) {
    let bytes = encode::wheel_input(start, &ops);
    seed::<WheelInput, _>("wheel_ops", name, &bytes, &ops, |input| &input.ops);
}

fn wheel_ops() {
    // Every level boundary, aligned and not, ±1, and the top of the range; then a walk
    // through them with exact and one-early polls.
    let mut ops = Vec::new();
    for k in 0..10 {
        for delta in -1..=1 {
            for aligned in [false, true] {
                ops.push(Insert(Boundary { k, delta, aligned }));
            }
        }
    }
    ops.extend((0..4).map(|back| Insert(Top { back })));
    for pick in 0..64 {
        ops.push(PollAll(Same { pick, delta: -1 }));
        ops.push(PollAll(Same { pick, delta: 0 }));
    }
    ops.push(PollAll(Top { back: 0 }));
    wheel_seed("boundaries", Start::Zero, ops);

    // Stale keys: cancel, reuse of the index, then every operation through the old key,
    // through skewed and raw keys.
    wheel_seed(
        "stale_keys",
        Start::Zero,
        vec![
            Insert(ahead(0, 5)),
            Cancel(Issued(0)),
            Insert(ahead(0, 5)),
            Cancel(Issued(0)),
            Reset(Issued(0), ahead(1, 3)),
            GetMut(Issued(0)),
            Reset(Skewed { pick: 1, dgen: -1 }, Elapsed),
            Cancel(Skewed { pick: 1, dgen: 1 }),
            Cancel(Raw {
                index: 0,
                generation: 1,
            }),
            Poll(Same { pick: 1, delta: 0 }),
            Cancel(Issued(1)),
            Insert(behind(0, 1)),
            ShrinkToFit,
            Insert(ahead(0, 1)),
            PollAll(ahead(1, 0)),
        ],
    );

    // Resets: later (stays in its slot), earlier, to the past, of a due timer not yet
    // polled, reset after reset; equal deadlines around them; limited polls.
    wheel_seed(
        "resets",
        Start::Zero,
        vec![
            Insert(ahead(0, 4)),
            Insert(ahead(1, 0)),
            Reset(Issued(0), Same { pick: 1, delta: 0 }),
            Insert(Same { pick: 1, delta: 0 }),
            Insert(ahead(2, 7)),
            Reset(Issued(3), ahead(0, 2)),
            Insert(behind(0, 0)),
            Reset(Issued(4), ahead(0, 9)),
            PollInto {
                now: Same { pick: 1, delta: 0 },
                limit: 1,
                prefill: 1,
            },
            Reset(Issued(2), ahead(3, 0)),
            Reset(Issued(2), Same { pick: 3, delta: 0 }),
            PollInto {
                now: ahead(2, 0),
                limit: 2,
                prefill: 0,
            },
            PollAll(Top { back: 0 }),
        ],
    );

    // Long uptime: just below 2^63, huge jumps, time going backwards, the top of the range.
    wheel_seed(
        "long_uptime",
        Start::Near {
            mark: 4,
            d: 3,
            below: true,
        },
        vec![
            Insert(ahead(0, 2)),
            Insert(ahead(0, 3)),
            Insert(ahead(9, 12345)),
            Insert(ahead(10, 1)),
            Insert(Top { back: 1 }),
            Insert(Top { back: 0 }),
            Poll(behind(4, 0)),
            PollInto {
                now: ahead(0, 5),
                limit: 1,
                prefill: 0,
            },
            Poll(behind(0, 3)),
            PollAll(ahead(9, 0)),
            Insert(behind(9, 0)),
            PollAll(Top { back: 1 }),
            PollAll(Top { back: 0 }),
            Insert(Top { back: 0 }),
            Poll(Elapsed),
        ],
    );

    // Crowded tick: many timers at one deadline, cancels and resets among them, drained one
    // at a time.
    let mut ops = vec![Insert(ahead(1, 0))];
    ops.extend((0..12).map(|_| Insert(Same { pick: 0, delta: 0 })));
    ops.extend([
        Cancel(Issued(3)),
        Reset(Issued(5), Same { pick: 0, delta: 0 }),
        Reset(Issued(7), Same { pick: 0, delta: -1 }),
        Insert(Same { pick: 0, delta: 0 }),
    ]);
    ops.extend((0..14).map(|_| PollInto {
        now: Same { pick: 0, delta: 0 },
        limit: 1,
        prefill: 0,
    }));
    wheel_seed(
        "crowded_tick",
        Start::Near {
            mark: 2,
            d: 70,
            below: true,
        },
        ops,
    );

    // Clear and shrink with timers pending and due, then reuse.
    wheel_seed(
        "clear_shrink",
        Start::Any(4095),
        vec![
            Insert(ahead(0, 0)),
            Insert(ahead(3, 1)),
            Insert(behind(0, 1)),
            PollInto {
                now: Elapsed,
                limit: 0,
                prefill: 0,
            },
            Clear,
            Cancel(Issued(0)),
            Insert(ahead(1, 1)),
            Insert(ahead(1, 2)),
            Cancel(Issued(4)),
            ShrinkToFit,
            Insert(ahead(0, 1)),
            PollAll(ahead(2, 0)),
        ],
    );
}

fn indexed_seed(name: &str, start: Start, ops: Vec<IxOp>) {
    let bytes = encode::indexed_input(start, &ops);
    seed::<IndexedInput, _>("indexed_ops", name, &bytes, &ops, |input| &input.ops);
}

fn indexed_ops() {
    use IxOp as X;
    let insert = |id, when| X::Insert { id, when };
    // Replacing pending ids (insert on an id that is pending), at equal deadlines.
    indexed_seed(
        "replace",
        Start::Zero,
        vec![
            insert(1, ahead(0, 9)),
            insert(2, Same { pick: 1, delta: 0 }),
            insert(1, Same { pick: 2, delta: 0 }),
            insert(3, Same { pick: 2, delta: 0 }),
            insert(2, ahead(2, 5)),
            X::PollInto {
                now: Same { pick: 1, delta: 0 },
                limit: 1,
                prefill: 0,
            },
            insert(1, Elapsed),
            X::PollAll(Same { pick: 2, delta: 0 }),
        ],
    );
    // Ids reused right after firing and cancelling; resets of absent ids.
    indexed_seed(
        "reuse",
        Start::Near {
            mark: 3,
            d: 1,
            below: true,
        },
        vec![
            insert(0, ahead(0, 0)),
            X::Poll(ahead(0, 1)),
            X::Reset(0, ahead(1, 0)),
            X::Cancel(0),
            insert(
                0,
                Boundary {
                    k: 0,
                    delta: 0,
                    aligned: true,
                },
            ),
            insert(
                5,
                Boundary {
                    k: 0,
                    delta: -1,
                    aligned: true,
                },
            ),
            X::Cancel(5),
            X::GetMut(0),
            insert(5, Top { back: 0 }),
            X::Reset(5, behind(3, 0)),
            X::PollAll(Same { pick: 0, delta: 0 }),
            X::ShrinkToFit,
            insert(240, ahead(10, 0)),
            X::Clear,
            insert(240, ahead(0, 3)),
        ],
    );
    // Far deadlines from a long uptime, polled with limits.
    indexed_seed(
        "long_uptime",
        Start::Near {
            mark: 4,
            d: 0,
            below: false,
        },
        vec![
            insert(1, ahead(9, 7)),
            insert(2, ahead(10, 7)),
            insert(3, Top { back: 1 }),
            insert(4, Top { back: 0 }),
            X::PollInto {
                now: Top { back: 1 },
                limit: 2,
                prefill: 1,
            },
            X::Poll(behind(5, 0)),
            X::PollAll(Top { back: 0 }),
        ],
    );
}

fn sched_seed(name: &str, shards: u8, resolution: u8, ops: Vec<SchedOp>) {
    let bytes = encode::sched_input(shards, resolution, &ops);
    seed::<SchedInput, _>("scheduler_races", name, &bytes, &ops, |input| &input.ops);
}

fn scheduler_races() {
    use SchedOp as S;
    let schedule = |queue, id, at| S::Schedule { queue, id, at };
    let now = At::Ahead { ticks: 0, sub: 0 };
    let soon = At::Ahead { ticks: 2, sub: 1 };
    // The MTA race: a drain while the dispatcher holds popped timers; cancel and schedule of
    // in-flight ids; re-schedule once delivered; the rest of the batch dropped untaken.
    #[rustfmt::skip]
    let ops = vec![
        schedule(0, 1, now), schedule(0, 2, now), schedule(0, 3, soon), schedule(1, 4, now), // the timers
        S::PopDue { now, limit: 2 },
        S::Drain(0),
        S::Cancel(1),
        schedule(1, 1, now),
        S::Take { batch: 0, n: 1 },
        S::Finish { due: 0, consume: true },
        schedule(1, 1, now),
        S::DropBatch(0),
        S::PopDue { now: soon, limit: u8::MAX },
        S::Take { batch: 0, n: 4 },
        S::Finish { due: 1, consume: false },
        S::Drain(1),
        S::Finish { due: 0, consume: false },
    ];
    sched_seed("drain_in_flight", 1, 0, ops);
    // A half-taken batch dropped: its untaken timers go back in their place, merge with new
    // ones of the same tick across shards, and can be rescheduled.
    #[rustfmt::skip]
    let ops = vec![
        schedule(0, 5, soon), schedule(1, 6, soon), schedule(2, 7, soon), schedule(3, 8, now), // the timers
        S::PopDue { now: soon, limit: u8::MAX },
        S::Take { batch: 0, n: 1 },
        S::DropBatch(0),
        schedule(0, 9, soon),
        S::Reschedule { id: 6, at: now },
        S::PopDue { now: soon, limit: 1 },
        S::PopDue { now: soon, limit: 3 },
        S::Take { batch: 1, n: 3 },
        S::Take { batch: 0, n: 1 },
        S::Finish { due: 2, consume: true },
        S::DropBatch(1),
        S::Cancel(7),
    ];
    sched_seed("half_taken", 3, 2, ops);
    // Clock edges: deadlines before the origin and far away, a poll before the origin, time
    // going backwards, a deadline just inside a tick.
    sched_seed(
        "clock_edges",
        1,
        2,
        vec![
            schedule(0, 1, At::BeforeOrigin { ns: 5 }),
            schedule(0, 2, At::Far { shift: 63 }),
            schedule(0, 3, At::Ahead { ticks: 1, sub: 1 }),
            S::PopDue {
                now: At::BeforeOrigin { ns: 1 },
                limit: u8::MAX,
            },
            S::PopDue {
                now: At::Ahead { ticks: 1, sub: 1 },
                limit: u8::MAX,
            },
            S::PopDue {
                now: At::Behind { ticks: 1 },
                limit: u8::MAX,
            },
            S::Take { batch: 1, n: 2 },
            S::Reschedule {
                id: 2,
                at: At::Ahead {
                    ticks: 5000,
                    sub: 0,
                },
            },
            S::PopDue {
                now: At::Far { shift: 40 },
                limit: u8::MAX,
            },
            S::Take { batch: 3, n: 2 },
        ],
    );
}

fn dq_seed(name: &str, ops: Vec<DqOp>) {
    let bytes = encode::delay_queue_input(&ops);
    seed::<DelayQueueInput, _>("tokio_delay_queue", name, &bytes, &ops, |input| &input.ops);
}

fn tokio_delay_queue() {
    use DqOp as D;
    let ms = |level, ms| Dur {
        level,
        ms,
        nanos: 0,
    };
    // tokio-util's lost-wakeup cases: insert earlier, reset earlier and to the past, removal
    // of the last entry, clear, insert after Ready(None); a second task polling in between.
    dq_seed(
        "lost_wakeups",
        vec![
            D::Insert(ms(3, 0)),
            D::Poll { task: false },
            D::Insert(ms(2, 10)),
            D::Poll { task: true },
            D::Reset(0, ms(1, 3)),
            D::Poll { task: true },
            D::Reset(1, ms(0, 0)),
            D::Advance(ms(1, 5)),
            D::Drain { task: false },
            D::Remove(0),
            D::Poll { task: false },
            D::Insert(ms(2, 1)),
            D::Poll { task: false },
            D::Clear,
            D::Poll { task: true },
            D::Insert(ms(1, 1)),
            D::Advance(ms(1, 1)),
            D::Peek,
            D::Poll { task: true },
        ],
    );
    // Stale keys after expiry and removal, with the slot reused.
    dq_seed(
        "stale_keys",
        vec![
            D::Insert(ms(1, 1)),
            D::Remove(0),
            D::Insert(ms(1, 2)),
            D::Remove(0),
            D::Reset(0, ms(1, 4)),
            D::ResetAt(0, DqAt::Ahead(ms(1, 4))),
            D::Advance(ms(1, 10)),
            D::Drain { task: false },
            D::Insert(ms(0, 0)),
            D::Remove(1),
            D::Compact,
            D::Peek,
            D::Poll { task: false },
        ],
    );
    // The whole range: before the origin, sub-millisecond rounding, far, never.
    dq_seed(
        "far_and_past",
        vec![
            D::InsertAt(DqAt::BeforeOrigin { ms: 5 }),
            D::InsertAt(DqAt::Far { shift: 63 }),
            D::Insert(Dur {
                level: 7,
                ms: 0,
                nanos: 0,
            }),
            D::Insert(ms(6, 12345)),
            D::Insert(Dur {
                level: 1,
                ms: 0,
                nanos: 1,
            }),
            D::Advance(Dur {
                level: 1,
                ms: 0,
                nanos: 999_999,
            }),
            D::Peek,
            D::Poll { task: false },
            D::Advance(Dur {
                level: 0,
                ms: 0,
                nanos: 1,
            }),
            D::Drain { task: false },
            D::ResetAt(3, DqAt::Behind(ms(2, 0))),
            D::Drain { task: true },
            D::ShrinkToFit,
        ],
    );
}

fn main() {
    wheel_ops();
    indexed_ops();
    scheduler_races();
    tokio_delay_queue();
}
