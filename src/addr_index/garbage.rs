//! What the index's limbo holds: the records and table segments that left
//! every copy readers can reach, and how each is dropped once its grace
//! period passed.
//!
//! # Recycled records
//!
//! A record whose grace period passed is not freed: its value's `Arc` is
//! dropped (and with it `T`, when the index held the last reference: then
//! `T` is dropped in place and the `Arc`'s allocation kept), and its memory,
//! *hollow* from then on, goes to the index's [`Pool`], with the hollow
//! `Arc` if there is one. The next insert (`Spare::make`) rebuilds a record
//! there, and a value in the hollow `Arc`, so that an insert + remove churn
//! allocates nothing once warm. Nothing changes for readers: a pooled
//! record's grace period is over, exactly as for a freed one. The pool keeps
//! at most [`POOL_MAX`] records; the rest are freed, and `shrink_to_fit` and
//! the index's drop free them all.

use super::record::Record;
use super::table::Array;
use super::types::Segments;
use crate::sync::{AtomicPtr, AtomicUsize, Mutex, Ordering};
use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::mem::MaybeUninit;
use core::ptr::{self, NonNull};

/// What an index's limbo (`reclaim::Limbo`) holds: a record or a table
/// array that left every copy readers can reach, waiting for its grace
/// period.
pub(crate) enum Garbage<T> {
    Record(NonNull<Record<T>>),
    Array(NonNull<Array<T>>),
}

/// The most hollow records a [`Pool`] keeps (more than the limbo holds in
/// an insert + remove churn: see the bound in the `AddrIndex` docs).
pub(crate) const POOL_MAX: usize = 128;

/// The capacity a due-items buffer keeps between writes.
const DUE_KEPT: usize = 64;

/// What a hollow record's memory holds while pooled: the next hollow record
/// and a hollow `Arc`'s data pointer (its `T` dropped), if any.
struct Hollow<T> {
    next: *mut Record<T>,
    value: Option<NonNull<T>>,
}

/// Hollow records (and `Arc`s) handed back by whichever thread ran their
/// drop, for the writer to reuse; shared by the index and the drops in
/// flight (which may outlive it).
pub(crate) struct Pool<T> {
    /// A push-only stack of hollow records (pushed by any thread, taken
    /// whole under the writer lock: no ABA).
    returned: AtomicPtr<Record<T>>,
    /// Records in `returned` and the writer's [`Spare`] list, about (each
    /// `give` adds one, each reuse subtracts one).
    count: AtomicUsize,
    /// A reclamation list's buffer, handed back empty by the thread that
    /// ran the drops, for the next write's due items.
    due: Mutex<Vec<Garbage<T>>>,
}

/// The writer's end of the pool (under the writer lock): the hollow records
/// it took, ready for reuse.
pub(crate) struct Spare<T> {
    head: *mut Record<T>,
    /// Made on first use (`AddrIndex::new` is `const`).
    pool: Option<Arc<Pool<T>>>,
}

impl<T> Spare<T> {
    crate::sync::const_fn_unless_loom! {
        pub(crate) fn new() -> Self {
            Spare {
                head: ptr::null_mut(),
                pool: None,
            }
        }
    }

    /// The pool, made on first use.
    pub(crate) fn pool(&mut self) -> Arc<Pool<T>> {
        Arc::clone(self.pool.get_or_insert_with(|| {
            Arc::new(Pool {
                returned: AtomicPtr::new(ptr::null_mut()),
                count: AtomicUsize::new(0),
                due: Mutex::new(Vec::new()),
            })
        }))
    }

    /// A record holding these fields, in recycled memory if any is pooled
    /// (and its value in a recycled `Arc` if one came with it), else in a
    /// fresh box. The index owns it from now on.
    pub(crate) fn make(
        &mut self,
        id: u64,
        value: T,
        segments: Segments,
        base: u64,
        tag: u64,
    ) -> NonNull<Record<T>> {
        if let Some(pool) = self.pool.as_ref().filter(|_| self.head.is_null()) {
            self.head = pool.take_all();
        }
        let Some(r) = NonNull::new(self.head) else {
            return Record::boxed(id, Arc::new(value), segments, base, tag);
        };
        // SAFETY: a hollow record of this list (`Pool::give` wrote it).
        let hollow = unsafe { r.cast::<Hollow<T>>().read() };
        self.head = hollow.next;
        let value = match hollow.value {
            Some(p) => {
                // A hollow `Arc` (`hollow_arc`): its count is one and its
                // `T` was dropped; nothing else refers to it.
                // SAFETY: so `T` may be written there, and the pointer
                // (from `Arc::into_raw` of an `Arc<T>`) becomes an `Arc<T>`
                // again.
                unsafe {
                    p.as_ptr().write(value);
                    Arc::from_raw(p.as_ptr())
                }
            }
            None => Arc::new(value),
        };
        // A hollow record's memory is a `Box<Record<T>>` allocation whose
        // record was moved out (`recycle`); only this list refers to it.
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
        if let Some(pool) = &self.pool {
            // Relaxed: an approximate bound.
            pool.count.fetch_sub(1, Ordering::Relaxed);
        }
        r
    }

