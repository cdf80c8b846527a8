//! Recovery hooks that fail (an `Err`, a panic) for some of a dead member's queues while
//! the others are adopted beside them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tickwheel::sync::FrozenEntry;
use tickwheel_fleet::{FleetEvent, FleetOptions, RecoveryError};

use crate::common::*;
use crate::support::*;

/// A hook whose first call for each queue of `err` returns an `Err`, and for each of `panic`
/// panics, each after waiting until `open`; every other call finds nothing. Counts calls.
#[derive(Default)]
struct Faulty {
    err: BTreeSet<String>,
    panic: BTreeSet<String>,
    calls: Mutex<BTreeMap<String, usize>>,
    /// Failing calls waiting at the gate.
    waiting: AtomicUsize,
    open: AtomicBool,
}

impl Faulty {
    /// Joins `name` with a recovery hook that is [`Faulty::call`] on `self`.
    async fn join(self: &Arc<Self>, opts: &FleetOptions, name: &str) -> FleetMember {
        let f = Arc::clone(self);
        join_hooked(opts, name, move |q: String| {
            let f = Arc::clone(&f);
            async move { f.call(q).await }
        })
        .await
    }

    async fn call(&self, q: String) -> Result<Vec<FrozenEntry<u64, String>>, RecoveryError> {
        let n = {
            let mut c = self.calls.lock().expect("calls");
            let n = c.entry(q.clone()).or_default();
            *n += 1;
            *n
        };
        let fails = n == 1 && (self.err.contains(&q) || self.panic.contains(&q));
        if fails {
            self.waiting.fetch_add(1, Ordering::SeqCst);
            while !self.open.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            if self.panic.contains(&q) {
                panic!("the store of {q} is corrupt");
            }
            return Err(format!("the store of {q} is down").into());
        }
        Ok(Vec::new())
    }

    fn calls(&self, q: &str) -> usize {
        let c = self.calls.lock().expect("calls");
        c.get(q).copied().unwrap_or(0)
    }

    /// Asserts that the hook was called at least twice for each queue of `qs`: each was
    /// adopted again after its failed first adoption.
    fn adopted_again<'a>(&self, qs: impl IntoIterator<Item = &'a String>) {
        for q in qs {
            let n = self.calls(q);
            assert!(n >= 2, "{q} adopted again: {n} calls");
        }
    }
}

