//! Module records and the per-copy module table.
//!
//! A module's **record** ([`Record`]) holds what the index knows of it: its
//! value (an `Arc<T>`, shared with [`Removed`](crate::Removed)), its
//! segments, base and tag. It is immutable once created: `set_value` makes a
//! new record. Records are heap boxes; pinned readers reach them from a range
//! node's `module` word or from the module table, and a record is retired
//! through the epoch only after it left both copies of both.
//!
//! The **module table** ([`Table`]) maps ids to records, one table per copy
//! of the range tree and steered by the same latch, so a reader that
//! validated saw the ranges and the record of one version: `get(id)`,
//! `module_count()` and `lookup` never disagree. The writer changes table 0
//! while readers are on copy 1 (during the transaction body) and brings
//! table 1 level when copy 1 is published, copying the slots it changed.
//!
//! A table is an array of `(id, record)` slots sorted by id (ids only grow,
//! so inserting appends). Removing a module leaves a tombstone (a null
//! record); when tombstones outnumber live slots the array is compacted, so
//! a table never holds more than twice its live modules (plus a minimum).
//! Every slot word and the length are atomics; the array itself is
//! type-stable: a grown table keeps its old array alive (chained from the
//! new one) until the index is dropped, so a stale reader never reads freed
//! memory. Readers bound every probe by the array's own length, which is
//! immutable, so a torn `(array, len)` pair cannot take them out of bounds.

use super::types::Segments;
use crate::reclaim::Reclaimer;
use crate::sync::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use core::ptr::{self, NonNull};
use std::sync::Arc;

/// See the module docs.
pub(crate) struct Record<T> {
    pub(crate) id: u64,
    pub(crate) value: Arc<T>,
    /// Sorted by start, non-overlapping, non-empty.
    pub(crate) segments: Segments,
    pub(crate) base: u64,
    pub(crate) tag: u64,
}

impl<T> Record<T> {
    /// A new boxed record, as a raw pointer (the index owns it from now on).
    pub(crate) fn boxed(
        id: u64,
        value: Arc<T>,
        segments: Segments,
        base: u64,
        tag: u64,
    ) -> NonNull<Record<T>> {
        NonNull::from(Box::leak(Box::new(Record {
            id,
            value,
            segments,
            base,
            tag,
        })))
    }
}

/// Records retired (by any index) whose destructor has not run yet. Only
/// bounds [`flush`]'s loop, so it is a plain std atomic even under loom.
static PENDING: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);

/// A retired record: its drop counts down [`PENDING`] once the record (and
/// perhaps its value) is dropped, even if that drop panics.
#[repr(transparent)]
struct Retired<T>(core::mem::ManuallyDrop<Record<T>>);

impl<T> Drop for Retired<T> {
    fn drop(&mut self) {
        struct CountDown;
        impl Drop for CountDown {
            fn drop(&mut self) {
                // Release: pairs with the Acquire load in `flush`, so a
                // flusher that sees the count drop sees the value's drop.
                PENDING.fetch_sub(1, core::sync::atomic::Ordering::Release);
            }
        }
        let _count_down = CountDown;
        // SAFETY: the record is dropped here, once, and never used again.
        unsafe { core::mem::ManuallyDrop::drop(&mut self.0) };
    }
}

/// Hands `record` (out of both copies of everything, so unreachable for
/// readers that pin from now on) to the epoch, to be dropped once no guard
/// pinned before now remains; see [`flush`].
///
/// # Safety
/// `record` came from [`Record::boxed`], is unreachable for new readers, is
/// retired once and not used again; `guard` pins `reclaim`'s collector.
pub(crate) unsafe fn retire<T>(
    reclaim: &Reclaimer,
    guard: &crossbeam_epoch::Guard,
    record: NonNull<Record<T>>,
) {
    // Relaxed: a count; the destructor's decrement is ordered after it by
    // the epoch's own synchronization.
    PENDING.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
    // `Retired<T>` is a transparent wrapper (of a transparent wrapper): the
    // same layout as the box's `Record<T>`.
    // SAFETY: caller; the pointer came from a `Box<Record<T>>`.
    unsafe { reclaim.retire(guard, record.cast::<Retired<T>>()) };
}

/// Most pin-and-flush rounds [`flush`] runs: two suffice when no other
/// thread holds a guard (a retired bag is freed two epochs after it was
/// sealed), the rest work through other threads' garbage queued before it.
/// While a guard held elsewhere keeps records pending, every flush spends
/// them all: a small bound keeps that cheap.
const FLUSH_ROUNDS: usize = 4;

