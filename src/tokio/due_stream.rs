//! [`DueStream`]: the async dispatcher of a [`sync::Scheduler`](crate::sync::Scheduler) — a
//! `Stream` of its due timers, driven by one tokio `Sleep`.
//!
//! # The loop
//!
//! One `poll_next`, in the order it happens:
//!
//! ```text
//!   1 FAIR_SHARE items since the last Pending?
//!                                         → wake self, Pending   (let other tasks run)
//!   2 an item left in the batch?          → Ready(Some(item))    (no lock taken)
//!   3 batch = pop_due(tokio now, limit)   → Ready(Some(first))   (phase one: in flight)
//!   4 nothing due: arm the signal with this task's waker; E = earliest deadline
//!   5 reset the one Sleep to E (capped at MAX_SLEEP ahead) and poll it
//!                                         → Pending              (woken at E, or earlier)
//! ```
//!
//! **No lost wakeup.** Step 4 is the async form of the thread dispatcher's protocol
//! (`sync/signal.rs`): the waker is stored and the watermark raised *before* the shards are
//! read for `E`, so a timer scheduled after that read with a deadline before `E` notifies
//! the signal, which wakes this task; one scheduled before the read is part of `E`. A
//! deadline already reached by the time the sleep is polled makes the sleep ready at once;
//! the task then wakes itself and pops again. The signal forgets a waker once it has woken
//! it, so step 4 re-arms on every wait.
//!
//! **One registration per stream, dropped with it.** Each stream has its own poller id in
//! the signal; arming stores the waker of the poll under it, replacing the last one, and
//! the stream's `Drop` has the signal forget it. Otherwise the signal kept it until the
//! next notify, and many short-lived tasks each polling a stream while no earlier deadline
//! arrives would pile up wakers without bound. A stream moved to another task just
//! replaces its waker: nothing is woken.
//!
//! **A waiting stream never wakes itself.** The one self-wake on the way to `Pending` is
//! step 5's, when the sleep is already over; the next poll then reads a `now` at or past
//! `E`, so it pops `E`'s timers (or, for a slot that cascades, finds a later `E`): each
//! self-wake is one step forward, never a spin at one instant. That holds whatever the
//! origin and resolution are against tokio's millisecond grid: `E` is the instant its tick
//! begins (`origin + E·resolution`, exact), `now` rounds down to a tick, so `E` is after
//! every `now` that pops nothing; tokio ends a sleep only once its clock is at or past the
//! sleep's instant (it rounds the instant *up* to its next millisecond, and a paused clock
//! auto-advances by whole milliseconds to it). Nothing else the stream does wakes its own
//! task: in particular it never tells "another task's" waker from its own, which
//! `Waker::will_wake` cannot do reliably (see the choices below).
//!
//! **Clocks.** Deadlines are `std::time::Instant`s (the scheduler is runtime-agnostic). The
//! stream asks tokio what time it is — `tokio::time::Instant::now().into_std()` is the `now`
//! of every `pop_due` — and converts `E` back with `tokio::time::Instant::from_std`. Both
//! types hold the same instant, so this is exact; but under a paused clock (`start_paused`,
//! `time::pause`) tokio's `now` stops following `std::time::Instant::now()`: it is frozen
//! and moves only by `advance` or auto-advance. Taking `now` from tokio is what makes the
//! stream fire at the paused clock's times and makes `start_paused` tests deterministic.
//! Under a paused clock, build the scheduler with
//! `.origin(tokio::time::Instant::now().into_std())` and compute deadlines from tokio's `now`
//! too (a real-time origin lies ahead of the paused clock, and nothing is due before the
//! origin).
//!
//! **Far deadlines.** tokio's `Sleep` panics on an instant too close to the end of
//! `Instant`'s range (it rounds the deadline up by adding almost a millisecond), and a
//! scheduler with a coarse resolution can name such instants. So the sleep never reaches
//! further than [`MAX_SLEEP`] from now; at that point the stream pops (nothing), re-reads
//! the earliest deadline and sleeps again.
//!
//! **Fairness.** A backlog of due timers makes the stream ready again and again; a consumer
//! `while let Some(due) = stream.next().await` would then never yield to its runtime. After
//! [`FAIR_SHARE`] items in a row the stream answers `Pending` once, waking itself at once, so
//! other tasks on the same thread run (tokio's cooperative budget does the same for its own
//! resources; its public hook needs a newer tokio than this crate asks for).
//!
//! # Choices, and what was rejected
//!
//! - **The batch stays a `DueBatch`**, not a `Vec<Due>`: a `Due` counts as delivered when
//!   it is dropped, so a stream dropped with a `Vec` of them would lose timers; a dropped
//!   `DueBatch` puts its untaken timers back.
//! - **The stream never ends**, unlike `DelayQueue`, which answers `Ready(None)` when empty:
//!   a scheduler is shared, and a `while let` loop that stopped at the first empty moment
//!   would stop before the producers start.
//! - **Wakeups go through the scheduler's signal** (`arm_waker`), not a `tokio::sync::Notify`:
//!   the sync layer must not import tokio. `arm_waker` rather than `register_waker`
//!   narrows the watermark to this stream's target, so later deadlines cost producers one
//!   atomic load and no wakeup.
//! - **Registrations are keyed by stream, not by task.** They were once one per task,
//!   matched with `Waker::will_wake`, and a stream whose new waker did not `will_wake` the
//!   one it had armed with took it for another task's: it had the signal forget that waker
//!   and wake it, in case another stream of that task shared it. But `will_wake` may answer
//!   `false` for the very same task (std allows it, and tokio's waker does so in release
//!   builds with several codegen units, where a clone's vtable is another copy), and then
//!   every wait woke the stream's own task: a busy spin at one instant, and under a paused
//!   clock, which only auto-advances when every task waits, a hang. A combinator that wraps
//!   the waker anew on each poll did the same in every build. Keyed by stream, nothing
//!   depends on `will_wake` but a skipped clone, and a forgotten registration has nobody
//!   else to wake. The cost: two streams in one task store two wakers.

