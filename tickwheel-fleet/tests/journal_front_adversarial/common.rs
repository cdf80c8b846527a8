//! What the scenarios share: the ledger, the survivor's check, the front's calls that must
//! succeed, a journal reader of the test's own.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tickwheel::sync::{FrozenEntry, Scheduler};
use tickwheel_fleet::{FleetOptions, Member, RecoveryError};
use tickwheel_redis::journal::{JournalRecord, Pending};
use tickwheel_testkit::etcd::EtcdServer;
use tickwheel_testkit::redis::RedisServer;

use super::support::*;

pub(crate) const CHILD: &str = "TICKWHEEL_FLEET_JOURNAL_FRONT_ADVERSARIAL_CHILD";
pub(crate) const HOUR: Duration = Duration::from_secs(3600);
pub(crate) const MIN: Duration = Duration::from_secs(60);

pub(crate) fn value(q: &str, id: u64) -> String {
    format!("{q}:{id}")
}

/// `at` on the wall clock, in milliseconds since the Unix epoch (signed offset from now).
pub(crate) fn unix_ms(at: Instant) -> i64 {
    let (i, u) = (Instant::now(), SystemTime::now());
    let now = u.duration_since(UNIX_EPOCH).expect("clock").as_millis() as i64;
    if at >= i {
        now + (at - i).as_millis() as i64
    } else {
        now - (i - at).as_millis() as i64
    }
}

/// Awaits a write the child counts on; panics (so no `DONE`) if it failed.
pub(crate) async fn ack(p: Pending, what: &str) {
    if let Err(e) = p.await {
        panic!("{what}: {e}");
    }
}

/// How many queues each scenario's fleet has.
pub(crate) fn queues_of(scenario: &str) -> usize {
    match scenario {
        "hammer" => 3,
        "zombie" => 1,
        _ => 2,
    }
}

pub(crate) fn sched(m: &FleetMember, q: &str, id: u64, at: Instant) -> Pending {
    match m.schedule(q.to_owned(), id, at, value(q, id)) {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => panic!("scheduler refused {q}/{id}: {e:?}"),
        Err(e) => panic!("front refused {q}/{id}: {e}"),
    }
}

pub(crate) async fn resched(m: &FleetMember, id: u64, at: Instant) {
    match m.reschedule(&id, at) {
        Ok(Ok(p)) => ack(p, "reschedule").await,
        other => panic!("reschedule {id}: {other:?}"),
    }
}

/// Parsed ledger lines `<prefix><queue> <id> [<ms>]`.
pub(crate) fn ledger(lines: &[String], prefix: &str) -> BTreeMap<(String, u64), i64> {
    let mut out = BTreeMap::new();
    for l in lines {
        let Some(rest) = l.strip_prefix(prefix) else {
            continue;
        };
        let p: Vec<&str> = rest.split(' ').collect();
        let ms = p.get(2).and_then(|s| s.parse().ok()).unwrap_or(0);
        out.insert((p[0].to_owned(), p[1].parse().expect("id")), ms);
    }
    out
}

/// Runs scenario `name` in a child until `DONE`, kills it, joins survivor `s`: the
/// survivor, the child's lines and the queues (`None`: skip or the child's own run).
pub(crate) async fn after_death(
    name: &str,
    limit: Duration,
) -> Option<(
    FleetMember,
    Vec<String>,
    Vec<String>,
    EtcdServer,
    RedisServer,
)> {
    let n = queues_of(name);
    let test = ("adversarial_child", CHILD);
    let (etcd, redis, opts, qs, child) = after_killed_child(test, name, n, limit).await?;
    let s = join_journaling(&opts, "s", true).await;
    owns(&s, n).await;
    Some((s, child.lines, qs, etcd, redis))
}

/// Asserts that `s` holds exactly `live` (queue, id → unix ms) and `dropped`, each live one
/// in its queue, never earlier than its acknowledged deadline nor more than 5 s later.
pub(crate) async fn holds_exactly(
    s: &FleetMember,
    qs: &[String],
    live: &BTreeMap<(String, u64), i64>,
    dropped: &BTreeSet<(String, u64)>,
    lines: &[String],
) {
    let want: BTreeSet<(String, u64)> = live
        .keys()
        .cloned()
        .chain(dropped.iter().cloned())
        .collect();
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        while held(s, qs).len() < want.len() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let got = held(s, qs);
    let missing: Vec<_> = want.difference(&got).collect();
    let extra: Vec<_> = got.difference(&want).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "survivor: missing {missing:?}, extra (ended or never acknowledged) {extra:?}\n{lines:?}"
    );
    for ((q, id), ms) in live {
        let info = s.scheduler().lookup(id).expect("held");
        assert_eq!(&info.queue, q, "{id} in the wrong queue");
        let there = unix_ms(info.deadline);
        assert!(
            there >= ms - 100 && there <= ms + 5000,
            "{q}/{id}: acknowledged due at {ms} ms, the survivor has {there} ms ({:+} ms)",
            there - ms
        );
    }
}

/// A member of `opts` with the journal on, `String` ids and values, a recovery of nothing.
pub(crate) async fn join_strings(
    opts: &FleetOptions,
    name: &str,
) -> Member<String, String, String> {
    let mut opts = opts.clone();
    opts.journal = Some(tickwheel_redis::journal::JournalOptions::default());
    let sched = Arc::new(Scheduler::<String, String, String>::new());
    Member::join(opts, name, sched, |_q: String| async move {
        Ok::<Vec<FrozenEntry<String, String>>, RecoveryError>(Vec::new())
    })
    .await
    .expect("join")
}

/// The records of `q`'s journal under `token`, read by a journal handle of the test's own.
pub(crate) async fn records(redis: &RedisServer, q: &str, token: u64) -> Vec<JournalRecord> {
    let j = crate::support::own_journal(redis, "reader").await;
    j.load(q.as_bytes(), token).await.expect("load")
}
