//! What the index's limbo holds: the records and table arrays that left
//! every copy readers can reach, and how each is dropped once its grace
//! period passed.

use super::record::Record;
use super::table::Array;
use alloc::boxed::Box;
use core::ptr::NonNull;

/// What an index's limbo (`reclaim::Limbo`) holds: a record or a table
/// array that left every copy readers can reach, waiting for its grace
/// period.
pub(crate) enum Garbage<T> {
    Record(NonNull<Record<T>>),
    Array(NonNull<Array<T>>),
}

impl<T: 'static> Garbage<T> {
    /// Drops it: now, or (inside another write's scope) once the outermost
    /// write ends, so that a value's `Drop` never runs under a writer lock.
    /// A panic from a value's `Drop` is counted, not propagated
    /// ([`swallowed_drop_panics`](crate::swallowed_drop_panics)).
    ///
    /// # Safety
    /// Its grace period passed (no reader can reach it), and it is freed
    /// once: the limbo handed it out once.
    pub(crate) unsafe fn free(self) {
        match self {
            // SAFETY: a `Box<Record<T>>` from `Record::boxed` (caller: unreachable, once).
            Garbage::Record(r) => unsafe { crate::reclaim::postpone_drop(r) },
            // SAFETY: a `Box<Array<T>>` from `replace_array` (caller: unreachable, once).
            Garbage::Array(a) => drop(unsafe { Box::from_raw(a.as_ptr()) }),
        }
    }
}

impl<T> Garbage<T> {
    /// Drops it now (the index's own `Drop`: no reader is left). A panic
    /// from a value's `Drop` is counted, as during reclamation by a write.
    ///
    /// # Safety
    /// As for [`free`](Garbage::free).
    pub(crate) unsafe fn free_now(self) {
        let r = crate::unwind::catch_unwind(crate::unwind::AssertUnwindSafe(|| match self {
            // SAFETY: a `Box` made by `record.rs` or `table.rs` (caller:
            // unreachable, once).
            Garbage::Record(r) => drop(unsafe { Box::from_raw(r.as_ptr()) }),
            // SAFETY: as above.
            Garbage::Array(a) => drop(unsafe { Box::from_raw(a.as_ptr()) }),
        }));
        if r.is_err() {
            crate::reclaim::count_swallowed_drop_panic();
        }
    }
}
