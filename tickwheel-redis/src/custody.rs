//! The high-level handoff on tokio: move a queue of a [`Scheduler`] to another member.
//!
//! [`Custody`] wraps a [`Protocol`] connection with retries and the scheduler's side of each
//! step. The source side is an [`Outgoing`], with one method per step so that a caller can
//! make its own state durable between them:
//!
//! ```text
//! freeze → prepare → append_pending → await_in_flight → forward → seal → finish (local copy dropped)
//!            └────────────── abort: values back into the scheduler ──────┘
//! ```
//!
//! The target side is an [`Incoming`]: [`Custody::claim`] (or [`Custody::reclaim`], or
//! [`Custody::resume`] after a restart) → [`fetch`](Incoming::fetch) (every chunk read and
//! validated) → the caller's durable step → [`commit`](Incoming::commit) →
//! [`import`](Incoming::import) into the scheduler. Nothing is dispatched before the commit.
//! [`Custody::offer`] and [`Custody::receive`] run a whole side in one call.
//!
//! Deadlines cross on the reference clock, Redis `TIME`: exported with
//! [`to_reference`](tickwheel::sync::snapshot::to_reference) (the local `Instant` read before
//! `TIME`), imported with [`from_reference`](tickwheel::sync::snapshot::from_reference)
//! (`TIME` first, the local `Instant` after), so a deadline can only move later.
//!
//! Failures: a step whose reply is lost, or a Redis that is unreachable, is retried with the
//! same [`Token`] and a growing pause for up to [`CustodyOptions::retry_for`]; then the step
//! fails with [`CustodyError::Protocol`] holding [`Error::Unavailable`], and the value (an
//! `Outgoing` or `Incoming`) keeps its state: call the same step again. A source whose epoch
//! was taken over gets [`CustodyError::Fenced`] with exactly the values no claimer took.
//! Nothing here panics on bad input or bad data in Redis.

mod incoming;
mod outgoing;

pub use incoming::{Incoming, Received};
pub use outgoing::{Offered, Outgoing};

use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::time::{Duration, Instant};

use redis::Script;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tickwheel::sync::{FrozenEntry, Scheduler};

use crate::chunk::{ChunkError, DEFAULT_CHUNK_ENTRIES};
use crate::connect::map_redis;
use crate::error::{Error, Rejection};
use crate::policy::PolicyError;
use crate::protocol::{Applied, CLAIM, Options, Protocol, RECLAIM, View};
use crate::record::{Member, Record, State, Token};

/// Settings of the high-level handoff (the connection's own are [`Options`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustodyOptions {
    /// Timers per chunk (default [`DEFAULT_CHUNK_ENTRIES`]); each chunk is one `append` script
    /// call, so this bounds how long one call holds Redis. Values below 1 count as 1.
    pub chunk_entries: usize,
    /// How long a step keeps retrying, with the same token, while Redis is unreachable or
    /// silent (default 30 s). Then the step fails with [`Error::Unavailable`]; call it again.
    pub retry_for: Duration,
    /// How long [`Outgoing::await_in_flight`] waits for the queue's in-flight timers to be
    /// delivered or forwarded (default 30 s).
    pub in_flight_timeout: Duration,
    /// Pause between two reads while polling (in-flight timers, [`Custody::outcome`]);
    /// default 10 ms.
    pub poll_interval: Duration,
}

impl Default for CustodyOptions {
    fn default() -> Self {
        CustodyOptions {
            chunk_entries: DEFAULT_CHUNK_ENTRIES,
            retry_for: Duration::from_secs(30),
            in_flight_timeout: Duration::from_secs(30),
            poll_interval: Duration::from_millis(10),
        }
    }
}

