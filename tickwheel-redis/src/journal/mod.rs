//! A journal of a queue's live timers in Redis, fenced by the queue's owner epoch, so that
//! whoever adopts the queue next (with a larger token) rebuilds it from Redis.
//!
//! # What is stored
//!
//! Live timers only: one record per timer, put when it is scheduled or imported, put again
//! when it is rescheduled (a retry at a new deadline), deleted when it ends (delivered and
//! confirmed, cancelled, drained). A hand-out writes nothing: the record stays until the
//! timer ends, so a timer in flight when its owner dies is rebuilt and handed out again by
//! the next owner (at least once, as everywhere across a crash). Compaction is inherent:
//! an ended timer's record is deleted in place, so Redis holds the live set and nothing else,
//! whatever the history (no log to replay, no snapshot to take).
//!
//! A record is a hash field: the id's bytes → the deadline (µs since the Unix epoch on the
//! reference clock, Redis `TIME`, as in a handoff's chunks) as an LEB128 varint, then the
//! value's bytes. [`Op::put_entry`] and [`JournalRecord::entry`] encode a typed id and value
//! in MessagePack, as the handoff's chunks do.
//!
//! # Layout and memory
//!
//! A queue's records are spread over bucket hashes by linear hashing (Litwin 1980) on a
//! 32-bit FNV-1a of the id: `PREFIX:{HEX}:j:0`, `:j:1`, ... plus a small meta hash
//! `PREFIX:{HEX}:jm` (live count, level, split pointer), all under the queue's hash tag
//! ([`JournalKeys`](crate::keys::JournalKeys)), so one queue's keys live on one Redis Cluster
//! slot. A put that takes the live count above [`JournalOptions::bucket_load`] times the
//! buckets splits one bucket (half its records move to a new bucket): buckets hold
//! `bucket_load` records on average and at most twice that in expectation, so each stays a
//! listpack (Redis's compact encoding, default `hash-max-listpack-entries 128`) and a record
//! costs its id, its varint deadline and its value plus a few bytes of listpack framing,
//! instead of the ~70–100 bytes of a field in a hashtable-encoded hash. (A field or record
//! longer than `hash-max-listpack-value`, 64 bytes by default, turns its bucket into a
//! hashtable: still correct, larger.) The `journal_figures` example measures the bytes per
//! timer: about 22 plus the value's. Buckets never merge back while records remain; when the last record goes, the meta goes
//! too and the queue starts over at one bucket.
//!
//! # Fencing
//!
//! Every write and every page of a load is one Lua script that first checks that the
//! queue's owner record (the handoff's, see [`Protocol`]) holds the caller's token as its
//! epoch — the fleet's fencing token — and otherwise writes and reads nothing and answers
//! [`JournalError::Fenced`] with the record's epoch. So once a new holder's `adopt` or
//! `claim_at` made its larger token current, every batch of the old holder is refused, in
//! Redis, whatever the old holder believes.
//!
//! # Group commit and durability
//!
//! [`Journal::submit`] queues a request and returns at once; a task gathers requests for
//! [`JournalOptions::window`] (when nothing else is waiting), groups them by (queue, token)
//! and sends the whole batch as one pipeline: one `EVALSHA` per group (split at
//! [`JournalOptions::max_call_ops`], never inside a request), each applying its ops in order,
//! atomically (no other client sees part of a call; a fenced call writes nothing; Redis does
//! not roll back a script that fails midway, which these scripts avoid: every op is checked
//! before the first write). The [`Pending`] a submit returned resolves once Redis answered that call. The
//! server must run `appendonly yes` and `appendfsync always`: [`Protocol::connect`] checks
//! it, every batch's pipeline reads both settings back after its scripts (a server switched
//! away from them before or while the scripts ran fails the whole batch with
//! [`Error::UnsafeServer`](crate::Error::UnsafeServer): written, but not acknowledged as
//! durable), and the full check (the replication role too) runs again before a batch once
//! [`JournalOptions::durability_recheck`] has passed; all refused unless
//! [`Options::allow_unsafe_durability`](crate::Options::allow_unsafe_durability). Redis then
//! writes and fsyncs its AOF before it sends the replies of an event-loop iteration, so an
//! answered call survives a crash of Redis, and a crash of the writer loses nothing that was
//! answered.
//!
//! # Across a handoff and an adoption
//!
//! The records are the queue's, not the writer's: a handoff's claimer finds them in place.
//! A source that journals every change until its seal leaves exactly the offer's timers
//! in the journal (deadlines on the same reference clock), so the claimer need not write them
//! again; it must not [`Op::Clear`] them either, or an adopter after its death would find
//! nothing. An adopter loads the journal under its new token and imports the records
//! beside a leftover sealed offer, if `adopt` found one: both carry the ids, and
//! `Scheduler::import` is idempotent by id. A timer the old holder ended but whose end was
//! refused ([`JournalError::Fenced`]) or never sent is loaded and fires again: at least once.
//!
//! # Retries
//!
//! [`JournalError::is_retryable`] (Redis unreachable, a response timeout) leaves the outcome
//! unknown. Each op is idempotent (a put of the same record, a delete), so sending the same
//! ops again under the same token is safe, with one caveat: a resent put applied after a
//! later end of the same id brings the record back, and the timer would fire again after an
//! adoption (a duplicate, never a loss).
//!
//! # Example
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use tickwheel_redis::journal::{Journal, JournalOptions, Op};
//! use tickwheel_redis::{Member, Options, Protocol};
//! let p = Protocol::connect("redis://127.0.0.1:6379/", Member::new_boot("mx1"), Options::default()).await?;
//! let token = 7; // the fleet's token for the queue, made current by `adopt`
//! p.adopt(b"example.com", token, &tickwheel_redis::Token::generate()).await?;
//! let journal = Journal::start(p, JournalOptions::default())?;
//! let put = Op::Put { id: b"42".to_vec(), deadline_us: 1_700_000_000_000_000, value: b"m".to_vec() };
//! journal.write(b"example.com", token, vec![put]).await?; // durable once it returns
//! let live = journal.load(b"example.com", token).await?;
//! assert_eq!(live.len(), 1);
//! # Ok(()) }
//! ```

