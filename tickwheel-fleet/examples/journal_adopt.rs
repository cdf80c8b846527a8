//! How long a survivor takes to adopt a dead member's queues and dispatch their journaled
//! timers, with no recovery hook (the journal alone):
//!
//! ```sh
//! cargo run --release -p tickwheel-fleet --example journal_adopt -- --timers 1000000 --queues 10
//! ```
//!
//! It starts etcd and a redis-server of its own, runs a member in a child process (this
//! program again, `--victim`) that joins alone, owns every queue and journals `--timers`
//! timers spread round-robin over them through the journaled front (`Member::schedule`, each
//! due at once, none dispatched there; the first line gives the durable schedules per
//! second), then SIGKILLs it and joins a survivor at once. It prints,
//! from the kill: when the survivor owned every queue, its first dispatch, and its last
//! (every timer handed out by `Member::pop_due`, the fence checked). The adoption waits for
//! the dead member's lease to expire in etcd (`--lease-ms`) plus the grace (a fifth of it).
//! A second line splits that time: when etcd deleted the dead member's owner keys (its lease
//! expired; seen by a watch), when the survivor had joined, when it acquired its first and
//! its last queue, and how long Redis ran scripts from the kill to the last dispatch (the
//! adoption's `adopt` and journal page calls: `INFO commandstats`, `cmdstat_evalsha`).
#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use etcd_client::{EventType, WatchOptions};
use parking_lot::Mutex;
use tickwheel::sync::{FrozenEntry, Scheduler};
use tickwheel_fleet::{FleetEvent, FleetOptions, Member, RecoveryError};
use tickwheel_redis::journal::JournalOptions;
use tickwheel_testkit::etcd::EtcdServer;
use tickwheel_testkit::redis::RedisServer;

type Fm = Member<String, u64, u64>;

#[derive(Parser, Debug)]
struct Args {
    /// Journaled timers, spread over the queues.
    #[arg(long, default_value_t = 1_000_000)]
    timers: u64,
    /// Queues (q0, q1, …).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    queues: u32,
    /// The members' lease TTL in ms (whole seconds).
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1_000..=60_000))]
    lease_ms: u64,
    /// Most puts submitted and not yet acknowledged (the victim).
    #[arg(long, default_value_t = 100_000)]
    outstanding: usize,
    /// The victim journals with `Member::journal_put` alone (no scheduler call), to compare
    /// with the front.
    #[arg(long)]
    puts_only: bool,
    /// Run as the victim with these etcd and Redis URLs (set by the parent).
    #[arg(long, hide = true, num_args = 2, value_names = ["ETCD", "REDIS"])]
    victim: Option<Vec<String>>,
}

fn queue(n: u64) -> String {
    format!("q{n}")
}

fn options(etcd: &str, redis: &str, lease_ms: u64) -> FleetOptions {
    let mut o = FleetOptions::new(etcd.to_owned(), redis.to_owned())
        .with_lease_ttl(Duration::from_millis(lease_ms));
    o.journal = Some(JournalOptions::default());
    o
}

/// A member with the journal on and a recovery hook that finds nothing.
async fn join(o: FleetOptions, name: &str) -> Result<Fm, String> {
    let sched = Arc::new(Scheduler::new());
    Member::join(o, name, sched, |_q: String| async move {
        Ok::<Vec<FrozenEntry<u64, u64>>, RecoveryError>(Vec::new())
    })
    .await
    .map_err(|e| format!("join {name}: {e}"))
}

