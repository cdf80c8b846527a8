//! Redis killed or paused while a survivor streams a dead member's journals in, and records
//! that do not decode among queues adopted together.

use std::time::{Duration, Instant};

use tickwheel_fleet::FleetEvent;
use tickwheel_testkit::child::send_signal;

use crate::common::*;
use crate::support::*;

#[derive(Debug, Clone, Copy)]
enum Fault {
    /// SIGKILL, `down` later restarted from its append-only file.
    Kill { down: Duration },
    /// SIGSTOP for `for_`, then SIGCONT.
    Pause { for_: Duration },
}

/// A dead member (dropped) journaled 8 queues, q0 with 40 000 timers, the others 0 to 4, due
/// from 1 s on. A survivor joins; as soon as q0's journal is partly in its scheduler and q0
/// is not yet dispatchable (the load under way), Redis suffers `fault`. Once it is back:
/// every queue owned by the survivor, every journaled, not-ended timer handed out exactly
/// once, none early, none after its acknowledged end. With `racer`, a second survivor joins
/// beside the first (each timer then at most once per token, each queue one owner).
async fn redis_fault_during_the_load(fault: Fault, racer: bool) {
    let Some((_etcd, mut redis, opts, qs, s)) = dead_fleet(&uneven(8, 40_000), FROM_1S).await
    else {
        return;
    };
    let r = racer.then(|| join_journaling(&opts, "r", true));
    let (m, r) = beside(join_journaling(&opts, "s", true), r).await;
    let mut members = vec![&m];
    members.extend(r.as_ref());
    let until = Instant::now() + Duration::from_secs(30);
    let mid_load = loop {
        let loading: usize = members.iter().map(|m| m.scheduler().queue_len("q0")).sum();
        if members.iter().any(|m| m.fence().token(b"q0").is_some()) {
            break None;
        }
        if loading > 0 {
            break Some(loading);
        }
        assert!(Instant::now() < until, "q0's load never began");
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    match fault {
        Fault::Kill { down } => {
            redis.kill9().expect("kill redis");
            tokio::time::sleep(down).await;
            redis.restart().expect("restart redis");
        }
        Fault::Pause { for_ } => {
            let pid = redis.pid().expect("redis runs");
            send_signal(pid, "STOP").expect("SIGSTOP");
            tokio::time::sleep(for_).await;
            send_signal(pid, "CONT").expect("SIGCONT");
        }
    }
    eprintln!(
        "{fault:?} with q0 {}",
        match mid_load {
            Some(n) => format!("mid-load ({n} timers imported)"),
            None => "already adopted (the fault missed the load)".into(),
        }
    );
    let (must, mut ledger) = collected(&members, &s, Duration::from_secs(90)).await;
    wait_until(Duration::from_secs(30), "one owner each", || {
        exactly_one(&members, &qs)
    })
    .await;
    ledger.drain(&members, &s.intended).await;
    check(&ledger, &must, &may(&s));
    if !racer {
        exactly_once(&ledger);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_killed_during_a_huge_load_loses_nothing() {
    redis_fault_during_the_load(
        Fault::Kill {
            down: Duration::from_secs(1),
        },
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_down_for_8_s_during_a_huge_load_loses_nothing() {
    redis_fault_during_the_load(
        Fault::Kill {
            down: Duration::from_secs(8),
        },
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_paused_during_a_huge_load_loses_nothing() {
    let for_ = Duration::from_secs(3);
    redis_fault_during_the_load(Fault::Pause { for_ }, false).await;
}

/// Redis stopped for 8 s, past the custody retries (3 s), during the load.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_paused_for_8_s_during_a_huge_load_loses_nothing() {
    let for_ = Duration::from_secs(8);
    redis_fault_during_the_load(Fault::Pause { for_ }, false).await;
}

/// Two survivors race for the queues while Redis is killed mid-load and restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_killed_while_two_survivors_race_loses_nothing() {
    let down = Duration::from_secs(1);
    redis_fault_during_the_load(Fault::Kill { down }, true).await;
}

/// A dead member journaled queues of `sizes` timers; beside it, a writer of another build put
/// a record that does not decode (a MessagePack id, a value that is no `String`) into the
/// journals of `poisoned` under the member's tokens. A survivor adopts them together: every
/// queue owned, both records reported (`FleetEvent::Undecodable`), every decodable,
/// not-ended timer handed out exactly once, each queue adopted once with its count.
async fn undecodable(sizes: &[u64], poisoned: &[&str]) {
    let Some((_etcd, redis, opts, qs)) = fleet_with(sizes.len()).await else {
        return;
    };
    let a = join_journaling(&opts, "a", true).await;
    owns(&a, qs.len()).await;
    let s = seeded(
        &a,
        &qs,
        &[30; 8],
        Duration::from_secs(1),
        Duration::from_secs(2),
    )
    .await;
    let tokens: std::collections::BTreeMap<String, u64> = a.owned().into_iter().collect();
    let poison = UNDECODABLE_ID.to_vec();
    let records: Vec<(&str, u64)> = poisoned.iter().map(|&q| (q, tokens[q])).collect();
    write_undecodable(&redis, &records).await;
    drop(a);
    keys_gone(&opts, &qs).await;
    let m = join_journaling(&opts, "s", true).await;
    let mut rx = m.events();
    let (must, ledger) = collected(&[&m], &s, Duration::from_secs(30)).await;
    let events = events_of(&mut rx);
    check_once(&ledger, &must, &s);
    adopted_once_each(&events, &qs, &s);
    assert!(exactly_one(&[&m], &qs), "owned: {:?}", m.owned());
    for &q in poisoned {
        assert!(
            events.iter().any(|e| matches!(
                e,
                FleetEvent::Undecodable { queue, records }
                    if queue == q && records.iter().any(|(id, _)| *id == poison)
            )),
            "{q}'s record reported: {events:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn undecodable_records_in_two_of_eight_queues_adopted_together() {
    undecodable(&[30; 8], &["q2", "q5"]).await;
}

/// The record sits among 20 000 others of q0, whose journal streams in page by page.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_undecodable_record_inside_a_huge_journal() {
    undecodable(&uneven(6, 20_000), &["q0"]).await;
}
