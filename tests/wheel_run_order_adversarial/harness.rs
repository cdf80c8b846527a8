//! The wheel beside a plain `BTreeMap<(deadline, seq)>` model of the timers it holds,
//! checked after every step (see the test's module doc for what is checked).

use std::collections::{BTreeMap, HashMap};

use tickwheel::{Expired, TimerKey, Wheel};

use super::STALE_BOUND;

#[derive(Clone, Copy, Debug)]
pub(crate) struct Timer {
    pub(crate) deadline: u64,
    pub(crate) seq: u64,
    pub(crate) reset: bool,
    pub(crate) key: TimerKey,
}

/// The wheel beside the model; every timer's value is its id.
pub(crate) struct Harness {
    pub(crate) wheel: Wheel<u64>,
    pub(crate) queue: BTreeMap<(u64, u64), u64>,
    pub(crate) timers: HashMap<u64, Timer>,
    /// Ids in insertion order, pending or not (for picking keys, stale ones included).
    pub(crate) ids: Vec<(u64, TimerKey)>,
    pub(crate) seq: u64,
    pub(crate) next_id: u64,
    pub(crate) elapsed: u64,
    pub(crate) fired: Vec<(u64, u64)>,
}

impl Harness {
    pub(crate) fn new(start: u64) -> Self {
        Harness {
            wheel: Wheel::starting_at(start),
            queue: BTreeMap::new(),
            timers: HashMap::new(),
            ids: Vec::new(),
            seq: 0,
            next_id: 0,
            elapsed: start,
            fired: Vec::new(),
        }
    }

    /// The model's next `k` timers, in firing order: id and key.
    pub(crate) fn next(&self, k: usize) -> Vec<(u64, TimerKey)> {
        (self.queue.values().take(k))
            .map(|id| (*id, self.timers[id].key))
            .collect()
    }

    pub(crate) fn file(&mut self, id: u64, deadline: u64, reset: bool, key: TimerKey) {
        self.seq += 1;
        let seq = self.seq;
        self.queue.insert((deadline, seq), id);
        self.timers.insert(
            id,
            Timer {
                deadline,
                seq,
                reset,
                key,
            },
        );
    }

    pub(crate) fn insert(&mut self, deadline: u64) -> TimerKey {
        let id = self.next_id;
        self.next_id += 1;
        let key = self.wheel.insert(deadline, id);
        self.file(id, deadline, false, key);
        self.ids.push((id, key));
        key
    }

    pub(crate) fn cancel_id(&mut self, id: u64, key: TimerKey) {
        let got = self.wheel.cancel(key);
        match self.timers.remove(&id) {
            Some(t) => {
                assert_eq!(got, Some(id), "cancel of pending id {id}");
                self.queue.remove(&(t.deadline, t.seq));
            }
            None => assert_eq!(got, None, "cancel of a stale key (id {id}) took a timer"),
        }
    }

    pub(crate) fn reset_id(&mut self, id: u64, key: TimerKey, deadline: u64) {
        let moved = self.wheel.reset(key, deadline);
        match self.timers.remove(&id) {
            Some(t) => {
                assert!(moved, "reset of pending id {id}");
                self.queue.remove(&(t.deadline, t.seq));
                self.file(id, deadline, true, key);
            }
            None => assert!(!moved, "reset of a stale key (id {id}) moved a timer"),
        }
    }

    pub(crate) fn earliest(&self) -> Option<u64> {
        self.queue.keys().next().map(|&(d, _)| d)
    }

    /// Checks one fired timer against the model and takes it out there.
    pub(crate) fn fired(&mut self, e: &Expired<u64>, eff: u64, ctx: &str) {
        let id = e.value;
        let t = *self
            .timers
            .get(&id)
            .unwrap_or_else(|| panic!("{ctx}: fired id {id}, not pending"));
        assert_eq!(e.key, t.key, "{ctx}: key of fired id {id}");
        assert_eq!(e.deadline, t.deadline, "{ctx}: deadline of fired id {id}");
        assert!(
            t.deadline <= eff,
            "{ctx}: EARLY: id {id} due {} fired at {eff}",
            t.deadline
        );
        let first = self.earliest().unwrap_or(u64::MAX);
        assert_eq!(
            t.deadline, first,
            "{ctx}: deadline order: id {id} due {} fired while {first} pending",
            t.deadline
        );
        if !t.reset {
            for (&(_, s), &other) in self.queue.range((t.deadline, 0)..(t.deadline, t.seq)) {
                assert!(
                    self.timers[&other].reset,
                    "{ctx}: insertion order at {}: id {id} (seq {}) before never-reset id {other} (seq {s})",
                    t.deadline, t.seq
                );
            }
        }
        self.queue.remove(&(t.deadline, t.seq));
        self.timers.remove(&id);
        self.elapsed = self.elapsed.max(t.deadline);
        self.fired.push((t.deadline, id));
    }

