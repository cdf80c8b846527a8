//! Code shared by the `DelayQueue` integration tests (all under tokio's paused clock).

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::Stream;
use tickwheel::tokio::{DelayQueue, Expired, Key};
use tokio::task::JoinHandle;
use tokio::time::{self, Duration, Instant};

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A queue holding one entry, `value` due `timeout` from now; its key.
pub fn holding<T>(value: T, timeout: Duration) -> (DelayQueue<T>, Key) {
    let mut q = DelayQueue::new();
    let key = q.insert(value, timeout);
    (q, key)
}

/// A waker that counts its wakeups.
pub struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

pub fn counting_waker() -> (Arc<Count>, Waker) {
    let count = Arc::new(Count(AtomicUsize::new(0)));
    (count.clone(), Waker::from(count))
}

pub fn wakes(count: &Count) -> usize {
    count.0.load(Ordering::SeqCst)
}

/// Advances the paused clock by `by`, then asserts that `count`'s waker has been woken `n`
/// times in all (`why` says why that many).
pub async fn wakes_after(by: Duration, count: &Count, n: usize, why: &str) {
    time::advance(by).await;
    assert_eq!(wakes(count), n, "{why}");
}

pub fn poll_with<T>(q: &mut DelayQueue<T>, waker: &Waker) -> Poll<Option<Expired<T>>> {
    q.poll_expired(&mut Context::from_waker(waker))
}

pub fn poll_now<T>(q: &mut DelayQueue<T>) -> Poll<Option<Expired<T>>> {
    poll_with(q, Waker::noop())
}

/// Everything due now, in the order it comes out, without waiting.
pub fn drain_now<T>(q: &mut DelayQueue<T>) -> Vec<T> {
    let mut out = Vec::new();
    while let Poll::Ready(Some(e)) = poll_now(q) {
        out.push(e.into_inner());
    }
    out
}

/// Advances the paused clock by `by`, then [`drain_now`].
pub async fn drain_after<T>(q: &mut DelayQueue<T>, by: Duration) -> Vec<T> {
    time::advance(by).await;
    drain_now(q)
}

/// Lets every woken task run (the clock does not move).
pub async fn settle() {
    for _ in 0..8 {
        tokio::task::yield_now().await;
    }
}

pub async fn advance(d: Duration) {
    time::advance(d).await;
    settle().await;
}

// ---------------------------------------------------------------------------------------
// Lost wakeups, end to end: a spawned task blocked in poll_expired / Stream::next
// ---------------------------------------------------------------------------------------

pub type Shared<T> = Arc<Mutex<DelayQueue<T>>>;

/// Spawns a task that waits for the queue's next item through `Stream::poll_next`, and
/// reports it with how long it waited.
pub fn spawn_next<T: Send + 'static>(q: &Shared<T>) -> JoinHandle<(Option<T>, Duration)> {
    let q = q.clone();
    let start = Instant::now();
    tokio::spawn(async move {
        let item = poll_fn(|cx| Pin::new(&mut *q.lock().unwrap()).poll_next(cx)).await;
        (item.map(Expired::into_inner), start.elapsed())
    })
}

/// Spawns a task that waits for the next *expired entry*, treating `Ready(None)` as "nothing
/// yet" (the `select!` loop pattern).
pub fn spawn_next_entry<T: Send + 'static>(q: &Shared<T>) -> JoinHandle<(T, Duration)> {
    let q = q.clone();
    let start = Instant::now();
    tokio::spawn(async move {
        let e = poll_fn(|cx| match q.lock().unwrap().poll_expired(cx) {
            Poll::Ready(Some(e)) => Poll::Ready(e),
            _ => Poll::Pending,
        })
        .await;
        (e.into_inner(), start.elapsed())
    })
}

pub fn shared<T>(entries: &[(T, Duration)]) -> (Shared<T>, Vec<Key>)
where
    T: Clone,
{
    let mut q = DelayQueue::new();
    let keys = entries
        .iter()
        .map(|(v, d)| q.insert(v.clone(), *d))
        .collect();
    (Arc::new(Mutex::new(q)), keys)
}

/// Asserts the task is still waiting at `at_least`, then returns once it finished at `at`.
pub async fn finishes_at<R>(task: JoinHandle<R>, at_least: Duration, at: Duration) -> R {
    assert!(at_least < at);
    if !at_least.is_zero() {
        advance(at_least).await;
    }
    assert!(!task.is_finished(), "returned before {at:?}");
    advance(at - at_least).await;
    assert!(task.is_finished(), "still waiting at {at:?}: a lost wakeup");
    task.await.unwrap()
}

/// xorshift64*: deterministic, no dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n.max(1)
    }
}

/// Spends the task's cooperative budget: afterwards every tokio resource polled in this
/// task poll (a `Sleep` included) answers `Pending` and asks for the task to be polled again.
/// Returns how many units it spent (tokio's budget is 128), bounded so it cannot spin.
pub fn spend_budget(cx: &mut Context<'_>) -> usize {
    for spent in 0..10_000 {
        if std::pin::pin!(tokio::task::coop::consume_budget())
            .poll(cx)
            .is_pending()
        {
            return spent;
        }
    }
    panic!("the cooperative budget never ran out");
}

/// Polls `q` once after the task spent its cooperative budget: whether it answered
/// `Pending`. Panics if the budget was spent already.
pub async fn pending_with_budget_spent<T>(q: &mut DelayQueue<T>) -> bool {
    poll_fn(|cx| {
        assert!(spend_budget(cx) > 0);
        Poll::Ready(q.poll_expired(cx).is_pending())
    })
    .await
}

/// A counting waker after two polls of `q` with it, both `Pending` (the second answered by
/// the shortcut: the sleep armed, nothing changed); panics if either is not.
pub fn pending_twice<T>(q: &mut DelayQueue<T>) -> (Arc<Count>, Waker) {
    let (count, w) = counting_waker();
    assert!(poll_with(q, &w).is_pending());
    assert!(poll_with(q, &w).is_pending());
    (count, w)
}

/// `next()` with a bound: the value and how long it took, or `None` when the bound passed
/// first (or the queue was empty).
pub async fn next_within<T>(q: &mut DelayQueue<T>, bound: Duration) -> Option<(T, Duration)> {
    let start = Instant::now();
    match time::timeout(bound, futures_util::StreamExt::next(q)).await {
        Ok(Some(e)) => Some((e.into_inner(), start.elapsed())),
        Ok(None) | Err(_) => None,
    }
}
