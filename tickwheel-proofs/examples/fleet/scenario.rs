//! The scenario driver: starts the members, plays each step, waits for the fleet to settle
//! (every queue dispatched by exactly one live member, as their reports in Redis say), and
//! at the end waits for the spool to drain.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tickwheel_testkit::etcd::EtcdServer;
use tickwheel_testkit::redis::RedisServer;

use crate::cli::{Args, Scenario};
use crate::firewall::{Firewall, Rule};
use crate::orchestrate::End;
use crate::procs::{Proc, Spawner};
use crate::spool::Spool;

mod chaos;

/// Which end of a handoff a cut isolates.
#[derive(Debug, Clone, Copy)]
pub enum Side {
    /// The member the queues move to.
    Target,
    /// A member the queues move from.
    Source,
}

/// The servers the program started (dropped, and so stopped by PID, at the end).
pub struct Servers {
    pub etcd: Option<EtcdServer>,
    pub redis: Option<RedisServer>,
}

/// The running members and what they need.
pub struct Fleet {
    spawner: Spawner,
    spool: Spool,
    servers: Servers,
    procs: Vec<Proc>,
    /// Names of the members that run now (for progress lines).
    names: Arc<Mutex<Vec<String>>>,
    next: u32,
    queues: u32,
    lease: Duration,
    initial: u32,
    /// How long a step lets traffic run once the fleet has settled.
    dwell: Duration,
    /// How long a settle may take before the run fails.
    settle_limit: Duration,
    /// This run's nftables table (`--scenario partition`).
    firewall: Option<Firewall>,
    /// `--scenario chaos`: for how long, and the seed of its choices.
    chaos_for: Duration,
    chaos_seed: u64,
}

impl Fleet {
    pub fn new(spawner: Spawner, spool: Spool, args: &Args, servers: Servers) -> Fleet {
        let lease = Duration::from_millis(args.lease_ms);
        Fleet {
            spawner,
            spool,
            servers,
            procs: Vec::new(),
            names: Arc::new(Mutex::new(Vec::new())),
            next: 1,
            queues: args.queues,
            lease,
            initial: args.members,
            dwell: Duration::from_secs(3),
            settle_limit: Duration::from_secs(30) + lease * 6,
            firewall: None,
            chaos_for: Duration::from_secs(args.duration),
            chaos_seed: args.seed.unwrap_or_else(rand::random),
        }
    }

    /// Partitions are made with `firewall` (its table goes when the fleet drops).
    pub fn set_firewall(&mut self, firewall: Firewall) {
        self.firewall = Some(firewall);
    }

    pub fn names_handle(&self) -> Arc<Mutex<Vec<String>>> {
        self.names.clone()
    }

    fn publish_names(&self) {
        if let Ok(mut n) = self.names.lock() {
            *n = self.procs.iter().map(|p| p.name.clone()).collect();
        }
    }

    fn spawn(&mut self, name: &str) -> Result<(), String> {
        let p = self
            .spawner
            .spawn(name)
            .map_err(|e| format!("cannot start member {name}: {e}"))?;
        say!("fleet: started {name} (pid {})", p.pid());
        self.procs.push(p);
        self.publish_names();
        Ok(())
    }

    fn spawn_new(&mut self) -> Result<String, String> {
        let name = format!("m{}", self.next);
        self.next += 1;
        self.spawn(&name)?;
        Ok(name)
    }

    /// Starts the initial members, then plays `steps`.
    pub async fn play(&mut self, steps: &[Scenario]) -> Result<(), String> {
        for _ in 0..self.initial {
            self.spawn_new()?;
        }
        self.settle("start", None).await?;
        tokio::time::sleep(self.dwell).await;
        for step in steps {
            say!("fleet: step {}", step.name());
            let t = Instant::now();
            match step {
                Scenario::Join => self.join().await?,
                Scenario::Drain => self.drain().await?,
                Scenario::Kill => self.kill().await?,
                Scenario::Pause => self.pause().await?,
                Scenario::EtcdRestart => self.etcd_restart().await?,
                Scenario::Partition => self.partition().await?,
                Scenario::Chaos => self.chaos(self.chaos_for, self.chaos_seed).await?,
                Scenario::All => {}
            }
            say!(
                "fleet: step {} done in {:.1} s",
                step.name(),
                t.elapsed().as_secs_f64()
            );
            tokio::time::sleep(self.dwell).await;
        }
        Ok(())
    }

    async fn join(&mut self) -> Result<(), String> {
        let name = self.spawn_new()?;
        self.settle("join", Some(&name)).await
    }

