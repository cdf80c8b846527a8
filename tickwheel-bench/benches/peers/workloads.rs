//! The workloads, their timed region and what they report.

use std::time::{Duration, Instant};

use super::cpu_time::thread_cpu_ns;
use super::input::{Input, OP_CANCEL, OP_INSERT, OP_TAG};
use super::{IDLE_POLLS, Peer, RESETS, ROUND_TICKS, SPAN};

/// The benchmark workloads (7, the scheduler, and 8, memory, live in `examples/compare/`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// 1: insert `n` timers.
    Insert,
    /// 2: cancel half of them, in random order.
    Cancel,
    /// 3: expire the other half with one poll far ahead.
    ExpireOnce,
    /// 4: expire the other half by polling every tick (idle polls count).
    ExpireTicks,
    /// 5: insert `n` idle timeouts, push each later `RESETS` times (polling every tick), then
    /// cancel half and expire the rest.
    ResetHeavy,
    /// 6: steady churn, 99 % cancelled before they fire, polling every tick.
    Churn,
    /// An idle poll: nothing due, `n` timers pending far ahead.
    IdlePoll,
}

impl Workload {
    pub const ALL: [Workload; 7] = [
        Workload::Insert,
        Workload::Cancel,
        Workload::ExpireOnce,
        Workload::ExpireTicks,
        Workload::ResetHeavy,
        Workload::Churn,
        Workload::IdlePoll,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Workload::Insert => "1 insert",
            Workload::Cancel => "2 cancel half",
            Workload::ExpireOnce => "3 expire, one poll",
            Workload::ExpireTicks => "4 expire, every tick",
            Workload::ResetHeavy => "5 reset-heavy",
            Workload::Churn => "6 churn 99% cancel",
            Workload::IdlePoll => "idle poll",
        }
    }

    /// What one operation is, for the table's footnote.
    pub fn unit(self) -> &'static str {
        match self {
            Workload::Insert => "per insert",
            Workload::Cancel => "per cancel",
            Workload::ExpireOnce | Workload::ExpireTicks => {
                "per timer expired (idle polls included)"
            }
            Workload::ResetHeavy => "per op (insert, reset, cancel or expiry)",
            Workload::Churn => "per op (insert, cancel or expiry; polls included)",
            Workload::IdlePoll => "per poll",
        }
    }

    pub fn short(self) -> &'static str {
        match self {
            Workload::Insert => "insert",
            Workload::Cancel => "cancel",
            Workload::ExpireOnce => "expire_once",
            Workload::ExpireTicks => "expire_ticks",
            Workload::ResetHeavy => "reset_heavy",
            Workload::Churn => "churn",
            Workload::IdlePoll => "idle_poll",
        }
    }
}

impl Workload {
    /// The operations a complete run (no budget) counts, known without running it.
    pub fn ops(self, input: &Input) -> u64 {
        let n = input.n as u64;
        match self {
            Workload::Insert => n,
            Workload::Cancel => input.cancelled().len() as u64,
            Workload::ExpireOnce | Workload::ExpireTicks => n - input.cancelled().len() as u64,
            Workload::ResetHeavy => n * (RESETS as u64 + 2),
            Workload::Churn => input.churn().counted_ops,
            Workload::IdlePoll => IDLE_POLLS,
        }
    }
}

/// What fired and what was cancelled: compared across peers (and against the script) so a
/// peer that fires early, late or twice is caught instead of measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub fired: u64,
    /// Sum over fired timers of lane × (tick of the poll that returned it), wrapping.
    pub checksum: u64,
    pub cancelled: u64,
}

impl Tally {
    #[inline]
    pub(super) fn fire(&mut self, lane: u64, tick: u64) {
        self.fired += 1;
        self.checksum = self
            .checksum
            .wrapping_add(lane.wrapping_mul(tick).wrapping_add(lane));
    }
}

/// The result of one run of one workload on one peer.
#[derive(Clone, Copy, Debug)]
pub struct Outcome {
    /// Time of the timed region, with the clock overhead subtracted (tokio peers).
    pub nanos: f64,
    /// Time of the timed region as measured, overhead included.
    pub timed_ns: u64,
    /// Operations done in the timed region.
    pub ops: u64,
    pub tally: Tally,
    pub expected: Tally,
    /// The run stopped at its time budget: `nanos / ops` is an estimate from a prefix.
    pub partial: bool,
}

impl Outcome {
    pub fn ns_per_op(&self) -> f64 {
        self.nanos / self.ops.max(1) as f64
    }
}

