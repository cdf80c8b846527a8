//! A queue's hold and limits across an orderly leave, against real etcd and redis-server:
//! docs/fleet.md says they "move with it on a join or an orderly leave". The queues that
//! stay on the leaving member until it leaves, and the ones that moved on the join, all
//! arrive at the other member with the leaving member's policy, replacing the target's own.

mod support;

use std::time::{Duration, Instant};

use support::*;
use tickwheel::sync::RateLimit;
use tickwheel_redis::FlowPolicy;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_orderly_leave_carries_each_queues_policy() {
    let Some((_etcd, _redis, opts, qs)) = fleet_with(6).await else {
        return;
    };
    let per_queue = 3;
    let a = join(&opts, "a", per_queue).await;
    owns(&a, qs.len()).await;
    // A different policy per queue: held or not, limits or none.
    let policy = |i: usize| FlowPolicy {
        held: i.is_multiple_of(2),
        concurrency: (!i.is_multiple_of(3)).then_some(i),
        rate: (i % 3 != 1).then(|| {
            let r = RateLimit::per_second(i as u32 + 1).with_burst(i as u32 + 1);
            (r.interval(), i as u64 + 1)
        }),
    };
    for (i, q) in qs.iter().enumerate() {
        a.scheduler().apply_flow_policy(q, &policy(i));
        assert_eq!(a.scheduler().flow_policy(q), policy(i));
    }
    let b = join(&opts, "b", 0).await;
    // b's own policies for every queue, which the arrivals must replace.
    for q in &qs {
        b.scheduler().hold_queue(q);
        b.scheduler().set_concurrency(q, Some(99));
    }
    if let Err(e) = a.leave().await {
        panic!("leave: {e}");
    }
    wait_for(
        Duration::from_secs(30),
        "b owns every queue with its timers",
        || async {
            let mut owned: Vec<String> = b.owned().into_iter().map(|(q, _)| q).collect();
            owned.sort();
            owned == qs
                && qs
                    .iter()
                    .all(|q| b.scheduler().queue_len(q) == per_queue as usize)
        },
    )
    .await;
    for (i, q) in qs.iter().enumerate() {
        assert_eq!(b.scheduler().flow_policy(q), policy(i), "{q}");
    }
    // Held queues hand out nothing; the others as their limits permit (the store's timers
    // are an hour away: due at `later`).
    let later = Instant::now() + Duration::from_secs(7200);
    let out = b.pop_due(later, 1000);
    for (i, q) in qs.iter().enumerate() {
        let n = out.iter().filter(|d| d.due.queue() == q).count();
        let p = policy(i);
        let most = if p.held {
            0
        } else {
            let c = p.concurrency.unwrap_or(usize::MAX);
            let r = p.rate.map_or(usize::MAX, |(_, burst)| burst as usize);
            c.min(r).min(per_queue as usize)
        };
        assert_eq!(n, most, "{q}: {p:?}");
    }
}
