//! What every move test shares: the ledger of hand-outs, the seeded timers and their
//! fates, the checks at the end.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use crate::support::checks::assert_none;
pub(crate) use crate::support::handouts::Collect;
use crate::support::*;
use tickwheel::sync::Cancel;
use tickwheel_fleet::{FleetEvent, FleetOptions};
use tickwheel_testkit::etcd::EtcdServer;
use tickwheel_testkit::redis::RedisServer;

/// How far before its deadline a hand-out still counts as on time: the journal keeps
/// deadlines in microseconds of Redis `TIME`.
pub(crate) const SLACK: Duration = Duration::from_millis(1);

/// Every hand-out seen, by whom and under which token, and those that came early.
#[derive(Default)]
pub(crate) struct Ledger {
    /// (member, queue, id, token) in the order seen.
    pub(crate) dispatches: Vec<(String, String, u64, u64)>,
    /// (member, queue, id, token, how early).
    pub(crate) early: Vec<(String, String, u64, u64, Duration)>,
}

impl Ledger {
    /// Records one hand-out that `pop_due(now)` returned.
    pub(crate) fn record(
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
    pub(crate) fn drain(&mut self, members: &[&FleetMember], intended: &HashMap<u64, Instant>) {
        for m in members {
            let now = Instant::now();
            for d in m.pop_due(now, 10_000) {
                self.record(m.name(), now, &d, intended);
            }
        }
    }

    pub(crate) fn ids(&self) -> BTreeSet<(String, u64)> {
        crate::support::handouts::handed_out_ids(&self.dispatches)
    }

    /// `(id, token)` pairs handed out more than once.
    pub(crate) fn twice_under_one_token(&self) -> Vec<(String, u64, u64, usize)> {
        crate::support::handouts::twice_under_one_token(&self.dispatches)
    }
}

pub(crate) fn token_of(m: &FleetMember, q: &str) -> Option<u64> {
    m.owned().iter().find(|(o, _)| o == q).map(|(_, t)| *t)
}

/// The owner of `q` among `members` and its token.
pub(crate) fn owner_of<'a>(members: &[&'a FleetMember], q: &str) -> Option<(&'a FleetMember, u64)> {
    members.iter().find_map(|m| token_of(m, q).map(|t| (*m, t)))
}

/// Waits (at most 60 s) until every queue of `qs` has one owner among `members` and who owns
/// what, with which token, stayed the same for 2 s: the placement is done moving.
pub(crate) async fn settle(members: &[&FleetMember], qs: &[String]) {
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
pub(crate) type Keys = BTreeSet<(String, u64)>;

/// What `a` did with a timer before the move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Scheduled and journaled: in the offer and in the journal.
    Held,
    /// Journaled, then taken out of the scheduler without an end: only in the journal.
    Orphaned,
    /// Journaled, taken out, its end journaled and acknowledged: nowhere.
    Ended,
}

pub(crate) fn fate(i: u64) -> Fate {
    match i % 3 {
        0 => Fate::Held,
        1 => Fate::Orphaned,
        _ => Fate::Ended,
    }
}

/// Registers `n` queues (`queues(n)`) and joins `a` with the journal on; returns once `a`
/// owns every one of them (at most 30 s).
pub(crate) async fn owning_all(opts: &FleetOptions, n: usize) -> (Vec<String>, FleetMember) {
    let qs = queues(n);
    register(opts, &qs).await;
    let a = join_journaling(opts, "a", true).await;
    wait_until(Duration::from_secs(30), "a owns every queue", || {
        a.owned().len() == qs.len()
    })
    .await;
    (qs, a)
}

/// `a` schedules timer `id` of queue `q` (value `"<queue>:<id>"`) due at `at`, then journals
/// it and waits for the put's acknowledgement. Panics if either is refused.
pub(crate) async fn schedule_and_put(a: &FleetMember, q: &str, id: u64, at: Instant) {
    let (q, v) = (q.to_owned(), format!("{q}:{id}"));
    a.scheduler()
        .schedule(q.clone(), id, at, v.clone())
        .expect("schedule");
    a.journal_put(&q, &id, at, &v)
        .expect("journal_put")
        .await
        .expect("put acknowledged");
}

/// `a` schedules `per` timers in each of `qs` (ids `n * 100 + i`, value `"<queue>:<id>"`, due
/// at `at(i)`) and journals each, one acknowledged put after the other. The deadlines meant:
/// `meant` for every id if given, else `at(i)`.
pub(crate) async fn put_each(
    a: &FleetMember,
    qs: &[String],
    per: u64,
    at: impl Fn(u64) -> Instant,
    meant: Option<Instant>,
) -> HashMap<u64, Instant> {
    let mut intended = HashMap::new();
    for (n, q) in qs.iter().enumerate() {
        for i in 0..per {
            let id = n as u64 * 100 + i;
            let at = at(i);
            schedule_and_put(a, q, id, at).await;
            intended.insert(id, meant.unwrap_or(at));
        }
    }
    intended
}

