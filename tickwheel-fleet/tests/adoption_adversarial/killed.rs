//! A journaling member killed with SIGKILL holding 40 queues of uneven journals (one of
//! 20 000 timers, the others 0 to 4): one survivor, or two racing, adopt them.
//!
//! The child (this test binary run again as `killed::uneven_child`) joins alone, owns every
//! queue, journals [`plan`] from a `t0` whose wall-clock reading it prints (`T0 <µs>`), so the
//! parent knows every deadline; prints `ACK <queue> 0 <token>` per queue and `DONE`, and
//! dispatches nothing.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::common::*;
use crate::support::*;

const CHILD: &str = "TICKWHEEL_FLEET_ADOPTION_UNEVEN_CHILD";
const QUEUES: usize = 40;
const HUGE: u64 = 20_000;
/// The first deadline after `t0`, and the spread: some due before the survivors adopt, many
/// after.
const FIRST: Duration = Duration::from_secs(3);
const SPREAD: Duration = Duration::from_secs(6);

fn wall_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_micros() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uneven_child() {
    let Some((m, qs)) = join_child_journaling(CHILD, QUEUES).await else {
        return;
    };
    let t0 = Instant::now();
    println!("T0 {}", wall_us());
    let s = plan(&qs, &uneven(QUEUES, HUGE), t0, FIRST, SPREAD);
    seed(&m, &s).await;
    for (q, t) in m.owned() {
        println!("ACK {q} 0 {t}");
    }
    println!("DONE");
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Starts the child, waits for `DONE`, SIGKILLs it: the queues, the plan (deadlines in this
/// process's `Instant`s) and the child's tokens.
async fn killed_child() -> Option<(
    tickwheel_testkit::etcd::EtcdServer,
    tickwheel_testkit::redis::RedisServer,
    tickwheel_fleet::FleetOptions,
    Vec<String>,
    Seeded,
    BTreeMap<String, u64>,
)> {
    let test = ("killed::uneven_child", CHILD);
    let limit = Duration::from_secs(120);
    let (etcd, redis, opts, qs, child) = after_killed_child(test, "dead", QUEUES, limit).await?;
    let t0_us: u64 = child
        .lines
        .iter()
        .find_map(|l| l.strip_prefix("T0 ")?.parse().ok())
        .unwrap_or_else(|| panic!("no T0 line: {:?}", &child.lines[..5.min(child.lines.len())]));
    let ago = Duration::from_micros(wall_us().saturating_sub(t0_us));
    let t0 = Instant::now() - ago;
    let s = plan(&qs, &uneven(QUEUES, HUGE), t0, FIRST, SPREAD);
    assert_eq!(child.tokens.len(), QUEUES, "{:?}", child.lines);
    Some((etcd, redis, opts, qs, s, child.tokens))
}

/// Every hand-out under a token larger than the dead member's for its queue.
fn tokens_larger(ledger: &Ledger, dead: &BTreeMap<String, u64>) {
    let stale: Vec<_> = ledger
        .dispatches
        .iter()
        .filter(|(_, q, _, t)| *t <= dead.get(q).copied().unwrap_or(0))
        .take(5)
        .collect();
    assert!(
        stale.is_empty(),
        "handed out under the dead member's token: {stale:?}"
    );
}

/// One survivor, joined after the kill, with a recovery hook that finds nothing: each of the
/// 40 queues is acquired once (`Adopted`, `recovered` = its journaled, not-ended timers), and
/// every such timer is handed out exactly once, none early.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forty_uneven_queues_of_a_killed_member_adopted_once_each() {
    let Some((_etcd, _redis, opts, qs, s, dead)) = killed_child().await else {
        return;
    };
    let m = join_journaling(&opts, "s", true).await;
    let mut rx = m.events();
    let (must, ledger) = collected(&[&m], &s, Duration::from_secs(90)).await;
    let events = events_of(&mut rx);
    check_once(&ledger, &must, &s);
    tokens_larger(&ledger, &dead);
    assert!(exactly_one(&[&m], &qs), "owned: {:?}", m.owned());
    adopted_once_each(&events, &qs, &s);
}

/// Two survivors join at the same moment after the kill and race for the 40 queues: each
/// queue ends with one owner, every journaled, not-ended timer is handed out, none twice
/// under one token, none after its acknowledged end, none early; and no two members ever
/// both list a queue with the same token.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_survivors_racing_for_a_killed_members_queues() {
    let Some((_etcd, _redis, opts, qs, s, dead)) = killed_child().await else {
        return;
    };
    let (x, y) = tokio::join!(
        join_journaling(&opts, "x", true),
        join_journaling(&opts, "y", true)
    );
    let must = s.must();
    let mut ledger = Ledger::new(&s.ended);
    let mut shared = Vec::new();
    let until = Instant::now() + Duration::from_secs(90);
    while !must.is_subset(&ledger.ids()) && Instant::now() < until {
        ledger.drain(&[&x, &y], &s.intended).await;
        let xo: BTreeMap<String, u64> = x.owned().into_iter().collect();
        for (q, t) in y.owned() {
            if xo.get(&q) == Some(&t) {
                shared.push((q, t));
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    settle_all(&[&x, &y], &qs).await;
    ledger.drain(&[&x, &y], &s.intended).await;
    assert!(shared.is_empty(), "one token, two owners: {shared:?}");
    check(&ledger, &must, &may(&s));
    tokens_larger(&ledger, &dead);
}

/// Waits (at most 30 s) until every queue of `qs` has one owner among `members`.
async fn settle_all(members: &[&FleetMember], qs: &[String]) {
    wait_until(Duration::from_secs(30), "one owner each", || {
        exactly_one(members, qs)
    })
    .await;
}

const ADOPTER: &str = "TICKWHEEL_FLEET_ADOPTION_ADOPTER_CHILD";

/// The adopter of `a_killed_adopter_leaves_its_adoptions_to_the_next`: joins with the journal
/// on and a hook that finds nothing, prints `ACQ <queue> <token>` for each acquisition, and
/// dispatches nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adopter_child() {
    let Some((m, _)) = join_child_journaled(ADOPTER).await else {
        return;
    };
    let events = m.events();
    println!("JOINED");
    print_acquisitions(events).await;
}

/// `a` journaled 12 queues (q0 with 40 000 timers, the others 0 to 4) due from 1 s on and is
/// dropped. A child member adopts them; once it printed its first acquisition (its other
/// adoptions, q0's load among them, under way) it is SIGKILLed. `c` joins: every queue
/// owned by `c`, every journaled, not-ended timer handed out exactly once (the child handed
/// out nothing), none early, each under a token larger than any the child acquired.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_adopter_leaves_its_adoptions_to_the_next() {
    let Some((etcd, redis, opts, qs, s)) =
        parent_dead_fleet(ADOPTER, &uneven(12, 40_000), FROM_1S).await
    else {
        return;
    };
    let test = ("killed::adopter_child", ADOPTER);
    let mut child = child_member_ready(
        test,
        (&etcd, &redis, "b"),
        Duration::from_secs(30),
        ("ACQ ", 1),
    )
    .await;
    child.kill9();
    let mut acquired: BTreeMap<String, u64> = BTreeMap::new();
    for l in child.lines() {
        let p: Vec<&str> = l.split(' ').collect();
        if let ["ACQ", q, t] = p[..] {
            acquired.insert(q.to_owned(), t.parse().expect("token"));
        }
    }
    eprintln!("the adopter died having acquired {acquired:?}");
    let c = join_journaling(&opts, "c", true).await;
    let (must, ledger) = collected(&[&c], &s, Duration::from_secs(90)).await;
    check_once(&ledger, &must, &s);
    tokens_larger(&ledger, &acquired);
    wait_until(Duration::from_secs(30), "c owns every queue", || {
        exactly_one(&[&c], &qs)
    })
    .await;
}
