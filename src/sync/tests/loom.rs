//! loom models of the scheduler's atomics and locks (`RUSTFLAGS="--cfg loom"`, see
//! `.ci/loom.sh` and `src/loom.rs`), one module per part they check.

use std::hash::Hash;
use std::sync::Arc;
use std::time::Instant;

use crate::loom::thread;
use crate::sync::Scheduler;

/// A one-shard scheduler whose origin is now, to share among a model's threads, and that
/// origin.
fn one_shard<Q, K, T>() -> (Instant, Arc<Scheduler<Q, K, T>>)
where
    Q: Hash + Eq + Clone,
    K: Hash + Eq + Clone,
{
    let t0 = Instant::now();
    (
        t0,
        Arc::new(Scheduler::builder().shards(1).origin(t0).build()),
    )
}

/// Spawns a loom thread that runs `f` on a handle of its own to `shared`.
fn spawn_on<S, R>(
    shared: &Arc<S>,
    f: impl FnOnce(&S) -> R + Send + 'static,
) -> thread::JoinHandle<R>
where
    S: Send + Sync + 'static,
    R: Send + 'static,
{
    let shared = Arc::clone(shared);
    thread::spawn(move || f(&shared))
}

/// loom: a `Due` pushed onto the done list while the shard settles and its id is scheduled
/// again.
mod done_list {
    use super::{one_shard, spawn_on};
    use crate::loom::{model, thread};
    use crate::sync::ScheduleError;

    /// Timer 1 is in flight. Its `Due` is dropped on one thread, a count settles the shard
    /// on another, and id 1 is scheduled again on a third. The new schedule is refused while
    /// the old timer is in flight and accepted once it is done, never lost: the dropped
    /// timer is finished exactly once, whichever settle finds it.
    #[test]
    fn loom_done_due_racing_a_settle_and_a_schedule_of_its_id() {
        model(|| {
            let (t0, sched) = one_shard();
            sched.schedule(0u8, 1u32, t0, 10u32).unwrap();
            let due = sched.pop_due(t0, 1).next().expect("timer 1 is due");
            let dropper = thread::spawn(move || drop(due));
            let settler = spawn_on(&sched, |sched| sched.in_flight_len());
            let again = sched.schedule(0, 1, t0, 20);
            dropper.join().unwrap();
            assert!(settler.join().unwrap() <= 1);
            match again {
                Ok(()) => assert_eq!((sched.len(), sched.in_flight_len()), (1, 0)),
                Err(ScheduleError::InFlight(20)) => {
                    assert_eq!((sched.len(), sched.in_flight_len()), (0, 0), "1 is done");
                    sched.schedule(0, 1, t0, 20).unwrap();
                }
                Err(e) => panic!("schedule of the in-flight id: {e:?}"),
            }
            let values: Vec<u32> = sched.pop_due(t0, 8).map(|due| due.into_value()).collect();
            assert_eq!(values, [20]);
        });
    }
}

mod dispatcher {
    use std::sync::atomic::AtomicUsize;

    use std::sync::Arc;

    use super::one_shard;
    use crate::loom::{model, thread};
    use crate::sync::Due;
    use crate::sync::dispatcher::{Shared, request_stop, run};

    /// The dispatcher loop runs while a timer due now is scheduled and the loop is asked
    /// to stop: the loop ends (a stop lost while it goes to sleep leaves it asleep, a
    /// deadlock to loom) and the timer is delivered or still pending, once.
    #[test]
    fn loom_shutdown_racing_a_schedule() {
        model(|| {
            let (t0, sched) = one_shard();
            let shared = Arc::new(Shared::default());
            let delivered = Arc::new(AtomicUsize::new(0));
            let dispatcher = {
                let (sched, shared) = (Arc::clone(&sched), Arc::clone(&shared));
                let delivered = Arc::clone(&delivered);
                thread::spawn(move || {
                    run(&sched, &shared, |_due: Due<u8, u32, ()>| {
                        delivered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    })
                })
            };
            sched.schedule(0, 1, t0, ()).unwrap();
            request_stop(&shared, sched.signal());
            dispatcher.join().unwrap();
            let delivered = delivered.load(std::sync::atomic::Ordering::SeqCst);
            assert_eq!(delivered + sched.len(), 1, "delivered or pending, once");
        });
    }
}

/// loom: an earlier deadline scheduled while a `pop_due` raises the shard's published bound.
mod pop {
    use std::sync::Arc;
    use std::time::Duration;

    use super::one_shard;
    use crate::loom::{AtomicBool, Ordering, model, thread};
    use crate::sync::DueBatch;

    /// The ids of a batch, each `Due` dropped (delivered).
    fn ids(batch: DueBatch<u8, u32, ()>) -> Vec<u32> {
        batch.map(|due| *due.id()).collect()
    }