/// A dead member (dropped: its lease revoked) journaled 12 queues, q0 with 20 000 timers due
/// from 2 s on, the others 0 to 4. The survivor's hook fails the first adoption of q0 and q5
/// with an `Err` and of q9 with a panic, each only once the test opens a gate. While the three
/// wait at the gate (their journals loaded, their timers due): the other nine queues are
/// adopted and all their timers handed out, and nothing of the three is (their fence says
/// no token). Once the gate opens: the three fail, are adopted again, and every journaled,
/// not-ended timer is handed out exactly once, none early, none under the token of a failed
/// attempt (every hand-out's token is the one its queue's `Acquired` event announced).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failing_hooks_lose_nothing_and_leak_no_half_imported_timer() {
    let Some((_etcd, _redis, opts, qs, s)) = dead_fleet(
        &uneven(12, 20_000),
        (Duration::from_secs(2), Duration::from_secs(3)),
    )
    .await
    else {
        return;
    };
    let faulty = Arc::new(Faulty {
        err: ["q0", "q5"].map(String::from).into(),
        panic: ["q9"].map(String::from).into(),
        ..Faulty::default()
    });
    let bad: BTreeSet<String> = faulty.err.union(&faulty.panic).cloned().collect();
    let m = faulty.join(&opts, "s").await;
    let mut rx = m.events();
    let must = s.must();
    let good: BTreeSet<Key> = must
        .iter()
        .filter(|(q, _)| !bad.contains(q))
        .cloned()
        .collect();
    let mut ledger = Ledger::new(&s.ended);
    // The gate stays shut until the good queues are done and the bad ones all wait at it.
    let until = Instant::now() + Duration::from_secs(60);
    let mut leaked = Vec::new();
    loop {
        ledger.drain(&[&m], &s.intended).await;
        for q in &bad {
            if faulty.calls(q) == 1
                && let Some(t) = m.fence().token(q.as_bytes())
            {
                leaked.push((q.clone(), t, m.scheduler().queue_len(q)));
            }
        }
        let waiting = faulty.waiting.load(Ordering::SeqCst);
        if waiting == bad.len() && good.is_subset(&ledger.ids()) {
            break;
        }
        assert!(
            Instant::now() < until,
            "within 60 s: {waiting} of {} failing hooks reached, {} of {} other timers handed \
             out; owned: {:?}",
            bad.len(),
            good.intersection(&ledger.ids()).count(),
            good.len(),
            m.owned()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let early_bad: Vec<_> = ledger
        .dispatches
        .iter()
        .filter(|(_, q, _, _)| bad.contains(q))
        .take(5)
        .collect();
    let held_at_gate: Vec<_> = bad
        .iter()
        .map(|q| (q.clone(), m.scheduler().queue_len(q)))
        .collect();
    eprintln!("at the gate, the failing queues held (queue, timers): {held_at_gate:?}");
    assert!(
        leaked.is_empty(),
        "a failing adoption's queue had a token: {leaked:?}"
    );
    assert!(
        early_bad.is_empty(),
        "handed out while its adoption's hook had not returned: {early_bad:?}"
    );
    faulty.open.store(true, Ordering::SeqCst);
    ledger
        .collect_all(&[&m], &s.intended, &must, Duration::from_secs(60))
        .await;
    check_once(&ledger, &must, &s);
    faulty.adopted_again(&bad);
    let events = events_of(&mut rx);
    let mut announced: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    for e in events.iter().cloned() {
        if let FleetEvent::Acquired { queue, token, .. } = e {
            announced.entry(queue).or_default().insert(token);
        }
    }
    let unannounced: Vec<_> = ledger
        .dispatches
        .iter()
        .filter(|(_, q, _, t)| !announced.get(q).is_some_and(|a| a.contains(t)))
        .take(5)
        .collect();
    assert!(
        unannounced.is_empty(),
        "handed out under a token no Acquired event announced (a failed attempt's?): \
         {unannounced:?}; announced: {announced:?}"
    );
    assert!(exactly_one(&[&m], &qs), "owned: {:?}", m.owned());
    adopted_once_each(&events, &qs, &s);
}

/// A dead member (dropped) journaled 40 queues, q0 with 5 000 timers, the others 0 to 4,
/// all due at once. The survivor's hook fails the first adoption of every queue at once:
/// an `Err` for even queues, a panic for odd ones (up to 4 failing together, each releasing
/// its key while the others go on). Each queue is then adopted again: one `Acquired` each,
/// `recovered` its journaled, not-ended timers (nothing left over from the failed attempt
/// counted), and every such timer handed out exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_queue_failing_once_is_adopted_again_with_nothing_doubled() {
    let Some((_etcd, _redis, opts, qs, s)) = dead_fleet(&uneven(40, 5_000), AT_ONCE).await else {
        return;
    };
    let (even, odd): (Vec<_>, Vec<_>) = qs
        .iter()
        .cloned()
        .enumerate()
        .partition(|(n, _)| n % 2 == 0);
    let faulty = Arc::new(Faulty {
        err: even.into_iter().map(|(_, q)| q).collect(),
        panic: odd.into_iter().map(|(_, q)| q).collect(),
        open: AtomicBool::new(true),
        ..Faulty::default()
    });
    let m = faulty.join(&opts, "s").await;
    let mut rx = m.events();
    let (must, ledger) = collected(&[&m], &s, Duration::from_secs(90)).await;
    let events = events_of(&mut rx);
    check_once(&ledger, &must, &s);
    faulty.adopted_again(&qs);
    assert!(exactly_one(&[&m], &qs), "owned: {:?}", m.owned());
    adopted_once_each(&events, &qs, &s);
}

/// A dead member (dropped) journaled 8 queues of 20 timers, due at once. The survivor's hook
/// panics for q3's first adoption in the closure itself, before it makes its future (a hook
/// is any `Fn(Q) -> impl Future`; the docs promise a panic is logged, the queue released and
/// adopted again, and the others go on). Every queue must end owned, every journaled,
/// not-ended timer handed out exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hook_panicking_before_its_future_exists_loses_nothing() {
    let Some((_etcd, _redis, opts, qs, s)) = dead_fleet(&[20; 8], AT_ONCE).await else {
        return;
    };
    let calls = Arc::new(AtomicUsize::new(0));
    let hook = {
        let calls = Arc::clone(&calls);
        move |q: String| {
            if q == "q3" && calls.fetch_add(1, Ordering::SeqCst) == 0 {
                panic!("the store of q3 cannot even be opened");
            }
            async move { Ok::<Vec<FrozenEntry<u64, String>>, RecoveryError>(Vec::new()) }
        }
    };
    let m = join_hooked(&opts, "s", hook).await;
    let (must, ledger) = collected(&[&m], &s, Duration::from_secs(30)).await;
    eprintln!(
        "q3's hook called {} times; s owns {:?}",
        calls.load(Ordering::SeqCst),
        m.owned()
    );
    check_once(&ledger, &must, &s);
    assert!(exactly_one(&[&m], &qs), "owned: {:?}", m.owned());
}

