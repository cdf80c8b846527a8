//! Figures of the Redis journal of live timers: durable puts per second from one writer into
//! one redis-server with `appendonly yes` + `appendfsync always`, and the Redis memory each
//! live timer costs.
//!
//! ```sh
//! cargo run --release -p tickwheel-redis --example journal_figures
//! cargo run --release -p tickwheel-redis --example journal_figures -- --timers 1000000 --queues 100 --value-bytes 16
//! ```
//!
//! It starts a redis-server of its own (temporary directory, free loopback port, stopped by
//! PID), adopts `--queues` queues at token 1, and puts `--timers` timers (ids 0.., spread
//! round-robin over the queues, each value a string of `--value-bytes` bytes) through one
//! [`Journal`], each put its own submit, at most `--outstanding` unanswered at a time. It
//! prints: the durable puts per second (first submit to last answer: every put acknowledged
//! by Redis after its AOF fsync); the bytes per timer from `INFO memory`'s `used_memory`
//! before and after, and from the sum of `MEMORY USAGE` over the journal's keys; the encodings
//! of the buckets; the time to load every queue back; and the ends per second.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use clap::Parser;
use tickwheel::sync::snapshot::SnapshotEntry;
use tickwheel_redis::journal::{Journal, JournalOptions, Op};
use tickwheel_redis::{Member, Options, Protocol, Token};
use tickwheel_testkit::ServerError;
use tickwheel_testkit::redis::{RedisServer, info_field};

#[derive(Parser, Debug)]
struct Args {
    /// Live timers to put.
    #[arg(long, default_value_t = 1_000_000)]
    timers: u64,
    /// Queues they are spread over.
    #[arg(long, default_value_t = 1)]
    queues: u64,
    /// Bytes of each value (a string of that many bytes; MessagePack adds 1 or 2).
    #[arg(long, default_value_t = 8)]
    value_bytes: usize,
    /// Most puts submitted and not yet answered.
    #[arg(long, default_value_t = 100_000)]
    outstanding: usize,
    /// Most ops in one script call (`JournalOptions::max_call_ops`).
    #[arg(long, default_value_t = 2048)]
    max_call_ops: usize,
    /// Group-commit window, µs.
    #[arg(long, default_value_t = 1000)]
    window_us: u64,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let server = RedisServer::start(None)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(run(&args, &server))
}

/// Redis's own CPU time (user + system, s) and the µs it spent in `EVALSHA`, from `INFO`.
fn redis_cpu(server: &RedisServer) -> Result<(f64, f64), ServerError> {
    let info = server.info("all")?;
    let field = |name: &str| info_field::<f64>(&info, name).unwrap_or(0.0);
    let evalsha = info
        .lines()
        .find_map(|l| {
            let rest = l.strip_prefix("cmdstat_evalsha:")?;
            rest.split(',')
                .find_map(|kv| kv.strip_prefix("usec=")?.parse().ok())
        })
        .unwrap_or(0.0);
    Ok((field("used_cpu_user") + field("used_cpu_sys"), evalsha))
}

/// Submits `ops(id)` for each id of `0..args.timers` (to the queues in turn), each its own
/// submit, at most `args.outstanding` unanswered at a time. Returns the seconds from the first
/// submit to the last answer.
async fn submit_each(
    j: &Journal,
    queues: &[Vec<u8>],
    args: &Args,
    ops: impl Fn(u64) -> Result<Vec<Op>, Box<dyn std::error::Error>>,
) -> Result<f64, Box<dyn std::error::Error>> {
    let started = Instant::now();
    let mut waiting = VecDeque::new();
    for id in 0..args.timers {
        let q = &queues[(id % queues.len() as u64) as usize];
        waiting.push_back(j.submit(q, 1, ops(id)?));
        if waiting.len() >= args.outstanding
            && let Some(w) = waiting.pop_front()
        {
            w.await?;
        }
    }
    for w in waiting {
        w.await?;
    }
    Ok(started.elapsed().as_secs_f64())
}

