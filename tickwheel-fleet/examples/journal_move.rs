//! How long an orderly move of one journaled queue takes, from the source starting its offer
//! to the target dispatching, with the queue's timers copied through the offer or not:
//!
//! ```sh
//! cargo run --release -p tickwheel-fleet --example journal_move -- --timers 1000000 --rounds 2
//! ```
//!
//! It starts a redis-server of its own and plays both sides of a fleet handoff in one process,
//! with the steps `tickwheel-fleet` takes (`hand_off` on the source, `take_offer` on the
//! target) and without etcd (the owner key's transaction and the placement polls cost both
//! ways the same). Each move takes a fresh queue whose `--timers` timers, all due at once, are
//! in the source's scheduler and in its journal (acknowledged puts under the source's token),
//! then, in one of three ways:
//!
//! - `offer+journal` (what a member does): the source offers the queue (freeze, prepare,
//!   append every timer in chunks, seal); the target claims it at a larger token, reads the
//!   journal, fetches and commits the offer, imports the offer and then the journal (each id
//!   once);
//! - `journal only`: the source's frozen timers are dropped (they are in the journal) and it
//!   seals an offer of no timer; the target claims, reads the journal, commits and imports it;
//! - `offer only` (a member before its target read the journal): the offer, no journal read.
//!
//! Each line gives the timers imported from the offer and then from the journal (an id the
//! offer gave is not imported again) and, from the start of the offer: the seal, the target's claim, the end of the
//! import (every timer in its scheduler) and its first and last dispatch (`Scheduler::pop_due`).
//! The ways are played in turn `--rounds` times, the order rotated each round.
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use clap::Parser;
use tickwheel::sync::snapshot::to_reference;
use tickwheel::sync::{FrozenEntry, Scheduler};
use tickwheel_redis::journal::{Journal, JournalOptions, Op};
use tickwheel_redis::{Custody, CustodyOptions, Member, Options};
use tickwheel_testkit::redis::RedisServer;

type Sched = Scheduler<String, u64, u64>;

#[derive(Parser, Debug)]
struct Args {
    /// Timers in the moved queue.
    #[arg(long, default_value_t = 100_000)]
    timers: u64,
    /// Rounds; each plays every way once.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,
    /// Ops a journal submit carries while the queue is filled (setup, not measured).
    #[arg(long, default_value_t = 1_000)]
    ops_per_submit: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    OfferAndJournal,
    JournalOnly,
    OfferOnly,
}

impl Way {
    fn name(self) -> &'static str {
        match self {
            Way::OfferAndJournal => "offer+journal",
            Way::JournalOnly => "journal only",
            Way::OfferOnly => "offer only",
        }
    }
    fn offers_timers(self) -> bool {
        self != Way::JournalOnly
    }
    fn reads_journal(self) -> bool {
        self != Way::OfferOnly
    }
}

/// One side of the move: its Redis handle and its journal.
struct Side {
    custody: Custody,
    journal: Journal,
}

async fn side(url: &str, name: &str) -> Result<Side, String> {
    let custody = Custody::connect(
        url,
        Member::new_boot(name),
        Options::default(),
        CustodyOptions::default(),
    )
    .await
    .map_err(|e| format!("{name}: {e}"))?;
    let journal = Journal::start(custody.protocol().clone(), JournalOptions::default())
        .map_err(|e| e.to_string())?;
    Ok(Side { custody, journal })
}

/// Milliseconds since `t0`, one decimal.
fn at(t0: Instant, t: Instant) -> String {
    format!("{:.1}", (t - t0).as_secs_f64() * 1_000.0)
}

