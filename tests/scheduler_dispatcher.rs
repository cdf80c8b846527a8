//! The thread dispatcher of `sync::Scheduler`: delivers in order and never early, wakes early
//! for an earlier timer, survives panicking handlers without losing timers, lets handlers
//! call back into the scheduler, and stops cleanly.
//!
//! Timing assertions only have lower bounds ("not before the deadline") and generous upper
//! bounds (seconds, where a missed wakeup would take an hour), so a loaded machine cannot
//! make them flaky.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tickwheel::sync::{DispatcherHandle, Scheduler};

const PATIENCE: Duration = Duration::from_secs(20);
const HOUR: Duration = Duration::from_secs(3600);

#[test]
fn delivers_everything_in_deadline_order_and_never_early() {
    let t0 = Instant::now();
    let sched = Arc::new(Scheduler::builder().shards(3).origin(t0).build());
    let mut expected = Vec::new();
    for id in 0..60u64 {
        let at = t0 + Duration::from_millis((id * 37) % 45);
        sched.schedule(id % 4, id, at, at).unwrap();
        expected.push(id);
    }
    let (tx, rx) = mpsc::channel();
    let dispatcher = sched.spawn_dispatcher(move |due| {
        let late = Instant::now();
        tx.send((*due.id(), due.deadline(), late)).unwrap();
    });
    let mut got = Vec::new();
    for _ in 0..60 {
        got.push(rx.recv_timeout(PATIENCE).expect("every timer is delivered"));
    }
    dispatcher.shutdown();
    for &(id, deadline, at) in &got {
        assert!(
            at >= deadline,
            "id {id} delivered {:?} early",
            deadline - at
        );
    }
    let ticks: Vec<u128> = got
        .iter()
        .map(|&(_, d, _)| (d - t0).as_nanos().div_ceil(1_000_000))
        .collect();
    assert!(
        ticks.windows(2).all(|w| w[0] <= w[1]),
        "deadline-tick order: {ticks:?}"
    );
    let mut ids: Vec<u64> = got.iter().map(|&(id, _, _)| id).collect();
    ids.sort_unstable();
    assert_eq!(ids, expected);
    assert_eq!((sched.len(), sched.in_flight_len()), (0, 0));
}

#[test]
fn wakes_early_when_an_earlier_timer_is_scheduled() {
    let sched = Arc::new(Scheduler::new());
    let now = Instant::now();
    sched.schedule("q", 1, now + HOUR, "late").unwrap();
    let (tx, rx) = mpsc::channel();
    let dispatcher = sched.spawn_dispatcher(move |due| tx.send(due.into_value()).unwrap());
    std::thread::sleep(Duration::from_millis(50)); // let it go to sleep until the hour
    sched
        .schedule("q", 2, Instant::now() + Duration::from_millis(20), "early")
        .unwrap();
    assert_eq!(
        rx.recv_timeout(PATIENCE),
        Ok("early"),
        "a sleeping dispatcher must be woken"
    );
    // Also from "nothing pending": sleeping without a deadline.
    assert_eq!(sched.cancel(&1).into_cancelled(), Some("late"));
    std::thread::sleep(Duration::from_millis(50));
    sched
        .schedule("q", 3, Instant::now(), "from empty")
        .unwrap();
    assert_eq!(rx.recv_timeout(PATIENCE), Ok("from empty"));
    assert_eq!(dispatcher.delivered(), 2);
    dispatcher.shutdown();
}

#[test]
fn wakes_for_a_reschedule_to_earlier() {
    let sched = Arc::new(Scheduler::new());
    sched.schedule("q", 1, Instant::now() + HOUR, 1).unwrap();
    let (tx, rx) = mpsc::channel();
    let _dispatcher = sched.spawn_dispatcher(move |due| tx.send(*due.id()).unwrap());
    std::thread::sleep(Duration::from_millis(50));
    sched.reschedule(&1, Instant::now()).unwrap();
    assert_eq!(rx.recv_timeout(PATIENCE), Ok(1));
} // dropping the handle stops the thread

