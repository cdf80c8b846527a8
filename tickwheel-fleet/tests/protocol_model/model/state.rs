//! The model's state: the owner record, the calls in the network, each member, and the
//! actions between states.

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RState {
    Owned,
    Preparing,
    Offered,
    Claimed,
}

/// The owner record (one Redis hash) with its chunk count, as the scripts see it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Record {
    pub state: RState,
    pub owner: u8,
    pub epoch: u8,
    pub deadline: u8,
    pub chunks: u8,
    /// The last mutating call (`token`, `step`) and its caller, for `Repeated`.
    pub token: u8,
    pub step: Step,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    Acquire,
    Prepare,
    Append(u8),
    Seal(u8),
    Claim,
    Reclaim,
    Commit,
    Renew,
    Adopt,
}

/// A call in the network: who sent it, when, at which epoch (the token for `adopt`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Req {
    pub from: u8,
    pub step: Step,
    pub epoch: u8,
    pub token: u8,
    pub sent: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reply {
    Ok {
        epoch: u8,
    },
    Repeated {
        epoch: u8,
    },
    /// Not held any more; `taken` chunks of the caller's epoch went to a claimer.
    Fenced {
        taken: u8,
    },
    Refused,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Idle,
    /// Dispatches the queue (in the fleet: while its lease is valid by its clock).
    Owner,
    Preparing {
        appended: u8,
    },
    /// Sealed and dropped its copy.
    Sealed,
    Claimed,
    /// Fleet: created the owner key, waits for `adopt`.
    Adopting,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Member {
    pub up: bool,
    pub phase: Phase,
    pub epoch: u8,
    /// Timers in its scheduler and spool (bit `i`: timer `i`).
    pub held: u8,
    /// A claimer's read copy, valid once its commit ran.
    pub fetched: u8,
    /// Its own lease end (ticks of real time; its clock may be `drift` slow).
    pub valid_until: u8,
    /// The token of the call it waits for.
    pub waiting: Option<u8>,
    /// Fleet: its lease at etcd ends at this tick (`None`: no lease).
    pub etcd_lease: Option<u8>,
    /// Fleet: a keep-alive sent at this tick, and, once etcd took it, whether the lease lived.
    pub keep_alive: Option<(u8, Option<bool>)>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub now: u8,
    pub record: Option<Record>,
    /// `fenced[e]`: chunks of epoch `e`'s offer a claimer took (the FENCED hash).
    pub fenced: [Option<u8>; 8],
    pub members: [Member; 2],
    pub net: Vec<Req>,
    /// Fleet: the owner key (holder, token), the store's revision, when the key was deleted.
    pub owner_key: Option<(u8, u8)>,
    pub revision: u8,
    pub deleted_at: Option<u8>,
    pub next_token: u8,
    pub crashes: u8,
    pub losses: u8,
    /// A write accepted from a caller whose epoch was not the record's (or an `adopt` at a
    /// token not above it).
    pub stale_write: bool,
    /// A record taken from a holder whose lease was still valid by its own clock.
    pub robbed: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Tick,
    Send(u8, Step),
    /// Redis runs call `i`; the reply reaches the caller (`true`) or is lost.
    Exec(usize, bool),
    Fetch(u8),
    /// Gives up on the call it waits for (its lease passed by its clock).
    Abandon(u8),
    Crash(u8),
    KeepAliveSend(u8),
    KeepAliveArrive(u8),
    /// The keep-alive's answer reaches the member (`true`) or is lost.
    KeepAliveReply(u8, bool),
    SelfFence(u8),
    Register(u8),
    /// Fleet: create the owner key (txn `create_revision == 0`) and send `adopt` at its token.
    TakeKey(u8),
}

/// Renumbers call tokens in order of age (only their equality matters), so that states that
/// differ only in how many calls came before are one state.
pub(super) fn canonical_tokens(s: &mut State) {
    let mut seen: Vec<u8> = s.net.iter().map(|q| q.token).collect();
    seen.extend(s.record.as_ref().map(|r| r.token));
    seen.extend(s.members.iter().filter_map(|m| m.waiting));
    seen.sort_unstable();
    seen.dedup();
    let rank = |t: u8| seen.iter().position(|&x| x == t).unwrap_or(0) as u8;
    for q in &mut s.net {
        q.token = rank(q.token);
    }
    if let Some(r) = &mut s.record {
        r.token = rank(r.token);
    }
    for m in &mut s.members {
        m.waiting = m.waiting.map(rank);
    }
    s.next_token = seen.len() as u8;
}

pub(super) fn mask(n: u8) -> u8 {
    ((1u16 << n) - 1) as u8
}
