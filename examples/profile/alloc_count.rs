//! The check that the handler never allocates: a global allocator that
//! counts the calls made on a thread while its `SIGPROF` handler runs.
//! (Instrumentation, not part of the sampler: it is the one thread-local
//! the handler touches, a `const`-initialized flag with no destructor.)

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// The system allocator, counting what runs inside the handler.
pub(crate) struct Counting;

thread_local! {
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// Allocator calls made inside the handler, on any thread.
static IN_HANDLER: AtomicUsize = AtomicUsize::new(0);
/// Signals handled.
static HANDLED: AtomicUsize = AtomicUsize::new(0);

fn note() {
    if INSIDE.with(Cell::get) {
        IN_HANDLER.fetch_add(1, Relaxed);
    }
}

// SAFETY: every call is forwarded to `System` unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Marks the current thread as inside the handler until dropped.
pub(crate) struct InHandler(());

impl InHandler {
    pub(crate) fn enter() -> InHandler {
        HANDLED.fetch_add(1, Relaxed);
        INSIDE.with(|i| i.set(true));
        InHandler(())
    }
}

impl Drop for InHandler {
    fn drop(&mut self) {
        INSIDE.with(|i| i.set(false));
    }
}

/// `(signals handled, allocator calls inside the handler)`.
pub(crate) fn counts() -> (usize, usize) {
    (HANDLED.load(Relaxed), IN_HANDLER.load(Relaxed))
}
