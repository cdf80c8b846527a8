//! The parent: starts the redis-server (unless `--redis-url`), runs the source and target
//! hosts as child processes of this program, answers their step gates or kills them there,
//! restarts what it killed, tells them to finish once every queue has moved, and hands
//! their spools and sinks to the ledger.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};

use crate::cli::{Args, Kill, Who};
use crate::host::Msg;
use crate::host::{queue_names, sink_path, spool_path};
use crate::ledger::{self, Inputs};
use crate::spool::{self, Delivery, Record};
use crate::steps::Role;
use tickwheel_redis::chunk::Chunk;
use tickwheel_redis::keys::{DEFAULT_PREFIX, QueueKeys};
use tickwheel_testkit::TlsFiles;
use tickwheel_testkit::redis::RedisServer;

/// A run that takes longer than this is stuck (the defaults finish in seconds).
const STUCK: Duration = Duration::from_secs(300);

/// What a child's reader thread passes on.
enum Event {
    Line(String),
    Closed,
}

/// An event with the name and boot of the child it came from.
type Tagged = (String, u32, Event);

struct Proc {
    role: Role,
    boot: u32,
    child: Child,
    stdin: ChildStdin,
    done: bool,
    report: Option<(usize, usize)>,
}

struct Run<'a> {
    args: &'a Args,
    dir: &'a Path,
    url: String,
    /// This run's key prefix: a second run against the same `--redis-url` meets none of
    /// this one's records.
    prefix: String,
    server: Option<RedisServer>,
    procs: BTreeMap<String, Proc>,
    events: (Sender<Tagged>, Receiver<Tagged>),
    kills: Vec<Kill>,
    killed: BTreeSet<(String, u32)>,
    boots: BTreeMap<String, u32>,
    /// Every host that ran (a killed host not restarted still has a spool and a sink).
    names: BTreeSet<String>,
    /// The source, stopped with SIGSTOP at a gate, until the spare has imported a queue.
    stopped: Option<String>,
    /// The source, killed with `--spare`, until its offer has been imported.
    dead: Option<String>,
}

/// Runs the proof; `Ok(true)` when custody holds. Errors (a child failing, a stuck run) are
/// the caller's to print.
pub fn run(args: &Args, dir: &Path) -> Result<bool, String> {
    let (server, url) = match &args.redis_url {
        Some(url) => (None, url.clone()),
        None if args.tls => {
            let t = dir.join("tls");
            crate::tls::make(&t).map_err(|e| format!("certificates: {e}"))?;
            let s = RedisServer::start_tls(Some(dir), TlsFiles::in_dir(&t), true, &[])
                .map_err(|e| e.to_string())?;
            let url = s.url();
            (Some(s), url)
        }
        None => {
            let s = RedisServer::start(Some(dir)).map_err(|e| e.to_string())?;
            let url = s.url();
            (Some(s), url)
        }
    };
    let mut run = Run {
        args,
        dir,
        url,
        prefix: run_prefix(),
        server,
        procs: BTreeMap::new(),
        events: channel(),
        kills: args.kills.clone(),
        killed: BTreeSet::new(),
        boots: BTreeMap::new(),
        names: BTreeSet::new(),
        stopped: None,
        dead: None,
    };
    run.spawn("source", Role::Source)?;
    run.spawn("target", Role::Target)?;
    run.drive()?;
    if !run.kills.is_empty() {
        let left: Vec<String> = run.kills.iter().map(ToString::to_string).collect();
        say!("note: no process reached {}", left.join(", "));
    }
    let verdict = ledger::check(&run.inputs()?);
    println!("{}", verdict.last_line());
    Ok(verdict.ok())
}

/// `handoff-<unix ms>-<pid>`: unique per run on one host, and a valid key prefix.
fn run_prefix() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!("handoff-{ms}-{}", std::process::id())
}

