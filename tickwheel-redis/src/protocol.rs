//! The protocol steps, one Lua script each, as async calls.

mod reply;

use reply::{Reply, parse_reply};
pub(crate) use reply::{applied, number};

use crate::connect::{
    connect_error, durability_problems, map_redis, redact_url, scrub, scrub_url, typed_password,
    unsafe_server,
};
use crate::error::Error;
#[cfg(doc)]
use crate::error::Rejection;
use crate::keys::{DEFAULT_PREFIX, QueueKeys, validate_prefix};
use crate::policy::{FlowPolicy, PolicyText};
use crate::record::{Member, Record, Token};
use crate::tls::TlsOptions;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Script, Value};
use std::fmt;
use std::sync::LazyLock;
use std::time::Duration;

macro_rules! step_script {
    ($step:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                "local STEP = '",
                $step,
                "'\n",
                include_str!("lua/prelude.lua"),
                include_str!(concat!("lua/", $step, ".lua"))
            ))
        })
    };
}

static ACQUIRE: LazyLock<Script> = step_script!("acquire");
static RECOVER: LazyLock<Script> = step_script!("recover");
static PREPARE: LazyLock<Script> = step_script!("prepare");
static APPEND: LazyLock<Script> = step_script!("append");
static SEAL: LazyLock<Script> = step_script!("seal");
static ABORT: LazyLock<Script> = step_script!("abort");
pub(crate) static CLAIM: LazyLock<Script> = step_script!("claim");
pub(crate) static RECLAIM: LazyLock<Script> = step_script!("reclaim");
static COMMIT: LazyLock<Script> = step_script!("commit");
static RENEW: LazyLock<Script> = step_script!("renew");
static FETCH: LazyLock<Script> = step_script!("fetch");
static READ: LazyLock<Script> = step_script!("read");
pub(crate) static ADOPT: LazyLock<Script> = step_script!("adopt");

/// The names of the mutating steps, in protocol order.
pub const STEPS: [&str; 10] = [
    "acquire", "recover", "prepare", "append", "seal", "abort", "claim", "reclaim", "commit",
    "renew",
];

/// Connection and protocol settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Key prefix (default `tickwheel`); see [`validate_prefix`].
    pub prefix: String,
    /// How long a holder of PREPARING or CLAIMED (and a recovered CLAIMED) may act before
    /// another member may reclaim (default 30 s). Measured on the reference clock.
    pub lease: Duration,
    /// How long a sealed offer waits for its target before anyone may reclaim it (default 5 min).
    pub offer_ttl: Duration,
    /// How long one call waits for a reply before it fails with [`Error::Unavailable`]
    /// (default 5 s).
    pub response_timeout: Duration,
    /// How long connecting may take (default 5 s).
    pub connect_timeout: Duration,
    /// Connect even to a server without `appendonly yes` + `appendfsync always`, or to a
    /// replica, or one whose config cannot be read: logs a loud warning instead of refusing.
    /// The guarantee does not hold then (see the crate docs). Default `false`.
    pub allow_unsafe_durability: bool,
    /// The CA to trust and the client certificate to present on a `rediss://` URL (default
    /// `None`: the public web roots, no client certificate). Ignored for `redis://`.
    pub tls: Option<TlsOptions>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            prefix: DEFAULT_PREFIX.to_owned(),
            lease: Duration::from_secs(30),
            offer_ttl: Duration::from_secs(300),
            response_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            allow_unsafe_durability: false,
            tls: None,
        }
    }
}

/// What a successful step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// The step changed the record now.
    Changed,
    /// A retry: this token's call had already applied (or, for `append`, the same chunk was
    /// already in); nothing changed now.
    Repeated,
    /// `recover` of a sealed offer: nothing to recover, the offer stays for a claimer.
    Unchanged,
}

/// The result of a successful step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The record after the step, read in the same atomic step.
    pub record: Record,
    /// The reference clock (Redis `TIME`) when the script ran, ms since the Unix epoch.
    pub now_ms: u64,
    /// What the step did.
    pub effect: Effect,
}

