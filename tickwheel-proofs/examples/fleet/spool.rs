//! The example's durable store in Redis (the "spool" an MTA keeps), under a per-run key
//! prefix so that two runs against one `--redis-url` do not meet:
//!
//! - `P spool:<q>`: hash, id → deadline (CLOCK_MONOTONIC ns): every message of queue `q` not
//!   yet delivered. An owner's recovery reads it.
//! - `P inbox`: stream of `(q, id, at)`, one entry per produced message. Written in the same
//!   script as the spool entry; members read it to learn of new messages in the queues they
//!   own. Not trimmed: `--messages` bounds it.
//! - `P maxtok`: hash, q → the highest fencing token a delivery of `q` carried.
//! - `P delivered`: hash, id → the token it was delivered under.
//! - `P stats`: counters `delivered`, `rejected` (deliveries refused for a stale token).
//! - `P jpos`: hash, q → the inbox position through which every message of `q` is in the
//!   queue's journal (`--journal redis`), only ever raised: where a new owner of `q` re-reads
//!   the inbox from (a message past it may have reached a dead owner and no journal).
//! - `P status:<name>`: a member's report (`pid`, then `q:token` it dispatches), expiring
//!   after 1.5 s so a dead member's report goes with it.
//!
//! A delivery is one Lua script: it refuses a token lower than the highest seen for the queue
//! (the data holder checks the fence, as Kleppmann asks: a member that outlived its lease
//! is refused here even if it dispatched), then moves each id from the spool to `delivered`.

use std::collections::HashMap;
use std::path::Path;

use redis::aio::ConnectionManager;
use redis::{AsyncCommands as _, RedisResult, Script};

/// Stream entry id `ms-seq`, ordered numerically.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct StreamPos(pub u64, pub u64);

impl StreamPos {
    pub fn parse(s: &str) -> Option<StreamPos> {
        let (a, b) = s.split_once('-')?;
        Some(StreamPos(a.parse().ok()?, b.parse().ok()?))
    }

    pub fn text(self) -> String {
        format!("{}-{}", self.0, self.1)
    }
}

/// One produced message as the inbox stream carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inbound {
    pub pos: StreamPos,
    pub queue: u32,
    pub id: u64,
    pub at_ns: u64,
}

/// What a delivery script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Accepted: this many ids moved from the spool to `delivered` (the others were gone).
    Accepted(u64),
    /// Refused: the queue has seen this larger token.
    Stale { highest: u64 },
}

/// Deliveries per `HSCAN` page at the end of a run.
const DELIVERED_PAGE: u64 = 10_000;

// KEYS: spool:q, inbox, delivered. ARGV: id, at, q. Idempotent: a producer retrying a call
// whose reply it lost (the first call ran) adds nothing, so no id reaches the inbox twice.
const PRODUCE: &str = r"
if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then return 0 end
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('XADD', KEYS[2], '*', 'q', ARGV[3], 'id', ARGV[1], 'at', ARGV[2])
return 1
";

const SYNC: &str = r"
local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
local pos = '0-0'
if #last > 0 then pos = last[1][1] end
return {pos, redis.call('HGETALL', KEYS[1])}
";

// KEYS: spool:q, maxtok, delivered, stats. ARGV: q, token, id...
const DELIVER: &str = r"
local tok = tonumber(ARGV[2])
local max = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if tok < max then
  redis.call('HINCRBY', KEYS[4], 'rejected', #ARGV - 2)
  return {0, max}
end
if tok > max then redis.call('HSET', KEYS[2], ARGV[1], ARGV[2]) end
local n = 0
for i = 3, #ARGV do
  if redis.call('HDEL', KEYS[1], ARGV[i]) == 1 then
    redis.call('HSET', KEYS[3], ARGV[i], ARGV[2])
    n = n + 1
  end
end
redis.call('HINCRBY', KEYS[4], 'delivered', n)
return {1, n}
";

// KEYS: jpos. ARGV: (q, ms, seq)...: raises each queue's position, never lowers it.
const RAISE: &str = r"
for i = 1, #ARGV, 3 do
  local ms, seq = tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local cur = redis.call('HGET', KEYS[1], ARGV[i])
  local higher = true
  if cur then
    local cms, cseq = string.match(cur, '^(%d+)-(%d+)$')
    cms, cseq = tonumber(cms), tonumber(cseq)
    higher = ms > cms or (ms == cms and seq > cseq)
  end
  if higher then redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1] .. '-' .. ARGV[i + 2]) end
end
return 1
";

/// The spool, through one (reconnecting) connection.
#[derive(Clone)]
pub struct Spool {
    conn: ConnectionManager,
    prefix: String,
    produce: Script,
    sync: Script,
    deliver: Script,
    raise: Script,
}

