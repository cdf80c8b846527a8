//! Flow control per queue, as a queue manager needs it (Postfix's `postsuper -h`, KumoMTA's
//! suspensions): [`Scheduler::hold_queue`](super::Scheduler::hold_queue) and
//! [`release_queue`](super::Scheduler::release_queue). The shard's side (the marks and the
//! parked timers) is in `shard/flow.rs`.

mod scheduler;
