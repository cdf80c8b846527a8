//! SIGKILL at random points: no acknowledged timer is lost, none acknowledged as ended
//! comes back, attempt counts never go down and no `(id, attempt)` is handed out twice.
//!
//! The test binary runs itself as the child (`child_process`, which does nothing unless
//! `TICKWHEEL_KILL_CHILD` is set). The child opens the journal, then schedules, cancels and
//! hands out timers at random, printing each acknowledged step as one line:
//!
//! - `S id` — schedule returned (durable); `H id attempt` — handed out (durable);
//! - `E id` — about to end it (cancel, done or drop: it may be gone after a crash);
//! - `C id` / `D id` — cancel / done returned (durable: it must stay gone).
//!
//! The parent kills it after a random delay, re-opens the journal and checks the lines
//! against what is on disk. `TICKWHEEL_KILL_ROUNDS` sets the rounds (default 20).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use tickwheel::sync::Cancel;
use tickwheel_journal::{Durable, Options};

mod support;

type J = Durable<u8, u64, u64>;

const CHILD: &str = "TICKWHEEL_KILL_CHILD";

#[test]
fn child_process() {
    let Some(run) = support::child_run(CHILD) else {
        return;
    };
    let base = run.rest[0].parse::<u64>().expect("base");
    let j: J = Durable::open(&run.dir, Options::new().durability(run.durability)).expect("open");
    println!("OPEN");
    let mut rng = rand::rngs::StdRng::seed_from_u64(run.seed);
    let mut mine: Vec<u64> = Vec::new();
    let mut next = base;
    loop {
        let now = Instant::now();
        match rng.gen_range(0..10) {
            0..=4 => {
                let at = if rng.gen_bool(0.7) {
                    now + Duration::from_millis(rng.gen_range(0..5))
                } else {
                    now + Duration::from_secs(3600)
                };
                let id = next;
                next += 1;
                j.schedule(rng.gen_range(0..4), id, at, id)
                    .expect("journal")
                    .expect("a new id");
                println!("S {id}");
                mine.push(id);
            }
            5 if !mine.is_empty() => {
                let id = mine.swap_remove(rng.gen_range(0..mine.len()));
                println!("E {id}");
                if let Cancel::Cancelled(v) = j.cancel(&id).expect("journal") {
                    assert_eq!(v, id);
                    println!("C {id}");
                }
            }
            _ => {
                for due in j.pop_due(now, 8).expect("journal") {
                    let id = *due.id();
                    println!("H {id} {}", due.attempt());
                    match rng.gen_range(0..4) {
                        0 | 1 => {
                            println!("E {id}");
                            due.done().expect("journal");
                            println!("D {id}");
                        }
                        2 => {
                            due.retry_at(now + Duration::from_millis(2))
                                .expect("journal")
                                .expect("alive");
                        }
                        _ => {
                            println!("E {id}");
                            drop(due);
                        }
                    }
                }
            }
        }
    }
}

#[derive(Default)]
struct Ledger {
    /// Acknowledged as scheduled.
    scheduled: HashSet<u64>,
    /// An end was attempted (may or may not have reached the disk).
    ending: HashSet<u64>,
    /// Acknowledged as ended.
    ended: HashSet<u64>,
    /// Highest attempt handed out per id.
    attempts: HashMap<u64, u32>,
    /// Every (id, attempt) handed out.
    handed: HashSet<(u64, u32)>,
}

impl Ledger {
    fn line(&mut self, line: &str) {
        let f: Vec<&str> = line.split(' ').collect();
        let id = || f[1].parse::<u64>().expect("an id");
        match f[0] {
            "S" => {
                self.scheduled.insert(id());
            }
            "E" => {
                self.ending.insert(id());
            }
            "C" | "D" => {
                self.ended.insert(id());
            }
            "H" => {
                let attempt: u32 = f[2].parse().expect("an attempt");
                assert!(
                    self.handed.insert((id(), attempt)),
                    "({}, {attempt}) handed out twice",
                    id()
                );
                let max = self.attempts.entry(id()).or_default();
                assert!(
                    attempt > *max,
                    "attempt of {} went from {max} to {attempt}",
                    id()
                );
                *max = attempt;
            }
            _ => {}
        }
    }
}

#[test]
fn sigkill_loses_no_acknowledged_change() {
    let rounds: u64 = std::env::var("TICKWHEEL_KILL_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let dir = tempfile::tempdir().expect("temp dir");
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
    let mut ledger = Ledger::default();
    let mut steps = 0usize;
    for round in 0..rounds {
        let base = (round * 10_000_000).to_string();
        let spec = support::child_spec(dir.path(), rng.r#gen::<u64>(), round, &[&base]);
        // Kill at a random point after recovery finished.
        let run_for = Duration::from_millis(rng.gen_range(1..150));
        let lines = support::run_and_kill("child_process", CHILD, spec, run_for);
        steps += lines.len();
        for line in &lines {
            ledger.line(line);
        }
        check(dir.path(), &ledger, round);
    }
    eprintln!("{rounds} kills, {steps} acknowledged steps checked");
    assert!(steps > rounds as usize, "the child did next to nothing");
}

fn check(dir: &std::path::Path, ledger: &Ledger, round: u64) {
    let j: J = Durable::open(dir, Options::new()).expect("recover");
    for &id in &ledger.scheduled {
        let present = j.scheduler().with_value(&id, |s| s.attempt());
        if ledger.ended.contains(&id) {
            assert_eq!(
                present, None,
                "round {round}: {id} came back after its end was acknowledged"
            );
        } else if !ledger.ending.contains(&id) {
            assert!(present.is_some(), "round {round}: acknowledged {id} lost");
        }
        if let (Some(attempt), Some(&max)) = (present, ledger.attempts.get(&id)) {
            assert!(
                attempt >= max,
                "round {round}: {id} attempt {attempt} < handed out {max}"
            );
        }
    }
    j.close().expect("close");
}
