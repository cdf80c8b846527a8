//! The parent: servers, producers, the scenario, progress lines and the final check.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::{Rng as _, SeedableRng as _};
use tickwheel_testkit::TlsFiles;
use tickwheel_testkit::etcd::EtcdServer;
use tickwheel_testkit::redis::RedisServer;

use crate::check::{self, Inputs};
use crate::cli::Args;
use crate::dlog::{self, mono_ns};
use crate::firewall::Firewall;
use crate::procs::Spawner;
use crate::scenario::{Fleet, Servers};
use crate::spool::Spool;

/// Runs the whole proof. `Ok(true)`: the check passed; `Ok(false)`: it failed (the FAILED
/// line is printed); `Err`: the run could not be carried out.
pub fn run(args: &Args, dir: &Path) -> Result<bool, String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    rt.block_on(run_async(args, dir))
}

async fn run_async(args: &Args, dir: &Path) -> Result<bool, String> {
    let started = Instant::now();
    if args.scenario.cuts_links()
        && let Some(why) = crate::firewall::unavailable()
    {
        if std::env::var_os("CI").is_some() {
            return Err(format!(
                "--scenario {} cannot run: {why}",
                args.scenario.name()
            ));
        }
        say!("fleet: {} scenario skipped: {why}", args.scenario.name());
        return Ok(true);
    }
    // `--tls`: the run's CA and certificates, and servers that serve TLS only.
    let tls_dir = args.tls.then(|| dir.join("tls"));
    if let Some(d) = &tls_dir {
        crate::tls::make(d).map_err(|e| format!("certificates: {e}"))?;
    }
    // Servers first: ours unless URLs are given.
    let redis = match (&args.redis_url, &tls_dir) {
        (Some(_), _) => None,
        (None, None) => Some(
            RedisServer::start(Some(&dir.join("redis")))
                .map_err(|e| format!("redis-server: {e}"))?,
        ),
        (None, Some(d)) => Some(
            RedisServer::start_tls(Some(&dir.join("redis")), TlsFiles::in_dir(d), true, &[])
                .map_err(|e| format!("redis-server: {e}"))?,
        ),
    };
    let etcd = match (&args.etcd_url, &tls_dir) {
        (Some(_), _) => None,
        (None, None) => Some(EtcdServer::start().map_err(|e| format!("etcd: {e}"))?),
        (None, Some(d)) => {
            Some(EtcdServer::start_tls(TlsFiles::in_dir(d)).map_err(|e| format!("etcd: {e}"))?)
        }
    };
    let redis_url = args
        .redis_url
        .clone()
        .or_else(|| redis.as_ref().map(RedisServer::url))
        .unwrap_or_default();
    let etcd_url = args
        .etcd_url
        .clone()
        .or_else(|| etcd.as_ref().map(EtcdServer::url))
        .unwrap_or_default();
    // A fresh prefix per run: two runs against the same servers do not meet.
    let run_id: u32 = rand::rng().random();
    let redis_prefix = format!("fleet:{run_id:08x}:");
    let etcd_prefix = format!("/tickwheel-fleet-{run_id:08x}/");
    say!(
        "fleet: {} members, {} queues, {} msg/s (at most {}), lease {} ms; etcd {etcd_url}, \
         redis {}, run directory {}",
        args.members,
        args.queues,
        args.rate,
        args.messages,
        args.lease_ms,
        tickwheel_redis::redact_url(&redis_url),
        dir.display()
    );
    let spool = Spool::connect(&redis_url, &redis_prefix, tls_dir.as_deref())
        .await
        .map_err(|e| format!("redis: {}", tickwheel_redis::redact_url(&e.to_string())))?;
    let mut options = tickwheel_fleet::FleetOptions::new(etcd_url.clone(), redis_url.clone());
    options.prefix = etcd_prefix.clone();
    if let Some(d) = &tls_dir {
        options.etcd_tls = Some(crate::tls::etcd(d).map_err(|e| format!("certificates: {e}"))?);
    }
    tickwheel_fleet::register_queues(&options, (0..args.queues).map(crate::member::queue_name))
        .await
        .map_err(|e| format!("registering the queues: {e}"))?;
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
    let mut common = vec![
        "--dir".to_string(),
        logs.display().to_string(),
        "--prefix".into(),
        etcd_prefix,
        "--etcd-url".into(),
        etcd_url,
        "--redis-url".into(),
        redis_url,
        "--queues".into(),
        args.queues.to_string(),
        "--lease-ms".into(),
        args.lease_ms.to_string(),
        "--redis-prefix".into(),
        redis_prefix,
    ];
    if let Some(d) = &tls_dir {
        common.extend(["--tls-dir".to_string(), d.display().to_string()]);
    }
    if args.plant.is_some() {
        common.extend(["--plant".to_string(), "no-lease-check".to_string()]);
    }
    if args.journal.is_some() {
        common.extend(["--journal".to_string(), "redis".to_string()]);
    }
    // Partitions: members under user ids of their own (61001, …), rules in a table of the
    // run's own; the dispatch logs' directory must be theirs to write.
    let partition = args.scenario.cuts_links();
    let firewall = if partition {
        use std::os::unix::fs::PermissionsExt as _;
        for (d, mode) in [(dir, 0o755), (logs.as_path(), 0o1777)] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode))
                .map_err(|e| format!("{}: {e}", d.display()))?;
        }
        Some(Firewall::new().map_err(|e| format!("nftables: {e}"))?)
    } else {
        None
    };
    let mut fleet = Fleet::new(
        Spawner {
            common,
            uid_base: partition.then_some(61_000),
        },
        spool.clone(),
        args,
        Servers { etcd, redis },
    );
    if let Some(fw) = firewall {
        fleet.set_firewall(fw);
    }

    // Producers and progress run beside the scenario.
    let produced = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let producer = tokio::spawn(produce(
        spool.clone(),
        args.clone(),
        produced.clone(),
        stop.clone(),
    ));
    let progress = tokio::spawn(progress(
        spool.clone(),
        produced.clone(),
        stop.clone(),
        started,
        fleet.names_handle(),
    ));

    let played = fleet.play(&args.scenario.steps()).await;
    stop.store(true, Ordering::SeqCst);
    let producer_result = producer.await.map_err(|e| e.to_string())?;
    let produced = produced.load(Ordering::SeqCst);
    let outcome = match (played, producer_result) {
        (Err(e), _) | (Ok(()), Err(e)) => Err(e),
        (Ok(()), Ok(())) => fleet.settle_end(produced, args.max_delay_ms).await,
    };
    let _ = progress.await;
    // Whatever happened, the members stop (leave in order, or are killed) before the logs
    // are read.
    let ends = fleet.finish().await;
    let end = match outcome {
        Ok(end) => end,
        Err(e) => {
            println!("ownership: FAILED the run did not finish: {e}");
            return Ok(false);
        }
    };
    let (members, dispatches, failed) =
        dlog::read_all(&logs).map_err(|e| format!("reading the dispatch logs: {e}"))?;
    let inputs = Inputs {
        members,
        dispatches,
        failed,
        produced,
        delivered: end.delivered,
        leftover: end.leftover,
        owned_at_end: end.owned,
        all_delivered: args.journal.is_some(),
    };
    say!(
        "fleet: {} s; stale deliveries refused by the spool: {}; {ends}",
        started.elapsed().as_secs(),
        end.rejected
    );
    match check::check(&inputs) {
        Ok(counts) => {
            println!(
                "ownership: OK ({counts}; {} stale deliveries refused)",
                end.rejected
            );
            Ok(true)
        }
        Err(v) => {
            println!("ownership: FAILED {v}");
            Ok(false)
        }
    }
}

