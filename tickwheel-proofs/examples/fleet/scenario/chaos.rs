//! `--scenario chaos`: random faults for a given time while the producers run — kills,
//! pauses, joins, orderly leaves, etcd and redis-server restarts, cut, flapping and lossy
//! links, cuts in the middle of a handoff on either side — each followed by a settle (every queue owned once), then the usual check.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{Fleet, Side};

/// The faults chaos picks from.
#[derive(Debug, Clone, Copy)]
enum Fault {
    Join,
    Drain,
    Kill,
    Pause,
    EtcdRestart,
    RedisRestart,
    CutEtcd,
    CutRedis,
    CutBoth,
    Flap,
    Lossy,
    /// A join, and a cut of its target or of a source while queues move.
    CutMidHandoff(Side),
}

const FAULTS: [Fault; 13] = [
    Fault::Join,
    Fault::Drain,
    Fault::Kill,
    Fault::Pause,
    Fault::EtcdRestart,
    Fault::RedisRestart,
    Fault::CutEtcd,
    Fault::CutRedis,
    Fault::CutBoth,
    Fault::Flap,
    Fault::Lossy,
    Fault::CutMidHandoff(Side::Target),
    Fault::CutMidHandoff(Side::Source),
];

/// Fewest and most members chaos keeps running (a kill or pause needs a survivor; a join
/// stays within what one machine runs).
const MIN_MEMBERS: usize = 2;
const MAX_MEMBERS: usize = 6;

impl Fleet {
    /// Plays random faults until `duration` has passed (the fault running then finishes
    /// and settles); `seed` makes the sequence repeatable. Prints what it played.
    pub(super) async fn chaos(&mut self, duration: Duration, seed: u64) -> Result<(), String> {
        let mut rng = StdRng::seed_from_u64(seed);
        say!(
            "fleet: chaos for {} s, seed {seed} (repeat its choices with --seed {seed})",
            duration.as_secs()
        );
        let end = Instant::now() + duration;
        let mut played: BTreeMap<String, u32> = BTreeMap::new();
        while Instant::now() < end {
            let n = self.procs.len();
            let possible: Vec<Fault> = FAULTS
                .into_iter()
                .filter(|f| match f {
                    Fault::Join | Fault::CutMidHandoff(_) => n < MAX_MEMBERS,
                    Fault::Drain | Fault::Kill | Fault::Pause => n > MIN_MEMBERS,
                    _ => true,
                })
                .collect();
            let fault = possible[rng.random_range(0..possible.len())];
            let t = Instant::now();
            say!("fleet: chaos: {fault:?} ({n} members)");
            self.play_fault(fault, &mut rng).await?;
            say!(
                "fleet: chaos: {fault:?} done in {:.1} s",
                t.elapsed().as_secs_f64()
            );
            *played.entry(format!("{fault:?}")).or_default() += 1;
            // Traffic between faults, a random while.
            tokio::time::sleep(Duration::from_millis(rng.random_range(200..=2_000))).await;
        }
        let total: u32 = played.values().sum();
        let list: Vec<String> = played.iter().map(|(f, c)| format!("{f} {c}")).collect();
        say!("fleet: chaos played {total} faults: {}", list.join(", "));
        Ok(())
    }

    async fn play_fault(&mut self, fault: Fault, rng: &mut StdRng) -> Result<(), String> {
        let (etcd, redis) = self.ports()?;
        let n = self.procs.len();
        let away = self.lease + Duration::from_millis(rng.random_range(0..=1_500));
        let who = rng.random_range(0..n);
        match fault {
            Fault::Join => self.join().await,
            Fault::Drain => self.drain().await,
            Fault::Kill => self.kill().await,
            Fault::Pause => self.pause().await,
            Fault::EtcdRestart => self.etcd_restart().await,
            Fault::RedisRestart => self.redis_restart().await,
            Fault::CutEtcd => {
                self.cut_for("cut from etcd", &[who], &[etcd], None, away, true)
                    .await
            }
            Fault::CutRedis => {
                self.cut_for("cut from redis", &[who], &[redis], None, away, false)
                    .await
            }
            Fault::CutBoth => {
                self.cut_for("cut from both", &[who], &[etcd, redis], None, away, true)
                    .await
            }
            Fault::Flap => self.flap(who, &[etcd, redis]).await,
            Fault::CutMidHandoff(side) => self.cut_mid_handoff(side, away).await,
            Fault::Lossy => {
                let all: Vec<usize> = (0..n).collect();
                let share = rng.random_range(5..=30);
                let what = format!("lossy links ({share} %)");
                self.cut_for(&what, &all, &[etcd, redis], Some(share), away, false)
                    .await
            }
        }
    }

    /// Kill redis-server (SIGKILL) and start it again on its append-only file at once.
    async fn redis_restart(&mut self) -> Result<(), String> {
        let Some(redis) = self.servers.redis.as_mut() else {
            return Err("a redis-server restart needs the program's own".into());
        };
        say!("fleet: redis-server killed and started again");
        tokio::task::block_in_place(|| redis.restart()).map_err(|e| format!("redis: {e}"))?;
        self.settle("redis restart", None).await
    }
}