/// Runs the epoch's collector until every retired record was dropped, or
/// for [`FLUSH_ROUNDS`] rounds (a guard held elsewhere stops the epoch).
/// Call it with no guard pinned on this thread (it could not advance).
pub(crate) fn flush(reclaim: &Reclaimer) {
    for _ in 0..FLUSH_ROUNDS {
        // Acquire: see `Retired::drop`.
        if PENDING.load(core::sync::atomic::Ordering::Acquire) == 0 {
            return;
        }
        reclaim.pin().flush();
    }
}

/// One `(id, record)` entry; `record` null: a tombstone.
struct Slot<T> {
    id: AtomicU64,
    record: AtomicPtr<Record<T>>,
}

/// A table's array. `slots` is never resized; `prev` owns the array this
/// one replaced (kept for stale readers, freed with the index).
struct Array<T> {
    slots: Box<[Slot<T>]>,
    _prev: Option<Box<Array<T>>>,
}

/// One copy's module table; see the module docs.
pub(crate) struct Table<T> {
    array: AtomicPtr<Array<T>>,
    /// Slots in use (live and tombstones), a prefix of the array.
    len: AtomicUsize,
    /// Live slots: the module count.
    live: AtomicUsize,
}

/// Slot indices a transaction wrote in table 0, to be copied to table 1 on
/// commit (or back from it on rollback).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Dirty(Option<(usize, usize)>);

impl Dirty {
    pub(crate) const fn new() -> Self {
        Dirty(None)
    }

    /// Every slot.
    pub(crate) const fn all() -> Self {
        Dirty(Some((0, usize::MAX)))
    }

    fn add(&mut self, lo: usize, hi: usize) {
        self.0 = Some(match self.0 {
            None => (lo, hi),
            Some((a, b)) => (a.min(lo), b.max(hi)),
        });
    }
}

/// Compact once `len` exceeds this and tombstones outnumber live slots.
pub(crate) const COMPACT_MIN: usize = 16;

impl<T> Table<T> {
    crate::sync::const_fn_unless_loom! {
        pub(crate) fn new() -> Self {
            Table {
                array: AtomicPtr::new(ptr::null_mut()),
                len: AtomicUsize::new(0),
                live: AtomicUsize::new(0),
            }
        }
    }

    /// The array's slots, or none. Readers and the writer.
    #[inline]
    fn slots(&self) -> &[Slot<T>] {
        // Acquire: pairs with the Release store in `grow`, so the array a
        // reader loads is initialized (even a stale reader's, which then
        // fails validation but must not read uninitialized memory).
        let a = self.array.load(Ordering::Acquire);
        // SAFETY: `array` is null or points to an array that lives as long
        // as the index (arrays are freed only in `free`, which needs
        // `&mut` of the index's owner).
        unsafe { a.as_ref() }.map_or(&[], |a| &a.slots)
    }

    /// Binary search for `id` over the used prefix. Never out of bounds,
    /// whatever a torn read gives (the length is clamped to the array's).
    #[inline]
    fn position(&self, id: u64) -> Result<usize, usize> {
        let slots = self.slots();
        // Relaxed: validated by the latch (readers) or under the lock.
        let len = self.len.load(Ordering::Relaxed).min(slots.len());
        slots[..len].binary_search_by_key(&id, |s| s.id.load(Ordering::Relaxed))
    }

    /// The record of `id`: null if unknown or removed. For readers, the
    /// answer is meaningful only once the latch validated it.
    #[inline]
    pub(crate) fn find(&self, id: u64) -> *mut Record<T> {
        match self.position(id) {
            // Relaxed: validated by the latch, like every word read here.
            Ok(i) => self.slots()[i].record.load(Ordering::Relaxed),
            Err(_) => ptr::null_mut(),
        }
    }

    /// The module count.
    #[inline]
    pub(crate) fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// Every live record in id order (for a reader: validate afterwards).
    pub(crate) fn records(&self, mut visit: impl FnMut(*mut Record<T>)) {
        let slots = self.slots();
        let len = self.len.load(Ordering::Relaxed).min(slots.len());
        for s in &slots[..len] {
            let r = s.record.load(Ordering::Relaxed);
            if !r.is_null() {
                visit(r);
            }
        }
    }

    // ----- Writer-only (under the writer lock, while readers are steered
    // away from this table's copy: every store below is then either never
    // seen by a validating reader or caught by its re-check, `raw::latch`).