/// Why a handoff step failed. Every variant leaves the [`Outgoing`] or [`Incoming`] in the
/// state it had before the call (except [`Fenced`](CustodyError::Fenced), which ends it):
/// nothing is lost by an error.
#[non_exhaustive]
pub enum CustodyError<K, T> {
    /// A protocol call failed: [`Error::Unavailable`] (retry the step: same token),
    /// or a refusal other than fencing (see [`Error::rejection`]).
    Protocol(Error),
    /// Another member took the queue over (the caller's epoch is stale). `values` are the
    /// caller's timers no claimer took, with their local deadlines: the chunks from
    /// `taken_chunks` on, every timer not yet appended, and every forwarded one. They are the
    /// caller's again (its scheduler's queue stays frozen: schedule them elsewhere, or
    /// `unfreeze_queue` and re-import if the caller owns the queue again later).
    Fenced {
        /// The record as it is now (boxed: errors travel by value).
        record: Box<Record>,
        /// How many chunks of the caller's offer another member took (0 if none).
        taken_chunks: u64,
        /// The values handed back, in delivery order.
        values: Vec<FrozenEntry<K, T>>,
    },
    /// A chunk in Redis could not be read: corrupt, an unknown version, or of another queue,
    /// epoch or index. Nothing changed anywhere.
    Chunk {
        /// The chunk's index.
        index: u64,
        /// Why.
        error: ChunkError,
    },
    /// The chunks hold another number of timers than the record says. Nothing changed.
    Incomplete {
        /// Timers the record says the offer holds.
        expected: u64,
        /// Timers found in the chunks.
        found: u64,
    },
    /// The claimed offer's flow policy is of a format this build cannot read (written by a
    /// newer one). Nothing changed: the claim stays uncommitted, for a member that can.
    Policy {
        /// Why.
        error: PolicyError,
    },
    /// [`Outgoing::await_in_flight`] timed out: these ids are still in flight. Call it again,
    /// or abort.
    InFlight {
        /// The ids still in flight, in delivery order.
        ids: Vec<K>,
    },
    /// A step called out of order (e.g. `seal` before `prepare`). Nothing changed.
    Step {
        /// The step called.
        called: &'static str,
        /// The step expected next.
        expected: &'static str,
    },
}

impl<K, T> CustodyError<K, T> {
    /// Whether calling the same step again may succeed (Redis unreachable, in-flight timers).
    pub fn is_retryable(&self) -> bool {
        match self {
            CustodyError::Protocol(e) => e.is_retryable(),
            CustodyError::InFlight { .. } => true,
            _ => false,
        }
    }
}

impl<K, T> From<Error> for CustodyError<K, T> {
    fn from(e: Error) -> Self {
        CustodyError::Protocol(e)
    }
}

impl<K, T> fmt::Display for CustodyError<K, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CustodyError::Protocol(e) => write!(f, "{e}"),
            CustodyError::Fenced {
                record,
                taken_chunks,
                values,
            } => write!(
                f,
                "fenced: {} holds the queue at epoch {} ({taken_chunks} chunk(s) taken, {} value(s) handed back)",
                record.owner.name,
                record.epoch,
                values.len()
            ),
            CustodyError::Chunk { index, error } => write!(f, "chunk {index}: {error}"),
            CustodyError::Incomplete { expected, found } => {
                write!(
                    f,
                    "the offer holds {found} timers, its record says {expected}"
                )
            }
            CustodyError::Policy { error } => write!(f, "{error}"),
            CustodyError::InFlight { ids } => write!(f, "{} timer(s) still in flight", ids.len()),
            CustodyError::Step { called, expected } => {
                write!(f, "step {called} called out of order (expected {expected})")
            }
        }
    }
}

impl<K, T> fmt::Debug for CustodyError<K, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CustodyError({self})")
    }
}

impl<K, T> std::error::Error for CustodyError<K, T> {}

/// What became of an offer, as [`Custody::outcome`] reads it from the owner record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A claimer committed it (or holds it past it): `taken_chunks` of the offer went to it.
    Committed {
        /// The record now.
        record: Record,
        /// Chunks of the offer the claimer took.
        taken_chunks: u64,
    },
    /// Aborted or recovered by its source: nothing of it was taken.
    Returned(Record),
    /// Still open (PREPARING, OFFERED or CLAIMED) when the wait ran out.
    Pending(Record),
    /// The queue has no owner record.
    Absent,
}

/// A member's handle on the handoff: a [`Protocol`] connection plus [`CustodyOptions`].
/// Cheap to clone.
///
/// # Example
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use tickwheel::sync::Scheduler;
/// use tickwheel_redis::{Custody, CustodyOptions, Member, Options};
///
/// let url = "redis://127.0.0.1:6379/";
/// let mx1 = Custody::connect(url, Member::new_boot("mx1"), Options::default(), CustodyOptions::default()).await?;
/// let mx2 = Custody::connect(url, Member::new_boot("mx2"), Options::default(), CustodyOptions::default()).await?;
/// type Sched = Scheduler<String, u64, String>;
/// let (s1, s2) = (Sched::new(), Sched::new());
/// let q = "example.com".to_string();
/// let epoch = mx1.acquire(q.as_bytes()).await?.record.epoch;
/// // ... s1 holds the queue's timers; move them to mx2:
/// let offered = mx1.offer(&s1, q.clone(), epoch, Some("mx2")).await?;
/// let received = mx2.receive(&s2, q.clone()).await?;
/// assert_eq!(received.imported.imported as u64, offered.entries);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Custody {
    protocol: Protocol,
    options: CustodyOptions,
}

