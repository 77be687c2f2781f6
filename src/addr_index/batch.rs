//! Every write of the address index: one transaction each, through
//! [`IndexBatch`].
//!
//! # No user code under the writer lock
//!
//! The single-call writes (`insert_module`, `remove`, `set_value`) collect
//! and validate their input before taking the lock and run only this
//! module's code under it; no write pins an epoch under it either (pinning
//! may run deferred destructors). No `T` is dropped under the lock on any
//! path:
//!
//! * a rejected value goes back to the caller in an [`InsertError`];
//! * a record taken out by a committed transaction (remove, set_value) is
//!   moved out of the writer state once it left both copies (the `release`
//!   hook, after the second flip) into the index's limbo
//!   (`reclaim::Limbo`), which hands it out once its grace period passed, to
//!   be dropped by a later write after its lock is released (`Reclaiming`);
//! * a record made by a transaction that rolls back goes the same way (no
//!   reader ever validated a read of it, but the limbo is the one place
//!   that drops outside the lock, also while unwinding);
//! * the closure's own handles (`Removed`, `Arc`s returned by `set_value`)
//!   are clones: the index's reference outlives them until after the lock.

use super::error::{AddrIndexError, InsertError};
use super::garbage::Garbage;
use super::index::{AddrIndex, Ending, Node, Writer};
use super::layout;
use super::module::Removed;
use super::queries::raw_hit;
use super::record::Record;
use super::slab::Fields;
use super::table::{self, Dirty};
use super::types::{ModuleId, ModuleMeta, RawHit, Segment, Segments};
use crate::raw::{Dir, Slot, Txn};
use crate::reclaim::{JobSlot, WriterScope};
use crate::sync::Ordering;
use core::cell::Cell;
use core::fmt;
use core::ops::Range;
use core::ptr::NonNull;
use std::sync::Arc;

/// The handle a [`write`](AddrIndex::write) batch works through: every
/// write of [`AddrIndex`], plus reads of the version being built
/// (read-your-writes). Nothing of the batch is visible to readers before the
/// closure returns; then all of it is, at once.
///
/// A rejected operation returns its error (and value) to the closure and
/// changes nothing; the batch goes on. A panicking closure rolls the whole
/// batch back.
///
/// ```
/// use latchtree::AddrIndex;
/// let index = AddrIndex::new();
/// let old = index.insert(0x1000..0x2000, "v1").unwrap();
/// let new = index.write(|batch| {
///     let removed = batch.remove(old).unwrap();
///     assert_eq!(**removed.value(), "v1");
///     assert!(!batch.contains(old));
///     let rejected = batch.insert(0x1800..0x1900, "x");
///     assert!(rejected.is_ok(), "the old range is already free in the batch");
///     let _ = batch.remove(rejected.unwrap());
///     let new = batch.insert(0x1000..0x2000, "v2").unwrap();
///     assert_eq!(batch.get(new), Some(&"v2"));
///     assert_eq!((batch.module_count(), batch.range_count()), (1, 1));
///     assert_eq!(batch.lookup(0x1800).map(|h| h.id()), Some(new));
///     new
/// });
/// assert_eq!(index.lookup(0x1800).map(|h| h.id()), Some(new));
/// assert_eq!(index.stats().writes, 2, "one transaction for the batch");
/// ```
///
/// What a batch's reads borrow cannot leave the batch (a value removed by a
/// later write may be freed once the batch is over):
///
/// ```compile_fail
/// let index = latchtree::AddrIndex::new();
/// let escaped = index.write(|b| {
///     let id = b.insert(0..10, String::from("m")).unwrap();
///     b.get(id)
/// });
/// ```
pub struct IndexBatch<'b, T> {
    index: &'b AddrIndex<T>,
    txn: Txn<'b, Node<T>>,
    w: &'b mut Writer<T>,
}

impl<T> fmt::Debug for IndexBatch<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IndexBatch")
            .field("modules", &self.module_count())
            .field("ranges", &self.range_count())
            .finish()
    }
}

