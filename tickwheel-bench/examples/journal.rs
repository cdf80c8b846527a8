//! tickwheel-journal's figures: durable schedules/s with two producers and group commit,
//! recovery timers/s and disk bytes per timer, for fjall and redb side by side and beside
//! the in-memory scheduler.
//!
//! `cargo run --release -p tickwheel-bench --example journal [-- --timers N] [--engines redb,fjall]`
//! (default 1 000 000 timers, both engines, the first one's figures in the last three lines;
//! the journals go to a temporary directory under `TMPDIR`). Before the bulk load, each
//! engine also takes 3 s of single `schedule` calls from the two producers, each call
//! waiting for its record: the wait a caller sees at the default window.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tickwheel::sync::Scheduler;
use tickwheel_journal::{Durability, Durable, Engine, Options, disk_usage};

const PRODUCERS: u64 = 2;
const CHUNK: u64 = 1_000;

struct Figures {
    name: &'static str,
    schedules_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    syncs: u64,
    recovery_per_s: f64,
    recovery_s: f64,
    disk_per_timer: f64,
    tables_per_timer: f64,
}

fn deadline(base: Instant, id: u64) -> Instant {
    base + Duration::from_millis(3_600_000 + (id * 7919) % 3_600_000)
}

/// The options of every journal here: `engine`, the default durability.
fn options(engine: Engine) -> Options {
    Options::new()
        .engine(engine)
        .durability(Durability::default())
}

/// A journal with [`options`] in a new temporary directory: the directory (removed when
/// dropped), the options and the journal.
fn open_temp(engine: Engine) -> (tempfile::TempDir, Options, Durable<u32, u64, u64>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let j = Durable::open(dir.path(), options(engine)).expect("open");
    (dir, options(engine), j)
}

