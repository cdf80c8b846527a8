//! Shares the scheduled queues of a [`tickwheel`] scheduler across a fleet of processes
//! through etcd leases: at any instant at most one member dispatches a given queue, every
//! queue has an owner while any member lives, and a member's departure or death loses no
//! timer in custody.
//!
//! - **Membership** ([`membership`]): a member registers `name` under a lease with a
//!   create-if-absent transaction; a second live process with the same name is refused
//!   ([`Error::NameTaken`]), never merged.
//! - **Lease** ([`lease`]): keep-alives every TTL/3; the lease end is computed from the *send*
//!   time of the last acknowledged keep-alive, minus a margin (River #1213).
//! - **Assignment** ([`assign`]): rendezvous hashing (Thaler & Ravishankar, 1998) over live
//!   members; owner keys created and moved by revision-checked transactions (Gazette's
//!   allocator). The owner key's revision is the queue's **fencing token**, used as the Redis
//!   record's epoch, so Redis itself rejects a stale owner (Kleppmann, 2016).
//! - **Fence** ([`fence`]): every `Due` leaves with its token, only while the lease is valid.
//! - **Member** ([`Member`]): the runtime tying them together, with adoption through a user
//!   [`Recovery`] hook and handoffs through `tickwheel-redis` on rebalancing.
//! - **Journal** ([`FleetOptions::journal`]): each owned queue's live timers kept in Redis,
//!   fenced by the token, so that an adopter rebuilds a dead owner's queues without the
//!   user's store. The journaled front writes it: [`Member::schedule`],
//!   [`Member::reschedule`], [`Member::cancel`], [`Member::drain_queue`],
//!   [`FencedDue::done`] and [`FencedDue::retry_at`] (the low-level
//!   [`Member::journal_put`] and [`Member::journal_end`] for changes made on the scheduler
//!   directly).
//!
//! # Building
//!
//! The etcd client (`etcd-client`) compiles etcd's `.proto` files with the system's `protoc`
//! at build time, and those files import protobuf's well-known types. Install both the compiler
//! and its include files:
//!
//! - Debian, Ubuntu: `apt-get install protobuf-compiler libprotobuf-dev` (`protobuf-compiler`
//!   only *recommends* `libprotobuf-dev`, so `--no-install-recommends` leaves it out);
//! - Fedora: `dnf install protobuf-compiler protobuf-devel`; macOS: `brew install protobuf`.
//!
//! Without the include files the build stops in etcd-client's build script with
//! `google/protobuf/descriptor.proto: File not found`; `PROTOC` can name another `protoc`.
//!
//! # Which dispatch paths are fenced
//!
//! - [`Member::pop_due`]: wraps `Scheduler::pop_due`;
//! - [`Member::spawn_dispatcher`]: wraps the scheduler's thread dispatcher;
//! - `due_stream` (tickwheel's `tokio` feature) and any other source of `Due`s: pass each
//!   through [`Fence::admit`] (`stream.filter_map(|d| fence.admit(d))` in spirit), which
//!   hands a `Due` out with its token or puts it back.
//!
//! Calling `Scheduler::pop_due` directly bypasses the fence: don't, in a fleet.
//!
//! Each path takes from `Scheduler::pop_due`, so the scheduler's flow control holds on it: a
//! held queue hands out nothing, and no more than its concurrency and rate limits permit. A
//! queue's hold and limits move with it in a handoff (applied on the new owner before its
//! timers arrive); after a death they do not, unless an offer was sealed or the [`Recovery`]
//! hook applies them (see its docs).
//!
//! # Tests and examples
//!
//! The crate's tests and its `fleet` example run against a real `etcd` and `redis-server`,
//! started as child processes by the repository's (unpublished) test kit. They run members
//! in-process and as child processes (killed with SIGKILL, paused with SIGSTOP).
//!
//! See [the fleet's design notes](https://github.com/tickwheel/tickwheel/blob/main/docs/fleet.md) for the keys, states and the timing argument.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod adoption;
pub mod assign;
mod crossqueue;
mod error;
mod event;
pub mod fence;
mod front;
mod journal;
pub mod keys;
pub mod lease;
mod member;
pub mod membership;
mod options;
mod owners_watch;
mod queue;
mod recovery;
mod runtime;

pub use error::Error;
pub use event::{Acquisition, FleetEvent};
pub use fence::{Fence, FencedDue};
pub use member::{Member, register_queues};
pub use options::FleetOptions;
pub use queue::QueueName;
pub use recovery::{Recovery, RecoveryError, RecoveryFuture};

pub use etcd_client;
pub use tickwheel_redis;
