//! Drop-in compatibility: the same scripted sequence of operations, run against
//! `tokio_util::time::DelayQueue` and `tickwheel::tokio::DelayQueue` under tokio's paused
//! clock, must give the same outputs.
//!
//! Both queues are driven through one trait whose two implementations are the *same source
//! text* (a macro), so this file also checks that a program compiles unchanged against both.
//!
//! What is compared, and what is not (the documented differences):
//! - every entry's value, when it comes out (which drain, at which time), its key, and its
//!   deadline, `len`, `is_empty`, `deadline(&key)`, `remove`/`try_remove` results, `peek`;
//! - not the deadline of an entry scheduled in the past: tokio-util moves it up to its
//!   internal clock, we keep it as asked;
//! - not the order *within* one drain: tokio-util yields equal deadlines and past entries
//!   in no documented order (in fact LIFO); we yield in deadline then insertion order, which
//!   is asserted for our queue on its own;
//! - not `peek` while an entry scheduled in the past is pending (the same LIFO).
//!
//! The script never uses a stale key: tokio-util would act on whatever entry reuses its slot.
#![cfg(feature = "tokio")]

mod support;

use std::task::{Context, Poll, Waker};

use support::delay_queue::Rng;
use tokio::time::{self, Duration, Instant};

/// The surface a program uses; implemented below by the same code for both queues.
trait Queue {
    type Key: Copy + PartialEq + std::fmt::Debug;
    fn new() -> Self;
    fn insert(&mut self, v: u32, d: Duration) -> Self::Key;
    fn insert_at(&mut self, v: u32, at: Instant) -> Self::Key;
    fn reset(&mut self, k: &Self::Key, d: Duration);
    fn reset_at(&mut self, k: &Self::Key, at: Instant);
    fn remove(&mut self, k: &Self::Key) -> (u32, Instant, Self::Key);
    fn try_remove(&mut self, k: &Self::Key) -> Option<(u32, Instant, Self::Key)>;
    fn deadline(&self, k: &Self::Key) -> Instant;
    fn peek(&self) -> Option<Self::Key>;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool;
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Option<(u32, Instant, Self::Key)>>;
}

macro_rules! impl_queue {
    ($queue:ty, $key:ty) => {
        impl Queue for $queue {
            type Key = $key;
            fn new() -> Self {
                <$queue>::new()
            }
            fn insert(&mut self, v: u32, d: Duration) -> $key {
                self.insert(v, d)
            }
            fn insert_at(&mut self, v: u32, at: Instant) -> $key {
                self.insert_at(v, at)
            }
            fn reset(&mut self, k: &$key, d: Duration) {
                self.reset(k, d)
            }
            fn reset_at(&mut self, k: &$key, at: Instant) {
                self.reset_at(k, at)
            }
            fn remove(&mut self, k: &$key) -> (u32, Instant, $key) {
                let e = self.remove(k);
                (*e.get_ref(), e.deadline(), e.key())
            }
            fn try_remove(&mut self, k: &$key) -> Option<(u32, Instant, $key)> {
                self.try_remove(k)
                    .map(|e| (*e.get_ref(), e.deadline(), e.key()))
            }
            fn deadline(&self, k: &$key) -> Instant {
                self.deadline(k)
            }
            fn peek(&self) -> Option<$key> {
                self.peek()
            }
            fn len(&self) -> usize {
                self.len()
            }
            fn is_empty(&self) -> bool {
                self.is_empty()
            }
            fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Option<(u32, Instant, $key)>> {
                self.poll_expired(cx)
                    .map(|o| o.map(|e| (*e.get_ref(), e.deadline(), e.key())))
            }
        }
    };
}

impl_queue!(
    tokio_util::time::DelayQueue<u32>,
    tokio_util::time::delay_queue::Key
);
impl_queue!(
    tickwheel::tokio::DelayQueue<u32>,
    tickwheel::tokio::delay_queue::Key
);

/// A pending entry as the script sees it.
struct Entry<K> {
    value: u32,
    key: K,
    /// Deadline in ms since the queue was created; `None` if scheduled in the past.
    deadline: Option<u64>,
}