/// The result of [`Protocol::read`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    /// The record, `None` if the queue has none.
    pub record: Option<Record>,
    /// The reference clock when the script ran, ms since the Unix epoch.
    pub now_ms: u64,
    /// `fenced[epoch]` for the epoch asked about: chunks of that epoch's offer another member
    /// took; `None` if none recorded.
    pub taken_chunks: Option<u64>,
}

/// The low-level protocol: one async method per step, each one Lua script run atomically by
/// Redis, checking the caller's (name, boot, epoch) where the step needs it, idempotent under a
/// retry with the same [`Token`]. Cheap to clone (one multiplexed connection that reconnects).
///
/// Every method returns `Err(Error::Rejected(..))` when the script refused (nothing changed),
/// `Err(Error::Unavailable{..})` when the outcome is unknown (retry with the same token), and
/// `Err(Error::UnexpectedReply)` for a reply of the wrong shape. Each call is one round trip,
/// O(1) in Redis except `prepare`/`abort`/`commit` (O(chunks) to delete the data) and
/// `append`/`fetch` (O(chunk bytes)).
///
/// # Example
/// ```no_run
/// # async fn demo() -> Result<(), tickwheel_redis::Error> {
/// use tickwheel_redis::{Member, Options, Protocol, Token};
/// let p = Protocol::connect("redis://127.0.0.1:6379/", Member::new_boot("mx1"), Options::default()).await?;
/// let owned = p.acquire(b"example.com", &Token::generate()).await?;
/// let epoch = owned.record.epoch;
/// p.prepare(b"example.com", epoch, Some("mx2"), &Token::generate()).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Protocol {
    pub(crate) conn: ConnectionManager,
    member: Member,
    options: Options,
    pub(crate) url: String,
    pub(crate) password: Option<String>,
}

