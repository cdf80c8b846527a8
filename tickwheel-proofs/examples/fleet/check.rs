//! The ownership check: a pure function of what the run left behind (every member's dispatch
//! log, the spool's deliveries and leftovers, the queues live owners hold at the end). The
//! parent calls it once; its three checks:
//!
//! 1. **One dispatcher per queue at a time.** Per queue, every dispatch under fencing token
//!    `T` happened (CLOCK_MONOTONIC) before every dispatch under any larger token: lease
//!    windows never overlapped. A dispatch under a *smaller* token after a larger one is the
//!    violation a member that outlived its lease would leave.
//! 2. **None lost.** Every produced id was delivered, or is still in the spool in a queue a
//!    live member owns at the end (with `--journal`, delivered: the run settles until all
//!    are, and an id left over is lost).
//! 3. **No double delivery.** No `(id, token)` pair was dispatched twice: the same id twice
//!    is allowed only under two different tokens (a new owner recovering what its
//!    predecessor dispatched but never confirmed, e.g. across a crash), or again under the
//!    same token once per delivery of it that failed (a Redis error, logged: the owner
//!    retries). And every delivery the spool confirmed matches a logged dispatch.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

/// One logged dispatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dispatch {
    /// Index into [`Inputs::members`].
    pub member: u32,
    /// Queue index (`0..queues`).
    pub queue: u32,
    /// The fencing token the member dispatched under.
    pub token: u64,
    /// The message id.
    pub id: u64,
    /// CLOCK_MONOTONIC of the hand-out, in ns.
    pub t_ns: u64,
}

/// Everything the check reads.
#[derive(Debug, Default)]
pub struct Inputs {
    /// Member labels (`name#boot`), indexed by [`Dispatch::member`].
    pub members: Vec<String>,
    /// Every logged dispatch, in any order.
    pub dispatches: Vec<Dispatch>,
    /// Every logged failed delivery, as `(id, token)`.
    pub failed: Vec<(u64, u64)>,
    /// Ids `0..produced` were produced.
    pub produced: u64,
    /// Delivered ids with the token the delivery carried.
    pub delivered: HashMap<u64, u64>,
    /// Ids still in the spool, with their queue.
    pub leftover: Vec<(u64, u32)>,
    /// Queues a live member owns at the end.
    pub owned_at_end: HashSet<u32>,
    /// Every produced id must have been delivered (`--journal`): a leftover is lost even in
    /// a queue a live member owns.
    pub all_delivered: bool,
}

/// The first violation found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// Check 1: `late` (smaller token) dispatched after `early` (larger token) on `queue`.
    Overlap {
        queue: u32,
        early: (String, u64, u64, u64),
        late: (String, u64, u64, u64),
    },
    /// Check 2: an id neither delivered nor held by a live owner.
    Lost { id: u64, queue: Option<u32> },
    /// Check 2 with [`Inputs::all_delivered`]: an id still in the spool of `queue`.
    Undelivered { id: u64, queue: u32 },
    /// Check 3: the same (id, token) dispatched twice.
    Twice {
        id: u64,
        token: u64,
        by: (String, String),
    },
    /// Check 3: a delivery with no dispatch logged under its token.
    Unlogged { id: u64, token: u64 },
    /// An id outside `0..produced` dispatched or delivered.
    Unknown { id: u64 },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Overlap { queue, early, late } => write!(
                f,
                "overlap on queue q{queue}: {} dispatched id {} under token {} at {} ns, \
                 after {} had dispatched id {} under the larger token {} at {} ns",
                late.0, late.2, late.1, late.3, early.0, early.2, early.1, early.3
            ),
            Violation::Lost { id, queue: Some(q) } => write!(
                f,
                "id {id} lost: still in the spool of q{q}, which no live member owns"
            ),
            Violation::Undelivered { id, queue } => write!(
                f,
                "id {id} lost: still in the spool of q{queue} once the run settled, \
                 though every id must be delivered"
            ),
            Violation::Lost { id, queue: None } => {
                write!(f, "id {id} lost: neither delivered nor in the spool")
            }
            Violation::Twice { id, token, by } => write!(
                f,
                "id {id} dispatched twice under token {token} (by {} and {})",
                by.0, by.1
            ),
            Violation::Unlogged { id, token } => write!(
                f,
                "id {id} delivered under token {token} without a logged dispatch"
            ),
            Violation::Unknown { id } => write!(f, "id {id} was never produced"),
        }
    }
}

