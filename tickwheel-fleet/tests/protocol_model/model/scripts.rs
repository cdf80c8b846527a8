//! The owner record's scripts as tickwheel-redis's Lua runs them (src/lua/*.lua), and what a
//! caller does with each reply.

use super::Mode;
use super::{ALL, Phase, ProtocolModel, RState, Record, Reply, Req, State, Step, mask};

impl ProtocolModel {
    pub(super) fn send(&self, s: &mut State, m: u8, step: Step, epoch: u8) {
        let token = s.next_token;
        s.next_token += 1;
        s.net.push(Req {
            from: m,
            step,
            epoch,
            token,
            sent: s.now,
        });
        s.members[m as usize].waiting = Some(token);
    }

    /// One script, as tickwheel-redis's Lua runs it (src/lua/*.lua).
    pub(super) fn script(&self, s: &mut State, q: &Req) -> Reply {
        let now = s.now;
        if let Some(r) = &s.record
            && r.token == q.token
            && r.owner == q.from
        {
            return if r.step == q.step {
                Reply::Repeated { epoch: r.epoch }
            } else {
                Reply::Refused
            };
        }
        let skip = self.faults.skip_epoch_check;
        let held = s
            .record
            .as_ref()
            .is_some_and(|r| r.owner == q.from && (skip || r.epoch == q.epoch));
        let fenced = |s: &State| match &s.record {
            None => Reply::Refused,
            Some(_) => Reply::Fenced {
                taken: s.fenced[q.epoch as usize].unwrap_or(0),
            },
        };
        let stale = s.record.as_ref().is_some_and(|r| r.epoch != q.epoch);
        let lease = self.ttl;
        let Some(mut r) = s.record.clone() else {
            return match q.step {
                Step::Acquire | Step::Adopt => {
                    let epoch = if q.step == Step::Acquire { 1 } else { q.epoch };
                    s.record = Some(Record {
                        state: RState::Owned,
                        owner: q.from,
                        epoch,
                        deadline: 0,
                        chunks: 0,
                        token: q.token,
                        step: q.step,
                    });
                    Reply::Ok { epoch }
                }
                _ => Reply::Refused,
            };
        };
        match q.step {
            Step::Acquire => return Reply::Refused,
            Step::Prepare | Step::Append(_) | Step::Seal(_) | Step::Commit | Step::Renew => {
                if !held {
                    return fenced(s);
                }
                match (q.step, r.state) {
                    (Step::Prepare, RState::Owned) => {
                        r.state = RState::Preparing;
                        r.deadline = now + lease;
                        r.chunks = 0;
                        s.fenced[q.epoch as usize] = None;
                    }
                    (Step::Append(i), RState::Preparing) => {
                        if i < r.chunks {
                            return Reply::Repeated { epoch: r.epoch };
                        }
                        if i > r.chunks {
                            return Reply::Refused;
                        }
                        r.chunks += 1;
                    }
                    (Step::Seal(n), RState::Preparing) => {
                        if n != r.chunks {
                            return Reply::Refused;
                        }
                        s.fenced[r.epoch as usize] = Some(n);
                        r.state = RState::Offered;
                        r.deadline = now + lease;
                    }
                    (Step::Commit, RState::Claimed) => {
                        r.state = RState::Owned;
                        r.chunks = 0;
                    }
                    (Step::Renew, st) if st != RState::Offered => {
                        // renew.lua stores no token: it may run beside another call.
                        r.deadline = now + lease;
                        s.record = Some(r);
                        if stale {
                            s.stale_write = true;
                        }
                        return Reply::Ok { epoch: q.epoch };
                    }
                    _ => return Reply::Refused,
                }
                if stale {
                    s.stale_write = true;
                }
            }
            Step::Claim | Step::Reclaim => {
                let may = match (q.step, r.state) {
                    (Step::Claim, RState::Offered) => true,
                    (Step::Reclaim, RState::Owned) | (Step::Claim, _) => false,
                    (Step::Reclaim, _) => self.faults.reclaim_ignores_lease || now >= r.deadline,
                    _ => false,
                };
                if !may {
                    return Reply::Refused;
                }
                if r.state == RState::Preparing {
                    // The chunks in are what the claimer takes; the source gets the rest back.
                    s.fenced[r.epoch as usize] = Some(r.chunks);
                }
                self.note_takeover(s, &r);
                r.state = RState::Claimed;
                r.owner = q.from;
                r.epoch += 1;
                r.deadline = now + lease;
            }
            Step::Adopt => {
                if q.epoch <= r.epoch {
                    if !skip {
                        return fenced(s);
                    }
                    s.stale_write = true;
                }
                self.note_takeover(s, &r);
                match r.state {
                    RState::Owned | RState::Preparing => {
                        if r.state == RState::Preparing {
                            s.fenced[r.epoch as usize] = Some(0);
                        }
                        r.state = RState::Owned;
                        r.chunks = 0;
                    }
                    _ => {
                        r.state = RState::Claimed;
                        r.deadline = now + lease;
                    }
                }
                r.owner = q.from;
                r.epoch = q.epoch;
            }
        }
        r.token = q.token;
        r.step = q.step;
        let epoch = r.epoch;
        s.record = Some(r);
        Reply::Ok { epoch }
    }

