//! [`tickwheel::tokio::DelayQueue`] under tokio's paused clock, single-threaded, against the
//! reference model of `model.rs` (keyed by `Key`, in milliseconds since the queue's origin)
//! plus a model of the waiting task.
//!
//! Checked at every step: what `poll_expired` yields (never early, deadline order, equal
//! deadlines in insertion order for entries never reset, `Ready(None)` iff empty, `Pending`
//! iff nothing is due) with each `Expired`'s value, deadline and key; `remove`/`try_remove`,
//! `reset*`/`try_reset*` and `deadline`/`try_deadline`/`contains` on live and stale keys
//! (the panicking forms only where the model says the key is live); `peek` names an entry
//! with the earliest deadline, and the entry the next poll yields if nothing changed in
//! between; `len`, `is_empty`, `capacity`.
//!
//! **No lost wakeups.** Two counting wakers stand for two tasks. When a poll answers
//! `Pending` or `Ready(None)`, the task that polled waits. After every later step, if the
//! model's answer for it changed (something became due, or the queue became empty, or
//! non-empty after `Ready(None)`), that task must have been woken — by the change itself or
//! by the queue's sleep firing during `tokio::time::advance`. Spurious wakeups are allowed.
//!
//! A sibling of `model.rs`, used by `tests/delay_queue_model.rs`, and included with `#[path]`
//! by the fuzz crate (`tokio_delay_queue`).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use tickwheel::tokio::{DelayQueue, Expired, Key};
use tokio::time::{Duration, Instant};

use super::model::{Model, OrderRule, pow64};

/// A duration: `level` picks a range of whole milliseconds level-uniformly
/// (`[64^(level-1), 64^level)`, level 0 = zero), plus `nanos` below a millisecond;
/// `level >= 7` is `Duration::MAX` ("never").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dur {
    pub level: u8,
    pub ms: u64,
    pub nanos: u32,
}

/// An instant for `insert_at`/`reset_at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DqAt {
    Ahead(Dur),
    Behind(Dur),
    /// The queue's origin minus `ms` milliseconds (before the queue existed).
    BeforeOrigin {
        ms: u16,
    },
    /// `2^shift` milliseconds past the origin: far, up to the end of `Instant`'s range.
    Far {
        shift: u8,
    },
}

/// One step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DqOp {
    Insert(Dur),
    InsertAt(DqAt),
    /// `remove` when the model says the key is live, else `try_remove` (must be `None`).
    Remove(u16),
    Reset(u16, Dur),
    ResetAt(u16, DqAt),
    /// `tokio::time::advance` (capped at about 2.2 years), which also fires due sleeps.
    Advance(Dur),
    /// One `poll_expired`, by task `task` (0 or 1).
    Poll {
        task: bool,
    },
    /// `poll_expired` until it is not `Ready(Some)`.
    Drain {
        task: bool,
    },
    Peek,
    Clear,
    Compact,
    ShrinkToFit,
}

/// The answer `poll_expired` gives a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Due,
    Pending,
    Empty,
}

struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// The longest single `advance`: tokio's own timer wheel spans about 2.2 years.
const MAX_ADVANCE: Duration = Duration::from_millis(1 << 36);

/// Runs one sequence; panics on the first difference.
pub struct DqHarness {
    queue: DelayQueue<u64>,
    origin: Instant,
    model: Model<Key>,
    issued: Vec<Key>,
    counts: [Arc<Count>; 2],
    wakers: [Waker; 2],
    /// The task that waits, what it was told, and its wake count then.
    waiting: Option<(usize, Answer, usize)>,
    /// The last `peek` answer, valid until the queue changes.
    peeked: Option<Key>,
    next_value: u64,
    step: usize,
    op: Option<DqOp>,
}

impl fmt::Debug for DqHarness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "step {} op {:?} at tick {}: model len {} earliest {:?}; queue len {}; waiting {:?}",
            self.step,
            self.op,
            self.now_tick(),
            self.model.len(),
            self.model.earliest(),
            self.queue.len(),
            self.waiting
        )
    }
}

/// Where a reset moves a timer: a timeout from now (`reset`) or an instant (`reset_at`).
#[derive(Clone, Copy)]
enum ResetTo {
    In(Duration),
    At(Instant),
}

