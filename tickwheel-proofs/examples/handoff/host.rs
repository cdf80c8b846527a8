//! A host: the child process that holds queues in a `Scheduler`, keeps producing (the source)
//! and dispatching, and runs its side of the handoff through the step gates.
//!
//! Every timer is written to the spool before the scheduler holds it, and every delivery to
//! the sink before its `D` record: a kill anywhere leaves a spool that says what the host
//! still holds, and a delivery repeated after a restart carries the same (id, epoch).
//!
//! Standard output carries the gate lines and `moved QUEUE` / `imported QUEUE` / `all` /
//! `report HELD BACK` for the parent; progress and errors go to standard error.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::thread;
use std::time::{Duration, Instant};

use tickwheel::sync::Scheduler;

use crate::flow;
use crate::spool::{self, Delivery, Entry, Holdings, Log, Record};
use crate::steps::{Gates, Role};

/// A timer's value: the epoch its host accepted or imported it under, and its deadline on
/// the reference clock (both stamped in the spool).
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct Msg {
    pub epoch: u64,
    pub deadline_us: u64,
}

pub type Sched = Scheduler<String, u64, Msg>;

/// A host's settings, from the parent's command line.
pub struct Config {
    pub role: Role,
    pub name: String,
    pub boot: u32,
    pub dir: PathBuf,
    pub queues: u32,
    pub messages: u32,
    pub rate: u32,
    pub max_delay: Duration,
    pub lease: Duration,
    pub offer_ttl: Duration,
    /// Offers go to anyone (a spare may take them), not to the target by name.
    pub spare_mode: bool,
    /// The run's Redis key prefix.
    pub prefix: String,
    /// The run's CA and client identity (`--tls`).
    pub tls: Option<PathBuf>,
}

/// The queue names of a run.
pub fn queue_names(n: u32) -> Vec<String> {
    (0..n).map(|i| format!("dest-{i}.example")).collect()
}

pub fn spool_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.spool"))
}

/// Written once the source's `--messages` are in its spool: a source killed before that
/// (at `acquire`, say) loads them on its next boot instead.
pub fn loaded_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.loaded"))
}

pub fn sink_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.sink"))
}

/// Local instants against the reference clock, anchored once per process.
#[derive(Clone, Copy)]
pub struct RefClock {
    local: Instant,
    reference_us: u64,
}

impl RefClock {
    /// Anchors the clock: `local` read before the reference, so reference times computed
    /// from local ones come out late, never early.
    pub fn anchor(local: Instant, reference_us: u64) -> RefClock {
        RefClock {
            local,
            reference_us,
        }
    }

