//! The run: producer threads queue messages, one dispatcher delivers what is due, an
//! operator thread drains, bounces and suspends, all on one shared
//! `tickwheel::sync::Scheduler<u32, u32, Msg>` (queue number, message id, message).
//!
//! # The simulated clock
//! MTA time is a counter of nanoseconds that only the dispatcher moves: it jumps straight
//! to the scheduler's `next_deadline`, pops, delivers, and jumps again, so hours of MTA time
//! pass in seconds. Two watermarks keep that jump honest:
//! - each producer publishes the arrival time of the next message it has not queued yet,
//!   and the dispatcher stays below the smallest of them (no message is queued into the
//!   dispatcher's past), while producers stay at most `LEAD` ahead of the dispatcher;
//! - the operator publishes its next action's time plus `SLACK`, and the dispatcher stays at
//!   or below it, so an action happens at its planned time, give or take `SLACK`, *while the
//!   dispatcher keeps popping and delivering*: drains meet messages in flight.
//!
//! Every deadline is therefore in the future when it is scheduled, and the dispatcher pops
//! at the exact instant of the next deadline: lateness measures only the scheduler.
//!
//! # The real clock
//! MTA time is wall-clock time divided by `--scale`. The scheduler's own dispatcher (tokio's
//! `due_stream` or the thread of `spawn_dispatcher`, see `real.rs`) waits for each deadline
//! and calls `dispatch`; producers and the operator sleep until their times. Lateness is
//! real.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};
use std::thread;
use std::time::{Duration, Instant};

use tickwheel::sync::{Cancel, Due, Scheduler};

use crate::args::{Args, ClockMode, DispatcherKind};
use crate::flow::Flow;
use crate::ledger::{Ledger, State};
use crate::real;
use crate::report::Histogram;
use crate::workload::{ActionKind, Workload, nanos};

/// How far ahead of the dispatcher producers may queue arrivals (MTA time).
const LEAD: u64 = 60_000_000_000;
/// How far past an operator action's time the dispatcher may run before the action is done;
/// also the delay before rebound messages are due (MTA time).
const SLACK: u64 = 30_000_000_000;
/// How many messages a bounce looks at to find a pending one.
const BOUNCE_SEARCH: u32 = 1024;

/// The value each timer carries.
#[derive(Debug, Clone, Copy)]
pub struct Msg {
    /// Failed delivery attempts so far.
    pub failures: u32,
    /// MTA time from which the message counts as due: its deadline, or the time it was
    /// scheduled if that deadline had already passed. Lateness is measured from here.
    pub due: u64,
}

/// The scheduler as this program uses it.
pub type Sched = Scheduler<u32, u32, Msg>;

/// Event counts, all updated with relaxed atomics.
#[derive(Debug, Default)]
pub struct Counts {
    pub schedules: AtomicU64,
    pub pops: AtomicU64,
    pub dispatched: AtomicU64,
    pub attempts: AtomicU64,
    pub failed: AtomicU64,
    pub deferred: AtomicU64,
    pub rebinds: AtomicU64,
    pub rebound: AtomicU64,
    pub transfers: AtomicU64,
    pub transferred: AtomicU64,
    pub drains_met_in_flight: AtomicU64,
    pub left_in_flight: AtomicU64,
    pub bounces: AtomicU64,
    pub bounced: AtomicU64,
    pub bounce_in_flight: AtomicU64,
    pub bounce_not_pending: AtomicU64,
    pub suspends: AtomicU64,
    pub suspended: AtomicU64,
    /// Simulated dispatcher: fruitless pops after which `next_deadline` still said "due"
    /// (a broken "never skipped"; 0 expected).
    pub stalls: AtomicU64,
    /// Simulated dispatcher: rounds spent waiting for a producer or the operator.
    pub waits: AtomicU64,
}

impl Counts {
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Relaxed)
    }

    fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Relaxed);
    }

    /// Timer operations: every schedule, cancel and `pop_due` call, plus every timer that a
    /// pop or a drain handed out.
    pub fn operations(&self) -> u64 {
        let g = Counts::get;
        g(&self.schedules)
            + g(&self.pops)
            + g(&self.dispatched)
            + g(&self.bounces)
            + g(&self.rebound)
            + g(&self.transferred)
            + g(&self.suspended)
    }
}

