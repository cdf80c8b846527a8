//! Settings of a fleet member.

use std::fmt;
use std::time::Duration;

use tickwheel_redis::{CustodyOptions, Options as RedisOptions, redact_url};

/// How a member reaches etcd and Redis, and its timing. Build with [`FleetOptions::new`] and
/// change fields; [`FleetOptions::validate`] (called by `join`) checks the timing.
///
/// Timing (see [the fleet's design notes](https://github.com/tickwheel/tickwheel/blob/main/docs/fleet.md)): a member's own lease end is `sent + ttl − margin`, where
/// `sent` is the monotonic time read before sending the last keep-alive etcd acknowledged; a
/// takeover waits `grace` after etcd deleted the old owner key (at lease expiry, by etcd's
/// clock).
///
/// With the defaults (TTL 5 s, keep-alive every 1.67 s, margin 1 s, grace 1 s): a member
/// whose last acknowledged keep-alive was sent at `s` stops dispatching at `s + 4 s` by its
/// own clock; etcd expires the lease no earlier than `s + 5 s` by etcd's clock (it counts
/// from when it processed the request, after `s`), and a successor starts no earlier than
/// 1 s after it saw the key go. Safe as long as the two clocks' rates differ by less than
/// margin / TTL = 20 % over a lease, and a keep-alive missed twice in a row (3.3 s) still
/// leaves 0.7 s of lease: a member survives one lost keep-alive without fencing itself. A
/// member whose lease lapsed is replaced within TTL + grace + etcd's expiry check (up to 0.5 s)
/// plus the adoption's own time (a watch on the owner keys sees their deletion at once; one
/// placement period more while that watch is down).
#[derive(Clone)]
pub struct FleetOptions {
    /// etcd client endpoints, e.g. `["http://127.0.0.1:2379"]`. No credentials in them.
    pub etcd_endpoints: Vec<String>,
    /// Key prefix of this fleet (default `/tickwheel/`).
    pub prefix: String,
    /// Lease TTL granted at join (default 5 s; etcd rounds to whole seconds, minimum 1 s).
    pub lease_ttl: Duration,
    /// Keep-alive period (default `lease_ttl / 3`).
    pub keep_alive: Duration,
    /// Subtracted from the lease end computed at the send time (default `lease_ttl / 5`):
    /// covers clock-rate differences and the time etcd takes to process a keep-alive.
    pub margin: Duration,
    /// Wait after an owner key's deletion was observed before taking the queue over
    /// (default `lease_ttl / 5`).
    pub grace: Duration,
    /// etcd user and password (passed through to the client; never printed).
    pub etcd_user: Option<(String, String)>,
    /// etcd TLS (CA, client identity, domain), passed through to the client.
    pub etcd_tls: Option<etcd_client::TlsOptions>,
    /// Timeout of one etcd request and of the connection at join (default 3 s; zero is
    /// refused by `join` with [`Error::Options`](crate::Error::Options)).
    pub etcd_timeout: Duration,
    /// Redis URL for the handoffs (`redis://` or `rediss://`; a password in it is never
    /// printed).
    pub redis_url: String,
    /// Connection options of the Redis protocol.
    pub redis: RedisOptions,
    /// Retry and chunk settings of the handoffs.
    pub custody: CustodyOptions,
    /// Period of the placement loop: membership and ownership are re-read this often, when
    /// an owner key is deleted (an etcd watch), and when a grace ends (default 200 ms).
    pub poll_interval: Duration,
    /// How long `join` keeps trying while the name is taken (default 0: refuse at once).
    /// A member restarted right after a crash finds its previous process's key until that
    /// lease expires (at most `lease_ttl`); a wait a little above `lease_ttl` covers it.
    pub join_wait: Duration,
    /// How long a handoff source waits for the target to commit before it gives up on that
    /// round (its offer stays in Redis; the target or a later adopter takes it). Default 30 s.
    /// Not waited for when no other live member can take a queue: the last member's
    /// [`Member::leave`](crate::Member::leave) returns at once (see its docs for what becomes
    /// of its queues then).
    pub handoff_timeout: Duration,
    /// Keep each owned queue's live timers in Redis (`tickwheel_redis::journal`) with these
    /// settings (default `None`: off). On, [`Member::journal_put`](crate::Member::journal_put) and
    /// [`Member::journal_end`](crate::Member::journal_end) record changes under the queue's
    /// token, and an adoption loads the queue's journal before it calls the recovery hook, which
    /// may then return nothing.
    pub journal: Option<tickwheel_redis::journal::JournalOptions>,
}