/// Runs the script for `seed` against `Q` and returns its observable log.
async fn run<Q: Queue>(seed: u64, steps: usize, ours: bool) -> Vec<String> {
    let mut rng = Rng(seed);
    let start = Instant::now();
    let mut q = Q::new();
    let mut pending: Vec<Entry<Q::Key>> = Vec::new();
    let mut log = Vec::new();
    let mut next_value = 0u32;
    let rel = |at: Instant| at.duration_since(start).as_millis() as u64;
    for _ in 0..steps {
        let now = rel(Instant::now());
        match rng.below(12) {
            0..=3 => {
                let d = fresh_delay(&mut rng, &pending, now);
                let value = next_value;
                next_value += 1;
                let key = if rng.below(2) == 0 {
                    q.insert(value, Duration::from_millis(d.max(0) as u64))
                } else {
                    q.insert_at(value, shift(Instant::now(), d))
                };
                pending.push(Entry {
                    value,
                    key,
                    deadline: (d >= 0).then(|| now + d as u64),
                });
            }
            4 | 5 if !pending.is_empty() => {
                let i = rng.below(pending.len() as u64) as usize;
                let d = fresh_delay(&mut rng, &pending, now);
                if rng.below(2) == 0 {
                    q.reset(&pending[i].key, Duration::from_millis(d.max(0) as u64));
                } else {
                    q.reset_at(&pending[i].key, shift(Instant::now(), d));
                }
                pending[i].deadline = (d >= 0).then(|| now + d as u64);
            }
            6 if !pending.is_empty() => {
                let i = rng.below(pending.len() as u64) as usize;
                let e = pending.swap_remove(i);
                let (value, deadline, key) = if rng.below(2) == 0 {
                    q.remove(&e.key)
                } else {
                    q.try_remove(&e.key).expect("a pending key")
                };
                let deadline = e.deadline.map(|_| rel(deadline));
                log.push(format!(
                    "remove {value}: deadline {deadline:?}, key ok {}",
                    key == e.key
                ));
                assert_eq!((value, deadline), (e.value, e.deadline));
            }
            7 => {
                let peek = pending
                    .iter()
                    .all(|e| e.deadline.is_some())
                    .then(|| q.peek());
                let peeked = peek.map(|k| k.map(|k| (value_of(&pending, k), rel(q.deadline(&k)))));
                log.push(format!(
                    "len {} empty {} peek {peeked:?}",
                    q.len(),
                    q.is_empty()
                ));
                if let Some(e) = pending.iter().find(|e| e.deadline.is_some()) {
                    log.push(format!(
                        "deadline of {} = {}",
                        e.value,
                        rel(q.deadline(&e.key))
                    ));
                }
            }
            8 => time::advance(Duration::from_millis(1 + rng.below(300))).await,
            _ => {
                time::advance(Duration::from_millis(rng.below(120))).await;
                let batch = drain(&mut q).await;
                if ours {
                    assert_in_order(&batch);
                }
                let mut out: Vec<String> = Vec::new();
                for (value, deadline, key) in batch {
                    let i = pending
                        .iter()
                        .position(|e| e.value == value)
                        .expect("a pending value");
                    let e = pending.swap_remove(i);
                    let deadline = e.deadline.map(|_| rel(deadline));
                    assert_eq!(deadline, e.deadline, "value {value}");
                    out.push(format!("{value}@{deadline:?}/key ok {}", key == e.key));
                }
                out.sort();
                log.push(format!("t={} drained {out:?}", rel(Instant::now())));
            }
        }
    }
    log
}

/// A delay in ms (negative: in the past), such that deadlines of entries scheduled in the
/// future stay distinct: tokio-util orders equal deadlines its own way.
fn fresh_delay<K>(rng: &mut Rng, pending: &[Entry<K>], now: u64) -> i64 {
    loop {
        let d = match rng.below(10) {
            0 => -(rng.below(200) as i64),
            1 => rng.below(400_000) as i64, // beyond level 1 of both wheels
            _ => rng.below(2_000) as i64,
        };
        let taken = d >= 0 && pending.iter().any(|e| e.deadline == Some(now + d as u64));
        if !taken {
            return d;
        }
    }
}

fn shift(now: Instant, d: i64) -> Instant {
    if d >= 0 {
        now + Duration::from_millis(d as u64)
    } else {
        now - Duration::from_millis(d.unsigned_abs())
    }
}

fn value_of<K: PartialEq>(pending: &[Entry<K>], key: K) -> u32 {
    pending
        .iter()
        .find(|e| e.key == key)
        .map(|e| e.value)
        .expect("peek names a pending entry")
}

/// Everything the queue yields now. A `Pending` gets one more chance after the runtime has
/// run its timers (tokio-util may need that to see its sleep fire).
async fn drain<Q: Queue>(q: &mut Q) -> Vec<(u32, Instant, Q::Key)> {
    let mut out = Vec::new();
    let mut retried = false;
    loop {
        match q.poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(Some(e)) => out.push(e),
            Poll::Ready(None) => return out,
            Poll::Pending if retried => return out,
            Poll::Pending => {
                for _ in 0..4 {
                    tokio::task::yield_now().await;
                }
                retried = true;
            }
        }
    }
}

