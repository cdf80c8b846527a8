//! The child's heap: glibc's malloc tunables it runs under, and the block it touches before
//! it measures, so that no timed region pays page faults for memory the process has not
//! touched yet.

/// glibc's malloc settings for every child: no block is mapped on its own (`mmap_max=0`) and
/// freed memory is not given back to the system below 1 TiB (`trim_threshold`), so memory
/// the process touched once stays touched: with [`prefault_heap`] and the warm-up runs
/// (see `measure::measure`), no timed region pays page faults for a structure's first use.
///
/// Why: with glibc's defaults a block is mapped afresh, and faulted in page by page inside
/// the timed inserts, whenever it is at least the current mapping threshold, a threshold
/// glibc raises as mapped blocks are freed, up to 32 MiB. Whether a peer paid the faults
/// then depended on its block's size and on which peers had run before it: timer-queue's
/// insert at 1 M timers (a 64 MiB slab, always mapped) took 24 ns, 6 ns with these settings;
/// at 100 000 timers it took 4 ns in one run and 21–31 ns in others.
pub const MALLOC_TUNABLES: &str =
    "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=1099511627776";

/// Heap the child touches before it measures, per timer of its size, on top of
/// [`PREFAULT_BASE`]: about the most a child's heap reached at 1 M timers (612 MB at the end
/// of a `--quick` run, `brk`), which is more than the structures alone (200 bytes per timer
/// at most, `compare`'s memory table): the harness's vectors and the room the allocator
/// could not reuse count too.
const PREFAULT_PER_TIMER: usize = 576;

/// Heap the child touches before it measures whatever its size.
const PREFAULT_BASE: usize = 64 << 20;

/// Writes every page of one block of heap and frees it, before anything is measured: under
/// [`MALLOC_TUNABLES`] the block goes back to the top of the heap and stays mapped, so the
/// blocks carved from it later are already faulted in.
///
/// Why: the warm-up runs alone left the heap growing during some peers' cells. At 100 000
/// timers timer-queue's next slab did not fit the room the last runs freed (it shrinks its
/// slab in place when the check polls it empty, and the harness's smaller vectors likely
/// took the freed room): the heap grew by 4.8 MB at seven fills (`brk`), and its insert read
/// 13–37 ns instead of about 6, paying the page faults of fresh memory. Holds about
/// `PREFAULT_BASE + PREFAULT_PER_TIMER * n` bytes for the child's life. It relies on the
/// trim threshold of [`MALLOC_TUNABLES`]: a caller's `GLIBC_TUNABLES` that lowers it gives
/// the block back at once (see [`overrides_heap_tunables`]).
pub fn prefault_heap(n: usize) {
    let bytes = PREFAULT_BASE.saturating_add(PREFAULT_PER_TIMER.saturating_mul(n));
    let block = vec![1u8; bytes];
    std::hint::black_box(&block);
}

/// The tunables' names in a `GLIBC_TUNABLES` value (`name=value` settings joined by `:`).
fn names(tunables: &str) -> impl Iterator<Item = &str> {
    tunables
        .split(':')
        .map(|setting| setting.split('=').next().unwrap_or_default())
}

/// Whether a caller's `GLIBC_TUNABLES` sets one of the malloc tunables that
/// [`MALLOC_TUNABLES`] sets and [`prefault_heap`] relies on (its own value then wins).
fn overrides_heap_tunables(own: &str) -> bool {
    names(own).any(|name| names(MALLOC_TUNABLES).any(|ours| ours == name))
}

/// `GLIBC_TUNABLES` for a child: [`MALLOC_TUNABLES`], then the caller's own, which glibc
/// applies last and so wins where both set the same tunable (said once on standard error,
/// as timed regions may then pay page faults). Other C libraries ignore it.
pub fn tunables() -> std::ffi::OsString {
    static WARNED: std::sync::Once = std::sync::Once::new();
    let mut value = std::ffi::OsString::from(MALLOC_TUNABLES);
    if let Some(own) = std::env::var_os("GLIBC_TUNABLES").filter(|own| !own.is_empty()) {
        if overrides_heap_tunables(&own.to_string_lossy()) {
            WARNED.call_once(|| {
                eprintln!(
                    "compare: warning: GLIBC_TUNABLES sets a malloc tunable that compare sets \
                     too ({MALLOC_TUNABLES}); yours wins, and timed regions may then pay page \
                     faults for fresh memory"
                );
            });
        }
        value.push(":");
        value.push(own);
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_callers_malloc_tunables_that_undo_the_harness_are_recognised() {
        assert!(overrides_heap_tunables("glibc.malloc.trim_threshold=0"));
        assert!(overrides_heap_tunables(
            "glibc.cpu.hwcaps=-AVX2:glibc.malloc.mmap_max=4"
        ));
        assert!(!overrides_heap_tunables("glibc.malloc.tcache_count=0"));
        assert!(!overrides_heap_tunables("glibc.malloc.mmap_threshold=4096"));
        assert!(!overrides_heap_tunables("glibc.malloc.trim_threshold_x=1"));
        assert!(!overrides_heap_tunables(""));
    }
}