/// Checks one range's shape.
fn validate(r: &Range<u64>) -> Result<(), AddrIndexError> {
    if r.start == r.end {
        Err(AddrIndexError::EmptyRange(r.clone()))
    } else if r.start > r.end {
        Err(AddrIndexError::InvertedRange(r.clone()))
    } else {
        Ok(())
    }
}

/// A module's segments, validated on their own and sorted: what the lock
/// need not see.
fn prepare<S: Into<Segment>>(
    ranges: impl IntoIterator<Item = S>,
) -> Result<Segments, AddrIndexError> {
    let mut it = ranges.into_iter().map(Into::into);
    let first = it.next().ok_or(AddrIndexError::NoRanges)?;
    let Some(second) = it.next() else {
        validate(&first.range)?;
        return Ok(Segments::One(first));
    };
    let mut segs: Vec<Segment> = [first, second].into_iter().chain(it).collect();
    for s in &segs {
        validate(&s.range)?;
    }
    segs.sort_unstable_by_key(|s| s.range.start);
    for w in segs.windows(2) {
        if w[0].range.end > w[1].range.start {
            return Err(AddrIndexError::SelfOverlap(
                w[0].range.clone(),
                w[1].range.clone(),
            ));
        }
    }
    Ok(Segments::Many(segs.into_boxed_slice()))
}

