//! etcd failures: a restart fences every member and they rejoin; etcd unreachable at join is
//! a clear error; a name held by a live process is refused; credentials never printed.

mod support;

use std::time::Duration;

use support::*;
use tickwheel_fleet::{Error, FleetEvent, FleetOptions, Member};
use tokio::sync::broadcast::Receiver;

/// Drains `rx`, returning whether an event matching `f` arrived (no waiting).
fn saw(
    rx: &mut Receiver<FleetEvent<String>>,
    seen: &mut Vec<FleetEvent<String>>,
    f: impl Fn(&FleetEvent<String>) -> bool,
) -> bool {
    while let Ok(e) = rx.try_recv() {
        seen.push(e);
    }
    seen.iter().any(f)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_etcd_restart_fences_every_member_then_they_rejoin() {
    let Some((mut etcd, _redis, opts)) = fleet() else {
        return;
    };
    let (qs, a, b) = a_and_b(&opts, 8, 2).await;
    let (mut ra, mut rb) = (a.events(), b.events());
    let (mut sa, mut sb) = (Vec::new(), Vec::new());
    wait_for(Duration::from_secs(30), "the queues are shared", || async {
        let own = ownership(&[&a, &b]);
        qs.iter().all(|q| own.get(q).is_some_and(|o| o.len() == 1))
            && !a.owned().is_empty()
            && !b.owned().is_empty()
    })
    .await;
    if let Err(e) = etcd.stop() {
        panic!("stop etcd: {e}");
    }
    // Without etcd no keep-alive is acknowledged: both fence themselves by their own clock.
    wait_until(Duration::from_secs(20), "both fenced", || {
        saw(&mut ra, &mut sa, |e| *e == FleetEvent::Fenced)
            && saw(&mut rb, &mut sb, |e| *e == FleetEvent::Fenced)
    })
    .await;
    for m in [&a, &b] {
        let f = m.fence();
        assert!(
            qs.iter().all(|q| f.token(q.as_bytes()).is_none()),
            "fenced: no token"
        );
        assert!(m.owned().is_empty());
    }
    if let Err(e) = etcd.start_again() {
        panic!("start etcd: {e}");
    }
    wait_until(
        Duration::from_secs(30),
        "both rejoined and own every queue again",
        || {
            let rejoined = saw(&mut ra, &mut sa, |e| {
                matches!(e, FleetEvent::Rejoined { .. })
            }) && saw(&mut rb, &mut sb, |e| {
                matches!(e, FleetEvent::Rejoined { .. })
            });
            let own = ownership(&[&a, &b]);
            rejoined && qs.iter().all(|q| own.get(q).is_some_and(|o| o.len() == 1))
        },
    )
    .await;
    // Rebuilt by the recovery hook: every timer back, once.
    let total: usize = [&a, &b]
        .iter()
        .map(|m| qs.iter().map(|q| m.scheduler().queue_len(q)).sum::<usize>())
        .sum();
    assert_eq!(total, qs.len() * 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_held_by_a_live_process_is_refused() {
    let Some((_etcd, _redis, opts)) = fleet() else {
        return;
    };
    let first = join(&opts, "mx/1", 1).await;
    let sched = std::sync::Arc::new(Sched::new());
    let second: Result<FleetMember, Error> =
        Member::join(opts.clone(), "mx/1", sched, |_q: String| async {
            Ok::<_, tickwheel_fleet::RecoveryError>(Vec::new())
        })
        .await;
    match second {
        Err(Error::NameTaken { name, holder_boot }) => {
            assert_eq!(name, "mx/1");
            assert_eq!(holder_boot, first.boot_id());
        }
        other => panic!(
            "expected NameTaken, got {:?}",
            other.map(|m| m.boot_id().to_owned())
        ),
    }
    // A name that is a prefix or hex-neighbour of it is another key.
    let other = join(&opts, "mx", 1).await;
    assert_ne!(other.boot_id(), first.boot_id());
    // Once the holder is gone (dropped: its lease revoked), a joiner that waits gets the name.
    let first_boot = first.boot_id().to_owned();
    drop(first);
    let mut waiting = opts.clone();
    waiting.join_wait = Duration::from_secs(10);
    let again = join(&waiting, "mx/1", 1).await;
    assert_ne!(again.boot_id(), first_boot);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_unreachable_at_join_is_a_clear_error_without_credentials() {
    let Some(redis) = tickwheel_testkit::redis::start_for_test() else {
        return;
    };
    // A port nothing listens on (bound and released).
    let port = match std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
        Ok(a) => a.port(),
        Err(e) => panic!("bind: {e}"),
    };
    let password = "pa/?#@ss";
    let mut opts =
        tickwheel_fleet::FleetOptions::new(format!("http://127.0.0.1:{port}"), redis.url());
    opts.etcd_user = Some(("app".into(), password.into()));
    opts.etcd_timeout = Duration::from_millis(500);
    let debug = format!("{opts:?}");
    assert!(!debug.contains(password), "{debug}");
    let r = try_join(&opts, "a").await;
    match r {
        Err(e @ Error::EtcdUnreachable { .. }) => {
            let (text, debug) = (e.to_string(), format!("{e:?}"));
            assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
            assert!(
                !text.contains(password) && !debug.contains(password),
                "{text} {debug}"
            );
        }
        other => panic!("expected EtcdUnreachable, got {:?}", other.err()),
    }
}

/// The error of the join `r`, which must be refused (`why` it must), shown as a user sees it
/// (its text and its debug form), and the debug form of the `opts` it joined with.
fn refusal_texts(r: Result<FleetMember, Error>, opts: &FleetOptions, why: &str) -> [String; 3] {
    let e = match r {
        Err(e) => e,
        Ok(_) => panic!("{why}"),
    };
    [e.to_string(), format!("{e:?}"), format!("{opts:?}")]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_never_reach_errors_or_debug_output() {
    let Some((etcd, redis)) = servers() else {
        return;
    };
    let password = "s3/?#@cret";
    // etcd without auth: the client's authentication fails.
    let mut opts = options(&etcd, &redis);
    opts.etcd_user = Some(("root".into(), password.into()));
    let r = try_join(&opts, "a").await;
    let why = "authentication against etcd without auth should fail";
    for s in refusal_texts(r, &opts, why) {
        assert!(!s.contains(password), "{s}");
    }
    // A Redis URL with a password (percent-encoded) that the server refuses.
    let mut opts = options(&etcd, &redis);
    opts.redis_url = format!(
        "redis://app:{}@127.0.0.1:{}/",
        "s3%2F%3F%23%40cret",
        redis.port()
    );
    let r = try_join(&opts, "b").await;
    for s in refusal_texts(r, &opts, "a wrong Redis password should fail") {
        assert!(
            !s.contains("s3%2F%3F%23%40cret") && !s.contains(password),
            "{s}"
        );
    }
}
