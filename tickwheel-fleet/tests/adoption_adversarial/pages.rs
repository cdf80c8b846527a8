//! Journals whose layout and history make the paged load work: tiny buckets written by the
//! dead member, one bucket a page and three pages a round trip at the survivor, deadlines
//! moved later and ends undone by later puts.

use std::time::Duration;

use tickwheel_redis::journal::JournalOptions;

use crate::common::*;
use crate::support::*;

/// A dead member with `bucket_load` 1 (a bucket split at every other record) journaled 6
/// queues (q0 with 3 000 timers, the others 0 to 4), due from 1 s on; then moved every fifth
/// not-ended timer 2 s later (a second put), and put again every other ended one (its end
/// undone: live again). The survivor loads with `load_page_buckets` 1 and
/// `load_pages_per_trip` 3: every live timer handed out exactly once, at its latest deadline
/// or later, no ended one, each queue adopted once with its count.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tiny_pages_later_deadlines_and_undone_ends_are_loaded_exactly() {
    let Some((_etcd, _redis, opts, qs)) = fleet_with(6).await else {
        return;
    };
    let tiny = JournalOptions {
        bucket_load: 1,
        ..JournalOptions::default()
    };
    let a = join_with(&opts, "a", tiny, nothing).await;
    owns(&a, qs.len()).await;
    let sizes = uneven(6, 3_000);
    let mut s = seeded(
        &a,
        &qs,
        &sizes,
        Duration::from_secs(1),
        Duration::from_secs(3),
    )
    .await;
    let mut puts = Vec::new();
    for ((q, id), at) in s.intended.iter_mut() {
        let i = id % 100_000;
        let ended = s.ended.contains(&(q.clone(), *id));
        if i % 5 == 0 && !ended {
            *at += Duration::from_secs(2);
        } else if !(ended && i % 2 == 0) {
            continue;
        }
        let w = a.journal_put(q, id, *at, &format!("{q}:{id}"));
        puts.push(((q.clone(), *id), w.expect("journal_put")));
    }
    for ((q, id), w) in puts {
        w.await.expect("put acknowledged");
        s.ended.remove(&(q, id));
    }
    drop(a);
    keys_gone(&opts, &qs).await;
    let paged = JournalOptions {
        load_page_buckets: 1,
        load_pages_per_trip: 3,
        ..JournalOptions::default()
    };
    let m = join_with(&opts, "s", paged, nothing).await;
    let mut rx = m.events();
    let (must, ledger) = collected(&[&m], &s, Duration::from_secs(60)).await;
    let events = events_of(&mut rx);
    check_once(&ledger, &must, &s);
    adopted_once_each(&events, &qs, &s);
}