    /// Frees every pooled record (for `shrink_to_fit`; `&mut` to the writer
    /// state). Drops in flight may still hand records back later.
    pub(crate) fn free_all(&mut self) {
        if let Some(pool) = &self.pool {
            let mut taken = pool.take_all();
            // SAFETY: hollow records this list took, freed once.
            let freed = unsafe { free_list(&mut self.head) + free_list(&mut taken) };
            // Relaxed: an approximate bound; each record freed was counted
            // by its `give`.
            pool.count.fetch_sub(freed, Ordering::Relaxed);
            *crate::sync::lock(&pool.due) = Vec::new();
        }
    }
}

impl<T> Drop for Spare<T> {
    fn drop(&mut self) {
        self.free_all();
    }
}

/// Frees the hollow records of the list at `head` (and their hollow
/// `Arc`s), emptying it; returns how many.
///
/// # Safety
/// The list is the caller's alone, of hollow records written by
/// [`Pool::give`].
unsafe fn free_list<T>(head: &mut *mut Record<T>) -> usize {
    let mut freed = 0;
    while let Some(r) = NonNull::new(*head) {
        // SAFETY: caller.
        let hollow = unsafe { r.cast::<Hollow<T>>().read() };
        *head = hollow.next;
        // SAFETY: caller: a hollow record and `Arc`, freed once here.
        unsafe { free_hollow(r, hollow.value) };
        freed += 1;
    }
    freed
}

/// Frees a hollow record, and a hollow `Arc` (`T` already dropped).
///
/// # Safety
/// `r` is a `Box<Record<T>>` allocation whose record was moved out, `value`
/// a data pointer from [`hollow_arc`]; neither is used again.
unsafe fn free_hollow<T>(r: NonNull<Record<T>>, value: Option<NonNull<T>>) {
    // `MaybeUninit<Record<T>>` has the layout of `Record<T>`, so this frees
    // the box's memory, dropping nothing.
    // SAFETY: caller.
    drop(unsafe { Box::from_raw(r.as_ptr().cast::<MaybeUninit<Record<T>>>()) });
    if let Some(p) = value {
        // `Arc::from_raw` accepts a pointer from an `Arc<U>` of the same size
        // and alignment; `MaybeUninit<T>` drops nothing: the allocation is
        // freed, `T` (already dropped) is not dropped again.
        // SAFETY: caller: the last (only) reference, used once.
        drop(unsafe { Arc::from_raw(p.as_ptr().cast::<MaybeUninit<T>>().cast_const()) });
    }
}

/// Drops the index's reference to a value. If it was the last one (no other
/// `Arc` or `Weak`), drops `T` in place and returns the allocation, hollow,
/// for reuse. A panic from `T`'s `Drop` is counted, not propagated.
fn hollow_arc<T>(mut value: Arc<T>) -> Option<NonNull<T>> {
    if Arc::get_mut(&mut value).is_none() {
        // Others hold it: only the index's reference goes (the value too,
        // if they let go meanwhile).
        let r = crate::unwind::catch_unwind(crate::unwind::AssertUnwindSafe(|| drop(value)));
        if r.is_err() {
            crate::reclaim::count_swallowed_drop_panic();
        }
        return None;
    }
    let p = Arc::into_raw(value).cast_mut();
    // `get_mut` succeeded: this is the only reference, so nothing else can
    // read `T`; it is dropped once here and not used as a `T` again until
    // `Spare::make` writes a new one. (A panicking `Drop` still leaves it
    // dropped.) The pointer `into_raw` returns is derived from the
    // allocation's own pointer, as `get_mut`'s reference is: it may write.
    // SAFETY: so dropping in place is sound.
    let r = crate::unwind::catch_unwind(crate::unwind::AssertUnwindSafe(|| unsafe {
        ptr::drop_in_place(p)
    }));
    if r.is_err() {
        crate::reclaim::count_swallowed_drop_panic();
    }
    NonNull::new(p)
}

