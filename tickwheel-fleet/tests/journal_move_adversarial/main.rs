//! Orderly moves of journaled queues (a join, a leave) under hostile timing: what the docs
//! promise for a handoff's target that loads the queue's journal after the offer.
//!
//! - nothing journaled and not ended is lost across a join or a leave;
//! - a timer whose `journal_end` was acknowledged is never dispatched again;
//! - no `(id, token)` is dispatched twice;
//! - a timer never fires before the deadline its user last gave it (a later deadline set
//!   before or during the move included);
//! - a Redis fault during the move (SIGKILL and restart, SIGSTOP) or the death of the joining
//!   member right after its first acquisition leaves every queue owned, nothing lost.
//!
//! Every timer's value is `"<queue>:<id>"`; the deadline its user meant is kept beside it in
//! the test, and a dispatch is early when `pop_due(now)` returned it with `now` before that
//! deadline (less a tolerance of [`SLACK`](common::SLACK) for the reference clock's
//! microseconds).

#[path = "../support/mod.rs"]
mod support;

mod common;
mod ends;
mod killed_children;
mod later_deadlines;
mod races;
mod redis_faults;
