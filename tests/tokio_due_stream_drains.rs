//! `Scheduler::due_stream` when its timers end some other way than being yielded: drains
//! racing a batch in flight (every timer ends exactly once), dropping the stream mid-batch
//! (nothing lost), shutdown, cancel safety. Order, timing and wake-ups are in
//! `tokio_due_stream.rs`.
//!
//! Everything runs under tokio's paused clock (`start_paused`): time moves only when every
//! task waits, straight to the next timer.
#![cfg(feature = "tokio")]

mod support;
use support::due_stream;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;

use futures_util::StreamExt;
use futures_util::stream::FusedStream;
use tickwheel::sync::{Cancel, ScheduleError};
use tokio::sync::oneshot;
use tokio::time::{self, Instant};

use due_stream::*;

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

#[tokio::test(start_paused = true)]
async fn drains_from_another_task_race_the_stream_and_every_timer_ends_once() {
    let (sched, _, mut ledger) = filled(4, 2000, 4, 200);
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
    ledger.assert_balanced_with(&again, drained, &delivered);
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
    let (sched, t0, mut ledger) = filled(4, 3000, 6, 300);
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
    ledger.assert_balanced_with(&again, drained, &delivered);
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