impl Custody {
    /// Connects as `member` (see [`Protocol::connect`]).
    ///
    /// # Errors
    /// As [`Protocol::connect`].
    pub async fn connect(
        url: &str,
        member: Member,
        options: Options,
        custody: CustodyOptions,
    ) -> Result<Custody, Error> {
        Ok(Custody::new(
            Protocol::connect(url, member, options).await?,
            custody,
        ))
    }

    /// Wraps a connection.
    ///
    /// ```no_run
    /// # async fn demo(p: tickwheel_redis::Protocol) {
    /// let c = tickwheel_redis::Custody::new(p, Default::default());
    /// # }
    /// ```
    pub fn new(protocol: Protocol, options: CustodyOptions) -> Custody {
        Custody { protocol, options }
    }

    /// The connection.
    pub fn protocol(&self) -> &Protocol {
        &self.protocol
    }

    /// The options in force.
    pub fn options(&self) -> &CustodyOptions {
        &self.options
    }

    /// The reference clock, Redis `TIME`, in µs since the Unix epoch (retried as a step).
    ///
    /// # Errors
    /// [`Error::Unavailable`] once [`CustodyOptions::retry_for`] has passed.
    pub async fn reference_now_us(&self) -> Result<u64, Error> {
        self.retrying(|| self.time_once()).await
    }

    /// A reading of the reference clock with the local `Instant`s just before and just after
    /// it: of three readings, the one with the shortest round trip (the smallest error either
    /// way when a busy host stalls between the two).
    pub(crate) async fn reference_reading(&self) -> Result<(Instant, u64, Instant), Error> {
        let mut best: Option<(Instant, u64, Instant)> = None;
        for _ in 0..3 {
            let before = Instant::now();
            let reference = self.reference_now_us().await?;
            let after = Instant::now();
            if best.is_none_or(|(b, _, a)| after - before < a - b) {
                best = Some((before, reference, after));
            }
        }
        match best {
            Some(r) => Ok(r),
            None => Err(Error::UnexpectedReply("no clock reading".into())),
        }
    }