impl Spool {
    /// Connects to `url` (Redis) for the run whose keys start with `prefix`.
    ///
    /// # Errors
    /// If Redis cannot be reached.
    pub async fn connect(url: &str, prefix: &str, tls: Option<&Path>) -> RedisResult<Spool> {
        let client = tickwheel_testkit::pki::redis_client(url, tls)?;
        let conn = ConnectionManager::new(client).await?;
        Ok(Spool {
            conn,
            prefix: prefix.to_owned(),
            produce: Script::new(PRODUCE),
            sync: Script::new(SYNC),
            deliver: Script::new(DELIVER),
            raise: Script::new(RAISE),
        })
    }

    fn key(&self, what: &str) -> String {
        format!("{}{what}", self.prefix)
    }

    fn spool_key(&self, q: u32) -> String {
        format!("{}spool:{q}", self.prefix)
    }

    /// Stores message `id` of queue `q`, due at `at_ns`, and announces it on the inbox, once:
    /// a retry of an id already in the spool or delivered adds nothing (a producer whose
    /// reply was lost retries, and its first call may have run).
    pub async fn produce(&mut self, q: u32, id: u64, at_ns: u64) -> RedisResult<()> {
        let mut conn = self.conn.clone();
        let _: i64 = self
            .produce
            .key(self.spool_key(q))
            .key(self.key("inbox"))
            .key(self.key("delivered"))
            .arg(id)
            .arg(at_ns)
            .arg(q)
            .invoke_async(&mut conn)
            .await?;
        Ok(())
    }

    /// Every message of `q` still in the spool, and the inbox's last entry at the same
    /// instant (one script): what the inbox carries after that position is not in the list.
    pub async fn sync_read(&mut self, q: u32) -> RedisResult<(StreamPos, Vec<(u64, u64)>)> {
        let mut conn = self.conn.clone();
        let (pos, flat): (String, Vec<u64>) = self
            .sync
            .key(self.spool_key(q))
            .key(self.key("inbox"))
            .invoke_async(&mut conn)
            .await?;
        let pos = StreamPos::parse(&pos).unwrap_or_default();
        Ok((pos, flat.chunks_exact(2).map(|p| (p[0], p[1])).collect()))
    }

    /// The inbox's last entry (where a reader that has seen nothing yet may start: what is
    /// older is in the spool, which an acquisition reads).
    pub async fn inbox_tail(&mut self) -> RedisResult<StreamPos> {
        let (pos, _) = self.sync_read(u32::MAX).await?;
        Ok(pos)
    }

    /// Up to `count` inbox entries after `after` (does not block).
    pub async fn read_inbox(
        &mut self,
        after: StreamPos,
        count: usize,
    ) -> RedisResult<Vec<Inbound>> {
        let mut conn = self.conn.clone();
        let reply: redis::streams::StreamRangeReply = conn
            .xrange_count(self.key("inbox"), format!("({}", after.text()), "+", count)
            .await?;
        let mut out = Vec::with_capacity(reply.ids.len());
        for entry in reply.ids {
            let field = |name: &str| -> Option<u64> {
                entry
                    .map
                    .get(name)
                    .and_then(|v| redis::from_redis_value::<u64>(v.clone()).ok())
            };
            if let (Some(pos), Some(q), Some(id), Some(at_ns)) = (
                StreamPos::parse(&entry.id),
                field("q"),
                field("id"),
                field("at"),
            ) {
                out.push(Inbound {
                    pos,
                    queue: q as u32,
                    id,
                    at_ns,
                });
            }
        }
        Ok(out)
    }

    /// Delivers `ids` of queue `q` under fencing token `token` (see the module doc).
    pub async fn deliver(&mut self, q: u32, token: u64, ids: &[u64]) -> RedisResult<Delivery> {
        let mut conn = self.conn.clone();
        let mut inv = self.deliver.key(self.spool_key(q));
        inv.key(self.key("maxtok"))
            .key(self.key("delivered"))
            .key(self.key("stats"))
            .arg(q)
            .arg(token);
        for id in ids {
            inv.arg(*id);
        }
        let (ok, n): (u64, u64) = inv.invoke_async(&mut conn).await?;
        Ok(if ok == 1 {
            Delivery::Accepted(n)
        } else {
            Delivery::Stale { highest: n }
        })
    }

    /// The inbox positions through which every message of each of `qs` is journaled, in
    /// order (`0-0` where none was recorded). One `HMGET`.
    pub async fn journaled_through(&mut self, qs: &[u32]) -> RedisResult<Vec<StreamPos>> {
        if qs.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.conn.clone();
        let v: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(self.key("jpos"))
            .arg(qs)
            .query_async(&mut conn)
            .await?;
        Ok(v.iter()
            .map(|p| p.as_deref().and_then(StreamPos::parse).unwrap_or_default())
            .collect())
    }

