//! The per-copy module table.
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
//! Every slot word and the length are atomics. An array is never resized
//! in place: growing (and shrinking, when a compaction leaves it mostly
//! empty) publishes a new array, and the replaced one, which pinned readers
//! may still be reading, is queued on the table's *replaced* list (under the
//! lock) and moved into the index's limbo by the next write
//! ([`Table::take_replaced`]), which frees it once its grace period passed,
//! like a record. No `Box` or `&mut` is ever made again for
//! a published array: readers hold `&Array` to it. Only pinned readers,
//! handler sections (`HandlerSection::get`: the sections' grace period
//! covers arrays like records) and the writer read arrays; the signal-safe
//! `lookup` and `module_count` read none. Readers bound every probe by the array's own length, which is
//! immutable, so a torn `(array, len)` pair cannot take them out of bounds.
//! Both tables have the same capacity after every transaction, at most four
//! times what the used slots need.

use super::record::Record;
use crate::sync::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;
use core::ptr::{self, NonNull};

/// One `(id, record)` entry; `record` null: a tombstone.
struct Slot<T> {
    id: AtomicU64,
    record: AtomicPtr<Record<T>>,
}

/// A table's array. `slots` is never resized; `replaced_next` links the
/// table's list of replaced arrays (writer-only).
pub(crate) struct Array<T> {
    slots: Box<[Slot<T>]>,
    replaced_next: AtomicPtr<Array<T>>,
}

/// One copy's module table; see the module docs.
pub(crate) struct Table<T> {
    array: AtomicPtr<Array<T>>,
    /// Slots in use (live and tombstones), a prefix of the array.
    len: AtomicUsize,
    /// Live slots: the module count.
    live: AtomicUsize,
    /// Arrays this table stopped publishing, not yet retired: a push-only
    /// list (pushed under the writer lock, taken whole after it).
    replaced: AtomicPtr<Array<T>>,
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

/// The capacity an array gets for `need` slots.
pub(crate) fn capacity(need: usize) -> usize {
    need.max(8).next_power_of_two()
}

/// The `(id, record)` of a slot.
fn load<T>(s: &Slot<T>) -> (u64, *mut Record<T>) {
    // Relaxed: validated by the latch (readers) or under the lock.
    (
        s.id.load(Ordering::Relaxed),
        s.record.load(Ordering::Relaxed),
    )
}

impl<T> Table<T> {
    crate::sync::const_fn_unless_loom! {
        pub(crate) fn new() -> Self {
            Table {
                array: AtomicPtr::new(ptr::null_mut()),
                len: AtomicUsize::new(0),
                live: AtomicUsize::new(0),
                replaced: AtomicPtr::new(ptr::null_mut()),
            }
        }
    }

    /// The array's slots, or none. Pinned readers, handler sections and the
    /// writer.
    #[inline]
    fn slots(&self) -> &[Slot<T>] {
        // Acquire: pairs with the Release swap in `replace_array`, so the
        // array a reader loads is initialized (even a stale reader's, which
        // then fails validation but must not read uninitialized memory).
        let a = self.array.load(Ordering::Acquire);
        // The writer (under the lock) only reads the published array; a
        // replaced array goes to the limbo (`take_replaced`), which frees it
        // after its grace period, so it outlives every guard pinned while it
        // could still be loaded here; the index's drop (`free`) needs
        // `&mut`; no `&mut` or `Box` to a published array is made again.
        // SAFETY: so `array` is null or points to an array that stays
        // allocated, and may be shared, while the caller may use it.
        unsafe { a.as_ref() }.map_or(&[], |a| &a.slots)
    }

    /// Binary search for `id` over the used prefix of `slots` (this
    /// table's). Never out of bounds, whatever a torn read gives (the
    /// length is clamped to the array's).
    #[inline]
    fn position(&self, slots: &[Slot<T>], id: u64) -> Result<usize, usize> {
        // Relaxed: validated by the latch (readers) or under the lock.
        let len = self.len.load(Ordering::Relaxed).min(slots.len());
        slots[..len].binary_search_by_key(&id, |s| s.id.load(Ordering::Relaxed))
    }

