//! Flow control in the MTA: suspensions are holds of the queue in the scheduler (released
//! when the suspension ends, so nothing is popped and re-deferred meanwhile), and
//! `--concurrency` / `--rate` are the scheduler's per-queue limits. The program checks each
//! one from its own account, not from the scheduler's counts: the most messages of a queue
//! in flight at once, the most hand-outs of a queue in any second of MTA time, and every
//! hand-out of a queue that was held for the whole `pop_due` that handed it out.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};

use tickwheel::sync::RateLimit;

use crate::sim::Sched;

const SECOND: u64 = 1_000_000_000;

/// The limits, the holds, and the account that checks them.
pub struct Flow {
    pub concurrency: Option<u32>,
    pub rate: Option<u32>,
    /// MTA time until which each queue is suspended (0: never).
    until: Vec<AtomicU64>,
    /// Per queue: held, from the return of `hold_queue` until just before `release_queue`.
    held: Vec<AtomicBool>,
    /// Bumped after every hold and before every release: a `pop_due` that saw it unchanged
    /// from start to end ran wholly inside or outside each hold.
    generation: AtomicU64,
    /// Pending releases: (MTA time, queue).
    releases: Mutex<BTreeSet<(u64, u32)>>,
    next_release: AtomicU64,
    /// Per queue: messages handed out and not yet finished, as the dispatcher counts them.
    flying: Vec<AtomicU32>,
    max_flying: AtomicU32,
    /// Per queue: hand-out times within the last second of MTA time (with `--rate` only).
    windows: Mutex<Vec<VecDeque<u64>>>,
    max_per_second: AtomicU32,
    pub while_held: AtomicU64,
    pub holds: AtomicU64,
}

impl Flow {
    pub fn new(queues: u32, concurrency: Option<u32>, rate: Option<u32>) -> Flow {
        let n = queues as usize;
        Flow {
            concurrency,
            rate,
            until: (0..n).map(|_| AtomicU64::new(0)).collect(),
            held: (0..n).map(|_| AtomicBool::new(false)).collect(),
            generation: AtomicU64::new(0),
            releases: Mutex::new(BTreeSet::new()),
            next_release: AtomicU64::new(u64::MAX),
            flying: (0..n).map(|_| AtomicU32::new(0)).collect(),
            max_flying: AtomicU32::new(0),
            windows: Mutex::new(vec![VecDeque::new(); n]),
            max_per_second: AtomicU32::new(0),
            while_held: AtomicU64::new(0),
            holds: AtomicU64::new(0),
        }
    }

    /// Sets the limits on every queue; `second` is one second of MTA time on the scheduler's
    /// clock.
    pub fn limit(&self, sched: &Sched, queues: u32, second: std::time::Duration) {
        for queue in 0..queues {
            if let Some(n) = self.concurrency {
                sched.set_concurrency(&queue, Some(n as usize));
            }
            if let Some(r) = self.rate {
                let limit = RateLimit {
                    count: r,
                    per: second,
                    burst: 1,
                };
                sched.set_rate(&queue, Some(limit));
            }
        }
    }

    /// Suspends `queue` until MTA time `until`: a hold, released by [`release_due`] then.
    pub fn suspend(&self, sched: &Sched, queue: u32, until: u64) {
        self.until[queue as usize].fetch_max(until, AcqRel);
        sched.hold_queue(&queue);
        self.held[queue as usize].store(true, SeqCst);
        self.generation.fetch_add(1, SeqCst);
        self.holds.fetch_add(1, Relaxed);
        self.releases
            .lock()
            .expect("releases")
            .insert((until, queue));
        self.next_release.fetch_min(until, AcqRel);
    }

    /// The MTA time of the next release (`u64::MAX`: none).
    pub fn next_release(&self) -> u64 {
        self.next_release.load(Acquire)
    }

    /// Releases every queue whose suspension has ended by MTA time `now` (a queue suspended
    /// again meanwhile stays held until its later end). O(1) while none is due.
    pub fn release_due(&self, sched: &Sched, now: u64) {
        if self.next_release.load(Acquire) > now {
            return;
        }
        let mut releases = self.releases.lock().expect("releases");
        while let Some(&(until, queue)) = releases.first() {
            if until > now {
                break;
            }
            releases.pop_first();
            if self.until[queue as usize].load(Acquire) > now {
                continue; // suspended again, later: that entry releases it
            }
            self.held[queue as usize].store(false, SeqCst);
            self.generation.fetch_add(1, SeqCst);
            sched.release_queue(&queue);
        }
        let next = releases.first().map_or(u64::MAX, |&(until, _)| until);
        self.next_release.store(next, Release);
    }

    /// Before a `pop_due`: the generation to hand to [`handed_out`](Self::handed_out).
    pub fn before_pop(&self) -> u64 {
        self.generation.load(SeqCst)
    }

    /// A message of `queue` handed out by a `pop_due` at MTA time `now` that started at
    /// generation `before` (`None`: unknown, the hold is not checked): checks the hold,
    /// counts it in flight and in its second.
    pub fn handed_out(&self, queue: u32, now: u64, before: Option<u64>) {
        let q = queue as usize;
        if self.held[q].load(SeqCst) && before == Some(self.generation.load(SeqCst)) {
            self.while_held.fetch_add(1, Relaxed);
        }
        let flying = self.flying[q].fetch_add(1, AcqRel) + 1;
        self.max_flying.fetch_max(flying, Relaxed);
        if self.rate.is_none() {
            return; // the per-second account is kept for a rate limit only (its cost)
        }
        let mut windows = self.windows.lock().expect("windows");
        let window = &mut windows[q];
        while window.front().is_some_and(|&t| t + SECOND <= now) {
            window.pop_front();
        }
        // Hand-outs by concurrent dispatchers may come slightly out of order. What is left
        // is later than `now - 1 s`; the second ending at `now` holds those up to `now`.
        let at = window.partition_point(|&t| t <= now);
        window.insert(at, now);
        self.max_per_second.fetch_max(at as u32 + 1, Relaxed);
    }

    /// A message of `queue` is finished (before its `Due` ends: the scheduler's slot is
    /// given back after this, so this count is never below the scheduler's).
    pub fn finished(&self, queue: u32) {
        self.flying[queue as usize].fetch_sub(1, AcqRel);
    }

    /// Whether every limit held by the account.
    pub fn ok(&self) -> bool {
        let flying = self.max_flying.load(Relaxed);
        let second = self.max_per_second.load(Relaxed);
        self.while_held.load(Relaxed) == 0
            && self.concurrency.is_none_or(|n| flying <= n)
            && self.rate.is_none_or(|r| second <= r)
    }

    /// The `flow:` line.
    pub fn line(&self) -> String {
        let limit = |l: Option<u32>| l.map_or_else(|| "none".to_string(), |n| n.to_string());
        let per_second = match self.rate {
            Some(_) => self.max_per_second.load(Relaxed).to_string(),
            None => "not counted".to_string(),
        };
        format!(
            "flow: {} (max in flight per queue {}, limit {}; max per second per queue {}, \
             limit {}; {} handed out while held)",
            if self.ok() { "OK" } else { "FAILED" },
            self.max_flying.load(Relaxed),
            limit(self.concurrency),
            per_second,
            limit(self.rate),
            self.while_held.load(Relaxed),
        )
    }
}