mod batch;
mod error;
mod load;
mod record;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use serde::de::DeserializeOwned;
use tickwheel::sync::snapshot::SnapshotEntry;
use tokio::sync::{mpsc, oneshot};

pub use error::JournalError;

/// The longest id a journal record may have, in bytes (message ids, UUIDs and ULIDs are far
/// shorter). The scripts hash each id byte by byte in Lua (about 0.14 ms a KiB), once at its
/// put and again at every split of its bucket, all while Redis serves nobody else: at this
/// bound a split of a crowded bucket costs milliseconds, where 4 MiB ids made it seconds.
pub const MAX_ID_BYTES: usize = 1024;
pub use record::{JournalRecord, Op};

use crate::protocol::Protocol;

/// The journal's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalOptions {
    /// How long the batching task waits for more requests after the first of a batch when
    /// nothing else is queued (default 1 ms). Zero: send at once.
    pub window: Duration,
    /// Most ops in one script call (default 2 048): bounds how long one call holds Redis
    /// (a few µs per op). A single request with more ops goes in a call of its own.
    pub max_call_ops: usize,
    /// Most ops gathered into one pipeline (default 65 536); the rest wait for the next one.
    pub max_batch_ops: usize,
    /// Buckets read per script call of [`Journal::load`] (default 64, at most about
    /// 64 × 2 × `bucket_load` records a call).
    pub load_page_buckets: u64,
    /// Script calls of [`Journal::load`] sent in one round trip, one pipeline run in order
    /// (default 4: about 8 000 records with the defaults). The next round trip goes out while
    /// the caller decodes the last; each call still holds Redis for one page only. 0 counts
    /// as 1.
    pub load_pages_per_trip: u64,
    /// Average records per bucket before a bucket splits (default 32; the buckets not yet
    /// split in a round hold about twice that). Keep `2 × bucket_load` well under the
    /// server's `hash-max-listpack-entries` (128 by default) or buckets leave the listpack
    /// encoding. Writers of one queue may differ: the layout does not depend on it. 0 counts
    /// as 1.
    pub bucket_load: u32,
    /// How often the batching task runs the full durability check again before a batch
    /// (`appendonly yes`, `appendfsync always`, a primary, not a replica; default 1 s); a
    /// failed check fails the batch with nothing sent. The two settings are also read back
    /// at the end of every batch's pipeline, whatever this interval.
    pub durability_recheck: Duration,
}

