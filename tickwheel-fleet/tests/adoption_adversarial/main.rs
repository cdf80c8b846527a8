//! Adoption of a dead member's journaled queues under hostile conditions: what the docs
//! promise for queues adopted up to 4 at a time, each journal streamed into the scheduler page
//! by page, a failed adoption dropping what it imported and releasing the owner key while the
//! others go on.
//!
//! - every journaled, not-ended timer of a dead member's queues is handed out by the
//!   survivors, never before its deadline, never twice under one token, never after its end
//!   was acknowledged;
//! - a failing adoption (a recovery hook that errors or panics, Redis killed or paused during
//!   the load, a record that does not decode) loses nothing once the fault cleared;
//! - many queues with uneven journals (one huge, many tiny, some empty) are each adopted
//!   once; two survivors racing for them leave each queue one owner;
//! - a survivor that dies during its own adoptions leaves them to the next.
//!
//! Every timer's value is `"<queue>:<id>"`; the deadline its user meant is kept beside it in
//! the test.

#[path = "../support/mod.rs"]
mod support;

mod chain;
mod common;
mod hooks;
mod killed;
mod moves;
mod pages;
mod redis_faults;
mod zombie;
