//! SIGKILL while a child changes queues' flow control: after recovery, each queue's
//! policy is the last acknowledged one, or the one whose change was in progress at the
//! kill; a held queue hands out none of its timers from the first pop.
//!
//! The test binary runs itself as the child (`flow_child`, which does nothing unless
//! `TICKWHEEL_FLOW_KILL_CHILD` is set), as `kill.rs` does. The child prints `B q h c r b`
//! before a change (the policy it is about to make: held 0/1, concurrency or `-`, rate
//! interval ns and burst or `-`) and `A` once the change returned (durable).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use tickwheel::sync::RateLimit;
use tickwheel_journal::{Durable, Engine, Options};

mod support;

type J = Durable<String, u64, u64>;

const CHILD: &str = "TICKWHEEL_FLOW_KILL_CHILD";
const QUEUES: [&str; 3] = ["", "q1", "☃"];

/// (held, concurrency, (interval ns, burst)).
type Policy = (bool, Option<usize>, Option<(u128, u64)>);

fn policy_of(j: &J, q: &str) -> Policy {
    let s = j.scheduler();
    (
        s.is_held(q),
        s.concurrency(q),
        s.rate(q).map(|(d, b)| (d.as_nanos(), b)),
    )
}

fn show(p: &Policy) -> String {
    let c = p.1.map_or("-".into(), |c| c.to_string());
    let r = p.2.map_or("- -".into(), |(i, b)| format!("{i} {b}"));
    format!("{} {c} {r}", u8::from(p.0))
}

fn engine_named(name: &str) -> Engine {
    match name {
        #[cfg(feature = "fjall")]
        "fjall" => Engine::Fjall,
        _ => Engine::Redb,
    }
}

/// The engine of a round: redb, and fjall every other round where it is built.
fn engine_of(round: u64) -> &'static str {
    if cfg!(feature = "fjall") && round % 4 >= 2 {
        "fjall"
    } else {
        "redb"
    }
}

#[test]
fn flow_child() {
    let Some(run) = support::child_run(CHILD) else {
        return;
    };
    let options = Options::new().durability(run.durability);
    let options = options.engine(engine_named(&run.rest[0]));
    let j: J = Durable::open(&run.dir, options).expect("open");
    println!("OPEN");
    let mut rng = rand::rngs::StdRng::seed_from_u64(run.seed);
    let mut next_id = run.seed << 20;
    loop {
        let qi = rng.gen_range(0..QUEUES.len());
        let q: String = QUEUES[qi].into();
        let mut p = policy_of(&j, &q);
        let op = rng.gen_range(0..5);
        match op {
            0 => p.0 = true,
            1 => p.0 = false,
            2 => p.1 = rng.gen_bool(0.7).then(|| rng.gen_range(0..5)),
            3 => {
                p.2 = rng.gen_bool(0.7).then(|| {
                    let n = rng.gen_range(1..1000u32);
                    let b = rng.gen_range(1..5u32);
                    let l = RateLimit::per_second(n).with_burst(b);
                    (l.interval().as_nanos(), u64::from(b))
                })
            }
            _ => {}
        }
        if op == 4 {
            next_id += 1;
            j.schedule(q, next_id, Instant::now(), next_id)
                .expect("journal")
                .expect("new");
            continue;
        }
        println!("B {qi} {}", show(&p));
        match op {
            0 => {
                j.hold_queue(&q).expect("hold");
            }
            1 => {
                j.release_queue(&q).expect("release");
            }
            2 => j.set_concurrency(&q, p.1).expect("concurrency"),
            _ => {
                let limit = p.2.map(|(i, b)| RateLimit {
                    count: 1,
                    per: Duration::from_nanos(i as u64),
                    burst: b as u32,
                });
                j.set_rate(&q, limit).expect("rate");
            }
        }
        assert_eq!(show(&policy_of(&j, &q)), show(&p), "the change as planned");
        println!("A");
    }
}

#[test]
fn sigkill_keeps_the_last_acknowledged_policy() {
    let dirs = [
        tempfile::tempdir().expect("temp dir"),
        tempfile::tempdir().expect("temp dir"),
    ];
    let mut rng = rand::rngs::StdRng::seed_from_u64(0xf10);
    // Per queue: the last acknowledged policy, as shown.
    let mut acked: HashMap<(usize, usize), String> = HashMap::new();
    let mut changes = 0usize;
    for round in 0..8u64 {
        // One directory per engine, and one ledger per directory.
        let d = usize::from(engine_of(round) == "fjall");
        let dir = &dirs[d];
        let seed = u64::from(rng.r#gen::<u32>());
        let spec = support::child_spec(dir.path(), seed, round, &[engine_of(round)]);
        let run_for = Duration::from_millis(rng.gen_range(5..120));
        let lines = support::run_and_kill("flow_child", CHILD, spec, run_for);
        // The change in progress at the kill, if any.
        let mut pending: Option<(usize, String)> = None;
        for line in &lines {
            if let Some(rest) = line.strip_prefix("B ") {
                let (qi, shown) = rest.split_once(' ').expect("B qi policy");
                pending = Some((qi.parse().expect("qi"), shown.to_string()));
            } else if line == "A" {
                let (qi, shown) = pending.take().expect("A after B");
                acked.insert((d, qi), shown);
                changes += 1;
            }
        }
        let options = Options::new().engine(engine_named(engine_of(round)));
        let j: J = Durable::open(dir.path(), options).expect("recover");
        for (qi, q) in QUEUES.iter().enumerate() {
            let now = show(&policy_of(&j, q));
            let last = acked
                .get(&(d, qi))
                .cloned()
                .unwrap_or_else(|| show(&(false, None, None)));
            let in_progress = pending.as_ref().filter(|(p, _)| *p == qi).map(|(_, s)| s);
            assert!(
                now == last || Some(&now) == in_progress,
                "round {round}, queue {q:?}: recovered {now}, acknowledged {last}, in progress {in_progress:?}"
            );
            // Whatever was recovered is what the child's next round starts from.
            acked.insert((d, qi), now.clone());
            if j.scheduler().is_held(*q) {
                let held_out = j
                    .pop_due(Instant::now(), usize::MAX)
                    .expect("pop")
                    .filter(|d| d.queue() == *q)
                    .count();
                assert_eq!(held_out, 0, "round {round}: held {q:?} handed out");
            }
        }
        j.close().expect("close");
    }
    eprintln!("{changes} acknowledged changes checked");
    assert!(changes > 8, "the child did next to nothing");
}