/// MTA time and its mapping to the `Instant`s the scheduler sees.
pub struct Clock {
    mode: ClockMode,
    start: Instant,
    /// Instant nanoseconds per MTA nanosecond: 1 when simulated, `--scale` when real.
    scale: f64,
    /// Simulated mode: the dispatcher's MTA time.
    now: AtomicU64,
}

impl Clock {
    fn new(mode: ClockMode, scale: f64) -> Clock {
        let scale = if mode == ClockMode::Simulated {
            1.0
        } else {
            scale
        };
        Clock {
            mode,
            start: Instant::now(),
            scale,
            now: AtomicU64::new(0),
        }
    }

    /// The current MTA time.
    pub fn now(&self) -> u64 {
        match self.mode {
            ClockMode::Simulated => self.now.load(Acquire),
            ClockMode::Real => (self.start.elapsed().as_nanos() as f64 / self.scale) as u64,
        }
    }

    /// The `Instant` standing for MTA time `t`.
    pub fn instant(&self, t: u64) -> Instant {
        self.start + self.span(t)
    }

    /// The `Instant` time that `mta_ns` of MTA time takes.
    pub fn span(&self, mta_ns: u64) -> Duration {
        match self.mode {
            ClockMode::Simulated => Duration::from_nanos(mta_ns),
            ClockMode::Real => Duration::from_nanos((mta_ns as f64 * self.scale) as u64),
        }
    }

    /// The MTA time of an `Instant` (simulated mode: exact).
    fn mta_time(&self, i: Instant) -> u64 {
        let ns = nanos(i.saturating_duration_since(self.start));
        match self.mode {
            ClockMode::Simulated => ns,
            ClockMode::Real => (ns as f64 / self.scale) as u64,
        }
    }

    /// Blocks until MTA time `t`: sleeps in real mode, waits for the dispatcher otherwise.
    fn wait_until(&self, t: u64) {
        match self.mode {
            ClockMode::Real => {
                let at = self.instant(t);
                let now = Instant::now();
                if at > now {
                    thread::sleep(at - now);
                }
            }
            ClockMode::Simulated => {
                let mut backoff = Backoff::default();
                while self.now() < t {
                    backoff.wait();
                }
            }
        }
    }
}

/// Spin, then yield, then sleep: for waits on another thread's watermark.
#[derive(Default)]
struct Backoff(u32);

impl Backoff {
    fn wait(&mut self) {
        self.0 += 1;
        match self.0 {
            0..16 => std::hint::spin_loop(),
            16..64 => thread::yield_now(),
            _ => thread::sleep(Duration::from_micros(20)),
        }
    }
}

/// Everything the threads share.
pub struct Sim {
    pub sched: Arc<Sched>,
    pub work: Workload,
    pub ledger: Ledger,
    pub counts: Counts,
    pub clock: Clock,
    /// Lateness of each dispatch, in scheduler-clock nanoseconds (`Instant` time).
    pub lateness: Histogram,
    /// Suspensions (holds), the limits, and their account.
    pub flow: Flow,
    /// Per producer: the arrival time of the next message it has not queued (`u64::MAX`
    /// once it is done).
    producer_next: Vec<AtomicU64>,
    /// The operator's next action time plus `SLACK` (`u64::MAX` once it is done).
    operator_next: AtomicU64,
    /// The end of the run (MTA time).
    pub end: u64,
    /// The scheduler's tick in MTA time.
    tick: u64,
    /// The dispatcher of `--clock real`.
    dispatcher: Option<DispatcherKind>,
    batch: usize,
}