async fn until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) -> Result<(), String> {
    let end = Instant::now() + limit;
    while !f() {
        if Instant::now() > end {
            return Err(format!("timed out waiting until {what}"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

/// The victim: owns every queue, journals the timers, prints `READY`, waits to be killed.
async fn victim(a: &Args, etcd: &str, redis: &str) -> Result<(), String> {
    let m = join(options(etcd, redis, a.lease_ms), "dead").await?;
    until(
        "the victim owns every queue",
        Duration::from_secs(30),
        || m.owned().len() == a.queues as usize,
    )
    .await?;
    let t = Instant::now();
    let mut inflight = VecDeque::new();
    for id in 0..a.timers {
        let q = queue(id % u64::from(a.queues));
        let put = if a.puts_only {
            m.journal_put(&q, &id, Instant::now(), &id)
                .map_err(|e| e.to_string())?
        } else {
            m.schedule(q, id, Instant::now(), id)
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("schedule {id}: {e}"))?
        };
        inflight.push_back(put);
        while inflight.len() >= a.outstanding.max(1) {
            if let Some(p) = inflight.pop_front() {
                p.await.map_err(|e| e.to_string())?;
            }
        }
    }
    for p in inflight {
        p.await.map_err(|e| e.to_string())?;
    }
    println!("READY {:.2}", t.elapsed().as_secs_f64());
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn survivor(a: &Args) -> Result<(), String> {
    let etcd = EtcdServer::start().map_err(|e| format!("etcd: {e}"))?;
    let redis = RedisServer::start(None).map_err(|e| format!("redis-server: {e}"))?;
    let o = options(&etcd.url(), &redis.url(), a.lease_ms);
    tickwheel_fleet::register_queues(&o, (0..u64::from(a.queues)).map(queue))
        .await
        .map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .args([
            "--timers",
            &a.timers.to_string(),
            "--queues",
            &a.queues.to_string(),
        ])
        .args(["--lease-ms", &a.lease_ms.to_string()])
        .args(["--outstanding", &a.outstanding.to_string()])
        .args(a.puts_only.then_some("--puts-only"))
        .args(["--victim", &etcd.url(), &redis.url()])
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("the victim: {e}"))?;
    let stdout = child.stdout.take().ok_or("the victim's output")?;
    let ready = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find(|l| l.starts_with("READY"))
    })
    .await
    .map_err(|e| e.to_string())?;
    let Some(ready) = ready else {
        let _ = child.kill();
        return Err("the victim ended before READY".into());
    };
    let put_s = ready.trim_start_matches("READY ").to_owned();
    let deleted = watch_deletes(&etcd.url(), &o.prefix).await?;
    let rate = put_s.parse::<f64>().map_or("?".into(), |s| {
        format!("{:.0}", a.timers as f64 / s.max(1e-9))
    });
    eprintln!(
        "journal_adopt: {} timers {} over {} queues in {put_s} s ({rate} durable {}/s); SIGKILL",
        a.timers,
        if a.puts_only {
            "journaled"
        } else {
            "scheduled and journaled"
        },
        a.queues,
        if a.puts_only { "puts" } else { "schedules" },
    );
    let scripts_before = script_usec(&redis.url()).await?;
    child.kill().map_err(|e| format!("kill: {e}"))?;
    let killed = Instant::now();
    let _ = child.wait();
    let s = join(options(&etcd.url(), &redis.url(), a.lease_ms), "survivor").await?;
    let joined_at = killed.elapsed();
    let acquired = Arc::new(Mutex::new(Vec::new()));
    let mut events = s.events();
    let log = Arc::clone(&acquired);
    tokio::spawn(async move {
        while let Ok(e) = events.recv().await {
            if let FleetEvent::Acquired { .. } = e {
                log.lock().push(Instant::now());
            }
        }
    });
    let (mut owned_at, mut first_at) = (None, None);
    let mut dispatched = 0u64;
    let limit = killed + Duration::from_secs(120);
    while dispatched < a.timers && Instant::now() < limit {
        let n = s.pop_due(Instant::now(), 100_000).len() as u64;
        if n > 0 && first_at.is_none() {
            first_at = Some(killed.elapsed());
        }
        dispatched += n;
        if owned_at.is_none() && s.owned().len() == a.queues as usize {
            owned_at = Some(killed.elapsed());
        }
        if n == 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    let all_at = killed.elapsed();
    let scripts = script_usec(&redis.url())
        .await?
        .saturating_sub(scripts_before);
    let secs =
        |d: Option<Duration>| d.map_or("never".into(), |d| format!("{:.2} s", d.as_secs_f64()));
    let grace = a.lease_ms as f64 / 5_000.0;
    println!(
        "journal_adopt: {} timers, {} queues, lease {:.1} s + grace {grace:.1} s; from the kill: \
         every queue owned {}, first dispatch {}, {dispatched} dispatched by {:.2} s",
        a.timers,
        a.queues,
        a.lease_ms as f64 / 1_000.0,
        secs(owned_at),
        secs(first_at),
        all_at.as_secs_f64()
    );
    let span = |v: &[Instant]| match (v.iter().min(), v.iter().max()) {
        (Some(a), Some(b)) => format!(
            "{:.2}–{:.2} s",
            a.saturating_duration_since(killed).as_secs_f64(),
            b.saturating_duration_since(killed).as_secs_f64()
        ),
        _ => "never".into(),
    };
    println!(
        "journal_adopt: phases from the kill: owner keys deleted by etcd {}, survivor joined \
         {:.2} s, queues acquired {}; Redis ran scripts for {:.2} s",
        span(&deleted.lock()),
        joined_at.as_secs_f64(),
        span(&acquired.lock()),
        scripts as f64 / 1e6
    );
    drop(s);
    if dispatched < a.timers {
        return Err(format!(
            "only {dispatched} of {} timers dispatched",
            a.timers
        ));
    }
    Ok(())
}

/// Redis's total time in `EVALSHA` so far, µs (`INFO commandstats`).
async fn script_usec(url: &str) -> Result<u64, String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    let mut c = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| e.to_string())?;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await
        .map_err(|e| e.to_string())?;
    Ok(info
        .lines()
        .find_map(|l| {
            let rest = l.strip_prefix("cmdstat_evalsha:")?;
            rest.split(',')
                .find_map(|kv| kv.strip_prefix("usec=")?.parse().ok())
        })
        .unwrap_or(0))
}

/// Watches the owner keys under `prefix` and records when each is deleted (the lease of the
/// member holding it expired, or a release).
async fn watch_deletes(etcd: &str, prefix: &str) -> Result<Arc<Mutex<Vec<Instant>>>, String> {
    let mut client = etcd_client::Client::connect([etcd], None)
        .await
        .map_err(|e| format!("etcd: {e}"))?;
    let mut stream = client
        .watch(
            format!("{prefix}o/"),
            Some(WatchOptions::new().with_prefix()),
        )
        .await
        .map_err(|e| format!("etcd watch: {e}"))?;
    let out = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&out);
    tokio::spawn(async move {
        // The client lives as long as the task.
        let _client = client;
        while let Ok(Some(r)) = stream.message().await {
            let now = Instant::now();
            let n = r
                .events()
                .iter()
                .filter(|e| e.event_type() == EventType::Delete)
                .count();
            log.lock().extend(std::iter::repeat_n(now, n));
        }
    });
    Ok(out)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), String> {
    let a = Args::parse();
    match &a.victim {
        Some(urls) if urls.len() == 2 => victim(&a, &urls[0], &urls[1]).await,
        Some(_) => Err("--victim ETCD REDIS".into()),
        None => survivor(&a).await,
    }
}
