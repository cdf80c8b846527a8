//! The ledger: this program's own record of where every message is, kept apart from the
//! scheduler's counters, so the final check does not take the scheduler's word for anything.
//!
//! Each message has one state byte. Whoever receives a message from the scheduler (the
//! dispatcher from `pop_due`, an operator from `drain_queue` or `cancel`, the final sweep)
//! moves it out of `Pending` with a compare-and-swap. If the message is not `Pending` at
//! that moment, somebody else already has it or it has already ended: the scheduler handed
//! it out twice. That is counted as a duplicate, whichever side comes second.
//!
//! ```text
//!            producer               dispatcher (pop_due)          delivered
//!   Unborn ───────────▶ Pending ───────────────────▶ Dispatching ───────────▶ Delivered
//!                        ▲  ▲ │                           │ failed / suspended
//!                        │  │ └───────────────────────────┘ (re-scheduled: Pending)
//!                        │  │ drain_queue / cancel
//!                        │  └── Held ──▶ Drained (transfer)   Pending ──cancel──▶ Bounced
//!                        └───── Held (rebind, suspend: re-scheduled)
//!   end of run: Pending ──final sweep (drain_queue of every queue)──▶ Swept (= still pending)
//! ```
//!
//! A message's state is set *before* the scheduler call that hands it on, because the
//! receiver may act on it at once.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering::Relaxed};

/// Where a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum State {
    /// Not queued yet.
    Unborn = 0,
    /// In the scheduler (the only state in which the scheduler may hand it out).
    Pending,
    /// Handed to the dispatcher, which is delivering it.
    Dispatching,
    /// Taken out by an operator's drain, not yet re-queued or transferred.
    Held,
    /// Delivered: ended.
    Delivered,
    /// Transferred away by a drain: ended.
    Drained,
    /// Bounced by an operator: ended.
    Bounced,
    /// Found still pending by the final sweep.
    Swept,
    /// The scheduler refused to take it back (`schedule` returned `Err`).
    Refused,
}

const STATES: [State; 9] = [
    State::Unborn,
    State::Pending,
    State::Dispatching,
    State::Held,
    State::Delivered,
    State::Drained,
    State::Bounced,
    State::Swept,
    State::Refused,
];

impl State {
    fn from_u8(v: u8) -> State {
        STATES[usize::from(v)]
    }

    fn describe(self) -> &'static str {
        match self {
            State::Unborn => "not yet queued",
            State::Pending => "pending",
            State::Dispatching => "being dispatched",
            State::Held => "held by a drain",
            State::Delivered => "already delivered",
            State::Drained => "already drained",
            State::Bounced => "already bounced",
            State::Swept => "already swept",
            State::Refused => "refused by the scheduler",
        }
    }
}

/// Keep the first few anomalies word for word for the report.
const KEEP: usize = 8;

/// Per-message states plus the anomalies found on the way.
pub struct Ledger {
    states: Vec<AtomicU8>,
    duplicates: AtomicU64,
    early: AtomicU64,
    notes: Mutex<Vec<String>>,
}

/// The ledger's counts at the end of the run.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    /// Messages that were queued at least once.
    pub scheduled: u64,
    pub delivered: u64,
    pub drained: u64,
    pub bounced: u64,
    /// Returned by the final sweep.
    pub pending: u64,
    /// Pending in the ledger but not in the scheduler, stuck mid-way, or refused.
    pub lost: u64,
    pub duplicates: u64,
    pub early: u64,
    pub notes: Vec<String>,
}

impl Tally {
    /// Whether every message ended exactly once and none was dispatched early.
    pub fn ok(&self) -> bool {
        self.lost == 0
            && self.duplicates == 0
            && self.early == 0
            && self.scheduled == self.delivered + self.drained + self.bounced + self.pending
    }
}

impl Ledger {
    pub fn new(messages: u32) -> Ledger {
        Ledger {
            states: (0..messages)
                .map(|_| AtomicU8::new(State::Unborn as u8))
                .collect(),
            duplicates: AtomicU64::new(0),
            early: AtomicU64::new(0),
            notes: Mutex::new(Vec::new()),
        }
    }

    /// Moves `id` from `from` to `to`; `false` (and a duplicate noted) if it was elsewhere.
    /// `how` says who received it, for the note: "dispatched", "drained", ...
    pub fn take(&self, id: u32, from: State, to: State, how: &str) -> bool {
        let slot = &self.states[id as usize];
        match slot.compare_exchange(from as u8, to as u8, Relaxed, Relaxed) {
            Ok(_) => true,
            Err(actual) => {
                self.duplicates.fetch_add(1, Relaxed);
                let actual = State::from_u8(actual).describe();
                self.note(format!("message {id} {how} while {actual}"));
                false
            }
        }
    }

    /// Whether `id` is pending right now (a hint: it may change at once).
    pub fn is_pending(&self, id: u32) -> bool {
        self.states[id as usize].load(Relaxed) == State::Pending as u8
    }

    /// Sets the state of a message this thread holds (after a successful `take`).
    pub fn set(&self, id: u32, to: State) {
        self.states[id as usize].store(to as u8, Relaxed);
    }

    /// The scheduler refused to queue `id` although nobody else can hold it.
    pub fn refused(&self, id: u32, queue: u32, why: &str) {
        self.set(id, State::Refused);
        self.note(format!(
            "message {id}: schedule on queue {queue} refused: {why}"
        ));
    }

    /// A message reached the dispatcher before its deadline.
    pub fn early(&self, id: u32, early_ns: u64) {
        self.early.fetch_add(1, Relaxed);
        self.note(format!(
            "message {id} dispatched {early_ns} ns before its deadline"
        ));
    }

    fn note(&self, text: String) {
        let mut notes = self.notes.lock().unwrap_or_else(|e| e.into_inner());
        if notes.len() < KEEP {
            notes.push(text);
        }
    }

    /// Counts the states; call once every thread has stopped and the sweep is done.
    pub fn tally(&self) -> Tally {
        let mut by_state = [0u64; STATES.len()];
        for s in &self.states {
            by_state[usize::from(s.load(Relaxed))] += 1;
        }
        let n = |s: State| by_state[s as usize];
        let stuck = n(State::Pending) + n(State::Dispatching) + n(State::Held);
        if stuck > 0 {
            self.note(format!(
                "{} pending messages missing from the scheduler, {} stuck in dispatch, {} held by drains",
                n(State::Pending),
                n(State::Dispatching),
                n(State::Held)
            ));
        }
        Tally {
            scheduled: self.states.len() as u64 - n(State::Unborn),
            delivered: n(State::Delivered),
            drained: n(State::Drained),
            bounced: n(State::Bounced),
            pending: n(State::Swept),
            lost: stuck + n(State::Refused),
            duplicates: self.duplicates.load(Relaxed),
            early: self.early.load(Relaxed),
            notes: self.notes.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        }
    }
}
