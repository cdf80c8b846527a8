//! `Drop` of ids and queue names never runs under a shard lock: an id or queue name whose
//! `Drop` calls back into the scheduler must not deadlock (`parking_lot` locks are not
//! reentrant).
//!
//! Regression: a refused `schedule` dropped its id under the shard lock, and so did
//! `cancel`, `drain_queue` and the lazy settle of done `Due`s (from `len`, `queue_len`,
//! `stats`, `queues`, `next_deadline`, `pop_due`): an id whose `Drop` called `queue_len`
//! deadlocked.

use std::hash::{Hash, Hasher};
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tickwheel::sync::{Cancel, ScheduleError, Scheduler};

/// Runs `f` on a thread and fails if it does not finish in 20 s (a deadlock), instead of
/// hanging the test run.
fn within_timeout(name: &str, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(()) => {}
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{name}: deadlocked (no answer in 20 s)"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{name}: the thread panicked"),
    }
}

// --- the reproduction ---------------------------------------------------------------------

type S = Scheduler<u8, Id, u32>;
static REFUSED: OnceLock<Arc<S>> = OnceLock::new();

/// An id whose `Drop` calls the scheduler when its flag is set.
#[derive(Clone, Debug)]
struct Id(u32, bool);
impl PartialEq for Id {
    fn eq(&self, o: &Self) -> bool {
        self.0 == o.0
    }
}
impl Eq for Id {}
impl Hash for Id {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.0.hash(h)
    }
}
impl Drop for Id {
    fn drop(&mut self) {
        if self.1 {
            if let Some(s) = REFUSED.get() {
                let _ = s.queue_len(&0);
            }
        }
    }
}

#[test]
fn a_refused_schedule_drops_its_id_after_the_lock() {
    within_timeout("refused schedule", || {
        let s = REFUSED.get_or_init(|| Arc::new(Scheduler::new()));
        let t0 = Instant::now();
        s.schedule(0, Id(1, false), t0, 1).unwrap();
        assert_eq!(
            s.schedule(0, Id(1, true), t0, 2),
            Err(ScheduleError::Pending(2))
        );
    });
}

// --- ids and queue names that always call back -------------------------------------------

type R = Scheduler<Name, Key, u32>;
static CALLBACK: OnceLock<Arc<R>> = OnceLock::new();

/// A queue name that is never dropped (a temporary would call back from its own `Drop`,
/// forever).
static QUEUE_ZERO: Name = Name(0);

/// Calls the scheduler from `Drop`, every time.
fn call_back() {
    if let Some(s) = CALLBACK.get() {
        let _ = s.len();
        let _ = s.queue_len(&QUEUE_ZERO);
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key(u32);
impl Drop for Key {
    fn drop(&mut self) {
        call_back();
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Name(u8);
impl Drop for Name {
    fn drop(&mut self) {
        call_back();
    }
}

#[test]
fn no_operation_drops_an_id_or_a_queue_name_under_a_lock() {
    within_timeout("every operation", || {
        let t0 = Instant::now();
        let s =
            CALLBACK.get_or_init(|| Arc::new(Scheduler::builder().shards(2).origin(t0).build()));
        let ms = Duration::from_millis(1);
        // The second case: schedule, pop, drop the Due, len() settles it.
        s.schedule(Name(0), Key(1), t0, 1).unwrap();
        let due = s.pop_due(t0 + ms, 10).next().unwrap();
        drop(due);
        assert_eq!(s.len(), 0);
        assert_eq!(s.in_flight_len(), 0);

        // Refusals: pending, then in flight.
        s.schedule(Name(1), Key(2), t0, 2).unwrap();
        assert!(matches!(
            s.schedule(Name(1), Key(2), t0, 3),
            Err(ScheduleError::Pending(3))
        ));
        let due = s.pop_due(t0 + ms, 10).next().unwrap();
        assert!(matches!(
            s.schedule(Name(1), Key(2), t0, 4),
            Err(ScheduleError::InFlight(4))
        ));
        drop(due);
        // Settled by whoever meets the id: schedule, reschedule, cancel, drain.
        for (round, id) in (10..14).enumerate() {
            s.schedule(Name(2), Key(id), t0, id).unwrap();
            let due = s.pop_due(t0 + ms, 10).next().unwrap();
            drop(due);
            match round {
                0 => s.schedule(Name(2), Key(id), t0 + ms * 100, id).unwrap(),
                1 => assert!(s.reschedule(&Key(id), t0).is_err()),
                2 => assert_eq!(s.cancel(&Key(id)), Cancel::NotFound),
                _ => {
                    let drained = s.drain_queue(&Name(2));
                    assert!(drained.in_flight.is_empty());
                    assert_eq!(drained.cancelled.len(), 1, "id 10, scheduled in round 0");
                }
            }
        }
        // Cancel and drain of pending timers; a queue emptied.
        s.schedule(Name(3), Key(20), t0 + ms * 100, 20).unwrap();
        s.schedule(Name(3), Key(21), t0 + ms * 100, 21).unwrap();
        assert_eq!(s.cancel(&Key(20)), Cancel::Cancelled(20));
        assert_eq!(s.drain_queue(&Name(3)).cancelled.len(), 1);
        // A dropped batch puts its untaken items back.
        for id in 30..34 {
            s.schedule(Name(4), Key(id), t0, id).unwrap();
        }
        let mut batch = s.pop_due(t0 + ms, 10);
        drop(batch.next());
        drop(batch);
        assert_eq!(s.len(), 3);
        // Observers that settle, and the shrink.
        let dues: Vec<_> = s.pop_due(t0 + ms, 10).collect();
        drop(dues);
        let _ = s.stats();
        let _ = s.queues();
        let _ = s.next_deadline();
        s.shrink_to_fit();
        assert_eq!((s.len(), s.in_flight_len(), s.stats().queues), (0, 0, 0));
    });
}
