//! The Redis journal's growth under hostile sizes: huge ids and values, queues split wide,
//! emptied and refilled, loads during splits, churn at a constant count, thousands of ids of
//! one bucket, and Redis's memory per live timer.

mod support;

use std::collections::BTreeSet;

use support::*;
use tickwheel_redis::journal::{JournalError, JournalOptions, MAX_ID_BYTES, Op};

/// Ids past `MAX_ID_BYTES` (here 4 MiB) are refused before anything is sent (the scripts
/// hash ids byte by byte, again at every split: such ids held Redis for seconds and left a
/// later request of small puts with an unknown outcome). Ids at the limit and values far past
/// the listpack limits (1 MiB; every split that moves one rewrites it, so the AOF grows by
/// tens of MiB) survive puts, the splits that move them and a load, and a later request of
/// small puts is acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_ids_and_values_survive_splits() {
    let q = b"huge";
    let Some((_server, j)) = journal_on(q, 2).await else {
        return;
    };
    let mut model = Model::new();
    for i in 0..8u64 {
        let mut huge = vec![i as u8; 4 << 20];
        huge.extend_from_slice(&num(i));
        match j.write(q, 2, vec![put(&huge, i, b"v")]).await {
            Err(JournalError::IdTooLong { len, max }) => {
                assert_eq!((len, max), (huge.len(), MAX_ID_BYTES));
            }
            other => panic!("a {} byte id: {other:?}", huge.len()),
        }
        let mut id = vec![i as u8; MAX_ID_BYTES - 8];
        id.extend_from_slice(&num(i));
        let value = vec![(i * 7) as u8; 1 << 20];
        model.insert(id.clone(), (i, value.clone()));
        j.write(q, 2, vec![put(&id, i, &value)])
            .await
            .expect("put of an id at the limit and a huge value");
    }
    // Enough small records to split every bucket several times over.
    let mut ops = Vec::new();
    for i in 0..3000u64 {
        model.insert(num(i), (i, b"s".to_vec()));
        ops.push(put(&num(i), i, b"s"));
    }
    let w = j.write(q, 2, ops).await.expect("small puts");
    assert_eq!(w.live, model.len() as u64);
    assert_eq!(as_map(j.load(q, 2).await.expect("load")), model);
}

/// A queue split to many buckets, emptied to one record and to none, then refilled: every
/// load is exact, and the emptied queue gives its keys back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_wide_emptied_and_refilled() {
    let q = b"wide";
    let Some((server, j)) = journal_on(q, 3).await else {
        return;
    };
    let url = server.url();
    let base_keys = key_count(&url).await;
    for round in 0..2u64 {
        let mut model = Model::new();
        let ops: Vec<Op> = (0..20_000u64)
            .map(|i| {
                let id = num(i * 3 + round);
                model.insert(id.clone(), (i, b"v".to_vec()));
                put(&id, i, b"v")
            })
            .collect();
        for chunk in ops.chunks(1000) {
            j.write(q, 3, chunk.to_vec()).await.expect("fill");
        }
        assert_eq!(as_map(j.load(q, 3).await.expect("load")), model);
        assert!(key_count(&url).await > base_keys + 100, "no split happened");
        // Down to one record: the load still finds it (and only it).
        let keep = num(5 * 3 + round);
        let ends: Vec<Op> = model
            .keys()
            .filter(|id| **id != keep)
            .map(|id| end(id))
            .collect();
        let w = j.write(q, 3, ends).await.expect("ends");
        assert_eq!(w.live, 1);
        let left = as_map(j.load(q, 3).await.expect("load"));
        assert_eq!(left.len(), 1);
        assert!(left.contains_key(&keep));
        // Two keys at most: the meta and the one bucket holding the record.
        assert!(key_count(&url).await <= base_keys + 2);
        j.write(q, 3, vec![end(&keep)]).await.expect("last end");
        assert_eq!(
            key_count(&url).await,
            base_keys,
            "an empty journal left keys"
        );
    }
}

