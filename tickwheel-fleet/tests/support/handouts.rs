//! Questions asked of a test's record of hand-outs: `(member, queue, id, token)` each.

use std::collections::{BTreeMap, BTreeSet};

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
