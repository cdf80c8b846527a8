//! The Redis journal under hostile inputs and orderings: stale, future and absent tokens,
//! odd ids, queue names and deadlines, interleavings of puts and ends, a server restarted or
//! reconfigured under the writer (its growth: `journal_growth_adversarial.rs`).

mod support;

use std::collections::BTreeSet;

use support::*;
use tickwheel_redis::Protocol;
use tickwheel_redis::journal::{Journal, JournalError, JournalOptions, Op};
use tickwheel_redis::keys::JournalKeys;

/// What `call` answers once a restarted server is back: retried while unreachable, at most
/// 200 times 50 ms apart. Panics (naming `what`) on any other error or if it never answers.
async fn once_back<T, F, Fut>(what: &str, mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, JournalError>>,
{
    for _ in 0..200 {
        match call().await {
            Ok(v) => return v,
            Err(e) if e.is_retryable() => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
    panic!("{what}: the journal never came back");
}

/// A token above the current epoch, below it, and any token on a queue with no owner record
/// are all refused, for writes and for reads, and leave nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn future_stale_and_ownerless_tokens_are_fenced_for_reads_and_writes() {
    let q = b"fenced";
    let Some((server, j)) = journal_on(q, 7).await else {
        return;
    };
    j.write(q, 7, vec![put(b"a", 1, b"x")]).await.expect("put");
    for token in [0, 6, 8, u64::MAX] {
        let w = j.write(q, token, vec![put(b"b", 2, b"y"), end(b"a")]).await;
        match w {
            Err(JournalError::Fenced {
                current, token: t, ..
            }) => {
                assert_eq!(current, Some(7));
                assert_eq!(t, token);
            }
            other => panic!("write under {token}: {other:?}"),
        }
        let l = j.load(q, token).await;
        assert!(
            matches!(
                l,
                Err(JournalError::Fenced {
                    current: Some(7),
                    ..
                })
            ),
            "load under {token}: {l:?}"
        );
    }
    let before = key_count(&server.url()).await;
    for token in [0, 1, 7, u64::MAX] {
        let w = j.write(b"nobody", token, vec![put(b"a", 1, b"x")]).await;
        assert!(
            matches!(w, Err(JournalError::Fenced { current: None, .. })),
            "{w:?}"
        );
        assert!(matches!(
            j.load(b"nobody", token).await,
            Err(JournalError::Fenced { current: None, .. })
        ));
    }
    assert_eq!(key_count(&server.url()).await, before);
    let held = as_map(j.load(q, 7).await.expect("load"));
    assert_eq!(held.len(), 1);
    assert_eq!(held.get(&b"a"[..]), Some(&(1, b"x".to_vec())));
}

/// Empty ids and values, ids and values of every byte, deadlines 0 and `u64::MAX`, and queue
/// names that are empty, not UTF-8, or full of hash-tag braces: each queue loads back exactly
/// what it was given, and no queue sees another's records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_ids_values_deadlines_and_queue_names_round_trip_apart() {
    let Some((_server, [p])) = with_members(["mx1"]).await else {
        return;
    };
    let queues: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"{".to_vec(),
        b"}".to_vec(),
        b"{}".to_vec(),
        b"a{b}c".to_vec(),
        b"{a}".to_vec(),
        b"a".to_vec(),
        vec![0xff, 0xfe, 0x00, b'{'],
        vec![0x00],
        "é{}".as_bytes().to_vec(),
    ];
    let j = start(&p);
    let all_bytes: Vec<u8> = (0..=255u8).collect();
    let mut models = Vec::new();
    for (k, q) in queues.iter().enumerate() {
        let token = 3 + k as u64;
        adopt(&p, q, token).await;
        let mut model = Model::new();
        let records: Vec<(Vec<u8>, u64, Vec<u8>)> = vec![
            (Vec::new(), 0, Vec::new()),
            (all_bytes.clone(), u64::MAX, all_bytes.clone()),
            (vec![0], 1, vec![0]),
            (vec![0, 0], u64::MAX - 1, b"\r\n".to_vec()),
            (q.clone(), 1 << 63, q.clone()),
            (format!("queue {k}").into_bytes(), 127, vec![0x80]),
            (b"P".to_vec(), 128, b"D".to_vec()),
            (b"C".to_vec(), 16_383, b"C".to_vec()),
        ];
        let mut ops = Vec::new();
        for (id, d, v) in records {
            model.insert(id.clone(), (d, v.clone()));
            ops.push(put(&id, d, &v));
        }
        let w = j.write(q, token, ops).await.expect("put");
        assert_eq!(w.live, model.len() as u64, "queue {q:?}");
        models.push((q.clone(), token, model));
    }
    for (q, token, model) in &models {
        assert_eq!(
            &as_map(j.load(q, *token).await.expect("load")),
            model,
            "queue {q:?}"
        );
    }
}

