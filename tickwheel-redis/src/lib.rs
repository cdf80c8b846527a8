//! Moves a [`tickwheel`] scheduled queue between hosts through Redis. The steps are fenced and
//! idempotent: nothing lost, nothing doubled.
//!
//! This crate holds the protocol layer:
//!
//! - the owner record of each queue;
//! - every step as one Lua script;
//! - the chunk encoding of an offer.
//!
//! [`Protocol`] has one async method per step.
//!
//! # States
//!
//! Each queue has an owner record (a Redis hash) in one of four [`State`]s:
//!
//! ```text
//!   acquire        prepare          seal            claim / reclaim     commit
//! ─────────▶ OWNED ───────▶ PREPARING ─────▶ OFFERED ───────────────▶ CLAIMED ──────▶ OWNED
//!              ▲               │ abort                                   │ (new owner)
//!              └───────────────┘          PREPARING/OFFERED/CLAIMED past deadline ─reclaim─▶ CLAIMED
//! ```
//!
//! | step | who | from → to |
//! |---|---|---|
//! | `acquire` | a member | no record → OWNED, epoch 1 |
//! | `recover` | a restarted member (same name, new boot) | OWNED/PREPARING → OWNED, CLAIMED → CLAIMED, epoch + 1; OFFERED unchanged |
//! | `prepare` | the owner | OWNED → PREPARING (deadline now + lease, optional target) |
//! | `append` | the owner | PREPARING: chunk *i*, in order |
//! | `seal` | the owner | PREPARING → OFFERED (deadline now + offer TTL), with the queue's flow policy ([`FlowPolicy`]) |
//! | `abort` | the owner | PREPARING → OWNED, the unsealed offer deleted |
//! | `claim` | any member | OFFERED (for it, for anyone, or lapsed) → CLAIMED, epoch + 1 |
//! | `reclaim` | any member | PREPARING/OFFERED/CLAIMED past the deadline → CLAIMED, epoch + 1 |
//! | `commit` | the claimer | CLAIMED → OWNED, only now the data (and the offer's policy) deleted |
//! | `renew` | the holder | deadline = now + lease |
//! | `adopt(E)` | a coordinator's new holder | E > epoch: OWNED/PREPARING → OWNED (unsealed chunks dropped), OFFERED/CLAIMED → CLAIMED, epoch = E |
//! | `claim_at(E)`, `reclaim_at(E)` | any member | as `claim`/`reclaim`, epoch = E (> epoch) |
//!
//! Every step is one script, run atomically by Redis. It checks the caller's (name, boot id,
//! epoch) against the record where the step needs it. Deletes are included: `abort` and
//! `commit` delete only for the current holder. The script answers with the record as it is
//! after the step, or with a typed [`Rejection`] carrying the record.
//!
//! Each mutating call takes a caller-chosen [`Token`]. A retry with the same token after a
//! lost reply reports [`Effect::Repeated`] and acts no second time. (A response timeout does
//! not mean the script did not run.) Deadlines are on one reference clock, the server's
//! `TIME`, read inside the script.
//!
//! # The guarantee
//!
//! - **Exactly-once ownership**: at any moment one member owns (and may dispatch) a queue. The
//!   epoch is a fencing token. It rises on every change of owner, a new boot of the same name
//!   included. Every write is checked against it where the data lives.
//! - **Exactly-once custody**: at every moment, every timer is in exactly one place: a
//!   member's scheduler, Redis, or a value handed back to the caller. The data stays in Redis
//!   until the claimer commits. Deadlines decide who may act next and never delete data. A
//!   fenced source learns from [`Rejection::Fenced`] how many of its chunks were taken. It
//!   gets the rest back.
//! - **Firing across a crash is at-least-once**, for this crate as for anyone. Say a member
//!   dies after dispatching a timer and before recording it. The next owner may dispatch it
//!   again. Every dispatch can carry the timer's (id, epoch) so a sink can de-duplicate.
//!   Nothing more is claimed.
//!
//! # Redis configuration
//!
//! Use one primary with `appendonly yes` and `appendfsync always`. [`Protocol::connect`]
//! checks both and the replication role. It refuses otherwise, unless
//! [`Options::allow_unsafe_durability`] is set (then it logs a loud warning). What breaks
//! without them:
//!
//! - With `appendfsync everysec` (or no AOF), a Redis crash can lose up to a second of
//!   acknowledged steps. A claim the claimer was told it won can vanish. The source dropped
//!   its copy after `seal`, and may find the offer gone: custody is lost.
//! - After a failover to a replica (asynchronous replication), the same holds. Acknowledged
//!   steps that had not reached the replica are gone. Two members can believe they own a
//!   queue.
//!
//! Keys of one queue share a hash tag (see [`keys`]), so the scripts also run on Redis
//! Cluster. The durability requirement then applies to every primary.
//!
//! # Why redis-rs
//!
//! The [`redis`] crate is the maintained, official Rust client.
//!
//! - Its [`redis::Script`] sends `EVALSHA` and falls back to loading the script on
//!   `NOSCRIPT`. (After a server restart the script cache is empty.)
//! - Its `ConnectionManager` reconnects on its own.
//! - It speaks TLS through rustls: `rediss://` URLs, and a private CA and a client
//!   certificate through [`Options::tls`].
//! - It speaks ACL users.
//!
//! # Security
//!
//! Queue names, member names and ids are user data. They reach Redis only as `KEYS` and
//! `ARGV`, never in script text. Queue names are hex-encoded into keys. This encoding is
//! injective, so a `{`, `}`, newline or binary byte neither breaks the hash tag nor meets
//! another queue's keys. No error or `Debug` output contains a URL's password
//! ([`redact_url`]).
//!
//! # Example
//! ```no_run
//! # async fn demo() -> Result<(), tickwheel_redis::Error> {
//! use tickwheel_redis::{Member, Options, Protocol, State, Token};
//! let url = "redis://127.0.0.1:6379/";
//! let source = Protocol::connect(url, Member::new_boot("mx1"), Options::default()).await?;
//! let target = Protocol::connect(url, Member::new_boot("mx2"), Options::default()).await?;
//! let q = b"example.com";
//! let epoch = source.acquire(q, &Token::generate()).await?.record.epoch;
//! source.prepare(q, epoch, Some("mx2"), &Token::generate()).await?;
//! source.append(q, epoch, 0, b"<chunk bytes>", 1, &Token::generate()).await?;
//! source.seal(q, epoch, 1, 1, &Token::generate()).await?;
//! let claimed = target.claim(q, &Token::generate()).await?;
//! assert_eq!(claimed.record.state, State::Claimed);
//! let bytes = target.fetch(q, claimed.record.epoch, 0).await?;
//! // ... decode with chunk::Chunk::decode, make the entries durable, then:
//! target.commit(q, claimed.record.epoch, &Token::generate()).await?;
//! # let _ = bytes; Ok(()) }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod chunk;
mod connect;
mod custody;
mod error;
mod external;
pub mod journal;
pub mod keys;
mod policy;
mod protocol;
mod record;
mod tls;

pub use connect::redact_url;
pub use custody::{
    Custody, CustodyError, CustodyOptions, Incoming, Offered, Outcome, Outgoing, Received,
};
pub use error::{Error, Rejection};
pub use external::Adopted;
pub use policy::{FlowPolicy, POLICY_VERSION, PolicyError, PolicyText};
pub use protocol::{Applied, Effect, Options, Protocol, STEPS, View};
pub use record::{Member, Record, State, Token};
pub use tls::{ClientIdentity, TlsOptions};
