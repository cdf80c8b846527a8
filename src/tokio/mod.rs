//! Layer 5: tokio integration (cargo feature `tokio`).
//!
//! [`DelayQueue`] is a drop-in for `tokio_util::time::DelayQueue`: the same methods,
//! argument and return types (`tokio::time::Instant`, `Duration`, [`Key`], [`Expired`]), the
//! same `Stream` implementation, the same documented semantics. To switch, change the `use`
//! line:
//!
//! ```
//! // use tokio_util::time::{DelayQueue, delay_queue::{Expired, Key}};
//! use tickwheel::tokio::{DelayQueue, delay_queue::{Expired, Key}};
//! ```
//!
//! # What is better than tokio-util, and why
//!
//! | | tokio-util | here |
//! |---|---|---|
//! | key of an entry that expired or was removed | a bare slab index: removes, resets or reads whatever entry reuses the slot | carries a generation: `try_*` answers `None`/`false`; `remove`/`reset`/`reset_at`/`deadline` panic naming the key, as tokio-util's do for a key not in the queue |
//! | task waiting in `poll_expired` | was left asleep by some resets, removals of the last entry, `clear` | woken whenever its answer can change before its sleep ends |
//! | deadline range | panics past about 2.2 years | any `Instant`, any `Duration` |
//! | equal deadlines | no order | insertion order |
//! | timer | one `Sleep`, re-allocated on many polls | one `Sleep`, reset |
//!
//! What it costs: [`DelayQueue::compact`] does not renumber keys.
//!
//! # How it is built
//!
//! The entries live in a core [`Wheel`](crate::Wheel) whose tick is one millisecond, counted
//! from the queue's creation: a deadline rounds up to the next whole millisecond and `now`
//! rounds down, so nothing comes out early; a deadline before the creation is tick 0, and
//! one more than `u64::MAX` ms ahead saturates (it can never be reached). `poll_expired`
//! polls the wheel at the current tick; when nothing is due it arms the queue's one `Sleep`
//! for the earliest pending deadline ([`Wheel::peek`](crate::Wheel::peek), exact, never
//! the tick a wheel slot cascades) and records that tick beside the task's waker. An entry is
//! due once that sleep has ended (tokio's driver fires a sleep up to 1 ms after its instant, and
//! tokio-util yields an entry only then too), or once the clock is a whole tick past its
//! deadline. Every change then decides whether the waiting task must be woken now:
//!
//! - an insert or reset wakes it when the new deadline is before the recorded tick (or when
//!   no sleep is armed, because the queue was empty);
//! - a reset or removal of an entry due at the recorded tick wakes it at once, so that it
//!   re-arms its sleep for the new earliest deadline instead of waking at the old one;
//! - a `remove`, `try_remove` or `clear` wakes it when the queue became empty, so that it
//!   sees `Ready(None)`;
//! - nothing else can change its answer before the sleep ends.
//!
//! A reset to an earlier or past deadline, the removal of the last entry and `clear` are
//! where tokio-util's `DelayQueue` lost wakeups over the years.
//!
//! [`Scheduler::due_stream`](crate::sync::Scheduler::due_stream), the async dispatcher for
//! [`sync`](crate::sync), lives here too: a [`DueStream`] of the scheduler's due timers,
//! woken by its own tokio `Sleep` and early by earlier deadlines scheduled from any thread.
//!
//! The async side of [`admission`](crate::admission) (layer 6), `acquire_async`, lives in
//! that layer: a lower layer never imports a higher one.

pub mod delay_queue;
pub(crate) mod due_stream;
mod key;
mod one_sleep;
mod peek;
mod ticks;
mod waiter;

/// [`crate::admission::Acquire`], at its former path.
#[doc(hidden)]
pub use crate::admission::Acquire;
pub use delay_queue::{DelayQueue, Expired, Key};
pub use due_stream::DueStream;
