//! The Redis journal of live timers against a redis-server of the test's own: a round trip
//! of puts, reschedules and ends; stale tokens refused with nothing written; a writer racing
//! the adoption that fences it; buckets that stay listpack-encoded.

mod support;

use std::collections::BTreeMap;

use support::*;
use tickwheel_redis::journal::{Journal, JournalError, JournalOptions, JournalRecord, Op};
use tickwheel_redis::keys::JournalKeys;

fn put(id: u64, deadline_us: u64, value: &str) -> Op {
    support::put(&id.to_be_bytes(), deadline_us, value.as_bytes())
}

fn end(id: u64) -> Op {
    support::end(&id.to_be_bytes())
}

/// [`support::as_map`] with `u64` ids and UTF-8 values.
fn as_map(records: Vec<JournalRecord>) -> BTreeMap<u64, (u64, String)> {
    support::as_map(records)
        .into_iter()
        .map(|(id, (at, v))| {
            let id = u64::from_be_bytes(id.as_slice().try_into().expect("8-byte id"));
            (id, (at, String::from_utf8(v).expect("utf-8 value")))
        })
        .collect()
}

/// `OBJECT ENCODING` of `key`: how Redis stores its value (`listpack`, `hashtable`, …).
async fn encoding(c: &mut redis::aio::MultiplexedConnection, key: &str) -> String {
    redis::cmd("OBJECT")
        .arg("ENCODING")
        .arg(key)
        .query_async(c)
        .await
        .expect("encoding")
}