    /// The record of `id`: null if unknown or removed. For readers, the
    /// answer is meaningful only once the latch validated it.
    #[inline]
    pub(crate) fn find(&self, id: u64) -> *mut Record<T> {
        let slots = self.slots();
        match self.position(slots, id) {
            // Relaxed: validated by the latch, like every word read here.
            Ok(i) => slots[i].record.load(Ordering::Relaxed),
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

    /// Publishes a fresh array of `cap` slots, the first ones from `used`,
    /// and queues the one it replaces for retirement.
    fn replace_array(&self, cap: usize, used: impl IntoIterator<Item = (u64, *mut Record<T>)>) {
        let mut used = used.into_iter();
        let slots: Box<[Slot<T>]> = (0..cap)
            .map(|_| {
                let (id, record) = used.next().unwrap_or((0, ptr::null_mut()));
                Slot {
                    id: AtomicU64::new(id),
                    record: AtomicPtr::new(record),
                }
            })
            .collect();
        let new = Box::into_raw(Box::new(Array {
            slots,
            replaced_next: AtomicPtr::new(ptr::null_mut()),
        }));
        // Release: pairs with the Acquire load in `slots`.
        let old = self.array.swap(new, Ordering::Release);
        let Some(old) = NonNull::new(old) else {
            return;
        };
        // Push-only list (no ABA: nothing is popped singly).
        let mut head = self.replaced.load(Ordering::Relaxed);
        loop {
            // `old` came from `Box::into_raw` here and is no longer published; only this list
            // refers to it now, and its `replaced_next` is read only by whoever takes the list.
            // SAFETY: so `old` is live and only this list refers to it.
            unsafe { old.as_ref() }
                .replaced_next
                .store(head, Ordering::Relaxed);
            // Release: pairs with the Acquire swap in `take_replaced`,
            // which then sees `replaced_next` and the unpublishing swap.
            match self.replaced.compare_exchange_weak(
                head,
                old.as_ptr(),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }

    /// An array with room for `need` slots, the used ones copied over.
    fn grow(&self, need: usize) {
        let slots = self.slots();
        let len = self.len.load(Ordering::Relaxed).min(slots.len());
        self.replace_array(capacity(need), slots[..len].iter().map(load));
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
        let i = self
            .position(self.slots(), id)
            .expect("set of a registered id");
        self.set_slot(i, id, record.as_ptr());
        dirty.add(i, i + 1);
    }

    /// The slot and record of live module `id`, if any (writer-only: for
    /// [`remove_at`](Table::remove_at) without a second search).
    pub(crate) fn locate(&self, id: u64) -> Option<(usize, NonNull<Record<T>>)> {
        let slots = self.slots();
        let i = self.position(slots, id).ok()?;
        NonNull::new(load(&slots[i]).1).map(|r| (i, r))
    }

    /// Tombstones live slot `i` (from [`locate`](Table::locate), nothing
    /// changed since), compacting if tombstones dominate (into a smaller
    /// array if the live slots fill less than a quarter).
    pub(crate) fn remove_at(&self, i: usize, dirty: &mut Dirty) {
        let slots = self.slots();
        let (id, _) = load(&slots[i]);
        self.set_slot(i, id, ptr::null_mut());
        let live = self.live() - 1;
        self.live.store(live, Ordering::Relaxed);
        dirty.add(i, i + 1);
        let len = self.len.load(Ordering::Relaxed);
        if len > COMPACT_MIN && live * 2 < len {
            let kept = slots[..len].iter().map(load).filter(|s| !s.1.is_null());
            if slots.len() >= 4 * capacity(live) {
                self.replace_array(2 * capacity(live), kept);
            } else {
                for (to, (id, r)) in kept.enumerate() {
                    self.set_slot(to, id, r);
                }
            }
            self.len.store(live, Ordering::Relaxed);
            dirty.add(0, live);
        }
    }

    /// Makes this table equal to `src` on the slots in `dirty` (and in
    /// length, count and capacity), given that they were equal elsewhere.
    pub(crate) fn sync_from(&self, src: &Table<T>, dirty: Dirty) {
        let len = src.len.load(Ordering::Relaxed);
        let cap = src.slots().len();
        if self.slots().len() != cap {
            // The slots below `len` outside `dirty` are equal; the rest is
            // unused.
            let slots = self.slots();
            self.replace_array(cap, slots.iter().take(len).map(load));
        }
        if let Some((lo, hi)) = dirty.0 {
            let (from, to) = (src.slots(), self.slots());
            let hi = hi.min(len).min(from.len()).min(to.len());
            for (s, d) in from[lo.min(hi)..hi].iter().zip(&to[lo.min(hi)..hi]) {
                let (id, r) = load(s);
                // Relaxed: see the section comment.
                d.id.store(id, Ordering::Relaxed);
                d.record.store(r, Ordering::Relaxed);
            }
        }
        self.len.store(len, Ordering::Relaxed);
        self.live.store(src.live(), Ordering::Relaxed);
    }

    /// Whether arrays wait in the replaced list. A hint, for skipping
    /// [`take_replaced`](Table::take_replaced) cheaply.
    #[inline]
    pub(crate) fn has_replaced(&self) -> bool {
        // Relaxed: a hint; `take_replaced` synchronizes.
        !self.replaced.load(Ordering::Relaxed).is_null()
    }

    /// Hands every array in the replaced list to `retire` (under the
    /// writer lock, for the limbo: readers may still be reading them).
    pub(crate) fn take_replaced(&self, mut retire: impl FnMut(NonNull<Array<T>>)) {
        if !self.has_replaced() {
            return;
        }
        // Acquire: pairs with the Release CAS in `replace_array` (both are
        // under the writer lock today; the list stays safe to take anywhere).
        let mut next = self.replaced.swap(ptr::null_mut(), Ordering::Acquire);
        while let Some(a) = NonNull::new(next) {
            // SAFETY: taking the list made this thread its only owner; the
            // array is still allocated (handed on below, once).
            next = unsafe { a.as_ref() }.replaced_next.load(Ordering::Relaxed);
            retire(a);
        }
    }

    /// `(id, record)` of every used slot, for the invariant checker.
    pub(crate) fn dump(&self) -> Vec<(u64, *mut Record<T>)> {
        let slots = self.slots();
        let len = self.len.load(Ordering::Relaxed).min(slots.len());
        slots[..len].iter().map(load).collect()
    }

    /// The array's capacity, for the invariant checker.
    pub(crate) fn capacity(&self) -> usize {
        self.slots().len()
    }

    /// Drops the tombstones and moves the live slots into an array of the
    /// capacity a table of them needs (none if empty), freeing the old
    /// arrays (not the records) at once: `&mut self`, no reader is left.
    pub(crate) fn shrink_to_fit(&mut self) {
        let live: Vec<_> = self.dump().into_iter().filter(|s| !s.1.is_null()).collect();
        self.free();
        let n = live.len();
        if n > 0 {
            self.replace_array(capacity(n), live);
        }
        self.len.store(n, Ordering::Relaxed);
        self.live.store(n, Ordering::Relaxed);
    }

    /// Frees the arrays (not the records).
    pub(crate) fn free(&mut self) {
        let published = self.array.swap(ptr::null_mut(), Ordering::Relaxed);
        let mut next = self.replaced.swap(ptr::null_mut(), Ordering::Relaxed);
        self.len.store(0, Ordering::Relaxed);
        let mut arrays = vec![published];
        while let Some(a) = NonNull::new(next) {
            arrays.push(a.as_ptr());
            // SAFETY: `&mut self`: the list is this table's alone.
            next = unsafe { a.as_ref() }.replaced_next.load(Ordering::Relaxed);
        }
        for a in arrays.into_iter().filter_map(NonNull::new) {
            // SAFETY: each came from `Box::into_raw` in `replace_array` and
            // is in the table once; `&mut self`: no reader is left.
            drop(unsafe { Box::from_raw(a.as_ptr()) });
        }
    }
}