/// What the spool holds once the run is over.
pub struct End {
    pub delivered: std::collections::HashMap<u64, u64>,
    pub leftover: Vec<(u64, u32)>,
    pub owned: HashSet<u32>,
    pub rejected: u64,
}

/// Produces `--rate` messages a second into random queues until `stop` or `--messages`.
/// Ids are `0..produced`: each is retried until Redis takes it (for up to 30 s).
async fn produce(
    mut spool: Spool,
    args: Args,
    produced: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> Result<(), String> {
    let start = Instant::now();
    let mut rng = rand::rngs::StdRng::from_os_rng();
    let tick = Duration::from_millis(20);
    while !stop.load(Ordering::SeqCst) {
        let due =
            ((start.elapsed().as_secs_f64() * f64::from(args.rate)) as u64).min(args.messages);
        let mut id = produced.load(Ordering::SeqCst);
        while id < due && !stop.load(Ordering::SeqCst) {
            let q = rng.random_range(0..args.queues);
            let delay_ns = rng.random_range(0..=args.max_delay_ms) * 1_000_000;
            let give_up = Instant::now() + Duration::from_secs(30);
            loop {
                match spool.produce(q, id, mono_ns() + delay_ns).await {
                    Ok(()) => break,
                    Err(e) if Instant::now() < give_up => {
                        say!("producer: {e}; retrying");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(e) => return Err(format!("producer: redis refused for 30 s: {e}")),
                }
            }
            id += 1;
            produced.store(id, Ordering::SeqCst);
        }
        tokio::time::sleep(tick).await;
    }
    Ok(())
}

/// A progress line every 2 s.
async fn progress(
    mut spool: Spool,
    produced: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    started: Instant,
    names: Arc<std::sync::Mutex<Vec<String>>>,
) {
    let mut next = Instant::now();
    loop {
        next += Duration::from_secs(2);
        while Instant::now() < next {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let names: Vec<String> = names.lock().map(|n| n.clone()).unwrap_or_default();
        let (delivered, rejected) = spool.stats().await.unwrap_or((0, 0));
        let reports = spool.reports(&names).await.unwrap_or_default();
        let mut owners: Vec<String> = names
            .iter()
            .map(|n| match reports.get(n) {
                Some((_, qs)) => format!("{n}:{}", qs.len()),
                None => format!("{n}:-"),
            })
            .collect();
        owners.sort();
        say!(
            "[{:6.1}s] produced {}, delivered {delivered}, stale refused {rejected}; queues per member {}",
            started.elapsed().as_secs_f64(),
            produced.load(Ordering::SeqCst),
            owners.join(" ")
        );
    }
}