/// A load that runs while the same holder keeps splitting the queue (puts of new ids, ends of
/// others) sees every record that no write touched exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_during_splits_sees_every_untouched_record() {
    let q = b"midsplit";
    let options = JournalOptions {
        load_page_buckets: 1,
        ..JournalOptions::default()
    };
    let Some((_server, j)) = journal_on_with(q, 5, options).await else {
        return;
    };
    let stable: BTreeSet<Vec<u8>> = (0..3000u64).map(num).collect();
    let ops: Vec<Op> = stable.iter().map(|id| put(id, 1, b"s")).collect();
    j.write(q, 5, ops).await.expect("fill");
    let writer = {
        let j = j.clone();
        tokio::spawn(async move {
            for round in 0..200u64 {
                let ops: Vec<Op> = (0..100u64)
                    .map(|k| put(&num(1_000_000 + round * 100 + k), 2, b"n"))
                    .collect();
                j.write(q, 5, ops).await.expect("churn");
            }
        })
    };
    for _ in 0..5 {
        let loaded = j.load(q, 5).await.expect("load");
        let mut ids = BTreeSet::new();
        for r in &loaded {
            assert!(ids.insert(r.id.clone()), "id {:?} twice", r.id);
        }
        let missing = stable.difference(&ids).count();
        assert_eq!(missing, 0, "{missing} untouched records not loaded");
    }
    writer.await.expect("writer");
}

/// Live timers constant (1 000) while 200 000 puts and ends go through: Redis's memory and
/// key count end where they were after the first 1 000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_at_a_constant_live_count_keeps_memory_flat() {
    let q = b"churn";
    let Some((server, j)) = journal_on(q, 2).await else {
        return;
    };
    let url = server.url();
    let live = 1000u64;
    let ops: Vec<Op> = (0..live).map(|i| put(&num(i), i, b"value-8b")).collect();
    j.write(q, 2, ops).await.expect("fill");
    let keys0 = key_count(&url).await;
    let mem0 = server.used_memory().expect("used_memory");
    let mut next = live;
    for _ in 0..200 {
        let mut ops = Vec::new();
        for _ in 0..1000 {
            ops.push(end(&num(next - live)));
            ops.push(put(&num(next), next, b"value-8b"));
            next += 1;
        }
        let w = j.write(q, 2, ops).await.expect("churn");
        assert_eq!(w.live, live);
    }
    assert_eq!(j.load(q, 2).await.expect("load").len() as u64, live);
    let keys1 = key_count(&url).await;
    let mem1 = server.used_memory().expect("used_memory");
    assert!(keys1 <= keys0 + 2, "keys grew from {keys0} to {keys1}");
    // 200 000 records at even 10 bytes each would be 2 MB: a quarter of that is growth.
    assert!(mem1 < mem0 + 500_000, "memory grew from {mem0} to {mem1}");
}

/// Ids that all fall in one bucket (equal low bits of the hash are enough; here thousands
/// share the bucket) are all kept, through the splits of that crowded bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_ids_of_one_bucket_are_all_kept() {
    let q = b"crowd";
    let Some((_server, j)) = journal_on(q, 2).await else {
        return;
    };
    // Ids sharing their 16 low hash bits.
    let mut ids = Vec::new();
    let mut i = 0u64;
    while ids.len() < 3000 {
        let id = num(i);
        if h32(&id) & 0xffff == 0x1234 {
            ids.push(id);
        }
        i += 1;
    }
    let mut model = Model::new();
    for chunk in ids.chunks(500) {
        let ops: Vec<Op> = chunk
            .iter()
            .map(|id| {
                model.insert(id.clone(), (7, b"c".to_vec()));
                put(id, 7, b"c")
            })
            .collect();
        j.write(q, 2, ops).await.expect("crowded put");
    }
    assert_eq!(as_map(j.load(q, 2).await.expect("load")), model);
}

/// The memory target: at most 48 bytes of Redis memory per live timer plus its
/// value, for 50 000 timers with MessagePack `u64` ids and 8-byte values, put in requests of
/// one (as a member's `journal_put` sends them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_memory_per_live_timer_is_at_most_48_bytes_plus_its_value() {
    let q = b"memory";
    let Some((server, j)) = journal_on(q, 2).await else {
        return;
    };
    let mem0 = server.used_memory().expect("used_memory");
    let n = 50_000u64;
    let value = "8 bytes!".to_owned();
    let mut pending = Vec::new();
    for id in 0..n {
        let op = Op::put(&(1_000_000 + id), 1_700_000_000_000_000 + id, &value).expect("encode");
        pending.push(j.submit(q, 2, vec![op]));
    }
    for w in pending {
        w.await.expect("put");
    }
    let mem1 = server.used_memory().expect("used_memory");
    let per = (mem1.saturating_sub(mem0)) as f64 / n as f64;
    let value_bytes = rmp_serde::to_vec(&value).expect("encode").len() as f64;
    assert!(
        per <= 48.0 + value_bytes,
        "{per:.1} bytes per live timer (value {value_bytes} bytes)"
    );
}
