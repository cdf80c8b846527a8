//! Thread CPU time, the clock of every figure here. Self-contained (no `super::`), so that
//! the core crate's `examples/observe_cost.rs` includes this file by `#[path]` and measures
//! the same way.

/// CPU time this thread has used, in ns (`CLOCK_THREAD_CPUTIME_ID`). The figures are CPU
/// time, not wall time: on a shared machine the time a thread spends descheduled is noise,
/// not work. Everything a peer does runs on this thread (tokio's runtime is current-thread).
///
/// # Panics
/// If `clock_gettime` fails (never on Linux or the BSDs, which define the clock).
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux and the
    // BSDs define. clock_gettime only writes `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
