//! Every write of the address index: one transaction each, through
//! [`IndexBatch`].
//!
//! # No user code under the writer lock
//!
//! The single-call writes (`insert_module`, `remove`, `set_value`) collect
//! and validate their input before taking the lock and run only the index's
//! own code under it (here and in `batch.rs`); no write pins an epoch under
//! it either (pinning may run deferred destructors). No `T` is dropped
//! under the lock on any path:
//!
//! * a rejected value goes back to the caller in an [`InsertError`];
//! * a record taken out by a committed transaction (remove, set_value) is
//!   moved out of the writer state once it left both copies (the `release`
//!   hook, after the second flip) and retired into reclamation's limbo
//!   (`crate::reclaim`), which hands it out once its grace period passed, to
//!   be dropped by a later write after its lock is released;
//! * a record made by a transaction that rolls back goes the same way (no
//!   reader ever validated a read of it, but the limbo is the one place
//!   that drops outside the lock, also while unwinding);
//! * the closure's own handles (`Removed`, `Arc`s returned by `set_value`)
//!   are clones: the index's reference outlives them until after the lock.

use super::batch::{IndexBatch, prepare};
use super::error::InsertError;
use super::garbage::Garbage;
use super::index::{AddrIndex, Ending, Writer};
use super::kept::drop_after_write;
use super::module::Removed;
use super::slab::Node;
use super::table::Dirty;
use super::types::{ModuleId, ModuleMeta, Segment};
use crate::raw::{Hooks, Txn};
use crate::reclaim::{Front, Pending, Reclaim, Transaction};
use core::cell::Cell;
use core::ops::Range;
use core::ptr::NonNull;

/// The capacity the writer's lists of created and retired records keep
/// between writes.
const RECORDS_KEPT: usize = 16;

impl<T: 'static> AddrIndex<T> {
    /// Runs `body` as a transaction of the index, with reclamation's part
    /// of it (`reclaim::Reclaim::transact`): what became due (past the
    /// epoch's and the handler sections' grace periods) is handed out
    /// before `body` and dropped after the lock; the tables' replaced
    /// segments, and the records the transaction released after its last
    /// flip, are retired.
    pub(super) fn transact<R>(
        &self,
        body: impl for<'b> FnOnce(&'b mut Txn<'b, Node<T>>, &'b mut Writer<T>, &Cell<Ending>) -> R,
    ) -> R {
        self.reclaim.transact(|tx| {
            let hooks = IndexHooks {
                index: self,
                tx,
                end: Cell::new(Ending::Rollback),
            };
            self.tree.write(&hooks, |txn, w| {
                tx.begin(&mut w.pending, Some(&self.sections));
                for t in &self.tables {
                    t.take_replaced(|a| tx.retire(&mut w.pending, Garbage::Array(a)));
                }
                body(txn, w, &hooks.end)
            })
        })
    }
}

/// What a write of the index does where the tree hands control back: the
/// bounds and module table of each copy, and what leaves the tree.
struct IndexHooks<'a, T: 'static> {
    index: &'a AddrIndex<T>,
    tx: &'a Transaction<'a, Garbage<T>>,
    /// How the body ended (set by it before it returns).
    end: Cell<Ending>,
}

impl<T: 'static> Hooks<Node<T>, Writer<T>> for IndexHooks<'_, T> {
    fn publish(&self, copy: usize, first: Option<&Node<T>>, last: Option<&Node<T>>) {
        self.index.publish(copy, first, last, self.end.get());
    }

    fn release(&self, w: &mut Writer<T>, node: NonNull<Node<T>>) {
        w.slab.recycle(node);
        // Out of both copies (after a commit: the taken-out records; after a
        // rollback: the records made). `release` runs after the last flip,
        // once per released node: the first call takes them all.
        let records = match self.end.get() {
            Ending::Commit(_) => &mut w.retired,
            Ending::Rollback => &mut w.created,
        };
        for rec in records.drain(..) {
            self.tx.retire(&mut w.pending, Garbage::Record(rec));
        }
    }
}

impl<T: 'static> Front for AddrIndex<T> {
    type Garbage = Garbage<T>;

    fn reclaim(&self) -> &Reclaim<Garbage<T>> {
        &self.reclaim
    }

    fn empty_write<R>(&self, f: impl FnOnce(&mut Pending<Garbage<T>>) -> R) -> R {
        // A write that changes nothing (no flip, not counted).
        self.transact(|_, w, _| f(&mut w.pending))
    }
}