impl<T> IndexBatch<'_, T> {
    /// The record of `id` in the version being built.
    fn record(&self, id: ModuleId) -> Option<NonNull<Record<T>>> {
        NonNull::new(self.index.tables[0].find(id.0))
    }

    /// The node holding the range that starts at `start`, in copy 0.
    fn node_at(&self, start: u64) -> NonNull<Node<T>> {
        let slot = self.txn.find(|n| {
            // Relaxed: writer-only reads under the lock.
            let s = n.start.load(Ordering::Relaxed);
            (start != s).then_some(Dir::toward(start > s))
        });
        let Slot::Occupied(node) = slot else {
            unreachable!("a live module's range is indexed")
        };
        node
    }

    /// Where a range `r` would be linked in copy 0, or the lowest registered
    /// range it overlaps. One descent by start: the last node it turns right
    /// at is `r`'s predecessor (the only lower range that can overlap it),
    /// the last it turns left at its successor (the lowest higher one).
    fn place(&self, r: &Range<u64>) -> Result<Slot<Node<T>>, RawHit> {
        let (mut pred, mut succ) = (None, None);
        let slot = self.txn.find(|n| {
            // Relaxed: writer-only reads under the lock.
            let right = r.start >= n.start.load(Ordering::Relaxed);
            let n = core::ptr::from_ref(n);
            if right {
                pred = Some(n)
            } else {
                succ = Some(n)
            }
            Some(Dir::toward(right))
        });
        // SAFETY: nodes of copy 0, live under the lock.
        let hit = |n: *const Node<T>| raw_hit(unsafe { &*n });
        match (pred.map(hit), succ.map(hit)) {
            (Some(p), _) if p.end > r.start => Err(p),
            (_, Some(s)) if s.start < r.end => Err(s),
            _ => Ok(slot),
        }
    }

    /// Links a node for segment `s` of `rec` at `slot` (`txn.begin()` done).
    fn link(&mut self, rec: NonNull<Record<T>>, s: &Segment, slot: Slot<Node<T>>) {
        // SAFETY: made by this batch, owned by the index.
        let node = self.w.slab.alloc(fields(unsafe { rec.as_ref() }, s));
        // SAFETY: `node` is a free slab node (in no copy) that stays
        // allocated as long as the index; `slot` is vacant and fresh.
        unsafe { self.txn.insert(node, slot) };
    }

    /// `insert_module_with` on validated segments.
    fn insert_prepared(
        &mut self,
        segments: Segments,
        value: T,
        meta: ModuleMeta,
    ) -> Result<ModuleId, InsertError<T>> {
        // Against the version being built, before changing anything; in
        // address order, so the lowest new range that overlaps is reported.
        let mut slot = None;
        for s in segments.iter() {
            match self.place(&s.range) {
                Ok(found) => slot = Some(found),
                Err(hit) => {
                    let error = AddrIndexError::Overlap {
                        range: s.range.clone(),
                        existing: hit.range(),
                        module: hit.id,
                    };
                    return Err(InsertError::new(error, value));
                }
            }
        }
        let id = self.w.next_id;
        self.w.next_id += 1;
        let base = meta.base.unwrap_or(segments[0].range.start);
        let rec = Record::boxed(id, Arc::new(value), segments, base, meta.tag);
        self.w.created.push(rec);
        // Flip before rewriting anything readers may stand on (recycled
        // nodes, table 0): see slab.rs.
        self.txn.begin();
        self.index.tables[0].push(id, rec, &mut self.w.dirty);
        // SAFETY: made just above, owned by the index.
        let segments = &unsafe { rec.as_ref() }.segments;
        match &**segments {
            // The slot found by the check is still fresh: nothing changed
            // the tree since.
            [s] => self.link(rec, s, slot.expect("one segment was placed")),
            many => {
                for s in many {
                    let slot = self.place(&s.range).expect("checked above");
                    self.link(rec, s, slot);
                }
            }
        }
        Ok(ModuleId(id))
    }

    /// [`AddrIndex::insert`], inside the batch.
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// let id = index.write(|b| b.insert(0..10, 'a')).unwrap();
    /// assert_eq!(index.lookup(5).unwrap().id(), id);
    /// ```
    pub fn insert(&mut self, range: Range<u64>, value: T) -> Result<ModuleId, InsertError<T>> {
        self.insert_module_with([range], value, ModuleMeta::default())
    }

    /// [`AddrIndex::insert_module`], inside the batch.
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// let id = index.write(|b| b.insert_module([0..10, 20..30], 'a')).unwrap();
    /// assert_eq!(index.lookup(25).unwrap().id(), id);
    /// ```
    pub fn insert_module<S: Into<Segment>>(
        &mut self,
        ranges: impl IntoIterator<Item = S>,
        value: T,
    ) -> Result<ModuleId, InsertError<T>> {
        self.insert_module_with(ranges, value, ModuleMeta::default())
    }

    /// [`AddrIndex::insert_module_with`], inside the batch.
    ///
    /// ```
    /// use latchtree::{AddrIndex, ModuleMeta};
    /// let index = AddrIndex::new();
    /// let meta = ModuleMeta { base: Some(0), tag: 1 };
    /// index.write(|b| b.insert_module_with([0x10..0x20], 'a', meta)).unwrap();
    /// assert_eq!(index.lookup(0x15).unwrap().module_offset(0x15), 0x15);
    /// ```
    pub fn insert_module_with<S: Into<Segment>>(
        &mut self,
        ranges: impl IntoIterator<Item = S>,
        value: T,
        meta: ModuleMeta,
    ) -> Result<ModuleId, InsertError<T>> {
        match prepare(ranges) {
            Ok(segments) => self.insert_prepared(segments, value, meta),
            Err(e) => Err(InsertError::new(e, value)),
        }
    }

    /// [`AddrIndex::remove`], inside the batch.
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// let id = index.insert(0..10, 'a').unwrap();
    /// let removed = index.write(|b| b.remove(id)).unwrap();
    /// assert_eq!(**removed.value(), 'a');
    /// ```
    pub fn remove(&mut self, id: ModuleId) -> Option<Removed<T>> {
        let rec = self.record(id)?;
        // SAFETY: a live record of the version being built.
        let r = unsafe { rec.as_ref() };
        self.txn.begin();
        self.index.tables[0].remove(id.0, &mut self.w.dirty);
        for s in r.segments.iter() {
            let node = self.node_at(s.range.start);
            // SAFETY: `node` came from `find` just now.
            unsafe { self.txn.erase(node) };
        }
        self.w.retired.push(rec);
        Some(Removed::of(r))
    }

    /// [`AddrIndex::set_value`], inside the batch.
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// let id = index.insert(0..10, 'a').unwrap();
    /// let old = index.write(|b| b.set_value(id, 'b', 7)).unwrap();
    /// assert_eq!((**old.value(), old.tag()), ('a', 0));
    /// assert_eq!(index.lookup(5).unwrap().tag(), 7);
    /// ```
    pub fn set_value(
        &mut self,
        id: ModuleId,
        value: T,
        tag: u64,
    ) -> Result<Removed<T>, InsertError<T>> {
        let Some(old) = self.record(id) else {
            return Err(InsertError::new(AddrIndexError::UnknownModule(id), value));
        };
        // SAFETY: a live record of the version being built.
        let o = unsafe { old.as_ref() };
        let rec = Record::boxed(id.0, Arc::new(value), o.segments.clone(), o.base, tag);
        self.w.created.push(rec);
        self.txn.begin();
        self.index.tables[0].set(id.0, rec, &mut self.w.dirty);
        // SAFETY: made just above, owned by the index.
        let r = unsafe { rec.as_ref() };
        for s in r.segments.iter() {
            let old_node = self.node_at(s.range.start);
            let node = self.w.slab.alloc(fields(r, s));
            // SAFETY: `old_node` came from `find` just now; `node` is a free
            // slab node, in no copy, allocated as long as the index.
            unsafe { self.txn.replace(old_node, node) };
        }
        self.w.retired.push(old);
        Ok(Removed::of(o))
    }

    /// The end of every batch that returned: the rebuild its writes made
    /// due, if any, done now (see [`reshape`](IndexBatch::reshape)), so
    /// that the commit has none left to do.
    fn settle(&mut self) {
        if self.txn.rebuild_due() {
            self.reshape();
        }
    }

    /// Rebuilds the version being built into the balanced shape: a tree of
    /// at least [`LAYOUT_MIN`](layout::LAYOUT_MIN) nodes into fresh memory in
    /// van Emde Boas order (`layout.rs`), a smaller one in place.
    fn reshape(&mut self) {
        if self.txn.balanced() {
            return;
        }
        if self.txn.len() >= layout::LAYOUT_MIN {
            layout::relocate(&mut self.txn, &mut self.w.slab);
        } else {
            self.txn.rebuild();
        }
    }

    /// The value of module `id` in the version being built.
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// index.write(|b| {
    ///     let id = b.insert(0..10, 'a').unwrap();
    ///     assert_eq!(b.get(id), Some(&'a'));
    /// });
    /// ```
    pub fn get(&self, id: ModuleId) -> Option<&T> {
        // SAFETY: records of the version being built live at least until the transaction ends (they
        // are retired after it), and `&self` borrows the batch.
        self.record(id).map(|r| &*unsafe { r.as_ref() }.value)
    }

    /// Whether module `id` is registered in the version being built (see
    /// the example on [`IndexBatch`]).
    pub fn contains(&self, id: ModuleId) -> bool {
        self.record(id).is_some()
    }

    /// The ranges of module `id` in the version being built.
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// index.write(|b| {
    ///     let id = b.insert_module([20..30, 0..10], ()).unwrap();
    ///     assert_eq!(b.ranges_of(id), Some(vec![0..10, 20..30]));
    /// });
    /// ```
    pub fn ranges_of(&self, id: ModuleId) -> Option<Vec<Range<u64>>> {
        self.record(id).map(|r| {
            // SAFETY: as in `get`.
            unsafe { r.as_ref() }
                .segments
                .iter()
                .map(|s| s.range.clone())
                .collect()
        })
    }

    /// The module count of the version being built (see the example on
    /// [`IndexBatch`]).
    pub fn module_count(&self) -> usize {
        self.index.tables[0].live()
    }

    /// The range count of the version being built (see the example on
    /// [`IndexBatch`]).
    pub fn range_count(&self) -> usize {
        self.txn.len()
    }

    /// [`AddrIndex::lookup`] in the version being built (see the example on
    /// [`IndexBatch`]).
    pub fn lookup(&self, addr: u64) -> Option<RawHit> {
        let mut cand = None;
        self.txn.find(|n| {
            // Relaxed: writer-only reads under the lock.
            let right = addr >= n.start.load(Ordering::Relaxed);
            if right {
                cand = Some(raw_hit(n));
            }
            Some(Dir::toward(right))
        });
        cand.filter(|h| addr < h.end)
    }
}

