//! Adoptions that overlap other changes of custody: a member joining while a survivor
//! adopts, the survivor's own lease lapsing during the load.

use std::time::{Duration, Instant};

use tickwheel_testkit::child::send_signal;

use crate::common::*;
use crate::support::*;

/// A dead member (dropped) journaled 40 queues, q0 with 20 000 timers, the others 0 to 4,
/// due from 1 s on. `s` joins; as soon as it acquired its first queue (the others still
/// being adopted, up to 4 at a time), `t` joins, so placement moves about half of them on to
/// `t` while `s` still adopts. Once each queue has one owner: every journaled, not-ended
/// timer handed out, none early, none twice under one token, none after its acknowledged
/// end.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_join_while_a_survivor_adopts_forty_queues() {
    let Some((_etcd, _redis, opts, qs, s)) = dead_fleet(&uneven(40, 20_000), FROM_1S).await else {
        return;
    };
    let m = join_journaling(&opts, "s", true).await;
    first_acquisition(&m).await;
    let at_join = m.owned().len();
    let t = join_journaling(&opts, "t", true).await;
    let (must, mut ledger) = collected(&[&m, &t], &s, Duration::from_secs(90)).await;
    wait_until(Duration::from_secs(30), "one owner each", || {
        exactly_one(&[&m, &t], &qs)
    })
    .await;
    ledger.drain(&[&m, &t], &s.intended).await;
    eprintln!(
        "s owned {at_join} when t joined; now s {} and t {}; {} hand-outs",
        m.owned().len(),
        t.owned().len(),
        ledger.dispatches.len()
    );
    check(&ledger, &must, &may(&s));
}

/// A dead member (dropped) journaled 8 queues, q0 with 40 000 timers, the others 0 to 4,
/// due from 1 s on. A survivor joins; while q0's journal is partly in its scheduler, etcd is
/// stopped (SIGSTOP) for 3.5 s, past the 2 s lease: the survivor fences itself in the middle
/// of its adoptions, and rejoins once etcd answers. Then every journaled, not-ended timer is
/// handed out, none early, none twice under one token, none after its acknowledged end.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_survivors_lease_lapsing_during_a_huge_load_loses_nothing() {
    let Some((etcd, _redis, opts, qs, s)) = dead_fleet(&uneven(8, 40_000), FROM_1S).await else {
        return;
    };
    let m = join_journaling(&opts, "s", true).await;
    let mut rx = m.events();
    let until = Instant::now() + Duration::from_secs(30);
    let mid_load = loop {
        if m.fence().token(b"q0").is_some() {
            break None;
        }
        let loading = m.scheduler().queue_len("q0");
        if loading > 0 {
            break Some(loading);
        }
        assert!(Instant::now() < until, "q0's load never began");
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    let pid = etcd.pid().expect("etcd runs");
    send_signal(pid, "STOP").expect("SIGSTOP");
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    send_signal(pid, "CONT").expect("SIGCONT");
    let (must, ledger) = collected(&[&m], &s, Duration::from_secs(90)).await;
    let events: Vec<_> = events_of(&mut rx)
        .into_iter()
        .filter(|e| !matches!(e, tickwheel_fleet::FleetEvent::Acquired { .. }))
        .collect();
    eprintln!("etcd stopped with q0 {mid_load:?} timers in; events but acquisitions: {events:?}");
    check(&ledger, &must, &may(&s));
    assert!(exactly_one(&[&m], &qs), "owned: {:?}", m.owned());
}
