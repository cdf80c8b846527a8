//! A source that died after sealing its offer: once its lease is gone the desired owner
//! adopts the queue, rebuilds it through the recovery hook and imports the leftover offer,
//! de-duplicated by id.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{Client, PutOptions};
use support::*;
use tickwheel::sync::{FrozenEntry, Scheduler};
use tickwheel_fleet::keys::{Keys, owner_value};
use tickwheel_fleet::{Acquisition, FleetEvent, Member, RecoveryError};
use tickwheel_redis::{Adopted, Custody, Member as RedisMember};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_sources_sealed_offer_is_adopted_once() {
    let Some((etcd, redis, opts)) = fleet() else {
        return;
    };
    let q = "q7".to_string();
    let keys = Keys::new(opts.prefix.clone());
    let mut etcd_c = match Client::connect([etcd.url()], None).await {
        Ok(c) => c,
        Err(e) => panic!("etcd: {e}"),
    };
    // The source "dead": owner key under its lease, the queue adopted in Redis at that
    // token, then offered (sealed) to a member that never comes.
    let lease = match etcd_c.lease_grant(60, None).await {
        Ok(l) => l.id(),
        Err(e) => panic!("grant: {e}"),
    };
    let put = etcd_c
        .put(
            keys.owner(q.as_bytes()),
            owner_value("dead", "b00t"),
            Some(PutOptions::new().with_lease(lease)),
        )
        .await;
    let token = match put {
        Ok(r) => r.header().map(|h| h.revision()).unwrap_or(0) as u64,
        Err(e) => panic!("put: {e}"),
    };
    let dead = match Custody::connect(
        &redis.url(),
        RedisMember::new_boot("dead"),
        Default::default(),
        Default::default(),
    )
    .await
    {
        Ok(c) => c,
        Err(e) => panic!("redis: {e}"),
    };
    let t0 = Instant::now();
    let src: Sched = Scheduler::builder().origin(t0).build();
    for id in 0..10u64 {
        let at = t0 + Duration::from_secs(3600);
        if src.schedule(q.clone(), id, at, format!("v{id}")).is_err() {
            panic!("schedule");
        }
    }
    match dead.adopt::<_, u64, String>(q.clone(), token).await {
        Ok(Adopted::Owned(_)) => {}
        other => panic!("{other:?}"),
    }
    if let Err(e) = dead.offer(&src, q.clone(), token, Some("ghost")).await {
        panic!("offer: {e}");
    }
    if let Err(e) = tickwheel_fleet::register_queues(&opts, [&q]).await {
        panic!("register: {e}");
    }
    // The source dies: its lease goes.
    if let Err(e) = etcd_c.lease_revoke(lease).await {
        panic!("revoke: {e}");
    }
    // The store still holds ids 5..15 (5..10 overlap the offer).
    let sched: Arc<Sched> = Arc::new(Scheduler::new());
    let s = Member::join(opts.clone(), "s", sched, |q: String| async move {
        let at = Instant::now() + Duration::from_secs(3600);
        Ok::<_, RecoveryError>(
            (5..15u64)
                .map(|id| FrozenEntry {
                    id,
                    at,
                    value: format!("{q}:{id}"),
                })
                .collect(),
        )
    })
    .await;
    let s = match s {
        Ok(s) => s,
        Err(e) => panic!("join: {e}"),
    };
    let mut events = s.events();
    wait_until(Duration::from_secs(20), "s owns the queue", || {
        s.owned().len() == 1
    })
    .await;
    let mut how = None;
    while let Ok(e) = events.try_recv() {
        if let FleetEvent::Acquired {
            how: h, token: t, ..
        } = e
        {
            assert!(t > token, "a larger token: {t} vs {token}");
            how = Some(h);
        }
    }
    assert_eq!(
        how,
        Some(Acquisition::Adopted {
            recovered: 10,
            leftover: 5
        })
    );
    assert_eq!(s.scheduler().queue_len(&q), 15, "ids 0..15, each once");
    // Nothing left in Redis: the leftover was committed.
    let view = match s.custody().read(q.as_bytes(), None).await {
        Ok(v) => v,
        Err(e) => panic!("read: {e}"),
    };
    assert_eq!(
        view.record.map(|r| (r.state, r.chunks)),
        Some((tickwheel_redis::State::Owned, 0))
    );
}
