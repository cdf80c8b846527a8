//! `tickwheel::tokio::DelayQueue` against tokio-util's on the same scripts, with a task
//! waiting in `select!` on `next()`, and a multi-thread run on the real clock: every entry
//! comes out exactly once, never early. The single-scenario tests of the idle-poll shortcut
//! are in `tokio_delay_queue_adversarial.rs`.
#![cfg(feature = "tokio")]

mod support;

use std::future::poll_fn;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use futures_util::StreamExt;
use proptest::prelude::*;
use support::delay_queue::*;
use tickwheel::tokio::DelayQueue;
use tokio::time::{self, Instant};

// ---------------------------------------------------------------------------------------
// Multi-thread runtime, real clock
// ---------------------------------------------------------------------------------------

/// A consumer task waits in `next()` on a shared queue while a producer on another worker
/// inserts, resets and removes: every entry not removed comes out exactly once, never
/// before its deadline, and the whole run ends within a bound far above its deadlines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_thread_real_clock_every_entry_once_never_early() {
    const N: u64 = 400;
    let q: Arc<Mutex<DelayQueue<u64>>> = Arc::new(Mutex::new(DelayQueue::new()));
    let removed = Arc::new(Mutex::new(Vec::new()));
    let producer = {
        let (q, removed) = (q.clone(), removed.clone());
        tokio::spawn(async move {
            let mut keys = Vec::new();
            for i in 0..N {
                {
                    let mut q = q.lock().unwrap_or_else(|e| e.into_inner());
                    // Deadlines 0..=19 ms ahead; every 5th moved earlier, every 7th later,
                    // every 11th removed if still there.
                    keys.push(q.insert(i, ms(i * 7 % 20)));
                    if i % 5 == 4 {
                        q.try_reset(&keys[i as usize - 2], ms(1));
                    }
                    if i % 7 == 6 {
                        q.try_reset(&keys[i as usize - 3], ms(15));
                    }
                    if i % 11 == 10 && q.try_remove(&keys[i as usize - 1]).is_some() {
                        removed
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(i - 1);
                    }
                }
                if i % 16 == 0 {
                    time::sleep(ms(1)).await;
                } else {
                    tokio::task::yield_now().await;
                }
            }
        })
    };
    let consumer = {
        let q = q.clone();
        tokio::spawn(async move {
            let mut out = Vec::new();
            loop {
                let next = poll_fn(|cx| {
                    let mut q = q.lock().unwrap_or_else(|e| e.into_inner());
                    match q.poll_expired(cx) {
                        Poll::Ready(Some(e)) => Poll::Ready(Some(e)),
                        // Empty for now: the producer may insert more.
                        Poll::Ready(None) => Poll::Pending,
                        Poll::Pending => Poll::Pending,
                    }
                });
                match time::timeout(secs(5), next).await {
                    Ok(Some(e)) => {
                        let now = Instant::now();
                        assert!(now >= e.deadline(), "{} early", e.get_ref());
                        out.push(e.into_inner());
                    }
                    _ => return out,
                }
            }
        })
    };
    producer.await.unwrap_or_else(|e| panic!("{e}"));
    let out = consumer.await.unwrap_or_else(|e| panic!("{e}"));
    let removed = removed.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut seen = vec![0u32; N as usize];
    for v in &out {
        seen[*v as usize] += 1;
    }
    for i in 0..N {
        let want = u32::from(!removed.contains(&i));
        assert_eq!(
            seen[i as usize], want,
            "{i}: out {} times",
            seen[i as usize]
        );
    }
    assert!(q.lock().unwrap_or_else(|e| e.into_inner()).is_empty());
}