impl fmt::Debug for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Protocol")
            .field("url", &self.url)
            .field("member", &self.member)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Protocol {
    /// Connects to `url` (`redis://`, `rediss://` for TLS, `redis+unix://`; ACL user and
    /// password in the URL) as `member`, then checks the server: `appendonly yes`,
    /// `appendfsync always`, role master.
    ///
    /// # Errors
    /// [`Error::Url`] for a bad URL, [`Error::Prefix`] for a bad prefix, [`Error::Unavailable`]
    /// if the server cannot be reached, [`Error::UnsafeServer`] if it is unsafe and
    /// [`Options::allow_unsafe_durability`] is off (with it on: a `tracing` warning). No error
    /// or `Debug` output contains the password.
    pub async fn connect(url: &str, member: Member, options: Options) -> Result<Self, Error> {
        validate_prefix(&options.prefix)?;
        // rustls needs a process-wide crypto provider for `rediss://`; without one it panics
        // on the first TLS connect. An error here means one is installed already: fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let redacted = redact_url(url);
        let opened = match &options.tls {
            Some(tls) if url.starts_with("rediss://") => {
                redis::Client::build_with_tls(url, tls.certificates())
            }
            _ => redis::Client::open(url),
        };
        let client = opened.map_err(|e| Error::Url {
            url: redacted.clone(),
            // The client may quote the URL, or a piece of it: neither the URL nor the password
            // as typed is repeated.
            message: scrub(&scrub_url(&e.to_string(), url), typed_password(url)),
        })?;
        let password = client
            .get_connection_info()
            .redis_settings()
            .password()
            .map(str::to_owned);
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(options.response_timeout))
            .set_connection_timeout(Some(options.connect_timeout))
            .set_number_of_retries(2);
        let mut conn = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(|e| connect_error(&e, &redacted, url, password.as_deref()))?;
        let problems = durability_problems(&mut conn)
            .await
            .map_err(|e| map_redis(e, &redacted, password.as_deref()))?;
        if !problems.is_empty() {
            if options.allow_unsafe_durability {
                tracing::warn!(
                    url = %redacted,
                    problems = %problems.join("; "),
                    "UNSAFE REDIS: allow_unsafe_durability is set; an acknowledged step can be \
                     lost on a crash or failover, and with it exactly-once custody"
                );
            } else {
                return Err(unsafe_server(url, &problems));
            }
        }
        Ok(Protocol {
            conn,
            member,
            options,
            url: redacted,
            password,
        })
    }

    /// This connection's member identity.
    pub fn member(&self) -> &Member {
        &self.member
    }

    /// The options in force.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// The keys of `queue` under this connection's prefix.
    pub fn keys(&self, queue: &[u8]) -> QueueKeys {
        QueueKeys::new(&self.options.prefix, queue)
    }

    /// acquire: no record -> OWNED by this member at epoch 1. Repeats report
    /// [`Effect::Repeated`] when this member and boot already own it.
    ///
    /// # Errors
    /// [`Rejection::Taken`] if another member or boot has the record.
    pub async fn acquire(&self, queue: &[u8], token: &Token) -> Result<Applied, Error> {
        self.step(&ACQUIRE, queue, token, None).await
    }

    /// recover, by a restarted member (same name, new boot): OWNED -> OWNED under this boot,
    /// epoch + 1; PREPARING -> OWNED (the unsealed offer is deleted: the member's own copy is
    /// in its spool), epoch + 1; CLAIMED -> CLAIMED under this boot, epoch + 1, deadline
    /// renewed (fetch the chunks again); OFFERED -> unchanged ([`Effect::Unchanged`]).
    ///
    /// # Errors
    /// [`Rejection::Absent`], or [`Rejection::Taken`] if another name holds the record.
    pub async fn recover(&self, queue: &[u8], token: &Token) -> Result<Applied, Error> {
        self.step(&RECOVER, queue, token, None).await
    }

    /// prepare, by the owner at `epoch`: OWNED -> PREPARING, deadline now + lease, optionally
    /// meant for `target`; data of a former offer of this epoch cleared.
    ///
    /// # Errors
    /// [`Rejection::Fenced`], [`Rejection::WrongState`]; [`Error::EmptyTarget`] for
    /// `Some("")` (nothing is sent).
    pub async fn prepare(
        &self,
        queue: &[u8],
        epoch: u64,
        target: Option<&str>,
        token: &Token,
    ) -> Result<Applied, Error> {
        if target == Some("") {
            return Err(Error::EmptyTarget);
        }
        let target = target.unwrap_or("").as_bytes();
        let r = self
            .call(&PREPARE, queue, Some(token), Some(epoch), &[target])
            .await?;
        applied(r, 0)
    }

    /// append, in PREPARING: chunk `index` (0, 1, 2, ... in order) holding `entries` entries.
    /// Re-sending a chunk already in with the same bytes is [`Effect::Repeated`].
    ///
    /// # Errors
    /// [`Rejection::Fenced`], [`Rejection::WrongState`], [`Rejection::OutOfOrder`],
    /// [`Rejection::ChunkConflict`] (same index, other bytes).
    pub async fn append(
        &self,
        queue: &[u8],
        epoch: u64,
        index: u64,
        chunk: &[u8],
        entries: u64,
        token: &Token,
    ) -> Result<Applied, Error> {
        let (i, n) = (index.to_string(), entries.to_string());
        let args: [&[u8]; 3] = [i.as_bytes(), chunk, n.as_bytes()];
        let r = self
            .call(&APPEND, queue, Some(token), Some(epoch), &args)
            .await?;
        applied(r, index)
    }

    /// seal: PREPARING -> OFFERED once Redis holds exactly `chunks` chunks with `entries`
    /// entries; the offer is claimable by its target (or anyone if none) and reclaimable by
    /// anyone after `offer_ttl`. After this the source may drop its copy. Stores no flow
    /// policy (the record gets no `policy`: a target applies none); see
    /// [`Self::seal_with_policy`].
    ///
    /// # Errors
    /// [`Rejection::Fenced`], [`Rejection::WrongState`], [`Rejection::CountMismatch`];
    /// [`Error::UnsafeServer`] if the server is no longer durable ([`Self::check_durability`]).
    pub async fn seal(
        &self,
        queue: &[u8],
        epoch: u64,
        chunks: u64,
        entries: u64,
        token: &Token,
    ) -> Result<Applied, Error> {
        self.seal_with_policy(queue, epoch, chunks, entries, None, token)
            .await
    }

    /// [`Self::seal`], storing `policy` (the queue's hold and limits, see [`FlowPolicy`])
    /// in the owner record in the same script call, under the same fencing check: the
    /// record is OFFERED with exactly this policy, or nothing changed. `None` stores none.
    /// A retry with the same token is [`Effect::Repeated`] and keeps the first call's
    /// policy. The record's [`Record::policy`] holds it until the claimer's `commit`.
    ///
    /// # Errors
    /// As [`Self::seal`].
    pub async fn seal_with_policy(
        &self,
        queue: &[u8],
        epoch: u64,
        chunks: u64,
        entries: u64,
        policy: Option<&FlowPolicy>,
        token: &Token,
    ) -> Result<Applied, Error> {
        self.check_durability().await?;
        let (c, n) = (chunks.to_string(), entries.to_string());
        let ttl = millis(self.options.offer_ttl).to_string();
        let policy = policy.map(FlowPolicy::encode).unwrap_or_default();
        let args: [&[u8]; 4] = [
            c.as_bytes(),
            n.as_bytes(),
            ttl.as_bytes(),
            policy.as_bytes(),
        ];
        let r = self
            .call(&SEAL, queue, Some(token), Some(epoch), &args)
            .await?;
        applied(r, 0)
    }

    /// abort: PREPARING -> OWNED, the unsealed offer's data deleted (the source still holds
    /// its copy).
    ///
    /// # Errors
    /// [`Rejection::Fenced`] (with the chunks taken), [`Rejection::WrongState`].
    pub async fn abort(&self, queue: &[u8], epoch: u64, token: &Token) -> Result<Applied, Error> {
        self.step(&ABORT, queue, token, Some(epoch)).await
    }

    /// claim: OFFERED (to nobody in particular, to this member, or past its deadline) ->
    /// CLAIMED by this member, epoch + 1, deadline now + lease. Of racing claimers exactly one
    /// wins.
    ///
    /// # Errors
    /// [`Rejection::Absent`], [`Rejection::NotOffered`].
    pub async fn claim(&self, queue: &[u8], token: &Token) -> Result<Applied, Error> {
        self.check_durability().await?;
        self.step(&CLAIM, queue, token, None).await
    }

    /// reclaim: OFFERED, CLAIMED or PREPARING past its deadline -> CLAIMED by this member,
    /// epoch + 1. From PREPARING the chunks in are what is taken (recorded for the fenced
    /// source, which gets the rest back).
    ///
    /// # Errors
    /// [`Rejection::Absent`], [`Rejection::WrongState`] (OWNED), [`Rejection::NotExpired`].
    pub async fn reclaim(&self, queue: &[u8], token: &Token) -> Result<Applied, Error> {
        self.check_durability().await?;
        self.step(&RECLAIM, queue, token, None).await
    }

    /// commit, by the claimer at `epoch`: CLAIMED -> OWNED; only now is the offer's data
    /// deleted. Call it after the claimed entries are durable on this member, and dispatch
    /// them only after it returns.
    ///
    /// # Errors
    /// [`Rejection::Fenced`], [`Rejection::WrongState`].
    pub async fn commit(&self, queue: &[u8], epoch: u64, token: &Token) -> Result<Applied, Error> {
        self.check_durability().await?;
        self.step(&COMMIT, queue, token, Some(epoch)).await
    }

    /// renew, by the holder at `epoch` of OWNED, PREPARING or CLAIMED: deadline = now + lease.
    ///
    /// # Errors
    /// [`Rejection::Fenced`], [`Rejection::WrongState`] (OFFERED: an offer's deadline is not a
    /// lease).
    pub async fn renew(&self, queue: &[u8], epoch: u64, token: &Token) -> Result<Applied, Error> {
        self.step(&RENEW, queue, token, Some(epoch)).await
    }

    /// Reads chunk `index` of the offer this member has CLAIMED at `epoch`. Read only.
    ///
    /// # Errors
    /// [`Rejection::Fenced`], [`Rejection::WrongState`], [`Rejection::MissingChunk`].
    pub async fn fetch(&self, queue: &[u8], epoch: u64, index: u64) -> Result<Vec<u8>, Error> {
        let i = index.to_string();
        let r = self
            .call(&FETCH, queue, None, Some(epoch), &[i.as_bytes()])
            .await?;
        let bytes = match &r.extra {
            Value::BulkString(b) => Some(b.clone()),
            _ => None,
        };
        let ok = applied(r, index)?;
        bytes.ok_or_else(|| {
            Error::UnexpectedReply(format!(
                "fetch of chunk {index}: no bytes ({:?})",
                ok.effect
            ))
        })
    }

    /// Reads the record and the reference clock; with `fenced_epoch`, also how many chunks of
    /// that epoch's offer another member took. Read only.
    ///
    /// # Errors
    /// [`Rejection::OtherQueue`]; transport errors.
    pub async fn read(&self, queue: &[u8], fenced_epoch: Option<u64>) -> Result<View, Error> {
        let e = fenced_epoch.map(|e| e.to_string()).unwrap_or_default();
        let r = self.call(&READ, queue, None, None, &[e.as_bytes()]).await?;
        let taken_chunks = number(&r.extra);
        match r.status.as_slice() {
            b"OK" | b"ABSENT" => Ok(View {
                record: r.record,
                now_ms: r.now_ms,
                taken_chunks,
            }),
            _ => applied(r, 0).map(|a| View {
                record: Some(a.record),
                now_ms: a.now_ms,
                taken_chunks,
            }),
        }
    }

    /// Checks the server's durability again (as at connect): the steps whose acknowledgement
    /// lets a member drop or take a copy — `seal`, `claim`, `reclaim`, `commit` — run it
    /// first, so a server reconfigured after connect (`CONFIG SET appendfsync no`) is refused
    /// there, not only at connect. Two `CONFIG GET`s and one `INFO` per such step.
    ///
    /// # Errors
    /// [`Error::UnsafeServer`] unless [`Options::allow_unsafe_durability`] (then a warning),
    /// [`Error::Unavailable`] if the server cannot be reached.
    pub async fn check_durability(&self) -> Result<(), Error> {
        let mut conn = self.conn.clone();
        let problems = durability_problems(&mut conn)
            .await
            .map_err(|e| map_redis(e, &self.url, self.password.as_deref()))?;
        if problems.is_empty() {
            return Ok(());
        }
        if self.options.allow_unsafe_durability {
            tracing::warn!(
                url = %self.url,
                problems = %problems.join("; "),
                "UNSAFE REDIS: allow_unsafe_durability is set; an acknowledged step can be \
                 lost on a crash or failover, and with it exactly-once custody"
            );
            return Ok(());
        }
        Err(Error::UnsafeServer {
            url: self.url.clone(),
            problems: problems.join("; "),
        })
    }

    /// A step that takes no arguments past the common ones: `script` run by `token` (at
    /// `epoch` when the step names one), its reply read as an [`Applied`].
    pub(crate) async fn step(
        &self,
        script: &Script,
        queue: &[u8],
        token: &Token,
        epoch: Option<u64>,
    ) -> Result<Applied, Error> {
        let r = self.call(script, queue, Some(token), epoch, &[]).await?;
        applied(r, 0)
    }

    pub(crate) async fn call(
        &self,
        script: &Script,
        queue: &[u8],
        token: Option<&Token>,
        epoch: Option<u64>,
        extra: &[&[u8]],
    ) -> Result<Reply, Error> {
        let keys = self.keys(queue);
        let epoch = epoch.map(|e| e.to_string()).unwrap_or_default();
        let mut inv = script.key(&keys.owner);
        inv.key(&keys.data)
            .key(&keys.fenced)
            .arg(queue)
            .arg(self.member.name.as_bytes())
            .arg(self.member.boot_id.as_bytes())
            .arg(token.map(Token::as_str).unwrap_or(""))
            .arg(epoch.as_bytes())
            .arg(millis(self.options.lease));
        for a in extra {
            inv.arg(*a);
        }
        let mut conn = self.conn.clone();
        let value: Value = inv
            .invoke_async(&mut conn)
            .await
            .map_err(|e| map_redis(e, &self.url, self.password.as_deref()))?;
        parse_reply(value)
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
