//! The last member's leave (docs/fleet.md, "The last member leaves at once") against real etcd
//! and redis-server, where "last" is not clear-cut: two members leaving together, and a leave
//! racing a join. A 60 s handoff timeout makes a leave that waits for it fail the bound.

mod support;

use std::time::Duration;

use support::*;
use tickwheel_fleet::FleetOptions;
use tickwheel_testkit::etcd::EtcdServer;
use tickwheel_testkit::redis::RedisServer;

const BOUND: Duration = Duration::from_secs(20);

/// [`fleet`] with a 60 s handoff timeout in its options: a leave that waits for it fails the
/// bound.
fn slow_fleet() -> Option<(EtcdServer, RedisServer, FleetOptions)> {
    let (etcd, redis, mut opts) = fleet()?;
    opts.handoff_timeout = Duration::from_secs(60);
    Some((etcd, redis, opts))
}

/// [`slow_fleet`] with 6 queues of `per_queue` timers each, all owned by member `a`
/// ([`start_with_a`]).
async fn slow_fleet_with_a(per_queue: u64) -> Option<FleetWithA> {
    let (etcd, redis, opts) = slow_fleet()?;
    let (qs, _, a) = start_with_a(&opts, 6, per_queue, BOUND, false).await;
    Some((etcd, redis, opts, qs, a))
}

/// `m.leave()` must succeed within [`BOUND`], not by waiting for the handoff timeout.
async fn leaves_within_bound(m: FleetMember) {
    let started = std::time::Instant::now();
    match tokio::time::timeout(BOUND, m.leave()).await {
        Ok(r) => assert!(r.is_ok(), "leave: {r:?}"),
        Err(_) => panic!(
            "leave waited for the handoff timeout ({:?})",
            started.elapsed()
        ),
    }
}

/// Waits up to 30 s until `m` alone owns every queue of `qs` and holds all `per_queue`
/// timers of each.
async fn holds_all(m: &FleetMember, qs: &[String], per_queue: u64) {
    let what = format!("{} adopts every queue", m.name());
    wait_for(Duration::from_secs(30), &what, || async {
        exactly_one(&[m], qs) && timers_in(&[m], qs) == qs.len() * per_queue as usize
    })
    .await;
}

/// After the leaves: a new member `c` (recovering `per_queue` timers a queue) adopts every
/// queue of `qs` with every timer ([`holds_all`]).
async fn a_newcomer_adopts_all(opts: &FleetOptions, qs: &[String], per_queue: u64) {
    let c = join(opts, "c", per_queue).await;
    holds_all(&c, qs, per_queue).await;
}

/// Both members of a two-member fleet leave at the same moment: each is marked leaving, so
/// neither can take the other's queues, and neither may wait for the handoff timeout.
/// Afterwards a new member adopts every queue with every timer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_members_leaving_together_both_leave_without_the_timeout() {
    let Some((_etcd, _redis, opts)) = slow_fleet() else {
        return;
    };
    let qs = queues(6);
    register(&opts, &qs).await;
    let per_queue = 2;
    let a = join(&opts, "a", per_queue).await;
    let b = join(&opts, "b", per_queue).await;
    wait_for(BOUND, "a and b own every queue", || async {
        exactly_one(&[&a, &b], &qs)
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
    a_newcomer_adopts_all(&opts, &qs, per_queue).await;
}

/// The only member leaves while a second one is joining: the leave ends within the bound
/// (by a handoff to the newcomer or at once), and the newcomer ends up owning every queue
/// with every timer, none doubled.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_last_leave_racing_a_join_loses_nothing_and_does_not_wait() {
    let per_queue = 3;
    let Some((_etcd, _redis, opts, qs, a)) = slow_fleet_with_a(per_queue).await else {
        return;
    };
    let opts_b = opts.clone();
    let joining = tokio::spawn(async move { join(&opts_b, "b", per_queue).await });
    leaves_within_bound(a).await;
    let b = match joining.await {
        Ok(b) => b,
        Err(e) => panic!("join task: {e}"),
    };
    holds_all(&b, &qs, per_queue).await;
}

/// The only live member leaves just after another member died (its key still there under a
/// lease nobody keeps alive, as after `kill -9`): nobody can take over, so the leave must not
/// wait for the 60 s handoff timeout beyond the dead member's lease; a later member adopts
/// every queue with every timer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_last_leave_after_a_member_just_died_does_not_wait_for_the_timeout() {
    let per_queue = 2;
    let Some((etcd, _redis, opts, qs, a)) = slow_fleet_with_a(per_queue).await else {
        return;
    };
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
    leaves_within_bound(a).await;
    a_newcomer_adopts_all(&opts, &qs, per_queue).await;
}