    /// Raises the journaled-through positions of these queues (a lower one is ignored).
    pub async fn raise_journaled(&mut self, positions: &[(u32, StreamPos)]) -> RedisResult<()> {
        if positions.is_empty() {
            return Ok(());
        }
        let mut conn = self.conn.clone();
        let mut inv = self.raise.key(self.key("jpos"));
        for (q, p) in positions {
            inv.arg(*q).arg(p.0).arg(p.1);
        }
        let _: i64 = inv.invoke_async(&mut conn).await?;
        Ok(())
    }

    /// Publishes a member's report: its pid and the queues it dispatches with their tokens.
    pub async fn report(&mut self, name: &str, pid: u32, owned: &[(u32, u64)]) -> RedisResult<()> {
        let mut text = pid.to_string();
        for (q, t) in owned {
            text.push_str(&format!(" {q}:{t}"));
        }
        let mut conn = self.conn.clone();
        let () = conn
            .pset_ex(self.key(&format!("status:{name}")), text, 1_500)
            .await?;
        Ok(())
    }

    /// The current reports of `names`: (pid, queues) for each that has one.
    pub async fn reports(
        &mut self,
        names: &[String],
    ) -> RedisResult<HashMap<String, (u32, Vec<u32>)>> {
        let mut out = HashMap::new();
        if names.is_empty() {
            return Ok(out);
        }
        let keys: Vec<String> = names
            .iter()
            .map(|n| self.key(&format!("status:{n}")))
            .collect();
        let mut conn = self.conn.clone();
        let values: Vec<Option<String>> =
            redis::cmd("MGET").arg(keys).query_async(&mut conn).await?;
        for (name, v) in names.iter().zip(values) {
            let Some(v) = v else { continue };
            let mut f = v.split(' ');
            let Some(pid) = f.next().and_then(|p| p.parse().ok()) else {
                continue;
            };
            let qs = f
                .filter_map(|p| p.split_once(':').and_then(|(q, _)| q.parse().ok()))
                .collect();
            out.insert(name.clone(), (pid, qs));
        }
        Ok(out)
    }

    /// The counters (delivered, rejected).
    pub async fn stats(&mut self) -> RedisResult<(u64, u64)> {
        let mut conn = self.conn.clone();
        let (d, r): (Option<u64>, Option<u64>) = redis::cmd("HMGET")
            .arg(self.key("stats"))
            .arg("delivered")
            .arg("rejected")
            .query_async(&mut conn)
            .await?;
        Ok((d.unwrap_or(0), r.unwrap_or(0)))
    }

    /// Ids still in the spool of queues `0..queues`, with their queue.
    pub async fn leftover(&mut self, queues: u32) -> RedisResult<Vec<(u64, u32)>> {
        let mut conn = self.conn.clone();
        let mut out = Vec::new();
        for q in 0..queues {
            let ids: Vec<u64> = conn.hkeys(self.spool_key(q)).await?;
            out.extend(ids.into_iter().map(|id| (id, q)));
        }
        Ok(out)
    }

