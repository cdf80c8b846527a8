//! Odd inputs to the fleet against real etcd and redis-server: queue names that differ only
//! by a `/`, empty, long or not UTF-8; member names alike; option values of zero or the
//! largest `Duration`. Each name is its own queue or member (or is refused), each option is
//! refused before joining or harmless, never a panic (the promises of `docs/fleet.md`).

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::*;
use tickwheel::sync::{FrozenEntry, Scheduler};
use tickwheel_fleet::{Error, FleetOptions, Member, RecoveryError};

/// Queue names that only differ by a `/`, the empty name, a long name and non-UTF-8 bytes are
/// different queues: each is owned exactly once, its timers come from its own recovery.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn odd_queue_names_are_separate_queues_each_owned_once() {
    let Some((_etcd, _redis, opts)) = fleet() else {
        return;
    };
    let names: Vec<Vec<u8>> = vec![
        b"a/b".to_vec(),
        b"a".to_vec(),
        b"b".to_vec(),
        b"a/".to_vec(),
        b"/b".to_vec(),
        b"..".to_vec(),
        b"../o/61".to_vec(),
        Vec::new(),
        vec![0xff, 0xfe, b'/', 0],
        vec![b'x'; 4096],
        b"61".to_vec(),
    ];
    if let Err(e) = tickwheel_fleet::register_queues(&opts, &names).await {
        panic!("register: {e}");
    }
    type Bytes = Scheduler<Vec<u8>, u64, String>;
    let ids: Arc<BTreeMap<Vec<u8>, u64>> = Arc::new(
        names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i as u64))
            .collect(),
    );
    let mk = |name: &'static str| {
        let opts = opts.clone();
        let ids = Arc::clone(&ids);
        async move {
            let sched: Arc<Bytes> = Arc::new(Scheduler::new());
            let r = Member::join(opts, name, sched, move |q: Vec<u8>| {
                let id = ids.get(&q).copied();
                async move {
                    let at = Instant::now() + Duration::from_secs(3600);
                    // One timer a queue, its id the name's place in the list (unknown: 999).
                    Ok::<_, RecoveryError>(vec![FrozenEntry {
                        id: id.unwrap_or(999),
                        at,
                        value: format!("{q:?}"),
                    }])
                }
            })
            .await;
            match r {
                Ok(m) => m,
                Err(e) => panic!("join {name}: {e}"),
            }
        }
    };
    let a = mk("a/b").await;
    let b = mk("a").await;
    let check = || {
        let mut own: BTreeMap<Vec<u8>, usize> = BTreeMap::new();
        for m in [&a, &b] {
            for (q, _) in m.owned() {
                *own.entry(q).or_default() += 1;
            }
        }
        let timers: usize = [&a, &b]
            .iter()
            .map(|m| {
                names
                    .iter()
                    .map(|q| m.scheduler().queue_len(q))
                    .sum::<usize>()
            })
            .sum();
        own.len() == names.len() && own.values().all(|c| *c == 1) && timers == names.len()
    };
    let until = Instant::now() + Duration::from_secs(30);
    while !check() {
        if Instant::now() > until {
            let short = |q: &[u8]| q.iter().take(8).copied().collect::<Vec<u8>>();
            let owned: Vec<Vec<(Vec<u8>, usize)>> = [&a, &b]
                .iter()
                .map(|m| {
                    m.owned()
                        .iter()
                        .map(|(q, _)| (short(q), m.scheduler().queue_len(q)))
                        .collect()
                })
                .collect();
            panic!(
                "odd names not each owned once with its one timer: (name prefix, timers) {owned:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A copy of `base` that `change` changed: one case of the option tables below.
fn changed(base: &FleetOptions, change: impl FnOnce(&mut FleetOptions)) -> FleetOptions {
    let mut o = base.clone();
    change(&mut o);
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_and_huge_timing_options_are_refused_before_joining() {
    let Some((etcd, redis)) = servers() else {
        return;
    };
    let base = options(&etcd, &redis);
    let cases: Vec<(&str, FleetOptions)> = vec![
        ("lease 0", base.clone().with_lease_ttl(Duration::ZERO)),
        (
            "lease 999 ms",
            base.clone().with_lease_ttl(Duration::from_millis(999)),
        ),
        (
            "lease u64::MAX s",
            base.clone().with_lease_ttl(Duration::from_secs(u64::MAX)),
        ),
        (
            "lease Duration::MAX",
            base.clone().with_lease_ttl(Duration::MAX),
        ),
        (
            "keep_alive 0",
            changed(&base, |o| o.keep_alive = Duration::ZERO),
        ),
        ("margin = ttl", changed(&base, |o| o.margin = o.lease_ttl)),
        ("no endpoint", changed(&base, |o| o.etcd_endpoints.clear())),
    ];
    for (what, o) in cases {
        match try_join(&o, "x").await {
            Err(Error::Options(_) | Error::Etcd(_)) => {}
            Err(e) => panic!("{what}: unexpected error {e}"),
            Ok(m) => {
                let alive = m.fence().is_valid();
                panic!("{what}: joined (lease valid: {alive})");
            }
        }
    }
}

/// A poll interval of zero, a zero etcd timeout, a zero handoff timeout: each is either
/// refused by `join` or runs without panicking its background task (the member still gets
/// its queue).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_periods_and_timeouts_are_refused_or_harmless() {
    let Some((etcd, redis)) = servers() else {
        return;
    };
    let base = options(&etcd, &redis);
    let qs = queues(2);
    register(&base, &qs).await;
    let cases: Vec<(&str, FleetOptions)> = vec![
        (
            "poll_interval 0",
            changed(&base, |o| o.poll_interval = Duration::ZERO),
        ),
        (
            "handoff_timeout 0",
            changed(&base, |o| o.handoff_timeout = Duration::ZERO),
        ),
        (
            "grace Duration::MAX",
            changed(&base, |o| o.grace = Duration::MAX),
        ),
        (
            "etcd_timeout 0",
            changed(&base, |o| o.etcd_timeout = Duration::ZERO),
        ),
    ];
    for (what, o) in cases {
        let infinite_grace = what.starts_with("grace");
        match try_join(&o, "x").await {
            Err(Error::Options(_)) => {}
            Err(e) => panic!("{what}: neither refused as an option nor joined: {e}"),
            Ok(m) => {
                if !infinite_grace {
                    wait_until(Duration::from_secs(20), what, || {
                        let own: Vec<String> = m.owned().into_iter().map(|(q, _)| q).collect();
                        qs.iter().all(|q| own.contains(q))
                    })
                    .await;
                }
                // The background task is alive: registering still answers.
                if let Err(e) = m.register_queue(&"late".to_owned()).await {
                    panic!("{what}: member unusable: {e}");
                }
                drop(m);
                // The name must become free again quickly (lease revoked on drop).
                tokio::time::sleep(Duration::from_secs(3)).await;
            }
        }
    }
}

/// Member names that are empty, hold a space, a `/`, `..` or are long: each either joins
/// and takes its share, or is refused with an error; never a panic, never another member's
/// key (two members whose names differ only in such bytes both join).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn odd_member_names_join_as_separate_members_or_are_refused() {
    let Some((_etcd, _redis, opts, qs)) = fleet_with(6).await else {
        return;
    };
    let long = "n".repeat(4096);
    let names: Vec<&str> = vec![
        "",
        " ",
        "a b",
        "a/b",
        "a",
        "../m/61",
        "\u{0}",
        long.as_str(),
    ];
    let mut joined = Vec::new();
    for n in names {
        let r = Member::<String, u64, String>::join(
            opts.clone(),
            n,
            Arc::new(Sched::new()),
            |q: String| async move { Ok::<_, RecoveryError>(store_entries(&q, 2)) },
        )
        .await;
        match r {
            Ok(m) => joined.push(m),
            Err(Error::NameTaken { name, holder_boot }) => {
                panic!("{n:?} taken by {holder_boot} as {name:?}: names collided")
            }
            Err(e) => eprintln!("{n:?} refused: {e}"),
        }
    }
    assert!(joined.len() >= 3, "at least the plain names join");
    let refs: Vec<&FleetMember> = joined.iter().collect();
    wait_for(
        Duration::from_secs(30),
        "every queue owned once",
        || async { exactly_one(&refs, &qs) && timers_in(&refs, &qs) == qs.len() * 2 },
    )
    .await;
}
