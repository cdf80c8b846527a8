//! A member with `FleetOptions::journal` on, killed with SIGKILL, loses none of its queues'
//! timers although the survivor's recovery hook returns nothing: the survivor adopts each
//! queue under a larger token, loads its journal from Redis and dispatches every timer the
//! dead member had been told was durable.
//!
//! The child (this test binary run again as `journaling_child`) joins alone, owns every
//! queue, schedules timers and journals each (`Member::journal_put`), printing `ACK <queue>
//! <id> <token>` once its `Pending` resolved, cancels every fifth and journals its end
//! (`Member::journal_end`, `END <queue> <id>`), then prints `DONE`, and dispatches nothing.

mod support;

use std::time::{Duration, Instant};

use support::*;

const CHILD: &str = "TICKWHEEL_FLEET_JOURNALING_CHILD";
const QUEUES: usize = 4;
const PER_QUEUE: u64 = 50;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journaling_child() {
    let Some((m, qs)) = join_child_journaling(CHILD, QUEUES).await else {
        return;
    };
    let at = |i| Instant::now() + Duration::from_millis(500 + 10 * i);
    schedule_printing_acks(&m, &qs, PER_QUEUE, at).await;
    // Every fifth timer cancelled, and its end journaled: it must not come back.
    for (n, q) in qs.iter().enumerate() {
        for i in (0..PER_QUEUE).step_by(5) {
            let id = n as u64 * 1000 + i;
            let _ = m.scheduler().cancel(&id);
            end_printing(&m, q, id).await;
        }
    }
    println!("DONE");
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn survivor_dispatches_every_acknowledged_timer(journal: bool) {
    let test = ("journaling_child", CHILD);
    let n = QUEUES * PER_QUEUE as usize;
    let Some((_etcd, _redis, _, child, s)) =
        survivor_of_killed_child(test, QUEUES, Duration::from_secs(60), n, journal).await
    else {
        return;
    };
    assert_eq!(child.ended.len(), n / 5);
    let want = child.not_ended();
    let mut got = redelivered(&s, &child).await;
    let missing: Vec<_> = want.difference(&got).take(5).collect();
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged timers never dispatched, e.g. {missing:?}",
        want.len() - got.len().min(want.len()),
        want.len()
    );
    // Nothing ended came back, nothing else appeared (one more poll for late ones).
    for d in s.pop_due(Instant::now(), 1000) {
        got.insert((d.due.queue().clone(), *d.due.id()));
    }
    assert_eq!(got, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_journaling_member_loses_no_timer() {
    survivor_dispatches_every_acknowledged_timer(true).await;
}
