//! Peer adapters and workloads shared by `benches/wheel.rs` (criterion) and
//! `examples/compare/` (the side-by-side table). One copy, included by `#[path]` from both.
//!
//! # The peers, and what each figure includes
//!
//! Every peer stores the same payload (the timer's *lane*, a `u64`), receives deadlines as
//! milliseconds converted beforehand (outside the timed region) into the type its API takes,
//! and is driven by the same generic workload code (`workloads.rs`), so harness costs are the
//! same for all. A structure that offers a capacity hint gets `n` (the number of timers) in
//! the timing workloads; the memory workload builds each one without a hint. `nexus-timer`
//! has no capacity hint: its only sizing knob is the slab's chunk size, which gets `n` (one
//! chunk holds the whole workload), and its README's 4096 in the memory workload.
//!
//! Times are the thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`, see [`thread_cpu_ns`]) of the
//! timed region only: building the structure, converting deadlines and the setup steps of a
//! workload (the inserts before a cancel, say) are outside it; page faults of the peer's
//! memory first touched inside it are in (the harness's own buffer of fired lanes is written
//! once before, so its faults are not). A poll hands the harness the lanes that fired; the
//! harness checksums them (sequentially) and, only for the two peers whose keys must be handed back
//! after firing (`nexus-timer`'s handles, tokio's dead `Sleep` boxes), releases the key.
//! Everyone else's fired keys are simply overwritten later, as a caller would.
//!
//! | peer | insert | cancel | reset | expiry |
//! |------|--------|--------|-------|--------|
//! | `tickwheel` | [`Wheel::insert`] | [`Wheel::cancel`] | [`Wheel::reset`] | [`Wheel::poll`] until `None` |
//! | `TimerWheel` | `insert_at` (precomputed `Instant`) | `cancel` | `reset_at` | `poll(Instant)` until `None` |
//! | `DelayQueue` | `insert_at` (precomputed `Instant`) | `try_remove` | `reset_at` | `poll_expired` until `Pending`, after advancing tokio's paused clock |
//! | `tickwheel DelayQueue` | as `DelayQueue`: the same adapter code, on the same runtime | | | |
//! | `tokio Sleep` | `Box::pin(sleep_until)` + one poll (registration is lazy) | drop | `Sleep::reset` | the paused clock's `advance`; the driver wakes each fired `Sleep`'s waker |
//! | `nexus-timer` | `schedule` | `cancel` | `reschedule` | `poll_and_rebalance` (the poll its docs recommend for steady polling), then `free` of each fired handle (handles must be consumed) |
//! | `timer-queue` | `insert` | `remove` (checks the lane it returns) | `reset` | `poll` until `None` |
//! | `hhwt` | `insert` of an `IdOnlyTimerEntry` (relative delay) | `cancel(id)` (lazy) | cancel + insert (no reset API) | `tick` per ms, `skip` over empty ticks (`can_skip`) |
//! | `BTreeMap` | `insert((deadline, seq), v)` | `remove` | remove + insert | `pop_first` while due |
//! | `BinaryHeap` | push, value in a generation-checked slab | lazy: bump the generation | lazy cancel + push | pop, skipping stale entries |
//!
//! `tickwheel` is the core `Wheel<u64>` with tick deadlines: the reference column of every
//! ratio. `TimerWheel` and `tickwheel DelayQueue` are the like-for-like columns: the same
//! wheel behind the `Instant` API and behind the drop-in for tokio-util's `DelayQueue`, so the
//! figure against `DelayQueue` can be read API for API. `tickwheel DelayQueue` needs the
//! `tokio` feature (`--features tokio`); without it the column is left out.
//!
//! tokio peers run inside a current-thread runtime started with a paused clock (entered for
//! the whole workload, so `Sleep`s and `Instant::now` find it). A poll at tick `t` is one
//! `block_on` that advances that clock to `t` (`tokio::time::advance`, which yields once so
//! the driver processes its wheel) and, for `DelayQueue`, drains `poll_expired` until
//! `Pending`, under `tokio::task::unconstrained` (tokio's co-operative budget would otherwise
//! cut a long drain short with a `Pending` that only means "yield"). The fixed cost of one
//! such `block_on` is measured on an empty runtime in the same process and subtracted per
//! poll, for both `DelayQueue`s alike: it is the test clock's cost, not the timers'. For
//! `tokio Sleep`, each fired timer wakes a waker that pushes its lane into a mutex-guarded vector: the stand-in for waking a
//! task, which is what a real `Sleep` does.
//!
//! `hierarchical_hash_wheel_timer` (`hhwt`) takes delays relative to its own clock, which only
//! moves by `tick`/`skip`; its ids are the lanes. `nexus-timer` (1.5) places a timer at the
//! level its distance calls for and, in `poll_and_rebalance`, moves the entries of a coarse
//! slot that comes due down to finer levels; its bare `poll` does not, and then re-walks
//! coarse slots on every call, which is why its docs recommend `poll_and_rebalance` for
//! steady polling and the adapter uses it.
//!
//! # Budget, and the checks
//!
//! A run that exceeds its time budget stops at the next check and reports the cost per
//! operation of the part it completed (marked `~` in the table): an estimate, not a bound.
//!
//! Every run, stopped or not, is checked (outside the timed region) against what the script
//! says should have happened up to where it stopped: the number of timers cancelled, and the
//! lanes fired with the tick of the poll that returned each (count and checksum), so an early,
//! late, missing or duplicate fire shows as a mismatch (`!` in the table). Workload 1 has
//! nothing to fire in its timed region: after it, one untimed poll past the last deadline
//! must fire every lane once.