/// Within one request, across requests of one batch and across batches, the last op on an
/// id wins: a put after an end brings it back, an end after a put removes it. The same id in
/// two queues is two records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_op_on_an_id_wins_in_a_request_a_batch_and_across_batches() {
    let Some((_server, [p])) = with_members(["mx1"]).await else {
        return;
    };
    let (q1, q2) = (&b"one"[..], &b"two"[..]);
    adopt(&p, q1, 4).await;
    adopt(&p, q2, 9).await;
    let j = start_with(
        &p,
        JournalOptions {
            max_call_ops: 3,
            ..JournalOptions::default()
        },
    );
    let mut m1 = Model::new();
    let mut m2 = Model::new();
    // One request: put, end, put again of id 1; put then end of id 2.
    j.write(
        q1,
        4,
        vec![
            put(b"1", 1, b"a"),
            end(b"1"),
            put(b"1", 2, b"b"),
            put(b"2", 2, b"x"),
            end(b"2"),
        ],
    )
    .await
    .expect("one request");
    m1.insert(b"1".to_vec(), (2, b"b".to_vec()));
    // One batch of many requests, interleaving two queues and the same ids, split into calls
    // of at most 3 ops: submitted without awaiting, in this order.
    let mut pending = Vec::new();
    for round in 0..200u64 {
        let id = num(round % 7);
        let (q, t, m) = if round % 2 == 0 {
            (q1, 4, &mut m1)
        } else {
            (q2, 9, &mut m2)
        };
        if round % 3 == 0 {
            m.remove(&id);
            pending.push(j.submit(q, t, vec![end(&id)]));
        } else {
            m.insert(id.clone(), (round, num(round)));
            pending.push(j.submit(q, t, vec![put(&id, round, &num(round))]));
        }
    }
    for w in pending {
        w.await.expect("batched");
    }
    assert_eq!(as_map(j.load(q1, 4).await.expect("load")), m1);
    assert_eq!(as_map(j.load(q2, 9).await.expect("load")), m2);
    // Across batches: an end, awaited, then a put of the same id.
    j.write(q1, 4, vec![end(b"1")]).await.expect("end");
    j.write(q1, 4, vec![put(b"1", 77, b"back")])
        .await
        .expect("put");
    m1.insert(b"1".to_vec(), (77, b"back".to_vec()));
    assert_eq!(as_map(j.load(q1, 4).await.expect("load")), m1);
}

/// The server switched to `appendfsync everysec` at run time: the next write is not
/// acknowledged as durable (a journal write "returns once the ops are durable").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appendfsync_changed_at_run_time_fails_the_next_write() {
    let q = b"fsync";
    let Some((server, j)) = journal_on(q, 2).await else {
        return;
    };
    j.write(q, 2, vec![put(b"a", 1, b"x")])
        .await
        .expect("durable put");
    config_set(&server.url(), "appendfsync", "no").await;
    let w = j.write(q, 2, vec![put(b"b", 1, b"x")]).await;
    assert!(
        w.is_err(),
        "a write was acknowledged as durable with appendfsync no: {w:?}"
    );
}

/// Redis SIGKILLed and restarted from its AOF: a write while it is down is reported (not
/// acknowledged), the journal keeps working once it is back, and every acknowledged record
/// is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_then_back_reports_and_recovers() {
    let q = b"restart";
    let Some((mut server, j)) = journal_on(q, 2).await else {
        return;
    };
    let mut model = Model::new();
    for i in 0..100u64 {
        model.insert(num(i), (i, b"v".to_vec()));
    }
    let ops: Vec<Op> = (0..100u64).map(|i| put(&num(i), i, b"v")).collect();
    j.write(q, 2, ops).await.expect("before");
    server.kill9().expect("kill");
    let down = j.write(q, 2, vec![put(b"down", 1, b"d")]).await;
    assert!(
        matches!(&down, Err(e) if e.is_retryable()),
        "a write to a dead server: {down:?}"
    );
    server.restart().expect("restart");
    // Retries until the connection is back: the same ops, idempotent.
    let w = once_back("write after restart", || {
        j.write(q, 2, vec![put(b"down", 1, b"d"), end(&num(0))])
    })
    .await;
    model.insert(b"down".to_vec(), (1, b"d".to_vec()));
    model.remove(&num(0));
    assert_eq!(w.live, model.len() as u64);
    assert_eq!(as_map(j.load(q, 2).await.expect("load")), model);
}

/// A request larger than `max_call_ops` many times over (200 000 ops) goes through whole
/// (one script call, as documented; a response timeout long enough that the machine's speed
/// does not decide the outcome).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_request_far_past_max_call_ops_applies_whole() {
    let Some(server) = server() else {
        return;
    };
    let options = tickwheel_redis::Options {
        response_timeout: std::time::Duration::from_secs(300),
        ..tickwheel_redis::Options::default()
    };
    let p = Protocol::connect(
        &server.url(),
        tickwheel_redis::Member::new_boot("mx1"),
        options,
    )
    .await
    .expect("connect");
    let q = b"bigcall";
    adopt(&p, q, 2).await;
    let j = start(&p);
    let ops: Vec<Op> = (0..200_000u64).map(|i| put(&num(i), i, b"v")).collect();
    let w = j.write(q, 2, ops).await.expect("big request");
    assert_eq!(w.live, 200_000);
    assert_eq!(j.load(q, 2).await.expect("load").len(), 200_000);
}