impl Run<'_> {
    fn spawn(&mut self, name: &str, role: Role) -> Result<(), String> {
        let boot = self.boots.get(name).map_or(1, |b| b + 1);
        self.boots.insert(name.to_string(), boot);
        let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
        let a = self.args;
        let mut cmd = Command::new(exe);
        if a.spare || a.stop.is_some() {
            cmd.arg("--spare");
        }
        if a.tls {
            cmd.arg("--tls");
        }
        if let Some(skew) = a.faketime.iter().find(|s| s.role == role) {
            // The library itself, not the `faketime` wrapper: the PID must be the host's.
            cmd.env("LD_PRELOAD", faketime_lib()?)
                .env("FAKETIME", &skew.offset)
                .env("FAKETIME_NO_CACHE", "1");
        }
        let mut child = cmd
            .args([
                "--role",
                role.name(),
                "--name",
                name,
                "--boot",
                &boot.to_string(),
            ])
            .arg("--dir")
            .arg(self.dir)
            .args(["--redis-url", &self.url, "--prefix", &self.prefix])
            .args(["--queues", &a.queues.to_string()])
            .args([
                "--messages",
                &a.messages.to_string(),
                "--rate",
                &a.rate.to_string(),
            ])
            .args(["--max-delay-ms", &a.max_delay_ms.to_string()])
            .args(["--lease-ms", &a.lease_ms.to_string()])
            .args(["--offer-ttl-ms", &a.offer_ttl_ms.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start the {name} host: {e}"))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(format!("the {name} host has no pipes"));
        };
        let tx = self.events.0.clone();
        let who = name.to_string();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send((who.clone(), boot, Event::Line(line))).is_err() {
                    return;
                }
            }
            let _ = tx.send((who, boot, Event::Closed));
        });
        say!("{name}#{boot}: started (pid {})", child.id());
        self.names.insert(name.to_string());
        self.procs.insert(
            name.to_string(),
            Proc {
                role,
                boot,
                child,
                stdin,
                done: false,
                report: None,
            },
        );
        Ok(())
    }

    fn send(&mut self, name: &str, line: &str) {
        if let Some(p) = self.procs.get_mut(name) {
            // A child that died is seen through its closed output.
            let _ = writeln!(p.stdin, "{line}").and_then(|()| p.stdin.flush());
        }
    }

    /// Takes the first pending kill of `who` at `step`.
    fn take_kill(&mut self, who: Who, step: &str) -> bool {
        let at = self
            .kills
            .iter()
            .position(|k| k.who == who && k.step == step);
        at.map(|i| self.kills.remove(i)).is_some()
    }

    fn drive(&mut self) -> Result<(), String> {
        let started = Instant::now();
        let mut all = BTreeSet::new();
        let mut finishing = false;
        while self.procs.values().any(|p| !p.done) {
            let left = STUCK.saturating_sub(started.elapsed());
            let (name, boot, event) = match self.events.1.recv_timeout(left) {
                Ok(e) => e,
                Err(RecvTimeoutError::Timeout) => return Err(format!("stuck for {STUCK:?}")),
                Err(RecvTimeoutError::Disconnected) => return Err("lost the children".into()),
            };
            let Some(p) = self.procs.get(&name) else {
                continue;
            };
            if p.boot != boot {
                continue; // a killed process's last lines
            }
            let role = p.role;
            match event {
                Event::Line(line) => {
                    if let Some(step) = line.strip_prefix("step ") {
                        self.gate(&name, role, step)?;
                    } else if line == "all" {
                        all.insert(name.clone());
                    } else if let Some(r) = line.strip_prefix("report ") {
                        let report =
                            parse_report(r).ok_or_else(|| format!("{name}: bad report {r:?}"))?;
                        if let Some(p) = self.procs.get_mut(&name) {
                            p.report = Some(report);
                        }
                    } else if let Some(q) = line
                        .strip_prefix("moved ")
                        .or(line.strip_prefix("imported "))
                        .or(line.strip_prefix("skipped "))
                    {
                        say!("{name}#{boot}: {} {q}", &line[..line.len() - q.len() - 1]);
                        if role == Role::Spare && line.starts_with("imported ") {
                            self.resume_stopped()?;
                        }
                        // The dead source's offer was taken (by the spare, or claimed as
                        // usual once sealed): it may come back.
                        if line.starts_with("imported ")
                            && let Some(dead) = self.dead.take()
                        {
                            self.spawn(&dead, Role::Source)?;
                        }
                    }
                }
                Event::Closed => self.closed(&name)?,
            }
            let live: Vec<String> = self.procs.keys().cloned().collect();
            if !finishing && live.iter().all(|n| all.contains(n)) {
                finishing = true;
                say!("every queue moved: finishing");
                for n in &live {
                    self.send(n, "finish");
                }
            }
        }
        Ok(())
    }

    /// A child reached `step`: kill it (or the server) there, or let it go on.
    fn gate(&mut self, name: &str, role: Role, step: &str) -> Result<(), String> {
        if self.take_kill(Who::Host(role), step) {
            let Some(mut p) = self.procs.remove(name) else {
                return Ok(());
            };
            say!("{name}#{}: kill -9 at {step}", p.boot);
            let _ = p.child.kill();
            let _ = p.child.wait();
            self.killed.insert((name.to_string(), p.boot));
            if self.args.spare && role == Role::Target {
                say!("{name} stays dead: the spare takes over after the lease");
                return self.spawn("spare", Role::Spare);
            }
            if self.args.spare && role == Role::Source {
                say!("{name} stays dead until the spare has taken its queue over");
                self.dead = Some(name.to_string());
                return self.spawn("spare", Role::Spare);
            }
            return self.spawn(name, role);
        }
        if let Some(k) = self.args.stop
            && self.stopped.is_none()
            && k.who == Who::Host(role)
            && k.step == step
            && !self.procs.contains_key("spare")
            && let Some(p) = self.procs.get(name)
        {
            let pid = p.child.id();
            say!(
                "{name}#{}: SIGSTOP at {step}; the spare reclaims after the lease",
                p.boot
            );
            signal("STOP", pid)?;
            self.stopped = Some(name.to_string());
            return self.spawn("spare", Role::Spare);
        }
        if self.take_kill(Who::Redis, step)
            && let Some(s) = self.server.as_mut()
        {
            say!("redis-server: kill -9 after {name}'s {step}, restart from its AOF");
            s.restart().map_err(|e| e.to_string())?;
        }
        self.send(name, "go");
        Ok(())
    }

    /// The spare imported a queue: the stopped source resumes (SIGCONT) and passes its gate.
    fn resume_stopped(&mut self) -> Result<(), String> {
        let Some(name) = self.stopped.clone() else {
            return Ok(());
        };
        if let Some(p) = self.procs.get(&name) {
            say!("{name}#{}: SIGCONT", p.boot);
            signal("CONT", p.child.id())?;
        }
        self.send(&name, "go");
        // Stays Some: the source is stopped once.
        self.stopped = Some(String::new());
        Ok(())
    }

    fn closed(&mut self, name: &str) -> Result<(), String> {
        let Some(p) = self.procs.get_mut(name) else {
            return Ok(());
        };
        let status = p.child.wait().map_err(|e| format!("{name}: {e}"))?;
        p.done = true;
        if !status.success() {
            return Err(format!(
                "the {name} host (boot {}) failed: {status}",
                p.boot
            ));
        }
        if p.report.is_none() {
            return Err(format!("the {name} host ended without its report"));
        }
        Ok(())
    }

    fn inputs(&self) -> Result<Inputs, String> {
        let mut inputs = Inputs {
            killed: self.killed.clone(),
            tolerance_us: 1_000,
            ..Inputs::default()
        };
        for name in &self.names {
            inputs.spools.insert(
                name.clone(),
                spool::read(&spool_path(self.dir, name), Record::parse)?,
            );
            inputs
                .deliveries
                .extend(spool::read(&sink_path(self.dir, name), Delivery::parse)?);
            if let Some(r) = self.procs.get(name).and_then(|p| p.report) {
                inputs.reported.insert(name.clone(), r);
            }
        }
        inputs.in_redis = in_redis(
            &self.url,
            self.args.queues,
            self.args.tls.then(|| self.dir.join("tls")),
        )?;
        Ok(inputs)
    }
}

