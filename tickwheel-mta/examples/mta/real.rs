//! The dispatcher of `--clock real`: the scheduler's own, in one of its two forms.
//!
//! - `--dispatcher tokio` (the default when built with the `tokio` feature):
//!   `Scheduler::due_stream` polled by one task on a current-thread tokio runtime, on a
//!   thread of its own, until the end of the run.
//! - `--dispatcher thread`: `Scheduler::spawn_dispatcher`, a plain thread that sleeps until
//!   the next deadline.
//!
//! Both call `Sim::dispatch` for every due timer. Stopping either puts the timers it popped
//! but had not handed out back as pending, so the final sweep finds them.

use std::sync::Arc;

use tickwheel::sync::DispatcherHandle;

use crate::args::DispatcherKind;
use crate::sim::Sim;

/// A running real-clock dispatcher.
pub enum Dispatcher {
    Thread(DispatcherHandle),
    /// The thread that runs the tokio runtime; it returns at the end of the run.
    #[cfg(feature = "tokio")]
    Tokio(std::thread::JoinHandle<()>),
}

impl Dispatcher {
    /// Starts the dispatcher `kind`. (Without the `tokio` feature, `Args::check` has
    /// refused `--dispatcher tokio`, so every kind here is the thread.)
    pub fn start(sim: &Arc<Sim>, kind: DispatcherKind) -> Dispatcher {
        match kind {
            #[cfg(feature = "tokio")]
            DispatcherKind::Tokio => {
                let sim = Arc::clone(sim);
                Dispatcher::Tokio(std::thread::spawn(move || stream::run(&sim)))
            }
            _ => {
                let dispatcher = Arc::clone(sim);
                Dispatcher::Thread(sim.sched.spawn_dispatcher(move |due| {
                    let now = dispatcher.clock.now();
                    // The pop is not seen here: the hold is not checked, the limits are.
                    dispatcher.flow.handed_out(*due.queue(), now, None);
                    dispatcher.dispatch(due, now);
                }))
            }
        }
    }

    /// Stops the dispatcher and waits until it has stopped.
    pub fn stop(self) {
        match self {
            Dispatcher::Thread(handle) => handle.shutdown(),
            #[cfg(feature = "tokio")]
            Dispatcher::Tokio(thread) => thread.join().expect("tokio dispatcher thread panicked"),
        }
    }
}

#[cfg(feature = "tokio")]
mod stream {
    use futures_util::StreamExt;

    use crate::sim::Sim;

    /// Delivers everything `due_stream` yields until the end of the run, then drops the
    /// stream (its untaken batch goes back to the scheduler, pending).
    pub(super) fn run(sim: &Sim) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a tokio runtime");
        runtime.block_on(async {
            let mut due = sim.sched.due_stream();
            let end = tokio::time::Instant::from_std(sim.clock.instant(sim.end));
            let end = tokio::time::sleep_until(end);
            tokio::pin!(end);
            loop {
                tokio::select! {
                    biased;
                    () = &mut end => break,
                    Some(timer) = due.next() => {
                        let now = sim.clock.now();
                        sim.flow.handed_out(*timer.queue(), now, None);
                        sim.dispatch(timer, now);
                    }
                }
            }
        });
    }
}