use std::fmt;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::time::{Duration, Instant};

use super::one_sleep::OneSleep;
use crate::sync::{Due, DueBatch, PollerId, Scheduler};

/// The batch limit of a new [`DueStream`]: timers taken per `pop_due`.
const DEFAULT_BATCH_LIMIT: usize = 256;

/// Items a stream yields in a row before it lets its task yield to the runtime once.
const FAIR_SHARE: usize = 128;

/// The furthest ahead the stream's `Sleep` is ever armed (see the module doc). A timer due
/// later is waited for in steps of this length: one idle `pop_due` per step.
pub(crate) const MAX_SLEEP: Duration = Duration::from_secs(7 * 24 * 3600);

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> Scheduler<Q, K, T> {
    /// An async dispatcher: a [`Stream`](futures_core::Stream) of this scheduler's due
    /// timers, in delivery order (deadline tick, then schedule order), each no earlier than
    /// its deadline. Cargo feature `tokio`.
    ///
    /// The stream sleeps on one tokio `Sleep` until the earliest deadline, and is woken early
    /// when a timer earlier than that is scheduled, rescheduled or put back — from any task
    /// or thread. It pops due timers in batches of up to 256 (see
    /// [`DueStream::batch_limit`]) and yields them one by one. Each yielded [`Due`] is in
    /// flight until it is dropped or consumed, as with [`pop_due`](Self::pop_due); the
    /// timers of the batch not yet yielded are in flight too (a drain lists them in
    /// `in_flight`, and the stream yields them). Dropping the stream puts those back as
    /// pending and due: nothing is lost.
    ///
    /// The stream never ends on its own: while it lives, a timer may be scheduled. See
    /// [`DueStream`] for how to stop it. It must be polled within a tokio runtime with the
    /// time driver enabled. Several streams (and thread dispatchers) may serve one
    /// scheduler; each timer goes to exactly one of them.
    ///
    /// # Example
    ///
    /// A dispatcher task that delivers retries until told to stop, an earlier timer waking
    /// it, and an operator drain meanwhile:
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// use futures_util::StreamExt; // or futures::StreamExt, tokio_stream::StreamExt
    /// use tickwheel::sync::Scheduler;
    /// use tokio::sync::oneshot;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let t0 = tokio::time::Instant::now().into_std(); // tokio's clock: paused here
    /// let sched = Arc::new(Scheduler::builder().origin(t0).build());
    /// let secs = Duration::from_secs;
    /// sched.schedule("example.com", 1, t0 + secs(60), "retry 1").unwrap();
    ///
    /// // The dispatcher: delivers every due timer until `stop` is sent (or dropped).
    /// let (stop, stopped) = oneshot::channel::<()>();
    /// let mut due = sched.due_stream().take_until(stopped);
    /// let dispatcher = tokio::spawn(async move {
    ///     let mut delivered = Vec::new();
    ///     while let Some(timer) = due.next().await {
    ///         delivered.push((*timer.id(), timer.into_value()));
    ///     }
    ///     delivered // `due` drops here: untaken timers would go back, pending
    /// });
    ///
    /// // The dispatcher sleeps until 60 s; an earlier timer wakes it at once.
    /// sched.schedule("example.org", 2, t0 + secs(5), "retry 2").unwrap();
    /// sched.schedule("example.org", 3, t0 + secs(90), "retry 3").unwrap();
    /// tokio::time::sleep(secs(70)).await;
    ///
    /// // An operator drains example.org: 2 went out at 5 s, 3 is still pending.
    /// let drained = sched.drain_queue(&"example.org");
    /// assert_eq!(drained.cancelled, vec![(3, "retry 3")]);
    ///
    /// stop.send(()).unwrap();
    /// assert_eq!(dispatcher.await.unwrap(), [(2, "retry 2"), (1, "retry 1")]);
    /// assert!(sched.is_empty());
    /// # }
    /// ```
    pub fn due_stream(self: &Arc<Self>) -> DueStream<Q, K, T> {
        DueStream {
            sched: Arc::clone(self),
            batch: None,
            sleep: OneSleep::default(),
            limit: DEFAULT_BATCH_LIMIT,
            streak: 0,
            poller: self.new_poller(),
            armed: false,
        }
    }
}