impl Sim {
    /// Builds the scheduler (its tick 0 is the clock's start, so MTA time and ticks line
    /// up) and the shared state.
    /// `Err` when the scheduler refuses the shard count or resolution.
    pub fn new(args: &Args, work: Workload) -> Result<Sim, String> {
        let clock = Clock::new(args.clock, args.scale);
        let mut builder = Sched::builder()
            .origin(clock.start)
            .resolution(clock.span(nanos(args.resolution)));
        if let Some(n) = args.shards {
            builder = builder.shards(usize::from(n));
        }
        let sched = builder.try_build().map_err(|e| e.to_string())?;
        let flow = Flow::new(args.queues, args.concurrency, args.rate);
        flow.limit(&sched, args.queues, clock.span(1_000_000_000));
        Ok(Sim {
            sched: Arc::new(sched),
            ledger: Ledger::new(args.messages),
            counts: Counts::default(),
            clock,
            lateness: Histogram::default(),
            flow,
            producer_next: (0..args.threads).map(|_| AtomicU64::new(0)).collect(),
            operator_next: AtomicU64::new(0),
            end: nanos(args.duration),
            tick: nanos(args.resolution),
            dispatcher: args.dispatcher_kind(),
            batch: args.batch as usize,
            work,
        })
    }

    /// Runs producers, operator and dispatcher to the end of the run, then sweeps what is
    /// left. Calls `progress` about ten times a second from this thread.
    pub fn run(self: &Arc<Self>, mut progress: impl FnMut(&Sim)) {
        let threads = self.producer_next.len() as u32;
        let mut workers: Vec<_> = (0..threads)
            .map(|p| {
                let sim = Arc::clone(self);
                thread::spawn(move || sim.produce(p, threads))
            })
            .collect();
        let sim = Arc::clone(self);
        workers.push(thread::spawn(move || sim.operate()));
        match self.clock.mode {
            ClockMode::Simulated => {
                let sim = Arc::clone(self);
                let dispatcher = thread::spawn(move || sim.dispatch_simulated());
                while !dispatcher.is_finished() {
                    progress(self);
                    thread::sleep(Duration::from_millis(100));
                }
                dispatcher.join().expect("dispatcher thread panicked");
            }
            ClockMode::Real => {
                let kind = self
                    .dispatcher
                    .expect("the real clock has a dispatcher kind");
                let dispatcher = real::Dispatcher::start(self, kind);
                while self.clock.now() < self.end {
                    progress(self);
                    // Suspensions end here, within this loop's 100 ms.
                    self.flow.release_due(&self.sched, self.clock.now());
                    let left = self
                        .clock
                        .instant(self.end)
                        .saturating_duration_since(Instant::now());
                    thread::sleep(left.min(Duration::from_millis(100)));
                }
                dispatcher.stop();
            }
        }
        for w in workers {
            w.join().expect("producer or operator thread panicked");
        }
        progress(self);
    }

    /// Producer `p` of `threads`: queues messages p, p + threads, ... at their arrival.
    /// It queues each message up to `LEAD` before its arrival; once it is that far ahead it
    /// waits until half of `LEAD` is left, so it wakes with a batch to queue rather than
    /// sleeping once per message.
    fn produce(&self, p: u32, threads: u32) {
        let next = &self.producer_next[p as usize];
        for id in (p..self.ledger_len()).step_by(threads as usize) {
            let at = self.work.arrival(id);
            next.store(at, Release);
            if self.clock.now().saturating_add(LEAD) < at {
                self.clock.wait_until(at - LEAD / 2);
            }
            if self
                .ledger
                .take(id, State::Unborn, State::Pending, "queued")
            {
                self.schedule(self.work.queue_of[id as usize], id, at, 0);
            }
        }
        next.store(u64::MAX, Release);
    }

    fn ledger_len(&self) -> u32 {
        self.work.queue_of.len() as u32
    }

    /// Schedules `id` (already marked `Pending` in the ledger) on `queue` for MTA time
    /// `deadline`; a refusal is recorded in the ledger.
    fn schedule(&self, queue: u32, id: u32, deadline: u64, failures: u32) {
        let due = deadline.max(self.clock.now());
        Counts::add(&self.counts.schedules, 1);
        let msg = Msg { failures, due };
        let at = self.clock.instant(deadline);
        if let Err(e) = self.sched.schedule(queue, id, at, msg) {
            self.ledger.refused(id, queue, &e.to_string());
        }
    }