impl<T: Send + Sync + 'static> AddrIndex<T> {
    /// Runs `f` as one transaction: readers see all of its writes or none of
    /// them, at the cost of one pair of flips. An operation the batch
    /// rejects returns its error to `f` and changes nothing; if `f` panics,
    /// every write it made is rolled back and the panic resumes.
    ///
    /// `f` runs under the index's writer lock: it must not write to this
    /// index other than through the batch (that panics), should not block,
    /// and should read through the batch rather than pin a guard (a
    /// thread's outermost pin may run deferred destructors of removed
    /// values, which would then run under the lock).
    ///
    /// ```
    /// use latchtree::AddrIndex;
    /// let index = AddrIndex::new();
    /// // Apply a `dl_iterate_phdr` diff in one version.
    /// let gone = index.insert(0x1000..0x2000, "libold.so").unwrap();
    /// let new = index.write(|batch| {
    ///     batch.remove(gone);
    ///     batch.insert(0x5000..0x6000, "libnew.so").unwrap()
    /// });
    /// assert_eq!(index.lookup(0x5800).map(|h| h.id()), Some(new));
    ///
    /// // A panicking batch changes nothing.
    /// let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
    ///     index.write(|batch| {
    ///         batch.remove(new);
    ///         panic!("abort the batch");
    ///     })
    /// }));
    /// assert!(r.is_err());
    /// assert_eq!(index.lookup(0x5800).map(|h| h.id()), Some(new));
    /// ```
    pub fn write<R>(&self, f: impl FnOnce(&mut IndexBatch<'_, T>) -> R) -> R {
        // What the kept store lets go of, if it keeps any (`kept.rs`).
        let mut evicted = None;
        let r = self.transact(|txn, w, end| {
            w.dirty = Dirty::new();
            // Cleared, and past a large batch given back down to a small
            // capacity (writes of one module never grow them past it).
            for records in [&mut w.created, &mut w.retired] {
                records.clear();
                records.shrink_to(RECORDS_KEPT);
            }
            let mut batch = IndexBatch {
                index: self,
                txn: txn.reborrow(),
                w,
                kept: None,
            };
            let r = f(&mut batch);
            batch.settle();
            // Kept removals enter the store before the flips that take
            // the modules out (`kept.rs`).
            if let Some(removed) = batch.kept.take() {
                evicted = Some(self.kept.commit(removed));
            }
            let w = batch.w;
            end.set(Ending::Commit(w.dirty));
            // Committed: the records made are the index's for good.
            w.created.clear();
            r
        });
        if let Some(evicted) = evicted {
            drop_after_write(evicted);
        }
        r
    }

    /// Drops what earlier writes removed (the index's reference to each
    /// removed or replaced value) and no reader can see any more, working
    /// the epoch until nothing is left or it stops advancing: a guard held
    /// on any thread (this one's included), or a
    /// [`HandlerSection`](crate::HandlerSection) still open, keeps what it
    /// may see. Writes do this work themselves, a little at a time (see
    /// [when a removed value is
    /// dropped](AddrIndex#when-a-removed-value-is-dropped)). Cheap when
    /// nothing waits. When no guard is held and no section is open, one call
    /// drops everything, also with up to 3,968 bags of other code's garbage
    /// queued in crossbeam's collector ahead of it (past that, a call may
    /// return with values still held: [`synchronize`](AddrIndex::synchronize)
    /// keeps going). A value that another thread's write took out of the
    /// index just before may still be being dropped over there when this
    /// returns; `synchronize` waits for that too.
    ///
    /// # Panics
    /// If called inside a [`write`](AddrIndex::write) of this index.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let index = latchtree::AddrIndex::new();
    /// let value = Arc::new(5);
    /// let id = index.insert(0..10, Arc::clone(&value)).unwrap();
    /// drop(index.remove(id)); // the caller's reference
    /// assert_eq!(Arc::strong_count(&value), 2, "the index's reference waits");
    /// index.flush();
    /// assert_eq!(Arc::strong_count(&value), 1, "the index let go of its value");
    /// ```
    pub fn flush(&self) {
        crate::reclaim::flush(self);
    }

    /// Waits until the index has let go of every value removed or replaced
    /// before the call, and its reference's drop has finished, on whichever
    /// thread ran it (another thread's write may be running it: this waits
    /// for that too). It waits for the readers that could still see such a
    /// value: the guards pinned and the
    /// [`HandlerSection`](crate::HandlerSection)s open (on another thread)
    /// when it was removed; then drops what is left (as
    /// [`flush`](AddrIndex::flush) does). For a caller that must know, e.g.
    /// before unmapping the code a removed module described. Writes never
    /// wait like this; this is the one call that blocks on readers.
    ///
    /// It is not a general barrier: a guard pinned, or a section opened,
    /// after the removal cannot see the value, and may or may not be waited
    /// for (crossbeam's epoch and the sections' drains move in steps). Nor
    /// does it wait for other references to the value (a [`Removed`] you
    /// keep, clones of the `Arc`).
    ///
    /// # Deadlocks
    /// Never returns while this thread holds a guard or has a section open
    /// from before a removal it waits for, or while another thread keeps
    /// one for good, or while a removed value's `Drop` on another thread
    /// (or the outer write whose closure put that drop off) does not end; never call it from a signal handler or inside a
    /// [`write`](AddrIndex::write) closure. On a thread that is itself
    /// running (or, inside another write's closure, has put off) drops a
    /// write handed out, such as in a removed value's `Drop`, it does not
    /// wait for the drops in flight on other threads (its own are among
    /// them).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// let index = latchtree::AddrIndex::new();
    /// let table = Arc::new([0u8; 64]);
    /// let id = index.insert(0..10, Arc::clone(&table)).unwrap();
    /// let closed = AtomicBool::new(false);
    /// std::thread::scope(|s| {
    ///     let section = index.handler_section(); // e.g. a handler on this thread…
    ///     assert_eq!(section.lookup(5).map(|h| h.value().len()), Some(64));
    ///     s.spawn(|| {
    ///         drop(index.remove(id));
    ///         index.synchronize(); // …which it waits for
    ///         assert!(closed.load(Ordering::SeqCst));
    ///         assert_eq!(Arc::strong_count(&table), 1, "the index let go");
    ///     });
    ///     std::thread::sleep(std::time::Duration::from_millis(10));
    ///     closed.store(true, Ordering::SeqCst);
    ///     drop(section);
    /// });
    /// ```
    pub fn synchronize(&self) {
        // The layout work writes do a slice at a time, finished, a bounded
        // slice a write (`Layout::finish`) so that none holds the lock long:
        // a tree being moved, trees a move replaced, a defragmentation of a
        // sparse slab (`layout/`); each needs one more write to give back
        // what it replaced. At most as many writes as the slab's size can
        // call for, so that writes on other threads that keep making more
        // work cannot keep this from returning.
        let (mut more, mut left) = self.write(|b| b.finish_layout());
        while more && left > 0 {
            // Lets a writer waiting for the lock have it between two slices.
            crate::sync::let_waiters_in();
            more = self.write(|b| b.finish_layout()).0;
            left -= 1;
        }
        crate::reclaim::synchronize(self);
    }

    /// Waits until the drops that writes (on any thread) took out of the
    /// limbo before the call have run: what was removed before and is no
    /// longer waiting is then gone (`reclaim::wait_for_drops`). Never waits
    /// for a reader. (For `LoadedObjects`.)
    #[cfg(all(feature = "objects", target_os = "linux", target_pointer_width = "64"))]
    pub(crate) fn wait_for_drops(&self) {
        crate::reclaim::wait_for_drops(self);
    }

    /// Relinks the index's ranges into a perfectly balanced tree now, as one
    /// more write (readers that overlap it retry, as with any write).
    /// Writes already do this on their own once an insert lands two levels
    /// below the balanced height (at most every `n / 8` inserts and
    /// removes), so a caller needs it only to give lookups the balanced
    /// shape at once, e.g. after a burst of loads. Lookups in a freshly
    /// balanced index take a fixed number of steps (its height), with no
    /// loop exit to mispredict. From 4096 ranges up, every rebuild also
    /// moves the ranges into fresh memory in van Emde Boas order, so that a
    /// lookup touches a few pages rather than one per level (the memory the
    /// old places held is reused by later writes, or its pages purged: see
    /// [memory](AddrIndex#memory)). Writes spread that work over many of them, a slice
    /// each, so that none takes long; this call does all of it in its one
    /// write (tens of milliseconds at 262 144 ranges), for the exact shape
    /// at once. An index already in that shape (no insert or remove
    /// since its last rebuild) is left alone: no write happens.
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// for i in 0..10u64 {
    ///     index.insert(i * 0x1000..i * 0x1000 + 0x800, i).unwrap();
    /// }
    /// index.rebalance();
    /// assert_eq!(index.lookup(0x3400).map(|h| h.range()), Some(0x3000..0x3800));
    /// let writes = index.stats().writes;
    /// index.rebalance(); // already balanced
    /// assert_eq!(index.stats().writes, writes);
    /// ```
    pub fn rebalance(&self) {
        self.write(|batch| batch.reshape());
    }

    /// Registers one range for a new module (base: the range's start, tag:
    /// 0). See [`insert_module_with`](AddrIndex::insert_module_with).
    ///
    /// ```
    /// use latchtree::{AddrIndex, AddrIndexError};
    /// let index = AddrIndex::new();
    /// assert!(index.insert(0x1000..0x2000, "a").is_ok());
    /// let err = index.insert(5..5, "b").unwrap_err();
    /// assert_eq!(err.into_parts(), (AddrIndexError::EmptyRange(5..5), "b"));
    /// ```
    pub fn insert(&self, range: Range<u64>, value: T) -> Result<ModuleId, InsertError<T>> {
        self.insert_module_with([range], value, ModuleMeta::default())
    }

    /// Registers a new module owning several ranges (text, data, rodata…),
    /// with the default [`ModuleMeta`]. See
    /// [`insert_module_with`](AddrIndex::insert_module_with).
    ///
    /// ```
    /// use latchtree::{AddrIndex, AddrIndexError};
    /// let index = AddrIndex::new();
    /// let id = index.insert_module([0x2000..0x3000, 0x1000..0x2000], "m").unwrap();
    /// assert_eq!(index.lookup(0x1fff).unwrap().id(), id);
    /// let err = index.insert_module([0x5000..0x6000, 0x5800..0x5900], "n").unwrap_err();
    /// assert_eq!(*err.error(), AddrIndexError::SelfOverlap(0x5000..0x6000, 0x5800..0x5900));
    /// assert_eq!(index.module_count(), 1);
    /// ```
    pub fn insert_module<S: Into<Segment>>(
        &self,
        ranges: impl IntoIterator<Item = S>,
        value: T,
    ) -> Result<ModuleId, InsertError<T>> {
        self.insert_module_with(ranges, value, ModuleMeta::default())
    }

    /// Registers a new module owning `ranges` (plain ranges or
    /// [`Segment`]s with flags), with base and tag, atomically: a reader
    /// sees all of it or none. Ranges may be given in any order; adjacent
    /// ranges (`a.end == b.start`) are fine.
    ///
    /// On error nothing changes and `value` comes back in the error.
    ///
    /// ```
    /// use latchtree::{AddrIndex, ModuleMeta, Segment};
    /// let index = AddrIndex::new();
    /// let ranges = [Segment { range: 0x40_1000..0x40_2000, flags: 5 }, Segment::from(0x40_3000..0x40_3100)];
    /// let id = index
    ///     .insert_module_with(ranges, "a.out", ModuleMeta { base: Some(0x40_0000), tag: 1 })
    ///     .unwrap();
    /// let hit = index.lookup(0x40_1010).unwrap();
    /// assert_eq!((hit.id(), hit.module_offset(0x40_1010), hit.tag(), hit.flags()), (id, 0x1010, 1, 5));
    /// ```
    pub fn insert_module_with<S: Into<Segment>>(
        &self,
        ranges: impl IntoIterator<Item = S>,
        value: T,
        meta: ModuleMeta,
    ) -> Result<ModuleId, InsertError<T>> {
        // The caller's iterator runs here, before the lock.
        let segments = match prepare(ranges) {
            Ok(s) => s,
            Err(e) => return Err(InsertError::new(e, value)),
        };
        self.write(|b| b.insert_prepared(segments, value, meta))
    }

    /// Removes module `id` and all its ranges, atomically, and hands back
    /// everything the index knew of it. `None` if `id` is unknown or was
    /// already removed. See [when a removed value is
    /// dropped](AddrIndex#when-a-removed-value-is-dropped).
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// let id = index.insert_module([0..10, 20..30], "m").unwrap();
    /// let removed = index.remove(id).unwrap();
    /// assert_eq!(removed.ranges().collect::<Vec<_>>(), [0..10, 20..30]);
    /// assert!(index.remove(id).is_none());
    /// assert!(index.lookup(25).is_none());
    /// ```
    pub fn remove(&self, id: ModuleId) -> Option<Removed<T>> {
        self.write(|b| b.remove(id))
    }

    /// Replaces the value and tag of live module `id` atomically, keeping
    /// its id, ranges and base; returns what it replaced (the old value and
    /// tag, as a [`Removed`]). A concurrent
    /// [`lookup`](AddrIndex::lookup) or [`module_address`](AddrIndex::module_address)
    /// sees the old module or the new one (value and tag together), never a
    /// miss and never a mix. An unknown id gives the new value back in the
    /// error.
    ///
    /// ```
    /// use latchtree::{AddrIndex, AddrIndexError, ModuleId};
    /// let index = AddrIndex::new();
    /// let id = index.insert(0..10, "baseline").unwrap();
    /// let old = index.set_value(id, "optimized", 2).unwrap();
    /// assert_eq!((*old, old.tag()), ("baseline", 0));
    /// let guard = index.pin();
    /// let hit = index.module_address(5, &guard).unwrap();
    /// assert_eq!((hit.id(), *hit.value(), hit.tag()), (id, "optimized", 2));
    /// let err = index.set_value(ModuleId::from_raw(9), "x", 0).unwrap_err();
    /// assert_eq!(err.into_parts(), (AddrIndexError::UnknownModule(ModuleId::from_raw(9)), "x"));
    /// ```
    pub fn set_value(
        &self,
        id: ModuleId,
        value: T,
        tag: u64,
    ) -> Result<Removed<T>, InsertError<T>> {
        self.write(|b| b.set_value(id, value, tag))
    }
}