/// Pops `a` every 5 ms (at most 10 s) until it handed out `n` timers, and keeps them
/// (undelivered); each recorded in `ledger` if given. Panics unless exactly `n` came out.
pub(crate) async fn hold(
    a: &FleetMember,
    n: usize,
    mut ledger: Option<(&mut Ledger, &HashMap<u64, Instant>)>,
) -> Vec<tickwheel_fleet::FencedDue<String, u64, String>> {
    let mut held = Vec::new();
    let until = Instant::now() + Duration::from_secs(10);
    while held.len() < n && Instant::now() < until {
        let now = Instant::now();
        for d in a.pop_due(now, 100) {
            if let Some((ledger, intended)) = ledger.as_mut() {
                ledger.record("a", now, &d, intended);
            }
            held.push(d);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(held.len(), n);
    held
}

/// What [`holding_one_each`] leaves.
pub(crate) struct OneHeld {
    /// The fleet's etcd and redis-server, stopped when this is dropped.
    pub(crate) _servers: (EtcdServer, RedisServer),
    pub(crate) qs: Vec<String>,
    pub(crate) a: FleetMember,
    /// The member that joined once `a` held its timers.
    pub(crate) b: FleetMember,
    pub(crate) intended: HashMap<u64, Instant>,
    /// The tokens `a` held its queues under (queue → token) once the timers were put.
    pub(crate) initial: BTreeMap<String, u64>,
    /// The hand-outs of the held timers, by `a`.
    pub(crate) ledger: Ledger,
    pub(crate) held: Vec<tickwheel_fleet::FencedDue<String, u64, String>>,
}

/// On a new [`fleet`], `a` owns `n` queues ([`owning_all`]) with `per` journaled timers each
/// ([`put_each`]): the first due now, the others in an hour; `a` hands out the first of each
/// and holds it; then `b` joins, journaling. `None` where the servers are missing
/// ([`fleet`]).
pub(crate) async fn holding_one_each(n: usize, per: u64) -> Option<OneHeld> {
    let (etcd, redis, opts) = fleet()?;
    let (qs, a) = owning_all(&opts, n).await;
    let t0 = Instant::now();
    let intended = put_each(&a, &qs, per, first_due_at(1, t0), None).await;
    let initial: BTreeMap<String, u64> = a.owned().into_iter().collect();
    let mut ledger = Ledger::default();
    let held = hold(&a, qs.len(), Some((&mut ledger, &intended))).await;
    let b = join_journaling(&opts, "b", true).await;
    Some(OneHeld {
        _servers: (etcd, redis),
        qs,
        a,
        b,
        intended,
        initial,
        ledger,
        held,
    })
}

/// Waits (at most 30 s, failing as `what`) until `m` owns every queue of `qs`, then until
/// the fleet settled ([`settle`]); returns the events `rx` received meanwhile.
pub(crate) async fn alone_with_all(
    m: &FleetMember,
    qs: &[String],
    what: &str,
    rx: &mut tokio::sync::broadcast::Receiver<FleetEvent<String>>,
) -> Vec<FleetEvent<String>> {
    wait_until(Duration::from_secs(30), what, || {
        m.owned().len() == qs.len()
    })
    .await;
    settle(&[m], qs).await;
    let mut events = Vec::new();
    while let Ok(e) = rx.try_recv() {
        events.push(e);
    }
    events
}

/// The events `a_rx` and then `b_rx` received so far, each beside its member's name.
pub(crate) fn events_of_both(
    a_rx: &mut tokio::sync::broadcast::Receiver<FleetEvent<String>>,
    b_rx: &mut tokio::sync::broadcast::Receiver<FleetEvent<String>>,
) -> Vec<(&'static str, FleetEvent<String>)> {
    let mut events = Vec::new();
    while let Ok(e) = a_rx.try_recv() {
        events.push(("a", e));
    }
    while let Ok(e) = b_rx.try_recv() {
        events.push(("b", e));
    }
    events
}

/// `a` schedules and journals `per` timers in each of `qs` (ids `n * 1000 + i`), due
/// `first` from now and 10 ms apart, then orphans and ends them by [`fate`]. The fates and
/// the deadlines meant.
pub(crate) async fn seed(
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

/// `m` journals `per` more timers in each queue of `qs` (in the `n`-th queue ids
/// `10 000 000 + n * 100 000 + i` for `i` in `0..per`, due in an hour, value
/// `"<queue>:<id>"`), not scheduled, and waits until each put is acknowledged: long journals,
/// so that each move's load takes a while. The ids journaled, by queue.
pub(crate) async fn journal_only(
    m: &FleetMember,
    qs: &[String],
    per: u64,
) -> BTreeMap<String, Vec<u64>> {
    let far = Instant::now() + Duration::from_secs(3600);
    let mut journaled: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (n, q) in qs.iter().enumerate() {
        let mut puts = Vec::new();
        for i in 0..per {
            let id = 10_000_000 + n as u64 * 100_000 + i;
            puts.push(
                m.journal_put(q, &id, far, &format!("{q}:{id}"))
                    .expect("journal_put"),
            );
            journaled.entry(q.clone()).or_default().push(id);
        }
        for w in puts {
            w.await.expect("put acknowledged");
        }
    }
    journaled
}

/// [`seed`], then the tokens `a` holds its queues under (queue → token) before any move.
pub(crate) async fn seed_owned(
    a: &FleetMember,
    qs: &[String],
    per: u64,
    first: Duration,
) -> (
    BTreeMap<(String, u64), Fate>,
    HashMap<u64, Instant>,
    BTreeMap<String, u64>,
) {
    let (fates, intended) = seed(a, qs, per, first).await;
    let initial: BTreeMap<String, u64> = a.owned().into_iter().collect();
    (fates, intended, initial)
}

/// Polls `members` every 2 ms; the last round 200 ms after.
impl Collect for Ledger {
    type Intended = HashMap<u64, Instant>;
    const PACE: (Duration, Duration) = (Duration::from_millis(2), Duration::from_millis(200));

    async fn round(&mut self, members: &[&FleetMember], intended: &Self::Intended) {
        self.drain(members, intended);
    }

    fn handed_out(&self) -> Keys {
        self.ids()
    }
}

impl Ledger {
    /// [`Collect::collect`] for all of `limit`: what comes out in that time.
    pub(crate) async fn watch(
        &mut self,
        members: &[&FleetMember],
        intended: &HashMap<u64, Instant>,
        limit: Duration,
    ) {
        self.collect(members, intended, limit, |_| false).await;
    }
}

/// `m` journals the end of every timer the ledger saw it hand out; each end must be
/// acknowledged. The (queue, id) ended.
pub(crate) async fn end_all_handed_out_by(m: &FleetMember, ledger: &Ledger) -> Keys {
    let mut ended = BTreeSet::new();
    for (by, q, id, _) in &ledger.dispatches {
        if by.as_str() == m.name() {
            m.journal_end(q, id)
                .expect("journal_end")
                .await
                .expect("end acknowledged");
            ended.insert((q.clone(), *id));
        }
    }
    ended
}

/// `b` leaves; once the fleet settled with `a` alone ([`settle`]), `ledger` watches `a` for
/// 3 s. The hand-outs, from the leave on, of a timer in `ended` (there should be none).
pub(crate) async fn ended_handed_out_after_leave(
    ledger: &mut Ledger,
    (a, b): (&FleetMember, FleetMember),
    qs: &[String],
    intended: &HashMap<u64, Instant>,
    ended: &Keys,
) -> Vec<(String, String, u64, u64)> {
    let seen = ledger.dispatches.len();
    b.leave().await.expect("leave");
    settle(&[a], qs).await;
    ledger.watch(&[a], intended, Duration::from_secs(3)).await;
    ledger.dispatches[seen..]
        .iter()
        .filter(|(_, q, id, _)| ended.contains(&(q.clone(), *id)))
        .cloned()
        .collect()
}

/// None handed out before its deadline, none twice under one token.
pub(crate) fn check_timely(ledger: &Ledger) {
    assert_none(&ledger.early, "hand-outs before their deadline");
    let twice = ledger.twice_under_one_token();
    assert!(twice.is_empty(), "twice under one token: {twice:?}");
}

/// The checks every move test ends with: none early, none twice under one token, no ended
/// timer handed out, every timer in `must` handed out, nothing outside `may`.
pub(crate) fn check(
    ledger: &Ledger,
    fates: &BTreeMap<(String, u64), Fate>,
    must: &BTreeSet<(String, u64)>,
    may: &BTreeSet<(String, u64)>,
) {
    check_timely(ledger);
    let got = ledger.ids();
    let ended: Vec<_> = got
        .iter()
        .filter(|k| fates.get(*k) == Some(&Fate::Ended))
        .collect();
    let what = "timers whose end was acknowledged before the move were handed out";
    assert_none(&ended, what);
    let missing: Vec<_> = must.difference(&got).collect();
    let what = format!(
        "of {} journaled, not ended timers never handed out",
        must.len()
    );
    assert_none(&missing, &what);
    let stray: Vec<_> = got.difference(may).collect();
    assert!(stray.is_empty(), "handed out, never scheduled: {stray:?}");
}

/// What must come out after the moves: every held timer, and the orphans of each queue whose
/// owner's token changed (its new owner, by handoff or adoption, loaded the journal). What
/// may: every timer not ended.
pub(crate) fn expected(
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