    /// The simulated dispatcher: jump to the next deadline (within the watermarks), pop,
    /// deliver, repeat until the end of the run.
    fn dispatch_simulated(&self) {
        let mut now = 0;
        let mut backoff = Backoff::default();
        loop {
            let horizon = self.horizon();
            let next = self.next_deadline().unwrap_or(u64::MAX);
            // The end of a suspension is an event too: the release.
            let next = next.min(self.flow.next_release());
            now = self.advance(now, next.min(horizon));
            if self.pop_and_deliver(now) > 0 {
                backoff = Backoff::default();
                continue;
            }
            if now >= self.end && horizon >= self.end {
                return; // the end, producers and operator done, nothing due at the end
            }
            // Nothing was due at `now`. If `next_deadline` was a wheel slot's cascade time,
            // the pop sharpened it and the next round jumps to the real deadline. If it still
            // says "due by now", the scheduler broke "never skipped": count it, step a tick.
            if horizon <= now {
                Counts::add(&self.counts.waits, 1);
                backoff.wait(); // for a producer or the operator to move its watermark
            } else if self.next_deadline().is_some_and(|n| n <= now) {
                Counts::add(&self.counts.stalls, 1);
                now = self.advance(now, (now + self.tick).min(horizon));
            }
        }
    }

    /// The scheduler's `next_deadline` in MTA time.
    fn next_deadline(&self) -> Option<u64> {
        self.sched.next_deadline().map(|i| self.clock.mta_time(i))
    }

    /// Moves the simulated clock to `target` if that is later; returns the new time.
    fn advance(&self, now: u64, target: u64) -> u64 {
        if target <= now {
            return now;
        }
        self.clock.now.store(target, Release);
        target
    }

    /// Pops what is due at `now` and delivers it; returns how many timers came out.
    /// Suspensions that ended by `now` are released first. Every message of the batch is
    /// in flight until dispatched, so all are counted handed out before the first goes.
    fn pop_and_deliver(&self, now: u64) -> usize {
        self.flow.release_due(&self.sched, now);
        let before = self.flow.before_pop();
        let batch: Vec<_> = self
            .sched
            .pop_due(self.clock.instant(now), self.batch)
            .collect();
        Counts::add(&self.counts.pops, 1);
        let popped = batch.len();
        for due in &batch {
            self.flow.handed_out(*due.queue(), now, Some(before));
        }
        for due in batch {
            self.dispatch(due, now);
        }
        popped
    }

    /// How far the simulated clock may go: the end of the run, below every producer's next
    /// arrival, at most the operator's next action plus `SLACK`.
    fn horizon(&self) -> u64 {
        let producers = self.producer_next.iter().map(|p| p.load(Acquire)).min();
        let producers = producers.unwrap_or(u64::MAX).saturating_sub(1);
        self.end
            .min(producers)
            .min(self.operator_next.load(Acquire))
    }

    /// Delivers one due message at MTA time `now`: on success it ends as delivered; on a
    /// failure it is re-scheduled after its back-off. (A suspended queue is held: nothing of
    /// it comes out, so nothing is deferred here.)
    pub fn dispatch(&self, due: Due<u32, u32, Msg>, now: u64) {
        Counts::add(&self.counts.dispatched, 1);
        let (queue, id) = (*due.queue(), *due.id());
        // Counted out before the `Due` ends (below), which gives the scheduler's slot back.
        self.flow.finished(queue);
        if !self
            .ledger
            .take(id, State::Pending, State::Dispatching, "dispatched")
        {
            return;
        }
        let msg = due.into_value();
        self.record_lateness(id, msg.due, now);
        let attempt = msg.failures;
        Counts::add(&self.counts.attempts, 1);
        if self.work.fails(id, attempt) {
            Counts::add(&self.counts.failed, 1);
            self.ledger.set(id, State::Pending);
            self.schedule(
                queue,
                id,
                now + self.work.backoff(id, attempt + 1),
                attempt + 1,
            );
        } else {
            self.ledger.set(id, State::Delivered);
        }
    }

    fn record_lateness(&self, id: u32, due: u64, now: u64) {
        let late_ns = match self.clock.mode {
            ClockMode::Simulated => now.checked_sub(due),
            ClockMode::Real => Instant::now()
                .checked_duration_since(self.clock.instant(due))
                .map(nanos),
        };
        match late_ns {
            Some(ns) => self.lateness.record(ns),
            None => self.ledger.early(id, due - now),
        }
    }

