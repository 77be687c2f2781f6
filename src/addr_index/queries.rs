//! Every read of the address index. Each answer comes from one validated
//! version (one latch read): ranges, records and counts always agree.

use super::index::AddrIndex;
use super::module::ModuleRef;
use super::record::Record;
use super::slab::Node;
use super::types::{Hit, ModuleId, RawHit};
use crate::raw::{Dir, View};
use crate::sync::Ordering;
use alloc::vec::Vec;
use core::ops::Range;
use crossbeam_epoch::Guard;

/// A range node's fields and its module record, copied out before
/// validation: what guarded reads and handler sections take from a hit.
#[inline(always)]
pub(super) fn hit_and_record<T>(n: &Node<T>) -> (RawHit, *mut Record<T>) {
    let f = n.fields();
    (f.hit, f.module)
}

/// One step of the search for the range containing `addr`, at `n`: keeps
/// in `cand` the last node that starts at or below `addr` (the only range
/// that can contain it) and goes on toward it, without a branch.
#[inline(always)]
fn range_step<'a, T>(addr: u64, n: &'a Node<T>, cand: &mut Option<&'a Node<T>>) -> Dir {
    // Relaxed: see `RangeNode::hit`.
    let right = addr >= n.start.load(Ordering::Relaxed);
    *cand = if right { Some(n) } else { *cand };
    Dir::toward(right)
}

/// What `out` copies out of the search's candidate (its fields, and what
/// else the read takes: `hit_and_record`), if its range contains `addr`:
/// it starts at or below `addr` (`range_step`), so only the end copied out
/// is left to check. Each word is read once, and only those `out` reads (a
/// `lookup` never loads the record pointer).
#[inline(always)]
fn containing<'a, T, E>(
    cand: Option<&'a Node<T>>,
    addr: u64,
    out: impl FnOnce(&'a Node<T>) -> (RawHit, E),
) -> Option<(RawHit, E)> {
    cand.map(out).filter(|(h, _)| addr < h.end)
}

impl<T> AddrIndex<T> {
    /// Finds the node that may hold `addr` in a stable copy: the one with
    /// the greatest start at or below it (`Some(None)`: none, or `addr`
    /// lies outside the copy's bounds). `None`: the walk broke its bound.
    #[inline(always)]
    fn candidate<'a>(&'a self, view: View<'a, Node<T>>, addr: u64) -> Option<Option<&'a Node<T>>> {
        let b = &self.bounds[view.copy()].0;
        // Relaxed: validated by the latch like every other word read here.
        if addr < b[0].load(Ordering::Relaxed) || addr >= b[1].load(Ordering::Relaxed) {
            return Some(None);
        }
        // Branch-free descent to a leaf, keeping the last node that starts
        // at or below `addr`: the only range that can contain it.
        // Relaxed: see `RangeNode::hit`.
        view.search_by_key(|n| n.start.load(Ordering::Relaxed), |s| addr >= s)
    }