/// Our contract within one drain: deadline order, never early.
fn assert_in_order<K>(batch: &[(u32, Instant, K)]) {
    for pair in batch.windows(2) {
        assert!(
            pair[0].1 <= pair[1].1,
            "deadline order: {} then {}",
            pair[0].0,
            pair[1].0
        );
    }
    if let Some(last) = batch.last() {
        assert!(
            last.1 <= Instant::now(),
            "{} came out before its deadline",
            last.0
        );
    }
}

#[tokio::test(start_paused = true)]
async fn the_same_script_gives_the_same_outputs() {
    for seed in [3u64, 11, 42, 1_000_003] {
        let theirs = run::<tokio_util::time::DelayQueue<u32>>(seed, 600, false).await;
        let ours = run::<tickwheel::tokio::DelayQueue<u32>>(seed, 600, true).await;
        assert_eq!(theirs.len(), ours.len(), "seed {seed}");
        for (i, (a, b)) in theirs.iter().zip(&ours).enumerate() {
            assert_eq!(a, b, "seed {seed}, log line {i}: tokio-util vs tickwheel");
        }
        // The script must exercise expiry: many entries out, some drains of several at once.
        let drained: Vec<usize> = ours
            .iter()
            .filter_map(|l| l.split_once(" drained "))
            .map(|(_, b)| b.matches('@').count())
            .collect();
        let (out, multi) = (
            drained.iter().sum::<usize>(),
            drained.iter().filter(|&&n| n > 1).count(),
        );
        assert!(
            out > 80 && multi > 10,
            "seed {seed}: {out} entries out, {multi} multi-entry drains"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_spelled_out_scenario_matches() {
    async fn scenario<Q: Queue>() -> Vec<String> {
        let start = Instant::now();
        let mut q = Q::new();
        let a = q.insert(1, Duration::from_millis(30));
        q.insert_at(2, start + Duration::from_millis(10));
        let c = q.insert(3, Duration::from_millis(20));
        q.reset(&a, Duration::from_millis(5)); // a moves ahead of everything
        q.remove(&c);
        let mut log = vec![format!(
            "len {}, peek is a: {}",
            q.len(),
            q.peek() == Some(a)
        )];
        time::advance(Duration::from_millis(10)).await;
        for (v, d, _) in drain(&mut q).await {
            log.push(format!("{v} at {:?}", d - start));
        }
        log.push(format!("empty: {}, peek: {:?}", q.is_empty(), q.peek()));
        log
    }
    let theirs = scenario::<tokio_util::time::DelayQueue<u32>>().await;
    let ours = scenario::<tickwheel::tokio::DelayQueue<u32>>().await;
    assert_eq!(theirs, ours);
    assert_eq!(
        ours,
        [
            "len 2, peek is a: true",
            "1 at 5ms",
            "2 at 10ms",
            "empty: true, peek: None"
        ]
    );
}

/// The panicking key methods are a drop-in: for a key whose entry was removed (its slot not
/// yet reused), `remove`, `reset`, `reset_at` and `deadline` panic in both queues, and
/// `try_remove` answers `None` in both. (With the slot reused, tokio-util acts on the new
/// entry instead; ours still panics: the documented difference, not compared here.)
#[tokio::test(start_paused = true)]
async fn a_removed_key_panics_in_both_queues() {
    fn panics(f: impl FnOnce()) -> bool {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err()
    }
    fn outcomes<Q: Queue>() -> Vec<bool> {
        let mut q = Q::new();
        let keep = q.insert(1, Duration::from_secs(1));
        let gone = q.insert(2, Duration::from_secs(2));
        q.remove(&gone);
        let out = vec![
            panics(|| _ = q.remove(&gone)),
            panics(|| q.reset(&gone, Duration::from_secs(3))),
            panics(|| q.reset_at(&gone, Instant::now())),
            panics(|| _ = q.deadline(&gone)),
            q.try_remove(&gone).is_none(),
            q.len() == 1 && q.try_remove(&keep).is_some(),
        ];
        out
    }
    let theirs = outcomes::<tokio_util::time::DelayQueue<u32>>();
    let ours = outcomes::<tickwheel::tokio::DelayQueue<u32>>();
    assert_eq!(theirs, ours);
    assert_eq!(ours, [true; 6]);
}
