//! `Scheduler::due_stream`, the async dispatcher: deadline order across shards and queues,
//! never early, woken early by an earlier timer from another task or OS thread (and by a
//! batch put back elsewhere), drains racing a batch in flight (every timer ends exactly
//! once), dropping the stream mid-batch (nothing lost), shutdown, cancel safety, fairness
//! to other tasks, several streams on one scheduler.
//!
//! Everything runs under tokio's paused clock (`start_paused`): time moves only when every
//! task waits, straight to the next timer, so "yielded at 10 ms and not at 1 h" is an exact,
//! deterministic check. A lost wakeup shows up as an item yielded at the far timer's time.
//! The one exception, `multi_thread_runtime_on_the_real_clock`, has a 60 s bound for what
//! takes 10 ms. (One `Sleep` reused is checked in `src/tokio/due_stream.rs`, where the
//! count of sleeps made can be seen.)
#![cfg(feature = "tokio")]

use std::collections::HashMap;
use std::future::poll_fn;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};

use futures_util::stream::FusedStream;
use futures_util::{Stream as _, StreamExt};
use tickwheel::sync::{Cancel, Drained, Due, ScheduleError, Scheduler};
use tickwheel::tokio::DueStream;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{self, Duration, Instant};

/// Queue, id, value (the values are unused: ids say everything).
type Sched = Scheduler<u32, u64, u64>;
type Stream = DueStream<u32, u64, u64>;

const HOUR: Duration = Duration::from_secs(3600);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A scheduler whose tick 0 is tokio's (paused) now, 1 ms ticks; and that now.
fn scheduler(shards: usize) -> (Arc<Sched>, Instant) {
    let t0 = Instant::now();
    let sched = Scheduler::builder()
        .shards(shards)
        .origin(t0.into_std())
        .build();
    (Arc::new(sched), t0)
}

fn schedule(sched: &Sched, queue: u32, id: u64, at: Instant) {
    sched
        .schedule(queue, id, at.into_std(), id)
        .unwrap_or_else(|e| panic!("schedule id {id}: {e:?}"));
}

/// One item as the stream yielded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Out {
    id: u64,
    queue: u32,
    deadline: Instant,
    /// tokio's now when it was yielded.
    at: Instant,
}

