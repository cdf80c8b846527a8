//! A child member (the joining one, or the source) SIGKILLed in the middle of the moves.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use crate::common::token_of;
use crate::common::*;
use crate::support::*;
use tickwheel_testkit::child::TestChild;

// ---------------------------------------------------------------------------------------
// The joining member dies right after its first acquisition.

// `TestChild::spawn` runs a child by its full libtest name (`--exact`), this module's
// path included: `killed_children::joiner_child`, `killed_children::source_child`.
const JOINER: &str = "TICKWHEEL_FLEET_JOURNAL_MOVE_JOINER";

/// Joins with the journal on, prints `ACQ <queue> <token>` for each acquisition, dispatches
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joiner_child() {
    if let Some((m, _)) = join_child_journaled(JOINER).await {
        print_acquisitions(m.events()).await;
    }
}

/// `a` holds eight queues of held, orphaned and ended timers; a child member joins and is
/// SIGKILLed as soon as it reports its first acquisition (the other moves claimed, fetched or
/// waiting). `a`, alone again, owns every queue once the child's lease expired; it hands out
/// every held timer and every orphan of a queue whose token changed, nothing ended, none
/// twice under one token, none early.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_joining_member_killed_after_its_first_acquisition_loses_nothing() {
    let Some((etcd, redis, _opts, qs, a)) = parent_journaled_a(JOINER, 8).await else {
        return;
    };
    let (fates, intended, initial) = seed_owned(&a, &qs, 30, Duration::from_secs(3)).await;
    let mut child = TestChild::spawn(
        "killed_children::joiner_child",
        JOINER,
        &format!("{} {} j", etcd.url(), redis.url()),
    );
    let until = Instant::now() + Duration::from_secs(30);
    while child.count("ACQ ") == 0 {
        assert!(Instant::now() < until, "the child acquired nothing");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut a_events = a.events();
    child.kill9();
    let acquired = child.lines();
    let events = alone_with_all(&a, &qs, "a owns every queue again", &mut a_events).await;
    eprintln!("the child acquired {acquired:?}; then a: {events:?}");
    let mut ledger = Ledger::default();
    let (must, may) = expected(&fates, &initial, &[&a]);
    ledger
        .collect_all(&[&a], &intended, &must, Duration::from_secs(20))
        .await;
    let changed: Vec<_> = qs
        .iter()
        .filter(|q| token_of(&a, q) != initial.get(*q).copied())
        .collect();
    assert!(
        !changed.is_empty(),
        "no queue came back to a under a new token (the child: {acquired:?})"
    );
    check(&ledger, &fates, &must, &may);
}

// ---------------------------------------------------------------------------------------
// The source dies in the middle of its moves.

const SOURCE: &str = "TICKWHEEL_FLEET_JOURNAL_MOVE_SOURCE";
/// Journal-only timers per queue of the source child, due in an hour.
const EXTRA: u64 = 5_000;

/// Joins alone with the journal on, owns the 8 queues, seeds them ([`seed`], due 3 s later),
/// journals [`EXTRA`] more timers per queue (ids `10 000 000 + n * 100 000 + i`, due in an
/// hour, not scheduled), prints `FATE <queue> <id> <Held|Orphaned|Ended>` for each timer and then `DONE`;
/// dispatches nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_child() {
    let Some((m, _)) = join_child_journaled(SOURCE).await else {
        return;
    };
    let qs = queues(8);
    wait_until(
        Duration::from_secs(30),
        "the child owns every queue",
        || m.owned().len() == qs.len(),
    )
    .await;
    let (fates, _) = seed(&m, &qs, 30, Duration::from_secs(3)).await;
    // Long journals, so that each move's load takes a while.
    journal_only(&m, &qs, EXTRA).await;
    for ((q, id), f) in &fates {
        println!("FATE {q} {id} {f:?}");
    }
    println!("DONE");
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// A child member owns 8 seeded queues; `b` joins and, as soon as `b` acquired its first
/// queue by handoff (the other moves under way), the child is SIGKILLed. `b` ends up owning
/// every queue under a new token and hands out every held and orphaned timer, nothing ended,
/// none twice under one token.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_source_killed_in_the_middle_of_its_moves_loses_nothing() {
    let Some((etcd, redis, opts, qs)) = parent_fleet_with(SOURCE, 8).await else {
        return;
    };
    let mut child = TestChild::spawn(
        "killed_children::source_child",
        SOURCE,
        &format!("{} {} a", etcd.url(), redis.url()),
    );
    let started = Instant::now();
    while !child.has("DONE") {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the child did not finish: {:?}",
            child.lines()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut fates = BTreeMap::new();
    for l in child.lines() {
        let Some(rest) = l.strip_prefix("FATE ") else {
            continue;
        };
        let p: Vec<&str> = rest.split(' ').collect();
        let f = match p.get(2) {
            Some(&"Held") => Fate::Held,
            Some(&"Orphaned") => Fate::Orphaned,
            _ => Fate::Ended,
        };
        fates.insert((p[0].to_owned(), p[1].parse::<u64>().expect("id")), f);
    }
    assert_eq!(fates.len(), qs.len() * 30);
    let b = join_journaling(&opts, "b", true).await;
    let mut events = b.events();
    first_acquisition(&b).await;
    child.kill9();
    let ev = alone_with_all(&b, &qs, "b owns every queue", &mut events).await;
    eprintln!("b after its first acquisition: {ev:?}");
    // Every queue changed owner: everything not ended must come out.
    let initial: BTreeMap<String, u64> = BTreeMap::new();
    let (must, may) = expected(&fates, &initial, &[&b]);
    let mut ledger = Ledger::default();
    ledger
        .collect(&[&b], &HashMap::new(), Duration::from_secs(20), |l| {
            must.is_subset(&l.ids())
        })
        .await;
    let mut may = may;
    for (n, q) in qs.iter().enumerate() {
        may.extend((0..EXTRA).map(|i| (q.clone(), 10_000_000 + n as u64 * 100_000 + i)));
    }
    check(&ledger, &fates, &must, &may);
    for (n, q) in qs.iter().enumerate() {
        let held = ids_held(&b, q);
        let missing = (0..EXTRA)
            .map(|i| 10_000_000 + n as u64 * 100_000 + i)
            .filter(|id| !held.contains(id))
            .count();
        assert_eq!(missing, 0, "{q}: journal-only timers b does not hold");
    }
}

