//! A host's side of the handoff through `tickwheel_redis::Custody`, one gate per step, and
//! what a restarted host does first: reconcile its spool with the owner records.
//!
//! Source: `acquire` (every queue, at the start) then, per queue, `freeze prepare append
//! in-flight forward seal drop`. Target (and spare): `claim fetch spool commit import`.

use std::time::{Duration, Instant};

use tickwheel_redis::{
    Custody, CustodyError, CustodyOptions, Error, Incoming, Member, Options, Record, Rejection,
    State,
};
use tokio::runtime::Runtime;

use crate::host::{Host, Msg, RIDE_OUT, queue_names};
use crate::spool::{Chunk, Entry, Record as Log};
use crate::steps::Role;

/// The source's member name (the target's and spare's are their own).
pub const SOURCE: &str = "source";

/// Environment variable, honoured only by this example: `skip-one` makes a target leave the
/// first entry of each offer out of its spool and scheduler (a planted loss the ledger must
/// catch).
pub const FAULT_ENV: &str = "HANDOFF_FAULT";

fn fail(what: &str, e: impl std::fmt::Display) -> String {
    format!("{what}: {e}")
}

/// Connects as this host (a fresh boot id per process). A Redis that is being restarted is
/// waited for (up to [`RIDE_OUT`]); each step then retries for as long with its token.
pub fn connect(rt: &Runtime, url: &str, h: &Host) -> Result<Custody, String> {
    let options = Options {
        lease: h.cfg.lease,
        offer_ttl: h.cfg.offer_ttl,
        prefix: h.cfg.prefix.clone(),
        tls: match &h.cfg.tls {
            Some(d) => Some(crate::tls::options(d).map_err(|e| fail("--tls", e))?),
            None => None,
        },
        ..Options::default()
    };
    let custody = CustodyOptions {
        retry_for: RIDE_OUT,
        ..CustodyOptions::default()
    };
    let member = Member::new_boot(&h.cfg.name);
    let until = Instant::now() + RIDE_OUT;
    loop {
        let c = rt.block_on(Custody::connect(
            url,
            member.clone(),
            options.clone(),
            custody.clone(),
        ));
        match c {
            Ok(c) => return Ok(c),
            Err(e) if e.is_retryable() && Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(fail("connect", e)),
        }
    }
}

/// A restarted source: `recover` each queue; a queue still its own (OWNED, or PREPARING,
/// which recover turns back into OWNED) is offered again, one sealed or taken over is no
/// longer its own (`M`). A queue never acquired is acquired. Returns the queues to offer.
pub fn recover_source(rt: &Runtime, h: &Host, c: &Custody) -> Result<Vec<String>, String> {
    let held = h.holdings()?;
    let mut mine = Vec::new();
    for q in queue_names(h.cfg.queues) {
        let epoch = match rt.block_on(c.recover(q.as_bytes())) {
            Ok(a)
                if a.record.state == State::Owned && a.record.is_held_by(c.protocol().member()) =>
            {
                a.record.epoch
            }
            Ok(a) => {
                // OFFERED: sealed before the kill; the offer is Redis's now.
                drop_copy(h, &q, a.record.epoch, &held)?;
                continue;
            }
            Err(e) => match e.rejection() {
                Some(Rejection::Absent) => {
                    rt.block_on(c.acquire(q.as_bytes()))
                        .map_err(|e| fail("acquire", e))?
                        .record
                        .epoch
                }
                Some(Rejection::Taken(r)) => {
                    match held.frozen.get(&q) {
                        Some(&offer) => settle_reclaimed(rt, h, c, &q, offer, &held)?,
                        None => drop_copy(h, &q, r.epoch, &held)?,
                    }
                    continue;
                }
                _ => return Err(fail("recover", e)),
            },
        };
        if held.frozen.contains_key(&q) || held.moved.contains(&q) {
            h.log(&[Log::Back {
                queue: q.clone(),
                epoch,
            }])?;
        }
        h.set_epoch(&q, epoch);
        mine.push(q);
    }
    Ok(mine)
}

/// The source's offer of `q` at epoch `offer` was taken over while it was down: the chunks
/// the claimer took (`fenced[offer]`, read from Redis) are dropped, every other timer of the
/// queue in the spool is handed back (the chunk records say which went where).
fn settle_reclaimed(
    rt: &Runtime,
    h: &Host,
    c: &Custody,
    q: &str,
    offer: u64,
    held: &crate::spool::Holdings,
) -> Result<(), String> {
    let view = rt
        .block_on(c.read(q.as_bytes(), Some(offer)))
        .map_err(|e| fail("read", e))?;
    let taken = view.taken_chunks.unwrap_or(0);
    let records = held.reclaimed(q, offer, taken);
    say!(
        "{}#{}: {q} was taken over: {taken} chunk(s) taken, {} value(s) handed back",
        h.cfg.name,
        h.cfg.boot,
        records.len() - 1
    );
    h.log(&records)
}