/// The node fields of segment `s` of record `r`.
fn fields<T>(r: &Record<T>, s: &Segment) -> Fields<Record<T>> {
    Fields {
        start: s.range.start,
        end: s.range.end,
        id: r.id,
        base: r.base,
        tag: r.tag,
        flags: s.flags,
        module: core::ptr::from_ref(r).cast_mut(),
    }
}

/// After a write's lock: what the limbo handed out as due, and its job
/// (dropped after the writer lock is released, also while unwinding).
struct Reclaiming<'a, T: 'static> {
    index: &'a AddrIndex<T>,
    due: Vec<Garbage<T>>,
    job: JobSlot,
}

impl<T: 'static> Drop for Reclaiming<'_, T> {
    fn drop(&mut self) {
        for g in self.due.drain(..) {
            // SAFETY: handed out by the limbo once, its grace period passed.
            unsafe { g.free() };
        }
        if let Some(job) = self.job.take() {
            job.run(&self.index.reclaim);
        }
    }
}

impl<T: 'static> AddrIndex<T> {
    /// Runs `body` as a transaction, with the limbo's part of it: hands out
    /// what became due (and takes the tables' replaced arrays in) before
    /// `body`, retires the records the transaction released after its last
    /// flip, and once the writer lock is released drops what was due and
    /// runs the limbo's job ([`Reclaiming`]). Also returns whether anything
    /// was due.
    fn transact<R>(
        &self,
        body: impl for<'b> FnOnce(&'b mut Txn<'b, Node<T>>, &'b mut Writer<T>, &Cell<Ending>) -> R,
    ) -> (R, bool) {
        // Dropped after the scope below ends, so after the writer lock is
        // released, also when unwinding.
        let mut reclaiming = Reclaiming {
            index: self,
            due: Vec::new(),
            job: JobSlot::default(),
        };
        let r = {
            // From before the lock until after it: a deferred destructor that
            // a pin inside the body (a guarded read in a batch) would run
            // under the lock is postponed until the scope ends
            // (`reclaim::WriterScope`).
            let _scope = WriterScope::enter();
            let end = Cell::new(Ending::Rollback);
            let Reclaiming { due, job, .. } = &mut reclaiming;
            // The body and the release hook share the job through the cell.
            let job = &*job;
            self.tree.write(
                |txn, w| {
                    job.with(|j| {
                        // Sections are polled only for items the epoch
                        // already let go (never under loom, where it keeps
                        // everything: the models stay as small as before).
                        let waiting = w.limbo.epoch_due();
                        let period = w.limbo.next_period();
                        let sections = w.clock.poll(&self.sections, period, waiting);
                        w.limbo.begin(sections, |g| due.push(g), j);
                        for t in &self.tables {
                            t.take_replaced(|a| w.limbo.retire(Garbage::Array(a), j));
                        }
                    });
                    body(txn, w, &end)
                },
                |copy, first, last| self.publish(copy, first, last, end.get()),
                |w, node| {
                    w.slab.recycle(node);
                    // Out of both copies (after a commit: the taken-out
                    // records; after a rollback: the records made). `release`
                    // runs after the last flip, once per released node: the
                    // first call takes them all.
                    let records = match end.get() {
                        Ending::Commit(_) => &mut w.retired,
                        Ending::Rollback => &mut w.created,
                    };
                    if !records.is_empty() {
                        job.with(|j| {
                            for rec in records.drain(..) {
                                w.limbo.retire(Garbage::Record(rec), j);
                            }
                        });
                    }
                },
            )
        };
        (r, !reclaiming.due.is_empty())
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
        self.transact(|txn, w, end| {
            w.dirty = Dirty::new();
            w.created.clear();
            w.retired.clear();
            let mut batch = IndexBatch {
                index: self,
                txn: txn.reborrow(),
                w,
            };
            let r = f(&mut batch);
            batch.settle();
            let w = batch.w;
            end.set(Ending::Commit(w.dirty));
            // Committed: the records made are the index's for good.
            w.created.clear();
            r
        })
        .0
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
    /// drops everything.
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
        crate::reclaim::flush_limbo(&self.reclaim, || {
            // A write that changes nothing (no flip, not counted).
            let ((job, left), freed) =
                self.transact(|_, w, _| (w.limbo.job(true), !w.limbo.is_empty()));
            crate::reclaim::FlushRound { job, left, freed }
        });
    }

    /// Waits until the index has let go of every value removed or replaced
    /// before the call: until every [`HandlerSection`](crate::HandlerSection)
    /// open on another thread when it was removed has closed, and every
    /// guard pinned before the call is dropped; then drops them (as
    /// [`flush`](AddrIndex::flush) does). For a caller that must know, e.g.
    /// before unmapping the code a removed module described. Writes never
    /// wait like this; this is the one call that blocks on readers.
    ///
    /// # Deadlocks
    /// Never returns while this thread holds a guard or has a section open,
    /// or while another thread keeps one for good; never call it from a
    /// signal handler or inside a [`write`](AddrIndex::write) closure.
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
        let (before, _) = self.transact(|_, w, _| w.limbo.next_period());
        loop {
            self.flush();
            let (oldest, _) = self.transact(|_, w, _| w.limbo.oldest());
            if oldest.is_none_or(|p| p >= before) {
                return;
            }
            std::thread::yield_now();
        }
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
    /// old places held is reused by later writes, never returned while the
    /// index lives). An index already in that shape (no insert or remove
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
    /// assert_eq!((**old.value(), old.tag()), ("baseline", 0));
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

    #[doc(hidden)]
    /// Checks every structural invariant; for tests. Call it at rest.
    pub fn check_invariants(&self) -> Result<(), String> {
        // All of it under the writer lock: the tables and records it reads
        // (with no guard) are stable and live only there.
        self.tree.check_then(
            |a, b| {
                // Relaxed: under the writer lock.
                a.end.load(Ordering::Relaxed) <= b.start.load(Ordering::Relaxed)
                    && a.start.load(Ordering::Relaxed) < a.end.load(Ordering::Relaxed)
            },
            || self.check_tables(),
        )
    }

    /// The checks of `check_invariants` beyond the tree's; writer lock held.
    fn check_tables(&self) -> Result<(), String> {
        let snap = self.raw_snapshot();
        let want = snap
            .first()
            .zip(snap.last())
            .map(|(f, l)| f.0.start..l.0.end);
        if self.bounds() != want {
            return Err(format!("bounds {:?}, ranges span {want:?}", self.bounds()));
        }
        let tables = [self.tables[0].dump(), self.tables[1].dump()];
        if tables[0] != tables[1] || self.tables[0].live() != self.tables[1].live() {
            return Err("the two module tables differ".into());
        }
        if !tables[0].windows(2).all(|w| w[0].0 < w[1].0) {
            return Err("module table not sorted by id".into());
        }
        let live: Vec<_> = tables[0].iter().filter(|(_, r)| !r.is_null()).collect();
        if live.len() != self.tables[0].live() {
            return Err("module count disagrees with the table".into());
        }
        let cap = [self.tables[0].capacity(), self.tables[1].capacity()];
        if cap[0] != cap[1] || cap[0] > 4 * table::capacity(tables[0].len()) {
            return Err(format!(
                "table capacities {cap:?} for {} used slots",
                tables[0].len()
            ));
        }
        let tombstones = tables[0].len() - live.len();
        if tombstones > live.len().max(table::COMPACT_MIN) {
            return Err(format!(
                "{tombstones} tombstones for {} modules: not compacted",
                live.len()
            ));
        }
        let mut owned = 0;
        for &&(id, rec) in &live {
            // Under the writer lock, with no transaction running, the records in table 0 are owned
            // by the index and not retired (records are retired only once out of both tables).
            // SAFETY: so `rec` points to a live record.
            let r = unsafe { &*rec };
            if r.id != id {
                return Err(format!("slot {id} holds the record of #{}", r.id));
            }
            for s in r.segments.iter() {
                owned += 1;
                let ok = snap.iter().any(|(h, m)| {
                    *m == rec
                        && h.range() == s.range
                        && (h.id.0, h.base, h.tag, h.flags) == (id, r.base, r.tag, s.flags)
                });
                if !ok {
                    return Err(format!(
                        "module #{id} owns {:?}, which is not indexed as such",
                        s.range
                    ));
                }
            }
        }
        if owned != snap.len() {
            return Err("some indexed range belongs to no registered module".into());
        }
        Ok(())
    }
}
