//! Figures of one handoff: a queue of 1 000 000 timers moved from one member to another
//! through a redis-server of its own (AOF on, `appendfsync always`), in one process.
//!
//! ```sh
//! cargo run --release -p tickwheel-redis --example handoff_figures            # 1000 a chunk
//! cargo run --release -p tickwheel-redis --example handoff_figures -- 250 500 1000 2000
//! ```
//!
//! For each chunk size given (timers per chunk; default `DEFAULT_CHUNK_ENTRIES`) it prints the
//! wall time of the source side (freeze to seal), of the target side (claim to import), the
//! bytes per timer in Redis (`MEMORY USAGE` of the offer's data key once sealed), and the
//! longest single command Redis ran (the slow log with a threshold of 0 µs: every `EVALSHA`).
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use tickwheel::sync::Scheduler;
use tickwheel_redis::chunk::DEFAULT_CHUNK_ENTRIES;
use tickwheel_redis::{Custody, CustodyOptions, Member, Options};
use tickwheel_testkit::redis::RedisServer;

const TIMERS: u64 = 1_000_000;

type Sched = Scheduler<String, u64, u64>;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse::<usize>().map_err(|e| format!("`{a}`: {e}")))
        .collect::<Result<_, _>>()?;
    let sizes = if sizes.is_empty() {
        vec![DEFAULT_CHUNK_ENTRIES]
    } else {
        sizes
    };
    let server = RedisServer::start(None)?;
    let url = server.url();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    for size in sizes {
        rt.block_on(run(&url, size))?;
    }
    Ok(())
}

async fn run(url: &str, chunk_entries: usize) -> Result<(), Box<dyn std::error::Error>> {
    let opts = CustodyOptions {
        chunk_entries,
        ..CustodyOptions::default()
    };
    let a = Custody::connect(url, Member::new_boot("a"), Options::default(), opts.clone()).await?;
    let b = Custody::connect(url, Member::new_boot("b"), Options::default(), opts).await?;
    let mut raw = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let q = format!("figures-{chunk_entries}.example");
    let t0 = Instant::now();
    let src: Sched = Scheduler::builder().origin(t0).build();
    for id in 0..TIMERS {
        let at = t0 + Duration::from_secs(60) + Duration::from_micros(id * 37 % 3_600_000_000);
        src.schedule(q.clone(), id, at, id)
            .map_err(|_| "schedule refused")?;
    }
    let epoch = a.acquire(q.as_bytes()).await?.record.epoch;
    // Every command into the slow log, and room for all of them.
    for (name, value) in [
        ("slowlog-log-slower-than", "0"),
        ("slowlog-max-len", "1000000"),
    ] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query_async(&mut raw)
            .await?;
    }
    let _: () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async(&mut raw)
        .await?;

    let started = Instant::now();
    let offered = a.offer(&src, q.clone(), epoch, Some("b")).await?;
    let source_wall = started.elapsed();
    let data_key = a.protocol().keys(q.as_bytes()).data;
    let bytes: u64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(&data_key)
        .arg("SAMPLES")
        .arg("0")
        .query_async(&mut raw)
        .await?;

    let dst: Sched = Scheduler::builder().origin(t0).build();
    let started = Instant::now();
    let received = b.receive(&dst, q.clone()).await?;
    let target_wall = started.elapsed();

    let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg("-1")
        .query_async(&mut raw)
        .await?;
    let (mut longest, mut calls) = (0i64, 0usize);
    let mut longest_cmd = String::new();
    for entry in &log {
        if let redis::Value::Array(fields) = entry
            && let (Some(redis::Value::Int(us)), Some(redis::Value::Array(args))) =
                (fields.get(2), fields.get(3))
        {
            let name = match args.first() {
                Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
                _ => String::new(),
            };
            // The handoff's own commands: the step scripts and TIME (not SLOWLOG, CONFIG).
            if !(name.starts_with("EVAL") || name == "TIME") {
                continue;
            }
            calls += 1;
            if *us > longest {
                longest = *us;
                longest_cmd = name;
            }
        }
    }
    println!(
        "chunk {chunk_entries:>5}: {} timers in {} chunks; source {:.2} s, target {:.2} s; \
         {:.1} bytes/timer in Redis; longest command {longest} µs ({longest_cmd}) of {calls}; imported {}",
        offered.entries,
        offered.chunks,
        source_wall.as_secs_f64(),
        target_wall.as_secs_f64(),
        bytes as f64 / offered.entries.max(1) as f64,
        received.imported.imported,
    );
    Ok(())
}
