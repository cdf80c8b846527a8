//! The model's rate limit of one queue.

/// The model's GCRA of one queue, in nanoseconds since the origin (`u128`: exact over the
/// whole tick range).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Gcra {
    /// 0: lifted (or never set).
    emission: u128,
    /// The last limit set's interval and burst (kept across a lift).
    basis: u128,
    burst: u128,
    tat: u128,
}

impl Gcra {
    pub(super) fn permit(&mut self, now: u128) -> bool {
        if self.emission == 0 {
            return true;
        }
        let from = self.tat.max(now);
        if from - now > self.emission * (self.burst - 1) {
            return false;
        }
        self.tat = from + self.emission;
        true
    }

    /// `set_rate` as documented: the backlog at `max(seen, tat − interval × burst)` (the
    /// latest `now` polled, or the earliest the last hand-out could be) rescaled to the new
    /// interval, rounded up.
    pub(super) fn set(&mut self, emission: u128, burst: u128, seen: u128) {
        self.emission = emission;
        if emission == 0 {
            return;
        }
        let (old, old_burst) = (self.basis, self.burst);
        (self.basis, self.burst) = (emission, burst);
        if old == 0 || old == emission {
            return;
        }
        let from = seen.max(self.tat.saturating_sub(old * old_burst));
        if self.tat > from {
            self.tat = from + ((self.tat - from) * emission).div_ceil(old);
        }
    }
}