fn drop_copy(h: &Host, q: &str, epoch: u64, held: &crate::spool::Holdings) -> Result<(), String> {
    if !held.moved.contains(q) {
        h.log(&[Log::Moved {
            queue: q.to_string(),
            epoch,
        }])?;
    }
    Ok(())
}

/// A restarted target (or spare): per queue, its uncommitted copies are committed (the
/// record says it owns the queue), or dropped (`X`) otherwise; a claim it still holds is
/// returned to be fetched again. Returns (queue, record) of those claims.
pub fn recover_target(
    rt: &Runtime,
    h: &Host,
    c: &Custody,
) -> Result<Vec<(String, Record)>, String> {
    let held = h.holdings()?;
    let mut claims = Vec::new();
    for q in queue_names(h.cfg.queues) {
        let epochs: Vec<u64> = (held.uncommitted.keys())
            .filter(|(queue, _)| *queue == q)
            .map(|(_, e)| *e)
            .collect();
        let record = match rt.block_on(c.recover(q.as_bytes())) {
            Ok(a) => Some(a.record),
            Err(e) if matches!(e.rejection(), Some(Rejection::Absent | Rejection::Taken(_))) => {
                None
            }
            Err(e) => return Err(fail("recover", e)),
        };
        let state = record.as_ref().map(|r| r.state);
        let records: Vec<Log> = epochs
            .iter()
            .map(|&epoch| match state {
                Some(State::Owned) => Log::Committed {
                    queue: q.clone(),
                    epoch,
                },
                _ => Log::Dropped {
                    queue: q.clone(),
                    epoch,
                },
            })
            .collect();
        h.log(&records)?;
        if let Some(r) = record.filter(|r| r.state == State::Claimed) {
            claims.push((q, r));
        }
    }
    Ok(claims)
}

/// The source offers `q` to the target, a step a gate. A fenced offer hands its values back
/// (`H`) and drops the rest of the copy (`M`): what a claimer took is the claimer's.
pub fn offer(rt: &Runtime, h: &Host, c: &Custody, q: &str) -> Result<(), String> {
    let epoch = h.epoch(q);
    let mut out = c.outgoing(&h.sched, q.to_string(), epoch);
    // The record that drops the copy: after a fence or after the claimer's commit.
    let moved = || Log::Moved {
        queue: q.to_string(),
        epoch,
    };
    {
        let _exclusive = h.freeze_lock.write().unwrap_or_else(|p| p.into_inner());
        out.freeze().map_err(|e| fail("freeze", e))?;
        h.log(&[Log::Frozen {
            queue: q.to_string(),
            epoch,
        }])?;
    }
    h.gates.pass("freeze");
    let to = (!h.cfg.spare_mode).then_some("target");
    let steps: [(&str, u8); 5] = [
        ("prepare", 0),
        ("append", 1),
        ("in-flight", 2),
        ("forward", 3),
        ("seal", 4),
    ];
    for (step, n) in steps {
        if n == 1 || n == 3 {
            // Each chunk's ids in the spool before its append: a restart after a reclaim
            // keeps exactly the chunks not taken.
            let staged = rt.block_on(out.stage()).map_err(|e| fail(step, e))?;
            let records: Vec<Log> = staged
                .into_iter()
                .map(|(index, ids)| {
                    Log::Chunk(Chunk {
                        queue: q.to_string(),
                        epoch,
                        index,
                        ids,
                    })
                })
                .collect();
            h.log(&records)?;
        }
        let r = match n {
            0 => rt.block_on(out.prepare(to)).map(drop),
            1 => rt.block_on(out.append_pending()),
            2 => rt.block_on(out.await_in_flight()),
            3 => rt.block_on(out.forward()),
            _ => rt.block_on(out.seal()).map(drop),
        };
        match r {
            Ok(()) => h.gates.pass(step),
            Err(CustodyError::Fenced {
                record,
                taken_chunks,
                values,
            }) => {
                say!(
                    "{}#{}: fenced at {step} of {q} ({} holds epoch {}): {taken_chunks} chunk(s) taken, {} value(s) handed back",
                    h.cfg.name,
                    h.cfg.boot,
                    record.owner.name,
                    record.epoch,
                    values.len()
                );
                let mut records: Vec<Log> = values
                    .iter()
                    .map(|v| Log::HandedBack { id: v.id })
                    .collect();
                records.push(moved());
                return h.log(&records);
            }
            Err(e) => return Err(fail(step, e)),
        }
    }
    out.finish().map_err(|e| fail("finish", e))?;
    h.log(&[moved()])?;
    h.gates.pass("drop");
    Ok(())
}

