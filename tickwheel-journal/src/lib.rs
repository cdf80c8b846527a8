//! A journal for [`tickwheel::sync::Scheduler`]: timers that survive a crash.
//!
//! [`Durable<Q, K, T>`](Durable) wraps a scheduler and records every change of custody —
//! schedule, cancel, reschedule, drain, freeze, take_forwarded, import, and each hand-out,
//! retry and end of a [`Due`] — in an embedded storage engine, [fjall] by default. A call
//! documented as durable returns only once its record is on disk. Opening the journal
//! again rebuilds every queue with its ids, deadlines and values.
//!
//! # Model
//!
//! The journal keeps the **live** timers as a table keyed by id: a schedule or import puts
//! the timer's record (queue, deadline, value); a hand-out, reschedule or retry puts a
//! small `meta` record beside it (attempt count, deadline); a timer that ends (done,
//! cancelled, drained, handed back by a freeze or `take_forwarded`) deletes both. So disk
//! use follows the live timers, not the history: the engine's own compaction drops what
//! was deleted (measured below, and tested under a 99 %-cancel churn).
//!
//! **Custody is exactly-once, firing at-least-once.** A timer handed out is recorded with
//! its attempt count (1 the first time) before the [`Due`] reaches the caller. If the
//! process dies while a timer is in flight, recovery brings it back pending, and the next
//! hand-out carries the next attempt number: a sink that remembers `(id, attempt)` can tell
//! a redelivery from a first delivery. Attempt counts never go down.
//!
//! **Deadlines** are `Instant`s in memory and UNIX microseconds on disk, rounded up, so a
//! round trip can only make a deadline later; one that passed while the process was down
//! is due at once on recovery.
//!
//! # Durability modes
//!
//! | [`Durability`] | a call returns | a crash loses |
//! |---|---|---|
//! | `Sync` | after an fsync that covers its record | nothing acknowledged |
//! | `Batched(window)` (default, 1 ms) | after the next sync; syncs at most once per window, one fsync for every caller's records in it (group commit) | nothing acknowledged |
//! | `Async(window)` | at once | the changes of about the last window plus one write and fsync |
//!
//! What survives a power loss is what the engine's fsync made durable: the journal relies
//! on it (and on the disk honouring it). A killed process loses nothing that was
//! acknowledged in `Sync` or `Batched` mode: this is tested by SIGKILLing a child process
//! at random points.
//!
//! A call that changes custody returns `Err` when the journal failed (engine error) or is
//! closed. The change is then not acknowledged; the journal refuses every later change,
//! and re-opening it recovers what is on disk.
//!
//! # Recovery bound
//!
//! [`Durable::open`] replays the engine's write-ahead log (bounded by the engine's
//! journal size), reads the `meta` table (timers handed out, rescheduled or retried and
//! not yet ended), then makes one pass over the live timer records, scheduling each:
//! O(live timers) plus the tombstones not yet compacted, never the history of the journal.
//! [`Durable::open_with_progress`] reports progress on the way.
//!
//! # Engine
//!
//! fjall (an LSM tree) and redb (copy-on-write B-trees) were measured side by side with
//! `cargo run --release -p tickwheel-bench --example journal` (see PERFORMANCE.md in the
//! repository). On a 2-vCPU guest, 1 M timers, two producers, `Batched(1 ms)`: fjall took
//! 171 000 durable schedules/s against redb's 48 000 (3.6×), recovered at 0.31 M timers/s
//! against redb's 1.29 M (0.24×: fjall's open replays its write-ahead log), and used
//! 60 B/timer on disk (23 B in tables, the rest log, capped at 64 MiB) against redb's 41.
//! fjall is the default because the write path is the hot one (every schedule, hand-out
//! and end is a write; a recovery happens once per crash); redb, with the `redb` feature
//! through [`Options::engine`], recovers 4× faster and takes less disk. Neither reaches
//! 1 M durable schedules/s here: the single writer thread that owns the engine is the
//! bound (see PERFORMANCE.md).
//!
//! # Example
//!
//! ```
//! use std::time::{Duration, Instant};
//! use tickwheel_journal::{Durable, Options};
//!
//! # fn main() -> Result<(), tickwheel_journal::Error> {
//! let dir = tempfile::tempdir().map_err(|e| tickwheel_journal::Error::Engine(e.to_string().into()))?;
//! let now = Instant::now();
//! {
//!     let sched: Durable<String, u64, String> = Durable::open(dir.path(), Options::new())?;
//!     sched.schedule("example.com".into(), 1, now, "msg 1".into())?.ok();
//!     sched.schedule("example.com".into(), 2, now + Duration::from_secs(60), "msg 2".into())?.ok();
//!     let mut batch = sched.pop_due(Instant::now(), 10)?;
//!     let due = batch.next().expect("message 1 is due");
//!     assert_eq!((due.id(), due.attempt()), (&1, 1));
//!     // The process dies here, message 1 in flight.
//!     std::mem::forget(due);
//! }
//! let sched: Durable<String, u64, String> = Durable::open(dir.path(), Options::new())?;
//! assert_eq!(sched.len(), 2);
//! let due = sched.pop_due(Instant::now(), 10)?.next().expect("message 1 is back");
//! assert_eq!((due.id(), due.attempt()), (&1, 2)); // a redelivery, and the sink can tell
//! assert_eq!(due.done()?, "msg 1");
//! # Ok(())
//! # }
//! ```
//!
//! [fjall]: https://docs.rs/fjall

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod clock;
mod codec;
mod dispatcher;
mod due;
mod durable;
mod error;
mod recover;
mod store;
mod writer;

pub use dispatcher::DurableDispatcher;
pub use due::{Due, DueBatch};
pub use durable::{Durable, Options, Slot};
pub use error::{Error, Result};
pub use store::{DiskUsage, Engine, disk_usage};
pub use writer::{Durability, WriterStats};