/// Every key of queue `q`'s journal that exists: the meta and the buckets.
async fn journal_keys(url: &str, q: &[u8]) -> Vec<String> {
    let mut c = raw(url).await;
    let k = JournalKeys::new("tickwheel", q);
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}*", k.bucket_prefix))
        .query_async(&mut c)
        .await
        .expect("keys");
    let meta: bool = redis::cmd("EXISTS")
        .arg(&k.meta)
        .query_async(&mut c)
        .await
        .expect("exists");
    if meta {
        keys.push(k.meta);
    }
    keys.sort();
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_of_puts_reschedules_and_ends() {
    let q = b"example.com";
    let Some((server, j)) = journal_on(q, 5).await else {
        return;
    };
    let mut model: BTreeMap<u64, (u64, String)> = BTreeMap::new();
    // Enough timers for many splits, in requests of mixed sizes.
    let mut pending = Vec::new();
    for chunk in (0..5000u64).collect::<Vec<_>>().chunks(37) {
        let ops = chunk
            .iter()
            .map(|&id| {
                model.insert(id, (1_000 + id, format!("v{id}")));
                put(id, 1_000 + id, &format!("v{id}"))
            })
            .collect();
        pending.push(j.submit(q, 5, ops));
    }
    for w in pending {
        w.await.expect("put");
    }
    // Reschedule every third, end every fifth (some both: the end wins, it comes later).
    let mut ops = Vec::new();
    for id in (0..5000u64).step_by(3) {
        model.insert(id, (9_000_000 + id, format!("r{id}")));
        ops.push(put(id, 9_000_000 + id, &format!("r{id}")));
    }
    for id in (0..5000u64).step_by(5) {
        model.remove(&id);
        ops.push(end(id));
    }
    // An end of an id never put does nothing.
    ops.push(end(777_777));
    let w = j.write(q, 5, ops).await.expect("reschedule and end");
    assert_eq!(w.live, model.len() as u64);
    assert_eq!(as_map(j.load(q, 5).await.expect("load")), model);

    // Ending every timer leaves no journal key at all: the live set is all there is.
    let ops = model.keys().map(|&id| end(id)).collect();
    let w = j.write(q, 5, ops).await.expect("end all");
    assert_eq!(w.live, 0);
    assert!(j.load(q, 5).await.expect("load").is_empty());
    assert_eq!(journal_keys(&server.url(), q).await, Vec::<String>::new());

    // Clear in the middle of a request: what follows it is all that stays.
    let ops = vec![put(1, 1, "a"), put(2, 2, "b"), Op::Clear, put(3, 3, "c")];
    assert_eq!(j.write(q, 5, ops).await.expect("clear").live, 1);
    let back = as_map(j.load(q, 5).await.expect("load"));
    assert_eq!(back, BTreeMap::from([(3, (3, "c".to_owned()))]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_entries_round_trip() {
    let Some((_server, [p])) = with_members(["mx1"]).await else {
        return;
    };
    adopt(&p, b"q", 3).await;
    let j = start(&p);
    let entry = tickwheel::sync::snapshot::SnapshotEntry {
        id: 42u64,
        deadline_us: 1_765_000_000_000_000,
        value: "message 42".to_owned(),
    };
    j.write(b"q", 3, vec![Op::put_entry(&entry).expect("encode")])
        .await
        .expect("put");
    let back = j.load(b"q", 3).await.expect("load");
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].entry::<u64, String>().expect("decode"), entry);
    assert_eq!(
        j.load_entries::<u64, String>(b"q", 3).await.expect("load"),
        vec![entry.clone()]
    );
    match j.load_entries::<String, String>(b"q", 3).await {
        Err(JournalError::Corrupt { queue, .. }) => assert_eq!(queue, b"q"),
        other => panic!("expected Corrupt, got {other:?}"),
    }
    j.write(b"q", 3, vec![Op::end_id(&42u64).expect("encode")])
        .await
        .expect("end");
    assert!(j.load(b"q", 3).await.expect("load").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_token_writes_nothing_and_is_told_the_current_epoch() {
    let q = b"example.com";
    let Some((server, ja, b)) = journal_and_rival(q, 5).await else {
        return;
    };
    let ops: Vec<Op> = (0..300).map(|id| put(id, id, "x")).collect();
    ja.write(q, 5, ops).await.expect("put under 5");
    // A token that was never current is refused too.
    match ja.write(q, 4, vec![put(999, 1, "y")]).await {
        Err(JournalError::Fenced {
            queue,
            token,
            current,
        }) => assert_eq!((queue.as_slice(), token, current), (&q[..], 4, Some(5))),
        other => panic!("expected Fenced, got {other:?}"),
    }
    adopt(&b, q, 9).await;
    let jb = start(&b);
    let before = jb.load(q, 9).await.expect("load under 9");
    let keys_before = journal_keys(&server.url(), q).await;
    // The old holder's batch: puts, an end, a clear. None of it may land.
    let stale = vec![
        put(1000, 1, "late"),
        end(0),
        Op::Clear,
        put(1001, 1, "late"),
    ];
    match ja.write(q, 5, stale).await {
        Err(e @ JournalError::Fenced { .. }) => {
            assert!(e.is_fenced() && !e.is_retryable());
            let JournalError::Fenced { current, .. } = e else {
                unreachable!()
            };
            assert_eq!(current, Some(9));
        }
        other => panic!("expected Fenced, got {other:?}"),
    }
    // A stale load reads nothing either.
    assert!(matches!(
        ja.load(q, 5).await,
        Err(JournalError::Fenced {
            current: Some(9),
            ..
        })
    ));
    assert_eq!(as_map(jb.load(q, 9).await.expect("load")), as_map(before));
    assert_eq!(journal_keys(&server.url(), q).await, keys_before);
    // A queue with no owner record: fenced, with no current epoch.
    match ja.write(b"nobody", 1, vec![put(1, 1, "z")]).await {
        Err(JournalError::Fenced { current: None, .. }) => {}
        other => panic!("expected Fenced without an epoch, got {other:?}"),
    }
    assert_eq!(
        journal_keys(&server.url(), b"nobody").await,
        Vec::<String>::new()
    );
}

/// A writer keeps putting new ids while another member adopts the queue with a larger token.
/// Every put the old writer saw acknowledged is in the new holder's load, none it saw fenced
/// is, and once fenced it stays fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_racing_an_adoption_is_fenced_from_the_adoption_on() {
    let q = b"raced";
    let Some((_server, ja, b)) = journal_and_rival(q, 10).await else {
        return;
    };
    let adopted = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = std::sync::Arc::clone(&adopted);
    let writer = tokio::spawn(async move {
        let mut results = Vec::new();
        let mut fenced_seen = 0;
        let mut after = 0;
        let mut next = 0u64;
        // Rounds of concurrent single-put submits, until enough rounds were fenced (or, if
        // none ever is, 20 rounds past the adoption).
        while fenced_seen < 3 && after < 20 {
            if seen.load(std::sync::atomic::Ordering::SeqCst) {
                after += 1;
            }
            let round: Vec<_> = (0..50)
                .map(|k| (next + k, ja.submit(q, 10, vec![put(next + k, 1, "a")])))
                .collect();
            next += 50;
            let mut any_fenced = false;
            for (id, w) in round {
                let r = w.await;
                any_fenced |= matches!(r, Err(JournalError::Fenced { .. }));
                results.push((id, r));
            }
            if any_fenced {
                fenced_seen += 1;
            }
        }
        results
    });
    // Let some rounds land first (not a timing claim: the checks hold wherever the
    // adoption falls).
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    adopt(&b, q, 11).await;
    adopted.store(true, std::sync::atomic::Ordering::SeqCst);
    let results = writer.await.expect("writer");
    let jb = start(&b);
    let held = as_map(jb.load(q, 11).await.expect("load"));
    let mut acked = 0;
    let mut fenced_from: Option<u64> = None;
    for (id, r) in &results {
        match r {
            Ok(_) => {
                acked += 1;
                assert!(held.contains_key(id), "acknowledged put {id} lost");
                assert!(
                    fenced_from.is_none(),
                    "put {id} acknowledged after a fenced one"
                );
            }
            Err(JournalError::Fenced { current, .. }) => {
                assert_eq!(*current, Some(11));
                assert!(!held.contains_key(id), "fenced put {id} was written");
                fenced_from.get_or_insert(*id);
            }
            Err(e) => panic!("put {id}: {e}"),
        }
    }
    assert_eq!(held.len(), acked);
    assert!(fenced_from.is_some(), "no put fenced after the adoption");
    // The new holder writes on.
    jb.write(q, 11, vec![end(0)]).await.expect("new holder");
}

/// Buckets stay listpack-encoded (Redis's compact encoding) as a queue grows: what keeps a
/// record at a few bytes over its id and value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buckets_stay_listpack_encoded() {
    let q = b"big";
    let Some((server, j)) = journal_on(q, 2).await else {
        return;
    };
    let n = 20_000u64;
    let mut pending = Vec::new();
    for base in (0..n).step_by(1000) {
        let ops = (base..base + 1000)
            .map(|id| put(id, 1_765_000_000_000_000 + id, "v"))
            .collect();
        pending.push(j.submit(q, 2, ops));
    }
    for w in pending {
        w.await.expect("put");
    }
    let keys = journal_keys(&server.url(), q).await;
    let mut c = raw(&server.url()).await;
    let mut buckets = 0;
    for k in keys.iter().filter(|k| !k.ends_with(":jm")) {
        assert_eq!(encoding(&mut c, k).await, "listpack", "{k}");
        buckets += 1;
    }
    // Split as the queue grew: about n / 32 buckets.
    assert!(buckets >= n / 128, "{buckets} buckets for {n} timers");
    assert_eq!(j.load(q, 2).await.expect("load").len() as u64, n);
}

/// A server that lost `appendfsync always` after the connect: the next batch is refused with
/// nothing sent, not acknowledged without the fsync the answer stands for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_fsync_always_gets_no_batch() {
    let options = JournalOptions {
        durability_recheck: std::time::Duration::ZERO,
        ..JournalOptions::default()
    };
    let Some((server, j)) = journal_on_with(b"q", 4, options).await else {
        return;
    };
    j.write(b"q", 4, vec![put(1, 1, "a")])
        .await
        .expect("durable server");
    let url = server.url();
    config_set(&url, "appendfsync", "everysec").await;
    match j.write(b"q", 4, vec![put(2, 2, "b")]).await {
        Err(JournalError::Redis(tickwheel_redis::Error::UnsafeServer { problems, .. })) => {
            assert!(problems.contains("appendfsync"), "{problems}");
        }
        other => panic!("expected UnsafeServer, got {other:?}"),
    }
    config_set(&url, "appendfsync", "always").await;
    let back = as_map(j.load(b"q", 4).await.expect("load"));
    assert_eq!(back, BTreeMap::from([(1, (1, "a".to_owned()))]));
}

