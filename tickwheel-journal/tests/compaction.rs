//! Disk use follows the live timers under a 99 %-cancel churn, against the real engines.

use std::time::{Duration, Instant};

use tickwheel::sync::Cancel;
use tickwheel_journal::{Durability, Durable, Engine, Options, disk_usage};

#[test]
fn churn_keeps_the_journal_bounded() {
    #[cfg_attr(not(feature = "fjall"), allow(unused_mut))]
    let mut engines = vec![Engine::Redb];
    #[cfg(feature = "fjall")]
    engines.push(Engine::Fjall);
    for engine in engines {
        churn(engine);
    }
}

fn churn(engine: Engine) {
    let dir = tempfile::tempdir().expect("temp dir");
    let options = Options::new()
        .engine(engine)
        .durability(Durability::Async(Duration::from_millis(5)))
        .memtable_bytes(1 << 20);
    let j: Durable<u32, u64, u64> = Durable::open(dir.path(), options.clone()).expect("open");
    let at = Instant::now() + Duration::from_secs(3600);
    const ROUND: u64 = 10_000;
    const ROUNDS: u64 = 30;
    // Each round schedules 10 000 and cancels 99 % of them at once; the 1 % left are
    // cancelled a round later. About 100 live timers at any time, 600 000 written.
    let mut peak = 0u64;
    let mut peak_log = 0u64;
    let mut survivors: Vec<u64> = Vec::new();
    for round in 0..ROUNDS {
        let ids = round * ROUND..(round + 1) * ROUND;
        j.schedule_many(ids.clone().map(|id| (0, id, at, id)))
            .expect("journal");
        for id in survivors.drain(..) {
            assert_eq!(j.cancel(&id).expect("journal"), Cancel::Cancelled(id));
        }
        for id in ids {
            if id % 100 == 0 {
                survivors.push(id);
            } else {
                assert_eq!(j.cancel(&id).expect("journal"), Cancel::Cancelled(id));
            }
        }
        j.flush().expect("flush");
        if round >= ROUNDS / 2 {
            let usage = disk_usage(dir.path());
            peak = peak.max(usage.total - usage.log);
            peak_log = peak_log.max(usage.log);
        }
    }
    assert_eq!(j.len(), survivors.len());
    let written = j.writer_stats().records;
    assert_eq!(written, 2 * ROUND * ROUNDS - survivors.len() as u64);
    j.close().expect("close");
    let usage = disk_usage(dir.path());
    let after = usage.total - usage.log;
    // Without compaction the tables would hold every record written: 20 bytes or more each.
    let unbounded = 20 * written;
    // The bound of the tables: a constant for those in flight (generous: a few memtables'
    // worth) plus a generous 1 KiB per live timer. The write-ahead log (fjall's) is capped
    // by the engine at 64 MiB whatever the churn.
    let bound = 3 * (1u64 << 20) + 1024 * survivors.len() as u64;
    eprintln!(
        "{engine:?}: tables peak {peak} B in the second half, {after} B after close, bound {bound} B; log peak {peak_log} B; {written} records ({unbounded} B unbounded)"
    );
    assert!(unbounded > 3 * bound, "the workload is too small to tell");
    assert!(peak <= bound, "{engine:?}: peak {peak} > {bound}");
    assert!(after <= bound, "{engine:?}: after close {after} > {bound}");
    assert!(peak_log <= 64 << 20, "{engine:?}: log {peak_log}");
    // And what is left is exactly the live timers.
    let j: Durable<u32, u64, u64> = Durable::open(dir.path(), options).expect("reopen");
    assert_eq!(j.len(), survivors.len());
}