impl Default for JournalOptions {
    fn default() -> Self {
        JournalOptions {
            window: Duration::from_millis(1),
            max_call_ops: 2048,
            max_batch_ops: 65_536,
            load_page_buckets: 64,
            load_pages_per_trip: 4,
            bucket_load: 32,
            durability_recheck: Duration::from_secs(1),
        }
    }
}

/// What an acknowledged write left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// The queue's live records right after the script call that carried the write (other
    /// requests of the same call included).
    pub live: u64,
}

/// A submitted write: resolves once Redis answered the script call that carried it.
/// Dropping it does not withdraw the write.
#[derive(Debug)]
#[must_use = "a write is durable only once its Pending resolves to Ok"]
pub struct Pending {
    rx: oneshot::Receiver<Result<Written, JournalError>>,
}

impl Future for Pending {
    type Output = Result<Written, JournalError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(JournalError::Closed)))
    }
}

/// The journal of live timers of any number of queues, over one [`Protocol`] connection.
/// Cheap to clone (one channel to one batching task); the task stops when every clone is
/// dropped, after answering what was submitted.
#[derive(Clone)]
pub struct Journal {
    tx: mpsc::UnboundedSender<batch::Request>,
    protocol: Protocol,
    options: JournalOptions,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("protocol", &self.protocol)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Journal {
    /// Starts the batching task on the current tokio runtime, writing through `protocol`'s
    /// connection (whose [`Protocol::connect`] checked the server's durability) under its
    /// key prefix.
    ///
    /// # Errors
    /// [`JournalError::NoRuntime`] outside a tokio runtime.
    pub fn start(protocol: Protocol, options: JournalOptions) -> Result<Journal, JournalError> {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| JournalError::NoRuntime)?;
        let (tx, rx) = mpsc::unbounded_channel();
        handle.spawn(batch::run(rx, protocol.clone(), options.clone()));
        Ok(Journal {
            tx,
            protocol,
            options,
        })
    }

    /// Queues `ops` for `queue` under `token` (the epoch the caller holds) and returns at
    /// once, without waiting; the ops are applied in order, in one atomic script call, after every earlier
    /// submit of this handle's task for the same queue. O(1) here; in Redis O(1) per put or
    /// end on a bucket of at most a few dozen records (a split moves half a bucket), and
    /// O(buckets) for [`Op::Clear`]. The queue is unbounded: a caller that submits faster
    /// than Redis applies grows it.
    ///
    /// The returned [`Pending`] resolves to [`Written`] once Redis acknowledged the call
    /// that carried these ops: durable from then on (see the module docs), or to
    /// - [`JournalError::Fenced`] if the owner record's epoch is not `token` (nothing written);
    /// - [`JournalError::Redis`] with [`Error::Unavailable`](crate::Error::Unavailable) (outcome
    ///   unknown: see the module docs on retries), [`Error::UnsafeServer`](crate::Error::UnsafeServer)
    ///   (nothing sent), [`Error::Redis`](crate::Error::Redis) or
    ///   [`Error::UnexpectedReply`](crate::Error::UnexpectedReply);
    /// - [`JournalError::IdTooLong`] if an op's id is over [`MAX_ID_BYTES`] (nothing of the
    ///   request sent);
    /// - [`JournalError::Closed`] if the batching task is gone.
    pub fn submit(&self, queue: &[u8], token: u64, ops: Vec<Op>) -> Pending {
        let (reply, rx) = oneshot::channel();
        if let Some(len) = ops.iter().filter_map(Op::id).map(<[u8]>::len).max()
            && let Err(e) = record::check_id_len(len)
        {
            let _ = reply.send(Err(e));
            return Pending { rx };
        }
        // A closed channel drops the request and its sender: the Pending answers Closed.
        let _ = self.tx.send(batch::Request {
            queue: queue.to_vec(),
            token,
            ops,
            reply,
        });
        Pending { rx }
    }

