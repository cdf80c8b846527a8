//! Flow control in a fleet, against real etcd and redis-server: a member's fenced hand-out
//! (`Member::pop_due`, `spawn_dispatcher`, `due_stream` behind `Fence::admit`) keeps a hold
//! and a concurrency limit, and a queue moved to a joining member arrives there held, with
//! its limits.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::*;
use tickwheel::sync::{FrozenEntry, RateLimit, Scheduler};
use tickwheel_fleet::{FencedDue, Member, RecoveryError};

/// A member whose store holds `per_queue` timers of each queue, all due when it recovers.
async fn join_due(opts: &tickwheel_fleet::FleetOptions, name: &str, per_queue: u64) -> FleetMember {
    let sched: Arc<Sched> = Arc::new(Scheduler::new());
    let r = Member::join(opts.clone(), name, sched, move |q: String| async move {
        let base: u64 = q.trim_start_matches('q').parse().unwrap_or(0) * 1000;
        let at = Instant::now();
        let entries = (0..per_queue)
            .map(|i| FrozenEntry {
                id: base + i,
                at,
                value: format!("{q}:{i}"),
            })
            .collect();
        Ok::<_, RecoveryError>(entries)
    })
    .await;
    match r {
        Ok(m) => m,
        Err(e) => panic!("join {name}: {e}"),
    }
}

fn owns(m: &FleetMember, qs: &[String]) -> bool {
    let owned: Vec<String> = m.owned().into_iter().map(|(q, _)| q).collect();
    owned == qs
}

