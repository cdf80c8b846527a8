//! The journaled front (`Member::schedule`, `reschedule`, `cancel`, `drain_queue`,
//! `FencedDue::done`, `retry_at`) used as a new user would, against its documented contracts:
//! a survivor adopting a dead member's queue holds exactly the live timers the dead member
//! had acknowledged, never earlier than their last acknowledged deadline; a hand-out ended
//! by a member that lost its queue is refused and delivered again; refusals change nothing.
//!
//! The children (this test binary run again as `adversarial_child`, the scenario named by the
//! member's name) print a ledger of what each acknowledged write did (`AT <queue> <id>
//! <unix ms>`: the timer is live at that deadline; `END <queue> <id>`: ended; `DROP <queue>
//! <id>`: a hand-out dropped, its record left), then `DONE`, and are killed with SIGKILL.
//!
//! - `killed`: reschedules, drains, dropped hand-outs, four threads hammering the front, an
//!   id dropped in one queue and scheduled in another, four tasks writing one id at a time
//!   (killed mid-stream); each child SIGKILLed, a survivor checked against its ledger.
//! - `fenced`: a member SIGSTOPped until a survivor adopted its queue ends its hand-outs; hand-outs
//!   ended while their queues move to a joining member.
//! - `in_process`: ids and values of odd sizes, queues not owned, cancels racing hand-outs,
//!   a Redis restart under a stream of writes.
//! - `crossqueue`: an id journaled in two queues, met by the member a move brings both to.

#[path = "../support/mod.rs"]
mod support;

mod common;
mod crossqueue;
mod fenced;
mod in_process;
mod killed;

use std::time::Duration;

use common::{CHILD, queues_of};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn adversarial_child() {
    let Some((m, name)) = join_child_journaled(CHILD).await else {
        return;
    };
    let n = queues_of(&name);
    owns(&m, n).await;
    let qs = queues(n);
    match name.as_str() {
        "moves" => killed::moves_child(&m, &qs).await,
        "hammer" => killed::hammer_child(&m, &qs).await,
        "crossq" => killed::cross_queue_child(&m, &qs).await,
        "stream" => killed::stream_child(&m, &qs).await,
        "zombie" => fenced::zombie_child(&m, &qs[0]).await,
        other => panic!("no scenario {other}"),
    }
    println!("DONE");
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
