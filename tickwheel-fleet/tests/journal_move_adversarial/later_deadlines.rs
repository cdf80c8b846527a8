//! Later deadlines, set before or during a move, hold at the target and after its death.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use crate::common::owner_of;
use crate::common::*;
use crate::support::*;

// ---------------------------------------------------------------------------------------
// Later deadlines across a move.

/// Per queue `n` (ids `n * 100 + i`, all first due at once):
/// - `i = 0`: handed out before the move and retried to an hour later while the queue is
///   frozen for its offer, then journaled at that deadline (at once for every other such
///   queue, a second later, when the claim has likely run, for the rest);
/// - `i = 1`: rescheduled an hour later before the move, journaled there (acknowledged);
/// - `i = 2`: rescheduled an hour later before the move without a put (the offer alone
///   carries the later deadline; the docs say the offer's deadline wins);
/// - `i = 3`: handed out, retried an hour later and journaled there before the move;
/// - `i = 4..10`: due in an hour.
///
/// Nothing may be handed out by anyone while the test runs. The put results of `i = 0`.
async fn later_deadlines(
    then_adopt: bool,
) -> Option<(Ledger, BTreeMap<u64, String>, Vec<(String, u64)>)> {
    let (_etcd, _redis, opts, qs, a) = journaled_a(12).await?;
    let t0 = Instant::now();
    let later = t0 + Duration::from_secs(3600);
    let mut intended = HashMap::new();
    for (n, q) in qs.iter().enumerate() {
        for i in 0..10u64 {
            let id = n as u64 * 100 + i;
            let at = if i < 4 { t0 } else { later };
            schedule_and_put(&a, q, id, at).await;
            intended.insert(id, later);
        }
        for i in [1u64, 2] {
            let id = n as u64 * 100 + i;
            a.scheduler().reschedule(&id, later).expect("reschedule");
        }
        let id = n as u64 * 100 + 1;
        a.journal_put(q, &id, later, &format!("{q}:{id}"))
            .expect("journal_put")
            .await
            .expect("later put acknowledged");
    }
    // Hand out i = 0 and i = 3 of every queue.
    let mut out = Vec::new();
    let until = Instant::now() + Duration::from_secs(10);
    while out.len() < 2 * qs.len() && Instant::now() < until {
        out.extend(a.pop_due(Instant::now(), 100));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(out.len(), 2 * qs.len(), "hand-outs of i = 0 and 3");
    let (mut held, retried): (Vec<_>, Vec<_>) =
        out.into_iter().partition(|d| d.due.id() % 100 == 0);
    for d in retried {
        let (q, id) = (d.due.queue().clone(), *d.due.id());
        d.due.retry_at(later).expect("retry");
        a.journal_put(&q, &id, later, &format!("{q}:{id}"))
            .expect("journal_put")
            .await
            .expect("retry's put acknowledged");
    }
    let b = join_journaling(&opts, "b", true).await;
    // Retry each i = 0 as soon as its queue stops being dispatchable (frozen for its offer),
    // or once the fleet settled for the queues that stay.
    let mut results: BTreeMap<u64, String> = BTreeMap::new();
    let mut late_puts = Vec::new();
    let mut frozen = 0usize;
    let until = Instant::now() + Duration::from_secs(30);
    while !held.is_empty() {
        let settled = !b.owned().is_empty() && exactly_one(&[&a, &b], &qs);
        assert!(Instant::now() < until, "the move never settled");
        let (now, wait): (Vec<_>, Vec<_>) = held
            .into_iter()
            .partition(|d| settled || a.fence().token(d.due.queue().as_bytes()).is_none());
        held = wait;
        for d in now {
            let (q, id) = (d.due.queue().clone(), *d.due.id());
            // Alternate among the queues frozen for a move (at once, a second later); the
            // queues that stay journal at once.
            let delay = !settled && frozen % 2 == 1;
            if !settled {
                frozen += 1;
            }
            match d.due.retry_at(later) {
                Ok(r) => results.insert(id, format!("{r:?}")),
                Err(e) => results.insert(id, format!("retry failed: {e:?}")),
            };
            if !delay {
                let r = match a.journal_put(&q, &id, later, &format!("{q}:{id}")) {
                    Ok(w) => w.await.map(|_| ()).map_err(|e| format!("{e}")),
                    Err(e) => Err(format!("{e}")),
                };
                results
                    .entry(id)
                    .and_modify(|s| s.push_str(&format!(", put {r:?}")));
            } else {
                late_puts.push((q, id));
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    for (q, id) in &late_puts {
        let r = match a.journal_put(q, id, later, &format!("{q}:{id}")) {
            Ok(w) => w.await.map(|_| ()).map_err(|e| format!("{e}")),
            Err(e) => Err(format!("{e}")),
        };
        results
            .entry(*id)
            .and_modify(|s| s.push_str(&format!(", put a second later {r:?}")));
    }
    wait_until(Duration::from_secs(30), "one owner each", || {
        !b.owned().is_empty() && exactly_one(&[&a, &b], &qs)
    })
    .await;
    let moved: Vec<(String, u64)> = b.owned();
    let mut ledger = Ledger::default();
    ledger
        .watch(&[&a, &b], &intended, Duration::from_secs(3))
        .await;
    // Custody: every timer with its queue's owner, at the later deadline.
    for (n, q) in qs.iter().enumerate() {
        let (owner, _) = owner_of(&[&a, &b], q).expect("an owner");
        let members: BTreeMap<u64, Instant> = owner
            .scheduler()
            .queue_members(q)
            .into_iter()
            .map(|m| (m.id, m.deadline))
            .collect();
        for i in 0..10u64 {
            let id = n as u64 * 100 + i;
            if ledger.ids().contains(&(q.clone(), id)) {
                continue;
            }
            let at = members.get(&id).copied();
            assert!(
                at.is_some_and(|at| at + SLACK >= later),
                "{q}/{id} at its owner {}: {:?} (the later deadline is {:?} from the start; i = 0: {:?})",
                owner.name(),
                at.map(|at| at.saturating_duration_since(t0)),
                later - t0,
                results.get(&id)
            );
        }
    }
    if then_adopt {
        // Both go without handing anything over; a third member adopts every queue from the
        // journal alone.
        drop(a);
        drop(b);
        let c = join_journaling(&opts, "c", true).await;
        wait_until(Duration::from_secs(30), "c owns every queue", || {
            c.owned().len() == qs.len()
        })
        .await;
        ledger.watch(&[&c], &intended, Duration::from_secs(3)).await;
    }
    eprintln!("retries of i = 0 during the move: {results:?}; moved: {moved:?}");
    Some((ledger, results, moved))
}

/// Later deadlines set before the move (acknowledged, or without a put) and during it (an
/// in-flight timer retried while its queue is frozen) hold at the target: nothing of them is
/// handed out an hour early.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn later_deadlines_set_before_and_during_a_move_hold_at_the_target() {
    let Some((ledger, results, moved)) = later_deadlines(false).await else {
        return;
    };
    assert!(!moved.is_empty());
    assert!(
        ledger.dispatches.is_empty(),
        "handed out an hour early: {:?} (retries of i = 0: {results:?}; moved: {moved:?})",
        ledger.dispatches
    );
}

/// As above, then the target and the source both go (leases revoked, no handoff) and a third
/// member adopts every queue from the journal: a later deadline whose put was acknowledged
/// (i = 1, 3), or that the target took from the offer after a put the claim fenced (i = 0),
/// must not come back at its earlier one. (i = 2 was never journaled at its later deadline:
/// the docs let the journal's earlier one fire after a death; it is left out.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn later_deadlines_taken_over_by_a_move_hold_after_the_target_dies() {
    let Some((ledger, results, moved)) = later_deadlines(true).await else {
        return;
    };
    let early: Vec<_> = ledger
        .dispatches
        .iter()
        .filter(|(_, _, id, _)| id % 100 != 2)
        .map(|(m, q, id, t)| (m.clone(), q.clone(), *id, *t, results.get(id).cloned()))
        .collect();
    assert!(
        early.is_empty(),
        "handed out an hour early after the adoption: {early:?} (moved by the join: {moved:?})"
    );
}