/// A fleet of `n` queues and member `a` ([`join_due`], `per_queue` timers a queue) once it
/// owns them all and may dispatch them; `None` where etcd or redis-server is missing.
async fn a_owning(n: usize, per_queue: u64) -> Option<FleetWithA> {
    let (etcd, redis, opts, qs) = fleet_with(n).await?;
    let a = join_due(&opts, "a", per_queue).await;
    wait_for(Duration::from_secs(20), "a owns every queue", || async {
        owns(&a, &qs) && qs.iter().all(|q| a.fence().token(q.as_bytes()).is_some())
    })
    .await;
    Some((etcd, redis, opts, qs, a))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_members_fenced_hand_out_keeps_holds_and_concurrency_limits() {
    let Some((_etcd, _redis, _opts, qs, a)) = a_owning(2, 4).await else {
        return;
    };
    let (held, limited) = (&qs[0], &qs[1]);
    let s = a.scheduler();
    s.hold_queue(held);
    s.set_concurrency(held, Some(1));
    s.set_concurrency(limited, Some(1));
    let later = Instant::now() + Duration::from_secs(1);

    // Member::pop_due: nothing of the held queue, one of the limited one.
    let first = a.pop_due(later, 100);
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(first[0].due.queue(), limited);
    assert!(a.pop_due(later, 100).is_empty(), "held, or at its limit");
    assert_eq!(s.queue_counts(held).parked, 4);
    assert!(s.queue_counts(held).held);
    drop(first);
    let second = a.pop_due(later, 100);
    assert_eq!(second.len(), 1, "the slot came free");
    assert_eq!(second[0].due.queue(), limited);

    // spawn_dispatcher: the handler keeps what it gets (in flight); the released queue
    // hands out one at a time, the limited one nothing while `second` is in flight.
    let got: Arc<Mutex<Vec<FencedDue<String, u64, String>>>> = Arc::default();
    let sink = Arc::clone(&got);
    let dispatcher = a.spawn_dispatcher(move |d| {
        if let Ok(mut g) = sink.lock() {
            g.push(d);
        }
    });
    let len = || got.lock().map(|g| g.len()).unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(len(), 0, "held: the dispatcher gets nothing");
    assert_eq!(s.release_queue(held), 4);
    wait_until(Duration::from_secs(10), "one of the released queue", || {
        len() >= 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(len(), 1, "a concurrency limit of 1");
    let one = got.lock().ok().and_then(|mut g| g.pop());
    assert_eq!(one.as_ref().map(|d| d.due.queue()), Some(held));
    drop(one);
    wait_until(
        Duration::from_secs(10),
        "the next one once its slot came free",
        || len() >= 1,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(len(), 1, "still one at a time");
    assert!(
        got.lock()
            .map(|g| g.iter().all(|d| d.due.queue() == held))
            .unwrap_or(false),
        "the limited queue's slot is still taken"
    );
    drop(second);
    dispatcher.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_queue_moved_on_a_join_arrives_held_with_its_limits() {
    let per_queue = 5;
    let Some((_etcd, _redis, opts, qs, a)) = a_owning(8, per_queue).await else {
        return;
    };
    let rate = RateLimit::per_second(4).with_burst(3);
    for q in &qs {
        a.scheduler().hold_queue(q);
        a.scheduler().set_concurrency(q, Some(2));
        a.scheduler().set_rate(q, Some(rate));
    }
    let moving: Vec<String> = qs
        .iter()
        .filter(|q| tickwheel_fleet::assign::desired(["a", "b"], q.as_bytes()) == Some("b"))
        .cloned()
        .collect();
    assert!(!moving.is_empty(), "rendezvous gives b some of 8 queues");
    let b = join_due(&opts, "b", 0).await;
    wait_for(Duration::from_secs(30), "b owns its queues", || async {
        owns(&b, &moving)
            && moving
                .iter()
                .all(|q| b.scheduler().queue_len(q) == per_queue as usize)
    })
    .await;
    let sb = b.scheduler();
    for q in &moving {
        assert!(sb.is_held(q), "{q} arrives held");
        assert_eq!(sb.concurrency(q), Some(2), "{q}");
        assert_eq!(sb.rate(q), Some((Duration::from_millis(250), 3)), "{q}");
        assert_eq!(sb.rate(q), a.scheduler().rate(q), "{q}");
    }
    let later = Instant::now() + Duration::from_secs(3600);
    assert!(
        b.pop_due(later, 1000).is_empty(),
        "held: nothing handed out"
    );
    for q in &moving {
        assert_eq!(
            sb.release_queue(q),
            per_queue as usize,
            "{q}: every timer parked"
        );
    }
    let out = b.pop_due(later, 1000);
    for q in &moving {
        let n = out.iter().filter(|d| d.due.queue() == q).count();
        assert_eq!(
            n, 2,
            "{q}: the concurrency limit of 2, under the burst of 3"
        );
    }
    assert_eq!(out.len(), 2 * moving.len());
    assert!(b.pop_due(later, 1000).is_empty(), "at the limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn due_stream_behind_the_fence_keeps_holds_and_concurrency_limits() {
    use futures_util::StreamExt;

    let Some((_etcd, _redis, _opts, qs, a)) = a_owning(2, 3).await else {
        return;
    };
    let (held, limited) = (qs[0].clone(), qs[1].clone());
    let s = Arc::clone(a.scheduler());
    s.hold_queue(&held);
    s.set_concurrency(&limited, Some(1));
    // The stream's consumer keeps what it gets (in flight).
    let got: Arc<Mutex<Vec<FencedDue<String, u64, String>>>> = Arc::default();
    let sink = Arc::clone(&got);
    let fence = a.fence();
    let mut stream = s.due_stream();
    let consumer = tokio::spawn(async move {
        while let Some(d) = stream.next().await {
            if let Some(f) = fence.admit(d)
                && let Ok(mut g) = sink.lock()
            {
                g.push(f);
            }
        }
    });
    let queues_got = || -> Vec<String> {
        got.lock()
            .map(|g| g.iter().map(|d| d.due.queue().clone()).collect())
            .unwrap_or_default()
    };
    wait_until(Duration::from_secs(10), "one of the limited queue", || {
        !queues_got().is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        queues_got(),
        std::slice::from_ref(&limited),
        "held: none; limited: one"
    );
    assert_eq!(s.queue_counts(&held).parked, 3);
    // Its slot comes free: the next one of the limited queue, still none of the held one.
    let first = got.lock().ok().and_then(|mut g| g.pop());
    drop(first);
    wait_until(Duration::from_secs(10), "the next one", || {
        !queues_got().is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(queues_got(), std::slice::from_ref(&limited));
    assert_eq!(s.release_queue(&held), 3);
    wait_until(Duration::from_secs(10), "the released queue's", || {
        queues_got().contains(&held)
    })
    .await;
    consumer.abort();
}
