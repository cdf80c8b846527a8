//! A hierarchical timer wheel for programs that hold very many timers and cancel most of
//! them: a mail transfer agent's deferred queues, connection idle timeouts, request deadlines,
//! retry back-off, job schedulers.
//!
//! Insert, cancel and reset are O(1) on a wheel of 11 levels × 64 slots. The wheel covers every
//! `u64` deadline without clamping (Varghese & Lauck 1987, "Hashed and hierarchical timing
//! wheels"; the level layout of tokio's timer wheel). Every timer lives in an arena entry
//! stamped with a generation. So a key whose timer fired, was cancelled or was reset elsewhere
//! is rejected; it never reaches another timer. On top of the wheel, a sharded, thread-safe
//! scheduler of named queues pops due timers in two phases. A queue drain that runs while the
//! dispatcher holds timers gets back exactly the pending ones, and is told which are in flight.
//!
//! # Which type for which job
//!
//! | job | type | module |
//! |---|---|---|
//! | timers on your own tick counter, single-threaded, deterministic | [`Wheel<T>`] | [`wheel`] |
//! | the same with `std::time::Instant` deadlines | [`TimerWheel<T>`] | [`clock`] |
//! | cancel or reset by your own id ("message 42") instead of a key | [`IndexedWheel<K, T>`] | [`indexed`] |
//! | many threads, named queues, dispatch outside the lock, drains, freezes | [`sync::Scheduler`] | [`sync`] |
//! | a drop-in for `tokio_util::time::DelayQueue` | `tokio::DelayQueue` | `tokio` (feature `tokio`) |
//! | an async dispatcher stream for the scheduler | `tokio::DueStream` from `Scheduler::due_stream` | `tokio` (feature `tokio`) |
//! | requests waiting, with deadlines, for scarce capacity (bytes, slots) | [`admission::AdmissionQueue`], [`admission::WaitQueue`] | [`admission`] |
//!
//! The rows are the layers, in order, one module (and folder of `src/`) each:
//! 1 [`wheel`], 2 [`clock`], 3 [`indexed`], 4 [`sync`], 5 `tokio`, 6 [`admission`]. A lower
//! layer never depends on a higher one. [`Wheel`] has no clock, no lock and no allocation
//! beyond its arena and slots. Admission uses only layers 1 and 2; its async `acquire_async`
//! is in [`admission`] too (feature `tokio`). The separate crate
//! [`tickwheel-redis`](https://docs.rs/tickwheel-redis) moves a frozen queue to another host
//! through Redis.
//!
//! # Guarantees
//!
//! - **Never early**: a timer never fires before its deadline tick.
//! - **Never skipped**: once `poll(now)` returns `None`, no pending timer has a deadline at or
//!   before `now`, whatever the cadence of polls.
//! - **Order**: deadline order; equal deadlines in insertion order for timers never reset.
//! - **Stale keys are harmless**: no operation through a stale key touches another timer. None
//!   panics, except where a drop-in API must panic as the original does; each such method of
//!   `tokio::DelayQueue` has a `try_*` twin.
//! - **Foreign keys almost always miss**: a key of another wheel answers like a stale one. The
//!   exception is a pair of wheels whose generation offsets happen to lie close: about
//!   `R / 2^31` of pairs, for indexes reused fewer than `R` times. It never happens between two
//!   of a process's first 2^32 wheels driven alike. Nor does it between two made one after the
//!   other among its first 4 096, below 65 536 reuses of an index. [`TimerKey`] states the
//!   exact rule; keep keys with their wheel where the answer must be certain.
//! - **Whole range**: any `u64` deadline; past deadlines fire on the next poll.
//! - **Bounded memory**: references left behind by cancels are bounded in proportion to the
//!   live timers ([`Wheel::stats`] gives the exact bound). `shrink_to_fit` gives memory back.
//! - **Exactly once** (scheduler): every scheduled timer ends exactly once. It is delivered
//!   through a [`sync::Due`], or returned by `cancel`, `drain_queue`, `freeze_queue` or
//!   `take_forwarded`. In-flight timers are reported, not lost.
//!
//! Each module's documentation states its own contract in full ([`wheel`], [`clock`],
//! [`sync`], [`admission`], and `tokio`).
//!
//! # One example per layer
//!
//! [`Wheel`]: ticks are whatever you say they are; here, milliseconds.
//!
//! ```
//! use tickwheel::Wheel;
//!
//! let mut wheel = Wheel::new();
//! let retry = wheel.insert(30_000, "retry message 42");
//! let idle = wheel.insert(5_000, "close idle connection");
//!
//! wheel.reset(idle, 65_000); // traffic: push the idle timeout later, O(1), no garbage
//! assert_eq!(wheel.cancel(retry), Some("retry message 42"));
//! assert_eq!(wheel.cancel(retry), None); // a stale key is harmless
//!
//! assert!(wheel.poll(64_999).is_none()); // never early
//! let fired = wheel.poll(70_000).unwrap();
//! assert_eq!((fired.deadline, fired.value), (65_000, "close idle connection"));
//! ```
//!
//! [`TimerWheel`]: `Instant` deadlines round up to the next tick, `now` rounds down.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use tickwheel::TimerWheel;
//!
//! let start = Instant::now();
//! let mut timers = TimerWheel::with_origin(start, Duration::from_millis(1));
//! let key = timers.insert_at(start + Duration::from_micros(10_500), "ping"); // tick 11
//! assert!(timers.poll(start + Duration::from_millis(10)).is_none());
//! let fired = timers.poll(start + Duration::from_millis(11)).unwrap();
//! assert_eq!((fired.key, fired.deadline), (key, 11));
//! ```
//!
//! [`IndexedWheel`]: your id is the key.
//!
//! ```
//! use tickwheel::IndexedWheel;
//!
//! let mut retries = IndexedWheel::new();
//! retries.insert("msg-42", 30_000, "example.com");
//! retries.insert("msg-43", 10_000, "example.org");
//! assert_eq!(retries.cancel("msg-43"), Some("example.org"));
//! assert!(retries.reset("msg-42", 60_000));
//! assert_eq!(retries.poll(60_000), Some(("msg-42", "example.com")));
//! ```
//!
//! [`sync::Scheduler`]: queues, two-phase dispatch and a drain that meets timers in flight.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use tickwheel::sync::{Cancel, Scheduler};
//!
//! let t0 = Instant::now();
//! let sched = Scheduler::builder().origin(t0).build();
//! let secs = Duration::from_secs;
//! sched.schedule("example.com", 1, t0 + secs(60), "message 1").unwrap();
//! sched.schedule("example.org", 2, t0 + secs(5), "message 2").unwrap();
//! sched.schedule("example.org", 3, t0 + secs(5), "message 3").unwrap();
//!
//! // Phase one: the dispatcher pops what is due; those ids are now in flight.
//! let mut batch = sched.pop_due(t0 + secs(10), 64);
//! let first = batch.next().unwrap();
//! assert_eq!(*first.id(), 2);
//!
//! // A drain while 2 is taken and 3 sits in the batch takes neither, and says so.
//! let drained = sched.drain_queue(&"example.org");
//! assert!(drained.cancelled.is_empty());
//! assert_eq!(drained.in_flight.len(), 2);
//! assert!(matches!(sched.cancel(&2), Cancel::InFlight));
//!
//! // Phase two, outside the lock. Dropping the batch puts untaken timers back.
//! assert_eq!(first.into_value(), "message 2");
//! drop(batch);
//! assert_eq!(sched.drain_queue(&"example.org").cancelled, vec![(3, "message 3")]);
//! assert_eq!(sched.len(), 1);
//! ```
//!
//! [`admission`]: a FIFO wait queue of expiring tickets over a local and a global limit.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use tickwheel::admission::{AdmissionQueue, Limit, Order};
//!
//! let global = Limit::new(1024); // KiB for the whole process
//! let conn = AdmissionQueue::with_options(256, Some(global.clone()), Order::Strict, Duration::from_millis(1));
//! let permit = conn.acquire(64, Instant::now() + Duration::from_millis(50)).unwrap();
//! assert_eq!(global.available(), 1024 - 64);
//! drop(permit); // gives the 64 back and grants waiters in FIFO order
//! ```
//!
//! `tokio::DelayQueue` (feature `tokio`): change the `use` line of a program written for
//! tokio-util's.
//!
//! ```
//! # #[cfg(feature = "tokio")]
//! # mod example {
//! use std::time::Duration;
//! use futures_util::StreamExt;
//! use tickwheel::tokio::DelayQueue; // was: use tokio_util::time::DelayQueue;
//!
//! #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # pub
//! async fn main() {
//!     let mut idle = DelayQueue::new();
//!     let conn_a = idle.insert("connection a", Duration::from_secs(30));
//!     idle.insert("connection b", Duration::from_secs(30));
//!     idle.reset(&conn_a, Duration::from_secs(90)); // a packet arrived on a
//!     assert_eq!(idle.next().await.unwrap().into_inner(), "connection b");
//!     assert!(idle.try_remove(&conn_a).is_some());
//!     assert!(idle.try_remove(&conn_a).is_none()); // stale key: None, not another entry
//! }
//! # }
//! # #[cfg(feature = "tokio")]
//! # fn main() { example::main() }
//! # #[cfg(not(feature = "tokio"))]
//! # fn main() {}
//! ```
//!
//! (`start_paused` needs tokio's `test-util` feature; real code leaves it out.) The
//! scheduler's async dispatcher, `Scheduler::due_stream`, has its example in the `tokio`
//! module.
//!
//! # Feature flags
//!
//! None is on by default; the core has three dependencies (hashbrown, parking_lot and, on
//! x86, safe_arch).
//!
//! | feature | adds |
//! |---|---|
//! | `tokio` | the `tokio` module (`DelayQueue`, `Scheduler::due_stream`) and `AdmissionQueue::acquire_async` |
//! | `serde` | `Serialize`/`Deserialize` for the scheduler's handoff snapshot (`sync::snapshot`) |
//! | `metrics` | gauges, counters and a lateness histogram through the `metrics` facade ([`sync::observe`]) |
//! | `tracing` | a `tracing` event per drain, freeze, unfreeze and import ([`sync::observe`]) |
//!
//! Neither `metrics` nor `tracing` costs anything when off. The minimum supported Rust
//! version is 1.85.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod admission;
pub mod clock;
pub mod indexed;
mod loom;
mod parts;
pub mod sync;
#[cfg(test)]
mod test_tasks;
#[cfg(feature = "tokio")]
pub mod tokio;
pub mod wheel;

pub use clock::TimerWheel;
pub use indexed::IndexedWheel;

pub use wheel::{CapacityError, Expired, TimerKey, Wheel, WheelStats};
