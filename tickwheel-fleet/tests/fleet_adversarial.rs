//! Hostile use of the fleet against real etcd and redis-server: members joining at once, a
//! leave racing a join, etcd stopped in the middle of a handoff, Redis restarted, members
//! killed with SIGKILL right after joining and during a handoff, etcd and members frozen,
//! nested prefixes (odd names and option values: `fleet_inputs_adversarial.rs`). Each test checks the promises of `docs/fleet.md`: at most one member hands
//! out a queue's timers at any instant, every queue owned while a member lives, no timer lost.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::*;
use tickwheel::sync::{FrozenEntry, Scheduler};
use tickwheel_fleet::{Error, Fence, FleetOptions, Member, RecoveryError};
use tickwheel_testkit::child::TestChild;
use tickwheel_testkit::etcd::EtcdServer;
use tickwheel_testkit::redis::RedisServer;

/// One hand-out seen by a test dispatcher: (member, queue, token, id, when).
type Record = (String, String, u64, u64, Instant);

/// Every queue has `n` timers due over the next `spread`, ids `queue_index * 1000 + i`.
fn spread_entries(queue: &str, n: u64, spread: Duration) -> Vec<FrozenEntry<u64, String>> {
    let base: u64 = queue.trim_start_matches('q').parse().unwrap_or(0) * 1000;
    let now = Instant::now();
    (0..n)
        .map(|i| FrozenEntry {
            id: base + i,
            at: now + spread.mul_f64(i as f64 / n as f64),
            value: format!("{queue}:{i}"),
        })
        .collect()
}

async fn join_spread(opts: &FleetOptions, name: &str, n: u64, spread: Duration) -> FleetMember {
    let sched: Arc<Sched> = Arc::new(Scheduler::new());
    let r = Member::join(opts.clone(), name, sched, move |q: String| async move {
        Ok::<_, RecoveryError>(spread_entries(&q, n, spread))
    })
    .await;
    match r {
        Ok(m) => m,
        Err(e) => panic!("join {name}: {e}"),
    }
}