    /// The operator: performs the plan's actions at their times.
    fn operate(&self) {
        for action in self.work.plan() {
            self.operator_next
                .store(action.at.saturating_add(SLACK), Release);
            self.clock.wait_until(action.at);
            let now = self.clock.now().max(action.at);
            match action.kind {
                ActionKind::Rebind { queue, to } => self.drain(queue, Some(to), now),
                ActionKind::Transfer { queue } => self.drain(queue, None, now),
                ActionKind::Bounce { from } => self.bounce(self.find_pending(from)),
                ActionKind::Suspend { queue, until } => self.suspend(queue, until),
            }
        }
        self.operator_next.store(u64::MAX, Release);
    }

    /// Drains `queue`: every pending member is taken out, then re-queued on `to` (due
    /// `SLACK` from now) or, without `to`, transferred away (ends as drained). Members in
    /// flight stay with the dispatcher.
    fn drain(&self, queue: u32, to: Option<u32>, now: u64) {
        let drained = self.sched.drain_queue(&queue);
        self.note_in_flight(drained.in_flight.len());
        let n = drained.cancelled.len() as u64;
        for (id, msg) in drained.cancelled {
            if !self.ledger.take(id, State::Pending, State::Held, "drained") {
                continue;
            }
            match to {
                Some(to) => {
                    self.ledger.set(id, State::Pending);
                    self.schedule(to, id, now + SLACK, msg.failures);
                }
                None => self.ledger.set(id, State::Drained),
            }
        }
        let (actions, messages) = match to {
            Some(_) => (&self.counts.rebinds, &self.counts.rebound),
            None => (&self.counts.transfers, &self.counts.transferred),
        };
        Counts::add(actions, 1);
        Counts::add(messages, n);
    }

    fn note_in_flight(&self, in_flight: usize) {
        if in_flight > 0 {
            Counts::add(&self.counts.drains_met_in_flight, 1);
            Counts::add(&self.counts.left_in_flight, in_flight as u64);
        }
    }

    /// The first message from `from` on (wrapping) that the ledger says is pending, or
    /// `from` itself if none of the next `BOUNCE_SEARCH` is.
    fn find_pending(&self, from: u32) -> u32 {
        let n = self.ledger_len();
        (0..BOUNCE_SEARCH.min(n))
            .map(|i| ((u64::from(from) + u64::from(i)) % u64::from(n)) as u32)
            .find(|&id| self.ledger.is_pending(id))
            .unwrap_or(from)
    }

    /// Bounces one message: cancelled if still pending; in flight or already gone otherwise.
    fn bounce(&self, id: u32) {
        Counts::add(&self.counts.bounces, 1);
        match self.sched.cancel(&id) {
            Cancel::Cancelled(_) => {
                if self
                    .ledger
                    .take(id, State::Pending, State::Bounced, "bounced")
                {
                    Counts::add(&self.counts.bounced, 1);
                }
            }
            Cancel::InFlight => Counts::add(&self.counts.bounce_in_flight, 1),
            Cancel::NotFound => Counts::add(&self.counts.bounce_not_pending, 1),
        }
    }

    /// Suspends `queue` until `until`: holds it in the scheduler (it keeps accepting; none
    /// of its messages is handed out, none popped and re-deferred) until the release at
    /// `until`. Messages in flight now finish as usual.
    fn suspend(&self, queue: u32, until: u64) {
        Counts::add(&self.counts.suspends, 1);
        Counts::add(&self.counts.suspended, self.sched.queue_len(&queue) as u64);
        self.flow.suspend(&self.sched, queue, until);
    }

    /// After the run: drains every queue; each message returned is still pending. Returns
    /// (what `len()` and `in_flight_len()` said before, what the sweep found).
    pub fn sweep(&self, queues: u32) -> (usize, usize, u64) {
        let (len, in_flight) = (self.sched.len(), self.sched.in_flight_len());
        let mut found = 0;
        for queue in 0..queues {
            let drained = self.sched.drain_queue(&queue);
            found += drained.cancelled.len() as u64;
            for (id, _) in drained.cancelled {
                self.ledger
                    .take(id, State::Pending, State::Swept, "found by the final sweep");
            }
        }
        (len, in_flight, found)
    }
}