impl<T> Pool<T> {
    /// Takes every hollow record handed back (under the writer lock).
    fn take_all(&self) -> *mut Record<T> {
        // Relaxed: a hint, skipping the swap when nothing was returned.
        if self.returned.load(Ordering::Relaxed).is_null() {
            return ptr::null_mut();
        }
        // Acquire: pairs with the Release CAS in `give`, so the hollow
        // record's contents (and the drops before it) are visible here.
        self.returned.swap(ptr::null_mut(), Ordering::Acquire)
    }

    /// Hands back a hollow record (and `Arc`), or frees them if the pool is
    /// full.
    ///
    /// # Safety
    /// As for [`free_hollow`].
    unsafe fn give(&self, r: NonNull<Record<T>>, value: Option<NonNull<T>>) {
        const {
            assert!(size_of::<Hollow<T>>() <= size_of::<Record<T>>());
            assert!(align_of::<Hollow<T>>() <= align_of::<Record<T>>());
        }
        // Relaxed: an approximate bound on memory, nothing is ordered by it.
        if self.count.fetch_add(1, Ordering::Relaxed) >= POOL_MAX {
            self.count.fetch_sub(1, Ordering::Relaxed);
            // SAFETY: caller.
            unsafe { free_hollow(r, value) };
            return;
        }
        let mut head = self.returned.load(Ordering::Relaxed);
        loop {
            // The record's memory is the caller's (hollow) until the CAS
            // publishes it, and fits a `Hollow` (asserted above).
            // SAFETY: so writing it is sound.
            unsafe { r.cast::<Hollow<T>>().write(Hollow { next: head, value }) };
            // Release: pairs with the Acquire swap in `take_all`.
            match self.returned.compare_exchange_weak(
                head,
                r.as_ptr(),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }

    /// An empty buffer for a write's due items (the last one handed back,
    /// or a new one).
    pub(crate) fn due_buffer(&self) -> Vec<Garbage<T>> {
        core::mem::take(&mut *crate::sync::lock(&self.due))
    }

    /// Hands back a write's due-items buffer once its drops ran.
    pub(crate) fn return_due_buffer(&self, mut v: Vec<Garbage<T>>) {
        v.clear();
        // Not a mass removal's capacity, for good.
        v.shrink_to(DUE_KEPT);
        let mut slot = crate::sync::lock(&self.due);
        if slot.capacity() < v.capacity() {
            *slot = v;
        }
    }
}

impl<T> Drop for Pool<T> {
    fn drop(&mut self) {
        let mut head = self.returned.swap(ptr::null_mut(), Ordering::Relaxed);
        // SAFETY: `&mut self`: the list is the pool's alone.
        let _ = unsafe { free_list(&mut head) };
    }
}

impl<T: 'static> Garbage<T> {
    /// Drops it: now, or (inside another write's scope) once the outermost
    /// write ends, so that a value's `Drop` never runs under a writer lock.
    /// A record's memory (and its value's, when the index held the last
    /// reference) goes to `pool` (see the module docs). A panic from a
    /// value's `Drop` is counted, not propagated
    /// ([`swallowed_drop_panics`](crate::swallowed_drop_panics)).
    ///
    /// # Safety
    /// Its grace period passed (no reader can reach it), and it is freed
    /// once: the limbo handed it out once.
    pub(crate) unsafe fn free(self, pool: &Pool<T>) {
        match self {
            // SAFETY: a `Box<Record<T>>` from `Record::boxed` or `Spare::make` (caller:
            // unreachable, once).
            Garbage::Record(r) if crate::reclaim::in_writer_scope() => unsafe {
                crate::reclaim::postpone_drop(r)
            },
            Garbage::Record(r) => {
                // SAFETY: as above; the record is moved out once, its memory hollow from now on.
                let Record {
                    value, segments, ..
                } = unsafe { r.as_ptr().read() };
                drop(segments);
                let value = hollow_arc(value);
                // SAFETY: a hollow record and `Arc`, handed on once.
                unsafe { pool.give(r, value) };
            }
            // SAFETY: a `Box<Array<T>>` from `Table::add_segment` (caller: unreachable, once).
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
            // SAFETY: a `Box` made by `record.rs`, `Spare::make` or `table.rs` (caller:
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
