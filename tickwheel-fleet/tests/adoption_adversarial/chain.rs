//! A chain of deaths: a survivor dies while it adopts the queues of a member that died
//! before it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tickwheel::sync::FrozenEntry;
use tickwheel_fleet::RecoveryError;

use crate::common::*;
use crate::support::*;

/// `a` journaled 12 queues (q0 with 5 000 timers, the others 0 to 4) due from `first` on,
/// and is dropped. `b` joins, and `c` with it when `c_with_b` (else only once `b` died). `b`'s recovery hook lets its first two calls through
/// and holds every later one (journal loaded, hook not returned) until the test lets go. Once
/// `b` owns a queue and holds an adoption at its hook, after both handed out what was due for
/// half a second (each hand-out's end journaled and awaited), `b` is dropped (its lease
/// revoked), and only then are its held hooks let go. `c` must end up owning all 12 queues and
/// every journaled, not-ended timer must be handed out: none early, none twice under one
/// token, none after its acknowledged end.
async fn chain_of_deaths(c_with_b: bool, first: Duration, leave: bool) {
    let Some((_etcd, _redis, opts, qs, s)) =
        dead_fleet(&uneven(12, 5_000), (first, Duration::from_secs(4))).await
    else {
        return;
    };
    let calls = Arc::new(AtomicUsize::new(0));
    let held = Arc::new(AtomicUsize::new(0));
    let open = Arc::new(AtomicBool::new(false));
    let hook = {
        let (calls, held, open) = (Arc::clone(&calls), Arc::clone(&held), Arc::clone(&open));
        move |_q: String| {
            let (calls, held, open) = (Arc::clone(&calls), Arc::clone(&held), Arc::clone(&open));
            async move {
                if calls.fetch_add(1, Ordering::SeqCst) >= 2 {
                    held.fetch_add(1, Ordering::SeqCst);
                    while !open.load(Ordering::SeqCst) {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
                Ok::<Vec<FrozenEntry<u64, String>>, RecoveryError>(Vec::new())
            }
        }
    };
    let c = c_with_b.then(|| join_journaling(&opts, "c", true));
    let (b, c) = beside(join_hooked(&opts, "b", hook), c).await;
    let must = s.must();
    let mut ledger = Ledger::new(&s.ended);
    let until = Instant::now() + Duration::from_secs(60);
    while b.owned().is_empty() || held.load(Ordering::SeqCst) == 0 {
        ledger.drain(&live(&b, &c), &s.intended).await;
        assert!(
            Instant::now() < until,
            "b never owned a queue with another held at its hook: b owns {:?}, {} calls, c \
             owns {:?}",
            b.owned(),
            calls.load(Ordering::SeqCst),
            c.as_ref().map(|c| c.owned())
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let half = Instant::now() + Duration::from_millis(500);
    while Instant::now() < half {
        ledger.drain(&live(&b, &c), &s.intended).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let b_owned = b.owned();
    let by_b = ledger.dispatches.len();
    eprintln!(
        "b dies owning {b_owned:?} with {} adoptions held at its hook; {by_b} hand-outs so far",
        held.load(Ordering::SeqCst)
    );
    if leave {
        // An orderly leave while adoptions wait at the hook; they are let go half a second
        // into it.
        let open = Arc::clone(&open);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            open.store(true, Ordering::SeqCst);
        });
        let r = tokio::time::timeout(Duration::from_secs(30), b.leave()).await;
        eprintln!("b's leave: {r:?}");
    } else {
        drop(b);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    open.store(true, Ordering::SeqCst);
    let c = match c {
        Some(c) => c,
        None => join_journaling(&opts, "c", true).await,
    };
    ledger
        .collect_all(&[&c], &s.intended, &must, Duration::from_secs(60))
        .await;
    check(&ledger, &must, &may(&s));
    wait_until(Duration::from_secs(30), "c owns every queue", || {
        exactly_one(&[&c], &qs)
    })
    .await;
}

fn live<'a>(b: &'a FleetMember, c: &'a Option<FleetMember>) -> Vec<&'a FleetMember> {
    let mut v = vec![b];
    v.extend(c.as_ref());
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_survivor_dying_during_its_adoptions_beside_another() {
    chain_of_deaths(true, Duration::from_secs(2), false).await;
}

/// `b` alone adopts, hands out (and ends) what is due in the two queues it completed, and
/// dies with up to 4 adoptions held at its hook; `c` joins only then.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_only_survivor_dying_during_its_adoptions_then_another_joins() {
    chain_of_deaths(false, Duration::ZERO, false).await;
}

/// As [`a_survivor_dying_during_its_adoptions_beside_another`], but `b` leaves in order
/// (`Member::leave`) while its adoptions wait at its hook, instead of dying.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_survivor_leaving_during_its_adoptions() {
    chain_of_deaths(true, Duration::ZERO, true).await;
}

/// `a` schedules and journals 8 queues of 30 timers (every seventh ended) due from 3 s on;
/// `b` joins and takes about half by handoff; `b` is dropped, and `a` adopts its former
/// queues back from the journal (a scheduler that froze and handed those queues away
/// before). Every journaled, not-ended timer handed out, none early, none twice under one
/// token, none after its acknowledged end; `a` owns all 8.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn queues_adopted_back_by_their_former_owner() {
    let Some((_etcd, _redis, opts, qs, a)) = journaled_a(8).await else {
        return;
    };
    let s = plan(
        &qs,
        &[30; 8],
        Instant::now(),
        Duration::from_secs(3),
        Duration::from_secs(3),
    );
    for ((q, id), at) in &s.intended {
        if !s.ended.contains(&(q.clone(), *id)) {
            a.scheduler()
                .schedule(q.clone(), *id, *at, format!("{q}:{id}"))
                .expect("schedule");
        }
    }
    seed(&a, &s).await;
    let b = join_journaling(&opts, "b", true).await;
    shares(&a, &b, &qs).await;
    let moved = b.owned();
    let must = s.must();
    let mut ledger = Ledger::new(&s.ended);
    ledger.drain(&[&a, &b], &s.intended).await;
    drop(b);
    ledger
        .collect_all(&[&a], &s.intended, &must, Duration::from_secs(60))
        .await;
    wait_until(Duration::from_secs(30), "a owns every queue", || {
        exactly_one(&[&a], &qs)
    })
    .await;
    ledger.drain(&[&a], &s.intended).await;
    eprintln!("b took {moved:?}; {} hand-outs", ledger.dispatches.len());
    check(&ledger, &must, &may(&s));
}
