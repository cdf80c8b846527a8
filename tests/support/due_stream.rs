//! Code shared by the `Scheduler::due_stream` integration tests
//! (`tokio_due_stream.rs`, `tokio_due_stream_drains.rs`), all under tokio's paused clock.

use std::collections::HashMap;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use futures_util::StreamExt;
use tickwheel::sync::{Drained, Due, Scheduler};
use tickwheel::tokio::DueStream;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{self, Duration, Instant};

/// Queue, id, value (the values are unused: ids say everything).
pub type Sched = Scheduler<u32, u64, u64>;
pub type Stream = DueStream<u32, u64, u64>;

pub const HOUR: Duration = Duration::from_secs(3600);

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A scheduler whose tick 0 is tokio's (paused) now, 1 ms ticks; and that now.
pub fn scheduler(shards: usize) -> (Arc<Sched>, Instant) {
    let t0 = Instant::now();
    let sched = Scheduler::builder()
        .shards(shards)
        .origin(t0.into_std())
        .build();
    (Arc::new(sched), t0)
}

pub fn schedule(sched: &Sched, queue: u32, id: u64, at: Instant) {
    sched
        .schedule(queue, id, at.into_std(), id)
        .unwrap_or_else(|e| panic!("schedule id {id}: {e:?}"));
}

/// One item as the stream yielded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Out {
    pub id: u64,
    pub queue: u32,
    pub deadline: Instant,
    /// tokio's now when it was yielded.
    pub at: Instant,
}

/// Records an item just yielded, checking that it is not early.
pub fn record(due: &Due<u32, u64, u64>) -> Out {
    let at = Instant::now();
    let deadline = Instant::from_std(due.deadline());
    assert!(
        deadline <= at,
        "id {} yielded {:?} before its deadline",
        due.id(),
        deadline - at
    );
    Out {
        id: *due.id(),
        queue: *due.queue(),
        deadline,
        at,
    }
}

/// The next item (its `Due` dropped: delivered), checked not early.
pub async fn next_out(stream: &mut Stream) -> Out {
    let due = stream.next().await.expect("a due stream never ends");
    record(&due)
}

/// A dispatcher task: sends every item it yields, until the stream (or the task) is stopped.
/// With `yield_between`, it lets other tasks run between items, so they see its batch in
/// flight.
pub fn spawn_dispatcher<S>(
    mut stream: S,
    yield_between: bool,
) -> (JoinHandle<()>, mpsc::UnboundedReceiver<Out>)
where
    S: futures_util::Stream<Item = Due<u32, u64, u64>> + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        while let Some(due) = stream.next().await {
            let _ = tx.send(record(&due));
            drop(due);
            if yield_between {
                tokio::task::yield_now().await;
            }
        }
    });
    (task, rx)
}

/// Lets every woken task run; the paused clock does not move meanwhile.
pub async fn settle() {
    for _ in 0..8 {
        tokio::task::yield_now().await;
    }
}

/// Polls once with a waker that does nothing.
pub fn poll_once(stream: &mut Stream) -> Poll<Option<Due<u32, u64, u64>>> {
    stream.poll_next_unpin(&mut Context::from_waker(Waker::noop()))
}

pub fn ids(outs: &[Out]) -> Vec<u64> {
    outs.iter().map(|o| o.id).collect()
}

pub fn cancelled_ids(d: &Drained<u64, u64>) -> Vec<u64> {
    d.cancelled.iter().map(|&(id, _)| id).collect()
}

/// Per id: how many times it was scheduled, minus how many times it ended (delivered or
/// returned by a drain). All zero means every timer ended exactly once.
#[derive(Default)]
pub struct Ledger(HashMap<u64, i64>);

impl Ledger {
    pub fn scheduled(&mut self, id: u64) {
        *self.0.entry(id).or_default() += 1;
    }

    pub fn ended(&mut self, id: u64) {
        *self.0.entry(id).or_default() -= 1;
    }

    /// Counts the ids in `again` scheduled once more, those in `drained` and `delivered`
    /// ended, then [`assert_balanced`](Self::assert_balanced).
    pub fn assert_balanced_with(&mut self, again: &[u64], drained: Vec<u64>, delivered: &[Out]) {
        for &id in again {
            self.scheduled(id);
        }
        for id in drained.into_iter().chain(ids(delivered)) {
            self.ended(id);
        }
        self.assert_balanced();
    }

    pub fn assert_balanced(&self) {
        let mut off: Vec<(u64, i64)> = self
            .0
            .iter()
            .filter(|&(_, &n)| n != 0)
            .map(|(&id, &n)| (id, n))
            .collect();
        off.sort_unstable();
        assert!(
            off.is_empty(),
            "(id, schedules - ends) not ending exactly once: {off:?}"
        );
    }
}

/// A scheduler of `shards` shards with ticks of `resolution` from `origin`.
pub fn scheduler_with(shards: usize, resolution: Duration, origin: Instant) -> Arc<Sched> {
    let sched = Scheduler::builder()
        .shards(shards)
        .resolution(resolution)
        .origin(origin.into_std())
        .build();
    Arc::new(sched)
}

/// A [`scheduler`] of `shards` shards holding ids `0..n` in `queues` queues, due over
/// `spread_ms` after its origin `t0`: it, `t0`, and a ledger with those ids scheduled.
pub fn filled(shards: usize, n: u64, queues: u64, spread_ms: u64) -> (Arc<Sched>, Instant, Ledger) {
    let (sched, t0) = scheduler(shards);
    let mut ledger = Ledger::default();
    for id in 0..n {
        let queue = ((id * 31) % queues) as u32;
        schedule(&sched, queue, id, t0 + ms((id * 7_919) % spread_ms));
        ledger.scheduled(id);
    }
    (sched, t0, ledger)
}

/// Stops a dispatcher made by `stoppable` once nothing is pending or in flight; returns
/// everything it yielded.
pub async fn stop_when_empty(
    sched: &Sched,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
    mut rx: mpsc::UnboundedReceiver<Out>,
) -> Vec<Out> {
    let give_up = Instant::now() + HOUR; // of paused time: a stuck test fails, fast
    while sched.len() + sched.in_flight_len() > 0 {
        if task.is_finished() {
            task.await.unwrap(); // the dispatcher panicked: report why
            panic!("the dispatcher stopped early");
        }
        assert!(
            Instant::now() < give_up,
            "stuck: {} pending, {} in flight",
            sched.len(),
            sched.in_flight_len()
        );
        time::sleep(ms(1)).await;
    }
    stop.send(()).unwrap();
    task.await.unwrap();
    let mut out = Vec::new();
    while let Ok(o) = rx.try_recv() {
        out.push(o);
    }
    out
}

/// A dispatcher that yields between items and ends when told to (`take_until`).
pub fn stoppable(
    stream: Stream,
) -> (
    oneshot::Sender<()>,
    JoinHandle<()>,
    mpsc::UnboundedReceiver<Out>,
) {
    let (stop, stopped) = oneshot::channel::<()>();
    let (task, rx) = spawn_dispatcher(stream.take_until(stopped), true);
    (stop, task, rx)
}
