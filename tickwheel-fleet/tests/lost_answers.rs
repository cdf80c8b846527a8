//! A transaction on an owner key that ran in etcd while its answer was lost (a lossy link,
//! found by the fleet example's `--scenario partition`): the key names the member, under its
//! live lease, yet the member never learnt that it holds the queue. Nobody else may take the
//! queue while that lease lives; the member must give the key back so that the queue gets a
//! dispatching owner.

mod support;

use std::time::Duration;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use support::*;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_owner_key_created_with_a_lost_answer_does_not_strand_its_queue() {
    let Some((etcd, _redis, opts, _qs)) = fleet_with(1).await else {
        return;
    };
    let a = join(&opts, "a", 2).await;
    wait_until(Duration::from_secs(20), "a owns q0", || {
        a.owned().len() == 1
    })
    .await;

    let mut c = match etcd_client::Client::connect([etcd.url()], None).await {
        Ok(c) => c,
        Err(e) => panic!("connect: {e}"),
    };
    // a's lease: the one its member key lives under.
    let member_key = format!("{}m/{}", opts.prefix, hex(b"a"));
    let lease = match c.get(member_key.as_str(), None).await {
        Ok(r) => r.kvs().first().map(|kv| kv.lease()).unwrap_or(0),
        Err(e) => panic!("get: {e}"),
    };
    assert_ne!(lease, 0, "a's member key has no lease");
    // What a's `create_owner` does for a new queue, as if its answer never came back: the key
    // exists first, then the queue enters the catalogue.
    let q1 = "q1".to_owned();
    let owner_key = format!("{}o/{}", opts.prefix, hex(q1.as_bytes()));
    let txn = Txn::new()
        .when([Compare::create_revision(
            owner_key.as_str(),
            CompareOp::Equal,
            0,
        )])
        .and_then([TxnOp::put(
            owner_key.as_str(),
            format!("{} {}", hex(b"a"), a.boot_id()),
            Some(PutOptions::new().with_lease(lease)),
        )]);
    match c.txn(txn).await {
        Ok(r) => assert!(r.succeeded(), "the owner key existed already"),
        Err(e) => panic!("txn: {e}"),
    }
    if let Err(e) = tickwheel_fleet::register_queues(&opts, [q1.clone()]).await {
        panic!("register q1: {e}");
    }
    wait_until(Duration::from_secs(20), "a dispatches q1", || {
        a.owned().iter().any(|(q, _)| *q == q1)
    })
    .await;
}