    async fn time_once(&self) -> Result<u64, Error> {
        let p = &self.protocol;
        let mut conn = p.conn.clone();
        let (secs, micros): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut conn)
            .await
            .map_err(|e| map_redis(e, &p.url, p.password.as_deref()))?;
        Ok(secs.saturating_mul(1_000_000).saturating_add(micros))
    }

    /// `acquire` (no record → OWNED by this member, epoch 1), retried with one token.
    ///
    /// # Errors
    /// [`Rejection::Taken`]; [`Error::Unavailable`] after [`CustodyOptions::retry_for`].
    pub async fn acquire(&self, queue: &[u8]) -> Result<Applied, Error> {
        let t = Token::generate();
        self.retrying(|| self.protocol.acquire(queue, &t)).await
    }

    /// `recover` after a restart (same name, new boot), retried with one token. The record it
    /// returns tells the caller what is its own: OWNED (reload the queue), CLAIMED
    /// ([`Custody::resume`], fetch again), or OFFERED by it / anything held by another
    /// member (its copy is no longer its own).
    ///
    /// # Errors
    /// [`Rejection::Absent`], [`Rejection::Taken`]; [`Error::Unavailable`].
    pub async fn recover(&self, queue: &[u8]) -> Result<Applied, Error> {
        let t = Token::generate();
        self.retrying(|| self.protocol.recover(queue, &t)).await
    }

    /// Reads the record (and `taken_chunks` of `fenced_epoch`'s offer), retried.
    ///
    /// # Errors
    /// [`Error::Unavailable`]; [`Rejection::OtherQueue`].
    pub async fn read(&self, queue: &[u8], fenced_epoch: Option<u64>) -> Result<View, Error> {
        self.retrying(|| self.protocol.read(queue, fenced_epoch))
            .await
    }

    /// Starts offering `queue` of `scheduler`, owned by this member at `epoch`: see
    /// [`Outgoing`]. Nothing happens until its first step.
    pub fn outgoing<'a, Q, K, T>(
        &'a self,
        scheduler: &'a Scheduler<Q, K, T>,
        queue: Q,
        epoch: u64,
    ) -> Outgoing<'a, Q, K, T>
    where
        Q: AsRef<[u8]> + Hash + Eq + Clone,
        K: Hash + Eq + Clone + Serialize,
        T: Serialize,
    {
        Outgoing::new(self, scheduler, queue, epoch)
    }

    /// The whole source side in one call: freeze, prepare (for `to`, or anyone), append,
    /// await in-flight, forward, seal (with the queue's hold and limits, see
    /// [`Outgoing::seal`]), drop the local copy.
    ///
    /// # Errors
    /// As the [`Outgoing`] steps. No value is lost on an error:
    /// - [`CustodyError::Fenced`] hands back the values no claimer took;
    /// - any other error before the seal *aborts* the offer ([`Outgoing::abort`]): the queue
    ///   is unfrozen and its values are back in `scheduler`, then the error is returned (retry
    ///   the whole `offer` when it is retryable). While Redis stays unreachable, the abort is
    ///   retried (same token) until Redis answers: the chunks already sent must be withdrawn
    ///   before the values may be dispatched here again, or a reclaimer could take them after
    ///   the lease and both hosts would hold them. Use the [`Outgoing`] steps for a bounded
    ///   wait;
    /// - an abort refused because the offer was sealed after all (its reply was lost) leaves
    ///   the values where the seal put them, in Redis.
    pub async fn offer<Q, K, T>(
        &self,
        scheduler: &Scheduler<Q, K, T>,
        queue: Q,
        epoch: u64,
        to: Option<&str>,
    ) -> Result<Offered, CustodyError<K, T>>
    where
        Q: AsRef<[u8]> + Hash + Eq + Clone,
        K: Hash + Eq + Clone + Serialize,
        T: Serialize,
    {
        let mut out = self.outgoing(scheduler, queue, epoch);
        out.freeze()?;
        let sent = async {
            out.prepare(to).await?;
            out.append_pending().await?;
            out.await_in_flight().await?;
            out.forward().await?;
            out.seal().await
        }
        .await;
        match sent {
            Ok(_) => out.finish(),
            Err(e @ CustodyError::Fenced { .. }) => Err(e),
            Err(e) => {
                loop {
                    match out.abort().await {
                        Err(a) if a.is_retryable() => {
                            tracing::warn!(error = %a, "offer failed; retrying its abort");
                            tokio::time::sleep(self.options.poll_interval).await;
                        }
                        // Fenced: the values no one took are in `a`, which the caller gets.
                        Err(a @ CustodyError::Fenced { .. }) => return Err(a),
                        _ => break,
                    }
                }
                Err(e)
            }
        }
    }

    /// `claim`: an offered `queue` (for this member, for anyone, or lapsed) → CLAIMED by this
    /// member, epoch + 1. Then [`Incoming::fetch`].
    ///
    /// # Errors
    /// [`Rejection::NotOffered`] (another won, or nothing offered), [`Rejection::Absent`];
    /// [`Error::Unavailable`].
    pub async fn claim<Q, K, T>(&self, queue: Q) -> Result<Incoming<'_, Q, K, T>, Error>
    where
        Q: AsRef<[u8]>,
    {
        self.take(&CLAIM, queue, None).await
    }

    /// `reclaim`: a PREPARING, OFFERED or CLAIMED `queue` past its deadline (a dead source or
    /// claimer) → CLAIMED by this member. From PREPARING it takes the chunks in so far.
    ///
    /// # Errors
    /// [`Rejection::NotExpired`], [`Rejection::WrongState`] (OWNED), [`Rejection::Absent`];
    /// [`Error::Unavailable`].
    pub async fn reclaim<Q, K, T>(&self, queue: Q) -> Result<Incoming<'_, Q, K, T>, Error>
    where
        Q: AsRef<[u8]>,
    {
        self.take(&RECLAIM, queue, None).await
    }

    /// Resumes a claim this member holds (e.g. the record [`Custody::recover`] returned in
    /// CLAIMED): fetch again, make durable, commit.
    ///
    /// # Errors
    /// [`Rejection::WrongState`] if the record is not CLAIMED by this member (name and boot).
    pub fn resume<Q: AsRef<[u8]>, K, T>(
        &self,
        queue: Q,
        record: Record,
    ) -> Result<Incoming<'_, Q, K, T>, Error> {
        Incoming::new(self, queue, record)
    }

    /// The whole target side in one call: claim, fetch, commit, import. The entries are in
    /// the scheduler only after the commit, and after the offer's hold and limits are
    /// applied there (see [`Incoming::import`]). While Redis is unreachable at the commit, the
    /// commit is retried with its token until Redis answers (it may have applied, and with it
    /// deleted the copy in Redis): the fetched entries are never dropped after a commit that
    /// may have applied. A queue this scheduler had frozen (it offered the queue away before)
    /// is unfrozen by the import: it is this member's again.
    ///
    /// # Errors
    /// As [`Custody::claim`] and the [`Incoming`] steps.
    pub async fn receive<Q, K, T>(
        &self,
        scheduler: &Scheduler<Q, K, T>,
        queue: Q,
    ) -> Result<Received<K, T>, CustodyError<K, T>>
    where
        Q: AsRef<[u8]> + Hash + Eq + Clone,
        K: Hash + Eq + Clone + DeserializeOwned,
        T: DeserializeOwned,
    {
        let mut inc = self.claim(queue).await?;
        inc.fetch().await?;
        // A commit whose outcome is unknown may have applied (Redis then deleted its copy):
        // the fetched entries are kept and the commit retried (same token) until Redis answers.
        loop {
            match inc.commit().await {
                Err(e) if e.is_retryable() => {
                    tracing::warn!(error = %e, "commit outcome unknown; retrying");
                    tokio::time::sleep(self.options.poll_interval).await;
                }
                Err(e) => return Err(e),
                Ok(_) => break,
            }
        }
        inc.import(scheduler)
    }

    /// Waits (up to `wait`) until the offer `queue` made at `epoch` is settled, polling the
    /// owner record every [`CustodyOptions::poll_interval`] (no pub/sub).
    ///
    /// ```no_run
    /// # async fn demo(c: tickwheel_redis::Custody) -> Result<(), tickwheel_redis::Error> {
    /// use std::time::Duration;
    /// use tickwheel_redis::Outcome;
    /// match c.outcome(b"example.com", 4, Duration::from_secs(60)).await? {
    ///     Outcome::Committed { record, .. } => println!("now owned by {}", record.owner.name),
    ///     other => println!("{other:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Unavailable`] (after retrying); [`Rejection::OtherQueue`].
    pub async fn outcome(
        &self,
        queue: &[u8],
        epoch: u64,
        wait: Duration,
    ) -> Result<Outcome, Error> {
        let until = Instant::now() + wait;
        loop {
            let view = self.read(queue, Some(epoch)).await?;
            let Some(record) = view.record else {
                return Ok(Outcome::Absent);
            };
            let open = record.state != State::Owned
                && record.source.as_ref().is_some_and(|(_, e)| *e == epoch);
            if !open && (record.epoch > epoch || record.state == State::Owned) {
                let taken = view.taken_chunks.unwrap_or(0);
                return Ok(if taken > 0 {
                    Outcome::Committed {
                        record,
                        taken_chunks: taken,
                    }
                } else {
                    Outcome::Returned(record)
                });
            }
            if Instant::now() >= until {
                return Ok(Outcome::Pending(record));
            }
            tokio::time::sleep(self.options.poll_interval).await;
        }
    }

    /// `script` (claim or reclaim; at `epoch` when given, else epoch + 1) retried with one
    /// token, as an [`Incoming`]: what [`Protocol::claim`], [`Protocol::claim_at`] and their
    /// reclaim forms run, the durability check first.
    pub(crate) async fn take<Q: AsRef<[u8]>, K, T>(
        &self,
        script: &Script,
        queue: Q,
        epoch: Option<u64>,
    ) -> Result<Incoming<'_, Q, K, T>, Error> {
        let t = Token::generate();
        let a = self
            .retrying(|| async {
                let p = &self.protocol;
                p.check_durability().await?;
                p.step(script, queue.as_ref(), &t, epoch).await
            })
            .await?;
        Incoming::new(self, queue, a.record)
    }

    /// Runs `call` until it is not [`Error::Unavailable`] or `retry_for` has passed, pausing
    /// 20 ms, then twice as long each time up to 1 s. The caller keeps the token fixed.
    pub(crate) async fn retrying<R, F, Fut>(&self, mut call: F) -> Result<R, Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<R, Error>>,
    {
        let until = Instant::now() + self.options.retry_for;
        let mut pause = Duration::from_millis(20);
        loop {
            match call().await {
                Err(e) if e.is_retryable() && Instant::now() < until => {
                    tracing::debug!(error = %e, "retrying with the same token");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                other => return other,
            }
        }
    }
}

/// The fenced-off state of a rejection, if it is one.
pub(crate) fn fenced_of(e: &Error) -> Option<(Record, u64)> {
    match e.rejection() {
        Some(Rejection::Fenced {
            record,
            taken_chunks,
        }) => Some((record.clone(), taken_chunks.unwrap_or(0))),
        _ => None,
    }
}
