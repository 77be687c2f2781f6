//! Writer scopes: which threads may hold a writer lock, and the work
//! postponed until they hold none.
//!
//! A thread is inside a [`WriterScope`] from before it takes a writer lock
//! until after it released it. Work that may run user code (a value's
//! `Drop`, a pin that collects deferred closures) and that a write would do
//! after its own lock, while it is nested in another write (a write inside
//! another tree's batch closure, or inside a scope the objects layer
//! holds), is *postponed* ([`after_outermost_write`]) to a thread-local
//! list that the outermost scope runs once it ends: after every writer
//! lock of the thread was released.
//!
//! The same thread-locals count the drop tickets a thread holds
//! (`ticket.rs`): a waiter that holds one would wait for itself.

use alloc::boxed::Box;

/// What reclamation keeps per thread: the writer scopes it is inside, the
/// work postponed to the end of the outermost one, and the drop tickets
/// it holds. Without `std` there are no thread-locals: a thread is never
/// known to be inside a writer scope, so nothing is postponed (a drop due
/// in a write nested in another tree's batch closure runs under that
/// write's lock), and a waiter cannot tell that it holds a ticket itself
/// (the `guide::no_std` page says what that means for callers).
#[cfg(feature = "std")]
mod here {
    use alloc::boxed::Box;
    use alloc::vec::Vec;
    use core::cell::{Cell, RefCell};

    std::thread_local! {
        /// How many writer scopes this thread is inside. No destructor, so it
        /// stays readable during thread-local destruction.
        static WRITE_DEPTH: Cell<usize> = const { Cell::new(0) };
        /// Destructors and reclamation work postponed until this thread leaves
        /// its outermost scope ([`after_outermost_write`](super::after_outermost_write)).
        static POSTPONED: RefCell<Vec<Box<dyn FnOnce()>>> = const { RefCell::new(Vec::new()) };
        /// Whether `POSTPONED` may hold work: checked first, because it
        /// has no destructor to register on first use (every write's scope
        /// asks; most find nothing).
        static ANY_POSTPONED: Cell<bool> = const { Cell::new(false) };
        /// How many drop tickets (`ticket.rs`) this thread holds (from the
        /// lock that took each until its drops ran). No destructor:
        /// readable during thread-local destruction.
        static TICKETS_HERE: Cell<usize> = const { Cell::new(0) };
    }

    /// Adds `by` (+1 or -1) to the scopes this thread is inside; returns how
    /// many it is inside now.
    #[inline]
    pub(super) fn scopes(by: isize) -> usize {
        WRITE_DEPTH.with(|d| {
            d.set(d.get().wrapping_add_signed(by));
            d.get()
        })
    }

    /// Postpones `work`, or hands it back if thread-locals are being
    /// destroyed.
    pub(super) fn postpone(work: Box<dyn FnOnce()>) -> Option<Box<dyn FnOnce()>> {
        let mut work = Some(work);
        let _ = POSTPONED.try_with(|p| p.borrow_mut().extend(work.take()));
        if work.is_none() {
            ANY_POSTPONED.set(true);
        }
        work
    }

    /// Whether work may be postponed (a destructor-free flag: the common
    /// answer, no, costs one thread-local load).
    #[inline]
    pub(super) fn any_postponed() -> bool {
        ANY_POSTPONED.get()
    }

    /// The latest postponed work, taken off the list.
    pub(super) fn next_postponed() -> Option<Box<dyn FnOnce()>> {
        if !ANY_POSTPONED.get() {
            return None;
        }
        let work = POSTPONED.try_with(|p| p.borrow_mut().pop()).ok().flatten();
        if work.is_none() {
            ANY_POSTPONED.set(false);
        }
        work
    }

    /// Adds `by` to the tickets this thread holds; returns how many it
    /// holds now.
    pub(in crate::reclaim) fn tickets(by: isize) -> usize {
        TICKETS_HERE.with(|t| {
            t.set(t.get().wrapping_add_signed(by));
            t.get()
        })
    }
}

/// See the `std` version.
#[cfg(not(feature = "std"))]
mod here {
    use alloc::boxed::Box;

    pub(super) fn scopes(_: isize) -> usize {
        0
    }

    pub(super) fn postpone(work: Box<dyn FnOnce()>) -> Option<Box<dyn FnOnce()>> {
        Some(work)
    }

    pub(super) fn next_postponed() -> Option<Box<dyn FnOnce()>> {
        None
    }

    pub(super) fn any_postponed() -> bool {
        false
    }

    pub(in crate::reclaim) fn tickets(_: isize) -> usize {
        0
    }
}

pub(super) use here::tickets;

/// Marks the current thread as (possibly) holding a writer lock, from
/// before it takes the lock until after it released it; see the module docs.
#[derive(Debug)]
pub(crate) struct WriterScope(());

impl WriterScope {
    /// Enters a scope; hold the value across the whole write.
    #[inline]
    pub(crate) fn enter() -> Self {
        here::scopes(1);
        WriterScope(())
    }
}

impl Drop for WriterScope {
    #[inline]
    fn drop(&mut self) {
        if here::scopes(-1) == 0 && here::any_postponed() {
            run_postponed();
        }
    }
}

/// The outermost scope was left: the lock is released. Runs what was
/// postponed, one at a time without holding the list borrowed (a
/// destructor may write, and so postpone and drain, itself).
fn run_postponed() {
    while let Some(work) = here::next_postponed() {
        work();
    }
}

/// Whether this thread is inside a [`WriterScope`]: then nothing that may
/// run user code should run here (see [`after_outermost_write`]).
pub(crate) fn in_writer_scope() -> bool {
    here::scopes(0) > 0
}

/// Runs `work` (reclamation that may run user code, or pin and collect)
/// when this thread leaves its outermost [`WriterScope`]; right away if it
/// is in none, or if its thread-locals are being destroyed. A collection
/// inside a write nested in another tree's batch closure would run other
/// deferred closures under that write's lock (no user code runs under a
/// writer lock).
pub(crate) fn after_outermost_write(work: impl FnOnce() + 'static) {
    if !in_writer_scope() {
        return work();
    }
    if let Some(work) = here::postpone(Box::new(work)) {
        work();
    }
}
