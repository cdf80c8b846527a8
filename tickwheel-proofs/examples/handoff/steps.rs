//! The protocol's steps as seen by the proof, and the step gates that make kills
//! deterministic: a child that reaches a step (its effect acknowledged, the next not begun)
//! prints `step NAME` on its standard output and waits for the parent's `go` on its standard
//! input. The parent answers `go`, or kills the child (or the redis-server) right there.
//!
//! The child's standard input carries one command a line: `go` (pass the gate) or `finish`
//! (stop producing, deliver what is due, report). A closed input means the parent is gone:
//! the child exits.

use std::io::{self, BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};

/// A host's part in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Source,
    Target,
    /// A third host that takes over what a dead or stopped host left (`--spare`, `--stop`).
    Spare,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Source => "source",
            Role::Target => "target",
            Role::Spare => "spare",
        }
    }
}

/// The source's steps for each queue, in order.
pub const SOURCE: &[&str] = &[
    "acquire",   // the queue's owner record: OWNED by the source
    "freeze",    // producers refused, pending timers taken out (spool: F)
    "prepare",   // OWNED -> PREPARING
    "append",    // the pending timers' chunks written
    "in-flight", // every in-flight timer of the queue delivered or forwarded
    "forward",   // the forwarded timers' chunks written
    "seal",      // PREPARING -> OFFERED
    "drop",      // the local copy dropped (spool: M)
];

/// The target's steps for each queue, in order.
pub const TARGET: &[&str] = &[
    "claim",  // OFFERED -> CLAIMED by the target
    "fetch",  // every chunk read and validated
    "spool",  // the entries in the target's spool (durable before the commit)
    "commit", // CLAIMED -> OWNED, data deleted
    "import", // the entries in the scheduler: dispatched from now on
];

/// Every step name, source's then target's (for `--list-steps` and `redis:STEP`).
pub const ALL: &[&str] = &[
    "acquire",
    "freeze",
    "prepare",
    "append",
    "in-flight",
    "forward",
    "seal",
    "drop",
    "claim",
    "fetch",
    "spool",
    "commit",
    "import",
];

/// The steps a role passes.
pub fn of(role: Role) -> &'static [&'static str] {
    match role {
        Role::Source => SOURCE,
        Role::Target | Role::Spare => TARGET,
    }
}

/// The child's end of the gate protocol.
#[derive(Clone)]
pub struct Gates {
    out: Arc<Mutex<io::Stdout>>,
    go: Arc<Mutex<Receiver<()>>>,
    finish: Arc<AtomicBool>,
}

impl Gates {
    /// Starts the thread that reads the parent's commands from standard input.
    pub fn from_stdin() -> Gates {
        let (tx, rx) = channel();
        let finish = Arc::new(AtomicBool::new(false));
        let flag = finish.clone();
        std::thread::spawn(move || read_commands(io::stdin().lock(), &tx, &flag));
        Gates {
            out: Arc::new(Mutex::new(io::stdout())),
            go: Arc::new(Mutex::new(rx)),
            finish,
        }
    }

    /// Prints `step NAME` and blocks until the parent says `go`. A parent that is gone ends
    /// the process (nobody is left to account for it).
    pub fn pass(&self, step: &str) {
        self.line(&format!("step {step}"));
        let go = self.go.lock().unwrap_or_else(|p| p.into_inner());
        if go.recv().is_err() {
            std::process::exit(3);
        }
    }

    /// Prints one line for the parent (flushed at once: the parent reacts to each).
    pub fn line(&self, text: &str) {
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        // A parent that stopped reading is gone: the next gate ends the process.
        let _ = writeln!(out, "{text}").and_then(|()| out.flush());
    }

    /// Whether the parent asked the host to finish.
    pub fn finishing(&self) -> bool {
        self.finish.load(Ordering::Acquire)
    }
}

fn read_commands(input: impl BufRead, go: &Sender<()>, finish: &AtomicBool) {
    for line in input.lines() {
        match line.as_deref().map(str::trim) {
            Ok("go") => {
                if go.send(()).is_err() {
                    return;
                }
            }
            Ok("finish") => finish.store(true, Ordering::Release),
            Ok(_) => {}
            Err(_) => break,
        }
    }
    // Input closed: the parent is gone. Wake a waiting gate with a closed channel.
    finish.store(true, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_is_the_union_of_the_roles_steps_without_repeats() {
        let union: Vec<_> = SOURCE.iter().chain(TARGET).copied().collect();
        assert_eq!(union, ALL);
        let mut sorted = union.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), ALL.len());
    }

    #[test]
    fn commands_reach_the_gate_and_the_finish_flag() {
        let (tx, rx) = channel();
        let finish = AtomicBool::new(false);
        read_commands(&b"go\nnoise\nfinish\ngo\n"[..], &tx, &finish);
        assert_eq!(rx.try_iter().count(), 2);
        assert!(finish.load(Ordering::Acquire));
    }
}
