//! A member process (`fleet member --name NAME …`): joins the fleet, keeps its queues'
//! timers in a `Scheduler`, and runs one loop that
//!
//! 1. notices every new `(queue, token)` in [`Member::owned`] and re-reads that queue's
//!    spool, scheduling what the scheduler lacks (the recovery hook covers an adoption; this
//!    also covers messages that reached a queue's previous owner while the queue was frozen
//!    for its handoff), remembering the inbox position the read was taken at;
//! 2. schedules the inbox's new messages of the queues it owns, past that position;
//! 3. hands out due timers through the fence ([`Member::pop_due`]), logs each
//!    `(queue, token, id, CLOCK_MONOTONIC)` and then delivers them with the spool's script,
//!    which refuses a token lower than the queue's highest;
//! 4. reports the queues it may dispatch now (fence valid) to Redis every 200 ms.
//!
//! All of it in one task: no `Due` of this member is in flight while it re-reads a spool, so
//! a re-read never schedules an id this member is delivering. `leave` on standard input makes
//! it leave the fleet in order (its queues handed over); `quit` or the end of its input makes
//! it exit at once (its lease revoked, the others adopt).
//!
//! `--plant no-lease-check` replaces step 3 with a dispatcher that keeps the queues' timers
//! itself (drained out of the scheduler) and dispatches them under the last token seen for
//! each queue, with no lease check: the fault the ownership check must catch.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tickwheel::sync::{FrozenEntry, ScheduleError, Scheduler};
use tickwheel_fleet::{Acquisition, FleetEvent, FleetOptions, Member, RecoveryError};

use crate::cli::{MemberArgs, Plant};
use crate::dlog::{self, mono_ns};
use crate::intake::Intake;
use crate::spool::{Delivery, Spool, StreamPos};

type Sched = Scheduler<String, u64, u64>;

/// Queue `n`'s name.
pub fn queue_name(n: u32) -> String {
    format!("q{n}")
}

/// The index of a queue name, `None` for a name this run does not use.
pub fn queue_index(name: &str, queues: u32) -> Option<u32> {
    name.strip_prefix('q')
        .filter(|d| !d.starts_with('0') || *d == "0")
        .and_then(|d| d.parse().ok())
        .filter(|n| *n < queues)
}

/// The local `Instant` of CLOCK_MONOTONIC time `at_ns` (the clock `Instant` reads).
pub fn instant_of(at_ns: u64) -> Instant {
    let now = Instant::now();
    let now_ns = mono_ns();
    if at_ns >= now_ns {
        now + Duration::from_nanos(at_ns - now_ns)
    } else {
        now.checked_sub(Duration::from_nanos(now_ns - at_ns))
            .unwrap_or(now)
    }
}

/// Schedules message `id` of queue `q` (owned under `token`). Already pending or in flight:
/// nothing to add. Refused by a frozen queue (a handoff under way): kept in `frozen_out`.
fn add(
    scheduler: &Sched,
    frozen_out: &mut Vec<(u32, u64, u64, u64)>,
    q: u32,
    token: u64,
    id: u64,
    at_ns: u64,
) {
    if let Err(ScheduleError::Frozen(_)) =
        scheduler.schedule(queue_name(q), id, instant_of(at_ns), at_ns)
    {
        frozen_out.push((q, token, id, at_ns));
    }
}

/// The member process's main; an `Err` is printed by the caller (exit 1).
pub fn run(args: MemberArgs) -> Result<(), String> {
    // The library's warnings (a failed placement round, a failed rejoin) on standard error.
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_target(false)
        .with_writer(std::io::stderr)
        .try_init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    rt.block_on(run_async(args))
}

