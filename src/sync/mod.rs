//! Layer 4: [`Scheduler<Q, K, T>`], a thread-safe scheduler with named queues, two-phase
//! dispatch, and drains that reconcile with in-flight dispatch.
//!
//! This is the layer the crate exists for. A dispatcher pops due timers under a lock and
//! delivers them outside it. An operator may drain a whole queue at any moment, including the
//! moment between the two. Here that moment has a name, **in flight**, and every operation says
//! what it does with it.
//!
//! Beside it, [`crate::admission`] (layer 6) is a layer of its own: a FIFO wait queue of
//! expiring, cancellable tickets for scarce capacity.
//!
//! # Ground rules
//!
//! **States of an id.** Ids are spread over shards by hash. In its shard an id is in exactly
//! one state:
//!
//! ```text
//!              schedule, import              pop_due               Due dropped or into_value
//!   (absent) ─────────────────▶ PENDING ──────────────▶ IN FLIGHT ─────────────▶ (absent)
//!                               │ ▲ ▲ │ reschedule        │   │                  = delivered
//!   cancel, drain, freeze_queue │ │ │ └────┘              │   │
//!   = returned to the caller ◀──┘ │ └─────────────────────┘   │ the same, while its
//!                                 │  DueBatch dropped with    │ queue is frozen
//!                  unfreeze_queue │  the item untaken, or     ▼
//!                                 │  Due::retry_at       FORWARDED ──▶ take_forwarded,
//!                                 └─────────────────────────┘          cancel, drain
//!                                                                      = returned
//! ```
//!
//! | operation | pending id | forwarded id | in-flight id | absent id |
//! |---|---|---|---|---|
//! | `schedule` | `Err(Pending)` | `Err(Pending)` | `Err(InFlight)` | pending |
//! | `import` | in `present` | in `present` | in `present` | pending |
//! | `reschedule` | moved | `Err(Frozen)` | `Err(InFlight)` | `Err(NotFound)` |
//! | `cancel` | `Cancelled(value)`, absent | `Cancelled(value)`, absent | `InFlight`, unchanged | `NotFound` |
//! | `drain_queue` | in `cancelled`, absent | in `cancelled`, absent | in `in_flight`, unchanged | — |
//! | `freeze_queue` | in `pending`, absent | unchanged | in `in_flight`, unchanged | — |
//! | `take_forwarded` | — | taken, absent | — | — |
//! | `unfreeze_queue` | — | pending | — | — |
//! | `pop_due` | in flight, if due | — (never due) | — | — |
//! | `Due::retry_at` | — | — | pending (forwarded if frozen) | — |
//! | `hold_queue` | unchanged (parked once due) | unchanged | unchanged | — |
//! | `release_queue` | parked ones due at once | unchanged | unchanged | — |
//! | `set_concurrency` | parked once due at the limit | unchanged | counts against it | — |
//! | `set_rate` | parked once due while throttled | unchanged | unchanged | — |
//! | `flush_queue` | due now, if later (order kept) | unchanged | unchanged | — |
//! | `pop_due_queue` | in flight, if due and permitted | — | — | — |
//!
//! **Held queues** (flow control; see [`Scheduler::hold_queue`]). A hold marks the queue in
//! each shard, as a freeze does, but the queue keeps accepting: its timers stay pending.
//! `pop_due` hands none of them out. The first merge that meets one due **parks** it: out of
//! the wheel, onto the queue's parked list in its shard. So it is looked at once, not on every
//! poll. A parked timer is pending to every other operation (`cancel`, `drain_queue`,
//! `freeze_queue`, `reschedule`, `len`, `lookup`); `queue_counts` shows it in `parked`.
//! `release_queue` stages the parked timers, due at once, in delivery order. Hold and release
//! cost O(shards) plus the parked timers moved; they never walk the queue. Hold and freeze are
//! independent marks: a freeze takes parked timers like any pending ones and leaves the hold.
//!
//! **Concurrency limits** ([`Scheduler::set_concurrency`]). A queue with a limit has one flow
//! record shared by the shards. Its atomics hold the limit, its hand-outs in flight and its
//! parked timers. `pop_due` takes a slot for each timer it hands out, under the timer's shard
//! lock. A due timer that finds no slot is parked like a held one. A slot comes back when the
//! `Due` is done, retried or put back. If a member is parked, the record is then listed *freed*
//! (a leaf lock) and the pollers are woken. The next `pop_due` first makes the earliest parked
//! timers due, one per free slot.
//!
//! A **rate limit** ([`Scheduler::set_rate`]) lives in the same record: GCRA over the `now`
//! given to `pop_due`, one compare-and-swap per hand-out. A due timer the rate refuses is
//! parked. The queue then gets a *throttle wake-up* at its next permitted instant, which
//! `next_deadline` and the sleeping dispatcher count like a deadline. The `pop_due` at or after
//! it makes the parked timers due, as many as the rate and the slots permit. Lock order: the
//! flow table's lock is taken alone; the freed list's, the throttle list's and a record's name
//! lock are leaves.
//!
//! **Looking without taking.** `lookup` (one id: queue, state, deadline), `with_value`,
//! `queue_members` and `queue_counts` change nothing. `queue_members` gives a queue's members,
//! states and deadlines, in delivery order; `queue_counts` gives pending, in flight and
//! forwarded. Like the counts, they settle the done lists first, so a `Due` already done is
//! never reported in flight.
//!
//! **Lookups by borrowed form.** Every method that looks an id or a queue name up takes any
//! borrowed form of it, as `HashMap::get` does (`&str` for a `String`): `K: Borrow<B>` or
//! `Q: Borrow<B>`. The id's shard is picked by hashing the borrowed form, which `Borrow`
//! requires to hash as the owned one. `freeze_queue` keeps a copy of the queue name, so it asks
//! for `B: ToOwned<Owned = Q>`. `import` takes the name as `schedule` does, or a reference that
//! clones into one ([`IntoQueue`]).
//!
//! Into a frozen queue, `schedule` is `Err(Frozen)` and `import` puts the entry in `refused`,
//! whatever the id's state. The freeze is checked first, in the id's shard.
//!
//! **Frozen queues** (for moving a queue to another host; see [`Scheduler::freeze_queue`]). A
//! freeze marks the queue in each shard and, under the same lock, takes its pending members
//! there. While the mark stays, nothing of the queue is pending in that shard. `schedule` and
//! `import` into it are refused with the value back. A member that comes back from the
//! dispatcher (`Due::retry_at`, or a `DueBatch` dropped with it untaken) is **forwarded**: held
//! with its value, never due. It stays so until `take_forwarded` hands it over or
//! `unfreeze_queue` makes it pending again. Forwarded timers are in the scheduler's custody. So
//! they count like pending ones in `len`, `queue_len`, `stats().pending` and `queues()`, and on
//! their own in `stats().forwarded`. They do not count in `next_deadline` or `in_flight_len`.
//! `cancel` and `drain_queue` return them. A drain of a frozen queue finds nothing else
//! pending, and reports its in-flight members as usual. `queue_in_flight` lists what a handoff
//! waits for.
//!
//! **Exactly once.** Every timer accepted by `schedule` (or `import`) ends exactly once, in one
//! of two ways:
//! - *delivered*: its `Due` came out of `pop_due` and was dropped or consumed;
//! - *returned*: its value came back from `cancel`, in `Drained::cancelled`, in
//!   `Frozen::pending` or from `take_forwarded`.
//!
//! A `Due::retry_at` does not end the timer: it stays, pending or forwarded. Never both, never
//! neither. The only way out of pending is a transition made under the shard lock. Each
//! transition removes the id from the state it leaves, and nothing but the `Due` ends the
//! in-flight state. A done `Due` puts its timer on its shard's *done list*. The shard settles
//! that list under its lock before anything can tell the difference (see "Two phases"). A timer
//! in flight is *reported* (`Cancel::InFlight`, `Drained::in_flight`), never returned. A
//! drained or cancelled id can be scheduled again at once; an in-flight id once its `Due` is
//! done. Timers are never delivered before their deadline.
//!
//! A `Due` that is dropped counts as delivered, whether or not the handler finished. A
//! `DueBatch` dropped with untaken items (a handler panicked) puts those back: they were never
//! handed over. So a drain that listed them as in flight did not get them. They are delivered
//! by a later `pop_due`, or returned by a later cancel or drain.
//!
//! # Two phases
//!
//! ```text
//!   dispatcher                                  other threads
//!   ──────────                                  ─────────────
//!   pop_due(now, limit)
//!     lock shard 0, 1, … n-1 (ascending)
//!     merge the shards' due timers
//!     mark them IN FLIGHT                       cancel(id)      → InFlight
//!     unlock all                                drain_queue(q)  → listed in in_flight
//!   ─── phase two: no lock held ───             schedule(id)    → Err(InFlight)
//!   for due in batch:
//!     handler(due)
//!     drop(due): push its entry on the
//!       shard's done list (own lock)            schedule(id)    → Ok again
//! ```
//!
//! A done `Due` does not lock its shard: it pushes its entry onto the shard's **done list**.
//! The shard *settles* the list under its lock: it finishes every entry listed, and the id
//! leaves the shard. It does so before any answer could differ. Every lock taken for counts,
//! `queues`, `stats` and `pop_due` settles first. `schedule`, `reschedule`, `cancel` and
//! `drain_queue` settle when they meet an in-flight id of their own. So the done `Due` is
//! finished at the moment it was dropped, for every observer. The dispatcher pays one shard
//! lock per `pop_due` instead of one per timer.
//!
//! **Lock order.** Shard mutexes are only ever taken in ascending shard index. Each shard
//! publishes a *due bound* when its lock is released: an atomic saying that no timer of the
//! shard is due before this tick. `pop_due` takes, in that order, the shards whose due bound
//! says a timer may be due. It takes all of them if a shard passed over turns out due once
//! those are held. It settles each, merges, and releases them together. With nothing due it
//! takes no lock. Every other operation holds one shard at a time; `drain_queue`, `len` and
//! friends visit the shards one after another. A shard's done-list lock is a leaf: taken alone
//! by a `Due`, or under that shard's lock to settle. The lock of the wake-up signal is a leaf
//! too: it is never held together with a shard lock. The signal wakes sleeping pollers when an
//! earlier deadline arrives.
//!
//! **User code under a lock.** Of the user's code, only the `Hash`, `Eq` and `Clone` impls of
//! `Q` and `K` run under a shard lock. They must not call back into the scheduler:
//! `parking_lot` locks are not reentrant, so that deadlocks. They should not panic: the locks
//! do not poison, so a panic there can leave that shard's bookkeeping half-updated.
//!
//! `Drop` of `Q`, `K` and `T` never runs under a lock, so an id or queue name whose `Drop`
//! calls the scheduler is fine. Values are moved in there, never dropped. A locked operation
//! moves what it removes of ids and queue names into a buffer (`Trash`), and drops that buffer
//! after releasing the lock. The buffer takes the shard's copies of the id and the queue name
//! of a timer cancelled, drained, refused by `schedule` or finished by a settle. It also takes
//! an empty queue's name, a put-back or retried item's id, and a lifted freeze mark. No code of
//! `Q`, `K` or `T` runs under a done-list lock. The signal's lock is held while a stored task
//! `Waker` is cloned, compared or replaced; that is the async runtime's code, not `Q`, `K` or
//! `T`.
//!
//! # Order and determinism
//!
//! `pop_due` returns timers in *delivery order*: deadline tick, then `seq`. `seq` is a global
//! counter taken under the shard lock at `schedule` and `reschedule`. So equal deadlines come
//! out in schedule order, even across shards. `pop_due` merges the shards with a heap of each
//! shard's next due timer, polling one timer out of a shard's wheel to compare it. A timer
//! looked at but not taken (the batch was full) is kept in the shard's *staged* set of pending,
//! due timers. That set is ordered by `(tick, seq)`, and the next merge reads it first. A
//! dropped batch puts its untaken items there too. So the result of a sequence of calls does
//! not depend on the shard count or on hashing. Drains return their lists in the same order.
//! `queues()` lists queues by their oldest current member: the lowest `seq` among the queue's
//! timers pending or in flight, over all shards.
//!
//! One exemption: `stats()` describes how the timers are stored, and some of its figures depend
//! on the shard count. These are its wheel figures and `due_waiting`, the pending timers that
//! sit in the staged sets (up to one per shard after a `pop_due` that stopped at its limit).
//! Its `pending`, `in_flight` and `queues` do not depend on the shard count.
//!
//! Deadlines are `Instant`s, converted to ticks of the chosen resolution. A deadline rounds up
//! and `now` rounds down, so a timer is never early (see [`crate::clock`] for the rounding
//! rules). The edges:
//! - a deadline at or before the origin is tick 0, due at the first `pop_due` at or after the
//!   origin;
//! - a `now` before the origin finds nothing due;
//! - a deadline whose tick saturates never fires: it stays pending until cancelled or drained,
//!   because `now` saturates one tick lower. That is a deadline `u64::MAX` ticks or more after
//!   the origin: 584 years at 1 ns resolution, 584 million years at 1 ms.
//!
//! # How it is checked
//!
//! Two ways, each seeing what the other cannot.
//!
//! A test-only **exhaustive-interleaving harness** checks the states and answers. It enumerates
//! every interleaving of small per-thread step sequences. The steps are schedule, reschedule,
//! cancel and `pop_due`; taking, dropping and retrying `Due`s; dropping a half-taken batch;
//! each shard's step of a drain, a freeze, a `take_forwarded`, an unfreeze, a hold and a
//! release; and whole `set_concurrency` and `flush_queue` calls. It replays each interleaving
//! on a real scheduler and checks every step's answer against a sequential reference. At the
//! end it checks exactly-once: no timer both delivered and handed over, none left out.
//!
//! Its unit of interleaving is the critical section, the real unit here. All shared state is
//! touched only under a shard lock or a done-list lock, and each step above is one critical
//! section. Dropping a `Due` is its push onto the done list. The harness checks the counts
//! between steps without settling, so the settles happen inside the steps that meet done ids,
//! as in real use. One exception: a dropped batch puts its timers back one shard at a time, and
//! the harness takes it as one step. Only another `pop_due` could tell the difference. It would
//! see timers put back on some shards and not yet on others, never a timer lost or doubled. The
//! wake-up protocol uses atomics outside the locks, so it is enumerated at the granularity of
//! each atomic access. Two deliberately broken pollers are shown to be caught.
//!
//! What the harness cannot see is how the code takes its locks and orders its atomics. Its
//! steps run in one thread, so every access is sequentially consistent there. That is checked
//! with **loom**. The scheduler takes its atomics, mutexes and condition variable from one
//! crate-internal module, which re-exports loom's under `--cfg loom`. Five models run the real
//! code on real threads, under every interleaving and every outcome the memory model allows
//! (within a preemption bound):
//! - an earlier `schedule` racing `pop_due`'s lock-free due check;
//! - a done `Due` racing a settle and a `schedule` of its id;
//! - a poller going to sleep racing a `schedule`;
//! - a stream replacing its waker racing a wake;
//! - the dispatcher's shutdown racing a `schedule`.
//!
//! They live in the test-only `tests` module. Each is shown to catch a planted fault: a store
//! moved after an unlock, or a critical section split in two. The crate's threaded stress test
//! adds real concurrency at scale, counting every timer in and out.
//!
//! # For the async layer
//!
//! With the `tokio` feature, `Scheduler::due_stream` (in the `tokio` module) drives a scheduler
//! from a task instead of a thread. It uses crate-internal hooks: a task waker, woken when the
//! earliest deadline may have moved earlier, and the scheduler's tick clock. `sync` never
//! imports tokio.