/// The timed region of a workload, with a time budget.
pub(super) struct Clock {
    /// Wall clock (for the budget) and thread CPU time (for the figure) at `start`.
    started: Option<(Instant, u64)>,
    /// Thread CPU time spent in the timed region, in ns.
    spent: u64,
    budget: Duration,
    polls: u64,
    partial: bool,
}

impl Clock {
    pub(super) fn new(budget: Duration) -> Self {
        Clock {
            started: None,
            spent: 0,
            budget,
            polls: 0,
            partial: false,
        }
    }
    fn start(&mut self) {
        self.started = Some((Instant::now(), thread_cpu_ns()));
    }
    fn stop(&mut self) {
        if let Some((_, cpu)) = self.started.take() {
            self.spent += thread_cpu_ns() - cpu;
        }
    }
    /// True when the budget (of CPU time, checked on the wall clock for cheapness: wall
    /// time is never less) is used up; marks the outcome partial.
    fn over(&mut self) -> bool {
        let running = self.started.map_or(Duration::ZERO, |(t, _)| t.elapsed());
        if Duration::from_nanos(self.spent) + running > self.budget {
            self.partial = true;
        }
        self.partial
    }
    fn outcome<P: Peer>(self, ops: u64, tally: Tally, expected: Tally) -> Outcome {
        let raw = self.spent as f64;
        let overhead = P::poll_overhead_ns() * self.polls as f64;
        Outcome {
            nanos: (raw - overhead).max(raw * 0.01),
            timed_ns: self.spent,
            ops,
            tally,
            expected,
            partial: self.partial,
        }
    }
}

/// Polls `peer` at `now` and hands fired keys back to it.
#[inline]
pub(super) fn poll_at<P: Peer>(
    peer: &mut P,
    now: u64,
    keys: &mut [Option<P::Key>],
    fired: &mut Vec<u64>,
    tally: &mut Tally,
    clock: &mut Clock,
) {
    clock.polls += 1;
    collect(peer, now, keys, fired, tally);
}

/// The buffer a workload's polls fill with fired lanes: room for `n`, its pages written
/// now, before the timed region. First-touch faults and reallocations of the harness's own
/// output are no peer's cost (one poll at 1 M timers fills 4 MB of it).
fn fired_buffer(n: usize) -> Vec<u64> {
    let mut fired = Vec::with_capacity(n);
    fired.resize(n, u64::MAX);
    fired.clear();
    fired
}

/// The harness's store of the keys that timed inserts return, one per lane, all `None`: its
/// pages are written now, before the timed region, as [`fired_buffer`]'s are. At 1 M timers
/// it is 8 to 24 MB (by the peer's key), whose first-touch faults would otherwise be charged
/// to every peer alike and hide how far apart their inserts are.
fn key_buffer<P: Peer>(n: usize) -> Vec<Option<P::Key>> {
    (0..n).map(|_| None).collect()
}

/// The poll itself: what fired goes into `tally`, and fired keys back to the peer. Called
/// by [`poll_at`] in a timed region, and directly for a check outside any.
#[inline]
fn collect<P: Peer>(
    peer: &mut P,
    now: u64,
    keys: &mut [Option<P::Key>],
    fired: &mut Vec<u64>,
    tally: &mut Tally,
) {
    peer.poll(now, fired);
    for &lane in fired.iter() {
        tally.fire(lane, now);
        if P::RELEASE {
            if let Some(key) = keys[lane as usize].take() {
                peer.release(key);
            }
        }
    }
    fired.clear();
}

/// Runs one workload on one peer and returns what it measured.
pub fn run<P: Peer>(workload: Workload, input: &Input, budget: Duration) -> Outcome {
    // Calibrate the clock overhead now: it needs a runtime of its own, outside this one.
    let _ = P::poll_overhead_ns();
    P::with_context(|| match workload {
        Workload::Insert => insert::<P>(input, budget),
        Workload::Cancel => cancel::<P>(input, budget),
        Workload::ExpireOnce => expire::<P>(input, budget, false),
        Workload::ExpireTicks => expire::<P>(input, budget, true),
        Workload::ResetHeavy => reset_heavy::<P>(input, budget),
        Workload::Churn => churn::<P>(input, budget),
        Workload::IdlePoll => idle_poll::<P>(input, budget),
    })
}

fn fill<P: Peer>(peer: &mut P, input: &Input) -> Vec<Option<P::Key>> {
    let deadlines: Vec<P::Deadline> = input.deadlines.iter().map(|&d| peer.deadline(d)).collect();
    deadlines
        .into_iter()
        .enumerate()
        .map(|(lane, d)| Some(peer.insert(d, lane as u64)))
        .collect()
}

