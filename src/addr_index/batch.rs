//! The batch handle, [`IndexBatch`]: every write of the address index as
//! an operation inside the one transaction a [`write`](AddrIndex::write)
//! runs, plus reads of the version being built. How a write runs around
//! it (the lock, the limbo) is `write.rs`'s.

use super::error::{AddrIndexError, InsertError};
use super::index::{AddrIndex, Writer};
use super::module::Removed;
use super::record::Record;
use super::slab::Fields;
use super::slab::Node;
use super::table;
use super::types::{ModuleId, ModuleMeta, RawHit, Segment, Segments};
use crate::raw::{Dir, Slot, Txn};
use crate::sync::Ordering;
use alloc::vec::Vec;
use core::fmt;
use core::ops::Range;
use core::ptr::NonNull;

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
///     assert_eq!(*removed, "v1");
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
    pub(super) index: &'b AddrIndex<T>,
    pub(super) txn: Txn<'b, Node<T>>,
    pub(super) w: &'b mut Writer<T>,
    /// Removals for the index's kept store (`kept.rs`), if it keeps any:
    /// they enter it when the batch commits.
    pub(super) kept: Option<Vec<Removed<T>>>,
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
#[inline]
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
pub(super) fn prepare<S: Into<Segment>>(
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
        // A local, which the loop keeps in a register (read through `r`, it
        // was reloaded at every step: 330 more instructions an insert of an
        // ascending growth to 65 536).
        let start = r.start;
        let slot = self.txn.find(|n| {
            // Relaxed: writer-only reads under the lock.
            let right = start >= n.start.load(Ordering::Relaxed);
            let n = core::ptr::from_ref(n);
            if right {
                pred = Some(n)
            } else {
                succ = Some(n)
            }
            Some(Dir::toward(right))
        });
        // SAFETY: nodes of copy 0, live under the lock.
        let hit = |n: *const Node<T>| unsafe { &*n }.hit();
        match (pred.map(hit), succ.map(hit)) {
            (Some(p), _) if p.end > r.start => Err(p),
            (_, Some(s)) if s.start < r.end => Err(s),
            _ => Ok(slot),
        }
    }

    /// Links a node for segment `s` of `rec` at `slot` (`txn.begin()` done).
    #[inline]
    fn link(&mut self, rec: NonNull<Record<T>>, s: &Segment, slot: Slot<Node<T>>) {
        // SAFETY: made by this batch, owned by the index.
        let node = self.w.slab.alloc(fields(unsafe { rec.as_ref() }, s));
        // SAFETY: `node` is a free slab node (in no copy) that stays
        // allocated as long as the index; `slot` is vacant and fresh.
        unsafe { self.txn.insert(node, slot) };
    }

    /// `insert_module_with` on validated segments.
    pub(super) fn insert_prepared(
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
        let rec = self.w.make_record(id, value, segments, base, meta.tag);
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
    /// assert_eq!(*removed, 'a');
    /// ```
    #[inline]
    pub fn remove(&mut self, id: ModuleId) -> Option<Removed<T>> {
        let (slot, rec) = self.index.tables[0].locate(id.0)?;
        // SAFETY: a live record of the version being built.
        let r = unsafe { rec.as_ref() };
        self.txn.begin();
        self.index.tables[0].remove_at(slot, &mut self.w.dirty);
        for s in r.segments.iter() {
            let node = self.node_at(s.range.start);
            // SAFETY: `node` came from `find` just now.
            unsafe { self.txn.erase(node) };
        }
        self.w.retired.push(rec);
        if self.index.kept.keeps() {
            self.kept.get_or_insert_with(Vec::new).push(Removed::of(r));
        }
        Some(Removed::of(r))
    }

    /// [`AddrIndex::set_value`], inside the batch.
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// let id = index.insert(0..10, 'a').unwrap();
    /// let old = index.write(|b| b.set_value(id, 'b', 7)).unwrap();
    /// assert_eq!((*old, old.tag()), ('a', 0));
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
        let rec = self
            .w
            .make_record(id.0, value, o.segments.clone(), o.base, tag);
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
    /// due, if any, started, and a slice of the one running done
    /// (`layout.rs`), so that the commit has none left to do.
    pub(super) fn settle(&mut self) {
        let w = &mut *self.w;
        w.layout.settle(&mut self.txn, &mut w.slab);
        // A slice of the module table's compaction, in a write that flipped
        // (as the layout's): a slice's worth of slots (at least a unit's,
        // so that it ends whatever the policy), and two for each one the
        // write appended, so that compaction outpaces any growth.
        let table = &self.index.tables[0];
        if self.txn.started() && table.compacting() {
            let slots = (w.layout.policy().slice.max(1))
                .saturating_mul(table::SLOTS_PER_UNIT)
                .saturating_add(w.dirty.pushed().saturating_mul(2));
            table.compact_step(slots, &mut w.dirty);
        }
    }

    /// A bounded slice of the layout work writes do a slice at a time, and
    /// of giving memory back (`Layout::finish`): whether another write has
    /// more to do, and the most such writes the slab's size can call for
    /// (`Layout::finish_writes`).
    pub(super) fn finish_layout(&mut self) -> (bool, usize) {
        let w = &mut *self.w;
        let more = w.layout.finish(&mut self.txn, &mut w.slab);
        // The module table's compaction goes on in `settle`, in a write
        // that flipped: this one. (A step reads at least 8 slots; a table
        // holds about twice the most modules the index held, each with a
        // range node of the slab, whose size bounds `finish_writes`: its
        // 4 × (16 + 17 nodes / 8 units) writes cover the compaction.)
        let compacting = self.index.tables[0].compacting();
        if compacting {
            self.txn.begin();
        }
        (more || compacting, w.layout.finish_writes(&w.slab))
    }

    /// Rebuilds the version being built into the balanced shape now: a tree
    /// of at least `LayoutPolicy::layout_min` nodes into fresh
    /// memory in van Emde Boas order (`layout.rs`), a smaller one in place.
    pub(super) fn reshape(&mut self) {
        let w = &mut *self.w;
        w.layout.rebalance(&mut self.txn, &mut w.slab);
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
                cand = Some(n.hit());
            }
            Some(Dir::toward(right))
        });
        cand.filter(|h| addr < h.end)
    }
}

/// The node fields of segment `s` of record `r`.
fn fields<T>(r: &Record<T>, s: &Segment) -> Fields<Record<T>> {
    Fields {
        hit: RawHit {
            start: s.range.start,
            end: s.range.end,
            id: ModuleId(r.id),
            base: r.base,
            tag: r.tag,
            flags: s.flags,
        },
        module: core::ptr::from_ref(r).cast_mut(),
    }
}