    /// The most recently started member leaves in order.
    async fn drain(&mut self) -> Result<(), String> {
        let mut p = self.procs.pop().ok_or("no member to drain")?;
        self.publish_names();
        say!("fleet: {} (pid {}) leaves in order", p.name, p.pid());
        p.leave().map_err(|e| format!("{}: {e}", p.name))?;
        let limit = self.settle_limit;
        let status = tokio::task::block_in_place(|| p.wait(limit))
            .map_err(|e| format!("{} did not leave: {e}", p.name))?;
        if !status.success() {
            return Err(format!("{} left with {status}", p.name));
        }
        self.settle("drain", None).await
    }

    /// `kill -9` the first member; the others adopt its queues once its lease is over; then
    /// it starts again under the same name.
    async fn kill(&mut self) -> Result<(), String> {
        let mut p = self.procs.remove(0);
        self.publish_names();
        let t = Instant::now();
        say!("fleet: kill -9 {} (pid {})", p.name, p.pid());
        p.kill9().map_err(|e| format!("kill {}: {e}", p.name))?;
        let name = p.name.clone();
        drop(p);
        self.settle("kill", None).await?;
        say!(
            "fleet: {name}'s queues adopted {:.1} s after the kill (lease {} ms)",
            t.elapsed().as_secs_f64(),
            self.lease.as_millis()
        );
        self.spawn(&name)?;
        self.settle("restart after kill", Some(&name)).await
    }

    /// SIGSTOP a member past its lease (the others adopt its queues), then SIGCONT: it must
    /// fence itself, then rejoin.
    async fn pause(&mut self) -> Result<(), String> {
        let i = self.procs.len() / 2;
        let name = self.procs[i].name.clone();
        say!("fleet: SIGSTOP {name} (pid {})", self.procs[i].pid());
        self.procs[i]
            .stop()
            .map_err(|e| format!("stop {name}: {e}"))?;
        // The report expires, the others adopt once the lease and grace are over.
        let t = Instant::now();
        let others: Vec<String> = self
            .procs
            .iter()
            .filter(|p| p.name != name)
            .map(|p| p.name.clone())
            .collect();
        self.settle_among("pause", &others, None).await?;
        say!(
            "fleet: {name}'s queues adopted {:.1} s after SIGSTOP; it stays stopped {} ms more",
            t.elapsed().as_secs_f64(),
            self.lease.as_millis()
        );
        // Let the new owners dispatch for a while, so a member that went on without its
        // lease would overlap them.
        tokio::time::sleep(self.lease).await;
        say!("fleet: SIGCONT {name}");
        self.procs[i]
            .cont()
            .map_err(|e| format!("continue {name}: {e}"))?;
        self.settle("pause rejoin", Some(&name)).await
    }

    /// Stop etcd (SIGKILL) for longer than a lease, then start it again on its data.
    async fn etcd_restart(&mut self) -> Result<(), String> {
        let down = self.lease + Duration::from_secs(1);
        let Some(etcd) = self.servers.etcd.as_mut() else {
            return Err("etcd-restart needs the program's own etcd".into());
        };
        say!("fleet: etcd killed for {} ms", down.as_millis());
        tokio::task::block_in_place(|| etcd.kill()).map_err(|e| format!("etcd: {e}"))?;
        tokio::time::sleep(down).await;
        tokio::task::block_in_place(|| etcd.start_again()).map_err(|e| format!("etcd: {e}"))?;
        say!("fleet: etcd back");
        self.settle("etcd restart", None).await
    }

    /// The ports of the program's own etcd and redis-server, which partitions cut.
    fn ports(&self) -> Result<(u16, u16), String> {
        let etcd = self.servers.etcd.as_ref().map(EtcdServer::port);
        let redis = self.servers.redis.as_ref().map(RedisServer::port);
        match (etcd, redis) {
            (Some(etcd), Some(redis)) => Ok((etcd, redis)),
            _ => Err("partitions need the program's own etcd and redis-server".into()),
        }
    }

