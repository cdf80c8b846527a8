//! Questions asked of a test's record of hand-outs: `(member, queue, id, token)` each.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// Every `(queue, id)` handed out at least once, whatever the member or token.
pub fn handed_out_ids(dispatches: &[(String, String, u64, u64)]) -> BTreeSet<(String, u64)> {
    dispatches
        .iter()
        .map(|(_, q, id, _)| (q.clone(), *id))
        .collect()
}

/// `(queue, id, token, times)` for each `(queue, id, token)` handed out more than once.
pub fn twice_under_one_token(
    dispatches: &[(String, String, u64, u64)],
) -> Vec<(String, u64, u64, usize)> {
    let mut n: BTreeMap<(String, u64, u64), usize> = BTreeMap::new();
    for (_, q, id, t) in dispatches {
        *n.entry((q.clone(), *id, *t)).or_default() += 1;
    }
    n.into_iter()
        .filter(|(_, c)| *c > 1)
        .map(|((q, id, t), c)| (q, id, t, c))
        .collect()
}

/// A test's record of hand-outs, filled round by round: [`Collect::collect`] runs the rounds.
pub trait Collect: Sized {
    /// The deadlines the timers were meant to have, as the record keys them.
    type Intended;
    /// How often a round runs, and how long after the last one the final round comes.
    const PACE: (Duration, Duration);

    /// One round: every hand-out due at `members` now, recorded.
    async fn round(&mut self, members: &[&super::FleetMember], intended: &Self::Intended);

    /// Every (queue, id) recorded as handed out.
    fn handed_out(&self) -> BTreeSet<(String, u64)>;

    /// Runs a round every `PACE.0` until `done(self)` or `limit` has passed, then a last one
    /// `PACE.1` later (what was on its way at the end).
    async fn collect(
        &mut self,
        members: &[&super::FleetMember],
        intended: &Self::Intended,
        limit: Duration,
        mut done: impl FnMut(&Self) -> bool,
    ) {
        let (every, settle) = Self::PACE;
        let until = Instant::now() + limit;
        while !done(self) && Instant::now() < until {
            self.round(members, intended).await;
            tokio::time::sleep(every).await;
        }
        tokio::time::sleep(settle).await;
        self.round(members, intended).await;
    }

    /// [`Collect::collect`] until every timer of `must` was handed out (or `limit`).
    async fn collect_all(
        &mut self,
        members: &[&super::FleetMember],
        intended: &Self::Intended,
        must: &BTreeSet<(String, u64)>,
        limit: Duration,
    ) {
        self.collect(members, intended, limit, |l| {
            must.is_subset(&l.handed_out())
        })
        .await;
    }
}
