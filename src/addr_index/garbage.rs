//! What the index's writes retire ([`Garbage`]: the records and table
//! segments that left every copy readers can reach), and how reclamation
//! (`crate::reclaim`) empties each once its grace period passed.
//!
//! # Recycled records
//!
//! A record whose grace period passed is not freed: its value's `Arc` is
//! dropped (and with it `T`, when the index held the last reference: then
//! `T` is dropped in place and the `Arc`'s allocation kept), and its memory,
//! *hollow* from then on ([`Hollow`]), is a shell that reclamation hands
//! back to the writer, with the hollow `Arc` if there is one. The next insert
//! ([`make_record`]) rebuilds a record there, and a value in the hollow
//! `Arc`, so that an insert + remove churn allocates nothing once warm.
//! Nothing changes for readers: a recycled record's grace period is over,
//! exactly as for a freed one. At most [`POOL_MAX`] are kept; the rest are
//! freed, and `shrink_to_fit` and the index's drop free them all.

use super::record::Record;
use super::table::Array;
use super::types::Segments;
use crate::reclaim::{Shell, Spares, contain};
use alloc::boxed::Box;
use alloc::sync::Arc;
use core::mem::MaybeUninit;
use core::ptr::{self, NonNull};

/// What the index's writes retire: a record or a table array that left
/// every copy readers can reach, waiting for its grace period.
pub(crate) enum Garbage<T> {
    Record(NonNull<Record<T>>),
    Array(NonNull<Array<T>>),
}

/// The most hollow records an index keeps (more than the limbo hands out
/// at a time in an insert + remove churn, 128: see the bound in the
/// `AddrIndex` docs).
pub(crate) const POOL_MAX: usize = 192;

/// What a hollow record's memory holds: the next shell of its chain and a
/// hollow `Arc`'s data pointer (its `T` dropped), if any.
pub(crate) struct Hollow<T> {
    next: *mut Hollow<T>,
    value: Option<NonNull<T>>,
}

impl<T> crate::reclaim::Garbage for Garbage<T> {
    type Shell = Hollow<T>;
    /// `synchronize` waits for the drops in flight.
    const TICKETS: bool = true;

    /// A record: its value's `Arc` goes (and `T`, when the index held the
    /// last reference), its memory becomes a hollow shell. An array: freed
    /// (its slots hold no user data).
    unsafe fn empty(self) -> Option<NonNull<Hollow<T>>> {
        const {
            assert!(size_of::<Hollow<T>>() <= size_of::<Record<T>>());
            assert!(align_of::<Hollow<T>>() <= align_of::<Record<T>>());
        }
        match self {
            Garbage::Record(r) => {
                // A `Box<Record<T>>` from `Record::boxed` or `make_record`, unreachable and
                // handed over once (caller): the record is moved out once, its memory hollow
                // from now on.
                // SAFETY: so reading the record out is sound.
                let Record {
                    value, segments, ..
                } = unsafe { r.as_ptr().read() };
                drop(segments);
                let value = hollow_arc(value);
                let hollow = r.cast::<Hollow<T>>();
                // The record's memory is ours (hollow) and fits a `Hollow`
                // (asserted above).
                // SAFETY: so writing it is sound.
                unsafe {
                    hollow.write(Hollow {
                        next: ptr::null_mut(),
                        value,
                    })
                };
                Some(hollow)
            }
            Garbage::Array(a) => {
                // SAFETY: a `Box<Array<T>>` from `Table::add_segment` (caller: unreachable,
                // once).
                drop(unsafe { Box::from_raw(a.as_ptr()) });
                None
            }
        }
    }
}

// SAFETY: a hollow record's `next` is read and written only by the holder of
// its chain or stack (no reader can reach it: its grace period passed), and
// `free` frees the record's box and the hollow `Arc`'s allocation, running no
// user code (`T` was dropped when it became hollow).
unsafe impl<T> Shell for Hollow<T> {
    const KEPT: usize = POOL_MAX;

