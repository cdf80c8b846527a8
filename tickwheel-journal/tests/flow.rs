//! A queue's flow control (hold, concurrency and rate limits) survives a close and re-open,
//! against the real engines: a held queue hands out nothing after a restart until it is
//! released, and a lifted hold or limit stays lifted.

use std::time::{Duration, Instant};

use tickwheel::sync::RateLimit;

mod support;

use support::{J, each_engine, open};

fn q(name: &str) -> String {
    name.to_string()
}

/// Ids handed out by one `pop_due` at `now`, each finished.
fn pop_ids(j: &J, now: Instant) -> Vec<u64> {
    let mut ids: Vec<u64> = j
        .pop_due(now, 100)
        .expect("pop")
        .map(|due| {
            let id = *due.id();
            due.done().expect("done");
            id
        })
        .collect();
    ids.sort_unstable();
    ids
}

#[test]
fn a_held_queue_is_held_after_a_restart() {
    each_engine(|engine, dir| {
        let t0 = Instant::now();
        {
            let j = open(dir, engine);
            assert!(j.hold_queue(&q("held")).expect("hold"));
            for id in 0..3 {
                j.schedule(q("held"), id, t0, format!("h{id}"))
                    .expect("journal")
                    .expect("schedule");
            }
            j.schedule(q("open"), 10, t0, "o".into())
                .expect("journal")
                .expect("schedule");
            j.close().expect("close");
        }
        let j = open(dir, engine);
        assert!(j.scheduler().is_held(&q("held")), "{engine:?}: hold lost");
        assert_eq!(pop_ids(&j, Instant::now()), [10], "{engine:?}");
        assert_eq!(j.scheduler().queue_counts(&q("held")).parked, 3);
        assert_eq!(j.release_queue(&q("held")).expect("release"), 3);
        assert_eq!(pop_ids(&j, Instant::now()), [0, 1, 2], "{engine:?}");
        drop(j);
        // The release was recorded too.
        let j = open(dir, engine);
        assert!(
            !j.scheduler().is_held(&q("held")),
            "{engine:?}: release lost"
        );
    });
}

#[test]
fn limits_survive_a_restart_and_a_lifted_limit_stays_lifted() {
    each_engine(|engine, dir| {
        {
            let j = open(dir, engine);
            j.set_concurrency(&q("a"), Some(2)).expect("concurrency");
            j.set_rate(&q("a"), Some(RateLimit::per_second(4).with_burst(3)))
                .expect("rate");
            j.set_concurrency(&q("b"), Some(5)).expect("concurrency");
            j.set_rate(&q("c"), Some(RateLimit::per_second(1)))
                .expect("rate");
            j.hold_queue(&q("c")).expect("hold");
        }
        {
            let j = open(dir, engine);
            let s = j.scheduler();
            assert_eq!(s.concurrency(&q("a")), Some(2), "{engine:?}");
            assert_eq!(s.rate(&q("a")), Some((Duration::from_millis(250), 3)));
            assert_eq!(s.concurrency(&q("b")), Some(5));
            assert_eq!(s.rate(&q("b")), None);
            assert_eq!(s.rate(&q("c")), Some((Duration::from_secs(1), 1)));
            assert!(s.is_held(&q("c")) && !s.is_held(&q("a")));
            j.set_concurrency(&q("a"), None).expect("lift");
            j.set_rate(&q("a"), None).expect("lift");
            j.release_queue(&q("c")).expect("release");
        }
        let j = open(dir, engine);
        let s = j.scheduler();
        assert_eq!(
            s.concurrency(&q("a")),
            None,
            "{engine:?}: lifted limit back"
        );
        assert_eq!(s.rate(&q("a")), None, "{engine:?}");
        assert_eq!(s.concurrency(&q("b")), Some(5), "{engine:?}");
        assert!(!s.is_held(&q("c")), "{engine:?}");
        assert_eq!(s.rate(&q("c")), Some((Duration::from_secs(1), 1)));
    });
}

#[test]
fn a_concurrency_limit_holds_from_the_first_pop_after_a_restart() {
    each_engine(|engine, dir| {
        let t0 = Instant::now();
        {
            let j = open(dir, engine);
            j.set_concurrency(&q("a"), Some(1)).expect("concurrency");
            for id in 0..4 {
                j.schedule(q("a"), id, t0, String::new())
                    .expect("journal")
                    .expect("schedule");
            }
        }
        let j = open(dir, engine);
        let first: Vec<_> = j.pop_due(Instant::now(), 100).expect("pop").collect();
        assert_eq!(
            first.len(),
            1,
            "{engine:?}: the limit of one was not applied"
        );
    });
}