/// Fills `q` (owned by `src` at token 1): every timer in `sched` and journaled, due now.
async fn fill(a: &Args, src: &Side, sched: &Sched, q: &str) -> Result<(), String> {
    src.custody
        .adopt::<&str, u64, u64>(q, 1)
        .await
        .map_err(|e| e.to_string())?;
    let local = Instant::now();
    let reference = src
        .custody
        .reference_now_us()
        .await
        .map_err(|e| e.to_string())?;
    let deadline = to_reference(local, local, reference);
    let mut pending = Vec::new();
    let mut ops = Vec::with_capacity(a.ops_per_submit);
    for id in 0..a.timers {
        sched
            .schedule(q.to_owned(), id, local, id)
            .map_err(|e| format!("schedule: {e:?}"))?;
        ops.push(Op::put(&id, deadline, &id).map_err(|e| e.to_string())?);
        if ops.len() >= a.ops_per_submit.max(1) {
            pending.push(
                src.journal
                    .submit(q.as_bytes(), 1, std::mem::take(&mut ops)),
            );
        }
    }
    pending.push(src.journal.submit(q.as_bytes(), 1, ops));
    for p in pending {
        p.await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The target's read of the journal under `token`, deadlines converted as a member does.
async fn read_journal(
    dst: &Side,
    q: &str,
    token: u64,
) -> Result<Vec<FrozenEntry<u64, u64>>, String> {
    let entries = dst
        .journal
        .load_entries::<u64, u64>(q.as_bytes(), token)
        .await
        .map_err(|e| e.to_string())?;
    let reference = dst
        .custody
        .reference_now_us()
        .await
        .map_err(|e| e.to_string())?;
    let local = Instant::now();
    Ok(entries
        .into_iter()
        .map(|e| e.into_frozen(reference, local))
        .collect())
}

/// One move of a fresh queue `q`, the way `way`; the line to print.
async fn one_move(a: &Args, src: &Side, dst: &Side, q: &str, way: Way) -> Result<String, String> {
    let (from, to) = (Sched::new(), Sched::new());
    fill(a, src, &from, q).await?;
    let q = q.to_owned();

    let t0 = Instant::now();
    if !way.offers_timers() {
        // Already durable in the journal: the local copy goes, the offer carries none.
        drop(from.freeze_queue(&q));
    }
    let offered = src
        .custody
        .offer(&from, q.clone(), 1, Some("target"))
        .await
        .map_err(|e| format!("offer: {e}"))?;
    let sealed = Instant::now();
    let inc = dst
        .custody
        .claim_at::<String, u64, u64>(q.clone(), 2)
        .await
        .map_err(|e| format!("claim_at: {e}"))?;
    let claimed = Instant::now();
    let journal = if way.reads_journal() {
        read_journal(dst, &q, 2).await?
    } else {
        Vec::new()
    };
    let read = journal.len();
    let received = dst
        .custody
        .complete(inc, &to)
        .await
        .map_err(|e| format!("complete: {e}"))?;
    let from_journal = to.import(q.clone(), journal).imported;
    let imported = Instant::now();
    let mut first = None;
    let mut dispatched = 0u64;
    let limit = Instant::now() + Duration::from_secs(60);
    while dispatched < a.timers && Instant::now() < limit {
        let n = to.pop_due(Instant::now(), 100_000).count() as u64;
        if n > 0 && first.is_none() {
            first = Some(Instant::now());
        }
        dispatched += n;
        if n == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let last = Instant::now();
    if dispatched != a.timers {
        return Err(format!(
            "{}: {dispatched} of {} timers dispatched",
            way.name(),
            a.timers
        ));
    }
    // The next move starts from an empty Redis.
    dst.journal
        .write(q.as_bytes(), 2, vec![Op::Clear])
        .await
        .map_err(|e| e.to_string())?;
    Ok(format!(
        "{:<14} {:>8} offered, {:>8} read from the journal; imported {:>8} + {:>8}: seal {} ms, \
         claim {} ms, imported {} ms, first dispatch {} ms, all {} ms",
        way.name(),
        offered.entries,
        read,
        received.imported.imported,
        from_journal,
        at(t0, sealed),
        at(t0, claimed),
        at(t0, imported),
        first.map_or("never".into(), |f| at(t0, f)),
        at(t0, last),
    ))
}

async fn run(a: &Args) -> Result<(), String> {
    let redis = RedisServer::start(None).map_err(|e| format!("redis-server: {e}"))?;
    let url = redis.url();
    let (src, dst) = (side(&url, "source").await?, side(&url, "target").await?);
    let ways = [Way::OfferAndJournal, Way::JournalOnly, Way::OfferOnly];
    println!(
        "journal_move: one queue of {} timers, due at once; milliseconds from the start of the offer",
        a.timers
    );
    for r in 0..a.rounds as usize {
        for k in 0..ways.len() {
            let way = ways[(r + k) % ways.len()];
            let line = one_move(a, &src, &dst, &format!("m{r}-{k}"), way).await?;
            println!("round {r}: {line}");
        }
    }
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), String> {
    run(&Args::parse()).await
}