    /// Finds the range containing `addr` in a stable copy and copies its
    /// fields and record out, before validation. `Some(None)`: no such
    /// range.
    #[inline(always)]
    pub(super) fn find<'a>(
        &'a self,
        view: View<'a, Node<T>>,
        addr: u64,
    ) -> Option<Option<(RawHit, *mut Record<T>)>> {
        let cand = self.candidate(view, addr)?;
        // Read the candidate's fields before validation, like every field.
        Some(containing(cand, addr, hit_and_record))
    }

    /// The range containing `addr`, with its module's id, base, tag and the
    /// range's flags, by value. **Async-signal-safe**: no lock, no epoch
    /// pin, no thread-local, no allocation, no free; it never waits for a
    /// writer, not even one it interrupted on the same thread.
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// let id = index.insert(100..200, ()).unwrap();
    /// assert_eq!(index.lookup(150).map(|h| h.id()), Some(id));
    /// assert_eq!(index.lookup(200), None);
    /// ```
    #[inline]
    pub fn lookup(&self, addr: u64) -> Option<RawHit> {
        // Read the candidate's fields before validation, like every field.
        let cand = |view| {
            Some(containing(self.candidate(view, addr)?, addr, |n| {
                (n.hit(), ())
            }))
        };
        self.read(cand).map(|(hit, ())| hit)
    }

    /// [`lookup`](AddrIndex::lookup) of `K` addresses at once, all answered
    /// from one version of the index. The `K` descents run in lockstep, so
    /// the CPU overlaps their cache misses: symbolizing a stack or a buffer
    /// of samples costs less per address than one `lookup` after another
    /// (8 is a good `K`). **Async-signal-safe**, like `lookup`: no lock, no
    /// pin, no thread-local, no allocation; everything lives on the stack.
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// let a = index.insert(0x1000..0x2000, ()).unwrap();
    /// let b = index.insert(0x3000..0x4000, ()).unwrap();
    /// let hits = index.lookup_many([0x1800, 0x2800, 0x3000, 0]);
    /// let ids: Vec<_> = hits.iter().map(|h| h.map(|h| h.id())).collect();
    /// assert_eq!(ids, [Some(a), None, Some(b), None]);
    /// ```
    #[inline]
    pub fn lookup_many<const K: usize>(&self, addrs: [u64; K]) -> [Option<RawHit>; K] {
        self.read(|view| Self::find_many(view, addrs, |n| (n.hit(), ())))
            .map(|h| h.map(|(hit, ())| hit))
    }

    /// The `K` descents of `lookup_many` in a stable copy; `out` copies each
    /// hit's fields out (and what else the read takes, as in `containing`),
    /// before validation.
    #[inline(always)]
    pub(super) fn find_many<'a, E, const K: usize>(
        view: View<'a, Node<T>>,
        addrs: [u64; K],
        out: impl Fn(&'a Node<T>) -> (RawHit, E),
    ) -> Option<[Option<(RawHit, E)>; K]> {
        let mut cand: [Option<&Node<T>>; K] = [None; K];
        view.descend_lanes::<K>(|lane, n| range_step(addrs[lane], n, &mut cand[lane]))?;
        // Read the candidates' fields before validation, like every field.
        Some(core::array::from_fn(|lane| {
            containing(cand[lane], addrs[lane], &out)
        }))
    }

    /// Pins this index's collector: the guard every guarded read of this
    /// index takes (for an index built with `new()`, the same as
    /// [`latchtree::pin()`](crate::pin)).
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// let id = index.insert(0..10, 'x').unwrap();
    /// assert_eq!(index.get(id, &index.pin()), Some(&'x'));
    /// ```
    #[must_use = "a guard protects only while it is held"]
    pub fn pin(&self) -> Guard {
        self.reclaim.pin()
    }

    /// Panics unless `guard` pins the default collector; dereferences a
    /// validated record pointer.
    ///
    /// # Safety
    /// `record` was read, in a read the latch validated, from a range node
    /// or table slot of a stable copy, after `guard` was pinned.
    unsafe fn record<'g>(&'g self, record: *mut Record<T>, _guard: &'g Guard) -> &'g Record<T> {
        // The record was linked in a stable copy for the whole read; records
        // are retired through the epoch only after they left both copies
        // (write.rs), and the guard was pinned before the read.
        // SAFETY: so it is live and immutable for as long as `guard`.
        unsafe { &*record }
    }

    /// The range containing `addr`, with everything [`lookup`](AddrIndex::lookup)
    /// gives and the module's value, borrowed for the guard's lifetime.
    ///
    /// # Panics
    /// If `guard` does not pin crossbeam-epoch's default collector (the one
    /// [`pin`](AddrIndex::pin) pins).
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// index.insert(0x1000..0x2000, String::from("libfoo.so")).unwrap();
    /// let guard = index.pin();
    /// let hit = index.module_address(0x1234, &guard).unwrap();
    /// assert_eq!(hit.value(), "libfoo.so");
    /// assert_eq!(hit.range(), 0x1000..0x2000);
    /// ```
    #[inline(always)]
    pub fn module_address<'g>(&'g self, addr: u64, guard: &'g Guard) -> Option<Hit<'g, T>> {
        self.reclaim.check_guard(guard);
        let (raw, record) = self.read(|view| self.find(view, addr))?;
        // SAFETY: validated by `read`, pinned before it.
        let record = unsafe { self.record(record, guard) };
        Some(Hit {
            raw,
            value: &*record.value,
        })
    }

    /// The record of `id` in a validated read, if registered.
    fn module_record<'g>(&'g self, id: ModuleId, guard: &'g Guard) -> Option<&'g Record<T>> {
        self.reclaim.check_guard(guard);
        let record = self.read(|view| Some(self.tables[view.copy()].find(id.0)));
        // SAFETY: validated by `read`, pinned before it; null: no module.
        (!record.is_null()).then(|| unsafe { self.record(record, guard) })
    }

    /// The value of module `id`, if it is registered.
    ///
    /// # Panics
    /// As [`module_address`](AddrIndex::module_address).
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// let id = index.insert(0..10, 'x').unwrap();
    /// assert_eq!(index.get(id, &index.pin()), Some(&'x'));
    /// ```
    pub fn get<'g>(&'g self, id: ModuleId, guard: &'g Guard) -> Option<&'g T> {
        self.module_record(id, guard).map(|r| &*r.value)
    }

    /// Module `id` with its value, segments, base and tag, if registered.
    ///
    /// # Panics
    /// As [`module_address`](AddrIndex::module_address).
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// let id = index.insert_module([0x20..0x30, 0x0..0x10], "m").unwrap();
    /// let guard = index.pin();
    /// let m = index.module(id, &guard).unwrap();
    /// assert_eq!((*m.value(), m.base()), ("m", 0x0));
    /// assert!(index.module(latchtree::ModuleId::from_raw(99), &guard).is_none());
    /// ```
    pub fn module<'g>(&'g self, id: ModuleId, guard: &'g Guard) -> Option<ModuleRef<'g, T>> {
        self.module_record(id, guard).map(|rec| ModuleRef { rec })
    }

    /// The ranges of module `id`, in address order, if it is registered.
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// let id = index.insert_module([50..60, 0..10], ()).unwrap();
    /// assert_eq!(index.ranges_of(id), Some(vec![0..10, 50..60]));
    /// ```
    pub fn ranges_of(&self, id: ModuleId) -> Option<Vec<Range<u64>>> {
        let guard = self.pin();
        self.module(id, &guard).map(|m| m.ranges().collect())
    }

    /// Every registered module, in id order, from one version of the index.
    ///
    /// # Panics
    /// As [`module_address`](AddrIndex::module_address).
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// let a = index.insert(0x50..0x60, "a").unwrap();
    /// let b = index.insert_module([0x10..0x20, 0x30..0x40], "b").unwrap();
    /// let guard = index.pin();
    /// let all: Vec<_> = index.modules(&guard).map(|m| (m.id(), *m.value(), m.ranges().len())).collect();
    /// assert_eq!(all, [(a, "a", 1), (b, "b", 2)]);
    /// ```
    pub fn modules<'g>(&'g self, guard: &'g Guard) -> impl Iterator<Item = ModuleRef<'g, T>> + 'g {
        self.reclaim.check_guard(guard);
        let records = self.read(|view| {
            let mut out = Vec::with_capacity(self.tables[view.copy()].live().min(1 << 16));
            self.tables[view.copy()].records(|r| out.push(r));
            Some(out)
        });
        records.into_iter().map(move |r| ModuleRef {
            // SAFETY: validated by `read`, pinned before it.
            rec: unsafe { self.record(r, guard) },
        })
    }

    /// Every range with its node fields and record, in address order, from
    /// one version; `keep` filters by range.
    fn collect(&self, keep: impl Fn(u64, u64) -> bool) -> Vec<(RawHit, *mut Record<T>)> {
        self.read(|view| {
            let mut out = Vec::new();
            view.walk(|n| {
                let (hit, record) = hit_and_record(n);
                if keep(hit.start, hit.end) {
                    out.push((hit, record));
                }
            })?;
            Some(out)
        })
    }

    /// [`snapshot`](AddrIndex::snapshot) without values.
    pub(crate) fn raw_snapshot(&self) -> Vec<(RawHit, *mut Record<T>)> {
        self.collect(|_, _| true)
    }

    /// Turns validated `(hit, record)` pairs into hits with values.
    fn with_values<'g>(
        &'g self,
        hits: Vec<(RawHit, *mut Record<T>)>,
        guard: &'g Guard,
    ) -> impl Iterator<Item = Hit<'g, T>> + 'g {
        hits.into_iter().map(move |(raw, r)| Hit {
            raw,
            // SAFETY: validated by `read`, pinned before it.
            value: &*unsafe { self.record(r, guard) }.value,
        })
    }

    /// Every range that intersects `range` (`[start, end)`), with its
    /// module, in address order, from one version of the index. An empty or
    /// inverted `range` intersects nothing.
    ///
    /// # Panics
    /// As [`module_address`](AddrIndex::module_address).
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// let a = index.insert_module([0x100..0x200, 0x400..0x500], "a").unwrap();
    /// let b = index.insert(0x200..0x300, "b").unwrap();
    /// let guard = index.pin();
    /// let hits: Vec<_> = index.overlapping(0x1ff..0x401, &guard).map(|h| (h.range(), h.id())).collect();
    /// assert_eq!(hits, [(0x100..0x200, a), (0x200..0x300, b), (0x400..0x500, a)]);
    /// assert_eq!(index.overlapping(0x300..0x400, &guard).count(), 0);
    /// ```
    pub fn overlapping<'g>(
        &'g self,
        range: Range<u64>,
        guard: &'g Guard,
    ) -> impl Iterator<Item = Hit<'g, T>> + 'g {
        self.reclaim.check_guard(guard);
        let hits = if range.start < range.end {
            self.collect(|s, e| s < range.end && range.start < e)
        } else {
            Vec::new()
        };
        self.with_values(hits, guard)
    }

    /// Every range with its module and value, in address order, from one
    /// consistent version of the index.
    ///
    /// # Panics
    /// As [`module_address`](AddrIndex::module_address).
    ///
    /// ```
    /// use latchtree::AddrIndex;
    /// let index = AddrIndex::new();
    /// let a = index.insert(10..20, 'a').unwrap();
    /// let b = index.insert(0..5, 'b').unwrap();
    /// let guard = index.pin();
    /// let all: Vec<_> = index.snapshot(&guard).iter().map(|h| (h.range(), h.id(), *h.value())).collect();
    /// assert_eq!(all, [(0..5, b, 'b'), (10..20, a, 'a')]);
    /// ```
    pub fn snapshot<'g>(&'g self, guard: &'g Guard) -> Vec<Hit<'g, T>> {
        self.reclaim.check_guard(guard);
        self.with_values(self.raw_snapshot(), guard).collect()
    }

    /// The lowest start to the highest end of all ranges, or `None` when
    /// empty. Async-signal-safe.
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// assert_eq!(index.bounds(), None);
    /// index.insert_module([0x10..0x20, 0x80..0x90], ()).unwrap();
    /// assert_eq!(index.bounds(), Some(0x10..0x90));
    /// ```
    pub fn bounds(&self) -> Option<Range<u64>> {
        self.read(|view| {
            let b = &self.bounds[view.copy()].0;
            // Relaxed: validated by the latch.
            let (lo, hi) = (b[0].load(Ordering::Relaxed), b[1].load(Ordering::Relaxed));
            Some((lo < hi).then_some(lo..hi))
        })
    }

    /// The number of ranges (of all modules). Async-signal-safe.
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// index.insert_module([0..1, 2..3], ()).unwrap();
    /// assert_eq!(index.range_count(), 2);
    /// ```
    pub fn range_count(&self) -> usize {
        self.tree.len()
    }

    /// Whether no module is registered. Async-signal-safe.
    ///
    /// ```
    /// assert!(latchtree::AddrIndex::<()>::new().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.range_count() == 0
    }

    /// The number of registered modules, from the same version as the
    /// ranges a concurrent [`lookup`](AddrIndex::lookup) sees.
    /// Async-signal-safe.
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// index.insert_module([0..1, 2..3], ()).unwrap();
    /// assert_eq!(index.module_count(), 1);
    /// ```
    pub fn module_count(&self) -> usize {
        self.read(|view| Some(self.tables[view.copy()].live()))
    }

    /// How much memory the index's range nodes take (see [`NodeMemory`]).
    /// Takes the writer lock for a moment (not for a signal handler).
    ///
    /// [`NodeMemory`]: crate::NodeMemory
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// index.insert(0..1, ()).unwrap();
    /// let m = index.node_memory();
    /// assert!(m.live_node_bytes > 0 && m.node_bytes >= m.live_node_bytes);
    /// ```
    pub fn node_memory(&self) -> crate::NodeMemory {
        self.tree.inspect(|txn, w| {
            let node = size_of::<Node<T>>();
            crate::NodeMemory {
                node_bytes: w.slab.nodes() * node,
                resident_node_bytes: w.slab.resident_nodes() * node,
                live_node_bytes: txn.len() * node,
            }
        })
    }

    /// Counters for observability: reads retried and writes done.
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// index.insert(0..1, ()).unwrap();
    /// assert_eq!(index.stats().writes, 1);
    /// ```
    pub fn stats(&self) -> crate::Stats {
        let (read_retries, writes) = self.tree.stats();
        crate::Stats {
            read_retries,
            writes,
        }
    }
}