// ---------------------------------------------------------------------------------------
// Later deadlines in offers when the joining member dies.

/// `a` holds one handed-out timer X of each of 8 queues (journaled due at once) and 5 more
/// due in an hour. A child member joins; as each queue freezes for its offer, `a` retries X
/// an hour later (forwarded: the offer carries the later deadline). The child is SIGKILLed
/// at its first acquisition (other offers sealed, claimed, loading); only then does `a`'s put
/// of each X's later deadline go out (acknowledged where `a` still held the token, refused
/// where the child had claimed). `a`, alone again, adopts what the child took (journal and
/// leftover offer): nothing may come out within 3 s, every deadline being an hour away.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn later_deadlines_in_offers_hold_when_the_joining_member_dies() {
    let Some((etcd, redis, _opts, qs, a)) = parent_journaled_a(JOINER, 8).await else {
        return;
    };
    let t0 = Instant::now();
    let later = t0 + Duration::from_secs(3600);
    let intended = put_each(&a, &qs, 6, first_due_at(1, t0), Some(later)).await;
    let mut held = hold(&a, qs.len(), None).await;
    let mut a_events = a.events();
    let mut child = TestChild::spawn(
        "killed_children::joiner_child",
        JOINER,
        &format!("{} {} j", etcd.url(), redis.url()),
    );
    let mut retried = Vec::new();
    let until = Instant::now() + Duration::from_secs(30);
    while child.count("ACQ ") == 0 {
        assert!(Instant::now() < until, "the child acquired nothing");
        let (now, wait): (Vec<_>, Vec<_>) = held
            .into_iter()
            .partition(|d| a.fence().token(d.due.queue().as_bytes()).is_none());
        held = wait;
        for d in now {
            let (q, id) = (d.due.queue().clone(), *d.due.id());
            let r = d.due.retry_at(later);
            retried.push((q, id, format!("{r:?}")));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    child.kill9();
    let acquired: Vec<String> = child
        .lines()
        .into_iter()
        .filter(|l| l.starts_with("ACQ "))
        .collect();
    // The puts of the later deadlines, late.
    let mut puts = Vec::new();
    for (q, id, _) in &retried {
        let r = match a.journal_put(q, id, later, &format!("{q}:{id}")) {
            Ok(w) => w.await.map(|_| ()).map_err(|e| format!("{e}")),
            Err(e) => Err(format!("{e}")),
        };
        puts.push((q.clone(), *id, r));
    }
    // The rest stay with a: their hand-outs go back, an hour later.
    for d in held {
        let _ = d.due.retry_at(later);
    }
    let events = alone_with_all(&a, &qs, "a owns every queue again", &mut a_events).await;
    let mut ledger = Ledger::default();
    ledger.watch(&[&a], &intended, Duration::from_secs(3)).await;
    eprintln!(
        "retried at the freeze: {retried:?}\nthe child: {acquired:?}\nlate puts: {puts:?}\n\
         a's events: {events:?}"
    );
    assert!(
        ledger.dispatches.is_empty(),
        "handed out an hour early: {:?}\n(retried at the freeze: {retried:?}; the child: \
         {acquired:?}; late puts: {puts:?}; a's events: {events:?})",
        ledger.dispatches
    );
}