/// A split that moves more records than Lua can `unpack` at once (a few thousand: a large
/// `bucket_load`, or ids that hash alike) moves them in slices, and the call succeeds whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_of_a_crowded_bucket_moves_it_whole() {
    let options = JournalOptions {
        bucket_load: 5000,
        max_call_ops: 10_000,
        ..JournalOptions::default()
    };
    let Some((server, j)) = journal_on_with(b"q", 6, options).await else {
        return;
    };
    // 5 001 ids with an odd hash: all in bucket 0 until the put that splits it, then all
    // moved to bucket 1 by that one split.
    let ids: Vec<u64> = (0u64..)
        .filter(|id| h32(&id.to_be_bytes()) % 2 == 1)
        .take(5001)
        .collect();
    let ops: Vec<Op> = ids.iter().map(|&id| put(id, id, "x")).collect();
    assert_eq!(j.write(b"q", 6, ops).await.expect("put").live, 5001);
    let k = JournalKeys::new("tickwheel", b"q");
    let mut c = raw(&server.url()).await;
    let in_1: u64 = redis::cmd("HLEN")
        .arg(k.bucket(1))
        .query_async(&mut c)
        .await
        .expect("hlen");
    assert_eq!(in_1, 5001, "every record moved by the split");
    let back = as_map(j.load(b"q", 6).await.expect("load"));
    assert_eq!(back.keys().copied().collect::<Vec<_>>(), ids);
}

