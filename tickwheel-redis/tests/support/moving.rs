//! The start of a test that moves one queue between two members.

use std::time::Instant;

use tickwheel_redis::Custody;
use tickwheel_testkit::redis::RedisServer;

/// [`custody_pair`](super::custody_pair)`(chunk_entries)` (the server, its URL, members `a`
/// and `b`), the queue `q` as a `String`, and the instant the pair was ready (`t0`: the
/// origin of the test's schedulers, the deadline of what is due at once). `None`: skip, see
/// [`server`](super::server). Keep the server: dropping it stops it.
pub async fn custody_pair_on(
    q: &str,
    chunk_entries: usize,
) -> Option<(RedisServer, String, Custody, Custody, String, Instant)> {
    let (server, url, a, b) = super::custody_pair(chunk_entries).await?;
    Some((server, url, a, b, q.to_string(), Instant::now()))
}