// ---------------------------------------------------------------------------------------
// Differential: a waiting task driven by the same script, against tokio-util
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Op {
    /// Insert the next value, due this many ms from now.
    Insert(u64),
    /// Reset the pending entry picked by the index (modulo the pending ones) to ms from now.
    Reset(usize, u64),
    /// Remove the pending entry picked by the index.
    Remove(usize),
    /// Clear the queue.
    Clear,
    /// One poll with the noop waker (an entry it returns is recorded).
    PollNoop,
    /// Wait this many ms in a `select!` with `next()` (the task's own waker).
    Wait(u64),
    /// One poll with the task's waker after the task spent its cooperative budget.
    CoopPoll,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u64..40).prop_map(Op::Insert),
        3 => (any::<usize>(), 0u64..40).prop_map(|(i, d)| Op::Reset(i, d)),
        2 => any::<usize>().prop_map(Op::Remove),
        1 => Just(Op::Clear),
        2 => Just(Op::PollNoop),
        6 => (0u64..15).prop_map(Op::Wait),
    ]
}

/// [`op`], and now and then a [`Op::CoopPoll`].
fn op_with_coop() -> impl Strategy<Value = Op> {
    prop_oneof![20 => op(), 2 => Just(Op::CoopPoll)]
}

/// Runs `ops` against a fresh queue (each of the two is the same source text) and returns
/// what came out: (ms since the start, value), sorted, plus removed values in order.
macro_rules! run_script {
    ($queue:ty, $ops:expr) => {{
        let mut q = <$queue>::new();
        let start = Instant::now();
        // (value, key) of the entries this queue still holds, in insertion order.
        let mut pending = Vec::new();
        let mut out: Vec<(u128, u32)> = Vec::new();
        // Per entry out: what breaks "never early" or "at most a driver turn late", where
        // late counts from the deadline or, for one due before the task began to wait, from
        // when it began.
        let mut faults: Vec<String> = Vec::new();
        let mut removed = Vec::new();
        let mut next_value = 0u32;
        let ops: &[Op] = $ops;
        for op in ops.iter().chain(std::iter::once(&Op::Wait(100))) {
            match *op {
                Op::Insert(d) => {
                    pending.push((next_value, q.insert(next_value, ms(d))));
                    next_value += 1;
                }
                Op::Reset(i, d) if !pending.is_empty() => {
                    let (_, k) = pending[i % pending.len()];
                    q.reset(&k, ms(d));
                }
                Op::Remove(i) if !pending.is_empty() => {
                    let (v, k) = pending.remove(i % pending.len());
                    assert_eq!(*q.remove(&k).get_ref(), v);
                    removed.push(v);
                }
                Op::Clear => {
                    q.clear();
                    pending.clear();
                }
                // Polls until nothing is due: a single poll would take one of several equal
                // deadlines, which tokio-util yields in no documented order (in fact LIFO).
                Op::PollNoop => {
                    while let Poll::Ready(Some(e)) =
                        q.poll_expired(&mut Context::from_waker(Waker::noop()))
                    {
                        let (now, due) = (Instant::now(), e.deadline());
                        let v = e.into_inner();
                        if now < due {
                            faults.push(format!("{v} early: {:?} before its deadline", due - now));
                        }
                        pending.retain(|&(p, _)| p != v);
                        out.push((start.elapsed().as_millis(), v));
                    }
                }
                Op::CoopPoll => {
                    let got = poll_fn(|cx| {
                        spend_budget(cx);
                        let mut got = Vec::new();
                        while let Poll::Ready(Some(e)) = q.poll_expired(cx) {
                            let (now, due) = (Instant::now(), e.deadline());
                            if now < due {
                                faults.push(format!("{:?} early", e.get_ref()));
                            }
                            got.push(e.into_inner());
                        }
                        Poll::Ready(got)
                    })
                    .await;
                    for v in got {
                        pending.retain(|&(p, _)| p != v);
                        out.push((start.elapsed().as_millis(), v));
                    }
                }
                Op::Wait(d) => {
                    let waiting_since = start.elapsed().as_millis();
                    let until = time::sleep(ms(d));
                    let mut until = pin!(until);
                    loop {
                        tokio::select! {
                            biased;
                            Some(e) = q.next() => {
                                let (now, due) = (Instant::now(), e.deadline());
                                let from = (due - start).as_millis().max(waiting_since);
                                let at = (now - start).as_millis();
                                if now < due || at > from + 1 {
                                    faults.push(format!(
                                        "{:?} out at {at} ms, due {:?}, waited from {waiting_since} ms",
                                        e.get_ref(),
                                        due - start,
                                    ));
                                }
                                let v = e.into_inner();
                                pending.retain(|&(p, _)| p != v);
                                out.push((start.elapsed().as_millis(), v));
                            }
                            () = &mut until => break,
                        }
                    }
                }
                Op::Reset(..) | Op::Remove(_) => {}
            }
        }
        assert!(pending.is_empty() && q.is_empty(), "all out after 100 ms");
        out.sort_unstable();
        (out, removed, faults)
    }};
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// The same script gives the same values at the same times as tokio-util's queue.
    #[test]
    fn a_waiting_task_sees_what_tokio_util_shows(ops in proptest::collection::vec(op(), 1..60)) {
        let ours = paused_runtime().block_on(async { run_script!(DelayQueue<u32>, &ops) });
        let theirs = paused_runtime()
            .block_on(async { run_script!(tokio_util::time::DelayQueue<u32>, &ops) });
        prop_assert_eq!(ours, theirs);
    }

    /// With polls made after the task spent tokio's cooperative budget, the two queues may
    /// legitimately differ in when an entry comes out (a poll without budget takes out
    /// what is due if the queue's sleep has ended without one: tokio-util's ends so on a
    /// reset, not on its first arm), and then in which entry "the second pending" names.
    /// What must hold for both: every entry out once (or removed), none early, none more
    /// than a driver turn after its deadline or after the task began to wait for it.
    #[test]
    fn with_the_budget_spent_a_waiting_task_gets_every_entry_once_on_time(
        ops in proptest::collection::vec(op_with_coop(), 1..60),
    ) {
        let ours = paused_runtime().block_on(async { run_script!(DelayQueue<u32>, &ops) });
        let theirs = paused_runtime()
            .block_on(async { run_script!(tokio_util::time::DelayQueue<u32>, &ops) });
        for (who, (out, removed, faults)) in [("tickwheel", ours), ("tokio-util", theirs)] {
            prop_assert!(faults.is_empty(), "{}: {:?}", who, faults);
            let mut values: Vec<u32> = out.iter().map(|&(_, v)| v).chain(removed).collect();
            values.sort_unstable();
            let all = values.len();
            values.dedup();
            prop_assert_eq!(values.len(), all, "{}: a value out twice: {:?}", who, out);
            if !ops.iter().any(|op| matches!(op, Op::Clear)) {
                let inserted = ops.iter().filter(|op| matches!(op, Op::Insert(_))).count();
                prop_assert_eq!(all, inserted, "{}: an entry neither out nor removed", who);
            }
        }
    }
}

/// Found by the budget-spent proptest: the task's budget spent by an earlier poll of the
/// same task poll, the queue's first sleep armed for an instant the driver has passed came
/// out only at the next driver turn, where tokio-util's (whose reset ends such a sleep at
/// once) yields the entry in that poll; a reset picking "the second pending entry" then
/// picked different entries.
#[test]
fn the_first_sleep_armed_in_the_past_ends_without_budget() {
    use Op::{CoopPoll, Insert, PollNoop, Reset, Wait};
    #[rustfmt::skip] // one script a line
    let scripts = [
        vec![Wait(1), Insert(1), Insert(0), PollNoop, Reset(1, 0)],
        vec![Wait(1), CoopPoll, Insert(1), Insert(0), PollNoop, Reset(1, 0)],
        vec![Insert(5), Wait(1), Insert(0), CoopPoll, Reset(1, 0)],
    ];
    for ops in scripts {
        let ours = paused_runtime().block_on(async { run_script!(DelayQueue<u32>, &ops) });
        let theirs = paused_runtime()
            .block_on(async { run_script!(tokio_util::time::DelayQueue<u32>, &ops) });
        assert_eq!(ours, theirs, "{ops:?}");
    }
}
