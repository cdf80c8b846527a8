//! Orderly moves of journaled queues (a join, a leave) under hostile timing: what the docs
//! promise for a handoff's target that loads the queue's journal after the offer.
//!
//! - nothing journaled and not ended is lost across a join or a leave;
//! - a timer whose `journal_end` was acknowledged is never dispatched again;
//! - no `(id, token)` is dispatched twice;
//! - a timer never fires before the deadline its user last gave it (a later deadline set
//!   before or during the move included);
//! - a Redis fault during the move (SIGKILL and restart, SIGSTOP) or the death of the joining
//!   member right after its first acquisition leaves every queue owned, nothing lost.
//!
//! Every timer's value is `"<queue>:<id>"`; the deadline its user meant is kept beside it in
//! the test, and a dispatch is early when `pop_due(now)` returned it with `now` before that
//! deadline (less a tolerance of [`SLACK`] for the reference clock's microseconds).

mod support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::*;
use tickwheel::sync::Cancel;
use tickwheel_fleet::FleetEvent;
use tickwheel_testkit::child::{TestChild, send_signal};

/// How far before its deadline a hand-out still counts as on time: the journal keeps
/// deadlines in microseconds of Redis `TIME`.
const SLACK: Duration = Duration::from_millis(1);

/// Every hand-out seen, by whom and under which token, and those that came early.
#[derive(Default)]
struct Ledger {
    /// (member, queue, id, token) in the order seen.
    dispatches: Vec<(String, String, u64, u64)>,
    /// (member, queue, id, token, how early).
    early: Vec<(String, String, u64, u64, Duration)>,
}

impl Ledger {
    /// Records one hand-out that `pop_due(now)` returned.
    fn record(
        &mut self,
        member: &str,
        now: Instant,
        d: &tickwheel_fleet::FencedDue<String, u64, String>,
        intended: &HashMap<u64, Instant>,
    ) {
        let (q, id) = (d.due.queue().clone(), *d.due.id());
        assert_eq!(d.due.value(), &format!("{q}:{id}"), "value of {id}");
        if let Some(want) = intended.get(&id)
            && now + SLACK < *want
        {
            self.early
                .push((member.to_owned(), q.clone(), id, d.token, *want - now));
        }
        self.dispatches.push((member.to_owned(), q, id, d.token));
    }

    /// Pops everything due at `members` now, records it and drops each `Due` (delivered).
    fn drain(&mut self, members: &[&FleetMember], intended: &HashMap<u64, Instant>) {
        for m in members {
            let now = Instant::now();
            for d in m.pop_due(now, 10_000) {
                self.record(m.name(), now, &d, intended);
            }
        }
    }

    fn ids(&self) -> BTreeSet<(String, u64)> {
        self.dispatches
            .iter()
            .map(|(_, q, id, _)| (q.clone(), *id))
            .collect()
    }

    /// `(id, token)` pairs handed out more than once.
    fn twice_under_one_token(&self) -> Vec<(String, u64, u64, usize)> {
        let mut n: BTreeMap<(String, u64, u64), usize> = BTreeMap::new();
        for (_, q, id, t) in &self.dispatches {
            *n.entry((q.clone(), *id, *t)).or_default() += 1;
        }
        n.into_iter()
            .filter(|(_, c)| *c > 1)
            .map(|((q, id, t), c)| (q, id, t, c))
            .collect()
    }
}

fn token_of(m: &FleetMember, q: &str) -> Option<u64> {
    m.owned().iter().find(|(o, _)| o == q).map(|(_, t)| *t)
}

/// The owner of `q` among `members` and its token.
fn owner_of<'a>(members: &[&'a FleetMember], q: &str) -> Option<(&'a FleetMember, u64)> {
    members.iter().find_map(|m| token_of(m, q).map(|t| (*m, t)))
}