#![allow(dead_code)]

pub mod scheduler;

mod baselines;
mod cpu_time;
mod hhwt;
mod input;
mod memory;
mod nexus;
mod tickwheel;
mod timer_queue;
mod tokio;
mod workloads;

pub use self::baselines::{BTree, LazyHeap};
pub use self::hhwt::Hhwt;
pub use self::nexus::NexusTimer;
pub use self::tickwheel::{Tickwheel, TimerWheelPeer};
pub use self::timer_queue::TimerQueue;
#[cfg(feature = "tokio")]
pub use self::tokio::TickwheelDelayQueue;
pub use self::tokio::{TokioDelayQueue, TokioSleep};
// Each includer uses its own subset of what follows (the bench neither memory nor `median`).
#[allow(unused_imports)]
pub use self::cpu_time::thread_cpu_ns;
#[allow(unused_imports)]
pub use self::input::{Churn, Input};
#[allow(unused_imports)]
pub use self::memory::{bytes_per_timer, churn_heap};
#[allow(unused_imports)]
pub use self::workloads::{Outcome, Tally, Workload, median, run};

/// Deadlines are uniform over this many ticks (60 s at 1 ms).
pub const SPAN: u64 = 60_000;
/// Resets per timer in the reset-heavy workload.
pub const RESETS: usize = 100;
/// Ticks between two rounds of resets in the reset-heavy workload.
pub const ROUND_TICKS: u64 = 10;
/// Fraction of churn timers cancelled before they fire.
pub const CHURN_CANCEL: f64 = 0.99;
/// Operations of the churn workload per timer.
pub const CHURN_OPS_PER_TIMER: u64 = 10;
/// Idle polls measured by the idle-poll workload.
pub const IDLE_POLLS: u64 = 20_000;

// ---------------------------------------------------------------------------------------------
// The peer interface
// ---------------------------------------------------------------------------------------------

/// One timer structure under test, as its documentation intends it to be used.
pub trait Peer: Sized {
    /// Column name in the table.
    const NAME: &'static str;
    /// What `insert` returns and `cancel`/`reset` take.
    type Key;
    /// The deadline type of the API (converted outside the timed region).
    type Deadline: Copy;

    /// An empty structure at tick 0 for timers on `lanes` lanes (`0..lanes`), with a capacity
    /// hint. Called inside [`Peer::with_context`].
    fn new(lanes: usize, capacity: usize) -> Self;
    /// The API's deadline for tick `ms`.
    fn deadline(&self, ms: u64) -> Self::Deadline;
    fn insert(&mut self, deadline: Self::Deadline, lane: u64) -> Self::Key;
    /// Cancels a pending timer; returns whether it was pending.
    fn cancel(&mut self, key: Self::Key) -> bool;
    /// Moves a pending timer to a later deadline; returns the key to use from now on.
    fn reset(&mut self, key: Self::Key, deadline: Self::Deadline) -> Self::Key;
    /// Takes out every timer due at or before tick `now`, pushing its lane into `fired`.
    fn poll(&mut self, now: u64, fired: &mut Vec<u64>);
    /// Whether the key of a timer that fired must be handed back ([`Peer::release`]) when
    /// it fires: nexus-timer's handles must be consumed, and a fired tokio `Sleep` is dropped
    /// by the task that awaited it. For the others a fired key is just forgotten (it is
    /// overwritten when its lane gets a new timer).
    const RELEASE: bool = false;
    /// Releases the key of a timer that fired.
    #[inline]
    fn release(&mut self, key: Self::Key) {
        drop(key);
    }
    /// Cost of the clock machinery per `poll` call, in ns, to subtract (tokio's paused clock).
    fn poll_overhead_ns() -> f64 {
        0.0
    }
    /// Runs a workload in the context the peer needs (a tokio runtime, or nothing).
    fn with_context<R>(f: impl FnOnce() -> R) -> R {
        f()
    }
}
