//! Three members joining and leaving in turn against real etcd and redis-server: every
//! queue ends owned by exactly one live member, and no timer is lost on the way.

mod support;

use std::time::Duration;

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn members_join_and_leave_in_turn() {
    let Some((_etcd, _redis, opts)) = fleet() else {
        return;
    };
    let per_queue = 5;
    let (qs, total, a) = start_with_a(&opts, 12, per_queue, Duration::from_secs(20), false).await;
    assert_eq!(timers_in(&[&a], &qs), total);
    let b = join(&opts, "b", per_queue).await;
    let c = join(&opts, "c", per_queue).await;
    wait_for(
        Duration::from_secs(30),
        "three members share the queues",
        || async {
            let all = [&a, &b, &c];
            exactly_one(&all, &qs)
                && all.iter().all(|m| !m.owned().is_empty())
                && timers_in(&all, &qs) == total
        },
    )
    .await;
    // Every queue is with its rendezvous owner, and fenced-valid there.
    for m in [&a, &b, &c] {
        for (q, token) in m.owned() {
            let want = tickwheel_fleet::assign::desired(["a", "b", "c"], q.as_bytes());
            assert_eq!(want, Some(m.name()), "{q}");
            assert_eq!(m.fence().token(q.as_bytes()), Some(token));
        }
    }
    // b leaves in order: its queues go to a and c, none lost, none doubled.
    if let Err(e) = b.leave().await {
        panic!("leave: {e}");
    }
    owned_once(&[&a, &c], &qs, total, Duration::from_secs(30)).await;
    if let Err(e) = a.leave().await {
        panic!("leave: {e}");
    }
    owned_once(&[&c], &qs, total, Duration::from_secs(30)).await;
}

/// The last member leaves without waiting for the handoff timeout: nobody can take its queues.
/// With a 60 s handoff timeout, leave must return well within 20 s; the queues are unowned in
/// etcd afterwards, and a member joining later adopts them with every timer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn last_member_leaves_without_waiting_for_the_handoff_timeout() {
    let Some((_etcd, _redis, mut opts)) = fleet() else {
        return;
    };
    opts.handoff_timeout = Duration::from_secs(60);
    let per_queue = 3;
    let (qs, _, a) = start_with_a(&opts, 4, per_queue, Duration::from_secs(20), false).await;
    let started = std::time::Instant::now();
    match tokio::time::timeout(Duration::from_secs(20), a.leave()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("leave: {e}"),
        Err(_) => panic!("the last member's leave waited for the handoff timeout"),
    }
    assert!(started.elapsed() < Duration::from_secs(20));
    // Its queues went with its lease: the next member adopts them all.
    let b = join(&opts, "b", per_queue).await;
    owned_once(
        &[&b],
        &qs,
        qs.len() * per_queue as usize,
        Duration::from_secs(30),
    )
    .await;
}