macro_rules! ensure {
    ($h:expr, $cond:expr, $($fmt:tt)+) => {
        if !$cond {
            panic!("{:?}: {}", $h, format!($($fmt)+));
        }
    };
}

impl Dur {
    pub fn duration(self) -> Duration {
        if self.level >= 7 {
            return Duration::MAX;
        }
        let ms = if self.level == 0 {
            0
        } else {
            let lo = pow64(u32::from(self.level) - 1);
            lo + self.ms % (pow64(u32::from(self.level)) - lo)
        };
        Duration::from_millis(ms) + Duration::from_nanos(u64::from(self.nanos % 1_000_000))
    }
}

/// Whole milliseconds in `d`, rounded up, saturating (the documented deadline rounding).
fn ms_up(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

impl Default for DqHarness {
    fn default() -> Self {
        Self::new()
    }
}

impl DqHarness {
    /// Must be called inside a current-thread runtime with a paused clock.
    pub fn new() -> Self {
        let counts = [
            Arc::new(Count(AtomicUsize::new(0))),
            Arc::new(Count(AtomicUsize::new(0))),
        ];
        let wakers = [
            Waker::from(counts[0].clone()),
            Waker::from(counts[1].clone()),
        ];
        DqHarness {
            queue: DelayQueue::new(),
            origin: Instant::now(),
            model: Model::new(0),
            issued: Vec::new(),
            counts,
            wakers,
            waiting: None,
            peeked: None,
            next_value: 0,
            step: 0,
            op: None,
        }
    }

    /// Runs `ops` on a fresh current-thread runtime with a paused clock.
    pub fn run(ops: &[DqOp]) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("runtime");
        rt.block_on(async {
            let mut h = DqHarness::new();
            h.check();
            for &op in ops {
                h.apply(op).await;
                h.check();
            }
            h.finish().await;
        });
    }

    fn now_tick(&self) -> u64 {
        let d = Instant::now().saturating_duration_since(self.origin);
        u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
    }

    /// The deadline tick of an instant: milliseconds after the origin, rounded up.
    fn tick_of(&self, at: Instant) -> u64 {
        ms_up(at.saturating_duration_since(self.origin))
    }

    /// The deadline tick of a timeout from now; `u64::MAX` past `Instant`'s range.
    fn timeout_tick(&self, timeout: Duration) -> u64 {
        Instant::now()
            .checked_add(timeout)
            .map_or(u64::MAX, |at| self.tick_of(at))
    }

    fn instant(&self, at: DqAt) -> Instant {
        let now = Instant::now();
        let far = |ms: u64| {
            let mut ms = ms;
            loop {
                if let Some(at) = self.origin.checked_add(Duration::from_millis(ms)) {
                    return at;
                }
                ms /= 2;
            }
        };
        match at {
            DqAt::Ahead(d) => now
                .checked_add(d.duration())
                .unwrap_or_else(|| far(u64::MAX)),
            DqAt::Behind(d) => now.checked_sub(d.duration()).unwrap_or(self.origin),
            DqAt::BeforeOrigin { ms } => self
                .origin
                .checked_sub(Duration::from_millis(u64::from(ms)))
                .unwrap_or(self.origin),
            DqAt::Far { shift } => far(1u64 << (shift % 64)),
        }
    }

    fn key(&self, pick: u16) -> Option<Key> {
        (!self.issued.is_empty()).then(|| self.issued[usize::from(pick) % self.issued.len()])
    }

    /// What the model says `poll_expired` answers now.
    fn answer(&self) -> Answer {
        match self.model.earliest() {
            None => Answer::Empty,
            Some((deadline, _)) if deadline <= self.now_tick() => Answer::Due,
            Some(_) => Answer::Pending,
        }
    }

    /// The instant the queue reports for a deadline tick, where it is representable.
    fn deadline_instant(&self, tick: u64) -> Option<Instant> {
        self.origin.checked_add(Duration::from_millis(tick))
    }

    fn check_expired(&self, e: &Expired<u64>, what: &str) {
        let Some(timer) = self.model.timers.get(&e.key()) else {
            panic!("{self:?}: {what} gave {e:?}, not live in the model");
        };
        ensure!(
            self,
            *e.get_ref() == timer.value,
            "{what}: value of {e:?}, model {timer:?}"
        );
        if let Some(at) = self.deadline_instant(timer.deadline) {
            ensure!(
                self,
                e.deadline() == at,
                "{what}: deadline of {e:?}, model tick {}",
                timer.deadline
            );
        }
    }

    pub async fn apply(&mut self, op: DqOp) {
        self.step += 1;
        self.op = Some(op);
        match op {
            DqOp::Insert(d) => {
                let timeout = d.duration();
                let tick = self.timeout_tick(timeout);
                self.next_value += 1;
                let key = self.queue.insert(self.next_value, timeout);
                self.inserted(key, tick);
            }
            DqOp::InsertAt(at) => {
                let at = self.instant(at);
                let tick = self.tick_of(at);
                self.next_value += 1;
                let key = self.queue.insert_at(self.next_value, at);
                self.inserted(key, tick);
            }
            DqOp::Remove(pick) => {
                let Some(key) = self.key(pick) else { return };
                if self.model.timers.contains_key(&key) {
                    let e = self.queue.remove(&key);
                    self.check_expired(&e, "remove");
                    ensure!(self, e.key() == key, "remove({key:?}) gave {e:?}");
                    self.model.remove(key);
                    self.peeked = None;
                } else {
                    let got = self.queue.try_remove(&key);
                    ensure!(
                        self,
                        got.is_none(),
                        "try_remove of stale {key:?} gave {got:?}"
                    );
                }
            }
            DqOp::Reset(pick, d) => self.reset_to(pick, ResetTo::In(d.duration())),
            DqOp::ResetAt(pick, at) => self.reset_to(pick, ResetTo::At(self.instant(at))),
            DqOp::Advance(d) => tokio::time::advance(d.duration().min(MAX_ADVANCE)).await,
            DqOp::Poll { task } => {
                self.poll(usize::from(task));
            }
            DqOp::Drain { task } => {
                for _ in 0..=self.model.len() {
                    if !self.poll(usize::from(task)) {
                        return;
                    }
                }
                panic!("{self:?}: poll_expired yielded more entries than are queued");
            }
            DqOp::Peek => self.peek(),
            DqOp::Clear => {
                self.queue.clear();
                self.model.clear();
                self.peeked = None;
            }
            DqOp::Compact => {
                self.queue.compact();
                self.peeked = None;
            }
            DqOp::ShrinkToFit => {
                self.queue.shrink_to_fit();
                self.peeked = None;
            }
        }
    }

    fn inserted(&mut self, key: Key, tick: u64) {
        ensure!(
            self,
            !self.issued.contains(&key),
            "insert returned {key:?}, issued before"
        );
        self.issued.push(key);
        self.model.insert(key, tick, self.next_value, false);
        self.peeked = None;
    }

    fn reset(&mut self, key: Key, tick: u64) {
        let old = self.model.remove(key).expect("live");
        self.model.insert(key, tick, old.value, true);
        self.peeked = None;
    }

    /// A reset of `pick`'s key to `to`: by `reset` or `reset_at` if the model holds the key,
    /// the model following; else by `try_reset` or `try_reset_at`, which must refuse it.
    fn reset_to(&mut self, pick: u16, to: ResetTo) {
        let Some(key) = self.key(pick) else { return };
        let tick = match to {
            ResetTo::In(timeout) => self.timeout_tick(timeout),
            ResetTo::At(at) => self.tick_of(at),
        };
        if self.model.timers.contains_key(&key) {
            match to {
                ResetTo::In(timeout) => self.queue.reset(&key, timeout),
                ResetTo::At(at) => self.queue.reset_at(&key, at),
            }
            self.reset(key, tick);
        } else {
            let (got, name) = match to {
                ResetTo::In(timeout) => (self.queue.try_reset(&key, timeout), "try_reset"),
                ResetTo::At(at) => (self.queue.try_reset_at(&key, at), "try_reset_at"),
            };
            ensure!(self, !got, "{name} of stale {key:?} = true");
        }
    }

    /// One `poll_expired` by `task`; returns whether it yielded an entry.
    fn poll(&mut self, task: usize) -> bool {
        let now = self.now_tick();
        let mut cx = Context::from_waker(&self.wakers[task]);
        let got = self.queue.poll_expired(&mut cx);
        match got {
            Poll::Ready(Some(e)) => {
                self.check_expired(&e, "poll_expired");
                let checked =
                    self.model
                        .check_fired(e.key(), None, *e.get_ref(), now, OrderRule::Documented);
                if let Err(why) = checked {
                    panic!("{self:?}: {why}");
                }
                if let Some(peeked) = self.peeked.take() {
                    ensure!(
                        self,
                        e.key() == peeked,
                        "peek said {peeked:?}, poll yielded {e:?}"
                    );
                }
                self.model.remove(e.key());
                self.waiting = None;
                true
            }
            Poll::Ready(None) => {
                ensure!(
                    self,
                    self.model.is_empty(),
                    "Ready(None) with entries queued"
                );
                self.waiting = Some((task, Answer::Empty, self.wakes(task)));
                false
            }
            Poll::Pending => {
                if let Err(why) = self.model.check_nothing_due(now, "Pending") {
                    panic!("{self:?}: {why}");
                }
                ensure!(self, !self.model.is_empty(), "Pending on an empty queue");
                self.waiting = Some((task, Answer::Pending, self.wakes(task)));
                false
            }
        }
    }

    fn peek(&mut self) {
        let got = self.queue.peek();
        match (got, self.model.earliest()) {
            (None, None) => {}
            (Some(key), Some(_)) => {
                let Some(timer) = self.model.timers.get(&key) else {
                    panic!("{self:?}: peek named {key:?}, not live in the model");
                };
                // Any time: `check_fired` with an effective now of `u64::MAX` checks only
                // the order (earliest deadline, insertion order among never-reset entries).
                let checked =
                    self.model
                        .check_fired(key, None, timer.value, u64::MAX, OrderRule::Documented);
                if let Err(why) = checked {
                    panic!("{self:?}: peek: {why}");
                }
                self.peeked = Some(key);
            }
            (got, model) => panic!("{self:?}: peek {got:?}, model earliest {model:?}"),
        }
    }

    fn wakes(&self, task: usize) -> usize {
        self.counts[task].0.load(Ordering::SeqCst)
    }

    pub fn check(&self) {
        let q = &self.queue;
        let len = self.model.len();
        ensure!(self, q.len() == len, "len");
        ensure!(self, q.is_empty() == (len == 0), "is_empty");
        ensure!(self, q.capacity() >= len, "capacity {} < len", q.capacity());
        for key in self.issued.iter().rev().take(64) {
            let expected = self.model.timers.get(key);
            ensure!(
                self,
                q.contains(key) == expected.is_some(),
                "contains({key:?})"
            );
            let got = q.try_deadline(key);
            ensure!(
                self,
                got.is_some() == expected.is_some(),
                "try_deadline({key:?}) = {got:?}"
            );
            if let Some(timer) = expected {
                let at = self.deadline_instant(timer.deadline);
                ensure!(
                    self,
                    at.is_none_or(|at| got == Some(at)),
                    "try_deadline({key:?})"
                );
                ensure!(
                    self,
                    at.is_none_or(|at| q.deadline(key) == at),
                    "deadline({key:?})"
                );
            }
        }
        if let Some((task, told, wakes)) = self.waiting {
            let now = self.answer();
            ensure!(
                self,
                now == told || self.wakes(task) > wakes,
                "lost wakeup: task {task} was told {told:?}, the answer is now {now:?}, \
                 and it was not woken"
            );
        }
    }

    /// Drains everything: advances the clock to each remaining deadline in turn and polls
    /// (removing entries too far away to reach), then expects `Ready(None)`.
    pub async fn finish(&mut self) {
        self.op = None;
        self.step += 1;
        while let Some((deadline, key)) = self.model.earliest() {
            let reachable = self
                .deadline_instant(deadline)
                .filter(|&at| at.saturating_duration_since(Instant::now()) <= MAX_ADVANCE);
            let Some(at) = reachable else {
                let e = self.queue.remove(&key);
                self.check_expired(&e, "remove");
                ensure!(self, e.key() == key, "remove({key:?}) gave {e:?}");
                self.model.remove(key);
                self.peeked = None;
                continue;
            };
            tokio::time::advance(at.saturating_duration_since(Instant::now())).await;
            self.check();
            let yielded = self.poll(0);
            ensure!(
                self,
                yielded,
                "{key:?} due at tick {deadline} did not come out"
            );
        }
        ensure!(self, !self.poll(0), "an entry came out of an empty queue");
        self.check();
    }
}