    /// Every delivery: id → token. Read in pages (`HSCAN`): one `HGETALL` of a long soak's
    /// hundreds of thousands of deliveries outlasts the connection's response timeout.
    pub async fn delivered(&mut self) -> RedisResult<HashMap<u64, u64>> {
        let mut conn = self.conn.clone();
        let key = self.key("delivered");
        let mut out = HashMap::new();
        let mut cursor = 0u64;
        loop {
            let (next, page): (u64, HashMap<u64, u64>) = redis::cmd("HSCAN")
                .arg(&key)
                .arg(cursor)
                .arg("COUNT")
                .arg(DELIVERED_PAGE)
                .query_async(&mut conn)
                .await?;
            out.extend(page);
            if next == 0 {
                return Ok(out);
            }
            cursor = next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_positions_order_numerically() {
        let a = StreamPos::parse("999-5").unwrap();
        let b = StreamPos::parse("1000-0").unwrap();
        assert!(a < b);
        assert_eq!(b.text(), "1000-0");
        assert!(StreamPos::parse("12").is_none() && StreamPos::parse("a-1").is_none());
    }

    /// Runs `test` on a spool (prefix `t:`) of a redis-server of its own, on a runtime of
    /// its own; nothing where redis-server is missing outside CI.
    fn on_spool<F: std::future::Future<Output = ()>>(test: impl FnOnce(Spool) -> F) {
        let Some(server) = tickwheel_testkit::redis::start_for_test() else {
            return;
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let s = Spool::connect(&server.url(), "t:", None).await.unwrap();
            test(s).await;
        });
    }

    /// A produce repeated (a retry after a lost reply) reaches the inbox once, before its
    /// delivery and after it.
    #[test]
    fn a_repeated_produce_adds_nothing() {
        on_spool(|mut s| async move {
            let start = s.inbox_tail().await.unwrap();
            s.produce(3, 10, 1_000).await.unwrap();
            s.produce(3, 10, 1_000).await.unwrap();
            let inbox = s.read_inbox(start, 10).await.unwrap();
            assert_eq!(inbox.len(), 1, "a retried produce announced twice");
            assert_eq!(s.deliver(3, 1, &[10]).await.unwrap(), Delivery::Accepted(1));
            s.produce(3, 10, 1_000).await.unwrap();
            assert_eq!(s.read_inbox(start, 10).await.unwrap().len(), 1);
            assert!(
                s.sync_read(3).await.unwrap().1.is_empty(),
                "delivered, yet back"
            );
        });
    }

    /// More deliveries than one `HSCAN` page: every one read back once, with its token.
    #[test]
    fn every_delivery_is_read_across_pages() {
        on_spool(|mut s| async move {
            let n = 3 * DELIVERED_PAGE + 7;
            let mut conn = s.conn.clone();
            for start in (0..n).step_by(5_000) {
                let mut cmd = redis::cmd("HSET");
                cmd.arg(s.key("delivered"));
                for id in start..(start + 5_000).min(n) {
                    cmd.arg(id).arg(id * 3 + 1);
                }
                let _: u64 = cmd.query_async(&mut conn).await.unwrap();
            }
            let delivered = s.delivered().await.unwrap();
            assert_eq!(delivered.len() as u64, n);
            assert!((0..n).all(|id| delivered.get(&id) == Some(&(id * 3 + 1))));
        });
    }

    /// The scripts against a real redis-server (skipped outside CI when it is missing).
    #[test]
    fn delivery_refuses_a_lower_token_and_moves_ids_once() {
        on_spool(|mut s| async move {
            assert_eq!(s.inbox_tail().await.unwrap(), StreamPos::default());
            s.produce(3, 10, 1_000).await.unwrap();
            let (mid, _) = s.sync_read(3).await.unwrap();
            s.produce(3, 11, 2_000).await.unwrap();
            s.produce(4, 12, 3_000).await.unwrap();
            // The re-read sees the spool and the inbox position at the same instant.
            let (pos, mut entries) = s.sync_read(3).await.unwrap();
            entries.sort();
            assert_eq!(entries, vec![(10, 1_000), (11, 2_000)]);
            let after: Vec<u64> = s
                .read_inbox(mid, 10)
                .await
                .unwrap()
                .iter()
                .map(|m| m.id)
                .collect();
            assert_eq!(after, vec![11, 12]);
            assert!(s.read_inbox(pos, 10).await.unwrap().is_empty());
            // Token 20 delivers; a retry finds the id gone; token 19 is refused.
            assert_eq!(
                s.deliver(3, 20, &[10]).await.unwrap(),
                Delivery::Accepted(1)
            );
            assert_eq!(
                s.deliver(3, 20, &[10]).await.unwrap(),
                Delivery::Accepted(0)
            );
            assert_eq!(
                s.deliver(3, 19, &[11]).await.unwrap(),
                Delivery::Stale { highest: 20 }
            );
            // Another queue's tokens are its own.
            assert_eq!(s.deliver(4, 5, &[12]).await.unwrap(), Delivery::Accepted(1));
            assert_eq!(s.stats().await.unwrap(), (2, 1));
            let delivered = s.delivered().await.unwrap();
            assert_eq!(delivered.get(&10), Some(&20));
            assert_eq!(s.leftover(5).await.unwrap(), vec![(11, 3)]);
            // Journaled-through positions only rise.
            assert_eq!(
                s.journaled_through(&[3]).await.unwrap(),
                vec![StreamPos::default()]
            );
            let (p1, p2) = (StreamPos(1_000, 9), StreamPos(1_001, 0));
            s.raise_journaled(&[(3, p2), (4, p1)]).await.unwrap();
            s.raise_journaled(&[(3, p1), (4, StreamPos(1_000, 10))])
                .await
                .unwrap();
            assert_eq!(
                s.journaled_through(&[4, 3, 5]).await.unwrap(),
                vec![StreamPos(1_000, 10), p2, StreamPos::default()]
            );
            s.report("m1", 77, &[(3, 20), (4, 5)]).await.unwrap();
            let r = s.reports(&["m1".into(), "m2".into()]).await.unwrap();
            assert_eq!(r.get("m1"), Some(&(77, vec![3, 4])));
            assert!(!r.contains_key("m2"));
        });
    }
}