    /// One shard, timers 1 (due) and 2 (not due). A poller takes timer 1, which raises the
    /// bound it publishes to 2's tick, while timer 3, due and earlier than 2, is scheduled.
    /// A poll that starts after that schedule returned (the poller's second one, if it saw
    /// the flag; the final one in any case) must find 3 unless the first took it: the bound
    /// published last is the state's, whichever unlock came last.
    #[test]
    fn loom_earlier_schedule_is_never_missed_by_a_later_poll() {
        model(|| {
            let (t0, sched) = one_shard();
            let ms = Duration::from_millis;
            sched.schedule(0, 1, t0 + ms(3), ()).unwrap();
            sched.schedule(0, 2, t0 + ms(10), ()).unwrap();
            let now = t0 + ms(5);
            let scheduled = Arc::new(AtomicBool::new(false));
            let poller = {
                let (sched, scheduled) = (Arc::clone(&sched), Arc::clone(&scheduled));
                thread::spawn(move || {
                    let mut got = ids(sched.pop_due(now, 1));
                    if scheduled.load(Ordering::Acquire) {
                        got.extend(ids(sched.pop_due(now, 8)));
                        assert!(
                            got.contains(&3),
                            "a poll after the schedule missed 3: {got:?}"
                        );
                    }
                    got
                })
            };
            sched.schedule(0, 3, t0 + ms(4), ()).unwrap();
            scheduled.store(true, Ordering::Release);
            let mut got = poller.join().unwrap();
            got.extend(ids(sched.pop_due(now, 8)));
            got.sort_unstable();
            assert_eq!(got, [1, 3], "every due timer once, none missed");
        });
    }
}

/// loom: the wake-up protocol, with the dispatcher's own sleep step and `arm_waker`.
mod signal {
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;
    use std::task::{Wake, Waker};
    use std::time::{Duration, Instant};

    use super::{one_shard, spawn_on};
    use crate::loom::{AtomicBool, model};
    use crate::sync::dispatcher::sleep_until_due;
    use crate::sync::signal::Signal;

    /// A poller that sleeps until timer 1, an hour away, while timer 2, due now, is
    /// scheduled and announced: the poller must wake and take 2. A lost wake-up leaves it
    /// asleep for the hour, which loom (no clock) reports as a deadlock.
    #[test]
    fn loom_poller_going_to_sleep_is_woken_by_an_earlier_schedule() {
        model(|| {
            let (t0, sched) = one_shard();
            sched
                .schedule(0u8, 1u32, t0 + Duration::from_secs(3600), ())
                .unwrap();
            let poller = spawn_on(&sched, |sched| {
                let stop = AtomicBool::new(false);
                loop {
                    if let Some(due) = sched.pop_due(Instant::now(), 1).next() {
                        return *due.id();
                    }
                    sleep_until_due(sched, &stop);
                }
            });
            sched.schedule(0, 2, t0, ()).unwrap();
            assert_eq!(poller.join().unwrap(), 2);
        });
    }

    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn count(c: &Count) -> usize {
        c.0.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// A stream armed with its first task's waker is polled from a second task (it arms
    /// again, replacing the waker) while a producer announces an earlier deadline. A notify
    /// after the re-arm must wake the second waker; one before it wakes the first. Exactly
    /// one is woken, and never the replaced one for a notify that came after the re-arm.
    #[test]
    fn loom_stream_replacing_its_waker_racing_a_wake() {
        model(|| {
            let signal = Arc::new(Signal::default());
            let (first, second) = (Arc::new(Count::default()), Arc::new(Count::default()));
            let poller = signal.new_poller();
            signal.arm_waker(poller, &Waker::from(Arc::clone(&first)));
            let new_waker = Arc::clone(&second);
            let stream = spawn_on(&signal, move |signal| {
                signal.arm_waker(poller, &Waker::from(new_waker))
            });
            signal.deadline_added(0);
            let epoch = stream.join().unwrap();
            let woken = (count(&first), count(&second));
            if signal.moved_since(epoch) {
                assert_eq!(
                    woken,
                    (0, 1),
                    "a notify after the re-arm wakes the new waker"
                );
            } else {
                assert_eq!(woken, (1, 0), "the notify came first: the first waker");
                assert_eq!(signal.waker_count(), 1, "the new one stays registered");
            }
        });
    }
}

/// loom: a queue's concurrency slot given back by a `Due` that ends while a `pop_due` finds
/// the queue at its limit (the handshake in `sync/flow/limit.rs`).
mod flow {
    use super::{one_shard, spawn_on};
    use crate::loom::{model, thread};

    /// Queue 0 has a concurrency limit of 1 and timer 1 in flight; timer 2 is due. One
    /// thread drops timer 1's `Due` while another pops. The pop takes timer 2 (the slot
    /// was given back first) or parks it, and then the end lists the queue freed, so the
    /// next pop hands timer 2 out: never lost (a lost wake-up leaves it parked for good).
    #[test]
    fn loom_end_racing_a_pop_at_the_limit() {
        model(|| {
            let (t0, sched) = one_shard();
            sched.set_concurrency(&0u8, Some(1));
            sched.schedule(0u8, 1u32, t0, 1u32).unwrap();
            let due = sched.pop_due(t0, 1).next().expect("timer 1 is due");
            sched.schedule(0, 2, t0, 2).unwrap();
            let dropper = thread::spawn(move || drop(due));
            let popper = spawn_on(&sched, move |sched| {
                let batch = sched.pop_due(t0, 8);
                batch.map(|due| due.into_value()).collect::<Vec<u32>>()
            });
            dropper.join().unwrap();
            let mut values = popper.join().unwrap();
            values.extend(sched.pop_due(t0, 8).map(|due| due.into_value()));
            assert_eq!(values, [2], "timer 2 handed out once, after timer 1 ended");
        });
    }
}