/// Whether `r` says the queue went to a member other than the source and `me`: nothing for
/// `me` to do.
/// A spare takes over expired claims, so only an owned queue is elsewhere for it.
fn elsewhere(r: &Record, me: &str, spare: bool) -> bool {
    let held = r.state == State::Owned || (r.state == State::Claimed && !spare);
    held && r.owner.name != SOURCE && r.owner.name != me
}

/// The target (or spare) takes `q` in: claims it (the spare also reclaims what expired), or
/// finds it went elsewhere (`Ok(false)`).
pub fn receive(rt: &Runtime, h: &Host, c: &Custody, q: &str) -> Result<bool, String> {
    let me = h.cfg.name.as_str();
    loop {
        let claimed = rt.block_on(c.claim::<_, u64, Msg>(q.to_string()));
        let e = match claimed {
            Ok(inc) => {
                h.gates.pass("claim");
                return take_in(rt, h, inc);
            }
            Err(e) => e,
        };
        let record = match e.rejection() {
            Some(Rejection::NotOffered(r)) => Some(r.clone()),
            Some(Rejection::Absent) => None,
            _ if e.is_retryable() => None,
            _ => return Err(fail("claim", e)),
        };
        if let Some(r) = &record {
            if elsewhere(r, me, h.cfg.role == Role::Spare) {
                return Ok(false);
            }
            if r.state == State::Owned && r.owner.name == me {
                // Committed by an earlier boot: its entries are in the spool, reloaded.
                return Ok(true);
            }
            if h.cfg.role == Role::Spare && r.state != State::Owned {
                match rt.block_on(c.reclaim::<_, u64, Msg>(q.to_string())) {
                    Ok(inc) => {
                        h.gates.pass("claim");
                        return take_in(rt, h, inc);
                    }
                    Err(e)
                        if matches!(
                            e.rejection(),
                            Some(Rejection::NotExpired(_) | Rejection::WrongState(_))
                        ) || e.is_retryable() => {}
                    Err(e) => return Err(fail("reclaim", e)),
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A claim this host holds: fetch, spool (`I` under the claim's epoch), commit (`C`),
/// import. `Ok(false)`: the claim was taken over before the commit (its copy dropped).
pub fn take_in(
    rt: &Runtime,
    h: &Host,
    mut inc: Incoming<'_, String, u64, Msg>,
) -> Result<bool, String> {
    let q = inc.queue().clone();
    let epoch = inc.epoch();
    rt.block_on(inc.fetch()).map_err(|e| fail("fetch", e))?;
    h.gates.pass("fetch");
    let entries = inc.fetched_mut().ok_or("nothing fetched")?;
    if std::env::var(FAULT_ENV).as_deref() == Ok("skip-one") && !entries.is_empty() {
        entries.remove(0);
    }
    let mut records = Vec::with_capacity(entries.len() + 1);
    for e in entries.iter_mut() {
        e.value = Msg {
            epoch,
            deadline_us: e.deadline_us,
        };
        records.push(Log::Imported(Entry {
            id: e.id,
            queue: q.clone(),
            epoch,
            deadline_us: e.deadline_us,
        }));
    }
    h.log(&records)?;
    h.gates.pass("spool");
    match rt.block_on(inc.commit()) {
        Ok(_) => {}
        Err(CustodyError::Protocol(e @ Error::Rejected(_))) => {
            say!(
                "{}#{}: claim of {q} lost before commit: {e}",
                h.cfg.name,
                h.cfg.boot
            );
            let x = [Log::Dropped {
                queue: q.clone(),
                epoch,
            }];
            h.log(&x)?;
            return Ok(false);
        }
        Err(e) => return Err(fail("commit", e)),
    }
    h.log(&[Log::Committed {
        queue: q.clone(),
        epoch,
    }])?;
    h.gates.pass("commit");
    let r = inc.import(&h.sched).map_err(|e| fail("import", e))?;
    if !r.imported.present.is_empty() || !r.imported.refused.is_empty() {
        return Err(format!(
            "import of {q}: {} present, {} refused",
            r.imported.present.len(),
            r.imported.refused.len()
        ));
    }
    h.gates.pass("import");
    Ok(true)
}
