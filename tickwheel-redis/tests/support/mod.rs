//! Shared by the integration tests: a server of the test's own and connected members.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use tickwheel::sync::Scheduler;

use tickwheel_redis::journal::{Journal, JournalOptions, JournalRecord, Op};
use tickwheel_redis::{
    Applied, Custody, CustodyOptions, Effect, Error, Member, Offered, Options, Protocol, Rejection,
    State, Token,
};
use tickwheel_testkit::redis::{RedisServer, start_for_test};

pub mod connect;
pub mod moving;

pub type Sched = Scheduler<String, u64, String>;

/// Id `i` as the journal's id bytes: 8 bytes, big-endian.
pub fn num(i: u64) -> Vec<u8> {
    i.to_be_bytes().to_vec()
}

pub fn server() -> Option<RedisServer> {
    start_for_test()
}

/// A server of the test's own and `names` connected to it, in order (`None`: skip, see
/// [`server`]).
pub async fn with_members<const N: usize>(
    names: [&str; N],
) -> Option<(RedisServer, [Protocol; N])> {
    let server = server()?;
    let mut members = Vec::with_capacity(N);
    for name in names {
        members.push(member(&server, name).await);
    }
    match members.try_into() {
        Ok(members) => Some((server, members)),
        Err(_) => unreachable!("N names, N members"),
    }
}

pub async fn member(server: &RedisServer, name: &str) -> Protocol {
    connect(&server.url(), Member::new_boot(name)).await
}

pub async fn connect(url: &str, member: Member) -> Protocol {
    match Protocol::connect(url, member, Options::default()).await {
        Ok(p) => p,
        Err(e) => panic!("connect: {e}"),
    }
}

/// A plain connection to `url`, for raw commands (what a test plants or inspects).
pub async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(url).expect("url");
    client
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

/// Runs `cmd` on `url` over a connection of its own, its reply ignored (what a test plants).
/// Panics if the command fails.
pub async fn command(url: &str, cmd: &mut redis::Cmd) {
    let mut c = raw(url).await;
    let _: redis::Value = cmd.query_async(&mut c).await.expect("raw command");
}

/// `CONFIG SET name value` on `url` (what a test changes under a running member). Panics if
/// the server refuses.
pub async fn config_set(url: &str, name: &str, value: &str) {
    command(url, redis::cmd("CONFIG").arg("SET").arg(name).arg(value)).await;
}

/// Moves the record's deadline into the past with a raw command (tests only): what waiting
/// out a lease would do, without timing in the test.
pub async fn expire(url: &str, owner_key: &str) {
    let mut c = raw(url).await;
    let _: () = redis::cmd("HSET")
        .arg(owner_key)
        .arg("deadline_ms")
        .arg("0")
        .query_async(&mut c)
        .await
        .expect("hset");
}

/// A `Custody` member with short retry and in-flight bounds, `chunk_entries` timers a chunk.
pub async fn custody_member(url: &str, name: &str, chunk_entries: usize) -> Custody {
    let opts = CustodyOptions {
        chunk_entries,
        retry_for: Duration::from_secs(2),
        in_flight_timeout: Duration::from_secs(5),
        ..CustodyOptions::default()
    };
    Custody::connect(url, Member::new_boot(name), Options::default(), opts)
        .await
        .expect("connect")
}