/// Takes the keys of `lanes` out of `keys`, in that order (outside the timed region, so the
/// timed loop walks them sequentially while the peer sees a random order).
fn take_keys<K>(keys: &mut [Option<K>], lanes: &[u32]) -> Vec<K> {
    lanes
        .iter()
        .map(|&l| keys[l as usize].take().expect("pending key"))
        .collect()
}

fn insert<P: Peer>(input: &Input, budget: Duration) -> Outcome {
    let mut peer = P::new(input.n, input.n);
    let deadlines: Vec<P::Deadline> = input.deadlines.iter().map(|&d| peer.deadline(d)).collect();
    let mut keys = key_buffer::<P>(input.n);
    let mut clock = Clock::new(budget);
    clock.start();
    for (lane, &d) in deadlines.iter().enumerate() {
        keys[lane] = Some(peer.insert(d, lane as u64));
    }
    clock.stop();
    // The check, untimed: every timer inserted is pending with its lane, so one poll past
    // the last deadline fires each lane once.
    let (mut tally, mut expected) = (Tally::default(), Tally::default());
    for lane in 0..input.n as u64 {
        expected.fire(lane, SPAN + 1);
    }
    let mut fired = Vec::with_capacity(input.n);
    collect(&mut peer, SPAN + 1, &mut keys, &mut fired, &mut tally);
    clock.outcome::<P>(input.n as u64, tally, expected)
}

fn cancel<P: Peer>(input: &Input, budget: Duration) -> Outcome {
    let mut peer = P::new(input.n, input.n);
    let mut keys = fill(&mut peer, input);
    let victims = take_keys(&mut keys, input.cancelled());
    let mut tally = Tally::default();
    let mut clock = Clock::new(budget);
    clock.start();
    for key in victims {
        tally.cancelled += peer.cancel(key) as u64;
    }
    clock.stop();
    let expected = Tally {
        cancelled: input.cancelled().len() as u64,
        ..Tally::default()
    };
    clock.outcome::<P>(input.cancelled().len() as u64, tally, expected)
}

fn expire<P: Peer>(input: &Input, budget: Duration, every_tick: bool) -> Outcome {
    let mut peer = P::new(input.n, input.n);
    let mut keys = fill(&mut peer, input);
    for key in take_keys(&mut keys, input.cancelled()) {
        peer.cancel(key);
    }
    let mut fired = fired_buffer(input.n);
    let mut tally = Tally::default();
    let mut clock = Clock::new(budget);
    // The last tick polled: a run stopped at its budget is checked up to there.
    let mut last = SPAN + 1;
    clock.start();
    if every_tick {
        for now in 1..=SPAN {
            poll_at(
                &mut peer, now, &mut keys, &mut fired, &mut tally, &mut clock,
            );
            last = now;
            if now % 256 == 0 && clock.over() {
                break;
            }
        }
    } else {
        poll_at(
            &mut peer,
            SPAN + 1,
            &mut keys,
            &mut fired,
            &mut tally,
            &mut clock,
        );
    }
    clock.stop();
    let survivors = input.survivors();
    let mut expected = Tally::default();
    for (lane, &d) in input.deadlines.iter().enumerate() {
        if survivors[lane] && d <= last {
            expected.fire(lane as u64, if every_tick { d } else { SPAN + 1 });
        }
    }
    let ops = if clock.partial {
        tally.fired.max(1)
    } else {
        expected.fired
    };
    clock.outcome::<P>(ops, tally, expected)
}