    /// [`Journal::submit`] and wait for it: returns once the ops are durable in Redis.
    ///
    /// # Errors
    /// As [`Journal::submit`]'s [`Pending`].
    pub async fn write(
        &self,
        queue: &[u8],
        token: u64,
        ops: Vec<Op>,
    ) -> Result<Written, JournalError> {
        self.submit(queue, token, ops).await
    }

    /// Every live record of `queue`, for the holder of `token` (the caller's own `adopt` or
    /// `claim_at` made it current), in bucket order, each id once. Reads
    /// [`JournalOptions::load_page_buckets`] buckets a script call, each call fenced, and
    /// [`JournalOptions::load_pages_per_trip`] calls a round trip: O(live records + buckets)
    /// in all. Reads what Redis acknowledged; await this handle's pending writes of the queue
    /// first. A write under the same token between two pages may or may not be seen.
    /// De-duplicating against a leftover offer of an interrupted handoff (`Custody::adopt`
    /// answering `Adopted::Leftover`) is the caller's: both carry ids.
    ///
    /// # Errors
    /// [`JournalError::Fenced`] if the owner record's epoch is not `token` at any page (a newer
    /// holder: nothing returned); [`JournalError::Corrupt`] for a record with no readable
    /// deadline; [`JournalError::Redis`] as for a write (a read: retry at will).
    pub async fn load(&self, queue: &[u8], token: u64) -> Result<Vec<JournalRecord>, JournalError> {
        load::load(&self.protocol, queue, token, self.paging()).await
    }

    /// [`Journal::load`], each record decoded as [`JournalRecord::entry`] does (id and value
    /// in MessagePack, as [`Op::put_entry`] wrote them): the entries an adopter converts with
    /// `snapshot::from_reference` and hands to `Scheduler::import`. O(live records + buckets).
    ///
    /// # Errors
    /// As [`Journal::load`]; [`JournalError::Corrupt`] (naming the queue) for a record whose
    /// id is not a `K` or whose value is not a `T`.
    pub async fn load_entries<K: DeserializeOwned, T: DeserializeOwned>(
        &self,
        queue: &[u8],
        token: u64,
    ) -> Result<Vec<SnapshotEntry<K, T>>, JournalError> {
        self.load(queue, token)
            .await?
            .iter()
            .map(|r| {
                r.entry().map_err(|e| match e {
                    JournalError::Corrupt { message, .. } => JournalError::Corrupt {
                        queue: queue.to_vec(),
                        message,
                    },
                    other => other,
                })
            })
            .collect()
    }

    /// [`Journal::load_entries`] a page at a time: `each` gets each page's entries (up to
    /// [`JournalOptions::load_page_buckets`] buckets' worth, maybe none) in bucket order as
    /// they arrive, while Redis reads the next round trip's pages, so an adopter imports one
    /// page as the next is read and never holds the whole journal decoded. Returns the number
    /// of entries handed to `each`. O(live records + buckets).
    ///
    /// Each id comes once, unless a write under `token` split a bucket while the load ran
    /// (the holder of `token` writing during its own load): then a record the split moved
    /// may come twice, the later the newer ([`Journal::load`] keeps only that one).
    ///
    /// # Errors
    /// As [`Journal::load_entries`]; `each` has then already had the pages before the failed
    /// one: a caller that must not keep part of the journal undoes what it did with them.
    pub async fn load_each<K: DeserializeOwned, T: DeserializeOwned>(
        &self,
        queue: &[u8],
        token: u64,
        each: impl FnMut(Vec<SnapshotEntry<K, T>>),
    ) -> Result<usize, JournalError> {
        load::load_each(&self.protocol, queue, token, self.paging(), each).await
    }

    fn paging(&self) -> load::Paging {
        load::Paging {
            page: self.options.load_page_buckets,
            depth: self.options.load_pages_per_trip,
        }
    }

    /// The connection the journal writes through.
    pub fn protocol(&self) -> &Protocol {
        &self.protocol
    }

    /// The options in force.
    pub fn options(&self) -> &JournalOptions {
        &self.options
    }
}
