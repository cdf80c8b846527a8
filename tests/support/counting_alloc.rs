//! A global allocator that forwards every call to [`System`] and reports each change of the
//! live heap bytes to a function of the user's: [`per_thread`] counts them per thread (for
//! tests that run in parallel), `examples/admission/` (which includes this file with
//! `#[path]`) counts live bytes and their peak.
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOCATOR: Counting = Counting(count);
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Forwards to [`System`]; calls `.0` with `+size` on each allocation, `-size` on each
/// deallocation and `new_size - size` on each reallocation. The function must not allocate
/// and must not unwind.
pub struct Counting(pub fn(isize));

// SAFETY: every call is forwarded unchanged to `System`; the wrapper only reports the
// layout's size to a function that must neither allocate nor unwind.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        (self.0)(layout.size() as isize);
        // SAFETY: the caller's contract for `alloc` is passed on unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        (self.0)(layout.size() as isize);
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        (self.0)(-(layout.size() as isize));
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        (self.0)(new_size as isize - layout.size() as isize);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

thread_local! {
    // `const` init: no allocation.
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

/// For `Counting(per_thread)`: counts the live heap bytes of each thread apart, so that
/// tests running in parallel do not count each other's. What a test measures must be
/// allocated and freed on its own thread (a current-thread runtime, say).
#[allow(dead_code)] // not by every includer
pub fn per_thread(delta: isize) {
    // `try_with`: the allocator is also called while a thread's locals are torn down.
    let _ = LIVE.try_with(|l| l.set(l.get() + delta));
}

/// The live heap bytes [`per_thread`] counted on this thread.
#[allow(dead_code)] // not by every includer
pub fn live_on_this_thread() -> isize {
    LIVE.with(Cell::get)
}