/// What the OK line reports.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Counts {
    pub produced: u64,
    pub delivered: usize,
    pub held: usize,
    pub dispatches: usize,
    pub members: usize,
    pub queues: usize,
    /// Per queue, the number of distinct tokens minus one, summed: how often a queue changed
    /// hands while it had traffic.
    pub owner_changes: usize,
    /// Ids dispatched under more than one token.
    pub redispatched: usize,
    /// Dispatches again under the same token after a failed delivery.
    pub retried: usize,
}

impl fmt::Display for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} produced = {} delivered + {} held by live owners; {} dispatches by {} member \
             processes over {} queues, {} changes of owner, no overlap; {} ids redispatched \
             under a newer token, {} again under the same token after a failed delivery, none \
             twice under one otherwise",
            self.produced,
            self.delivered,
            self.held,
            self.dispatches,
            self.members,
            self.queues,
            self.owner_changes,
            self.redispatched,
            self.retried
        )
    }
}

/// Runs the three checks. O(d log d + p) for d dispatches and p produced ids.
///
/// # Errors
/// The first [`Violation`] found: overlaps first, then double dispatches, then losses.
pub fn check(inputs: &Inputs) -> Result<Counts, Violation> {
    let label = |m: u32| {
        inputs
            .members
            .get(m as usize)
            .cloned()
            .unwrap_or_else(|| format!("member{m}"))
    };
    // Check 1, per queue: every token's last dispatch precedes the first dispatch of every
    // larger token. Per token (first, last) by time, then walk tokens from the largest down
    // keeping the earliest first-dispatch seen so far.
    let mut spans: BTreeMap<u32, BTreeMap<u64, (Dispatch, Dispatch)>> = BTreeMap::new();
    for d in &inputs.dispatches {
        if d.id >= inputs.produced {
            return Err(Violation::Unknown { id: d.id });
        }
        let e = spans
            .entry(d.queue)
            .or_default()
            .entry(d.token)
            .or_insert((*d, *d));
        if d.t_ns < e.0.t_ns {
            e.0 = *d;
        }
        if d.t_ns > e.1.t_ns {
            e.1 = *d;
        }
    }
    let mut owner_changes = 0;
    for (queue, tokens) in &spans {
        owner_changes += tokens.len() - 1;
        let mut earliest_later: Option<Dispatch> = None;
        for (first, last) in tokens.values().rev() {
            if let Some(e) = earliest_later
                && last.t_ns >= e.t_ns
            {
                return Err(Violation::Overlap {
                    queue: *queue,
                    early: (label(e.member), e.token, e.id, e.t_ns),
                    late: (label(last.member), last.token, last.id, last.t_ns),
                });
            }
            if earliest_later.is_none_or(|e| first.t_ns < e.t_ns) {
                earliest_later = Some(*first);
            }
        }
    }
    // Check 3: (id, token) once, plus once per logged failed delivery of it; count ids seen
    // under several tokens.
    let mut retries: HashMap<(u64, u64), u32> = HashMap::new();
    for &pair in &inputs.failed {
        *retries.entry(pair).or_default() += 1;
    }
    let mut seen: HashMap<(u64, u64), u32> = HashMap::with_capacity(inputs.dispatches.len());
    let mut tokens_of: HashMap<u64, u32> = HashMap::with_capacity(inputs.dispatches.len());
    let mut retried = 0;
    for d in &inputs.dispatches {
        if let Some(prev) = seen.insert((d.id, d.token), d.member) {
            match retries.get_mut(&(d.id, d.token)) {
                Some(n) if *n > 0 => {
                    *n -= 1;
                    retried += 1;
                    continue;
                }
                _ => {
                    return Err(Violation::Twice {
                        id: d.id,
                        token: d.token,
                        by: (label(prev), label(d.member)),
                    });
                }
            }
        }
        *tokens_of.entry(d.id).or_default() += 1;
    }
    for (&id, &token) in &inputs.delivered {
        if id >= inputs.produced {
            return Err(Violation::Unknown { id });
        }
        if !seen.contains_key(&(id, token)) {
            return Err(Violation::Unlogged { id, token });
        }
    }
    // Check 2: every id delivered or held by a live owner.
    let leftover: HashMap<u64, u32> = inputs.leftover.iter().copied().collect();
    let mut held = 0;
    for id in 0..inputs.produced {
        if inputs.delivered.contains_key(&id) {
            continue;
        }
        match leftover.get(&id) {
            Some(&queue) if inputs.all_delivered => {
                return Err(Violation::Undelivered { id, queue });
            }
            Some(q) if inputs.owned_at_end.contains(q) => held += 1,
            q => {
                return Err(Violation::Lost {
                    id,
                    queue: q.copied(),
                });
            }
        }
    }
    let members: HashSet<u32> = inputs.dispatches.iter().map(|d| d.member).collect();
    Ok(Counts {
        produced: inputs.produced,
        delivered: inputs.delivered.len(),
        held,
        dispatches: inputs.dispatches.len(),
        members: members.len(),
        queues: spans.len(),
        owner_changes,
        redispatched: tokens_of.values().filter(|n| **n > 1).count(),
        retried,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(member: u32, queue: u32, token: u64, id: u64, t_ns: u64) -> Dispatch {
        Dispatch {
            member,
            queue,
            token,
            id,
            t_ns,
        }
    }

    fn inputs(dispatches: Vec<Dispatch>, produced: u64) -> Inputs {
        let delivered = dispatches.iter().map(|d| (d.id, d.token)).collect();
        Inputs {
            members: vec!["m1#1".into(), "m2#1".into(), "m3#1".into()],
            dispatches,
            failed: vec![],
            produced,
            delivered,
            leftover: vec![],
            owned_at_end: HashSet::new(),
            all_delivered: false,
        }
    }

    /// `dispatches` as (member, queue, token, t_ns), the i-th handing out id i: each produced
    /// id dispatched once.
    fn one_id_each(dispatches: &[(u32, u32, u64, u64)]) -> Inputs {
        let ds: Vec<Dispatch> = (0..)
            .zip(dispatches)
            .map(|(id, &(m, q, token, t_ns))| d(m, q, token, id, t_ns))
            .collect();
        let produced = ds.len() as u64;
        inputs(ds, produced)
    }

    #[test]
    fn a_clean_run_passes_with_its_counts() {
        // q0: m1 under 10, then m2 under 20 (a handoff); q1: m3 only.
        let i = one_id_each(&[
            (0, 0, 10, 100),
            (0, 0, 10, 200),
            (1, 0, 20, 300),
            (2, 1, 15, 150),
        ]);
        let c = check(&i).unwrap();
        assert_eq!(c.delivered, 4);
        assert_eq!(c.owner_changes, 1);
        assert_eq!(c.queues, 2);
        assert_eq!(c.members, 3);
        assert_eq!(c.redispatched, 0);
    }

    #[test]
    fn an_overlap_is_detected() {
        // m1 (token 10) dispatches q0 at 400, after m2 (token 20) started at 300: the
        // paused member that woke and went on without its lease check.
        let i = one_id_each(&[(0, 0, 10, 100), (1, 0, 20, 300), (0, 0, 10, 400)]);
        match check(&i) {
            Err(Violation::Overlap {
                queue: 0,
                early,
                late,
            }) => {
                assert_eq!(early, ("m2#1".into(), 20, 1, 300));
                assert_eq!(late, ("m1#1".into(), 10, 2, 400));
            }
            other => panic!("{other:?}"),
        }
        let msg = check(&i).unwrap_err().to_string();
        assert!(msg.contains("overlap on queue q0"), "{msg}");
    }

    #[test]
    fn overlap_with_a_token_in_between_and_equal_times() {
        // Tokens 10, 20, 30: 10's last dispatch equals 30's first (same instant is not
        // "before").
        let i = one_id_each(&[(0, 0, 10, 500), (1, 0, 20, 600), (2, 0, 30, 500)]);
        assert!(matches!(check(&i), Err(Violation::Overlap { .. })));
        // Other queues do not interfere: the same times on different queues are fine.
        let i = one_id_each(&[(0, 0, 10, 500), (1, 1, 20, 100), (2, 2, 30, 50)]);
        assert!(check(&i).is_ok());
    }

    #[test]
    fn a_lost_id_is_detected_unless_a_live_owner_holds_it() {
        let mut i = inputs(vec![d(0, 0, 10, 0, 100)], 2);
        i.leftover = vec![(1, 3)];
        assert_eq!(
            check(&i),
            Err(Violation::Lost {
                id: 1,
                queue: Some(3)
            })
        );
        i.owned_at_end.insert(3);
        assert_eq!(check(&i).map(|c| c.held), Ok(1));
        // Every id must be delivered: held is lost too.
        i.all_delivered = true;
        assert_eq!(check(&i), Err(Violation::Undelivered { id: 1, queue: 3 }));
        i.all_delivered = false;
        i.leftover.clear();
        assert_eq!(check(&i), Err(Violation::Lost { id: 1, queue: None }));
    }

    #[test]
    fn twice_under_one_token_fails_under_two_passes() {
        let i = inputs(vec![d(0, 0, 10, 0, 100), d(0, 0, 10, 0, 200)], 1);
        assert!(matches!(
            check(&i),
            Err(Violation::Twice {
                id: 0,
                token: 10,
                ..
            })
        ));
        // Redispatched by the next owner under its larger token: allowed, counted.
        let i = inputs(vec![d(0, 0, 10, 0, 100), d(1, 0, 20, 0, 200)], 1);
        assert_eq!(check(&i).map(|c| c.redispatched), Ok(1));
    }

    #[test]
    fn the_same_token_again_needs_a_failed_delivery_each_time() {
        let three = vec![
            d(0, 0, 10, 0, 100),
            d(0, 0, 10, 0, 200),
            d(0, 0, 10, 0, 300),
        ];
        let mut i = inputs(three, 1);
        i.failed = vec![(0, 10)];
        // One failure excuses one retry, not two.
        assert!(matches!(check(&i), Err(Violation::Twice { id: 0, .. })));
        i.failed = vec![(0, 10), (0, 10)];
        assert_eq!(check(&i).map(|c| (c.retried, c.redispatched)), Ok((2, 0)));
        // A failure under another token excuses nothing here.
        i.failed = vec![(0, 11), (0, 11)];
        assert!(matches!(check(&i), Err(Violation::Twice { id: 0, .. })));
    }

    #[test]
    fn a_delivery_needs_its_dispatch_and_ids_must_be_produced() {
        let mut i = inputs(vec![d(0, 0, 10, 0, 100)], 1);
        i.delivered.insert(0, 11);
        assert_eq!(check(&i), Err(Violation::Unlogged { id: 0, token: 11 }));
        let i = inputs(vec![d(0, 0, 10, 5, 100)], 1);
        assert_eq!(check(&i), Err(Violation::Unknown { id: 5 }));
    }
}