fn reset_heavy<P: Peer>(input: &Input, budget: Duration) -> Outcome {
    let n = input.n;
    let mut peer = P::new(n, n);
    let mut fired = fired_buffer(n);
    let mut tally = Tally::default();
    let mut clock = Clock::new(budget);
    let mut ops = 0u64;

    let first: Vec<P::Deadline> = input.idle.iter().map(|&d| peer.deadline(d)).collect();
    let mut keys = key_buffer::<P>(n);
    clock.start();
    for (lane, &d) in first.iter().enumerate() {
        keys[lane] = Some(peer.insert(d, lane as u64));
    }
    clock.stop();
    ops += n as u64;

    // Each round the keys are put in a new random order (outside the timed region), so the
    // peer sees random access while the timed loop walks `round` sequentially.
    let mut lanes: Vec<u32> = (0..n as u32).collect();
    let mut now = 0u64;
    let mut rounds = 0;
    for _ in 0..RESETS {
        let order: Vec<u32> = input.order.iter().map(|&i| lanes[i as usize]).collect();
        lanes = order;
        let round: Vec<P::Key> = take_keys(&mut keys, &lanes);
        let target = now + ROUND_TICKS;
        let deadlines: Vec<P::Deadline> = lanes
            .iter()
            .map(|&l| peer.deadline(target + input.idle[l as usize]))
            .collect();
        clock.start();
        while now < target {
            now += 1;
            poll_at(
                &mut peer, now, &mut keys, &mut fired, &mut tally, &mut clock,
            );
        }
        for ((key, &d), &lane) in round.into_iter().zip(&deadlines).zip(&lanes) {
            keys[lane as usize] = Some(peer.reset(key, d));
        }
        clock.stop();
        ops += n as u64;
        rounds += 1;
        if clock.over() {
            break;
        }
    }

    // Every reset pushes a timer at least `ROUND_TICKS + 1` past the round's end, so nothing
    // fires during the rounds: a run stopped after any round is checked against "nothing".
    let mut expected = Tally::default();
    if rounds == RESETS {
        // Cancel half, then expire the rest with one poll far ahead.
        let victims = take_keys(&mut keys, input.cancelled());
        let far = now + SPAN + 1;
        let alive = input.survivors();
        for lane in (0..n).filter(|&l| alive[l]) {
            expected.fire(lane as u64, far);
        }
        expected.cancelled = victims.len() as u64;
        clock.start();
        for key in victims {
            tally.cancelled += peer.cancel(key) as u64;
        }
        poll_at(
            &mut peer, far, &mut keys, &mut fired, &mut tally, &mut clock,
        );
        clock.stop();
        ops += n as u64;
    }
    clock.outcome::<P>(ops, tally, expected)
}

fn churn<P: Peer>(input: &Input, budget: Duration) -> Outcome {
    let script = input.churn();
    let n = input.n;
    let mut peer = P::new(n, n);
    let deadlines: Vec<P::Deadline> = script.deadlines.iter().map(|&d| peer.deadline(d)).collect();
    let mut keys: Vec<Option<P::Key>> = Vec::with_capacity(n);
    for (lane, &d) in deadlines[..n].iter().enumerate() {
        keys.push(Some(peer.insert(d, lane as u64)));
    }
    let mut next_deadline = n;
    let mut fired = fired_buffer(n);
    let mut tally = Tally::default();
    let mut clock = Clock::new(budget);
    let mut inserts = 0u64;
    // Ops done and the last tick polled: a run stopped at its budget is checked up to there.
    let (mut done, mut last) = (0, 0);
    clock.start();
    for &op in &script.ops {
        done += 1;
        let arg = op & !OP_TAG;
        match op & OP_TAG {
            OP_INSERT => {
                keys[arg as usize] = Some(peer.insert(deadlines[next_deadline], arg));
                next_deadline += 1;
                inserts += 1;
            }
            OP_CANCEL => {
                let key = keys[arg as usize].take().expect("pending key");
                tally.cancelled += peer.cancel(key) as u64;
            }
            _ => {
                poll_at(
                    &mut peer, arg, &mut keys, &mut fired, &mut tally, &mut clock,
                );
                last = arg;
                if arg % 256 == 0 && clock.over() {
                    break;
                }
            }
        }
    }
    clock.stop();
    let (ops, expected) = if clock.partial {
        let ops = inserts + tally.cancelled + tally.fired;
        (ops, script.expected_until(done, last))
    } else {
        (script.counted_ops, script.expected)
    };
    clock.outcome::<P>(ops, tally, expected)
}

fn idle_poll<P: Peer>(input: &Input, budget: Duration) -> Outcome {
    let mut peer = P::new(input.n, input.n);
    // Deadlines in the second minute: nothing is due during the measured polls.
    let deadlines: Vec<P::Deadline> = input
        .deadlines
        .iter()
        .map(|&d| peer.deadline(SPAN + d))
        .collect();
    let mut keys: Vec<Option<P::Key>> = deadlines
        .into_iter()
        .enumerate()
        .map(|(lane, d)| Some(peer.insert(d, lane as u64)))
        .collect();
    let mut fired = Vec::new();
    let mut tally = Tally::default();
    let mut clock = Clock::new(budget);
    let mut polls = 0;
    clock.start();
    for now in 1..=IDLE_POLLS {
        poll_at(
            &mut peer, now, &mut keys, &mut fired, &mut tally, &mut clock,
        );
        polls += 1;
        if now % 256 == 0 && clock.over() {
            break;
        }
    }
    clock.stop();
    clock.outcome::<P>(polls, tally, Tally::default())
}

pub fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        samples[n / 2]
    } else {
        (samples[n / 2 - 1] + samples[n / 2]) / 2.0
    }
}