/// One step of the model test: queue index, op.
#[derive(Debug, Clone)]
enum Step {
    Put(usize, u64, u64),
    End(usize, u64),
    Clear(usize),
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    // Few ids, so puts replace and ends hit; clears rare.
    prop_oneof![
        6 => (0..2usize, 0..400u64, any::<u64>()).prop_map(|(q, id, d)| Step::Put(q, id, d)),
        3 => (0..2usize, 0..400u64).prop_map(|(q, id)| Step::End(q, id)),
        1 => (0..2usize).prop_map(Step::Clear),
    ]
}

/// Any sequence of puts, ends and clears over two queues, sent in requests of any size, loads
/// back as a map of the last put of each id not ended or cleared since; the live count each
/// write reports is that map's size, and the buckets stay listpack-encoded.
#[test]
fn any_sequence_loads_back_as_the_model() {
    use proptest::test_runner::{Config, TestRunner};
    let Some(server) = server() else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let url = server.url();
    let (p, j) = rt.block_on(async {
        let p = member(&server, "mx1").await;
        for q in [&b"m0"[..], b"m1"] {
            adopt(&p, q, 1).await;
        }
        let options = JournalOptions {
            bucket_load: 4,
            ..JournalOptions::default()
        };
        let j = start_with(&p, options);
        (p, j)
    });
    let mut runner = TestRunner::new(Config {
        cases: 24,
        ..Config::default()
    });
    let strategy = (proptest::collection::vec(step(), 0..600), 1usize..50);
    let result = runner.run(&strategy, |(steps, per_request)| {
        rt.block_on(async {
            let names: [&[u8]; 2] = [b"m0", b"m1"];
            for q in names {
                j.write(q, 1, vec![Op::Clear]).await.expect("clear");
            }
            let mut model: [BTreeMap<u64, (u64, String)>; 2] = Default::default();
            let mut pending = Vec::new();
            for chunk in steps.chunks(per_request) {
                // One request per queue per chunk, in order.
                let mut ops: [Vec<Op>; 2] = Default::default();
                for s in chunk {
                    match *s {
                        Step::Put(q, id, d) => {
                            model[q].insert(id, (d, format!("v{d}")));
                            ops[q].push(put(id, d, &format!("v{d}")));
                        }
                        Step::End(q, id) => {
                            model[q].remove(&id);
                            ops[q].push(end(id));
                        }
                        Step::Clear(q) => {
                            model[q].clear();
                            ops[q].push(Op::Clear);
                        }
                    }
                }
                for (q, ops) in ops.into_iter().enumerate() {
                    if !ops.is_empty() {
                        pending.push(j.submit(names[q], 1, ops));
                    }
                }
            }
            for w in pending {
                w.await.expect("write");
            }
            for q in 0..2 {
                let back = as_map(j.load(names[q], 1).await.expect("load"));
                assert_eq!(back, model[q], "queue {q}");
                let w = j.write(names[q], 1, Vec::new()).await.expect("count");
                assert_eq!(w.live, model[q].len() as u64);
            }
            let mut c = raw(&url).await;
            for q in names {
                for k in journal_keys(&url, q)
                    .await
                    .iter()
                    .filter(|k| !k.ends_with(":jm"))
                {
                    assert_eq!(encoding(&mut c, k).await, "listpack", "{k}");
                }
            }
        });
        Ok(())
    });
    drop(p);
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// `load_each` hands on what `load_entries` returns, a page at a time over several round
/// trips (pages of 2 buckets, 3 calls a trip: 1 000 records in about 30 buckets), each id
/// once; under a stale token it is fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_each_hands_on_every_record_once_a_page_at_a_time() {
    let Some((_server, [p])) = with_members(["mx1"]).await else {
        return;
    };
    adopt(&p, b"q", 3).await;
    let options = JournalOptions {
        load_page_buckets: 2,
        load_pages_per_trip: 3,
        ..JournalOptions::default()
    };
    let j = Journal::start(p.clone(), options).expect("runtime");
    let ops: Vec<Op> = (0..1000u64)
        .map(|id| Op::put(&id, 1_700_000_000_000_000 + id, &format!("v{id}")).expect("encode"))
        .collect();
    j.write(b"q", 3, ops).await.expect("put");
    let mut pages = 0;
    let mut seen: BTreeMap<u64, (u64, String)> = BTreeMap::new();
    let n = j
        .load_each::<u64, String>(b"q", 3, |page| {
            pages += 1;
            assert!(
                page.len() <= 2 * 2 * 32 * 2,
                "a page of {} records",
                page.len()
            );
            for e in page {
                assert!(
                    seen.insert(e.id, (e.deadline_us, e.value)).is_none(),
                    "id {} twice",
                    e.id
                );
            }
        })
        .await
        .expect("load_each");
    assert_eq!(n, 1000);
    assert!(pages > 3, "{pages} pages: more than one round trip");
    let all: BTreeMap<u64, (u64, String)> = j
        .load_entries::<u64, String>(b"q", 3)
        .await
        .expect("load_entries")
        .into_iter()
        .map(|e| (e.id, (e.deadline_us, e.value)))
        .collect();
    assert_eq!(seen, all);
    assert_eq!(all.len(), 1000);
    adopt(&p, b"q", 4).await;
    match j.load_each::<u64, String>(b"q", 3, |_| {}).await {
        Err(JournalError::Fenced { current, .. }) => assert_eq!(current, Some(4)),
        other => panic!("expected Fenced, got {other:?}"),
    }
}