/// Records an item just yielded, checking that it is not early.
fn record(due: &Due<u32, u64, u64>) -> Out {
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
async fn next_out(stream: &mut Stream) -> Out {
    let due = stream.next().await.expect("a due stream never ends");
    record(&due)
}

/// A dispatcher task: sends every item it yields, until the stream (or the task) is stopped.
/// With `yield_between`, it lets other tasks run between items, so they see its batch in
/// flight.
fn spawn_dispatcher<S>(
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
async fn settle() {
    for _ in 0..8 {
        tokio::task::yield_now().await;
    }
}

/// Polls once with a waker that does nothing.
fn poll_once(stream: &mut Stream) -> Poll<Option<Due<u32, u64, u64>>> {
    stream.poll_next_unpin(&mut Context::from_waker(Waker::noop()))
}

fn ids(outs: &[Out]) -> Vec<u64> {
    outs.iter().map(|o| o.id).collect()
}

fn cancelled_ids(d: &Drained<u64, u64>) -> Vec<u64> {
    d.cancelled.iter().map(|&(id, _)| id).collect()
}

/// Per id: how many times it was scheduled, minus how many times it ended (delivered or
/// returned by a drain). All zero means every timer ended exactly once.
#[derive(Default)]
struct Ledger(HashMap<u64, i64>);

impl Ledger {
    fn scheduled(&mut self, id: u64) {
        *self.0.entry(id).or_default() += 1;
    }

    fn ended(&mut self, id: u64) {
        *self.0.entry(id).or_default() -= 1;
    }

    fn assert_balanced(&self) {
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

// ---------------------------------------------------------------------------------------
// Order and timing
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn yields_in_deadline_order_across_shards_and_queues_exactly_on_time() {
    let (sched, t0) = scheduler(4);
    // 300 timers in 5 queues, scheduled out of deadline order, many sharing a deadline,
    // in wheel levels 0 to 2, some already past.
    let mut expected = Vec::new();
    for i in 0..300u64 {
        let id = (i * 919) % 1000; // distinct, not in schedule order
        let offset_ms = match i % 4 {
            0 => (i * 37) % 97,
            1 => 64 * (i % 40),
            2 => 4096 + (i * 131) % 5000,
            _ => 0,
        };
        let at = if i % 50 == 3 {
            t0 - ms(5) // past: due at once, reported as asked
        } else {
            t0 + ms(offset_ms)
        };
        schedule(&sched, (i % 5) as u32, id, at);
        expected.push((at.max(t0), i, id));
    }
    expected.sort_unstable();
    let mut stream = sched.due_stream().batch_limit(7);
    let mut got = Vec::new();
    for _ in 0..300 {
        got.push(next_out(&mut stream).await);
    }
    assert_eq!(
        ids(&got),
        expected.iter().map(|&(_, _, id)| id).collect::<Vec<_>>(),
        "deadline order, then schedule order, across shards and queues"
    );
    for o in &got {
        assert_eq!(o.at, o.deadline.max(t0), "id {} yielded on time", o.id);
    }
    assert_eq!((sched.len(), sched.in_flight_len()), (0, 0));
    assert!(
        poll_once(&mut stream).is_pending(),
        "empty: pending, not ended"
    );
}

#[tokio::test(start_paused = true)]
async fn never_early_with_an_odd_resolution_and_origin() {
    let t0 = Instant::now();
    let resolution = Duration::from_micros(700);
    let origin = t0 - Duration::from_micros(300);
    let sched = Arc::new(
        Scheduler::builder()
            .shards(2)
            .resolution(resolution)
            .origin(origin.into_std())
            .build(),
    );
    for id in 0..200u64 {
        let at = t0 + Duration::from_nanos((id * 7_777_777) % 50_000_000);
        schedule(&sched, 0, id, at);
    }
    let mut stream = sched.due_stream().batch_limit(5);
    let mut last_tick = 0;
    for _ in 0..200 {
        let o = next_out(&mut stream).await; // checks deadline <= tokio's now
        let late = o.at - o.deadline;
        // One tick of rounding up, plus tokio's own 1 ms rounding of the sleep.
        assert!(late <= resolution + ms(1), "id {} late by {late:?}", o.id);
        let tick = (o.deadline - origin)
            .as_nanos()
            .div_ceil(resolution.as_nanos());
        assert!(tick >= last_tick, "tick order: {tick} after {last_tick}");
        last_tick = tick;
    }
    assert!(sched.is_empty());
}

#[tokio::test(start_paused = true)]
async fn never_early_with_a_real_time_origin_ahead_of_the_paused_clock() {
    // `Scheduler::new()` takes its origin from std's clock, which has moved on while tokio's
    // is paused. Nothing is due before the origin, so timers come out late, never early.
    let t0 = Instant::now();
    let sched: Arc<Sched> = Arc::new(Scheduler::new());
    for id in 0..20u64 {
        schedule(&sched, 0, id, t0 + ms(id % 7));
    }
    let mut stream = sched.due_stream();
    for _ in 0..20 {
        next_out(&mut stream).await; // checks deadline <= tokio's now
    }
    assert!(sched.is_empty());
}

// ---------------------------------------------------------------------------------------
// Early wake-up
// ---------------------------------------------------------------------------------------

/// A scheduler with one timer at 1 h and a dispatcher task asleep until then.
async fn asleep_until_an_hour() -> (
    Arc<Sched>,
    Instant,
    JoinHandle<()>,
    mpsc::UnboundedReceiver<Out>,
) {
    let (sched, t0) = scheduler(4);
    schedule(&sched, 0, 1, t0 + HOUR);
    let (task, mut rx) = spawn_dispatcher(sched.due_stream(), false);
    settle().await;
    assert!(rx.try_recv().is_err(), "nothing due yet");
    (sched, t0, task, rx)
}

#[tokio::test(start_paused = true)]
async fn wakes_early_for_an_earlier_timer_from_another_task() {
    let (sched, t0, task, mut rx) = asleep_until_an_hour().await;
    let producer = Arc::clone(&sched);
    tokio::spawn(async move { schedule(&producer, 1, 2, t0 + ms(10)) })
        .await
        .unwrap();
    let o = rx.recv().await.unwrap();
    assert_eq!((o.id, o.at), (2, t0 + ms(10)), "woken for it, not at 1 h");

    // Asleep until 1 h again; a reschedule to earlier wakes it too.
    sched.reschedule(&1, (t0 + ms(20)).into_std()).unwrap();
    let o = rx.recv().await.unwrap();
    assert_eq!((o.id, o.at), (1, t0 + ms(20)));

    // And a timer already past, scheduled while it sleeps on an empty scheduler.
    settle().await;
    schedule(&sched, 1, 3, t0);
    let o = rx.recv().await.unwrap();
    assert_eq!((o.id, o.at), (3, t0 + ms(20)), "at once");
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn wakes_early_for_an_earlier_timer_from_another_os_thread() {
    let (sched, t0, task, mut rx) = asleep_until_an_hour().await;
    let at = (t0 + ms(10)).into_std();
    let producer = Arc::clone(&sched);
    // `spawn_blocking` runs on another OS thread, and while it runs the paused clock does
    // not auto-advance: the runtime parks for real, and only that thread can wake the
    // dispatcher. (The real sleep just makes it likely that the runtime is parked first.)
    tokio::task::spawn_blocking(move || {
        std::thread::sleep(std::time::Duration::from_millis(20));
        producer.schedule(1, 2, at, 2).unwrap();
    })
    .await
    .unwrap();
    let o = rx.recv().await.unwrap();
    assert_eq!((o.id, o.at), (2, t0 + ms(10)), "woken for it, not at 1 h");
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn wakes_early_when_a_batch_elsewhere_puts_an_earlier_timer_back() {
    let (sched, t0) = scheduler(2);
    schedule(&sched, 0, 1, t0 + ms(10));
    schedule(&sched, 0, 2, t0 + HOUR);
    time::advance(ms(10)).await;
    let batch = sched.pop_due(Instant::now().into_std(), 10); // id 1 in flight, elsewhere
    assert_eq!(batch.len(), 1);
    let (task, mut rx) = spawn_dispatcher(sched.due_stream(), false);
    settle().await; // asleep until 1 h: id 1 is not pending
    drop(batch); // untaken: back, pending and due
    let o = rx.recv().await.unwrap();
    assert_eq!((o.id, o.at), (1, t0 + ms(10)), "woken at once, not at 1 h");
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_thread_runtime_on_the_real_clock() {
    let t0 = std::time::Instant::now();
    let sched: Arc<Sched> = Arc::new(Scheduler::builder().origin(t0).build());
    sched.schedule(0, 1, t0 + HOUR, 1).unwrap();
    let (task, mut rx) = spawn_dispatcher(sched.due_stream(), false);
    time::sleep(ms(20)).await; // the dispatcher is (very likely) asleep on a worker by now
    let producer = Arc::clone(&sched);
    std::thread::spawn(move || {
        let at = std::time::Instant::now() + std::time::Duration::from_millis(10);
        producer.schedule(1, 2, at, 2).unwrap();
    })
    .join()
    .unwrap();
    let o = time::timeout(Duration::from_secs(60), rx.recv())
        .await
        .expect("woken for the earlier timer, not left asleep until 1 h")
        .unwrap();
    assert_eq!(o.id, 2); // `record` checked it was not early
    task.abort();
}

// ---------------------------------------------------------------------------------------
// Drains racing the stream
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_drain_while_a_batch_is_in_flight_takes_only_what_is_pending() {
    let (sched, t0) = scheduler(3);
    for id in 0..12u64 {
        schedule(&sched, (id % 2) as u32, id, t0 + ms(5));
    }
    let mut stream = sched.due_stream().batch_limit(5);
    let first = stream.next().await.unwrap(); // popped 0..5 at 5 ms, yielded 0
    assert_eq!((*first.id(), Instant::now()), (0, t0 + ms(5)));
    assert_eq!((stream.batch_len(), sched.in_flight_len()), (4, 5));

    // Queue 0 is 0, 2, 4, 6, 8, 10: 0 is held, 2 and 4 wait in the stream's batch.
    let drained = sched.drain_queue(&0);
    assert_eq!(drained.in_flight, [0, 2, 4], "reported, left to the stream");
    assert_eq!(
        cancelled_ids(&drained),
        [6, 8, 10],
        "the pending rest, returned"
    );
    assert_eq!(sched.cancel(&3), Cancel::InFlight);
    assert_eq!(
        sched.schedule(1, 3, t0.into_std(), 0),
        Err(ScheduleError::InFlight(0))
    );
    drop(first);

    let mut rest = Vec::new();
    for _ in 0..8 {
        rest.push(next_out(&mut stream).await.id);
    }
    assert_eq!(
        rest,
        [1, 2, 3, 4, 5, 7, 9, 11],
        "the batch, then what was not drained"
    );
    assert!(poll_once(&mut stream).is_pending());
    assert_eq!((sched.len(), sched.in_flight_len()), (0, 0));

    // Drained ids can be scheduled again at once, and the stream delivers them.
    schedule(&sched, 0, 6, t0 + ms(6));
    assert_eq!(next_out(&mut stream).await.id, 6);
}

/// Ids `0..n` in `queues` queues, due over `spread_ms`, scheduled in the ledger.
fn fill(sched: &Sched, t0: Instant, n: u64, queues: u64, spread_ms: u64, ledger: &mut Ledger) {
    for id in 0..n {
        let queue = ((id * 31) % queues) as u32;
        schedule(sched, queue, id, t0 + ms((id * 7_919) % spread_ms));
        ledger.scheduled(id);
    }
}

/// Stops a dispatcher made by `stoppable` once nothing is pending or in flight; returns
/// everything it yielded.
async fn stop_when_empty(
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
fn stoppable(
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

#[tokio::test(start_paused = true)]
async fn drains_from_another_task_race_the_stream_and_every_timer_ends_once() {
    let (sched, t0) = scheduler(4);
    let mut ledger = Ledger::default();
    fill(&sched, t0, 2000, 4, 200, &mut ledger);
    let (stop, task, rx) = stoppable(sched.due_stream().batch_limit(16));

    // Every 3 ms, drain a queue, and schedule what it returned again into the next queue,
    // 1 to 30 ms ahead: the timers keep coming while 150 drains run.
    let drainer = {
        let sched = Arc::clone(&sched);
        tokio::spawn(async move {
            let (mut drained, mut again, mut in_flight) = (Vec::new(), Vec::new(), Vec::new());
            for k in 0..150u32 {
                time::sleep(ms(3)).await;
                // The stream woke at this instant too: let it pop and yield a few items.
                for _ in 0..k % 4 {
                    tokio::task::yield_now().await;
                }
                let d = sched.drain_queue(&(k % 4));
                in_flight.extend(d.in_flight);
                for (id, _) in d.cancelled {
                    drained.push(id);
                    if k < 120 {
                        let at = Instant::now() + ms(1 + id % 30);
                        schedule(&sched, (k + 1) % 4, id, at);
                        again.push(id);
                    }
                }
            }
            (drained, again, in_flight)
        })
    };
    let (drained, again, in_flight) = drainer.await.unwrap();
    let delivered = stop_when_empty(&sched, stop, task, rx).await;

    for &id in &again {
        ledger.scheduled(id);
    }
    for id in drained.into_iter().chain(ids(&delivered)) {
        ledger.ended(id);
    }
    ledger.assert_balanced();
    assert!(
        in_flight.len() >= 10,
        "drains ran while the stream had a batch in flight: {in_flight:?}"
    );
    let delivered_ids: std::collections::HashSet<u64> = ids(&delivered).into_iter().collect();
    for id in in_flight {
        assert!(
            delivered_ids.contains(&id),
            "{id} was reported in flight, then lost"
        );
    }
    for o in &delivered {
        assert_eq!(o.at, o.deadline, "id {} yielded exactly on time", o.id);
    }
}

#[tokio::test(start_paused = true)]
async fn drains_from_another_os_thread_race_the_stream_and_every_timer_ends_once() {
    let (sched, t0) = scheduler(4);
    let mut ledger = Ledger::default();
    fill(&sched, t0, 3000, 6, 300, &mut ledger);
    let (stop, task, rx) = stoppable(sched.due_stream().batch_limit(16));

    // A real thread drains a queue whenever something is in flight (at most 60 times), and
    // schedules every other drained id again at 350 ms.
    let done = Arc::new(AtomicBool::new(false));
    let thread = {
        let (sched, done) = (Arc::clone(&sched), Arc::clone(&done));
        let again_at = (t0 + ms(350)).into_std();
        std::thread::spawn(move || {
            let (mut drained, mut again, mut drains) = (Vec::new(), Vec::new(), 0u32);
            while drains < 60 && !done.load(Ordering::SeqCst) {
                if sched.in_flight_len() == 0 {
                    std::thread::yield_now();
                    continue;
                }
                let d = sched.drain_queue(&(drains % 6));
                drains += 1;
                for (id, _) in d.cancelled {
                    if id % 2 == 0 {
                        sched.schedule(drains % 6, id, again_at, id).unwrap();
                        again.push(id);
                    }
                    drained.push(id);
                }
            }
            (drained, again)
        })
    };
    time::sleep(ms(300)).await; // every first deadline has passed
    done.store(true, Ordering::SeqCst);
    let (drained, again) = tokio::task::spawn_blocking(move || thread.join().unwrap())
        .await
        .unwrap();
    let delivered = stop_when_empty(&sched, stop, task, rx).await;

    for &id in &again {
        ledger.scheduled(id);
    }
    for id in drained.into_iter().chain(ids(&delivered)) {
        ledger.ended(id);
    }
    ledger.assert_balanced();
}

// ---------------------------------------------------------------------------------------
// Dropping the stream, shutting it down
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn dropping_the_stream_mid_batch_loses_nothing() {
    let (sched, t0) = scheduler(3);
    let mut expected = Vec::new();
    for id in 0..20u64 {
        let at = t0 + ms((id * 3) % 4);
        schedule(&sched, (id % 2) as u32, id, at);
        expected.push((at, id));
    }
    expected.sort_unstable();
    let expected: Vec<u64> = expected.into_iter().map(|(_, id)| id).collect();
    time::advance(ms(5)).await; // all due

    let mut stream = sched.due_stream().batch_limit(8);
    let mut taken = vec![
        next_out(&mut stream).await.id,
        next_out(&mut stream).await.id,
    ];
    let held = stream.next().await.unwrap(); // yielded, not done yet
    taken.push(*held.id());
    assert_eq!(
        (stream.batch_len(), sched.in_flight_len(), sched.len()),
        (5, 6, 12)
    );
    drop(stream);
    assert_eq!(
        (sched.len(), sched.in_flight_len()),
        (17, 1),
        "the 5 untaken are back; the held one stays in flight (it was handed over)"
    );
    drop(held);
    assert_eq!(sched.in_flight_len(), 0);

    // A new stream yields the rest as if never interrupted; pop_due would too.
    let mut stream = sched.due_stream();
    for _ in 0..17 {
        taken.push(next_out(&mut stream).await.id);
    }
    assert_eq!(taken, expected);
    assert!(sched.is_empty());
}

#[tokio::test(start_paused = true)]
async fn after_a_drop_mid_batch_pop_due_gets_the_rest_first_in_order() {
    let (sched, t0) = scheduler(2);
    for id in 0..10u64 {
        schedule(&sched, 0, id, t0 + ms(id));
    }
    time::advance(ms(20)).await;
    let mut stream = sched.due_stream().batch_limit(6);
    assert_eq!(next_out(&mut stream).await.id, 0);
    drop(stream);
    let ids: Vec<u64> = sched
        .pop_due(Instant::now().into_std(), 100)
        .map(|due| *due.id())
        .collect();
    assert_eq!(ids, (1..10).collect::<Vec<_>>());
}

#[tokio::test(start_paused = true)]
async fn take_until_a_shutdown_signal_ends_the_stream_and_keeps_the_rest() {
    let (sched, t0) = scheduler(2);
    schedule(&sched, 0, 1, t0 + ms(10));
    schedule(&sched, 0, 2, t0 + ms(20));
    schedule(&sched, 0, 3, t0 + HOUR);
    let (stop, stopped) = oneshot::channel::<()>();
    let mut stream = sched.due_stream().take_until(stopped);
    let consumer = tokio::spawn(async move {
        let mut out = Vec::new();
        while let Some(due) = stream.next().await {
            out.push(record(&due));
        }
        assert!(stream.is_terminated(), "take_until ended it");
        out
    });
    time::sleep(ms(30)).await;
    stop.send(()).unwrap();
    let out = consumer.await.unwrap();
    assert_eq!(ids(&out), [1, 2]);
    assert_eq!(
        Instant::now(),
        t0 + ms(30),
        "ended at once, not at the 1 h timer"
    );
    assert_eq!(
        (sched.len(), sched.in_flight_len()),
        (1, 0),
        "id 3 still pending"
    );
    let mut stream = sched.due_stream();
    let o = next_out(&mut stream).await;
    assert_eq!((o.id, o.at), (3, t0 + HOUR), "a later stream takes over");
}

#[tokio::test(start_paused = true)]
async fn aborting_the_dispatcher_task_mid_batch_loses_nothing() {
    let (sched, t0) = scheduler(3);
    for id in 0..40u64 {
        schedule(&sched, (id % 3) as u32, id, t0 + ms(id / 10));
    }
    time::advance(ms(10)).await;
    let (task, mut rx) = spawn_dispatcher(sched.due_stream().batch_limit(16), true);
    settle().await; // a few items out, the batch of 16 half taken
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    let mut delivered = Vec::new();
    while let Ok(o) = rx.try_recv() {
        delivered.push(o.id);
    }
    assert!(
        (1..16).contains(&delivered.len()),
        "aborted mid-batch: {delivered:?}"
    );
    assert_eq!(
        sched.in_flight_len(),
        0,
        "the dropped stream gave its batch back"
    );
    assert_eq!(delivered.len() + sched.len(), 40, "nothing lost");
    let mut stream = sched.due_stream();
    while delivered.len() < 40 {
        delivered.push(next_out(&mut stream).await.id);
    }
    assert_eq!(
        delivered,
        (0..40).collect::<Vec<_>>(),
        "each once, in order"
    );
}

#[tokio::test(start_paused = true)]
async fn next_is_cancel_safe() {
    let (sched, t0) = scheduler(2);
    schedule(&sched, 0, 1, t0 + ms(10));
    schedule(&sched, 0, 2, t0 + ms(10));
    let mut stream = sched.due_stream().batch_limit(2);
    assert!(
        time::timeout(ms(5), stream.next()).await.is_err(),
        "gave up at 5 ms"
    );
    let o = next_out(&mut stream).await;
    assert_eq!((o.id, o.at), (1, t0 + ms(10)));
    assert_eq!(next_out(&mut stream).await.id, 2);

    // The usual shutdown loop: `select!` drops a pending `next` each time the other
    // branch wins; nothing is lost by it, and the stream can go on afterwards.
    for (id, at) in [(3, 30), (4, 40), (5, 50)] {
        schedule(&sched, 0, id, t0 + ms(at));
    }
    let (stop, mut stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        time::sleep_until(t0 + ms(45)).await;
        stop.send(()).unwrap();
    });
    let mut got = Vec::new();
    loop {
        tokio::select! {
            _ = &mut stopped => break,
            Some(due) = stream.next() => got.push(record(&due).id),
        }
    }
    assert_eq!((got, Instant::now()), (vec![3, 4], t0 + ms(45)));
    let o = next_out(&mut stream).await;
    assert_eq!((o.id, o.at), (5, t0 + ms(50)));
}

#[tokio::test(start_paused = true)]
async fn never_ends_on_its_own() {
    let (sched, _) = scheduler(1);
    let mut stream = sched.due_stream();
    assert!(!stream.is_terminated());
    assert!(
        poll_once(&mut stream).is_pending(),
        "empty is Pending, not None"
    );
    time::advance(HOUR * 24 * 30).await;
    assert!(poll_once(&mut stream).is_pending());
    schedule(&sched, 0, 1, Instant::now());
    assert!(matches!(poll_once(&mut stream), Poll::Ready(Some(_))));
    assert!(poll_once(&mut stream).is_pending());
}

// ---------------------------------------------------------------------------------------
// Several consumers, fairness, traits
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn two_streams_share_the_timers_each_exactly_once() {
    let (sched, t0) = scheduler(4);
    let mut ledger = Ledger::default();
    fill(&sched, t0, 600, 3, 200, &mut ledger);
    let (stop_a, task_a, rx_a) = stoppable(sched.due_stream().batch_limit(4));
    let (stop_b, task_b, rx_b) = stoppable(sched.due_stream().batch_limit(4));
    let a = stop_when_empty(&sched, stop_a, task_a, rx_a).await;
    let b = stop_when_empty(&sched, stop_b, task_b, rx_b).await;
    assert!(
        !a.is_empty() && !b.is_empty(),
        "both took part: {} / {}",
        a.len(),
        b.len()
    );
    for o in a.iter().chain(&b) {
        ledger.ended(o.id);
        assert!(o.at - o.deadline < ms(1), "id {} on time", o.id);
    }
    ledger.assert_balanced();
}

#[tokio::test(start_paused = true)]
async fn a_backlog_of_due_timers_lets_other_tasks_run() {
    let (sched, t0) = scheduler(2);
    for id in 0..1000u64 {
        schedule(&sched, 0, id, t0);
    }
    let ran = Arc::new(AtomicBool::new(false));
    let other = Arc::clone(&ran);
    tokio::spawn(async move { other.store(true, Ordering::SeqCst) });
    let mut stream = sched.due_stream();
    let mut first_seen = None;
    for n in 0..1000 {
        next_out(&mut stream).await;
        if first_seen.is_none() && ran.load(Ordering::SeqCst) {
            first_seen = Some(n);
        }
    }
    let n = first_seen.expect("the other task ran while the backlog was drained");
    assert!(n <= 200, "the other task waited {n} items");
}

#[test]
fn the_stream_is_send_sync_unpin_and_debug() {
    fn check<S: Send + Sync + Unpin + std::fmt::Debug>() {}
    check::<DueStream<String, u64, Vec<u8>>>();
    // `Unpin` whatever the types are.
    check_unpin::<DueStream<u8, u8, std::marker::PhantomPinned>>();
    fn check_unpin<S: Unpin>() {}
}

#[tokio::test(start_paused = true)]
async fn accessors() {
    let (sched, t0) = scheduler(1);
    let stream = sched.due_stream().batch_limit(0);
    assert!(Arc::ptr_eq(stream.scheduler(), &sched));
    assert_eq!(stream.batch_len(), 0);
    assert!(
        format!("{stream:?}").contains("batch_limit: 1"),
        "0 is taken as 1"
    );
    let mut stream = stream;
    schedule(&sched, 0, 1, t0);
    schedule(&sched, 0, 2, t0);
    assert_eq!(next_out(&mut stream).await.id, 1);
    assert_eq!(stream.size_hint(), (0, None), "batches of one");
    let mut stream = sched.due_stream();
    schedule(&sched, 0, 3, t0);
    assert_eq!(next_out(&mut stream).await.id, 2);
    assert_eq!(stream.size_hint(), (1, None));
    let due = poll_fn(|cx| stream.poll_next_unpin(cx)).await.unwrap();
    assert_eq!(*due.id(), 3);
}