async fn run_async(args: MemberArgs) -> Result<(), String> {
    let pid = std::process::id();
    let label = format!("{}#{pid}", args.name);
    let mut spool = Spool::connect(&args.redis_url, &args.redis_prefix, args.tls_dir.as_deref())
        .await
        .map_err(|e| format!("{label}: redis: {e}"))?;
    // Everything older than this position is in the spool, which each acquisition reads.
    let mut cursor = spool
        .inbox_tail()
        .await
        .map_err(|e| format!("{label}: redis: {e}"))?;
    let scheduler: Arc<Sched> = Arc::new(Scheduler::new());
    let queues = args.queues;
    let journal = args.journal.is_some();
    let recovery_spool = spool.clone();
    // `--journal redis`: no recovery hook (it returns nothing), the journal alone.
    let recovery = move |queue: String| {
        let mut spool = recovery_spool.clone();
        async move {
            let Some(q) = queue_index(&queue, queues).filter(|_| !journal) else {
                return Ok(Vec::new());
            };
            let (_, entries) = spool
                .sync_read(q)
                .await
                .map_err(|e| Box::new(e) as RecoveryError)?;
            Ok(entries
                .into_iter()
                .map(|(id, at_ns)| FrozenEntry {
                    id,
                    at: instant_of(at_ns),
                    value: at_ns,
                })
                .collect())
        }
    };
    let mut options = FleetOptions::new(args.etcd_url.clone(), args.redis_url.clone())
        .with_lease_ttl(Duration::from_millis(args.lease_ms));
    options.prefix = args.prefix.clone();
    if journal {
        options.journal = Some(tickwheel_redis::journal::JournalOptions::default());
    }
    // The handoffs' Redis keys under this run's prefix too.
    options.redis.prefix = format!("{}custody", args.redis_prefix);
    if let Some(dir) = &args.tls_dir {
        options.etcd_tls = Some(crate::tls::etcd(dir).map_err(|e| format!("{label}: {e}"))?);
        options.redis.tls = Some(crate::tls::redis(dir).map_err(|e| format!("{label}: {e}"))?);
    }
    // Same name after a crash: refused until the old lease has expired (at most a TTL).
    options.join_wait = Duration::from_millis(args.lease_ms * 2);
    let member = Member::join(options, &args.name, scheduler.clone(), recovery)
        .await
        .map_err(|e| format!("{label}: join: {e}"))?;
    say!("{label}: joined (boot {})", member.boot_id());
    let mut events = member.events();
    let event_label = label.clone();
    // Timers the adoptions imported (the journal's alone with `--journal`: no hook).
    let recovered = Arc::new(AtomicU64::new(0));
    let recovered_count = recovered.clone();
    tokio::spawn(async move {
        loop {
            match events.recv().await {
                Ok(FleetEvent::Fenced) => say!("{event_label}: fenced (lease lost)"),
                Ok(FleetEvent::Rejoined { .. }) => say!("{event_label}: rejoined"),
                Ok(FleetEvent::Acquired {
                    how: Acquisition::Adopted { recovered: n, .. },
                    ..
                }) => {
                    recovered_count.fetch_add(n as u64, Ordering::SeqCst);
                }
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(_) => return,
            }
        }
    });
    // `leave`: hand the queues over, then exit; `quit` or the end of input: exit at once
    // (dropping the member revokes its lease, the others adopt).
    let stop = Arc::new(AtomicBool::new(false));
    let leave = Arc::new(AtomicBool::new(false));
    let (stop_flag, leave_flag) = (stop.clone(), leave.clone());
    std::thread::spawn(move || {
        let mut line = String::new();
        loop {
            line.clear();
            match std::io::stdin().read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) if line.trim() == "leave" => {
                    leave_flag.store(true, Ordering::SeqCst);
                    break;
                }
                Ok(_) if line.trim() == "quit" => break,
                Ok(_) => {}
            }
        }
        stop_flag.store(true, Ordering::SeqCst);
    });

    let mut log = dlog::Writer::create(&args.dir, &args.name, pid)
        .map_err(|e| format!("{label}: dispatch log: {e}"))?;
    let fence = member.fence();
    // Per owned queue: the token and the inbox position its spool was read at.
    let mut synced: HashMap<u32, (u64, StreamPos)> = HashMap::new();
    // The last token seen per queue (only the planted fault dispatches with it).
    let mut last_token: HashMap<u32, u64> = HashMap::new();
    // The planted fault's own timers: (deadline ns, queue, id).
    let mut mirror: std::collections::BTreeSet<(u64, u32, u64)> = Default::default();
    let mut next_report = Instant::now();
    let mut batches: HashMap<u32, (u64, Vec<u64>)> = HashMap::new();
    // (queue, token, id, deadline) refused by a frozen queue, retried while the token holds.
    let mut frozen_out: Vec<(u32, u64, u64, u64)> = Vec::new();
    // Deliveries the spool refused for a stale token (the first is shown, then the count).
    let mut refused = 0u64;
    let mut refused_shown = 0u64;
    let mut recovered_shown = 0u64;
    // `--journal redis`: the intake of the owned queues, and when every queue's journaled
    // position was last raised.
    let mut intake = journal.then(Intake::default);
    let mut next_raise_all = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        // 1. New acquisitions: re-read their spool.
        let owned: HashMap<u32, u64> = member
            .owned()
            .into_iter()
            .filter_map(|(q, t)| queue_index(&q, queues).map(|i| (i, t)))
            .collect();
        synced.retain(|q, (t, _)| owned.get(q) == Some(t));
        // Messages a frozen queue refused: the queue's next owner re-reads them from the
        // spool; if the handoff was called off instead (same token, unfrozen), they are ours.
        frozen_out.retain(|(q, t, _, _)| owned.get(q) == Some(t));
        for (q, token, id, at_ns) in std::mem::take(&mut frozen_out) {
            add(&scheduler, &mut frozen_out, q, token, id, at_ns);
        }
        if let Some(intake) = &mut intake {
            intake.retain(&owned);
            let new: Vec<(u32, u64)> = owned
                .iter()
                .filter(|(q, t)| !intake.has(**q, **t))
                .map(|(q, t)| (*q, *t))
                .collect();
            for (&q, &token) in &owned {
                last_token.insert(q, token);
            }
            if let Err(e) = intake.acquire(&mut spool, &new).await {
                say!("{label}: inbox read of {} new queues: {e}", new.len());
            }
        }
        for (&q, &token) in owned.iter().filter(|_| !journal) {
            last_token.insert(q, token);
            if synced.contains_key(&q) {
                continue;
            }
            match spool.sync_read(q).await {
                Ok((pos, entries)) => {
                    for (id, at_ns) in entries {
                        add(&scheduler, &mut frozen_out, q, token, id, at_ns);
                    }
                    synced.insert(q, (token, pos));
                }
                Err(e) => say!("{label}: spool read of q{q}: {e}"),
            }
        }
        // 2. New messages of owned queues.
        match spool.read_inbox(cursor, 2_000).await {
            Ok(batch) => {
                if let Some(intake) = &mut intake {
                    intake.inbound(cursor, &batch);
                }
                for m in &batch {
                    if let Some((token, pos)) = synced.get(&m.queue)
                        && m.pos > *pos
                    {
                        add(&scheduler, &mut frozen_out, m.queue, *token, m.id, m.at_ns);
                    }
                }
                if let Some(last) = batch.last() {
                    cursor = last.pos;
                }
            }
            Err(e) => say!("{label}: inbox: {e}"),
        }
        // Journal what came in; raise the journaled positions once acknowledged.
        if let Some(intake) = &mut intake {
            intake.submit(&member);
            intake.settle(Duration::from_secs(1)).await;
            let all = Instant::now() >= next_raise_all;
            let through = intake.through(all);
            match spool.raise_journaled(&through).await {
                Ok(()) => {
                    intake.raised(&through);
                    if all {
                        next_raise_all = Instant::now() + Duration::from_secs(1);
                    }
                }
                Err(e) => say!("{label}: journaled positions: {e}"),
            }
        }
        // 3. Dispatch: log first, then deliver. The time is read before the fence check, so
        // a member that checks its fence never logs a time past its lease end.
        let t_ns = mono_ns();
        let now = Instant::now();
        // (token, queue, id) to deliver; `held` keeps each hand-out until its delivery is
        // done (in flight until then: nothing else changes the id meanwhile).
        let mut dues: Vec<(u64, u32, u64)> = Vec::new();
        // Each id's deadline (CLOCK_MONOTONIC ns), to schedule it again after a failed delivery.
        let mut deadlines: HashMap<u64, u64> = HashMap::new();
        let mut held = HashMap::new();
        match args.plant {
            None => {
                for d in member.pop_due(now, 1_000) {
                    // A timer of another queue (none here) is dropped: delivered.
                    if let Some(q) = queue_index(d.due.queue(), queues) {
                        dues.push((d.token, q, *d.due.id()));
                        deadlines.insert(*d.due.id(), *d.due.value());
                        if let Some(intake) = &mut intake {
                            intake.handed(q, d.token, *d.due.id());
                        }
                        held.insert((q, *d.due.id()), d);
                    }
                }
            }
            Some(Plant::NoLeaseCheck) => {
                // The fault: a dispatcher keeping timers of its own, out of the scheduler's
                // reach (so neither the fence nor the freeze of a lost lease stops it), and
                // dispatching them under the last token it saw, lease or not.
                for &q in last_token.keys() {
                    for (id, at_ns) in scheduler.drain_queue(&queue_name(q)).cancelled {
                        mirror.insert((at_ns, q, id));
                    }
                }
                while let Some(&(at_ns, q, id)) = mirror.first() {
                    if at_ns > t_ns || dues.len() >= 1_000 {
                        break;
                    }
                    mirror.pop_first();
                    if let Some(&t) = last_token.get(&q) {
                        dues.push((t, q, id));
                    }
                }
            }
        }
        for &(token, q, id) in &dues {
            log.push(q, token, id, t_ns);
            let b = batches.entry(q).or_insert((token, Vec::new()));
            b.0 = token;
            b.1.push(id);
        }
        log.flush()
            .map_err(|e| format!("{label}: dispatch log: {e}"))?;
        // Failed deliveries to schedule again (`--journal`), once their `Due`s are dropped.
        let mut again: Vec<(u32, u64)> = Vec::new();
        for (q, (token, ids)) in batches.drain() {
            // A Redis error leaves the ids in the spool: the next owner redispatches them.
            match spool.deliver(q, token, &ids).await {
                Ok(Delivery::Accepted(_)) if journal => {
                    // Delivered: the timers end, in the scheduler and (written under the
                    // hand-out's token) in the journal. An end not acknowledged before a death
                    // makes the next owner deliver them again (under its newer token).
                    for id in &ids {
                        if let Some(d) = held.remove(&(q, *id)) {
                            drop(d.done());
                        }
                    }
                }
                Ok(Delivery::Accepted(_)) => {}
                Ok(Delivery::Stale { highest }) => {
                    if refused == 0 {
                        say!(
                            "{label}: the spool refused a delivery of q{q} under token {token}: \
                             it has seen token {highest}"
                        );
                    }
                    refused += ids.len() as u64;
                }
                Err(e) => {
                    // The ids stay in the spool: logged as failed, and re-read (under the same
                    // token, if it still holds) so that this member delivers them again.
                    say!("{label}: deliver q{q}: {e}");
                    let t_ns = mono_ns();
                    for &id in &ids {
                        log.push_failed(q, token, id, t_ns);
                    }
                    log.flush()
                        .map_err(|e| format!("{label}: dispatch log: {e}"))?;
                    if journal {
                        // Scheduled again here under the same token: the journal holds it,
                        // or the intake still waits for its put.
                        again.extend(ids.iter().map(|id| (q, *id)));
                    } else {
                        synced.remove(&q);
                    }
                }
            }
        }
        // Done: each Due dropped after its delivery. With the journal, what is left was
        // refused or failed: dropped without an end, its record stays in the journal.
        drop(held);
        for (q, id) in again {
            if let Some(intake) = &mut intake {
                intake.unhand(q, id);
            }
            let at = Instant::now() + Duration::from_millis(100);
            let at_ns = deadlines.get(&id).copied().unwrap_or_else(mono_ns);
            if let Err(e) = scheduler.schedule(queue_name(q), id, at, at_ns) {
                say!("{label}: q{q} id {id}, whose delivery failed, not scheduled again: {e}");
            }
        }
        // 4. Report.
        if Instant::now() >= next_report {
            next_report = Instant::now() + Duration::from_millis(200);
            let n = recovered.load(Ordering::SeqCst);
            if journal && n != recovered_shown {
                say!("{label}: {n} timers rebuilt from the journal by adoptions so far");
                recovered_shown = n;
            }
            if refused != refused_shown && refused > 1 {
                say!("{label}: {refused} deliveries refused by the spool so far (stale token)");
                refused_shown = refused;
            }
            let valid: Vec<(u32, u64)> = owned
                .iter()
                .filter(|(q, t)| fence.token(queue_name(**q).as_bytes()) == Some(**t))
                .map(|(q, t)| (*q, *t))
                .collect();
            if let Err(e) = spool.report(&args.name, pid, &valid).await {
                say!("{label}: report: {e}");
            }
        }
        let sleep = scheduler
            .next_deadline()
            .map(|d| d.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::MAX)
            .min(Duration::from_millis(10));
        tokio::time::sleep(sleep).await;
    }
    let name = args.name.clone();
    if leave.load(Ordering::SeqCst) {
        say!("{label}: leaving");
        let t = Instant::now();
        member
            .leave()
            .await
            .map_err(|e| format!("{label}: leave: {e}"))?;
        say!("{label}: left in {:.1} s", t.elapsed().as_secs_f64());
    } else {
        drop(member);
    }
    let _ = spool.report(&name, pid, &[]).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_names_round_trip_and_strangers_are_refused() {
        assert_eq!(queue_index(&queue_name(17), 200), Some(17));
        assert_eq!(queue_index("q0", 1), Some(0));
        for bad in ["q200", "x1", "q01", "q", "q-1", "q1 "] {
            assert_eq!(queue_index(bad, 200), None, "{bad}");
        }
    }
}
