//! Flow control per queue, as a queue manager needs it (Postfix's `postsuper -h`, KumoMTA's
//! suspensions): [`Scheduler::hold_queue`](super::Scheduler::hold_queue) and
//! [`release_queue`](super::Scheduler::release_queue), and a concurrency limit per queue
//! ([`set_concurrency`](super::Scheduler::set_concurrency)). The shard's side (the marks
//! and the parked timers) is in `shard/flow.rs`; the shared per-queue record of a limit in
//! `limit.rs`.

mod limit;
mod scheduler;

pub(crate) use limit::{FlowTable, QueueFlow};