    unsafe fn next(this: NonNull<Self>) -> *mut Self {
        // SAFETY: the caller holds the shell, written by `empty`.
        unsafe { (*this.as_ptr()).next }
    }

    unsafe fn set_next(this: NonNull<Self>, next: *mut Self) {
        // SAFETY: as in `next`.
        unsafe { (*this.as_ptr()).next = next };
    }

    unsafe fn free(this: NonNull<Self>) {
        // SAFETY: as in `next`.
        let value = unsafe { (*this.as_ptr()).value };
        // `MaybeUninit<Record<T>>` has the layout of `Record<T>`, so this
        // frees the box's memory, dropping nothing.
        // SAFETY: the shell is a `Box<Record<T>>` allocation whose record
        // was moved out (`empty`), handed over once.
        drop(unsafe { Box::from_raw(this.as_ptr().cast::<MaybeUninit<Record<T>>>()) });
        if let Some(p) = value {
            // `Arc::from_raw` accepts a pointer from an `Arc<U>` of the same
            // size and alignment; `MaybeUninit<T>` drops nothing: the
            // allocation is freed, `T` (already dropped) is not dropped again.
            // SAFETY: the hollow `Arc` (`hollow_arc`) was the last (only)
            // reference, handed over with the shell, used once.
            drop(unsafe { Arc::from_raw(p.as_ptr().cast::<MaybeUninit<T>>().cast_const()) });
        }
    }
}

/// A record holding these fields, in recycled memory if a shell is ready
/// (and its value in a recycled `Arc` if one came with it), else in a
/// fresh box. The index owns it from now on.
pub(crate) fn make_record<T>(
    shells: &mut Spares<Hollow<T>>,
    id: u64,
    value: T,
    segments: Segments,
    base: u64,
    tag: u64,
) -> NonNull<Record<T>> {
    let Some(h) = shells.pop() else {
        return Record::boxed(id, Arc::new(value), segments, base, tag);
    };
    // SAFETY: a hollow record handed over by the spares (`empty` wrote it).
    let hollow = unsafe { h.read() };
    let value = match hollow.value {
        Some(p) => {
            // A hollow `Arc` (`hollow_arc`): its count is one and its `T`
            // was dropped; nothing else refers to it.
            // SAFETY: so `T` may be written there, and the pointer (from
            // `Arc::into_raw` of an `Arc<T>`) becomes an `Arc<T>` again.
            unsafe {
                p.as_ptr().write(value);
                Arc::from_raw(p.as_ptr())
            }
        }
        None => Arc::new(value),
    };
    let r = h.cast::<Record<T>>();
    // A hollow record's memory is a `Box<Record<T>>` allocation whose record
    // was moved out (`empty`); only the spares referred to it.
    // SAFETY: so a record may be written there and owned by the index.
    unsafe {
        r.as_ptr().write(Record {
            id,
            value,
            segments,
            base,
            tag,
        })
    };
    r
}

/// Drops the index's reference to a value. If it was the last one (no other
/// `Arc` or `Weak`), drops `T` in place and returns the allocation, hollow,
/// for reuse. A panic from `T`'s `Drop` is contained (counted).
fn hollow_arc<T>(mut value: Arc<T>) -> Option<NonNull<T>> {
    if Arc::get_mut(&mut value).is_none() {
        // Others hold it: only the index's reference goes (the value too,
        // if they let go meanwhile).
        contain(|| drop(value));
        return None;
    }
    let p = Arc::into_raw(value).cast_mut();
    // `get_mut` succeeded: this is the only reference, so nothing else can
    // read `T`; it is dropped once here and not used as a `T` again until
    // `make_record` writes a new one. (A panicking `Drop` still leaves it
    // dropped.) The pointer `into_raw` returns is derived from the
    // allocation's own pointer, as `get_mut`'s reference is: it may write.
    // SAFETY: so dropping in place is sound.
    contain(|| unsafe { ptr::drop_in_place(p) });
    NonNull::new(p)
}
