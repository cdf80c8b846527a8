//! `--journal redis`: how a member takes its queues' messages in, and how a queue's next
//! owner finds them with no recovery hook (the spool is never read for timers).
//!
//! A message becomes its queue's owner's once its put is acknowledged (durable in the
//! queue's journal: `Member::schedule`, the journaled front, or `Member::journal_put` for an
//! id already scheduled); until then it is the inbox's. Per queue the spool keeps
//! the inbox position through which every message of the queue is journaled (`jpos`, only
//! ever raised), which the owner raises after the acknowledgements. A new owner (after an
//! adoption, which loaded the journal, or a handoff) reads the inbox again past that
//! position: what its predecessor read but had not journaled comes back from the inbox,
//! what it had journaled comes from the journal (or the handoff's offer). Both may carry an
//! id the predecessor already delivered: it is delivered again under the newer token.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use redis::RedisResult;
use tickwheel::sync::ScheduleError;
use tickwheel_fleet::Member;
use tickwheel_redis::journal::Pending;

use crate::member::{instant_of, queue_name};
use crate::spool::{Inbound, Spool, StreamPos};

/// Inbox entries per read while catching up.
const PAGE: usize = 2_000;

/// A message read from the inbox, not yet acknowledged by the journal.
struct Waiting {
    /// The inbox entry before it (any queue's): every message of the queue up to there is
    /// journaled while this one is the queue's first waiting.
    prev: StreamPos,
    id: u64,
    at_ns: u64,
    /// The put in flight, if one was sent.
    put: Option<Pending>,
    /// The put was acknowledged.
    done: bool,
}

/// An owned queue's intake under one token.
struct Held {
    token: u64,
    /// The inbox has been read through here for this queue.
    read: StreamPos,
    waiting: VecDeque<Waiting>,
    /// The position last raised in the spool.
    raised: StreamPos,
    /// A put was acknowledged since the last raise.
    acked: bool,
}

/// The intake of every queue this member owns.
#[derive(Default)]
pub struct Intake {
    queues: HashMap<u32, Held>,
    /// Per queue, the ids handed out under one token: never scheduled again under it. Kept
    /// apart from `queues`: the fence may hand a loaded timer out before the acquisition
    /// shows in `Member::owned`, and the inbox read that follows may carry the same id.
    handed: HashMap<u32, (u64, HashSet<u64>)>,
}

impl Intake {
    /// Forgets the queues not owned under the same token any more.
    pub fn retain(&mut self, owned: &HashMap<u32, u64>) {
        self.queues.retain(|q, h| owned.get(q) == Some(&h.token));
        self.handed
            .retain(|q, (t, _)| owned.get(q).is_none_or(|o| o == t));
    }

    /// Whether `q` is taken in under `token` (caught up).
    pub fn has(&self, q: u32, token: u64) -> bool {
        self.queues.get(&q).is_some_and(|h| h.token == token)
    }

    /// New acquisitions, `(queue, token)`: reads the inbox once past the lowest of their
    /// journaled positions, each queue taking its messages past its own. Called after the
    /// acquisitions completed, so an adoption's journal is loaded first. O(inbox entries
    /// past the lowest position), however many queues.
    ///
    /// # Errors
    /// A Redis error: nothing is recorded, the caller tries again.
    pub async fn acquire(&mut self, spool: &mut Spool, new: &[(u32, u64)]) -> RedisResult<()> {
        if new.is_empty() {
            return Ok(());
        }
        let qs: Vec<u32> = new.iter().map(|(q, _)| *q).collect();
        let from = spool.journaled_through(&qs).await?;
        let mut held: HashMap<u32, Held> = new
            .iter()
            .zip(&from)
            .map(|(&(q, token), &w)| {
                let h = Held {
                    token,
                    read: w,
                    waiting: VecDeque::new(),
                    raised: w,
                    acked: false,
                };
                (q, h)
            })
            .collect();
        let mut last = from.iter().copied().min().unwrap_or_default();
        loop {
            let batch = spool.read_inbox(last, PAGE).await?;
            for m in &batch {
                if let Some(h) = held.get_mut(&m.queue)
                    && m.pos > h.raised
                {
                    h.waiting.push_back(Waiting {
                        prev: last,
                        id: m.id,
                        at_ns: m.at_ns,
                        put: None,
                        done: false,
                    });
                }
                last = m.pos;
            }
            if batch.len() < PAGE {
                break;
            }
        }
        for (q, mut h) in held {
            h.read = h.read.max(last);
            self.queues.insert(q, h);
        }
        Ok(())
    }