// Where things live:
// core.rs         Inner (the shared state), Shard and DoneHome: types that contain each other
// shard.rs        ShardState, one shard's timers and queues under its lock; its files:
//   shard/done_list.rs   the done list: in-flight entries whose Due is done, until settled
//   shard/pop.rs         the shard's part of pop_due, and the end of the in-flight state
//   shard/freeze.rs      the shard's part of freezing: marks, forwarded timers
//   shard/flow.rs        the shard's part of flow control: hold marks, limits, parked timers
//   shard/{ids,queues,inspect,memory,check}.rs
// scheduler.rs    Scheduler: schedule, reschedule, cancel, drain, counts;
//   scheduler/{pop,inspect,hooks}.rs
// freeze/         freezing a queue: the public types, and the Scheduler's operations
// flow/           flow control per queue: hold and release, the concurrency limit's
//                 shared record (flow/limit.rs)
// due.rs          Due and DueBatch, what pop_due hands out
// dispatcher.rs   the dispatcher thread (spawn_dispatcher)
// signal.rs       the wake-up protocol between producers and pollers
// builder.rs, types.rs, inspect.rs, observe.rs, snapshot.rs, hash.rs, trash.rs
// order.rs        in_order: drained and frozen timers into delivery order
// padded.rs       Padded: a value alone in its cache lines
// tests/          test-only: unit tests, the interleaving harness, the loom models

mod builder;
mod core;
mod dispatcher;
mod due;
mod flow;
mod freeze;
mod hash;
mod inspect;
pub mod observe;
mod order;
mod padded;
mod scheduler;
mod shard;
mod signal;
#[cfg(feature = "serde")]
pub mod snapshot;
#[cfg(test)]
mod tests;
mod trash;
mod types;

/// The admission layer's former path, kept for code written against 0.1.0; it is
/// [`crate::admission`].
#[doc(hidden)]
pub use crate::admission;
pub use builder::SchedulerBuilder;
pub use dispatcher::DispatcherHandle;
pub use due::{Due, DueBatch};
pub use flow::{FlowPolicy, RateLimit};
pub use freeze::{Frozen, FrozenEntry, Imported, IntoQueue, Retried, RetryError};
pub use inspect::{IdInfo, IdState, Member, QueueCounts};
pub use scheduler::Scheduler;
#[cfg(feature = "tokio")]
pub(crate) use signal::PollerId;
pub use types::{
    BuildError, Cancel, Drained, MAX_SHARDS, RescheduleError, ScheduleError, SchedulerStats,
};