/// Sends a signal (`"STOP"`, `"CONT"`) to a child by its PID.
fn signal(sig: &str, pid: u32) -> Result<(), String> {
    tickwheel_testkit::send_signal(pid, sig).map_err(|e| e.to_string())
}

/// The ids of every chunk still in Redis, each chunk decoded and checked against the owner
/// record (queue, the offering epoch, index): a chunk that does not decode is an error.
fn in_redis(url: &str, queues: u32, tls: Option<PathBuf>) -> Result<Vec<u64>, String> {
    let fail = |e: redis::RedisError| format!("reading Redis: {e}");
    let client = tickwheel_testkit::pki::redis_client(url, tls.as_deref()).map_err(fail)?;
    let mut c = client.get_connection().map_err(fail)?;
    let mut ids = Vec::new();
    for q in queue_names(queues) {
        let keys = QueueKeys::new(DEFAULT_PREFIX, q.as_bytes());
        let chunks: Vec<(u64, Vec<u8>)> = redis::cmd("HGETALL")
            .arg(&keys.data)
            .query(&mut c)
            .map_err(fail)?;
        if chunks.is_empty() {
            continue;
        }
        let epoch: Option<u64> = redis::cmd("HGET")
            .arg(&keys.owner)
            .arg("source_epoch")
            .query(&mut c)
            .map_err(fail)?;
        let epoch = epoch.ok_or_else(|| format!("{q}: chunks in Redis without an offer"))?;
        for (index, bytes) in chunks {
            let chunk = Chunk::<u64, Msg>::decode(&bytes, q.as_bytes(), epoch, index)
                .map_err(|e| format!("{q}: chunk {index}: {e}"))?;
            ids.extend(chunk.entries.iter().map(|e| e.id));
        }
    }
    Ok(ids)
}

/// Debian's libfaketime (multi-threaded flavour), or `$FAKETIME_LIB`.
fn faketime_lib() -> Result<std::path::PathBuf, String> {
    if let Some(p) = std::env::var_os("FAKETIME_LIB") {
        return Ok(p.into());
    }
    let candidates = [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/faketime/libfaketimeMT.so.1",
    ];
    candidates
        .iter()
        .map(std::path::PathBuf::from)
        .find(|p| p.exists())
        .ok_or_else(|| {
            "--faketime needs libfaketime (apt-get install faketime) or FAKETIME_LIB".into()
        })
}

fn parse_report(r: &str) -> Option<(usize, usize)> {
    let (held, back) = r.split_once(' ')?;
    Some((held.parse().ok()?, back.parse().ok()?))
}
