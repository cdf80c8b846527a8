//! Ends racing the claim, a hand-out kept across a move, a late schedule at the old owner,
//! a journal record that does not decode.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use crate::common::owner_of;
use crate::common::*;
use crate::support::*;
use tickwheel_fleet::FleetEvent;

// ---------------------------------------------------------------------------------------
// Ends racing the claim.

/// `a` holds one handed-out timer of each of 12 queues (journaled, due at once); `b` joins.
/// The moment a queue stops being dispatchable at `a` (frozen for its offer), `a` confirms
/// that timer: on every other queue it journals the end and then drops the `Due`, on the
/// rest it drops the `Due` first (the offer may then be sealed and claimed before the end
/// runs). An end acknowledged `Ok` ran before the claim: its timer is never handed out again.
/// An end refused leaves the record in the journal: the target hands the timer out again,
/// under its larger token.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ends_sent_as_the_queue_freezes_either_land_or_fire_again_at_the_target() {
    let Some(OneHeld {
        _servers,
        qs,
        a,
        b,
        intended,
        initial,
        mut ledger,
        mut held,
    }) = holding_one_each(12, 5).await
    else {
        return;
    };
    // (queue, id, token at a, end then drop, the end's outcome)
    let mut outcomes: Vec<(String, u64, u64, bool, bool)> = Vec::new();
    let mut frozen = 0usize;
    let until = Instant::now() + Duration::from_secs(30);
    while !held.is_empty() {
        assert!(Instant::now() < until, "the move never settled");
        let settled = !b.owned().is_empty() && exactly_one(&[&a, &b], &qs);
        let (now, wait): (Vec<_>, Vec<_>) = held
            .into_iter()
            .partition(|d| settled || a.fence().token(d.due.queue().as_bytes()).is_none());
        held = wait;
        for d in now {
            let (q, id, t) = (d.due.queue().clone(), *d.due.id(), d.token);
            let end_first = settled || frozen.is_multiple_of(2);
            if !settled {
                frozen += 1;
            }
            let w = if end_first {
                let w = a.journal_end(&q, &id);
                drop(d);
                w
            } else {
                drop(d);
                a.journal_end(&q, &id)
            };
            let ok = match w {
                Ok(w) => w.await.is_ok(),
                Err(_) => false,
            };
            outcomes.push((q, id, t, end_first, ok));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    wait_until(Duration::from_secs(30), "one owner each", || {
        !b.owned().is_empty() && exactly_one(&[&a, &b], &qs)
    })
    .await;
    let must: BTreeSet<(String, u64)> = outcomes
        .iter()
        .filter(|(_, _, _, _, ok)| !ok)
        .map(|(q, id, _, _, _)| (q.clone(), *id))
        .collect();
    ledger
        .collect(&[&a, &b], &intended, Duration::from_secs(10), |l| {
            must.iter().all(|k| {
                l.dispatches
                    .iter()
                    .filter(|(_, q, id, _)| (q, id) == (&k.0, &k.1))
                    .count()
                    > 1
            })
        })
        .await;
    eprintln!(
        "ends (queue, id, token, end before drop, acknowledged): {outcomes:?}; b: {:?}",
        b.owned()
    );
    assert!(ledger.early.is_empty(), "early: {:?}", ledger.early);
    let twice = ledger.twice_under_one_token();
    assert!(twice.is_empty(), "twice under one token: {twice:?}");
    for (q, id, t, _, ok) in &outcomes {
        let later: Vec<_> = ledger
            .dispatches
            .iter()
            .filter(|(_, q2, id2, t2)| q2 == q && id2 == id && t2 > t)
            .collect();
        if *ok {
            assert!(
                later.is_empty(),
                "{q}/{id}: end acknowledged under {t}, handed out again: {later:?} ({outcomes:?})"
            );
        } else {
            let moved = owner_of(&[&a, &b], q).map(|(_, t)| t) != initial.get(q).copied();
            assert!(
                !moved || !later.is_empty(),
                "{q}/{id}: end refused after the claim, yet not handed out again ({outcomes:?})"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// A hand-out kept across the whole move, retried at the source afterwards.

/// `a` hands out one journaled timer of each of 6 queues and keeps the `Due`s for 8 s after
/// `b` joined (past the handoff timeout of 5 s). Then `a`'s deliveries fail and it retries
/// each `Due` at once (`Due::retry_at`); the fleet settles. What
/// `Due::retry_at` promises (never lost, never doubled) and the journal (not ended) say each
/// of them must be handed out again, under a token larger than `a`'s, and never twice under
/// one token. `b` then confirms and journals the end of each, acknowledged, and leaves: the
/// queues go back to `a`, which must hand none of them out again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hand_out_kept_across_a_move_and_retried_at_the_source_ends_once() {
    let Some(OneHeld {
        _servers,
        qs,
        a,
        b,
        intended,
        initial,
        mut ledger,
        held,
    }) = holding_one_each(6, 4).await
    else {
        return;
    };
    // Keep the hand-outs past the handoff timeout (5 s here), then fail them all: each
    // retried at once, at the source.
    let started = Instant::now();
    let mut trace = Vec::new();
    while started.elapsed() < Duration::from_secs(8) {
        let frozen: Vec<&String> = qs
            .iter()
            .filter(|q| a.fence().token(q.as_bytes()).is_none())
            .collect();
        trace.push(format!(
            "{:.1?}: a cannot dispatch {frozen:?}, b owns {:?}",
            started.elapsed(),
            b.owned()
        ));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mut retried = Vec::new();
    for d in held {
        let (q, id) = (d.due.queue().clone(), *d.due.id());
        let r = d.due.retry_at(Instant::now());
        retried.push((q, id, format!("{r:?}")));
    }
    wait_until(
        Duration::from_secs(60),
        "b took queues, one owner each",
        || !b.owned().is_empty() && exactly_one(&[&a, &b], &qs),
    )
    .await;
    eprintln!(
        "while a kept its hand-outs: {trace:#?}\nb took its first queue {:.1?} after it joined",
        started.elapsed()
    );
    let moved: BTreeSet<String> = b.owned().into_iter().map(|(q, _)| q).collect();
    let kept: Vec<(String, u64)> = retried
        .iter()
        .filter(|(q, _, _)| moved.contains(q))
        .map(|(q, id, _)| (q.clone(), *id))
        .collect();
    assert!(!kept.is_empty());
    ledger
        .collect(&[&a, &b], &intended, Duration::from_secs(10), |l| {
            kept.iter().all(|(q, id)| {
                l.dispatches
                    .iter()
                    .any(|(_, q2, id2, t)| q2 == q && id2 == id && *t > initial[q])
            })
        })
        .await;
    eprintln!("retries at a after the move: {retried:?}; moved: {moved:?}");
    // A failed delivery retried where its queue stayed comes out again under the same
    // token, by the user's choice: one more hand-out of those is allowed.
    let allowed = |q: &str, id: u64, t: u64, n: usize| {
        n == 2 && t == initial[q] && retried.iter().any(|(q2, id2, _)| q2 == q && *id2 == id)
    };
    let twice: Vec<_> = ledger
        .twice_under_one_token()
        .into_iter()
        .filter(|(q, id, t, n)| !allowed(q, *id, *t, *n))
        .collect();
    assert!(
        twice.is_empty(),
        "twice under one token: {twice:?} ({retried:?})"
    );
    for (q, id) in &kept {
        assert!(
            ledger
                .dispatches
                .iter()
                .any(|(_, q2, id2, t)| q2 == q && id2 == id && *t > initial[q]),
            "{q}/{id}: in flight across the move, never ended, not handed out again by the \
             new owner ({retried:?}; hand-outs: {:?})",
            ledger.dispatches
        );
    }
    // b confirms everything it handed out: ends acknowledged.
    let ended = end_all_handed_out_by(&b, &ledger).await;
    let again = ended_handed_out_after_leave(&mut ledger, (&a, b), &qs, &intended, &ended).await;
    assert_eq!(a.owned().len(), qs.len(), "a owns every queue again");
    assert!(
        again.is_empty(),
        "handed out again after b's acknowledged end and its leave: {again:?} (a's retries: \
         {retried:?})"
    );
    let twice: Vec<_> = ledger
        .twice_under_one_token()
        .into_iter()
        .filter(|(q, id, t, n)| !allowed(q, *id, *t, *n))
        .collect();
    assert!(twice.is_empty(), "twice under one token: {twice:?}");
}

// ---------------------------------------------------------------------------------------
// A late schedule at the old owner, the queue coming back.

/// A user who journals first and schedules second (a put acknowledged is an accepted timer,
/// the docs say) and whose schedule call comes late: `a` journals timer X of each queue
/// (acknowledged) and has not scheduled it yet when `b` joins and takes queues by handoff.
/// `b` loads X from the journal, hands it out and journals its end (acknowledged). Then `a`'s
/// late `schedule` of X runs (the scheduler takes it or refuses it). `b` leaves: its queues
/// come back to `a`, which must not hand out an X whose end was acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_schedule_at_the_old_owner_does_not_bring_back_an_ended_timer() {
    let Some((_etcd, _redis, opts, qs, a)) = journaled_a(6).await else {
        return;
    };
    let at = Instant::now();
    let mut intended = HashMap::new();
    for (n, q) in qs.iter().enumerate() {
        let id = n as u64 * 100;
        a.journal_put(q, &id, at, &format!("{q}:{id}"))
            .expect("journal_put")
            .await
            .expect("put acknowledged");
        intended.insert(id, at);
    }
    let initial: BTreeMap<String, u64> = a.owned().into_iter().collect();
    let b = join_journaling(&opts, "b", true).await;
    settle(&[&a, &b], &qs).await;
    let moved: Vec<String> = b.owned().into_iter().map(|(q, _)| q).collect();
    assert!(!moved.is_empty());
    let mut ledger = Ledger::default();
    ledger
        .collect(&[&b], &intended, Duration::from_secs(10), |l| {
            l.dispatches.len() >= moved.len()
        })
        .await;
    assert!(ledger.dispatches.iter().all(|(m, ..)| m == "b"));
    let ended = end_all_handed_out_by(&b, &ledger).await;
    assert_eq!(ended.len(), moved.len(), "b hands out each moved queue's X");
    // a's late schedules, for every queue.
    let mut late = Vec::new();
    for (n, q) in qs.iter().enumerate() {
        let id = n as u64 * 100;
        let r = a
            .scheduler()
            .schedule(q.clone(), id, at, format!("{q}:{id}"));
        late.push((q.clone(), id, r.is_ok()));
    }
    eprintln!("a's late schedules (queue, id, accepted): {late:?}; moved: {moved:?}");
    let again = ended_handed_out_after_leave(&mut ledger, (&a, b), &qs, &intended, &ended).await;
    assert!(
        again.is_empty(),
        "handed out again after b's acknowledged end, once the queue came back: {again:?} \
         (a's late schedules (queue, id, accepted): {late:?}; tokens before: {initial:?}, \
         after: {:?})",
        a.owned()
    );
}

// ---------------------------------------------------------------------------------------
// A journal read that fails for good.

/// `a` owns 4 seeded queues; beside it, a writer of the journal that encodes values
/// differently (what an older or newer build of the program leaves behind in a rolling
/// upgrade) puts one record into q0's journal under `a`'s token: a MessagePack id, a value
/// that does not decode as the members' `String`. `b` joins; q0 is among the queues placed on
/// `b`. The record must not hold the queue unowned (every adopter would fail on it alike; it
/// did, for good): within 30 s every held timer of q0 is handed out, and the record left out
/// is reported (`FleetEvent::Undecodable`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_journal_record_that_does_not_decode_leaves_the_queue_owned() {
    let Some((_etcd, redis, opts, qs, a)) = journaled_a(4).await else {
        return;
    };
    let (fates, intended, initial) = seed_owned(&a, &qs, 30, Duration::from_secs(2)).await;
    write_undecodable(&redis, &[("q0", initial["q0"])]).await;
    let mut a_events = a.events();
    let b = join_journaling(&opts, "b", true).await;
    let mut b_events = b.events();
    // Hand out whatever is due at either member for up to 30 s, until every held timer came
    // out; note who could dispatch q0 meanwhile.
    let mut ledger = Ledger::default();
    let held: Keys = fates
        .iter()
        .filter(|(_, f)| **f == Fate::Held)
        .map(|(k, _)| k.clone())
        .collect();
    let mut q0 = Vec::new();
    let started = Instant::now();
    while !held.is_subset(&ledger.ids()) && started.elapsed() < Duration::from_secs(30) {
        ledger.drain(&[&a, &b], &intended);
        let who = (
            a.fence().token(b"q0"),
            b.fence().token(b"q0"),
            ownership(&[&a, &b]).get("q0").cloned(),
        );
        if q0.last().map(|(_, w)| w) != Some(&who) {
            q0.push((started.elapsed(), who));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let events = events_of_both(&mut a_events, &mut b_events);
    eprintln!(
        "q0 (time, (a's fence, b's fence, owners)): {q0:?}\nevents: {events:?}; {} hand-outs",
        ledger.dispatches.len()
    );
    let got = ledger.ids();
    let missing: Vec<_> = held.difference(&got).collect();
    assert!(
        missing.is_empty(),
        "{} held timers not handed out within 30 s of b's join, e.g. {:?} (q0, as (time, (a's \
         fence, b's fence, owners)): {q0:?}; events: {events:?})",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    let poison = UNDECODABLE_ID.to_vec();
    assert!(
        events.iter().any(|(_, e)| matches!(
            e,
            FleetEvent::Undecodable { queue, records }
                if queue == "q0" && records.iter().any(|(id, _)| *id == poison)
        )),
        "the record left out is reported: {events:?}"
    );
    let (_, mut may) = expected(&fates, &initial, &[&a, &b]);
    may.insert(("q0".to_owned(), 999_999));
    check(&ledger, &fates, &held, &may);
}