/// Retries a call while Redis is unreachable or loading (a restart), at most `tries` times,
/// 100 ms apart.
pub async fn retry<T, F, Fut>(tries: u32, mut call: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let mut done = 0;
    loop {
        match call().await {
            Err(e) if e.is_retryable() && done < tries => {
                done += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => return other,
        }
    }
}

/// A scheduler with `n` timers in queue `q`: ids `0..n`, due 60 to 66 s after `t0`, value
/// `v<id>`.
pub fn filled(q: &str, n: u64, t0: Instant) -> Sched {
    filled_with(q, n, t0, |id| format!("v{id}"))
}

/// A scheduler with `n` timers in queue `q`, ids `0..n`, all due at `t0`, value `v<id>`.
pub fn due_now(q: &str, n: u64, t0: Instant) -> Sched {
    due_at(q, n, t0, |_| t0)
}

/// A scheduler (origin `t0`) with `n` timers in queue `q`, ids `0..n`, each due at `at(id)`,
/// value `v<id>`.
pub fn due_at(q: &str, n: u64, t0: Instant, at: impl Fn(u64) -> Instant) -> Sched {
    let s = Scheduler::builder().origin(t0).build();
    for id in 0..n {
        s.schedule(q.to_string(), id, at(id), format!("v{id}"))
            .expect("schedule");
    }
    s
}

/// [`due_now`], then `policy` (holds and limits, set by the scheduler's own calls) applied:
/// the source, and the queue's policy as a seal reads it (`flow_policy(q)`).
pub fn due_now_with(
    q: &str,
    n: u64,
    t0: Instant,
    policy: impl FnOnce(&Sched),
) -> (Sched, tickwheel_redis::FlowPolicy) {
    let s = due_now(q, n, t0);
    policy(&s);
    let sealed = s.flow_policy(q);
    (s, sealed)
}

/// A held queue `q` of `n` timers due at `t0` with `limits` applied (see [`due_now_with`]),
/// offered by `a` to `b`: the source, the policy the seal read, and the offer.
pub async fn held_offered_to_b(
    a: &Custody,
    q: &str,
    n: u64,
    t0: Instant,
    limits: impl FnOnce(&Sched),
) -> (Sched, tickwheel_redis::FlowPolicy, Offered) {
    let (src, sealed) = due_now_with(q, n, t0, |s| {
        s.hold_queue(&q.to_string());
        limits(s);
    });
    let offered = acquire_and_offer(a, &src, q, Some("b")).await;
    (src, sealed, offered)
}

/// [`filled`] with values `value(id)`.
pub fn filled_with(q: &str, n: u64, t0: Instant, value: impl Fn(u64) -> String) -> Sched {
    let s = Scheduler::builder().origin(t0).build();
    for id in 0..n {
        let at = t0 + Duration::from_secs(60 + id % 7);
        s.schedule(q.to_string(), id, at, value(id))
            .expect("schedule");
    }
    s
}

/// Every (id, (deadline, value)) of `s`'s queue `q`, taken out by a freeze and put back (all
/// of it: nothing present or refused).
pub fn contents(s: &Sched, q: &str) -> BTreeMap<u64, (Instant, String)> {
    let f = s.freeze_queue(&q.to_string());
    let out: BTreeMap<_, _> = f
        .pending
        .iter()
        .map(|e| (e.id, (e.at, e.value.clone())))
        .collect();
    s.unfreeze_queue(&q.to_string());
    let back = s.import(q, f.pending);
    assert!(back.present.is_empty() && back.refused.is_empty());
    out
}

/// `Custody` members `mx1`, `mx2` and `mx3` with `chunk_entries` timers a chunk.
pub async fn three_members(url: &str, chunk_entries: usize) -> (Custody, Custody, Custody) {
    (
        custody_member(url, "mx1", chunk_entries).await,
        custody_member(url, "mx2", chunk_entries).await,
        custody_member(url, "mx3", chunk_entries).await,
    )
}

/// The rejection in `r`; panics on anything else.
pub fn rejection<T: std::fmt::Debug>(r: Result<T, Error>) -> Rejection {
    match r {
        Err(Error::Rejected(r)) => *r,
        other => panic!("expected a rejection, got {other:?}"),
    }
}

/// `p` claims `q` with a new token: the answer, checked `Claimed` at `epoch`; the same claim
/// sent again with that token is checked `Repeated`. Panics if either is refused.
pub async fn claimed_once(p: &Protocol, q: &[u8], epoch: u64) -> Applied {
    let t = Token::generate();
    let claimed = p.claim(q, &t).await.expect("claim");
    assert_eq!(
        (claimed.record.state, claimed.record.epoch),
        (State::Claimed, epoch)
    );
    assert_eq!(
        p.claim(q, &t).await.expect("retry").effect,
        Effect::Repeated
    );
    claimed
}

/// A server of the test's own with `Custody` members `a` and `b` on it
/// ([`custody_member`], `chunk_entries` timers a chunk), and its URL (`None`: skip, see
/// [`server`]). Keep the server: dropping it stops redis-server.
pub async fn custody_pair(chunk_entries: usize) -> Option<(RedisServer, String, Custody, Custody)> {
    let server = server()?;
    let url = server.url();
    let a = custody_member(&url, "a", chunk_entries).await;
    let b = custody_member(&url, "b", chunk_entries).await;
    Some((server, url, a, b))
}

/// The epoch `member` gets acquiring queue `q`. Panics if refused.
pub async fn acquire(member: &Custody, q: &str) -> u64 {
    member
        .acquire(q.as_bytes())
        .await
        .expect("acquire")
        .record
        .epoch
}

/// `member` acquires queue `q` and offers `src`'s timers of it to `to` (`None`: to any
/// claimer). Panics if either step is refused.
pub async fn acquire_and_offer(
    member: &Custody,
    src: &Sched,
    q: &str,
    to: Option<&str>,
) -> Offered {
    let epoch = acquire(member, q).await;
    member
        .offer(src, q.to_owned(), epoch, to)
        .await
        .expect("offer")
}

/// An empty scheduler whose origin is `t0` (a target).
pub fn empty(t0: Instant) -> Sched {
    Scheduler::builder().origin(t0).build()
}

/// The journal scripts' id hash (FNV-1a, 32 bits, the high half folded into the low one),
/// to pick ids by where they land.
pub fn h32(id: &[u8]) -> u32 {
    let mut h: u32 = 2_166_136_261;
    for &b in id {
        h ^= u32::from(b);
        h = h.wrapping_mul(16_777_619);
    }
    h ^ (h >> 16)
}

/// The records of a journal's queue by id: (deadline in µs, value).
pub type Model = BTreeMap<Vec<u8>, (u64, Vec<u8>)>;

/// A put of `id` due at `deadline_us` (µs) with `value`, as raw bytes.
pub fn put(id: &[u8], deadline_us: u64, value: &[u8]) -> Op {
    Op::Put {
        id: id.to_vec(),
        deadline_us,
        value: value.to_vec(),
    }
}

/// The end of `id`, as raw bytes.
pub fn end(id: &[u8]) -> Op {
    Op::End { id: id.to_vec() }
}

/// A journal's load as a [`Model`]; panics if an id comes back twice.
pub fn as_map(records: Vec<JournalRecord>) -> Model {
    let mut out = BTreeMap::new();
    for r in records {
        assert!(
            out.insert(r.id.clone(), (r.deadline_us, r.value)).is_none(),
            "id {:?} loaded twice",
            r.id
        );
    }
    out
}

/// `p` adopts queue `q` at `token`; panics if refused.
pub async fn adopt(p: &Protocol, q: &[u8], token: u64) {
    if let Err(e) = p.adopt(q, token, &Token::generate()).await {
        panic!("adopt at {token}: {e}");
    }
}

/// A journal writing through `p`, with the default options.
pub fn start(p: &Protocol) -> Journal {
    start_with(p, JournalOptions::default())
}

/// A journal writing through `p` with `options`; panics if it cannot start its runtime.
pub fn start_with(p: &Protocol, options: JournalOptions) -> Journal {
    Journal::start(p.clone(), options).expect("runtime")
}

/// A server of the test's own, member `mx1` on it holding queue `q` at `token` (adopted),
/// and a journal through it with the default options (`None`: skip, see [`server`]). Keep
/// the server: dropping it stops redis-server.
pub async fn journal_on(q: &[u8], token: u64) -> Option<(RedisServer, Journal)> {
    journal_on_with(q, token, JournalOptions::default()).await
}

/// [`journal_on`] with `options`.
pub async fn journal_on_with(
    q: &[u8],
    token: u64,
    options: JournalOptions,
) -> Option<(RedisServer, Journal)> {
    let (server, [p]) = with_members(["mx1"]).await?;
    adopt(&p, q, token).await;
    Some((server, start_with(&p, options)))
}

/// [`journal_on`] (member `mx1`'s journal) and a second member, `mx2`, on the same server:
/// the one that adopts the queue next.
pub async fn journal_and_rival(q: &[u8], token: u64) -> Option<(RedisServer, Journal, Protocol)> {
    let (server, [p, rival]) = with_members(["mx1", "mx2"]).await?;
    adopt(&p, q, token).await;
    Some((server, start(&p), rival))
}

/// The number of keys in the server's database (`DBSIZE`).
pub async fn key_count(url: &str) -> u64 {
    let mut c = raw(url).await;
    redis::cmd("DBSIZE")
        .query_async(&mut c)
        .await
        .expect("dbsize")
}