async fn run(args: &Args, server: &RedisServer) -> Result<(), Box<dyn std::error::Error>> {
    let url = server.url();
    let url = url.as_str();
    let p = Protocol::connect(url, Member::new_boot("writer"), Options::default()).await?;
    let queues: Vec<Vec<u8>> = (0..args.queues.max(1))
        .map(|q| format!("q{q}").into_bytes())
        .collect();
    for q in &queues {
        p.adopt(q, 1, &Token::generate()).await?;
    }
    let mut c = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let before = server.used_memory()?;
    let options = JournalOptions {
        window: std::time::Duration::from_micros(args.window_us),
        max_call_ops: args.max_call_ops,
        ..JournalOptions::default()
    };
    let j = Journal::start(p, options)?;
    let value = "v".repeat(args.value_bytes);

    let (cpu0, eval0) = redis_cpu(server)?;
    let put_secs = submit_each(&j, &queues, args, |id| {
        let entry = SnapshotEntry {
            id,
            deadline_us: 1_765_000_000_000_000 + id * 1000,
            value: value.clone(),
        };
        Ok(vec![Op::put_entry(&entry)?])
    })
    .await?;
    let (cpu1, eval1) = redis_cpu(server)?;
    let after = server.used_memory()?;

    // MEMORY USAGE over every journal key, and the buckets' encodings.
    let mut usage = 0u64;
    let mut encodings: BTreeMap<String, u64> = BTreeMap::new();
    let mut keys = 0u64;
    let mut cursor = 0u64;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("tickwheel:{*}:j*")
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut c)
            .await?;
        for k in batch {
            let bytes: Option<u64> = redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(&k)
                .arg("SAMPLES")
                .arg(0)
                .query_async(&mut c)
                .await?;
            usage += bytes.unwrap_or(0);
            keys += 1;
            if !k.ends_with(":jm") {
                let e: String = redis::cmd("OBJECT")
                    .arg("ENCODING")
                    .arg(&k)
                    .query_async(&mut c)
                    .await?;
                *encodings.entry(e).or_default() += 1;
            }
        }
        cursor = next;
        if cursor == 0 {
            break;
        }
    }

    let loaded_at = Instant::now();
    let mut loaded = 0usize;
    for q in &queues {
        loaded += j.load(q, 1).await?.len();
    }
    let load_secs = loaded_at.elapsed().as_secs_f64();

    let end_secs = submit_each(&j, &queues, args, |id| Ok(vec![Op::end_id(&id)?])).await?;
    let emptied = server.used_memory()?;

    let n = args.timers.max(1) as f64;
    let value_rmp = rmp_serde::to_vec(&value)?.len();
    println!(
        "{} timers over {} queues, values of {} bytes ({} as MessagePack), one writer, appendfsync always",
        args.timers,
        queues.len(),
        args.value_bytes,
        value_rmp
    );
    println!("durable puts: {:.0}/s ({:.2} s)", n / put_secs, put_secs);
    println!(
        "redis during the puts: {:.2} s of CPU, {:.2} s in EVALSHA ({:.2} µs a put)",
        cpu1 - cpu0,
        (eval1 - eval0) / 1e6,
        (eval1 - eval0) / n
    );
    println!(
        "memory: used_memory +{} B = {:.1} B/timer; MEMORY USAGE of {} journal keys = {} B = {:.1} B/timer (value included)",
        after.saturating_sub(before),
        after.saturating_sub(before) as f64 / n,
        keys,
        usage,
        usage as f64 / n
    );
    println!("bucket encodings: {encodings:?}");
    println!(
        "load: {loaded} records in {load_secs:.2} s ({:.0}/s)",
        loaded as f64 / load_secs
    );
    println!(
        "durable ends: {:.0}/s ({:.2} s); used_memory after: +{} B over the start",
        n / end_secs,
        end_secs,
        emptied.saturating_sub(before)
    );
    Ok(())
}