/// A record planted without a readable deadline (an empty stored value) is reported as
/// corrupt, naming the queue, not loaded as a timer due at 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_without_a_deadline_is_corrupt() {
    let q = b"planted";
    let Some((server, j)) = journal_on(q, 2).await else {
        return;
    };
    j.write(q, 2, vec![put(b"a", 1, b"x")]).await.expect("put");
    let k = JournalKeys::new("tickwheel", q);
    command(
        &server.url(),
        redis::cmd("HSET").arg(k.bucket(0)).arg("bad").arg(""),
    )
    .await;
    let l = j.load(q, 2).await;
    assert!(
        matches!(&l, Err(JournalError::Corrupt { queue, .. }) if queue == q),
        "{l:?}"
    );
}

/// Two handles (two connections) write the same queue under the same token at once, over
/// overlapping ids, with different split loads: the live count the scripts keep always
/// equals the records a load finds, and a clear of the wide queue leaves no key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_writers_interleaving_keep_the_count_and_clear_leaves_nothing() {
    let Some((server, [p1, p2])) = with_members(["mx1", "mx2"]).await else {
        return;
    };
    let url = server.url();
    let q = b"two";
    let base = key_count(&url).await;
    adopt(&p1, q, 8).await;
    let j1 = start_with(
        &p1,
        JournalOptions {
            bucket_load: 1,
            ..JournalOptions::default()
        },
    );
    let j2 = start_with(
        &p2,
        JournalOptions {
            bucket_load: 1000,
            ..JournalOptions::default()
        },
    );
    let run = |j: Journal, seed: u64| {
        tokio::spawn(async move {
            let mut x = seed;
            let mut pending = Vec::new();
            for _ in 0..4000 {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let id = num((x >> 33) % 1500);
                if (x >> 20).is_multiple_of(3) {
                    pending.push(j.submit(q, 8, vec![end(&id)]));
                } else {
                    pending.push(j.submit(q, 8, vec![put(&id, x >> 40, b"w")]));
                }
            }
            for w in pending {
                w.await.expect("write");
            }
        })
    };
    let (a, b) = (run(j1.clone(), 1), run(j2.clone(), 2));
    a.await.expect("writer 1");
    b.await.expect("writer 2");
    let loaded = as_map(j1.load(q, 8).await.expect("load"));
    let w = j2.write(q, 8, vec![]).await.expect("empty write");
    assert_eq!(
        w.live,
        loaded.len() as u64,
        "the kept count differs from the records"
    );
    let w = j1.write(q, 8, vec![Op::Clear]).await.expect("clear");
    assert_eq!(w.live, 0);
    assert!(j2.load(q, 8).await.expect("load").is_empty());
    // Only the owner record of the queue stays.
    assert!(key_count(&url).await <= base + 1, "keys left after a clear");
}

/// redis-server SIGKILLed while batches are in flight, then restarted from its AOF: every put
/// acknowledged before the kill is loaded back, and every end acknowledged is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_of_redis_mid_batch_loses_no_acknowledged_write() {
    let q = b"killed";
    let Some((mut server, j)) = journal_on(q, 2).await else {
        return;
    };
    // Ends of ids put and acknowledged first, then puts, racing the kill.
    let first: Vec<Op> = (0..2000u64).map(|i| put(&num(i), i, b"v")).collect();
    j.write(q, 2, first).await.expect("first puts");
    let progress = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let writer = {
        let j = j.clone();
        let progress = std::sync::Arc::clone(&progress);
        tokio::spawn(async move {
            let mut acked = Vec::new();
            let ids: Vec<u64> = (0..40_000u64).collect();
            for chunk in ids.chunks(250) {
                // A chunk of single-op submits, several batches in flight at once.
                let pending: Vec<_> = chunk
                    .iter()
                    .map(|&i| {
                        let op = if i < 2000 {
                            end(&num(i))
                        } else {
                            put(&num(i), i, b"v")
                        };
                        (i, j.submit(q, 2, vec![op]))
                    })
                    .collect();
                let mut failed = false;
                for (i, w) in pending {
                    if w.await.is_ok() {
                        acked.push(i);
                        progress.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    } else {
                        failed = true;
                    }
                }
                if failed {
                    break;
                }
            }
            acked
        })
    };
    // Kill once a few thousand are acknowledged (the writer keeps submitting).
    while progress.load(std::sync::atomic::Ordering::SeqCst) < 3000 {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    server.kill9().expect("kill");
    let acked = writer.await.expect("writer");
    server.restart().expect("restart");
    let held: BTreeSet<Vec<u8>> = once_back("load after restart", || j.load(q, 2))
        .await
        .into_iter()
        .map(|r| r.id)
        .collect();
    for i in acked {
        if i < 2000 {
            assert!(!held.contains(&num(i)), "acknowledged end of {i} undone");
        } else {
            assert!(held.contains(&num(i)), "acknowledged put of {i} lost");
        }
    }
}