    /// A record taken from its holder: was the holder's lease still valid by its own clock?
    fn note_takeover(&self, s: &mut State, r: &Record) {
        let holder = &s.members[r.owner as usize];
        let leased = match self.mode {
            Mode::Handoff => matches!(holder.phase, Phase::Preparing { .. } | Phase::Claimed),
            Mode::Fleet => holder.phase == Phase::Owner,
        };
        // A sealed offer is given up by its source: claiming it takes nothing from anyone.
        let held = r.state != RState::Offered && holder.epoch == r.epoch;
        if holder.up && leased && held && self.lease_valid(s, r.owner) {
            s.robbed = true;
        }
    }

    /// The caller acts on a reply to the call it waits for.
    pub(super) fn on_reply(&self, s: &mut State, q: &Req, reply: Reply) {
        let fenced_copy = s.fenced;
        let (ttl, margin) = (self.ttl, self.margin);
        let m = &mut s.members[q.from as usize];
        if !m.up || m.waiting != Some(q.token) {
            return;
        }
        m.waiting = None;
        let epoch = match reply {
            Reply::Ok { epoch } | Reply::Repeated { epoch } => epoch,
            Reply::Fenced { taken } => {
                // Hand back what no claimer took; the queue is no longer ours.
                m.held &= !mask(taken);
                m.fetched = 0;
                m.phase = Phase::Idle;
                return;
            }
            Reply::Refused => {
                if m.phase != Phase::Owner {
                    m.phase = Phase::Idle;
                }
                return;
            }
        };
        let lease_end = q.sent + ttl - margin;
        match q.step {
            Step::Acquire => {
                m.phase = Phase::Owner;
                m.epoch = epoch;
            }
            Step::Prepare => {
                m.phase = Phase::Preparing { appended: 0 };
                m.valid_until = lease_end;
            }
            Step::Append(i) => m.phase = Phase::Preparing { appended: i + 1 },
            Step::Seal(_) => {
                m.phase = Phase::Sealed;
                m.held = 0;
            }
            Step::Claim | Step::Reclaim => {
                // A copy of an earlier offer of ours: the chunks a claimer took are not ours.
                if let Some(t) = fenced_copy[m.epoch as usize] {
                    m.held &= !mask(t);
                }
                m.phase = Phase::Claimed;
                m.epoch = epoch;
                m.fetched = 0;
                m.valid_until = lease_end;
            }
            Step::Commit => {
                m.phase = Phase::Owner;
                m.held |= m.fetched;
                m.fetched = 0;
            }
            Step::Renew => m.valid_until = m.valid_until.max(lease_end),
            Step::Adopt => {
                m.phase = Phase::Owner;
                m.epoch = epoch;
                // The recovery hook: the user's store returns the queue's timers.
                m.held = ALL;
            }
        }
    }
}
