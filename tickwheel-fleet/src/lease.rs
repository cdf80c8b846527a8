//! The lease keep-alive loop and the self-fence clock.
//!
//! Each round reads `Instant::now()` *before* sending the keep-alive; on a reply with TTL `t`
//! the lease end becomes `sent + t − margin` (River #1213: anchoring to the reply's arrival
//! would stretch the lease by the round trip, and past etcd's own expiry). A failed or absent
//! reply does not extend it. etcd counts the TTL from when it processed the request, which
//! is after `sent`, so this member's lease end comes before etcd's, by at least `margin`
//! plus the request's travel time, as long as the two clocks run at rates within
//! `margin / ttl` of each other.
//!
//! Everything here is the member's own machinery ([`crate::Member`] runs it); what a user can
//! read of it is [`crate::Fence::is_valid`] and the member's events.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use etcd_client::{Client, LeaseKeepAliveStream, LeaseKeeper};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::Fence;

/// What the keep-alive loop shares with the member.
#[derive(Debug, Default)]
pub(crate) struct LeaseState {
    /// Set once the lease is lost (TTL 0 from etcd, or no acknowledged keep-alive before the
    /// lease end). Cleared by a rejoin.
    pub(crate) lost: AtomicBool,
    /// Woken when `lost` is set.
    pub(crate) notify: Notify,
}

/// Keep-alive timing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    /// Period between keep-alives.
    pub(crate) period: Duration,
    /// Subtracted from the lease end.
    pub(crate) margin: Duration,
    /// How long one keep-alive waits for its reply.
    pub(crate) timeout: Duration,
}

/// Spawns the keep-alive loop of `lease`, granted with TTL `granted_ttl` at `granted_at`
/// (the instant read before the grant was sent). It extends `fence` on each acknowledged
/// keep-alive and sets `state.lost` (and revokes every token in `fence`) when the lease is
/// gone; then it ends. Never panics.
pub(crate) fn spawn(
    client: Client,
    lease: i64,
    granted_at: Instant,
    granted_ttl: Duration,
    timing: Timing,
    fence: Fence,
    state: Arc<LeaseState>,
) -> JoinHandle<()> {
    fence.extend(end(granted_at, granted_ttl, timing.margin));
    tokio::spawn(run(client, lease, timing, fence, state))
}

fn end(sent: Instant, ttl: Duration, margin: Duration) -> Instant {
    sent + ttl.saturating_sub(margin)
}

async fn run(mut client: Client, lease: i64, timing: Timing, fence: Fence, state: Arc<LeaseState>) {
    let mut stream: Option<(LeaseKeeper, LeaseKeepAliveStream)> = None;
    loop {
        // Past the lease end by this member's clock: lost, whatever etcd may say later.
        if !fence.is_valid() {
            lose(
                &fence,
                &state,
                "no acknowledged keep-alive before the lease end",
            );
            return;
        }
        let sent = Instant::now();
        if stream.is_none() {
            stream = tokio::time::timeout(timing.timeout, client.lease_keep_alive(lease))
                .await
                .ok()
                .and_then(Result::ok);
        }
        let reply = match stream.as_mut() {
            None => None,
            Some((keeper, replies)) => {
                let round = async {
                    keeper.keep_alive().await?;
                    replies.message().await
                };
                match tokio::time::timeout(timing.timeout, round).await {
                    Ok(Ok(Some(r))) => Some(r.ttl()),
                    _ => None,
                }
            }
        };
        match reply {
            Some(ttl) if ttl > 0 => {
                let ttl = Duration::from_secs(u64::try_from(ttl).unwrap_or(0));
                fence.extend(end(sent, ttl, timing.margin));
            }
            Some(_) => {
                lose(&fence, &state, "etcd says the lease is gone (TTL 0)");
                return;
            }
            None => {
                // Drop the stream: a late reply must not be taken for the next request's.
                stream = None;
                tracing::warn!(lease, "keep-alive failed; the lease end is not extended");
            }
        }
        let next = sent + timing.period;
        let deadline = fence.valid_until().unwrap_or(next).min(next);
        tokio::time::sleep_until(deadline.into()).await;
    }
}

fn lose(fence: &Fence, state: &LeaseState, why: &str) {
    tracing::warn!(
        reason = why,
        "lease lost: fencing every queue of this member"
    );
    fence.revoke_all();
    state.lost.store(true, Ordering::SeqCst);
    state.notify.notify_waiters();
}