    /// Anchors on Redis `TIME`, the one clock every host reads the same (host clocks may be
    /// skewed: only their rates are trusted, for the short life of a run). A server being
    /// restarted (a `redis:STEP` kill) is waited for: every error is retried, on a new
    /// connection, for up to [`RIDE_OUT`].
    pub fn from_redis(url: &str, tls: Option<&Path>) -> Result<RefClock, String> {
        let client =
            tickwheel_testkit::pki::redis_client(url, tls).map_err(|e| fail("redis url", e))?;
        let until = Instant::now() + RIDE_OUT;
        loop {
            match Self::anchor_once(&client) {
                Ok(clock) => return Ok(clock),
                Err(e) if Instant::now() >= until => {
                    return Err(format!("redis unreachable for {RIDE_OUT:?}: {e}"));
                }
                Err(_) => thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Of ten readings on one connection, the one with the shortest round trip: the anchor's
    /// error (the local instant read before the reference) is at most that round trip.
    fn anchor_once(client: &redis::Client) -> Result<RefClock, redis::RedisError> {
        let mut c = client.get_connection()?;
        let mut best: Option<(Duration, RefClock)> = None;
        for _ in 0..10 {
            let local = Instant::now();
            let (secs, us): (u64, u64) = redis::cmd("TIME").query(&mut c)?;
            let rtt = local.elapsed();
            let reference = secs.saturating_mul(1_000_000).saturating_add(us);
            if best.is_none_or(|(b, _)| rtt < b) {
                best = Some((rtt, RefClock::anchor(local, reference)));
            }
        }
        best.map(|(_, clock)| clock)
            .ok_or_else(|| redis::RedisError::from((redis::ErrorKind::Client, "no TIME reading")))
    }

    pub fn reference_us(&self, at: Instant) -> u64 {
        let d = at.saturating_duration_since(self.local);
        self.reference_us.saturating_add(d.as_micros() as u64)
    }

    pub fn local(&self, us: u64) -> Instant {
        let d = Duration::from_micros(us.saturating_sub(self.reference_us));
        self.local
            .checked_add(d)
            .unwrap_or(self.local + Duration::from_secs(86_400 * 365))
    }
}

/// How long a host rides out an unreachable Redis (a restart from its AOF) before it gives
/// up: every Redis interaction is retried, with the same token, for this long.
pub const RIDE_OUT: Duration = Duration::from_secs(30);

/// The shared state of a host process.
pub struct Host {
    pub cfg: Config,
    pub sched: Arc<Sched>,
    pub spool: Log,
    pub sink: Log,
    pub clock: RefClock,
    pub gates: Gates,
    /// Producers hold it shared across spool-then-schedule; a freeze holds it exclusively
    /// while it writes its `F` record, so the spool's order is the scheduler's.
    pub freeze_lock: RwLock<()>,
    pub stop_producing: AtomicBool,
    pub stop_dispatching: AtomicBool,
    /// Each queue's epoch as this host holds it (stamped on accepted timers).
    pub epochs: RwLock<BTreeMap<String, u64>>,
}

fn fail(what: &str, e: impl std::fmt::Display) -> String {
    format!("{what}: {e}")
}

impl Host {
    pub fn open(cfg: Config, clock: RefClock, gates: Gates) -> Result<Arc<Host>, String> {
        let spool = Log::open(&spool_path(&cfg.dir, &cfg.name)).map_err(|e| fail("spool", e))?;
        let sink = Log::open(&sink_path(&cfg.dir, &cfg.name)).map_err(|e| fail("sink", e))?;
        Ok(Arc::new(Host {
            cfg,
            sched: Arc::new(
                Scheduler::builder()
                    .resolution(Duration::from_millis(1))
                    .build(),
            ),
            spool,
            sink,
            clock,
            gates,
            freeze_lock: RwLock::new(()),
            stop_producing: AtomicBool::new(false),
            stop_dispatching: AtomicBool::new(false),
            epochs: RwLock::new(BTreeMap::new()),
        }))
    }

    pub fn set_epoch(&self, q: &str, epoch: u64) {
        let mut m = self.epochs.write().unwrap_or_else(|p| p.into_inner());
        m.insert(q.to_string(), epoch);
    }

    pub fn epoch(&self, q: &str) -> u64 {
        let m = self.epochs.read().unwrap_or_else(|p| p.into_inner());
        m.get(q).copied().unwrap_or(1)
    }

    /// Appends `records` to the spool (durably, as [`Log::append`]).
    pub fn log(&self, records: &[Record]) -> Result<(), String> {
        self.spool.append(records).map_err(|e| fail("spool", e))
    }

    /// What the spool says this host holds (a fresh host: nothing).
    pub fn holdings(&self) -> Result<Holdings, String> {
        let records = spool::read(&spool_path(&self.cfg.dir, &self.cfg.name), Record::parse)?;
        Ok(Holdings::replay(&records))
    }

    /// A restarted host first records the deliveries its sink has and its spool lacks (a kill
    /// between the two writes): those timers were delivered, and are not reloaded.
    pub fn record_sink(&self) -> Result<usize, String> {
        let sink = spool::read(&sink_path(&self.cfg.dir, &self.cfg.name), Delivery::parse)?;
        let owed = spool::unrecorded_deliveries(&self.holdings()?, &sink);
        self.log(&owed)?;
        Ok(owed.len())
    }

    /// Puts what the spool holds back in the scheduler (deadlines past: due now).
    pub fn reload(&self, held: &Holdings) -> Result<usize, String> {
        for e in held.held.values() {
            let at = self.clock.local(e.deadline_us);
            let msg = Msg {
                epoch: e.epoch,
                deadline_us: e.deadline_us,
            };
            self.sched
                .schedule(e.queue.clone(), e.id, at, msg)
                .map_err(|_| format!("reload of id {} refused", e.id))?;
        }
        Ok(held.held.len())
    }

    /// Accepts a batch of new timers: spooled first, then scheduled. Refused ones (a frozen
    /// queue) are handed back and recorded so.
    pub fn accept(&self, batch: &[(String, u64, Instant)]) -> Result<usize, String> {
        let _shared = self.freeze_lock.read().unwrap_or_else(|p| p.into_inner());
        let records: Vec<Record> = batch
            .iter()
            .map(|(q, id, at)| {
                let deadline_us = self.clock.reference_us(*at);
                Record::Accepted(Entry {
                    id: *id,
                    queue: q.clone(),
                    epoch: self.epoch(q),
                    deadline_us,
                })
            })
            .collect();
        self.log(&records)?;
        let mut back = Vec::new();
        for ((q, id, at), r) in batch.iter().zip(&records) {
            let Record::Accepted(e) = r else { continue };
            let msg = Msg {
                epoch: e.epoch,
                deadline_us: e.deadline_us,
            };
            if self.sched.schedule(q.clone(), *id, *at, msg).is_err() {
                back.push(Record::HandedBack { id: *id });
            }
        }
        self.log(&back)?;
        Ok(back.len())
    }

    /// Delivers due timers until asked to stop: each batch's sink lines are fsync'd before
    /// its `D` records, and the `Due`s stay in flight until both are on disk.
    pub fn dispatch(&self) -> Result<(), String> {
        let host = self.cfg.name.clone();
        while !self.stop_dispatching.load(Ordering::Acquire) {
            let batch: Vec<_> = self.sched.pop_due(Instant::now(), 512).collect();
            if batch.is_empty() {
                thread::sleep(Duration::from_millis(2));
                continue;
            }
            let now_us = self.clock.reference_us(Instant::now());
            let lines: Vec<Delivery> = batch
                .iter()
                .map(|d| Delivery {
                    id: *d.id(),
                    epoch: d.value().epoch,
                    host: host.clone(),
                    boot: self.cfg.boot,
                    delivered_us: now_us,
                    deadline_us: d.value().deadline_us,
                })
                .collect();
            self.sink.append(&lines).map_err(|e| fail("sink", e))?;
            let done: Vec<Record> = lines
                .iter()
                .map(|d| Record::Done {
                    id: d.id,
                    epoch: d.epoch,
                })
                .collect();
            self.log(&done)?;
            drop(batch);
        }
        Ok(())
    }

    /// Waits (at most `limit`) until the scheduler is empty, then stops the dispatcher.
    pub fn settle(&self, limit: Duration) {
        let until = Instant::now() + limit;
        while !self.sched.is_empty() && Instant::now() < until {
            thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Runs a host process to its end; the error is printed by the caller (exit 1).
pub fn run(cfg: Config, url: &str) -> Result<(), String> {
    let gates = Gates::from_stdin();
    let role = cfg.role;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| fail("tokio", e))?;
    let clock = RefClock::from_redis(url, cfg.tls.as_deref())?;
    let host = Host::open(cfg, clock, gates)?;
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i128);
    let off = (wall - i128::from(host.clock.reference_us(Instant::now()))) as f64 / 1e6;
    let label = format!("{}#{}", host.cfg.name, host.cfg.boot);
    say!("{label}: host clock {off:+.1} s off the reference clock");
    let custody = flow::connect(&rt, url, &host)?;
    let recorded = host.record_sink()?;
    if recorded > 0 {
        say!("{label}: {recorded} delivery(ies) in the sink recorded in the spool");
    }
    let queues = queue_names(host.cfg.queues);
    // What is this host's: the first source acquires every queue; a restarted host
    // reconciles its spool with the owner records before it reloads anything.
    let (mut todo, claims) = match role {
        Role::Source if host.cfg.boot == 1 => {
            for q in &queues {
                let a = rt
                    .block_on(custody.acquire(q.as_bytes()))
                    .map_err(|e| fail("acquire", e))?;
                host.set_epoch(q, a.record.epoch);
                host.gates.pass("acquire");
            }
            (queues.clone(), Vec::new())
        }
        Role::Source => (flow::recover_source(&rt, &host, &custody)?, Vec::new()),
        Role::Target | Role::Spare if host.cfg.boot == 1 => (queues.clone(), Vec::new()),
        Role::Target | Role::Spare => (queues.clone(), flow::recover_target(&rt, &host, &custody)?),
    };
    let held = host.holdings()?;
    for q in &held.moved {
        // No longer this host's: producers get their values back.
        let _ = host.sched.freeze_queue(q);
    }
    let reloaded = host.reload(&held)?;
    if reloaded > 0 {
        say!("{label}: reloaded {reloaded} timers from the spool");
    }
    let dispatcher = {
        let h = host.clone();
        thread::spawn(move || h.dispatch())
    };
    // The source holds the queues' messages before the handoff starts.
    let loaded = loaded_path(&host.cfg.dir, &host.cfg.name);
    if role == Role::Source && !loaded.exists() {
        initial_load(&host)?;
        std::fs::File::create(&loaded)
            .and_then(|f| f.sync_all())
            .map_err(|e| fail("load marker", e))?;
    }
    let producer = (role == Role::Source).then(|| {
        let h = host.clone();
        thread::spawn(move || produce(&h))
    });
    for (q, record) in claims {
        let inc = custody
            .resume(q.clone(), record)
            .map_err(|e| fail("resume", e))?;
        flow::take_in(&rt, &host, inc)?;
        todo.retain(|t| *t != q);
        host.gates.line(&format!("imported {q}"));
    }
    for q in &todo {
        let word = if role == Role::Source {
            flow::offer(&rt, &host, &custody, q)?;
            "moved"
        } else if flow::receive(&rt, &host, &custody, q)? {
            "imported"
        } else {
            "skipped"
        };
        host.gates.line(&format!("{word} {q}"));
    }
    host.gates.line("all");
    while !host.gates.finishing() {
        thread::sleep(Duration::from_millis(10));
    }
    host.stop_producing.store(true, Ordering::Release);
    if let Some(p) = producer {
        p.join()
            .map_err(|_| "the producer panicked".to_string())??;
    }
    host.settle(host.cfg.max_delay + Duration::from_secs(1));
    host.stop_dispatching.store(true, Ordering::Release);
    dispatcher
        .join()
        .map_err(|_| "the dispatcher panicked".to_string())??;
    let h = host.holdings()?;
    if h.held.len() != host.sched.len() {
        return Err(format!(
            "the spool holds {} timers, the scheduler {}",
            h.held.len(),
            host.sched.len()
        ));
    }
    host.gates
        .line(&format!("report {} {}", h.held.len(), h.handed_back.len()));
    Ok(())
}

/// New timers for the source's queues: unique ids across boots (the boot in the high bits,
/// a second series for the initial load), deadlines up to `--max-delay-ms` from now.
struct Maker {
    queues: Vec<String>,
    next: u64,
    rng: Lcg,
    max_us: u64,
}

impl Maker {
    fn new(host: &Host, series: u64) -> Maker {
        let next = (u64::from(host.cfg.boot) << 40) | (series << 39);
        Maker {
            queues: queue_names(host.cfg.queues),
            next,
            rng: Lcg(next | 1),
            max_us: host.cfg.max_delay.as_micros().max(1) as u64,
        }
    }

    fn make(&mut self, n: u32) -> Vec<(String, u64, Instant)> {
        let now = Instant::now();
        (0..n)
            .map(|_| {
                self.next += 1;
                let q = self.queues[(self.rng.next() % self.queues.len() as u64) as usize].clone();
                (
                    q,
                    self.next,
                    now + Duration::from_micros(self.rng.next() % self.max_us),
                )
            })
            .collect()
    }
}

/// `--messages` timers, accepted in batches of 1 000.
fn initial_load(host: &Host) -> Result<(), String> {
    let mut maker = Maker::new(host, 1);
    let mut left = host.cfg.messages;
    while left > 0 {
        let n = left.min(1000);
        host.accept(&maker.make(n))?;
        left -= n;
    }
    Ok(())
}

/// The source's producers: `--rate` timers a second, in batches every 20 ms, until finishing.
fn produce(host: &Host) -> Result<(), String> {
    let mut maker = Maker::new(host, 0);
    let per_tick = (host.cfg.rate / 50).max(u32::from(host.cfg.rate > 0));
    while !host.stop_producing.load(Ordering::Acquire) {
        thread::sleep(Duration::from_millis(20));
        if per_tick > 0 {
            host.accept(&maker.make(per_tick))?;
        }
    }
    Ok(())
}

/// A small deterministic generator (no seed file, no dependency).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 11
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use tickwheel_testkit::redis::start_for_test;

    /// A proxy to `port` that, for its first `drops` connections, accepts and resets them
    /// (a server going down mid-conversation), then forwards.
    fn flaky_proxy(port: u16, drops: usize) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let local = listener.local_addr().unwrap().port();
        thread::spawn(move || {
            for (n, client) in listener.incoming().enumerate() {
                let Ok(client) = client else { return };
                if n < drops {
                    drop(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", port)) else {
                    return;
                };
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    thread::spawn(move || std::io::copy(&mut from, &mut to));
                }
            }
        });
        local
    }

    /// A host that starts while Redis is going down and coming back (its connections reset)
    /// waits for it instead of failing.
    #[test]
    fn the_clock_anchor_rides_out_a_restarting_redis() {
        let Some(server) = start_for_test() else {
            return;
        };
        let port = flaky_proxy(server.port(), 5);
        let clock = RefClock::from_redis(&format!("redis://127.0.0.1:{port}/"), None).unwrap();
        assert!(clock.reference_us(Instant::now()) > 1_600_000_000_000_000);
    }
}