    /// New inbox entries, read after `before`: those of queues taken in past their position.
    pub fn inbound(&mut self, before: StreamPos, batch: &[Inbound]) {
        let mut prev = before;
        for m in batch {
            if let Some(h) = self.queues.get_mut(&m.queue)
                && m.pos > h.read
            {
                h.waiting.push_back(Waiting {
                    prev,
                    id: m.id,
                    at_ns: m.at_ns,
                    put: None,
                    done: false,
                });
                h.read = m.pos;
            }
            prev = m.pos;
        }
        for h in self.queues.values_mut() {
            h.read = h.read.max(prev);
        }
    }

    /// Schedules each waiting message that has no put in flight and sends its put. A frozen
    /// queue (a handoff under way) takes nothing: its next owner reads the inbox again.
    pub fn submit(&mut self, member: &Member<String, u64, u64>) {
        for (&q, h) in &mut self.queues {
            let name = queue_name(q);
            // Handed out already under this token (and not failed): delivered, or refused for a
            // stale token; nothing to schedule or journal again.
            if let Some((t, handed)) = self.handed.get(&q)
                && *t == h.token
            {
                h.waiting.retain(|w| !handed.contains(&w.id));
            }
            for w in h.waiting.iter_mut().filter(|w| w.put.is_none()) {
                let at = instant_of(w.at_ns);
                let put = match member.schedule(name.clone(), w.id, at, w.at_ns) {
                    Ok(Ok(p)) => Ok(p),
                    // Scheduled already (an earlier put of it failed, or its delivery did):
                    // its put alone, sent again.
                    Ok(Err(ScheduleError::Pending(_) | ScheduleError::InFlight(_))) => {
                        member.journal_put(&name, &w.id, at, &w.at_ns)
                    }
                    // Frozen, full, or a refusal of a later version: tried again next time.
                    Ok(Err(_)) => continue,
                    Err(e) => Err(e),
                };
                // Not owned any more: the next owner reads the inbox again.
                if let Ok(p) = put {
                    w.put = Some(p);
                }
            }
        }
    }

    /// Waits up to `limit` for the puts in flight; an acknowledged message is the queue's, a
    /// failed put is sent again by the next [`Intake::submit`].
    pub async fn settle(&mut self, limit: Duration) {
        let end = Instant::now() + limit;
        for h in self.queues.values_mut() {
            let mut acked = false;
            for w in &mut h.waiting {
                let Some(p) = &mut w.put else { continue };
                let left = end.saturating_duration_since(Instant::now());
                match tokio::time::timeout(left, p).await {
                    Ok(Ok(_)) => {
                        w.put = None;
                        w.done = true;
                        acked = true;
                    }
                    Ok(Err(_)) => w.put = None,
                    Err(_) => {}
                }
            }
            if acked {
                h.waiting.retain(|w| !w.done);
                h.acked = true;
            }
        }
    }

    /// The positions to raise in the spool: each queue with news (`all`: every queue)
    /// whose journaled-through position moved.
    pub fn through(&self, all: bool) -> Vec<(u32, StreamPos)> {
        self.queues
            .iter()
            .filter(|(_, h)| all || h.acked)
            .map(|(q, h)| (*q, h.waiting.front().map_or(h.read, |w| w.prev)))
            .filter(|(q, p)| self.queues.get(q).is_some_and(|h| *p > h.raised))
            .collect()
    }

    /// Records that `positions` were raised in the spool.
    pub fn raised(&mut self, positions: &[(u32, StreamPos)]) {
        for (q, p) in positions {
            if let Some(h) = self.queues.get_mut(q) {
                h.raised = h.raised.max(*p);
                h.acked = false;
            }
        }
    }

    /// Forgets that `id` of `q` was handed out: its delivery failed, its member schedules it
    /// again (and journals it, if its put was never acknowledged).
    pub fn unhand(&mut self, q: u32, id: u64) {
        if let Some((_, ids)) = self.handed.get_mut(&q) {
            ids.remove(&id);
        }
    }

    /// Records that `id` of `q` was handed out under `token`.
    pub fn handed(&mut self, q: u32, token: u64, id: u64) {
        let (t, ids) = self.handed.entry(q).or_insert((token, HashSet::new()));
        if token > *t {
            *t = token;
            ids.clear();
        }
        if token == *t {
            ids.insert(id);
        }
    }
}