    /// Partitions, each healed before the next (see `Scenario::Partition`).
    async fn partition(&mut self) -> Result<(), String> {
        let (etcd, redis) = self.ports()?;
        let n = self.procs.len();
        let away = self.lease + Duration::from_secs(1);
        // Its lease lapses while it can still write to Redis: it must stop on its own clock.
        self.cut_for("cut from etcd", &[0], &[etcd], None, away, true)
            .await?;
        // It keeps its lease and cannot reach the spool or hand off; nobody may take over.
        self.cut_for("cut from redis", &[1], &[redis], None, away, false)
            .await?;
        self.cut_for("cut from both", &[n - 1], &[etcd, redis], None, away, true)
            .await?;
        self.flap(0, &[etcd, redis]).await?;
        let majority: Vec<usize> = (0..n / 2 + 1).collect();
        self.cut_for(
            "majority cut from etcd",
            &majority,
            &[etcd],
            None,
            away,
            true,
        )
        .await?;
        let all: Vec<usize> = (0..n).collect();
        let lossy = Duration::from_secs(4);
        self.cut_for(
            "lossy links (20 %)",
            &all,
            &[etcd, redis],
            Some(20),
            lossy,
            false,
        )
        .await?;
        self.cut_mid_handoff(Side::Target, away).await?;
        self.cut_mid_handoff(Side::Source, away).await
    }

