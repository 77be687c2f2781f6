//! A counting global allocator: live bytes and live blocks, counted only
//! while a measurement is running (one relaxed load otherwise).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};

/// Wraps `System`, counting while [`measure`] runs.
pub(crate) struct Counting;

static ENABLED: AtomicBool = AtomicBool::new(false);
static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);
static LIVE_BLOCKS: AtomicIsize = AtomicIsize::new(0);
/// Allocation calls (`alloc`, `alloc_zeroed`, `realloc`) while counting.
static CALLS: AtomicIsize = AtomicIsize::new(0);

fn count(bytes: isize, blocks: isize) {
    if ENABLED.load(Ordering::Relaxed) {
        LIVE_BYTES.fetch_add(bytes, Ordering::Relaxed);
        LIVE_BLOCKS.fetch_add(blocks, Ordering::Relaxed);
        if bytes > 0 || blocks > 0 {
            CALLS.fetch_add(1, Ordering::Relaxed);
        }
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so `System`'s
// guarantees carry over; counting has no effect on the memory returned.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize, 1);
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize, 1);
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize), -1);
        // SAFETY: the caller upholds `GlobalAlloc::dealloc`'s contract.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as isize - layout.size() as isize, 0);
        if new_size <= layout.size() && ENABLED.load(Ordering::Relaxed) {
            // A shrinking realloc is an allocator call too.
            CALLS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Builds a value with counting on; returns it with the bytes and blocks it
/// still holds (allocated during `build` and not freed by its end). Single
/// threaded use only: other threads' allocations would be counted too.
pub(crate) fn measure<T>(build: impl FnOnce() -> T) -> (T, isize, isize) {
    CALLS.store(0, Ordering::Relaxed);
    LIVE_BYTES.store(0, Ordering::Relaxed);
    LIVE_BLOCKS.store(0, Ordering::Relaxed);
    ENABLED.store(true, Ordering::SeqCst);
    let value = build();
    ENABLED.store(false, Ordering::SeqCst);
    (
        value,
        LIVE_BYTES.load(Ordering::Relaxed),
        LIVE_BLOCKS.load(Ordering::Relaxed),
    )
}

/// The allocator calls (`alloc`, `alloc_zeroed`, `realloc`) `run` makes.
/// Single threaded use only, as [`measure`].
pub(crate) fn allocations(run: impl FnOnce()) -> isize {
    let ((), _, _) = measure(run);
    CALLS.load(Ordering::Relaxed)
}