/// The due timers of a [`Scheduler`], as a [`Stream`](futures_core::Stream). Made by
/// [`Scheduler::due_stream`], which says what it yields and when.
///
/// # It never ends; how to stop it
///
/// `poll_next` never returns `Ready(None)`: a scheduler can always get a new timer, so "no
/// timer now" is `Pending`, not the end. (It is a
/// [`FusedStream`](futures_core::FusedStream) that is never terminated.) To stop
/// dispatching:
///
/// - **drop it** — from the task that owns it (`break` out of the loop), or by aborting
///   that task. The timers it popped but had not yielded go back, pending and due, with
///   their deadlines and order unchanged; a later stream, `pop_due` or drain gets them.
///   The waker it registered with the scheduler is removed too (not woken: the
///   registration was this stream's alone).
/// - from another task, end it with `StreamExt::take_until(shutdown)` (futures-util) or
///   `tokio::select!` on a shutdown signal, then drop it. A stream that has stopped being
///   polled but is not yet dropped still holds its untaken batch in flight.
///
/// Timers still pending stay in the scheduler either way.
///
/// # Fairness
///
/// After 128 items in a row without a `Pending`, the stream answers `Pending` once and
/// wakes its task at once, so a backlog of due timers does not keep other tasks on the
/// same runtime thread from running.
///
/// # Cancel safety
///
/// `next()` is cancel safe (e.g. in `tokio::select!`): a timer leaves the stream's batch
/// only when it is returned.
#[must_use = "a stream delivers nothing unless polled; dropping it stops this dispatcher"]
pub struct DueStream<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> {
    sched: Arc<Scheduler<Q, K, T>>,
    /// Popped and not yet yielded: in flight, ours to yield. Dropping it (with the stream)
    /// puts its untaken timers back as pending and due.
    batch: Option<DueBatch<Q, K, T>>,
    /// The one sleep, until the earliest deadline. Made the first time the stream has to
    /// wait (making a `Sleep` needs a runtime; `due_stream` does not), then only reset.
    sleep: OneSleep,
    /// Timers per `pop_due`, at least 1.
    limit: usize,
    /// Items yielded since the stream last answered `Pending` (see `FAIR_SHARE`).
    streak: usize,
    /// This stream's registration in the scheduler's signal: the waker of its last wait is
    /// stored under it.
    poller: PollerId,
    /// The stream has armed the signal at least once: its drop has a waker to forget.
    armed: bool,
}

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> DueStream<Q, K, T> {
    /// Sets how many due timers one `pop_due` takes (default 256; 0 is taken as 1). A
    /// larger batch takes the shard locks less often; a smaller one keeps fewer timers in
    /// flight inside the stream, where a drain cannot take them back. A batch already
    /// taken is unchanged.
    pub fn batch_limit(mut self, limit: usize) -> Self {
        self.limit = limit.max(1);
        self
    }

    /// The scheduler this stream dispatches for.
    pub fn scheduler(&self) -> &Arc<Scheduler<Q, K, T>> {
        &self.sched
    }

    /// Timers popped and not yet yielded: in flight, held by the stream.
    pub fn batch_len(&self) -> usize {
        self.batch.as_ref().map_or(0, ExactSizeIterator::len)
    }

    /// The next timer of the current batch; drops the batch once it is empty.
    fn take_from_batch(&mut self) -> Option<Due<Q, K, T>> {
        let due = self.batch.as_mut()?.next();
        if due.is_none() {
            self.batch = None;
        }
        due
    }

    /// Phase one: pops the timers due at `now` into the batch and yields the first.
    fn pop(&mut self, now: Instant) -> Option<Due<Q, K, T>> {
        let batch = self.sched.pop_due(now.into_std(), self.limit);
        if batch.is_empty() {
            return None;
        }
        self.batch = Some(batch);
        self.take_from_batch()
    }

    /// Arms the one sleep for `target` (capped at `MAX_SLEEP` after `now`; reset, never
    /// re-made) and polls it.
    fn poll_sleep(&mut self, target: Instant, now: Instant, cx: &mut Context<'_>) -> Poll<()> {
        // `cap + 1 s` must exist too: tokio rounds a deadline up by almost a millisecond.
        let Some(cap) = now.checked_add(MAX_SLEEP + Duration::from_secs(1)) else {
            return Poll::Pending; // the end of time: only the signal can wake us
        };
        let at = target.min(cap - Duration::from_secs(1));
        // Always polled: the stream does not track whether its waker changed.
        self.sleep.poll_at(at, cx, false)
    }

    /// `Ready` with the next due timer, or `Pending` with the task's wakeups arranged.
    fn poll_due(&mut self, cx: &mut Context<'_>) -> Poll<Due<Q, K, T>> {
        if self.streak >= FAIR_SHARE {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        if let Some(due) = self.take_from_batch() {
            return Poll::Ready(due);
        }
        let now = Instant::now();
        if let Some(due) = self.pop(now) {
            return Poll::Ready(due);
        }
        // Nothing due at `now`. Arm before reading the earliest deadline (signal.rs).
        self.armed = true;
        let Some(target) = self.sched.arm_waker(self.poller, cx.waker()) else {
            return Poll::Pending; // no timer: the next schedule wakes us
        };
        if self
            .poll_sleep(Instant::from_std(target), now, cx)
            .is_ready()
        {
            // The clock reached `target` after `now` was read, or a timer due by now came
            // in between. Pop again on the next poll rather than loop here: that poll's
            // `now` is at or past `target` (the module doc's "never wakes itself").
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }
}

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> Drop for DueStream<Q, K, T> {
    /// Forgets the stream's waker in the scheduler (see the module doc); the untaken batch
    /// then goes back as pending when the fields drop.
    fn drop(&mut self) {
        if self.armed {
            self.sched.forget_waker(self.poller);
        }
    }
}

/// Nothing in the stream is pinned in place (the sleep is boxed; the batch is only ever
/// moved out of), so it is `Unpin` whatever `Q`, `K` and `T` are: `next()` needs no pinning.
impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> Unpin for DueStream<Q, K, T> {}

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> futures_core::Stream for DueStream<Q, K, T> {
    type Item = Due<Q, K, T>;

    /// The next due timer; `Pending` until there is one. Never `Ready(None)`.
    ///
    /// # Panics
    ///
    /// When it has to wait and is not polled within a tokio runtime with the time driver
    /// enabled (as tokio's `Sleep`).
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Due<Q, K, T>>> {
        let this = self.get_mut();
        match this.poll_due(cx) {
            Poll::Ready(due) => {
                this.streak += 1;
                Poll::Ready(Some(due))
            }
            Poll::Pending => {
                this.streak = 0;
                Poll::Pending
            }
        }
    }

    /// At least the rest of the current batch; no upper bound (the stream never ends).
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.batch_len(), None)
    }
}

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> futures_core::FusedStream
    for DueStream<Q, K, T>
{
    /// Always `false`: the stream never ends.
    fn is_terminated(&self) -> bool {
        false
    }
}

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> fmt::Debug for DueStream<Q, K, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DueStream")
            .field("batch_limit", &self.limit)
            .field("batch_len", &self.batch_len())
            .field("sleep_until", &self.sleep.deadline())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::task::{Wake, Waker};

    use futures_util::StreamExt;

    use super::*;
    use crate::test_tasks::{CountWake, counting};

    /// A scheduler at tokio's (paused) `t0` whose one timer (id 1, queue "q") is an hour
    /// ahead: a stream polled now waits.
    fn one_timer_an_hour_ahead(t0: Instant) -> Arc<Scheduler<&'static str, u32, ()>> {
        let sched = Arc::new(Scheduler::builder().origin(t0.into_std()).build());
        sched
            .schedule("q", 1u32, (t0 + Duration::from_secs(3600)).into_std(), ())
            .unwrap();
        sched
    }

    #[tokio::test(start_paused = true)]
    async fn one_sleep_is_reset_never_remade() {
        let t0 = Instant::now();
        let sched = Arc::new(Scheduler::builder().shards(3).origin(t0.into_std()).build());
        for id in 0..100u64 {
            // Deadlines in wheel levels 0 to 3, out of order, several per batch.
            let at = t0 + Duration::from_millis(1 + (id * 7_919) % 600_000);
            sched.schedule(id % 3, id, at.into_std(), at).unwrap();
        }
        let mut stream = sched.due_stream().batch_limit(4);
        let mut sleeps = Vec::new();
        for _ in 0..100 {
            let due = stream.next().await.unwrap();
            assert_eq!(Instant::now(), *due.value(), "out exactly at its deadline");
            sleeps.push(stream.sleep.made);
        }
        assert!(sched.is_empty());
        assert_eq!(
            sleeps, [1; 100],
            "one sleep, made at the first wait, then reset"
        );
    }

    /// Regression: a dropped stream left its waker registered in the scheduler until
    /// the next notify, so short-lived tasks polling streams while no earlier deadline
    /// arrives piled up wakers without bound (1000 here).
    #[tokio::test(start_paused = true)]
    async fn dropped_streams_leave_no_waker_behind() {
        let t0 = Instant::now();
        let sched = Arc::new(Scheduler::builder().shards(2).origin(t0.into_std()).build());
        let hour = t0 + Duration::from_secs(3600);
        sched.schedule("q", 1u32, hour.into_std(), ()).unwrap();
        for i in 0..1000 {
            let (_count, waker) = counting(); // a task of its own
            let mut stream = sched.due_stream();
            let mut cx = Context::from_waker(&waker);
            assert!(stream.poll_next_unpin(&mut cx).is_pending());
            assert_eq!(sched.waker_count(), 1, "stream {i} waits, registered");
            drop(stream);
        }
        assert_eq!(sched.waker_count(), 0, "no waker outlives its stream");
        assert_eq!(sched.len(), 1);
    }

    /// Two streams polled by one task register once each: dropping one neither wakes the
    /// task nor touches the other's registration, so an earlier timer still wakes it.
    #[tokio::test(start_paused = true)]
    async fn dropping_one_of_two_streams_in_a_task_loses_no_wakeup() {
        let t0 = Instant::now();
        let sched = one_timer_an_hour_ahead(t0);
        let (count, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        let (mut a, mut b) = (sched.due_stream(), sched.due_stream());
        assert!(a.poll_next_unpin(&mut cx).is_pending());
        assert!(b.poll_next_unpin(&mut cx).is_pending());
        assert_eq!(sched.waker_count(), 2, "one waker per stream");
        drop(a);
        assert_eq!(count.0.load(Ordering::SeqCst), 0, "nobody to wake");
        assert_eq!(sched.waker_count(), 1, "b's stays");
        sched
            .schedule("q", 2, (t0 + Duration::from_secs(1)).into_std(), ())
            .unwrap();
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "an earlier timer wakes b's task"
        );
    }

    /// A stream polled from a new task replaces the old task's waker, without waking it.
    #[tokio::test(start_paused = true)]
    async fn a_stream_moved_to_another_task_forgets_the_old_waker() {
        let t0 = Instant::now();
        let sched = one_timer_an_hour_ahead(t0);
        let mut stream = sched.due_stream();
        let mut counts = Vec::new();
        for _ in 0..10 {
            let (count, waker) = counting();
            assert!(
                stream
                    .poll_next_unpin(&mut Context::from_waker(&waker))
                    .is_pending()
            );
            counts.push(count);
        }
        assert_eq!(sched.waker_count(), 1, "only the last task's waker");
        let woken: Vec<usize> = counts.iter().map(|c| c.0.load(Ordering::SeqCst)).collect();
        assert_eq!(woken, [0; 10], "no task woken for nothing");
    }

    /// Regression: with 16 codegen units in release, tokio's waker did not `will_wake`
    /// its own clone, and a waiting stream took its last waker for another task's, forgot
    /// it and woke it: its own task, on every wait, so it spun at one instant. Here one task
    /// polls with a new waker each time (as a combinator that wraps the waker would): a
    /// waiting stream wakes nothing and stores one waker, and wakes its task when its sleep
    /// ends, once.
    #[tokio::test(start_paused = true)]
    async fn a_new_waker_on_every_poll_wakes_nothing() {
        let t0 = Instant::now();
        let sched = Arc::new(Scheduler::builder().origin(t0.into_std()).build());
        let at = t0 + Duration::from_millis(5);
        sched.schedule("q", 1u32, at.into_std(), ()).unwrap();
        let task = Arc::new(CountWake::default());
        let mut stream = sched.due_stream();
        for _ in 0..100 {
            let wrapper = Waker::from(Arc::new(Forward(Waker::from(Arc::clone(&task)))));
            let mut cx = Context::from_waker(&wrapper);
            assert!(stream.poll_next_unpin(&mut cx).is_pending());
        }
        assert_eq!(task.0.load(Ordering::SeqCst), 0, "no wakeup while waiting");
        assert_eq!(sched.waker_count(), 1);
        tokio::time::sleep_until(at).await;
        assert_eq!(
            task.0.load(Ordering::SeqCst),
            1,
            "the sleep ends: one wakeup"
        );
        let mut cx = Context::from_waker(Waker::noop());
        assert!(stream.poll_next_unpin(&mut cx).is_ready());
    }

    /// Wakes the waker it wraps.
    struct Forward(Waker);

    impl Wake for Forward {
        fn wake(self: Arc<Self>) {
            self.0.wake_by_ref();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_sleep_never_reaches_past_max_sleep() {
        let t0 = Instant::now();
        // One tick is a large part of `Instant`'s range: tick 1 is far past any sleep (a
        // resolution whose tick 1 `Instant` cannot represent is refused).
        let sched = Arc::new(
            Scheduler::builder()
                .origin(t0.into_std())
                .resolution(Duration::from_secs(u64::MAX / 4))
                .build(),
        );
        sched
            .schedule((), 1, t0.into_std() + Duration::from_nanos(1), ())
            .unwrap();
        let mut stream = sched.due_stream();
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert!(stream.poll_next_unpin(&mut cx).is_pending(), "no panic");
        let deadline = stream.sleep.deadline();
        assert_eq!(deadline, Some(t0 + MAX_SLEEP));
        tokio::time::advance(MAX_SLEEP).await;
        assert!(stream.poll_next_unpin(&mut cx).is_pending());
        let deadline = stream.sleep.deadline();
        assert_eq!(deadline, Some(t0 + MAX_SLEEP * 2), "the next step");
    }
}