    /// A member joins; as soon as it reports its first queue (the others' queues are still
    /// moving to it one by one), `side` is cut from etcd and Redis for `hold`: the new
    /// member (the handoffs' target) or the oldest member (a source).
    async fn cut_mid_handoff(&mut self, side: Side, hold: Duration) -> Result<(), String> {
        let (etcd, redis) = self.ports()?;
        let name = self.spawn_new()?;
        let deadline = Instant::now() + self.settle_limit;
        loop {
            let reports = self
                .spool
                .reports(std::slice::from_ref(&name))
                .await
                .map_err(|e| format!("reading {name}'s report: {e}"))?;
            if reports.get(&name).is_some_and(|(_, qs)| !qs.is_empty()) {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("{name} took no queue within the settle limit"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (who, what) = match side {
            Side::Target => (self.procs.len() - 1, "cut mid-handoff, target side"),
            Side::Source => (0, "cut mid-handoff, source side"),
        };
        self.cut_for(what, &[who], &[etcd, redis], None, hold, true)
            .await
    }

    fn rules(&self, who: &[usize], ports: &[u16], loss: Option<u8>) -> Result<Vec<Rule>, String> {
        let fw = self.firewall.as_ref().ok_or("no nftables table")?;
        let mut rules = Vec::new();
        for &i in who {
            let p = self.procs.get(i).ok_or("no such member")?;
            let uid = p.uid.ok_or("members do not run under ids of their own")?;
            for &port in ports {
                rules.push(fw.cut(uid, port, loss).map_err(|e| e.to_string())?);
            }
        }
        Ok(rules)
    }

    fn heal(&self, rules: Vec<Rule>) -> Result<(), String> {
        let fw = self.firewall.as_ref().ok_or("no nftables table")?;
        for r in rules {
            fw.heal(r).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Cuts members `who` from `ports` (a share `loss` of packets, or all), waits for the
    /// others to own every queue (`take_over`), holds the cut for `hold`, heals, settles.
    async fn cut_for(
        &mut self,
        what: &str,
        who: &[usize],
        ports: &[u16],
        loss: Option<u8>,
        hold: Duration,
        take_over: bool,
    ) -> Result<(), String> {
        let rules = self.rules(who, ports, loss)?;
        let cut: Vec<String> = who.iter().map(|&i| self.procs[i].name.clone()).collect();
        say!("fleet: {what}: [{}], ports {ports:?}", cut.join(" "));
        let t = Instant::now();
        if take_over {
            let others: Vec<String> = self
                .procs
                .iter()
                .filter(|p| !cut.contains(&p.name))
                .map(|p| p.name.clone())
                .collect();
            self.settle_among(what, &others, None).await?;
            say!(
                "fleet: {what}: the others own every queue {:.1} s after the cut",
                t.elapsed().as_secs_f64()
            );
        }
        // Let the others dispatch while the cut holds: a member that went on without its
        // lease would overlap them.
        tokio::time::sleep(hold).await;
        self.heal(rules)?;
        say!("fleet: {what}: healed");
        self.settle(&format!("{what}, healed"), None).await
    }

    /// Member `i`'s links to `ports` cut and healed every 300 ms for 4 s.
    async fn flap(&mut self, i: usize, ports: &[u16]) -> Result<(), String> {
        let name = self
            .procs
            .get(i)
            .map(|p| p.name.clone())
            .unwrap_or_default();
        say!("fleet: flapping links of {name}, ports {ports:?}");
        let end = Instant::now() + Duration::from_secs(4);
        while Instant::now() < end {
            let rules = self.rules(&[i], ports, None)?;
            tokio::time::sleep(Duration::from_millis(300)).await;
            self.heal(rules)?;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        self.settle("flapping links, healed", None).await
    }

    async fn settle(&mut self, what: &str, must_own: Option<&str>) -> Result<(), String> {
        let names: Vec<String> = self.procs.iter().map(|p| p.name.clone()).collect();
        self.settle_among(what, &names, must_own).await
    }

    /// Waits until every queue is dispatched by exactly one of `names` (as reported), each
    /// of them reports from its current process, and `must_own` (if given) owns a queue.
    async fn settle_among(
        &mut self,
        what: &str,
        names: &[String],
        must_own: Option<&str>,
    ) -> Result<(), String> {
        let deadline = Instant::now() + self.settle_limit;
        loop {
            for p in &mut self.procs {
                if !p.running() {
                    return Err(format!("member {} exited during {what}", p.name));
                }
            }
            let pids: HashMap<&str, u32> = self
                .procs
                .iter()
                .map(|p| (p.name.as_str(), p.pid()))
                .collect();
            // A slow answer (a loaded machine, a TLS reconnect) is retried until the deadline.
            let reports = match self.spool.reports(names).await {
                Ok(r) => r,
                Err(e) if Instant::now() <= deadline => {
                    say!("fleet: reading the members' reports: {e}; retrying");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                Err(e) => return Err(format!("reading the members' reports: {e}")),
            };
            let mut count = vec![0u32; self.queues as usize];
            let mut missing = Vec::new();
            for n in names {
                match reports.get(n) {
                    Some((pid, qs)) if pids.get(n.as_str()) == Some(pid) => {
                        for q in qs {
                            if let Some(c) = count.get_mut(*q as usize) {
                                *c += 1;
                            }
                        }
                    }
                    _ => missing.push(n.clone()),
                }
            }
            let uncovered = count.iter().filter(|c| **c == 0).count();
            let doubled = count.iter().filter(|c| **c > 1).count();
            let owner_ok =
                must_own.is_none_or(|m| reports.get(m).is_some_and(|(_, qs)| !qs.is_empty()));
            if missing.is_empty() && uncovered == 0 && doubled == 0 && owner_ok {
                return Ok(());
            }
            let last = format!(
                "{uncovered} queues without an owner, {doubled} reported by two, \
                 no report from [{}]{}",
                missing.join(" "),
                if owner_ok {
                    ""
                } else {
                    ", the new member owns nothing"
                }
            );
            if Instant::now() > deadline {
                return Err(format!(
                    "the fleet did not settle within {} s after {what}: {last}",
                    self.settle_limit.as_secs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// After production stopped: waits for the spool to drain (up to the longest delay plus
    /// 30 s), then stops the members (SIGSTOP) and reads what the check needs.
    pub async fn settle_end(&mut self, produced: u64, max_delay_ms: u64) -> Result<End, String> {
        let deadline =
            Instant::now() + Duration::from_millis(max_delay_ms) + Duration::from_secs(30);
        let err = |e: redis::RedisError| format!("redis: {e}");
        loop {
            let (delivered, _) = self.spool.stats().await.map_err(err)?;
            if delivered >= produced || Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let names: Vec<String> = self.procs.iter().map(|p| p.name.clone()).collect();
        let reports = self.spool.reports(&names).await.map_err(err)?;
        let owned: HashSet<u32> = reports
            .values()
            .flat_map(|(_, qs)| qs.iter().copied())
            .collect();
        // Frozen, the members neither dispatch nor deliver while the spool is read.
        for p in &mut self.procs {
            let _ = p.stop();
        }
        let delivered = self.spool.delivered().await.map_err(err)?;
        let leftover = self.spool.leftover(self.queues).await.map_err(err)?;
        let (_, rejected) = self.spool.stats().await.map_err(err)?;
        for p in &mut self.procs {
            let _ = p.cont();
        }
        Ok(End {
            delivered,
            leftover,
            owned,
            rejected,
        })
    }

    /// Every member exits (`quit`: its lease revoked; killed if it has not within 10 s);
    /// returns a summary of how they ended.
    pub async fn finish(&mut self) -> String {
        for p in &mut self.procs {
            let _ = p.quit();
        }
        let mut quit = 0;
        let mut killed = 0;
        let deadline = Instant::now() + Duration::from_secs(10);
        for mut p in self.procs.drain(..) {
            let limit = deadline.saturating_duration_since(Instant::now());
            match tokio::task::block_in_place(|| p.wait(limit)) {
                Ok(s) if s.success() => quit += 1,
                _ => {
                    let _ = p.kill9();
                    killed += 1;
                }
            }
        }
        self.publish_names();
        format!("at the end {quit} members quit, {killed} had to be killed")
    }
}