#[test]
fn a_panicking_handler_is_counted_and_loses_nothing() {
    let now = Instant::now();
    let sched = Arc::new(Scheduler::builder().shards(2).build());
    for id in 0..10u32 {
        sched.schedule((), id, now, id).unwrap();
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    let dispatcher = sched.spawn_dispatcher(move |due| {
        log.lock().unwrap().push(*due.id());
        assert_ne!(
            *due.id(),
            3,
            "handler fails on 3 (expected panic in this test)"
        );
    });
    let deadline = Instant::now() + PATIENCE;
    while dispatcher.delivered() < 10 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!((dispatcher.delivered(), dispatcher.panics()), (10, 1));
    assert!(dispatcher.is_running(), "the thread survives the panic");
    dispatcher.shutdown();
    assert_eq!(*seen.lock().unwrap(), (0..10).collect::<Vec<_>>());
    assert_eq!((sched.len(), sched.in_flight_len()), (0, 0));
}

#[test]
fn handlers_may_call_back_and_reschedule_their_own_id() {
    let sched = Arc::new(Scheduler::builder().shards(2).build());
    let (tx, rx) = mpsc::channel();
    let inner = Arc::clone(&sched);
    let dispatcher = sched.spawn_dispatcher(move |due| {
        let (queue, id) = (*due.queue(), *due.id());
        let refused = inner.schedule(queue, id, Instant::now(), 0).is_err();
        let attempt = due.into_value();
        tx.send((attempt, refused)).unwrap();
        if attempt < 3 {
            inner
                .schedule(queue, id, Instant::now(), attempt + 1)
                .unwrap();
        }
    });
    sched
        .schedule("retry", 42u32, Instant::now(), 0u32)
        .unwrap();
    for attempt in 0..4 {
        assert_eq!(
            rx.recv_timeout(PATIENCE),
            Ok((attempt, true)),
            "in flight while its Due lives"
        );
    }
    dispatcher.shutdown();
    assert!(rx.try_recv().is_err(), "exactly four deliveries");
}

#[test]
fn two_dispatchers_share_the_timers_exactly_once() {
    let now = Instant::now();
    let sched = Arc::new(Scheduler::builder().shards(4).build());
    let (tx, rx) = mpsc::channel();
    let tx2 = tx.clone();
    let d1 = sched.spawn_dispatcher(move |due| tx.send(due.into_value()).unwrap());
    let d2 = sched.spawn_dispatcher(move |due| tx2.send(due.into_value()).unwrap());
    for id in 0..500u32 {
        sched
            .schedule(
                id % 7,
                id,
                now + Duration::from_millis(u64::from(id % 20)),
                id,
            )
            .unwrap();
    }
    let mut got: Vec<u32> = (0..500)
        .map(|_| rx.recv_timeout(PATIENCE).unwrap())
        .collect();
    d1.shutdown();
    d2.shutdown();
    got.sort_unstable();
    assert_eq!(got, (0..500).collect::<Vec<_>>());
}

#[test]
fn shutdown_returns_promptly_and_leaves_pending_timers() {
    let sched = Arc::new(Scheduler::new());
    sched.schedule("q", 1, Instant::now() + HOUR, ()).unwrap();
    let dispatcher = sched.spawn_dispatcher(|_| {});
    std::thread::sleep(Duration::from_millis(20));
    let started = Instant::now();
    dispatcher.shutdown();
    assert!(
        started.elapsed() < PATIENCE,
        "shutdown wakes the sleeping thread"
    );
    assert_eq!(sched.len(), 1);
    assert!(format!("{sched:?}").starts_with("Scheduler"));
}

/// What the handler of [`stops_itself`] saw.
#[derive(Debug, PartialEq, Eq)]
enum SelfStop {
    Delivered(u32),
    /// `stop` ran inside the handler; `true` when it returned without panicking.
    Stopped(bool),
}

/// A handler takes its own dispatcher's handle out of a `Mutex` and `stop`s it (shutdown or
/// drop). Before the fix, joining the thread from itself panicked ("failed to join thread:
/// Resource deadlock avoided").
fn stops_itself(stop: fn(DispatcherHandle)) {
    let t0 = Instant::now();
    let sched = Arc::new(Scheduler::builder().shards(2).origin(t0).build());
    let slot: Arc<Mutex<Option<DispatcherHandle>>> = Arc::new(Mutex::new(None));
    let (tx, rx) = mpsc::channel();
    let handler_slot = Arc::clone(&slot);
    let handle = sched.spawn_dispatcher(move |due| {
        tx.send(SelfStop::Delivered(*due.id())).unwrap();
        let own = handler_slot.lock().unwrap().take();
        if let Some(own) = own {
            let stopped = catch_unwind(AssertUnwindSafe(|| stop(own))).is_ok();
            tx.send(SelfStop::Stopped(stopped)).unwrap();
        }
    });
    *slot.lock().unwrap() = Some(handle);
    // Scheduled only now, so the handler always finds its handle.
    sched.schedule("q", 1, t0, ()).unwrap();
    sched.schedule("q", 2, t0, ()).unwrap();
    assert_eq!(rx.recv_timeout(PATIENCE), Ok(SelfStop::Delivered(1)));
    assert_eq!(
        rx.recv_timeout(PATIENCE),
        Ok(SelfStop::Stopped(true)),
        "no panic"
    );
    // The thread exits after the handler returns and drops the handler (with `tx`).
    assert_eq!(
        rx.recv_timeout(PATIENCE),
        Err(mpsc::RecvTimeoutError::Disconnected),
        "the thread stopped without delivering id 2"
    );
    assert_eq!(
        (sched.len(), sched.in_flight_len()),
        (1, 0),
        "id 2 stays pending (never popped, or put back with the batch)"
    );
    assert!(slot.lock().unwrap().is_none());
}

#[test]
fn a_handler_can_shut_down_its_own_dispatcher() {
    stops_itself(DispatcherHandle::shutdown);
}

#[test]
fn a_handler_can_drop_its_own_dispatcher_handle() {
    stops_itself(drop);
}