/// Runs `produce(p)` for each producer `p` (`0..PRODUCERS`), each on a thread of its own and
/// returning its waits (ms): the seconds from `start` until all of them ended, and every
/// wait, sorted.
fn producers(start: Instant, produce: impl Fn(u64) -> Vec<f64> + Sync) -> (f64, Vec<f64>) {
    let waits: Vec<Vec<f64>> = std::thread::scope(|s| {
        let produce = &produce;
        let handles: Vec<_> = (0..PRODUCERS)
            .map(|p| s.spawn(move || produce(p)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("producer"))
            .collect()
    });
    let elapsed = start.elapsed().as_secs_f64();
    let mut waits: Vec<f64> = waits.into_iter().flatten().collect();
    waits.sort_by(f64::total_cmp);
    (elapsed, waits)
}

/// The `p` quantile (0 to 1) of the sorted `waits`.
fn pct(waits: &[f64], p: f64) -> f64 {
    waits[((waits.len() as f64 * p) as usize).min(waits.len() - 1)]
}

fn journal(engine: Engine, name: &'static str, n: u64) -> Figures {
    let (dir, options, j) = open_temp(engine);
    let base = Instant::now();
    let start = Instant::now();
    let (elapsed, waits) = producers(start, |p| {
        let mut waits = Vec::new();
        let mut id = p * n / PRODUCERS;
        let end = (p + 1) * n / PRODUCERS;
        while id < end {
            let hi = (id + CHUNK).min(end);
            let t = Instant::now();
            let refused = j
                .schedule_many((id..hi).map(|i| ((i % 1000) as u32, i, deadline(base, i), i)))
                .expect("journal");
            assert!(refused.is_empty());
            waits.push(t.elapsed().as_secs_f64() * 1e3);
            id = hi;
        }
        waits
    });
    let syncs = j.writer_stats().syncs;
    let (p50_ms, p99_ms) = (pct(&waits, 0.50), pct(&waits, 0.99));
    j.close().expect("close");
    let usage = disk_usage(dir.path());
    let t = Instant::now();
    let j: Durable<u32, u64, u64> = Durable::open(dir.path(), options).expect("recover");
    let recovery_s = t.elapsed().as_secs_f64();
    assert_eq!(j.len() as u64, n);
    drop(j);
    Figures {
        name,
        schedules_per_s: n as f64 / elapsed,
        p50_ms,
        p99_ms,
        syncs,
        recovery_per_s: n as f64 / recovery_s,
        recovery_s,
        disk_per_timer: usage.total as f64 / n as f64,
        tables_per_timer: (usage.total - usage.log) as f64 / n as f64,
    }
}

/// The child of [`crash_recovery`]: loads `n` timers into the journal in `dir` with the two
/// producers, prints `LOADED` once every record is durable, then keeps scheduling until
/// killed.
fn child_load(dir: &str, engine: Engine, n: u64) {
    let j: Arc<Durable<u32, u64, u64>> =
        Arc::new(Durable::open(dir, options(engine)).expect("open"));
    let base = Instant::now();
    std::thread::scope(|s| {
        for p in 0..PRODUCERS {
            let j = j.clone();
            s.spawn(move || {
                let (lo, hi) = (p * n / PRODUCERS, (p + 1) * n / PRODUCERS);
                for start in (lo..hi).step_by(CHUNK as usize) {
                    let end = (start + CHUNK).min(hi);
                    let items = (start..end).map(|i| ((i % 1000) as u32, i, deadline(base, i), i));
                    assert!(j.schedule_many(items).expect("journal").is_empty());
                }
            });
        }
    });
    j.flush().expect("flush");
    println!("LOADED");
    // Keep the writer busy until the SIGKILL, as a crash would find it.
    for i in n.. {
        let _ = j.schedule((i % 1000) as u32, i, deadline(base, i), i);
    }
}

/// Loads `n` timers in a child process, SIGKILLs it, and times the `open` that recovers
/// them: (timers recovered, seconds).
fn crash_recovery(engine: Engine, name: &str, n: u64) -> (u64, f64) {
    use std::io::BufRead;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut child = std::process::Command::new(std::env::current_exe().expect("this program"))
        .args([
            "--child-load",
            &dir.path().display().to_string(),
            name,
            &n.to_string(),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn the loader");
    let stdout = child.stdout.take().expect("piped");
    let mut line = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .expect("the loader's line");
    assert_eq!(line.trim(), "LOADED");
    std::thread::sleep(Duration::from_millis(200));
    child.kill().expect("SIGKILL");
    child.wait().expect("reap");
    let t = Instant::now();
    let j: Durable<u32, u64, u64> =
        Durable::open(dir.path(), Options::new().engine(engine)).expect("recover");
    let secs = t.elapsed().as_secs_f64();
    let recovered = j.len() as u64;
    assert!(recovered >= n, "lost timers: {recovered} < {n}");
    (recovered, secs)
}

/// Single-timer calls: two producers each calling `schedule` and waiting for its record,
/// for `secs` seconds. Returns (calls/s, p50 ms, p99 ms).
fn single_calls(engine: Engine, secs: f64) -> (f64, f64, f64) {
    let (_dir, _, j) = open_temp(engine);
    let base = Instant::now();
    let start = Instant::now();
    let (elapsed, waits) = producers(start, |p| {
        let mut waits = Vec::new();
        let mut id = p << 40;
        while start.elapsed().as_secs_f64() < secs {
            let t = Instant::now();
            j.schedule((id % 1000) as u32, id, deadline(base, id), id)
                .expect("journal")
                .expect("new id");
            waits.push(t.elapsed().as_secs_f64() * 1e3);
            id += 1;
        }
        waits
    });
    let per_s = waits.len() as f64 / elapsed;
    (per_s, pct(&waits, 0.5), pct(&waits, 0.99))
}

/// The same producers on the in-memory scheduler, one `schedule` a timer.
fn memory(n: u64) -> f64 {
    let sched: Arc<Scheduler<u32, u64, u64>> = Arc::new(Scheduler::new());
    let base = Instant::now();
    let start = Instant::now();
    std::thread::scope(|s| {
        for p in 0..PRODUCERS {
            let sched = sched.clone();
            s.spawn(move || {
                for i in p * n / PRODUCERS..(p + 1) * n / PRODUCERS {
                    sched
                        .schedule((i % 1000) as u32, i, deadline(base, i), i)
                        .expect("new id");
                }
            });
        }
    });
    n as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let mut n: u64 = 1_000_000;
    let mut engines = vec![(Engine::Redb, "redb"), (Engine::Fjall, "fjall")];
    let mut args = std::env::args().skip(1);
    let usage = "usage: journal [--timers N] [--engines redb,fjall]";
    while let Some(a) = args.next() {
        match a.as_str() {
            "--child-load" => {
                let dir = args.next().expect(usage);
                let engine = match args.next().as_deref() {
                    Some("fjall") => Engine::Fjall,
                    _ => Engine::Redb,
                };
                let n = args.next().and_then(|v| v.parse().ok()).expect(usage);
                return child_load(&dir, engine, n);
            }
            "--timers" => n = args.next().and_then(|v| v.parse().ok()).expect(usage),
            "--engines" => {
                let list = args.next().expect(usage);
                engines.retain(|(_, name)| list.split(',').any(|e| e == *name));
                assert!(!engines.is_empty(), "{usage}");
            }
            other => panic!("unknown argument {other}; {usage}"),
        }
    }
    println!(
        "{n} timers (u64 id, u32 queue, u64 value), {PRODUCERS} producers, Durability::Batched(1 ms)"
    );
    let mem = memory(n);
    let mut rows = Vec::new();
    for &(engine, name) in &engines {
        let singles = single_calls(engine, 3.0);
        let crash = crash_recovery(engine, name, n);
        rows.push((journal(engine, name, n), singles, crash));
    }
    println!();
    println!(
        "| engine | schedules/s, `schedule_many` of {CHUNK} | its p50 / p99 wait (ms) | fsyncs | single `schedule` calls/s | their p50 / p99 wait (ms) | recovery timers/s after close | (s) | after SIGKILL: timers/s | (s) | disk B/timer (tables only) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    println!("| in memory | {mem:.0} | – | – | – | – | – | – | – | – | – |");
    for (f, (calls, c50, c99), (crashed, crash_s)) in &rows {
        println!(
            "| {} | {:.0} | {:.2} / {:.2} | {} | {calls:.0} | {c50:.2} / {c99:.2} | {:.0} | {:.2} | {:.0} | {crash_s:.2} | {:.1} ({:.1}) |",
            f.name,
            f.schedules_per_s,
            f.p50_ms,
            f.p99_ms,
            f.syncs,
            f.recovery_per_s,
            f.recovery_s,
            *crashed as f64 / crash_s,
            f.disk_per_timer,
            f.tables_per_timer
        );
    }
    println!();
    let (f, (_, _, c99), (crashed, crash_s)) = &rows[0];
    let other = rows.get(1).map(|(o, _, _)| o);
    let vs = |mine: f64, theirs: Option<f64>| match (other, theirs) {
        (Some(o), Some(t)) => format!("; {:.2}x {}", mine / t, o.name),
        _ => String::new(),
    };
    println!(
        "durable schedules/s: {:.0} ({}, {n} timers, {PRODUCERS} producers, schedule_many of {CHUNK}; single calls p99 wait {c99:.2} ms{}; {:.3}x in memory)",
        f.schedules_per_s,
        f.name,
        vs(f.schedules_per_s, other.map(|o| o.schedules_per_s)),
        f.schedules_per_s / mem
    );
    println!(
        "recovery: {:.0} timers/s ({}, {n} timers in {:.2} s after a clean close{}; after SIGKILL {crashed} in {crash_s:.2} s)",
        f.recovery_per_s,
        f.name,
        f.recovery_s,
        vs(f.recovery_per_s, other.map(|o| o.recovery_per_s))
    );
    println!(
        "disk: {:.1} B/timer ({}, 8 B values, {:.1} B/timer of it in write-ahead log{})",
        f.disk_per_timer,
        f.name,
        f.disk_per_timer - f.tables_per_timer,
        other.map_or(String::new(), |o| format!(
            "; {} {:.1} B/timer",
            o.name, o.disk_per_timer
        ))
    );
}