impl FleetOptions {
    /// Defaults for one etcd endpoint and one Redis URL.
    pub fn new(etcd_endpoint: impl Into<String>, redis_url: impl Into<String>) -> Self {
        let ttl = Duration::from_secs(5);
        FleetOptions {
            etcd_endpoints: vec![etcd_endpoint.into()],
            prefix: "/tickwheel/".into(),
            lease_ttl: ttl,
            keep_alive: ttl / 3,
            margin: ttl / 5,
            grace: ttl / 5,
            etcd_user: None,
            etcd_tls: None,
            etcd_timeout: Duration::from_secs(3),
            redis_url: redis_url.into(),
            redis: RedisOptions::default(),
            custody: CustodyOptions::default(),
            poll_interval: Duration::from_millis(200),
            handoff_timeout: Duration::from_secs(30),
            journal: None,
            join_wait: Duration::ZERO,
        }
    }

    /// Sets the lease TTL and derives keep-alive (TTL/3), margin (TTL/5) and grace (TTL/5).
    pub fn with_lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self.keep_alive = ttl / 3;
        self.margin = ttl / 5;
        self.grace = ttl / 5;
        self
    }

    /// The lease TTL in whole seconds, as etcd grants it (at least 1).
    pub fn ttl_secs(&self) -> i64 {
        i64::try_from(self.lease_ttl.as_secs().max(1)).unwrap_or(i64::MAX)
    }

    /// Checks the timing: TTL ≥ 1 s and a whole number of seconds' worth (rounded down),
    /// `margin < ttl`, `0 < keep_alive < ttl − margin`, and at least one endpoint.
    ///
    /// # Errors
    /// [`Error::Options`](crate::Error::Options) saying which rule failed.
    pub fn validate(&self) -> Result<(), crate::Error> {
        let bad = |s: String| Err(crate::Error::Options(s));
        if self.etcd_endpoints.is_empty() {
            return bad("no etcd endpoint".into());
        }
        if self.etcd_timeout.is_zero() {
            return bad("etcd_timeout 0: every etcd request would time out at once".into());
        }
        if self.lease_ttl < Duration::from_secs(1) {
            return bad(format!("lease_ttl {:?} below 1 s", self.lease_ttl));
        }
        if self.margin >= self.lease_ttl {
            return bad(format!("margin {:?} not below lease_ttl", self.margin));
        }
        if self.keep_alive.is_zero() || self.keep_alive >= self.lease_ttl - self.margin {
            return bad(format!(
                "keep_alive {:?} must be > 0 and below lease_ttl - margin",
                self.keep_alive
            ));
        }
        Ok(())
    }
}

impl fmt::Debug for FleetOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetOptions")
            .field("etcd_endpoints", &self.etcd_endpoints)
            .field("prefix", &self.prefix)
            .field("lease_ttl", &self.lease_ttl)
            .field("keep_alive", &self.keep_alive)
            .field("margin", &self.margin)
            .field("grace", &self.grace)
            .field(
                "etcd_user",
                &self
                    .etcd_user
                    .as_ref()
                    .map(|(u, _)| (u.as_str(), "<redacted>")),
            )
            .field("etcd_tls", &self.etcd_tls.as_ref().map(|_| "<set>"))
            .field("etcd_timeout", &self.etcd_timeout)
            .field("redis_url", &redact_url(&self.redis_url))
            .field("poll_interval", &self.poll_interval)
            .field("handoff_timeout", &self.handoff_timeout)
            .field("journal", &self.journal)
            .field("join_wait", &self.join_wait)
            .finish_non_exhaustive()
    }
}