/// Two survivors race for a dead member's 24 queues (q0 with 5 000 timers, the others 0 to
/// 4, due at once); `x`'s hook fails the first adoption of every queue (an `Err`), `y`'s
/// finds nothing. A queue `x` fails goes back and is adopted again, here or at `y`. Once each
/// queue has one owner: every journaled, not-ended timer handed out, none twice under one
/// token, none after its acknowledged end, none early.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_survivors_one_failing_every_first_adoption() {
    let Some((_etcd, _redis, opts, qs, s)) =
        dead_fleet(&uneven(24, 5_000), (Duration::ZERO, Duration::from_secs(2))).await
    else {
        return;
    };
    let faulty = Arc::new(Faulty {
        err: qs.iter().cloned().collect(),
        open: AtomicBool::new(true),
        ..Faulty::default()
    });
    let (x, y) = tokio::join!(faulty.join(&opts, "x"), join_journaling(&opts, "y", true));
    let (must, mut ledger) = collected(&[&x, &y], &s, Duration::from_secs(90)).await;
    wait_until(Duration::from_secs(30), "one owner each", || {
        exactly_one(&[&x, &y], &qs)
    })
    .await;
    ledger.drain(&[&x, &y], &s.intended).await;
    check(&ledger, &must, &may(&s));
}

/// A dead member (dropped) journaled 6 queues of 40 timers due 3 to 5 s later. The
/// survivor's hook returns a stale store: every journaled id of the queue (ended ones left
/// out) due 2 s *earlier* than the journal says, plus 5 timers of its own the journal never
/// held (ids 50 000 + i). The journal comes first and the import skips ids already in, so
/// no journaled timer may come out before its journaled deadline; the store's own timers
/// come out too; all exactly once, and `recovered` counts each id once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stale_store_returned_by_the_hook_does_not_fire_journaled_timers_early() {
    let Some((_etcd, _redis, opts, qs, mut s)) =
        dead_fleet(&[40; 6], (Duration::from_secs(3), Duration::from_secs(2))).await
    else {
        return;
    };
    let store: Arc<BTreeMap<String, Vec<FrozenEntry<u64, String>>>> = Arc::new(
        qs.iter()
            .enumerate()
            .map(|(n, q)| {
                let mut v: Vec<_> = s
                    .intended
                    .iter()
                    .filter(|(k, _)| &k.0 == q && !s.ended.contains(*k))
                    .map(|((q, id), at)| FrozenEntry {
                        id: *id,
                        at: *at - Duration::from_secs(2),
                        value: format!("{q}:{id}"),
                    })
                    .collect();
                for i in 0..5 {
                    let id = id_of(n, 50_000 + i);
                    let at = Instant::now() + Duration::from_secs(1);
                    v.push(FrozenEntry {
                        id,
                        at,
                        value: format!("{q}:{id}"),
                    });
                }
                (q.clone(), v)
            })
            .collect(),
    );
    for (q, v) in store.iter() {
        for e in v.iter().filter(|e| e.id % 100_000 >= 50_000) {
            s.intended.insert((q.clone(), e.id), e.at);
        }
    }
    let hook = {
        let store = Arc::clone(&store);
        move |q: String| {
            let v = store.get(&q).cloned().unwrap_or_default();
            async move { Ok::<_, RecoveryError>(v) }
        }
    };
    let m = join_hooked(&opts, "s", hook).await;
    let mut rx = m.events();
    let (must, ledger) = collected(&[&m], &s, Duration::from_secs(30)).await;
    check_once(&ledger, &must, &s);
    adopted_once_each(&events_of(&mut rx), &qs, &s);
}

/// A dead member (dropped) journaled 12 queues of 5 timers. The survivor's hook hangs on
/// its first call for q0 to q3 (a store that does not answer) until the test lets go. The
/// other 8 queues are not those adoptions: within 30 s they must be owned and their timers
/// handed out while the four hang (the docs bound a queue's takeover by the lease, the grace
/// and *its own* adoption's time).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_hanging_hooks_do_not_hold_the_other_queues_unowned() {
    let Some((_etcd, _redis, opts, _qs, s)) = dead_fleet(&[5; 12], AT_ONCE).await else {
        return;
    };
    let faulty = Arc::new(Faulty {
        err: ["q0", "q1", "q2", "q3"].map(String::from).into(),
        ..Faulty::default()
    });
    let m = faulty.join(&opts, "s").await;
    let others: BTreeSet<Key> = s
        .must()
        .into_iter()
        .filter(|(q, _)| !faulty.err.contains(q))
        .collect();
    let mut ledger = Ledger::new(&s.ended);
    ledger
        .collect(&[&m], &s.intended, Duration::from_secs(30), |l| {
            others.is_subset(&l.ids())
        })
        .await;
    let hanging = faulty.waiting.load(Ordering::SeqCst);
    let owned = m.owned();
    faulty.open.store(true, Ordering::SeqCst);
    let got = ledger.ids();
    let missing = others.difference(&got).count();
    assert!(
        missing == 0,
        "with {hanging} hooks hanging, {missing} of {} timers of the other queues not handed \
         out within 30 s; owned then: {owned:?}",
        others.len()
    );
    let must = s.must();
    ledger
        .collect_all(&[&m], &s.intended, &must, Duration::from_secs(30))
        .await;
    check(&ledger, &must, &may(&s));
}
