//! A journal for [`tickwheel::sync::Scheduler`]: timers that survive a crash.
//!
//! [`Durable<Q, K, T>`](Durable) wraps a scheduler. It records in an embedded storage
//! engine, [redb] by default:
//!
//! - every change of custody: schedule, cancel, reschedule, drain, freeze, take_forwarded,
//!   import, and each hand-out, retry and end of a [`Due`];
//! - every change of a queue's flow control (hold, limits).
//!
//! A call documented as durable returns only once its record is on disk. Opening the journal
//! again rebuilds every queue with its ids, deadlines and values.
//!
//! # Model
//!
//! The journal keeps the **live** timers as a table keyed by id:
//!
//! - A schedule or import puts the timer's record (queue, deadline, value).
//! - A hand-out, reschedule or retry puts a small `meta` record beside it (attempt count,
//!   deadline).
//! - A timer that ends deletes both. It may end done, cancelled, drained, or handed back by
//!   a freeze or `take_forwarded`.
//!
//! So disk use follows the live timers, not the history. The engine reclaims what was
//! deleted: redb reuses the freed pages of its B-trees, and fjall's compaction drops the
//! records. A 99 %-cancel churn test checks this.
//!
//! **Custody is exactly-once, firing at-least-once.** A timer handed out is recorded with
//! its attempt count (1 the first time) before the [`Due`] reaches the caller. Say the
//! process dies while a timer is in flight. Recovery brings it back pending, and the next
//! hand-out carries the next attempt number. So a sink that remembers `(id, attempt)` can
//! tell a redelivery from a first delivery. Attempt counts never go down.
//!
//! **Deadlines** are `Instant`s in memory and UNIX microseconds on disk, rounded up. So a
//! round trip can only make a deadline later. A deadline that passed while the process was
//! down is due at once on recovery.
//!
//! # Durability modes
//!
//! | [`Durability`] | a call returns | a crash loses |
//! |---|---|---|
//! | `Sync` | after an fsync that covers its record | nothing acknowledged |
//! | `Batched(window)` (default, 1 ms) | after the next sync; syncs at most once per window, one fsync for every caller's records in it (group commit) | nothing acknowledged |
//! | `Async(window)` | at once | the changes of about the last window plus one write and fsync |
//!
//! What survives a power loss is what the engine's fsync made durable. The journal relies
//! on it (and on the disk honouring it). A killed process loses nothing that was
//! acknowledged in `Sync` or `Batched` mode. A test checks this by SIGKILLing a child
//! process at random points.
//!
//! A power loss is tested on a simulated disk under redb. At a random moment of a random
//! workload, its page cache loses every write not yet synced. (Or it keeps a random half of
//! those pages, as a kernel that wrote some back on its own leaves them.) The journal
//! recovered from what is left must hold every acknowledged change.
//!
//! A call that changes custody returns `Err` when the journal failed (engine error) or is
//! closed. The change is then not acknowledged. The journal refuses every later change, and
//! re-opening it recovers what is on disk.
//!
//! # Recovery bound
//!
//! [`Durable::open`] works in three steps:
//!
//! 1. It lets the engine recover its own files.
//! 2. It reads the `meta` table: timers handed out, rescheduled or retried and not yet ended.
//! 3. It makes one pass over the live timer records, scheduling each. The engine's scan runs
//!    on a helper thread; decoding and scheduling run on the caller's.
//!
//! The cost is O(live timers) plus the tombstones not yet compacted away. It is never the
//! history of the journal. redb has no log to replay: a commit rewrites the B-tree's pages
//! and its header. With fjall, the engine's part replays its write-ahead log. The journal
//! caps that log at 64 MiB, a constant. (fjall starts a new log file past 64 MB and flushes
//! the oldest tables when the logs pass the cap.) [`Durable::open_with_progress`] reports
//! progress on the way.
//!
//! # Dispatching
//!
//! [`Durable::pop_due`] hands out a [`DueBatch`] whose hand-outs are already durable.
//! [`Durable::spawn_dispatcher`] runs that in a thread, like `Scheduler::spawn_dispatcher`.
//! The thread sleeps until the next deadline and is woken by earlier ones. Each [`Due`] ends
//! in one of three ways:
//!
//! - [`Due::done`], which waits for its record;
//! - being dropped, which records without waiting;
//! - [`Due::retry_at`].
//!
//! # Types
//!
//! Queues, ids and values are stored with serde, encoded by postcard. Postcard writes
//! varints and no field names: a `u64` id of a million takes 3 bytes. serde is required
//! rather than a feature: a journal cannot store what it cannot encode. Two equal ids must
//! encode equally (true of every derived `Serialize`). The journal finds a timer's record by
//! its id's encoding.
//!
//! **Flow control is recorded too.** [`Durable::hold_queue`], [`Durable::release_queue`],
//! [`Durable::set_concurrency`] and [`Durable::set_rate`] keep a queue's hold and limits in a
//! third table. Recovery applies them before it schedules a single timer. So a held queue
//! stays held across a crash (as Postfix's hold queue does). The rate's position is not
//! recorded: after a crash a rate-limited queue may hand out its burst at once.
//!
//! Calls made on [`Durable::scheduler`] directly are not recorded by themselves. But each
//! recorded change stores the queue's whole policy as the scheduler then has it. So a hold
//! or limit set directly becomes durable with the next recorded change of that queue.
//!
//! **Not recorded:**
//!
//! - freeze marks: after a crash a frozen queue comes back unfrozen, its forwarded timers
//!   pending (the pending timers a freeze handed back are the caller's);
//! - attempt counts across a handoff (`import` starts them at 0).
//!
//! # Engine
//!
//! redb 5 (copy-on-write B-trees, one file, no log) and fjall 3 (an LSM tree) were measured
//! side by side with `cargo run --release -p tickwheel-bench --example journal`.
//! ([The performance report](https://github.com/tickwheel/tickwheel/blob/main/PERFORMANCE.md)
//! has the tables.) The setup was a shared 2-vCPU guest, 1 M timers, two producers,
//! `Batched(1 ms)`. There:
//!
//! - redb recovered 3.6–5.5× faster than fjall in every run (1.5–2.5 M timers/s after a
//!   clean close; fjall replays its write-ahead log first);
//! - redb took 48.7 B/timer on disk against 70;
//! - redb wrote between 1.5× and 0.6× as fast (0.18–0.52 M durable schedules/s, the spread
//!   is the shared machine's);
//! - under a 99 %-cancel churn both kept their tables bounded.
//!
//! redb is the default because a restart is where durable schedulers are slow today. Its
//! writes keep up only because the journal's table keys keep sequential ids together
//! (below). With postcard's scattering varints as keys, redb wrote 2.7× slower than fjall.
//! fjall is available with the `fjall` feature through [`Options::engine`].
//!
//! **Keys.** A timer's table key encodes its id so that ids that follow each other sort
//! next to each other:
//!
//! - integers big-endian and fixed-width;
//! - strings and byte strings with a length prefix;
//! - enums by variant index.
//!
//! Keys are never decoded; the record carries the id's postcard encoding.
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
//! [redb]: https://docs.rs/redb

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod clock;
mod codec;
mod dispatcher;
mod due;
mod durable;
mod error;
mod keycodec;
mod recover;
mod store;
mod writer;

#[cfg(test)]
mod tests;

pub use dispatcher::DurableDispatcher;
pub use due::{Due, DueBatch};
pub use durable::{Durable, Options, Slot};
pub use error::{Error, Result};
pub use store::{DiskUsage, Engine, disk_usage};
pub use writer::{Durability, WriterStats};