/// A dispatcher of the test's own on `m`'s scheduler behind `m`'s fence (what
/// `Member::pop_due` does), recording every hand-out until `stop`.
fn dispatch(m: &FleetMember, log: Arc<Mutex<Vec<Record>>>, stop: Arc<Mutex<bool>>) {
    let sched = Arc::clone(m.scheduler());
    let fence = m.fence();
    let name = m.name().to_owned();
    std::thread::spawn(move || {
        while !stop.lock().map(|s| *s).unwrap_or(true) {
            let out: Vec<_> = sched
                .pop_due(Instant::now(), 1000)
                .filter_map(|d| fence.admit(d))
                .collect();
            let at = Instant::now();
            if let Ok(mut l) = log.lock() {
                for d in out {
                    l.push((
                        name.clone(),
                        d.due.queue().clone(),
                        d.token,
                        *d.due.id(),
                        at,
                    ));
                }
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    });
}

/// Members `a` and `b` each dispatching into one log (see [`dispatch`]) and their fences
/// watched (see [`watch_fences`]), all until `stop`; returns once they share every queue of
/// `qs` (30 s at most): the log, the stop flag and the fence watcher.
async fn dispatch_both(
    a: &FleetMember,
    b: &FleetMember,
    qs: &[String],
) -> (
    Arc<Mutex<Vec<Record>>>,
    Arc<Mutex<bool>>,
    std::thread::JoinHandle<Option<String>>,
) {
    let log: Arc<Mutex<Vec<Record>>> = Arc::default();
    let stop: Arc<Mutex<bool>> = Arc::default();
    dispatch(a, Arc::clone(&log), Arc::clone(&stop));
    dispatch(b, Arc::clone(&log), Arc::clone(&stop));
    let fences = watch_fences(
        vec![("a".into(), a.fence()), ("b".into(), b.fence())],
        qs.to_vec(),
        Arc::clone(&stop),
    );
    wait_for(
        Duration::from_secs(30),
        "a and b share every queue",
        || async { exactly_one(&[a, b], qs) && !a.owned().is_empty() && !b.owned().is_empty() },
    )
    .await;
    (log, stop, fences)
}

/// Stops what [`dispatch_both`] started and checks it: no two dispatchers of a queue at
/// once, no timer handed out twice, never two fences valid at once. The hand-outs.
fn stop_and_check(
    log: &Mutex<Vec<Record>>,
    stop: &Mutex<bool>,
    fences: std::thread::JoinHandle<Option<String>>,
) -> Vec<Record> {
    if let Ok(mut s) = stop.lock() {
        *s = true;
    }
    let both = fences.join().unwrap_or(None);
    let log = log.lock().map(|l| l.clone()).unwrap_or_default();
    assert_eq!(overlap(&log), None);
    assert_eq!(doubled(&log), None);
    assert_eq!(both, None);
    log
}

/// Per queue, a hand-out by one member under token `T` must not come after a hand-out by
/// another member under a larger token: that would be two dispatchers of one queue. Returns
/// the first violation.
fn overlap(log: &[Record]) -> Option<String> {
    let mut per: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
    for r in log {
        per.entry(r.1.as_str()).or_default().push(r);
    }
    for (q, mut rs) in per {
        rs.sort_by_key(|r| r.4);
        let mut highest: Option<&Record> = None;
        for r in rs {
            if let Some(h) = highest
                && r.2 < h.2
            {
                return Some(format!(
                    "queue {q}: {} handed out id {} under token {} after {} handed out id {} under token {}",
                    r.0, r.3, r.2, h.0, h.3, h.2
                ));
            }
            if highest.is_none_or(|h| r.2 >= h.2) {
                highest = Some(r);
            }
        }
    }
    None
}

/// No (id, token) handed out twice.
fn doubled(log: &[Record]) -> Option<String> {
    let mut seen = BTreeSet::new();
    for r in log {
        if !seen.insert((r.1.clone(), r.3, r.2)) {
            return Some(format!(
                "id {} of {} handed out twice under token {}",
                r.3, r.1, r.2
            ));
        }
    }
    None
}

/// Samples every fence: two members whose fences both answer a token for one queue at one
/// instant may both hand it out. Runs until `stop`; returns the first such sample.
fn watch_fences(
    fences: Vec<(String, Fence)>,
    qs: Vec<String>,
    stop: Arc<Mutex<bool>>,
) -> std::thread::JoinHandle<Option<String>> {
    std::thread::spawn(move || {
        while !stop.lock().map(|s| *s).unwrap_or(true) {
            let now = Instant::now();
            for q in &qs {
                let holders: Vec<(String, u64)> = fences
                    .iter()
                    .filter_map(|(n, f)| f.token_at(q.as_bytes(), now).map(|t| (n.clone(), t)))
                    .collect();
                if holders.len() > 1 {
                    return Some(format!("queue {q} valid at once in {holders:?}"));
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        None
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_members_joining_at_once_never_hand_out_one_queue_together() {
    let Some((_etcd, _redis, opts, qs)) = fleet_with(24).await else {
        return;
    };
    let (a, b) = tokio::join!(
        join_spread(&opts, "a", 40, Duration::from_secs(8)),
        join_spread(&opts, "b", 40, Duration::from_secs(8))
    );
    let (log, stop, fences) = dispatch_both(&a, &b, &qs).await;
    // Let the spread timers come due.
    tokio::time::sleep(Duration::from_secs(9)).await;
    let log = stop_and_check(&log, &stop, fences);
    // Every id was handed out at least once.
    let ids: BTreeSet<u64> = log.iter().map(|r| r.3).collect();
    assert_eq!(ids.len(), qs.len() * 40, "ids handed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_name_joined_twice_at_once_admits_exactly_one() {
    let Some((_etcd, _redis, opts)) = fleet() else {
        return;
    };
    let j = || try_join(&opts, "twin");
    let (x, y) = tokio::join!(j(), j());
    let ok = [x.is_ok(), y.is_ok()];
    let taken = [&x, &y]
        .iter()
        .filter(|r| matches!(r, Err(Error::NameTaken { .. })))
        .count();
    assert_eq!(
        (ok.iter().filter(|o| **o).count(), taken),
        (1, 1),
        "{:?} {:?}",
        x.as_ref().err(),
        y.as_ref().err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_leaving_while_another_joins_loses_no_timer() {
    let Some((_etcd, _redis, opts, qs)) = fleet_with(16).await else {
        return;
    };
    let per = 4;
    let total = qs.len() * per as usize;
    let a = join(&opts, "a", per).await;
    let b = join(&opts, "b", per).await;
    wait_for(Duration::from_secs(30), "a and b share", || async {
        exactly_one(&[&a, &b], &qs) && !b.owned().is_empty() && timers_in(&[&a, &b], &qs) == total
    })
    .await;
    let (left, c) = tokio::join!(b.leave(), join(&opts, "c", per));
    if let Err(e) = left {
        panic!("leave while another joins: {e}");
    }
    owned_once(&[&a, &c], &qs, total, Duration::from_secs(30)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn etcd_stopped_in_a_handoff_and_started_again_leaves_every_queue_owned_once() {
    let Some((mut etcd, _redis, opts)) = fleet() else {
        return;
    };
    // Stop etcd as soon as the first queue reaches b: the others are mid-handoff.
    let (qs, total, a, b) = a_handing_to_b(&opts).await;
    if let Err(e) = etcd.kill() {
        panic!("kill etcd: {e}");
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    for m in [&a, &b] {
        let f = m.fence();
        assert!(
            qs.iter().all(|q| f.token(q.as_bytes()).is_none()),
            "{} still dispatches with etcd gone past its lease",
            m.name()
        );
    }
    if let Err(e) = etcd.start_again() {
        panic!("start etcd: {e}");
    }
    owned_once(&[&a, &b], &qs, total, Duration::from_secs(40)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redis_restart_mid_run_leaves_every_queue_owned_and_rebalances_after() {
    let Some((_etcd, mut redis, opts)) = fleet() else {
        return;
    };
    let per = 3;
    let (qs, total, a) = start_with_a(&opts, 12, per, Duration::from_secs(30), true).await;
    if let Err(e) = redis.restart() {
        panic!("restart redis: {e}");
    }
    // A join after the restart needs the handoff through the restarted Redis.
    let b = join(&opts, "b", per).await;
    wait_for(
        Duration::from_secs(40),
        "a and b share, every timer once",
        || async {
            exactly_one(&[&a, &b], &qs)
                && !b.owned().is_empty()
                && timers_in(&[&a, &b], &qs) == total
        },
    )
    .await;
}

// ---- members as child processes: SIGKILL right after join and during handoffs ----

const CHILD: &str = "TICKWHEEL_FLEET_ADVERSARIAL_CHILD";

/// The child member: runs only when the parent set the variable; prints `JOINED` then
/// `ACQ <queue> <token>` lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adversarial_child() {
    let Some(m) = join_child(CHILD).await else {
        return;
    };
    let events = m.events();
    println!("JOINED");
    print_acquisitions(events).await;
}

/// Member `name` as a child process (`adversarial_child`), printing `JOINED` and
/// `ACQ <queue> <token>`.
fn child_member(etcd: &str, redis: &str, name: &str) -> TestChild {
    TestChild::spawn(
        "adversarial_child",
        CHILD,
        &format!("{etcd} {redis} {name}"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_killed_right_after_joining_has_its_queues_adopted_once() {
    let Some((etcd, redis, opts)) = fleet() else {
        return;
    };
    let (qs, total, a) = start_with_a(&opts, 10, 3, Duration::from_secs(30), false).await;
    let mut x = child_member(&etcd.url(), &redis.url(), "x");
    wait_until(Duration::from_secs(30), "x joined", || {
        x.count("JOINED") == 1
    })
    .await;
    x.kill9();
    owned_once(&[&a], &qs, total, Duration::from_secs(30)).await;
}

/// A fleet of the test's own with 40 queues, owned by the child member `x` (3 timers a
/// queue), and member `b` joined, once it acquired its first queue: the other moves from `x`
/// to `b` are under way. The servers, the queues, `x` and `b` (`None`: skip).
async fn x_handing_to_b() -> Option<(
    (EtcdServer, RedisServer),
    Vec<String>,
    TestChild,
    FleetMember,
)> {
    let (etcd, redis, opts, qs) = fleet_with(40).await?;
    let x = child_member(&etcd.url(), &redis.url(), "x");
    wait_until(Duration::from_secs(40), "x owns every queue", || {
        x.count("ACQ ") >= qs.len()
    })
    .await;
    let b = join(&opts, "b", 3).await;
    first_acquisition(&b).await;
    Some(((etcd, redis), qs, x, b))
}

/// [`start_with_a`] with 40 queues of 3 timers, every timer held, then member `b` joined,
/// once it acquired its first queue: the other moves from `a` to `b` are under way. The
/// queues, the number of timers, `a` and `b`.
async fn a_handing_to_b(opts: &FleetOptions) -> (Vec<String>, usize, FleetMember, FleetMember) {
    let (qs, total, a) = start_with_a(opts, 40, 3, Duration::from_secs(30), true).await;
    let b = join(opts, "b", 3).await;
    first_acquisition(&b).await;
    (qs, total, a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_killed_during_handoffs_loses_no_timer_and_doubles_none() {
    // b joins: about half the queues start moving from x to b; x dies in the middle.
    let Some((_servers, qs, mut x, b)) = x_handing_to_b().await else {
        return;
    };
    let total = qs.len() * 3;
    x.kill9();
    owned_once(&[&b], &qs, total, Duration::from_secs(40)).await;
}

/// etcd itself frozen (SIGSTOP) for longer than the lease, then resumed: the members must
/// fence themselves by their own clocks while it is frozen, never hand out one queue at once,
/// and afterwards own every queue once with every timer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn etcd_frozen_past_the_lease_fences_everyone_then_the_queues_return_once() {
    let Some((etcd, redis)) = servers() else {
        return;
    };
    let Some(pid) = etcd.pid() else {
        panic!("etcd has no pid");
    };
    let opts = options(&etcd, &redis);
    let qs = queues(16);
    register(&opts, &qs).await;
    let a = join_spread(&opts, "a", 30, Duration::from_secs(12)).await;
    let b = join_spread(&opts, "b", 30, Duration::from_secs(12)).await;
    let (log, stop, fences) = dispatch_both(&a, &b, &qs).await;
    if let Err(e) = tickwheel_testkit::send_signal(pid, "STOP") {
        panic!("stop etcd: {e}");
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    let valid: Vec<bool> = [&a, &b].iter().map(|m| m.fence().is_valid()).collect();
    if let Err(e) = tickwheel_testkit::send_signal(pid, "CONT") {
        panic!("resume etcd: {e}");
    }
    assert_eq!(
        valid,
        [false, false],
        "still valid with etcd frozen past the lease"
    );
    wait_for(
        Duration::from_secs(40),
        "every queue owned once again",
        || async { exactly_one(&[&a, &b], &qs) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop_and_check(&log, &stop, fences);
}

/// Two fleets on one etcd whose prefixes nest without a `/` (`/x` and `/xq/`): each member
/// owns exactly its own fleet's queues, never one of the other fleet.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fleets_with_nested_prefixes_own_only_their_own_queues() {
    let Some((etcd, redis)) = servers() else {
        return;
    };
    let mut o1 = options(&etcd, &redis);
    o1.prefix = "/x".into();
    let mut o2 = options(&etcd, &redis);
    o2.prefix = "/xq/".into();
    let q1: Vec<String> = vec!["q1".into(), "q2".into()];
    let q2: Vec<String> = vec!["q3".into(), "q4".into()];
    register(&o1, &q1).await;
    register(&o2, &q2).await;
    let a = join(&o1, "a", 1).await;
    let b = join(&o2, "b", 1).await;
    wait_for(
        Duration::from_secs(20),
        "each fleet owns its queues",
        || async {
            let own = |m: &FleetMember| m.owned().into_iter().map(|(q, _)| q).collect::<Vec<_>>();
            own(&a) == q1 && own(&b) == q2
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let own = |m: &FleetMember| m.owned().into_iter().map(|(q, _)| q).collect::<Vec<_>>();
    assert_eq!((own(&a), own(&b)), (q1, q2));
}

/// A source member frozen (SIGSTOP) in the middle of handing queues to a newcomer, past its
/// lease: the newcomer adopts everything with every timer once; after SIGCONT the woken
/// member fences itself and takes its share back by handoff, still every timer once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_frozen_mid_handoff_past_its_lease_loses_and_doubles_no_timer() {
    let Some((_servers, qs, mut x, b)) = x_handing_to_b().await else {
        return;
    };
    let pid = x.pid();
    if let Err(e) = tickwheel_testkit::send_signal(pid, "STOP") {
        panic!("stop x: {e}");
    }
    let adopted = async {
        owned_once(&[&b], &qs, qs.len() * 3, Duration::from_secs(40)).await;
    };
    adopted.await;
    if let Err(e) = tickwheel_testkit::send_signal(pid, "CONT") {
        panic!("resume x: {e}");
    }
    // x rejoins and gets about half back; what b keeps is whole.
    wait_for(Duration::from_secs(40), "x took its share back", || async {
        let n = b.owned().len();
        n < qs.len() && n > 0 && {
            let own: Vec<String> = b.owned().into_iter().map(|(q, _)| q).collect();
            own.iter()
                .map(|q| b.scheduler().queue_len(q))
                .sum::<usize>()
                == own.len() * 3
        }
    })
    .await;
    x.kill9();
}

/// An orderly leave asked while etcd is down must end (with an error or after handing what it
/// can), not wait for etcd forever; the other member keeps nothing it may not dispatch.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leave_while_etcd_is_down_returns_instead_of_hanging() {
    let Some((mut etcd, _redis, opts)) = fleet() else {
        return;
    };
    let (qs, a, b) = a_and_b(&opts, 8, 2).await;
    wait_for(Duration::from_secs(30), "a and b share", || async {
        exactly_one(&[&a, &b], &qs) && !a.owned().is_empty() && !b.owned().is_empty()
    })
    .await;
    if let Err(e) = etcd.stop() {
        panic!("stop etcd: {e}");
    }
    let r = tokio::time::timeout(Duration::from_secs(30), a.leave()).await;
    assert!(
        r.is_ok(),
        "leave still waiting 30 s after it was asked with etcd down"
    );
    drop(b);
}

/// Redis killed with SIGKILL while queues are being handed to a newcomer, then started again
/// from its append-only file: every queue ends owned once and every timer is held once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_killed_mid_handoff_and_restarted_loses_and_doubles_no_timer() {
    let Some((_etcd, mut redis, opts)) = fleet() else {
        return;
    };
    let (qs, total, a, b) = a_handing_to_b(&opts).await;
    if let Err(e) = redis.restart() {
        panic!("kill and restart redis: {e}");
    }
    wait_for(
        Duration::from_secs(60),
        "every queue owned once, every timer once",
        || async {
            exactly_one(&[&a, &b], &qs) && timers_in(&[&a, &b], &qs) == total && b.owned().len() > 1
        },
    )
    .await;
}