    /// The next poll's timer, if the model pins it down: the earliest never-reset timer when
    /// no timer at the earliest deadline was reset.
    pub(crate) fn pinned_next(&self) -> Option<(u64, TimerKey)> {
        let d = self.earliest()?;
        let mut at = self.queue.range((d, 0)..=(d, u64::MAX));
        if at.clone().any(|(_, id)| self.timers[id].reset) {
            return None;
        }
        at.next().map(|(_, id)| (*id, self.timers[id].key))
    }

    pub(crate) fn check_peek(&self, ctx: &str) {
        let peek = self.wheel.peek();
        match self.earliest() {
            None => assert_eq!(peek, None, "{ctx}: peek of an empty wheel"),
            Some(d) => {
                let (key, deadline) =
                    peek.unwrap_or_else(|| panic!("{ctx}: peek None with {d} pending"));
                assert_eq!(deadline, d, "{ctx}: peek deadline");
                if let Some((id, want)) = self.pinned_next() {
                    assert_eq!(key, want, "{ctx}: peek names id {id}'s key");
                }
            }
        }
    }

    pub(crate) fn poll(&mut self, now: u64) {
        let eff = now.max(self.elapsed);
        let ctx = format!("poll({now}) at elapsed {}", self.elapsed);
        let pinned = self
            .pinned_next()
            .filter(|&(id, _)| self.timers[&id].deadline <= eff);
        match self.wheel.poll(now) {
            Some(e) => {
                if let Some((id, _)) = pinned {
                    assert_eq!(e.value, id, "{ctx}: the pinned next timer");
                }
                self.fired(&e, eff, &ctx);
            }
            None => {
                self.nothing_due(eff, &ctx);
                self.elapsed = eff;
            }
        }
        self.check(&ctx);
    }

    pub(crate) fn nothing_due(&self, eff: u64, ctx: &str) {
        if let Some(d) = self.earliest() {
            assert!(
                d > eff,
                "{ctx}: SKIPPED: a timer due {d} is pending after the poll at {eff} ended"
            );
        }
    }

    pub(crate) fn poll_into(&mut self, now: u64, limit: usize) -> usize {
        let eff = now.max(self.elapsed);
        let ctx = format!("poll_into({now}, {limit}) at elapsed {}", self.elapsed);
        let mut out = Vec::new();
        let n = self.wheel.poll_into(now, limit, &mut out);
        assert_eq!(n, out.len(), "{ctx}: count returned");
        assert!(n <= limit, "{ctx}: {n} over the limit");
        for e in &out {
            self.fired(e, eff, &ctx);
        }
        if n < limit {
            self.nothing_due(eff, &ctx);
            self.elapsed = eff;
        }
        self.check(&ctx);
        n
    }

    /// Polls with `limit` until a call stops short, checking that every call before it
    /// stopped at its limit.
    pub(crate) fn drain(&mut self, now: u64, limit: usize) {
        while self.poll_into(now, limit) == limit {}
    }

    pub(crate) fn clear(&mut self) {
        self.wheel.clear();
        self.queue.clear();
        self.timers.clear();
        self.check("clear");
    }

    pub(crate) fn shrink(&mut self) {
        self.wheel.shrink_to_fit();
        self.check("shrink_to_fit");
    }

    pub(crate) fn check(&self, ctx: &str) {
        assert_eq!(self.wheel.len(), self.timers.len(), "{ctx}: len");
        assert_eq!(self.wheel.elapsed(), self.elapsed, "{ctx}: elapsed");
        let st = self.wheel.stats();
        assert_eq!(st.live, self.timers.len(), "{ctx}: stats.live");
        assert!(
            st.stale <= 2 * st.live + STALE_BOUND,
            "{ctx}: {} stale references over the bound for {} timers",
            st.stale,
            st.live
        );
        // All keys while few are pending, else the next few (the run's head and neighbours).
        let few = self.timers.len() <= 64;
        let checked = self.queue.values().take(if few { usize::MAX } else { 8 });
        for id in checked {
            let t = &self.timers[id];
            assert_eq!(
                self.wheel.deadline(t.key),
                Some(t.deadline),
                "{ctx}: deadline of id {id}"
            );
        }
        if let (Some(d), Some(next)) = (self.earliest(), self.wheel.next_expiration()) {
            assert!(next <= d, "{ctx}: next_expiration {next} after {d}");
            if d <= self.elapsed {
                assert!(
                    next <= self.elapsed,
                    "{ctx}: {d} is due, next_expiration {next}"
                );
            } else if d >> 6 == self.elapsed >> 6 && self.timers.values().all(|t| !t.reset) {
                // Documented: exact within 64 ticks of `elapsed` (here no timer was reset).
                assert_eq!(next, d, "{ctx}: next_expiration within 64 ticks");
            }
        } else {
            assert_eq!(
                self.earliest().is_some(),
                self.wheel.next_expiration().is_some(),
                "{ctx}: next_expiration without timers or none with timers"
            );
        }
        self.check_peek(ctx);
    }
}
