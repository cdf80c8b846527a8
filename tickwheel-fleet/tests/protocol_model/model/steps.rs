//! The steps a member, its lease and the network may take from a state.

use super::*;

impl ProtocolModel {
    /// Steps a member may start when it waits for no reply.
    pub(super) fn member_steps(&self, s: &State, m: u8, out: &mut Vec<Action>) {
        let mem = &s.members[m as usize];
        let valid = self.lease_valid(s, m);
        let rec = s.record.as_ref();
        match (self.mode, mem.phase) {
            (Mode::Handoff, Phase::Idle) if m == A && rec.is_none() => {
                out.push(Action::Send(m, Step::Acquire))
            }
            (Mode::Handoff, Phase::Owner) if m == A && mem.held == ALL => {
                out.push(Action::Send(m, Step::Prepare))
            }
            (Mode::Handoff, Phase::Preparing { appended }) if valid => {
                if appended < TIMERS {
                    out.push(Action::Send(m, Step::Append(appended)));
                } else {
                    out.push(Action::Send(m, Step::Seal(appended)));
                }
                self.renew(s, m, out);
            }
            (Mode::Handoff, Phase::Claimed) if valid => {
                if mem.fetched == 0 {
                    out.push(Action::Fetch(m));
                } else {
                    out.push(Action::Send(m, Step::Commit));
                }
                self.renew(s, m, out);
            }
            (
                Mode::Handoff,
                Phase::Idle | Phase::Sealed | Phase::Claimed | Phase::Preparing { .. },
            ) => {
                if let Some(r) = rec {
                    if r.state == RState::Offered && m == B {
                        out.push(Action::Send(m, Step::Claim));
                    }
                    // The member reads the record's deadline first (the planted fault skips
                    // that check too).
                    let due = s.now >= r.deadline || self.faults.reclaim_ignores_lease;
                    if r.state != RState::Owned && due {
                        out.push(Action::Send(m, Step::Reclaim));
                    }
                }
            }
            (Mode::Fleet, _)
                if !valid && (mem.phase == Phase::Owner || mem.etcd_lease.is_some()) =>
            {
                out.push(Action::SelfFence(m))
            }
            (Mode::Fleet, Phase::Idle) => {
                let leased = mem.etcd_lease.is_some() && s.now < mem.valid_until;
                let free_since = s.deleted_at.filter(|_| s.owner_key.is_none());
                if leased && free_since.is_some_and(|d| s.now >= d + self.grace) {
                    out.push(Action::TakeKey(m));
                }
            }
            _ => {}
        }
    }

    /// A renewal when it would move the member's lease end.
    pub(super) fn renew(&self, s: &State, m: u8, out: &mut Vec<Action>) {
        if s.now + self.ttl - self.margin > s.members[m as usize].valid_until {
            out.push(Action::Send(m, Step::Renew));
        }
    }

    /// Fleet: keep-alives and re-registration.
    pub(super) fn lease_steps(&self, s: &State, m: u8, out: &mut Vec<Action>) {
        let mem = &s.members[m as usize];
        match mem.keep_alive {
            None if mem.etcd_lease.is_some() || mem.valid_until > s.now => {
                out.push(Action::KeepAliveSend(m))
            }
            None if mem.phase == Phase::Idle => out.push(Action::Register(m)),
            Some((_, None)) => out.push(Action::KeepAliveArrive(m)),
            Some((_, Some(_))) => {
                out.push(Action::KeepAliveReply(m, true));
                if s.losses < self.losses {
                    out.push(Action::KeepAliveReply(m, false));
                }
            }
            None => {}
        }
    }
}