/// Waits (at most 60 s) until every queue of `qs` has one owner among `members` and who owns
/// what, with which token, stayed the same for 2 s: the placement is done moving.
async fn settle(members: &[&FleetMember], qs: &[String]) {
    let until = Instant::now() + Duration::from_secs(60);
    let mut last = None;
    let mut since = Instant::now();
    loop {
        let now: Vec<Vec<(String, u64)>> = members.iter().map(|m| m.owned()).collect();
        if last.as_ref() != Some(&now) || !exactly_one(members, qs) {
            last = Some(now);
            since = Instant::now();
        } else if since.elapsed() > Duration::from_secs(2) {
            return;
        }
        assert!(Instant::now() < until, "the fleet never settled: {last:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// (queue, id) pairs.
type Keys = BTreeSet<(String, u64)>;

/// What `a` did with a timer before the move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Scheduled and journaled: in the offer and in the journal.
    Held,
    /// Journaled, then taken out of the scheduler without an end: only in the journal.
    Orphaned,
    /// Journaled, taken out, its end journaled and acknowledged: nowhere.
    Ended,
}

fn fate(i: u64) -> Fate {
    match i % 3 {
        0 => Fate::Held,
        1 => Fate::Orphaned,
        _ => Fate::Ended,
    }
}

/// `a` schedules and journals `per` timers in each of `qs` (ids `n * 1000 + i`), due
/// `first` from now and 10 ms apart, then orphans and ends them by [`fate`]. The fates and
/// the deadlines meant.
async fn seed(
    a: &FleetMember,
    qs: &[String],
    per: u64,
    first: Duration,
) -> (BTreeMap<(String, u64), Fate>, HashMap<u64, Instant>) {
    let t0 = Instant::now();
    let mut fates = BTreeMap::new();
    let mut intended = HashMap::new();
    let mut puts = Vec::new();
    for (n, q) in qs.iter().enumerate() {
        for i in 0..per {
            let id = n as u64 * 1000 + i;
            let at = t0 + first + Duration::from_millis(10 * i);
            let v = format!("{q}:{id}");
            a.scheduler()
                .schedule(q.clone(), id, at, v.clone())
                .expect("schedule");
            puts.push(a.journal_put(q, &id, at, &v).expect("journal_put"));
            intended.insert(id, at);
            fates.insert((q.clone(), id), fate(i));
        }
    }
    for w in puts {
        w.await.expect("put acknowledged");
    }
    let mut ends = Vec::new();
    for ((q, id), f) in &fates {
        if *f != Fate::Held {
            assert!(
                matches!(a.scheduler().cancel(id), Cancel::Cancelled(_)),
                "{id} pending"
            );
        }
        if *f == Fate::Ended {
            ends.push(a.journal_end(q, id).expect("journal_end"));
        }
    }
    for w in ends {
        w.await.expect("end acknowledged");
    }
    (fates, intended)
}

/// Polls `members` every 2 ms until `done(ledger)` or `limit`, then once more after 200 ms.
async fn collect(
    ledger: &mut Ledger,
    members: &[&FleetMember],
    intended: &HashMap<u64, Instant>,
    limit: Duration,
    mut done: impl FnMut(&Ledger) -> bool,
) {
    let until = Instant::now() + limit;
    while !done(ledger) && Instant::now() < until {
        ledger.drain(members, intended);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    ledger.drain(members, intended);
}

/// The checks every move test ends with: none early, none twice under one token, no ended
/// timer handed out, every timer in `must` handed out, nothing outside `may`.
fn check(
    ledger: &Ledger,
    fates: &BTreeMap<(String, u64), Fate>,
    must: &BTreeSet<(String, u64)>,
    may: &BTreeSet<(String, u64)>,
) {
    assert!(
        ledger.early.is_empty(),
        "{} hand-outs before their deadline, e.g. {:?}",
        ledger.early.len(),
        &ledger.early[..ledger.early.len().min(5)]
    );
    let twice = ledger.twice_under_one_token();
    assert!(twice.is_empty(), "twice under one token: {twice:?}");
    let got = ledger.ids();
    let ended: Vec<_> = got
        .iter()
        .filter(|k| fates.get(*k) == Some(&Fate::Ended))
        .collect();
    assert!(
        ended.is_empty(),
        "{} timers whose end was acknowledged before the move were handed out, e.g. {:?}",
        ended.len(),
        &ended[..ended.len().min(5)]
    );
    let missing: Vec<_> = must.difference(&got).collect();
    assert!(
        missing.is_empty(),
        "{} of {} journaled, not ended timers never handed out, e.g. {:?}",
        missing.len(),
        must.len(),
        &missing[..missing.len().min(5)]
    );
    let stray: Vec<_> = got.difference(may).collect();
    assert!(stray.is_empty(), "handed out, never scheduled: {stray:?}");
}

/// What must come out after the moves: every held timer, and the orphans of each queue whose
/// owner's token changed (its new owner, by handoff or adoption, loaded the journal). What
/// may: every timer not ended.
fn expected(
    fates: &BTreeMap<(String, u64), Fate>,
    initial: &BTreeMap<String, u64>,
    members: &[&FleetMember],
) -> (Keys, Keys) {
    let mut must = BTreeSet::new();
    let mut may = BTreeSet::new();
    for ((q, id), f) in fates {
        let moved = owner_of(members, q).map(|(_, t)| t) != initial.get(q).copied();
        match f {
            Fate::Held => {
                must.insert((q.clone(), *id));
            }
            Fate::Orphaned if moved => {
                must.insert((q.clone(), *id));
            }
            _ => {}
        }
        if *f != Fate::Ended {
            may.insert((q.clone(), *id));
        }
    }
    (must, may)
}

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
    let (_etcd, _redis, opts) = fleet()?;
    let qs = queues(12);
    register(&opts, &qs).await;
    let a = join_journaling(&opts, "a", true).await;
    wait_until(Duration::from_secs(30), "a owns every queue", || {
        a.owned().len() == qs.len()
    })
    .await;
    let t0 = Instant::now();
    let later = t0 + Duration::from_secs(3600);
    let mut intended = HashMap::new();
    for (n, q) in qs.iter().enumerate() {
        for i in 0..10u64 {
            let id = n as u64 * 100 + i;
            let at = if i < 4 { t0 } else { later };
            let v = format!("{q}:{id}");
            a.scheduler()
                .schedule(q.clone(), id, at, v.clone())
                .expect("schedule");
            a.journal_put(q, &id, at, &v)
                .expect("journal_put")
                .await
                .expect("put acknowledged");
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
    collect(
        &mut ledger,
        &[&a, &b],
        &intended,
        Duration::from_secs(3),
        |_| false,
    )
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
        collect(
            &mut ledger,
            &[&c],
            &intended,
            Duration::from_secs(3),
            |_| false,
        )
        .await;
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

// ---------------------------------------------------------------------------------------
// Producers, dispatchers and ends racing two joins and a leave.

#[derive(Default)]
struct Race {
    ledger: Mutex<Ledger>,
    intended: Mutex<HashMap<u64, Instant>>,
    /// Puts acknowledged: (queue, id).
    acked_puts: Mutex<BTreeSet<(String, u64)>>,
    /// Ends acknowledged: (queue, id, token of the hand-out they ended).
    acked_ends: Mutex<Vec<(String, u64, u64)>>,
    members: Mutex<Vec<Arc<FleetMember>>>,
}

/// Hands out what is due at `m` every 5 ms; per batch, journals each end, waits for the
/// acknowledgements, then drops the `Due`s (confirmed deliveries). Returns `m` when `stop`.
fn dispatcher(
    race: Arc<Race>,
    m: Arc<FleetMember>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Arc<FleetMember>> {
    tokio::spawn(async move {
        while !stop.load(Ordering::SeqCst) {
            let now = Instant::now();
            let batch = m.pop_due(now, 500);
            let mut ends = Vec::new();
            {
                let intended = race.intended.lock().expect("lock").clone();
                let mut l = race.ledger.lock().expect("lock");
                for d in &batch {
                    l.record(m.name(), now, d, &intended);
                }
            }
            for d in &batch {
                let (q, id) = (d.due.queue().clone(), *d.due.id());
                if let Ok(w) = m.journal_end(&q, &id) {
                    ends.push((q, id, d.token, w));
                }
            }
            for (q, id, t, w) in ends {
                if w.await.is_ok() {
                    race.acked_ends.lock().expect("lock").push((q, id, t));
                }
            }
            drop(batch);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        m
    })
}

/// Every 10 ms, one timer per queue into the scheduler of whichever member may dispatch the
/// queue now, due 0 to 400 ms later, journaled; the acknowledged puts go to `race`. With
/// `put_first`, each round's puts are journaled and acknowledged before the timers are
/// scheduled (a schedule refused then, say by a queue frozen for its offer, leaves the
/// timer in the journal alone, which its next owner loads).
fn producer(
    race: Arc<Race>,
    qs: Vec<String>,
    stop: Arc<AtomicBool>,
    put_first: bool,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut next = 1_000_000u64;
        while !stop.load(Ordering::SeqCst) {
            let members: Vec<Arc<FleetMember>> = race.members.lock().expect("lock").clone();
            let mut puts = Vec::new();
            for q in &qs {
                let Some(m) = members
                    .iter()
                    .find(|m| m.fence().token(q.as_bytes()).is_some())
                else {
                    continue;
                };
                let id = next;
                next += 1;
                let at = Instant::now() + Duration::from_millis(id % 400);
                let v = format!("{q}:{id}");
                race.intended.lock().expect("lock").insert(id, at);
                if !put_first
                    && m.scheduler()
                        .schedule(q.clone(), id, at, v.clone())
                        .is_err()
                {
                    continue;
                }
                if let Ok(w) = m.journal_put(q, &id, at, &v) {
                    puts.push((Arc::clone(m), q.clone(), id, at, v, w));
                }
            }
            drop(members);
            for (m, q, id, at, v, w) in puts {
                if w.await.is_ok() {
                    race.acked_puts
                        .lock()
                        .expect("lock")
                        .insert((q.clone(), id));
                    if put_first {
                        let _ = m.scheduler().schedule(q, id, at, v);
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
}

/// `a` alone with 12 queues; producers and dispatchers run throughout; `b` joins, `c` joins,
/// then `a` leaves holding one handed-out, unended timer of each queue it still owns (dropped,
/// delivered without an end, a second into the leave). Afterwards: every acknowledged put
/// handed out, none early, no `(id, token)` twice, no id handed out under a larger token
/// than the one whose end was acknowledged, and each timer in flight at the leave handed
/// out again under a larger token (its end never ran).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn producers_and_ends_racing_two_joins_and_a_leave_keep_the_ledger() {
    racing_joins_and_a_leave(false).await;
}

/// As above, each producer round journaling its puts before it schedules them: a put
/// acknowledged whose schedule the freeze refused is the journal's alone, and must come out.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn puts_before_schedules_racing_two_joins_and_a_leave_keep_the_ledger() {
    racing_joins_and_a_leave(true).await;
}

async fn racing_joins_and_a_leave(put_first: bool) {
    let Some((_etcd, _redis, opts)) = fleet() else {
        return;
    };
    let qs = queues(12);
    register(&opts, &qs).await;
    let race = Arc::new(Race::default());
    let a = Arc::new(join_journaling(&opts, "a", true).await);
    wait_until(Duration::from_secs(30), "a owns every queue", || {
        a.owned().len() == qs.len()
    })
    .await;
    race.members.lock().expect("lock").push(Arc::clone(&a));
    let stop_p = Arc::new(AtomicBool::new(false));
    let prod = producer(
        Arc::clone(&race),
        qs.clone(),
        Arc::clone(&stop_p),
        put_first,
    );
    let stop_a = Arc::new(AtomicBool::new(false));
    let disp_a = dispatcher(Arc::clone(&race), Arc::clone(&a), Arc::clone(&stop_a));
    drop(a);
    tokio::time::sleep(Duration::from_secs(1)).await;

    let mut others = Vec::new();
    for name in ["b", "c"] {
        let m = Arc::new(join_journaling(&opts, name, true).await);
        race.members.lock().expect("lock").push(Arc::clone(&m));
        let stop = Arc::new(AtomicBool::new(false));
        others.push((
            dispatcher(Arc::clone(&race), Arc::clone(&m), Arc::clone(&stop)),
            stop,
        ));
        wait_until(
            Duration::from_secs(30),
            "the new member owns a queue",
            || !m.owned().is_empty(),
        )
        .await;
        let ms: Vec<Arc<FleetMember>> = race.members.lock().expect("lock").clone();
        wait_until(Duration::from_secs(30), "one owner each", || {
            let refs: Vec<&FleetMember> = ms.iter().map(|m| &**m).collect();
            exactly_one(&refs, &qs)
        })
        .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    // a leaves: its dispatcher stops, the producer stops using it.
    stop_a.store(true, Ordering::SeqCst);
    let a = disp_a.await.expect("dispatcher of a");
    race.members
        .lock()
        .expect("lock")
        .retain(|m| m.name() != "a");
    let a_tokens: BTreeMap<String, u64> = a.owned().into_iter().collect();
    // One timer of each of a's queues in flight when the leave starts.
    let mut in_flight = Vec::new();
    for q in a_tokens.keys() {
        let id = 9_000_000 + in_flight.len() as u64;
        let at = Instant::now();
        let v = format!("{q}:{id}");
        race.intended.lock().expect("lock").insert(id, at);
        a.scheduler()
            .schedule(q.clone(), id, at, v.clone())
            .expect("schedule");
        a.journal_put(q, &id, at, &v)
            .expect("journal_put")
            .await
            .expect("put acknowledged");
        race.acked_puts
            .lock()
            .expect("lock")
            .insert((q.clone(), id));
        in_flight.push(id);
    }
    let mut held = Vec::new();
    let until = Instant::now() + Duration::from_secs(10);
    while held.len() < in_flight.len() && Instant::now() < until {
        let now = Instant::now();
        for d in a.pop_due(now, 1000) {
            let intended = race.intended.lock().expect("lock").clone();
            race.ledger
                .lock()
                .expect("lock")
                .record("a", now, &d, &intended);
            if in_flight.contains(d.due.id()) {
                held.push(d);
            }
            // Anything else due now is delivered without an end: it may come again.
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(held.len(), in_flight.len(), "a's in-flight timers");
    let mut a = a;
    let a = loop {
        match Arc::try_unwrap(a) {
            Ok(m) => break m,
            Err(back) => {
                a = back;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    let leave = tokio::spawn(async move { a.leave().await });
    tokio::time::sleep(Duration::from_secs(1)).await;
    drop(held);
    leave.await.expect("leave task").expect("leave");
    let ms: Vec<Arc<FleetMember>> = race.members.lock().expect("lock").clone();
    wait_until(Duration::from_secs(30), "b and c own every queue", || {
        let refs: Vec<&FleetMember> = ms.iter().map(|m| &**m).collect();
        exactly_one(&refs, &qs)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop_p.store(true, Ordering::SeqCst);
    prod.await.expect("producer");

    // Every acknowledged put handed out (ends keep running meanwhile).
    let acked: BTreeSet<(String, u64)> = race.acked_puts.lock().expect("lock").clone();
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let got = race.ledger.lock().expect("lock").ids();
        if acked.is_subset(&got) || Instant::now() > until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (h, stop) in others {
        stop.store(true, Ordering::SeqCst);
        drop(h.await.expect("dispatcher"));
    }
    let ledger = race.ledger.lock().expect("lock");
    let ends = race.acked_ends.lock().expect("lock").clone();
    eprintln!(
        "{} puts acknowledged, {} hand-outs of {} ids, {} ends acknowledged; a held {:?} at its leave",
        acked.len(),
        ledger.dispatches.len(),
        ledger.ids().len(),
        ends.len(),
        a_tokens
    );
    assert!(!ends.is_empty() && !acked.is_empty());
    assert!(
        ledger.early.is_empty(),
        "{} hand-outs before their deadline, e.g. {:?}",
        ledger.early.len(),
        &ledger.early[..ledger.early.len().min(5)]
    );
    let twice = ledger.twice_under_one_token();
    assert!(twice.is_empty(), "twice under one token: {twice:?}");
    let got = ledger.ids();
    let lost: Vec<_> = acked.difference(&got).collect();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged puts never handed out, e.g. {:?}",
        lost.len(),
        acked.len(),
        &lost[..lost.len().min(5)]
    );
    let mut again = Vec::new();
    for (q, id, t) in &ends {
        for (m, q2, id2, t2) in &ledger.dispatches {
            if q2 == q && id2 == id && t2 > t {
                again.push((q.clone(), *id, *t, m.clone(), *t2));
            }
        }
    }
    assert!(
        again.is_empty(),
        "{} hand-outs after an acknowledged end, (queue, id, token ended, by, token) e.g. {:?}",
        again.len(),
        &again[..again.len().min(5)]
    );
    for id in &in_flight {
        let q = ledger
            .dispatches
            .iter()
            .find(|(_, _, i, _)| i == id)
            .map(|(_, q, _, _)| q.clone())
            .expect("handed out by a");
        let t_a = a_tokens[&q];
        assert!(
            ledger
                .dispatches
                .iter()
                .any(|(_, q2, i, t)| i == id && *q2 == q && *t > t_a),
            "{q}/{id} was in flight at a's leave and never ended, yet not handed out again \
             under a larger token than {t_a}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// The target's clock anchor read through a stalled Redis.

/// `a` holds four queues of timers due 8 s later (held and orphaned ones). While `b` joins,
/// redis-server is stopped for 150 ms out of every 152 (SIGSTOP/SIGCONT), so whatever `b`
/// reads from Redis at its join (its reference-clock anchor among it) takes up to 150 ms,
/// until `b` acquired its first queue by handoff. No timer may be handed out before its
/// deadline, by `a` or by `b`, and every held timer and every orphan of a moved queue comes
/// out.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_target_joined_through_a_stalled_redis_fires_nothing_early() {
    let Some((_etcd, redis, opts)) = fleet() else {
        return;
    };
    let qs = queues(4);
    register(&opts, &qs).await;
    let a = join_journaling(&opts, "a", true).await;
    wait_until(Duration::from_secs(30), "a owns every queue", || {
        a.owned().len() == qs.len()
    })
    .await;
    let (fates, intended) = seed(&a, &qs, 30, Duration::from_secs(8)).await;
    let initial: BTreeMap<String, u64> = a.owned().into_iter().collect();
    let pid = redis.pid().expect("redis runs");
    let stop = Arc::new(AtomicBool::new(false));
    let pauser = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                send_signal(pid, "STOP").expect("SIGSTOP");
                std::thread::sleep(Duration::from_millis(150));
                send_signal(pid, "CONT").expect("SIGCONT");
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let joining = Instant::now();
    let b = join_journaling(&opts, "b", true).await;
    let joined = joining.elapsed();
    first_acquisition(&b).await;
    stop.store(true, Ordering::SeqCst);
    pauser.join().expect("pauser");
    eprintln!(
        "b joined in {joined:.1?}, acquired its first queue {:.1?} after the join began",
        joining.elapsed()
    );
    wait_until(Duration::from_secs(30), "b took queues", || {
        !b.owned().is_empty() && exactly_one(&[&a, &b], &qs)
    })
    .await;
    // The deadlines b imported, against those meant: none may be earlier.
    let mut offsets = Vec::new();
    for (q, _) in b.owned() {
        for m in b.scheduler().queue_members(&q) {
            let want = intended[&m.id];
            let ms = if m.deadline >= want {
                (m.deadline - want).as_secs_f64() * 1e3
            } else {
                -(want - m.deadline).as_secs_f64() * 1e3
            };
            offsets.push((q.clone(), m.id, ms));
        }
    }
    let min = offsets.iter().map(|o| o.2).fold(f64::INFINITY, f64::min);
    let max = offsets
        .iter()
        .map(|o| o.2)
        .fold(f64::NEG_INFINITY, f64::max);
    eprintln!(
        "{} deadlines at b, {min:.3} to {max:.3} ms off those meant",
        offsets.len()
    );
    let early: Vec<_> = offsets
        .iter()
        .filter(|o| o.2 < -(SLACK.as_secs_f64() * 1e3))
        .collect();
    assert!(
        early.is_empty(),
        "deadlines imported earlier than meant (queue, id, ms): {:?}",
        &early[..early.len().min(5)]
    );
    let mut ledger = Ledger::default();
    let last = intended.values().max().copied().expect("timers");
    let (must, may) = expected(&fates, &initial, &[&a, &b]);
    collect(
        &mut ledger,
        &[&a, &b],
        &intended,
        last.saturating_duration_since(Instant::now()) + Duration::from_secs(10),
        |l| must.is_subset(&l.ids()),
    )
    .await;
    check(&ledger, &fates, &must, &may);
}

// ---------------------------------------------------------------------------------------
// Redis faults in the middle of a move.

#[derive(Debug, Clone, Copy)]
enum RedisFault {
    /// SIGKILL, 1 s down, restarted from its append-only file.
    Restart,
    /// SIGSTOP for 3 s, then SIGCONT.
    Pause,
    /// SIGSTOP for 8 s (past the handoff timeout of 5 s), then SIGCONT.
    LongPause,
}

/// `a` holds 16 queues of held, orphaned and ended timers due 4 s later; `b` joins, and as
/// soon as `b` acquired its first queue (the others mid-handoff) Redis suffers `fault`. Once
/// every queue has one owner again: nothing ended handed out, every held timer handed out and
/// every orphan of a queue whose owner's token changed, none early, none twice under one
/// token.
async fn redis_fault_during_a_move(fault: RedisFault) {
    let Some((_etcd, mut redis, opts)) = fleet() else {
        return;
    };
    let qs = queues(16);
    register(&opts, &qs).await;
    let a = join_journaling(&opts, "a", true).await;
    wait_until(Duration::from_secs(30), "a owns every queue", || {
        a.owned().len() == qs.len()
    })
    .await;
    let (fates, intended) = seed(&a, &qs, 30, Duration::from_secs(4)).await;
    let initial: BTreeMap<String, u64> = a.owned().into_iter().collect();
    let mut a_events = a.events();
    let b = join_journaling(&opts, "b", true).await;
    let mut b_events = b.events();
    first_acquisition(&b).await;
    let at_fault = (a.owned(), b.owned());
    match fault {
        RedisFault::Restart => {
            redis.kill9().expect("kill redis");
            tokio::time::sleep(Duration::from_secs(1)).await;
            redis.restart().expect("restart redis");
        }
        RedisFault::Pause | RedisFault::LongPause => {
            let pid = redis.pid().expect("redis runs");
            send_signal(pid, "STOP").expect("SIGSTOP");
            let secs = if matches!(fault, RedisFault::Pause) {
                3
            } else {
                8
            };
            tokio::time::sleep(Duration::from_secs(secs)).await;
            send_signal(pid, "CONT").expect("SIGCONT");
        }
    }
    settle(&[&a, &b], &qs).await;
    let (must, may) = expected(&fates, &initial, &[&a, &b]);
    let mut events = Vec::new();
    while let Ok(e) = a_events.try_recv() {
        events.push(("a", e));
    }
    while let Ok(e) = b_events.try_recv() {
        events.push(("b", e));
    }
    eprintln!(
        "{fault:?}: at the fault a owned {:?}, b {:?}; events since b joined: {events:?}; \
         settled: b owns {:?}",
        at_fault.0,
        at_fault.1,
        b.owned()
    );
    let mut ledger = Ledger::default();
    collect(
        &mut ledger,
        &[&a, &b],
        &intended,
        Duration::from_secs(30),
        |l| must.is_subset(&l.ids()),
    )
    .await;
    // The fleet may still have been settling: take the ownership again for the orphans.
    let (must_now, _) = expected(&fates, &initial, &[&a, &b]);
    let must: BTreeSet<_> = must.union(&must_now).cloned().collect();
    collect(
        &mut ledger,
        &[&a, &b],
        &intended,
        Duration::from_secs(10),
        |l| must.is_subset(&l.ids()),
    )
    .await;
    check(&ledger, &fates, &must, &may);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_killed_and_restarted_during_a_move_loses_nothing() {
    redis_fault_during_a_move(RedisFault::Restart).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_paused_during_a_move_loses_nothing() {
    redis_fault_during_a_move(RedisFault::Pause).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_paused_past_the_handoff_timeout_during_a_move_loses_nothing() {
    redis_fault_during_a_move(RedisFault::LongPause).await;
}

// ---------------------------------------------------------------------------------------
// The joining member dies right after its first acquisition.

const JOINER: &str = "TICKWHEEL_FLEET_JOURNAL_MOVE_JOINER";

/// Joins with the journal on, prints `ACQ <queue> <token>` for each acquisition, dispatches
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joiner_child() {
    let Ok(spec) = std::env::var(JOINER) else {
        return;
    };
    let (opts, name) = child_spec(&spec);
    let m = join_journaling(&opts, &name, true).await;
    let mut events = m.events();
    loop {
        if let Ok(FleetEvent::Acquired { queue, token, .. }) = events.recv().await {
            println!("ACQ {queue} {token}");
        }
    }
}

/// `a` holds eight queues of held, orphaned and ended timers; a child member joins and is
/// SIGKILLed as soon as it reports its first acquisition (the other moves claimed, fetched or
/// waiting). `a`, alone again, owns every queue once the child's lease expired; it hands out
/// every held timer and every orphan of a queue whose token changed, nothing ended, none
/// twice under one token, none early.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_joining_member_killed_after_its_first_acquisition_loses_nothing() {
    if std::env::var_os(JOINER).is_some() {
        return;
    }
    let Some((etcd, redis, opts)) = fleet() else {
        return;
    };
    let qs = queues(8);
    register(&opts, &qs).await;
    let a = join_journaling(&opts, "a", true).await;
    wait_until(Duration::from_secs(30), "a owns every queue", || {
        a.owned().len() == qs.len()
    })
    .await;
    let (fates, intended) = seed(&a, &qs, 30, Duration::from_secs(3)).await;
    let initial: BTreeMap<String, u64> = a.owned().into_iter().collect();
    let mut child = TestChild::spawn(
        "joiner_child",
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
    wait_until(Duration::from_secs(30), "a owns every queue again", || {
        a.owned().len() == qs.len()
    })
    .await;
    settle(&[&a], &qs).await;
    let mut events = Vec::new();
    while let Ok(e) = a_events.try_recv() {
        events.push(e);
    }
    eprintln!("the child acquired {acquired:?}; then a: {events:?}");
    let mut ledger = Ledger::default();
    let (must, may) = expected(&fates, &initial, &[&a]);
    collect(
        &mut ledger,
        &[&a],
        &intended,
        Duration::from_secs(20),
        |l| must.is_subset(&l.ids()),
    )
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
    let Some((_etcd, _redis, opts)) = fleet() else {
        return;
    };
    let qs = queues(12);
    register(&opts, &qs).await;
    let a = join_journaling(&opts, "a", true).await;
    wait_until(Duration::from_secs(30), "a owns every queue", || {
        a.owned().len() == qs.len()
    })
    .await;
    let t0 = Instant::now();
    let mut intended = HashMap::new();
    for (n, q) in qs.iter().enumerate() {
        for i in 0..5u64 {
            let id = n as u64 * 100 + i;
            let at = if i == 0 {
                t0
            } else {
                t0 + Duration::from_secs(3600)
            };
            let v = format!("{q}:{id}");
            a.scheduler()
                .schedule(q.clone(), id, at, v.clone())
                .expect("schedule");
            a.journal_put(q, &id, at, &v)
                .expect("journal_put")
                .await
                .expect("put acknowledged");
            intended.insert(id, at);
        }
    }
    let initial: BTreeMap<String, u64> = a.owned().into_iter().collect();
    let mut ledger = Ledger::default();
    let mut held = Vec::new();
    let until = Instant::now() + Duration::from_secs(10);
    while held.len() < qs.len() && Instant::now() < until {
        let now = Instant::now();
        for d in a.pop_due(now, 100) {
            ledger.record("a", now, &d, &intended);
            held.push(d);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(held.len(), qs.len());
    let b = join_journaling(&opts, "b", true).await;
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
    collect(
        &mut ledger,
        &[&a, &b],
        &intended,
        Duration::from_secs(10),
        |l| {
            must.iter().all(|k| {
                l.dispatches
                    .iter()
                    .filter(|(_, q, id, _)| (q, id) == (&k.0, &k.1))
                    .count()
                    > 1
            })
        },
    )
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
    let Some((_etcd, _redis, opts)) = fleet() else {
        return;
    };
    let qs = queues(6);
    register(&opts, &qs).await;
    let a = join_journaling(&opts, "a", true).await;
    wait_until(Duration::from_secs(30), "a owns every queue", || {
        a.owned().len() == qs.len()
    })
    .await;
    let t0 = Instant::now();
    let mut intended = HashMap::new();
    for (n, q) in qs.iter().enumerate() {
        for i in 0..4u64 {
            let id = n as u64 * 100 + i;
            let at = if i == 0 {
                t0
            } else {
                t0 + Duration::from_secs(3600)
            };
            let v = format!("{q}:{id}");
            a.scheduler()
                .schedule(q.clone(), id, at, v.clone())
                .expect("schedule");
            a.journal_put(q, &id, at, &v)
                .expect("journal_put")
                .await
                .expect("put acknowledged");
            intended.insert(id, at);
        }
    }
    let initial: BTreeMap<String, u64> = a.owned().into_iter().collect();
    let mut ledger = Ledger::default();
    let mut held = Vec::new();
    let until = Instant::now() + Duration::from_secs(10);
    while held.len() < qs.len() && Instant::now() < until {
        let now = Instant::now();
        for d in a.pop_due(now, 100) {
            ledger.record("a", now, &d, &intended);
            held.push(d);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(held.len(), qs.len());
    let b = join_journaling(&opts, "b", true).await;
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
    collect(
        &mut ledger,
        &[&a, &b],
        &intended,
        Duration::from_secs(10),
        |l| {
            kept.iter().all(|(q, id)| {
                l.dispatches
                    .iter()
                    .any(|(_, q2, id2, t)| q2 == q && id2 == id && *t > initial[q])
            })
        },
    )
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
    let mut ended = BTreeSet::new();
    for (m, q, id, _) in ledger.dispatches.clone() {
        if m == "b" {
            b.journal_end(&q, &id)
                .expect("journal_end")
                .await
                .expect("end acknowledged");
            ended.insert((q, id));
        }
    }
    let seen = ledger.dispatches.len();
    b.leave().await.expect("leave");
    wait_until(Duration::from_secs(30), "a owns every queue again", || {
        a.owned().len() == qs.len()
    })
    .await;
    collect(
        &mut ledger,
        &[&a],
        &intended,
        Duration::from_secs(3),
        |_| false,
    )
    .await;
    let again: Vec<_> = ledger.dispatches[seen..]
        .iter()
        .filter(|(_, q, id, _)| ended.contains(&(q.clone(), *id)))
        .collect();
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

/// As [`redis_fault_during_a_move`] with long journals: each of 8 queues also holds 8 000
/// journal-only timers due in an hour, so that each target's load of the journal takes a
/// while; redis-server is SIGKILLed 100 ms after `b`'s first acquisition (a later move is
/// then offering, claiming or loading) and restarted a second later. Once settled: the
/// seeded timers as there, and every journal-only timer of a queue whose token changed is in
/// its owner's scheduler (or was handed out).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_killed_while_targets_load_long_journals_loses_nothing() {
    let Some((_etcd, mut redis, opts)) = fleet() else {
        return;
    };
    let qs = queues(8);
    register(&opts, &qs).await;
    let a = join_journaling(&opts, "a", true).await;
    wait_until(Duration::from_secs(30), "a owns every queue", || {
        a.owned().len() == qs.len()
    })
    .await;
    let (fates, intended) = seed(&a, &qs, 30, Duration::from_secs(4)).await;
    let far = Instant::now() + Duration::from_secs(3600);
    let mut extra: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (n, q) in qs.iter().enumerate() {
        let mut puts = Vec::new();
        for i in 0..8_000u64 {
            let id = 10_000_000 + n as u64 * 100_000 + i;
            puts.push(
                a.journal_put(q, &id, far, &format!("{q}:{id}"))
                    .expect("journal_put"),
            );
            extra.entry(q.clone()).or_default().push(id);
        }
        for w in puts {
            w.await.expect("put acknowledged");
        }
    }
    let initial: BTreeMap<String, u64> = a.owned().into_iter().collect();
    let mut a_events = a.events();
    let b = join_journaling(&opts, "b", true).await;
    let mut b_events = b.events();
    first_acquisition(&b).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    redis.kill9().expect("kill redis");
    tokio::time::sleep(Duration::from_secs(1)).await;
    redis.restart().expect("restart redis");
    settle(&[&a, &b], &qs).await;
    let mut events = Vec::new();
    while let Ok(e) = a_events.try_recv() {
        events.push(("a", e));
    }
    while let Ok(e) = b_events.try_recv() {
        events.push(("b", e));
    }
    eprintln!("events since b joined: {events:?}; b owns {:?}", b.owned());
    let (must, may) = expected(&fates, &initial, &[&a, &b]);
    let mut ledger = Ledger::default();
    collect(
        &mut ledger,
        &[&a, &b],
        &intended,
        Duration::from_secs(30),
        |l| must.is_subset(&l.ids()),
    )
    .await;
    let mut may = may;
    for (q, ids) in &extra {
        may.extend(ids.iter().map(|id| (q.clone(), *id)));
    }
    check(&ledger, &fates, &must, &may);
    for (q, ids) in &extra {
        let (owner, token) = owner_of(&[&a, &b], q).expect("an owner");
        if Some(token) == initial.get(q).copied() {
            continue;
        }
        let held: BTreeSet<u64> = owner
            .scheduler()
            .queue_members(q)
            .into_iter()
            .map(|m| m.id)
            .collect();
        let missing: Vec<_> = ids.iter().filter(|id| !held.contains(id)).collect();
        assert!(
            missing.is_empty(),
            "{q} (now {}'s under {token}): {} of {} journal-only timers not held, e.g. {:?}",
            owner.name(),
            missing.len(),
            ids.len(),
            &missing[..missing.len().min(5)]
        );
    }
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
    let Ok(spec) = std::env::var(SOURCE) else {
        return;
    };
    let (opts, name) = child_spec(&spec);
    let m = join_journaling(&opts, &name, true).await;
    let qs = queues(8);
    wait_until(
        Duration::from_secs(30),
        "the child owns every queue",
        || m.owned().len() == qs.len(),
    )
    .await;
    let (fates, _) = seed(&m, &qs, 30, Duration::from_secs(3)).await;
    // Long journals, so that each move's load takes a while.
    let far = Instant::now() + Duration::from_secs(3600);
    for (n, q) in qs.iter().enumerate() {
        let mut puts = Vec::new();
        for i in 0..EXTRA {
            let id = 10_000_000 + n as u64 * 100_000 + i;
            puts.push(
                m.journal_put(q, &id, far, &format!("{q}:{id}"))
                    .expect("journal_put"),
            );
        }
        for w in puts {
            w.await.expect("put acknowledged");
        }
    }
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
    if std::env::var_os(SOURCE).is_some() {
        return;
    }
    let Some((etcd, redis, opts)) = fleet() else {
        return;
    };
    let qs = queues(8);
    register(&opts, &qs).await;
    let mut child = TestChild::spawn(
        "source_child",
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
    wait_until(Duration::from_secs(30), "b owns every queue", || {
        b.owned().len() == qs.len()
    })
    .await;
    settle(&[&b], &qs).await;
    let mut ev = Vec::new();
    while let Ok(e) = events.try_recv() {
        ev.push(e);
    }
    eprintln!("b after its first acquisition: {ev:?}");
    // Every queue changed owner: everything not ended must come out.
    let initial: BTreeMap<String, u64> = BTreeMap::new();
    let (must, may) = expected(&fates, &initial, &[&b]);
    let mut ledger = Ledger::default();
    collect(
        &mut ledger,
        &[&b],
        &HashMap::new(),
        Duration::from_secs(20),
        |l| must.is_subset(&l.ids()),
    )
    .await;
    let mut may = may;
    for (n, q) in qs.iter().enumerate() {
        may.extend((0..EXTRA).map(|i| (q.clone(), 10_000_000 + n as u64 * 100_000 + i)));
    }
    check(&ledger, &fates, &must, &may);
    for (n, q) in qs.iter().enumerate() {
        let held: BTreeSet<u64> = b
            .scheduler()
            .queue_members(q)
            .into_iter()
            .map(|m| m.id)
            .collect();
        let missing = (0..EXTRA)
            .map(|i| 10_000_000 + n as u64 * 100_000 + i)
            .filter(|id| !held.contains(id))
            .count();
        assert_eq!(missing, 0, "{q}: journal-only timers b does not hold");
    }
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
    let Some((_etcd, _redis, opts)) = fleet() else {
        return;
    };
    let qs = queues(6);
    register(&opts, &qs).await;
    let a = join_journaling(&opts, "a", true).await;
    wait_until(Duration::from_secs(30), "a owns every queue", || {
        a.owned().len() == qs.len()
    })
    .await;
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
    collect(
        &mut ledger,
        &[&b],
        &intended,
        Duration::from_secs(10),
        |l| l.dispatches.len() >= moved.len(),
    )
    .await;
    let mut ended = BTreeSet::new();
    for (_, q, id, _) in ledger.dispatches.clone() {
        b.journal_end(&q, &id)
            .expect("journal_end")
            .await
            .expect("end acknowledged");
        ended.insert((q, id));
    }
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
    let seen = ledger.dispatches.len();
    b.leave().await.expect("leave");
    settle(&[&a], &qs).await;
    collect(
        &mut ledger,
        &[&a],
        &intended,
        Duration::from_secs(3),
        |_| false,
    )
    .await;
    let again: Vec<_> = ledger.dispatches[seen..]
        .iter()
        .filter(|(_, q, id, _)| ended.contains(&(q.clone(), *id)))
        .collect();
    assert!(
        again.is_empty(),
        "handed out again after b's acknowledged end, once the queue came back: {again:?} \
         (a's late schedules (queue, id, accepted): {late:?}; tokens before: {initial:?}, \
         after: {:?})",
        a.owned()
    );
}

/// `a` holds one handed-out timer X of each of 8 queues (journaled due at once) and 5 more
/// due in an hour. A child member joins; as each queue freezes for its offer, `a` retries X
/// an hour later (forwarded: the offer carries the later deadline). The child is SIGKILLed
/// at its first acquisition (other offers sealed, claimed, loading); only then does `a`'s put
/// of each X's later deadline go out (acknowledged where `a` still held the token, refused
/// where the child had claimed). `a`, alone again, adopts what the child took (journal and
/// leftover offer): nothing may come out within 3 s, every deadline being an hour away.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn later_deadlines_in_offers_hold_when_the_joining_member_dies() {
    if std::env::var_os(JOINER).is_some() {
        return;
    }
    let Some((etcd, redis, opts)) = fleet() else {
        return;
    };
    let qs = queues(8);
    register(&opts, &qs).await;
    let a = join_journaling(&opts, "a", true).await;
    wait_until(Duration::from_secs(30), "a owns every queue", || {
        a.owned().len() == qs.len()
    })
    .await;
    let t0 = Instant::now();
    let later = t0 + Duration::from_secs(3600);
    let mut intended = HashMap::new();
    for (n, q) in qs.iter().enumerate() {
        for i in 0..6u64 {
            let id = n as u64 * 100 + i;
            let at = if i == 0 { t0 } else { later };
            let v = format!("{q}:{id}");
            a.scheduler()
                .schedule(q.clone(), id, at, v.clone())
                .expect("schedule");
            a.journal_put(q, &id, at, &v)
                .expect("journal_put")
                .await
                .expect("put acknowledged");
            intended.insert(id, later);
        }
    }
    let mut held = Vec::new();
    let until = Instant::now() + Duration::from_secs(10);
    while held.len() < qs.len() && Instant::now() < until {
        held.extend(a.pop_due(Instant::now(), 100));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(held.len(), qs.len());
    let mut a_events = a.events();
    let mut child = TestChild::spawn(
        "joiner_child",
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
    wait_until(Duration::from_secs(30), "a owns every queue again", || {
        a.owned().len() == qs.len()
    })
    .await;
    settle(&[&a], &qs).await;
    let mut events = Vec::new();
    while let Ok(e) = a_events.try_recv() {
        events.push(e);
    }
    let mut ledger = Ledger::default();
    collect(
        &mut ledger,
        &[&a],
        &intended,
        Duration::from_secs(3),
        |_| false,
    )
    .await;
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
    let Some((_etcd, redis, opts)) = fleet() else {
        return;
    };
    let qs = queues(4);
    register(&opts, &qs).await;
    let a = join_journaling(&opts, "a", true).await;
    wait_until(Duration::from_secs(30), "a owns every queue", || {
        a.owned().len() == qs.len()
    })
    .await;
    let (fates, intended) = seed(&a, &qs, 30, Duration::from_secs(2)).await;
    let initial: BTreeMap<String, u64> = a.owned().into_iter().collect();
    let p = tickwheel_redis::Protocol::connect(
        &redis.url(),
        tickwheel_redis::Member::new_boot("writer"),
        tickwheel_redis::Options::default(),
    )
    .await
    .expect("connect");
    let j = tickwheel_redis::journal::Journal::start(
        p,
        tickwheel_redis::journal::JournalOptions::default(),
    )
    .expect("journal");
    let far_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_micros() as u64
        + 3_600_000_000;
    j.write(
        b"q0",
        initial["q0"],
        vec![tickwheel_redis::journal::Op::Put {
            // MessagePack u32 999 999.
            id: vec![0xce, 0x00, 0x0f, 0x42, 0x3f],
            deadline_us: far_us,
            // 0xc1: never used in MessagePack.
            value: vec![0xc1],
        }],
    )
    .await
    .expect("poison record written under a's token");
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
    let mut events = Vec::new();
    while let Ok(e) = a_events.try_recv() {
        events.push(("a", e));
    }
    while let Ok(e) = b_events.try_recv() {
        events.push(("b", e));
    }
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
    let poison = vec![0xce, 0x00, 0x0f, 0x42, 0x3f];
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
