//! The last member's leave (docs/fleet.md, "The last member leaves at once") against real etcd
//! and redis-server, where "last" is not clear-cut: two members leaving together, and a leave
//! racing a join. A 60 s handoff timeout makes a leave that waits for it fail the bound.

mod common;

use std::time::Duration;

use common::*;

const BOUND: Duration = Duration::from_secs(20);

fn owned_by_one(members: &[&FleetMember], qs: &[String]) -> bool {
    let own = ownership(members);
    qs.iter().all(|q| own.get(q).is_some_and(|o| o.len() == 1))
}

fn timers_in(members: &[&FleetMember], qs: &[String]) -> usize {
    members
        .iter()
        .map(|m| qs.iter().map(|q| m.scheduler().queue_len(q)).sum::<usize>())
        .sum()
}

/// Both members of a two-member fleet leave at the same moment: each is marked leaving, so
/// neither can take the other's queues, and neither may wait for the handoff timeout.
/// Afterwards a new member adopts every queue with every timer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_members_leaving_together_both_leave_without_the_timeout() {
    let Some((etcd, redis)) = servers() else {
        return;
    };
    let mut opts = options(&etcd, &redis);
    opts.handoff_timeout = Duration::from_secs(60);
    let qs = queues(6);
    if let Err(e) = tickwheel_fleet::register_queues(&opts, &qs).await {
        panic!("register: {e}");
    }
    let per_queue = 2;
    let a = join(&opts, "a", per_queue).await;
    let b = join(&opts, "b", per_queue).await;
    wait_for(BOUND, "a and b own every queue", || async {
        owned_by_one(&[&a, &b], &qs)
    })
    .await;
    let started = std::time::Instant::now();
    let both = async { tokio::join!(a.leave(), b.leave()) };
    match tokio::time::timeout(BOUND, both).await {
        Ok((ra, rb)) => {
            assert!(ra.is_ok(), "a: {ra:?}");
            assert!(rb.is_ok(), "b: {rb:?}");
        }
        Err(_) => panic!(
            "a leave waited for the handoff timeout ({:?})",
            started.elapsed()
        ),
    }
    let c = join(&opts, "c", per_queue).await;
    wait_for(Duration::from_secs(30), "c adopts every queue", || async {
        owned_by_one(&[&c], &qs) && timers_in(&[&c], &qs) == qs.len() * per_queue as usize
    })
    .await;
}

/// The only member leaves while a second one is joining: the leave ends within the bound
/// (by a handoff to the newcomer or at once), and the newcomer ends up owning every queue
/// with every timer, none doubled.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_last_leave_racing_a_join_loses_nothing_and_does_not_wait() {
    let Some((etcd, redis)) = servers() else {
        return;
    };
    let mut opts = options(&etcd, &redis);
    opts.handoff_timeout = Duration::from_secs(60);
    let qs = queues(6);
    if let Err(e) = tickwheel_fleet::register_queues(&opts, &qs).await {
        panic!("register: {e}");
    }
    let per_queue = 3;
    let a = join(&opts, "a", per_queue).await;
    wait_for(BOUND, "a owns every queue", || async {
        owned_by_one(&[&a], &qs)
    })
    .await;
    let opts_b = opts.clone();
    let joining = tokio::spawn(async move { join(&opts_b, "b", per_queue).await });
    let started = std::time::Instant::now();
    match tokio::time::timeout(BOUND, a.leave()).await {
        Ok(r) => assert!(r.is_ok(), "leave: {r:?}"),
        Err(_) => panic!(
            "leave waited for the handoff timeout ({:?})",
            started.elapsed()
        ),
    }
    let b = match joining.await {
        Ok(b) => b,
        Err(e) => panic!("join task: {e}"),
    };
    wait_for(Duration::from_secs(30), "b owns every queue", || async {
        owned_by_one(&[&b], &qs) && timers_in(&[&b], &qs) == qs.len() * per_queue as usize
    })
    .await;
}

/// The only live member leaves just after another member died (its key still there under a
/// lease nobody keeps alive, as after `kill -9`): nobody can take over, so the leave must not
/// wait for the 60 s handoff timeout beyond the dead member's lease; a later member adopts
/// every queue with every timer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_last_leave_after_a_member_just_died_does_not_wait_for_the_timeout() {
    let Some((etcd, redis)) = servers() else {
        return;
    };
    let mut opts = options(&etcd, &redis);
    opts.handoff_timeout = Duration::from_secs(60);
    let qs = queues(6);
    if let Err(e) = tickwheel_fleet::register_queues(&opts, &qs).await {
        panic!("register: {e}");
    }
    let per_queue = 2;
    let a = join(&opts, "a", per_queue).await;
    wait_for(BOUND, "a owns every queue", || async {
        owned_by_one(&[&a], &qs)
    })
    .await;
    // A member that has just died: registered under a 3 s lease that is never kept alive.
    let mut client = match tickwheel_fleet::etcd_client::Client::connect([etcd.url()], None).await {
        Ok(c) => c,
        Err(e) => panic!("etcd: {e}"),
    };
    let lease = match client.lease_grant(3, None).await {
        Ok(l) => l.id(),
        Err(e) => panic!("lease: {e}"),
    };
    let keys = tickwheel_fleet::keys::Keys::new(opts.prefix.clone());
    if let Err(e) =
        tickwheel_fleet::membership::register(&mut client, &keys, "dead", "boot-dead", lease).await
    {
        panic!("register dead: {e}");
    }
    let started = std::time::Instant::now();
    match tokio::time::timeout(BOUND, a.leave()).await {
        Ok(r) => assert!(r.is_ok(), "leave: {r:?}"),
        Err(_) => panic!(
            "leave waited for the handoff timeout ({:?})",
            started.elapsed()
        ),
    }
    let c = join(&opts, "c", per_queue).await;
    wait_for(Duration::from_secs(30), "c adopts every queue", || async {
        owned_by_one(&[&c], &qs) && timers_in(&[&c], &qs) == qs.len() * per_queue as usize
    })
    .await;
}