    /// An array with room for `need` slots, the used ones copied over.
    fn grow(&self, need: usize) {
        let old = self.array.load(Ordering::Relaxed);
        let len = self.len.load(Ordering::Relaxed);
        let cap = (need.max(8)).next_power_of_two();
        let slots: Box<[Slot<T>]> = (0..cap)
            .map(|i| {
                let (id, record) =
                    self.slots()
                        .get(i)
                        .filter(|_| i < len)
                        .map_or((0, ptr::null_mut()), |s| {
                            (
                                s.id.load(Ordering::Relaxed),
                                s.record.load(Ordering::Relaxed),
                            )
                        });
                Slot {
                    id: AtomicU64::new(id),
                    record: AtomicPtr::new(record),
                }
            })
            .collect();
        // SAFETY: `old` is null or came from `Box::into_raw` below, and is
        // owned by the table alone; it moves into the new array's `prev`.
        let prev = NonNull::new(old).map(|p| unsafe { Box::from_raw(p.as_ptr()) });
        let new = Box::into_raw(Box::new(Array { slots, _prev: prev }));
        // Release: pairs with the Acquire load in `slots`.
        self.array.store(new, Ordering::Release);
    }

    fn set_slot(&self, i: usize, id: u64, record: *mut Record<T>) {
        let s = &self.slots()[i];
        // Relaxed: see the section comment.
        s.id.store(id, Ordering::Relaxed);
        s.record.store(record, Ordering::Relaxed);
    }

    /// Appends `(id, record)`; `id` is above every id in the table.
    pub(crate) fn push(&self, id: u64, record: NonNull<Record<T>>, dirty: &mut Dirty) {
        let len = self.len.load(Ordering::Relaxed);
        if len == self.slots().len() {
            self.grow(len + 1);
        }
        self.set_slot(len, id, record.as_ptr());
        self.len.store(len + 1, Ordering::Relaxed);
        self.live.store(self.live() + 1, Ordering::Relaxed);
        dirty.add(len, len + 1);
    }

    /// Points the live slot of `id` at `record`.
    pub(crate) fn set(&self, id: u64, record: NonNull<Record<T>>, dirty: &mut Dirty) {
        let i = self.position(id).expect("set of a registered id");
        self.set_slot(i, id, record.as_ptr());
        dirty.add(i, i + 1);
    }

    /// Tombstones the live slot of `id`, compacting if tombstones dominate.
    pub(crate) fn remove(&self, id: u64, dirty: &mut Dirty) {
        let i = self.position(id).expect("remove of a registered id");
        self.set_slot(i, id, ptr::null_mut());
        let live = self.live() - 1;
        self.live.store(live, Ordering::Relaxed);
        dirty.add(i, i + 1);
        let len = self.len.load(Ordering::Relaxed);
        if len > COMPACT_MIN && live * 2 < len {
            let slots = self.slots();
            let mut to = 0;
            for (from, s) in slots[..len].iter().enumerate() {
                let r = s.record.load(Ordering::Relaxed);
                if !r.is_null() {
                    if to != from {
                        self.set_slot(to, s.id.load(Ordering::Relaxed), r);
                    }
                    to += 1;
                }
            }
            self.len.store(live, Ordering::Relaxed);
            dirty.add(0, live);
        }
    }

    /// Makes this table equal to `src` on the slots in `dirty` (and in
    /// length and count), given that they were equal elsewhere.
    pub(crate) fn sync_from(&self, src: &Table<T>, dirty: Dirty) {
        let len = src.len.load(Ordering::Relaxed);
        if let Some((lo, hi)) = dirty.0 {
            let hi = hi.min(len);
            if hi > self.slots().len() {
                self.grow(hi);
            }
            for (i, s) in src.slots().iter().enumerate().take(hi).skip(lo) {
                self.set_slot(
                    i,
                    s.id.load(Ordering::Relaxed),
                    s.record.load(Ordering::Relaxed),
                );
            }
        }
        self.len.store(len, Ordering::Relaxed);
        self.live.store(src.live(), Ordering::Relaxed);
    }

    /// `(id, record)` of every used slot, for the invariant checker.
    pub(crate) fn dump(&self) -> Vec<(u64, *mut Record<T>)> {
        let len = self.len.load(Ordering::Relaxed);
        self.slots()[..len]
            .iter()
            .map(|s| {
                (
                    s.id.load(Ordering::Relaxed),
                    s.record.load(Ordering::Relaxed),
                )
            })
            .collect()
    }

    /// Frees the arrays (not the records).
    pub(crate) fn free(&mut self) {
        let a = self.array.load(Ordering::Relaxed);
        self.array.store(ptr::null_mut(), Ordering::Relaxed);
        self.len.store(0, Ordering::Relaxed);
        if let Some(a) = NonNull::new(a) {
            // SAFETY: `a` came from `Box::into_raw` in `grow`; `&mut self`:
            // no reader is left.
            drop(unsafe { Box::from_raw(a.as_ptr()) });
        }
    }
}
