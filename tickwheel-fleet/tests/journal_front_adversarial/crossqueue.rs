//! An id with records in two queues' journals, met by a member that takes the second queue
//! from an orderly leave (a handoff, or a leftover offer and the journal if the move timed
//! out): the later deadline wins and the losing record is ended.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use tickwheel_testkit::redis::RedisServer;

use super::common::*;
use super::support::*;

/// The ids of `q`'s journal records under `token`.
async fn journal_ids(redis: &RedisServer, q: &str, token: u64) -> BTreeSet<u64> {
    let records = records(redis, q, token).await;
    records
        .iter()
        .map(|r| r.entry::<u64, String>().expect("decodes").id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_move_keeps_the_later_deadline_of_an_id_journaled_in_two_queues() {
    let Some((_etcd, redis, opts, qs, a)) = journaled_a(4).await else {
        return;
    };
    let b = join_journaling(&opts, "b", true).await;
    shares(&a, &b, &qs).await;
    let (qa, qb) = (queue_of(&a, &qs), queue_of(&b, &qs));
    let now = Instant::now();
    // 7: handed out in qa and dropped (its record stays), then scheduled in qb an hour ahead.
    ack(sched(&a, qa, 7, now), "schedule").await;
    let out = due_within(&a, 1, Duration::from_secs(20)).await;
    let popped: Vec<u64> = out.iter().map(|d| *d.due.id()).collect();
    assert_eq!(popped, [7]);
    drop(out);
    ack(sched(&b, qb, 7, now + HOUR), "schedule in qb").await;
    // 9: live in qb at ten minutes and in qa at two hours: qa's, the later, wins.
    ack(sched(&b, qb, 9, now + 10 * MIN), "schedule in qb").await;
    ack(sched(&a, qa, 9, now + 2 * HOUR), "schedule in qa").await;
    a.leave().await.expect("leave");
    owns(&b, qs.len()).await;
    let near = |id: u64, at: Instant| {
        let info = b.scheduler().lookup(&id).expect("held");
        let (there, want) = (unix_ms(info.deadline), unix_ms(at));
        assert!(
            there >= want - 100 && there <= want + 5000,
            "{id}: due at {want} ms, b has {there} ms ({:+} ms)",
            there - want
        );
        info.queue
    };
    assert_eq!(&near(7, now + HOUR), qb, "7 left its acknowledged queue");
    assert_eq!(&near(9, now + 2 * HOUR), qa, "9 kept its earlier deadline");
    assert_eq!(
        b.scheduler().with_value(&9, String::clone),
        Some(value(qa, 9))
    );
    // The losing records are ended, the winners' kept: the next load meets neither again.
    let in_qa = journal_ids(&redis, qa, token_of(&b, qa).expect("b owns qa")).await;
    let in_qb = journal_ids(&redis, qb, token_of(&b, qb).expect("b owns qb")).await;
    assert_eq!(
        (in_qa.contains(&7), in_qa.contains(&9)),
        (false, true),
        "qa's journal: {in_qa:?}"
    );
    assert_eq!(
        (in_qb.contains(&7), in_qb.contains(&9)),
        (true, false),
        "qb's journal: {in_qb:?}"
    );
}
