//! `AddrIndex<T>`: which module contains an address, from any context.

mod error;
mod slab;

pub use error::AddrIndexError;

use crate::LatchTree;
use crate::raw::{Dir, RawTree, Slot, View};
use crate::sync::{AtomicU64, Ordering};
use core::fmt;
use core::ops::Range;
use core::ptr;
use crossbeam_epoch::Guard;
use slab::{RangeNode, Slab};
use std::collections::BTreeMap;

/// A module's identity within one [`AddrIndex`]. Ids are never reused, so an
/// `(id, offset)` pair recorded in a signal handler names the same module
/// forever, even after it was removed.
///
/// ```
/// let index = latchtree::AddrIndex::new();
/// let a = index.insert(0..10, "a").unwrap();
/// index.remove(a);
/// let b = index.insert(0..10, "b").unwrap();
/// assert_ne!(a, b);
/// assert_eq!(format!("{a}"), "#1");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ModuleId(u64);

impl ModuleId {
    /// The id as a number (ids start at 1).
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// assert_eq!(index.insert(0..1, ()).unwrap().get(), 1);
    /// ```
    pub fn get(self) -> u64 {
        self.0
    }

    /// The id whose [`get`](ModuleId::get) is `n`: turns a number stored by
    /// a signal handler (in an atomic or a ring buffer) back into an id. An
    /// id that was never issued simply names no module.
    ///
    /// ```
    /// use latchtree::{AddrIndex, ModuleId};
    /// let index = AddrIndex::new();
    /// let id = index.insert(0..10, "m").unwrap();
    /// let stored: u64 = index.lookup(3).unwrap().id().get(); // e.g. in a handler
    /// assert_eq!(ModuleId::from_raw(stored), id);
    /// assert_eq!(index.get(ModuleId::from_raw(999), &latchtree::pin()), None);
    /// ```
    pub const fn from_raw(n: u64) -> ModuleId {
        ModuleId(n)
    }
}

impl fmt::Display for ModuleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// A module's record in the module table.
struct Module<T> {
    value: T,
    ranges: Box<[Range<u64>]>,
}

/// The result of the async-signal-safe [`AddrIndex::lookup`]: plain values,
/// no borrow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RawHit {
    start: u64,
    end: u64,
    id: ModuleId,
}

impl RawHit {
    /// The registered range that contains the address.
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// let id = index.insert(0x100..0x200, ()).unwrap();
    /// let hit = index.lookup(0x180).unwrap();
    /// assert_eq!(hit.range(), 0x100..0x200);
    /// assert_eq!(hit.id(), id);
    /// assert_eq!(hit.offset(0x180), 0x80);
    /// ```
    pub fn range(&self) -> Range<u64> {
        self.start..self.end
    }

    /// The module that owns the range (see [`RawHit::range`] for an example).
    pub fn id(&self) -> ModuleId {
        self.id
    }

    /// `addr - range().start`: the address relative to its range (see
    /// [`RawHit::range`] for an example).
    pub fn offset(&self, addr: u64) -> u64 {
        addr.wrapping_sub(self.start)
    }
}

/// The result of [`AddrIndex::module_address`]: the range, the module id and
/// the module's value, borrowed for as long as the guard lives.
#[derive(Debug)]
pub struct Hit<'g, T> {
    raw: RawHit,
    value: &'g T,
}

// Manual impls: a derive would require `T: Clone`.
impl<T> Clone for Hit<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Hit<'_, T> {}

impl<'g, T> Hit<'g, T> {
    /// The registered range that contains the address.
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// let id = index.insert(0x100..0x200, "libz.so.1").unwrap();
    /// let guard = latchtree::pin();
    /// let hit = index.module_address(0x1ff, &guard).unwrap();
    /// assert_eq!((hit.range(), hit.id(), *hit.value()), (0x100..0x200, id, "libz.so.1"));
    /// ```
    pub fn range(&self) -> Range<u64> {
        self.raw.range()
    }

    /// The module that owns the range (see [`Hit::range`] for an example).
    pub fn id(&self) -> ModuleId {
        self.raw.id
    }

    /// `addr - range().start`: the address relative to its range.
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// index.insert(0x100..0x200, ()).unwrap();
    /// let guard = latchtree::pin();
    /// assert_eq!(index.module_address(0x110, &guard).unwrap().offset(0x110), 0x10);
    /// ```
    pub fn offset(&self, addr: u64) -> u64 {
        self.raw.offset(addr)
    }

    /// The same hit without the borrow: what [`AddrIndex::lookup`] returns.
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// index.insert(0..10, ()).unwrap();
    /// let guard = latchtree::pin();
    /// assert_eq!(index.module_address(5, &guard).map(|h| h.raw()), index.lookup(5));
    /// ```
    pub fn raw(&self) -> RawHit {
        self.raw
    }

    /// The module's value, borrowed for the guard's lifetime (see
    /// [`Hit::range`] for an example).
    pub fn value(&self) -> &'g T {
        self.value
    }
}

/// The writer-only state, under the range tree's writer lock.
struct Writer<T> {
    slab: Slab<Module<T>>,
    next_id: u64,
    /// The ranges of every registered module, by id: the writer's own
    /// record, so that a `remove` decides under the lock, once, whether the
    /// id is live (two racing removes of one id cannot both act).
    live: BTreeMap<u64, Box<[Range<u64>]>>,
}

/// An address-range index: non-overlapping `[start, end)` ranges of `u64`
/// addresses, each owned by a module with a value `T`.
///
/// The Linux kernel's `__module_address()` for Rust: a latched red-black tree
/// keyed by range start, whose lookups never block and never retry unless a
/// write lands meanwhile. [`lookup`](AddrIndex::lookup) is async-signal-safe.
///
/// # Examples
///
/// ```
/// use latchtree::AddrIndex;
///
/// static MODULES: AddrIndex<&str> = AddrIndex::new();
///
/// let libc = MODULES.insert_module([0x7000..0x8000, 0x9000..0x9400], "libc.so.6").unwrap();
/// let hit = MODULES.lookup(0x9010).unwrap();
/// assert_eq!((hit.id(), hit.range(), hit.offset(0x9010)), (libc, 0x9000..0x9400, 0x10));
///
/// let guard = latchtree::pin();
/// let hit = MODULES.module_address(0x7abc, &guard).unwrap();
/// assert_eq!(*hit.value(), "libc.so.6");
/// assert!(MODULES.lookup(0x8800).is_none());
/// ```
///
/// # What may run in a signal handler
///
/// Only [`lookup`](AddrIndex::lookup) (and [`bounds`](AddrIndex::bounds),
/// [`len`](AddrIndex::len)): they take no lock, pin no epoch, touch no
/// thread-local, allocate nothing and free nothing, and a handler that
/// interrupted a writer on its own thread still gets an answer (it reads the
/// other copy). Everything else may allocate or lock: `module_address` and
/// `get` pin an epoch (thread-local, may run destructors); writes take the
/// writer lock and allocate; `snapshot` allocates.
pub struct AddrIndex<T> {
    ranges: RawTree<RangeNode<Module<T>>, Writer<T>>,
    /// Per copy: the lowest start and the highest end (`MAX..0` when empty),
    /// for the bounds fast path. Written by the writer in `publish` before
    /// readers are steered to that copy.
    bounds: [[AtomicU64; 2]; 2],
    modules: LatchTree<ModuleId, Module<T>>,
}

// SAFETY: the index owns `T`s (dropped possibly on another thread: `Send`)
// and hands out `&T` to any thread (`Sync`). Range nodes hold only atomics;
// their raw pointers point into storage the index owns.
unsafe impl<T: Send + Sync> Send for AddrIndex<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for AddrIndex<T> {}

impl<T> AddrIndex<T> {
    crate::sync::const_fn_unless_loom! {
        /// An empty index. `const`, so it can be a `static` without lazy
        /// initialization.
        ///
        /// ```
        /// static INDEX: latchtree::AddrIndex<String> = latchtree::AddrIndex::new();
        /// assert!(INDEX.is_empty());
        /// ```
        pub fn new() -> Self {
            AddrIndex {
                ranges: RawTree::new(Writer {
                    slab: Slab::new(),
                    next_id: 1,
                    live: BTreeMap::new(),
                }),
                bounds: [
                    [AtomicU64::new(u64::MAX), AtomicU64::new(0)],
                    [AtomicU64::new(u64::MAX), AtomicU64::new(0)],
                ],
                modules: LatchTree::new(),
            }
        }
    }

    /// Runs `attempt` against a stable copy; type-stable storage makes this
    /// safe without a guard.
    #[inline(always)]
    fn read<'a, R>(
        &'a self,
        attempt: impl FnMut(View<'a, RangeNode<Module<T>>>) -> Option<R>,
    ) -> R {
        // SAFETY: every pointer a reader can load from `ranges` is null or
        // points into the slab's chunks, which are freed only when the index
        // is dropped, impossible while `&'a self` is held (slab.rs).
        unsafe { self.ranges.read(attempt) }
    }

    /// Finds the range containing `addr` in a stable copy and copies its
    /// fields out, before validation. `Some(None)`: no such range.
    #[inline(always)]
    fn find<'a>(
        &'a self,
        view: View<'a, RangeNode<Module<T>>>,
        addr: u64,
    ) -> Option<Option<(RawHit, *mut Module<T>)>> {
        let b = &self.bounds[view.copy()];
        // Relaxed: validated by the latch like every other word read here.
        if addr < b[0].load(Ordering::Relaxed) || addr >= b[1].load(Ordering::Relaxed) {
            return Some(None);
        }
        // Branch-free descent to a leaf, keeping the last node that starts
        // at or below `addr`: the only range that can contain it.
        let mut cand = None;
        view.descend(|n| {
            // Relaxed: `n` was reached through an Acquire link load; torn
            // values are caught by the latch re-check.
            let right = addr >= n.start.load(Ordering::Relaxed);
            cand = if right { Some(n) } else { cand };
            Some(Dir::toward(right))
        })?;
        // Read the candidate's fields before validation, like every field.
        Some(cand.and_then(|n| {
            let end = n.end.load(Ordering::Relaxed);
            (addr < end).then(|| {
                (
                    RawHit {
                        start: n.start.load(Ordering::Relaxed),
                        end,
                        id: ModuleId(n.id.load(Ordering::Relaxed)),
                    },
                    n.module.load(Ordering::Relaxed),
                )
            })
        }))
    }

    /// The range containing `addr` and its module id, by value.
    /// **Async-signal-safe**: no lock, no epoch pin, no thread-local, no
    /// allocation, no free; it never waits for a writer, not even one it
    /// interrupted on the same thread.
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// let id = index.insert(100..200, ()).unwrap();
    /// assert_eq!(index.lookup(150).map(|h| h.id()), Some(id));
    /// assert_eq!(index.lookup(200), None);
    /// ```
    #[inline]
    pub fn lookup(&self, addr: u64) -> Option<RawHit> {
        self.read(|view| self.find(view, addr)).map(|(hit, _)| hit)
    }

    /// The range containing `addr`, its module id and the module's value,
    /// borrowed for the guard's lifetime.
    ///
    /// # Panics
    /// If `guard` does not pin crossbeam-epoch's default collector (the one
    /// [`latchtree::pin()`](crate::pin) pins).
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// index.insert(0x1000..0x2000, String::from("libfoo.so")).unwrap();
    /// let guard = latchtree::pin();
    /// let hit = index.module_address(0x1234, &guard).unwrap();
    /// assert_eq!(hit.value(), "libfoo.so");
    /// assert_eq!(hit.range(), 0x1000..0x2000);
    /// ```
    #[inline]
    pub fn module_address<'g>(&'g self, addr: u64, guard: &'g Guard) -> Option<Hit<'g, T>> {
        self.modules.check_guard(guard);
        let (raw, module) = self.read(|view| self.find(view, addr))?;
        // `module` was read from a node that, by validation, was linked in a
        // stable copy for the whole read, so its record was in the module
        // table then; records are retired through the epoch only after their
        // ranges left both copies, and `guard` was pinned before the read.
        // SAFETY: so the record is live and immutable for as long as `guard`.
        let module = unsafe { &*module };
        Some(Hit {
            raw,
            value: &module.value,
        })
    }

    /// The value of module `id`, if it is registered.
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// let id = index.insert(0..10, 'x').unwrap();
    /// assert_eq!(index.get(id, &latchtree::pin()), Some(&'x'));
    /// ```
    pub fn get<'g>(&'g self, id: ModuleId, guard: &'g Guard) -> Option<&'g T> {
        self.modules.get(&id, guard).map(|m| &m.value)
    }

    /// The ranges of module `id`, in address order, if it is registered.
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// let id = index.insert_module([50..60, 0..10], ()).unwrap();
    /// assert_eq!(index.ranges_of(id), Some(vec![0..10, 50..60]));
    /// ```
    pub fn ranges_of(&self, id: ModuleId) -> Option<Vec<Range<u64>>> {
        let guard = self.modules.pin();
        self.modules.get(&id, &guard).map(|m| m.ranges.to_vec())
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
            let b = &self.bounds[view.copy()];
            let (lo, hi) = (b[0].load(Ordering::Relaxed), b[1].load(Ordering::Relaxed));
            Some((lo < hi).then_some(lo..hi))
        })
    }

    /// The number of ranges. Async-signal-safe.
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// index.insert_module([0..1, 2..3], ()).unwrap();
    /// assert_eq!(index.len(), 2);
    /// ```
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Whether no range is registered.
    ///
    /// ```
    /// assert!(latchtree::AddrIndex::<()>::new().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of registered modules.
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// index.insert_module([0..1, 2..3], ()).unwrap();
    /// assert_eq!(index.module_count(), 1);
    /// ```
    pub fn module_count(&self) -> usize {
        self.modules.len()
    }

    /// Every range with its module, in address order, from one consistent
    /// version of the index.
    ///
    /// ```
    /// use latchtree::AddrIndex;
    /// let index = AddrIndex::new();
    /// let a = index.insert(10..20, ()).unwrap();
    /// let b = index.insert(0..5, ()).unwrap();
    /// assert_eq!(index.snapshot(), vec![(0..5, b), (10..20, a)]);
    /// ```
    pub fn snapshot(&self) -> Vec<(Range<u64>, ModuleId)> {
        self.read(|view| {
            let mut out = Vec::with_capacity(64);
            view.walk(|n| {
                out.push((
                    n.start.load(Ordering::Relaxed)..n.end.load(Ordering::Relaxed),
                    ModuleId(n.id.load(Ordering::Relaxed)),
                ));
            })?;
            Some(out)
        })
    }

    /// Counters for observability: reads retried and writes done (of the
    /// range tree).
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// index.insert(0..1, ()).unwrap();
    /// assert_eq!(index.stats().writes, 1);
    /// ```
    pub fn stats(&self) -> crate::Stats {
        let (read_retries, writes) = self.ranges.stats();
        crate::Stats {
            read_retries,
            writes,
        }
    }

    #[doc(hidden)]
    /// Checks every structural invariant; for tests.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.ranges.check(|a, b| {
            a.end.load(Ordering::Relaxed) <= b.start.load(Ordering::Relaxed)
                && a.start.load(Ordering::Relaxed) < a.end.load(Ordering::Relaxed)
        })?;
        self.modules.check_invariants()?;
        let snap = self.snapshot();
        let want = match (snap.first(), snap.last()) {
            (Some(f), Some(l)) => Some(f.0.start..l.0.end),
            _ => None,
        };
        if self.bounds() != want {
            return Err(format!("bounds {:?}, ranges span {want:?}", self.bounds()));
        }
        let guard = self.modules.pin();
        let mut owned = 0;
        for (id, m) in self.modules.snapshot(&guard) {
            for r in m.ranges.iter() {
                owned += 1;
                if !snap.contains(&(r.clone(), *id)) {
                    return Err(format!("module {id} owns {r:?}, which is not indexed"));
                }
            }
        }
        if owned != snap.len() {
            return Err("some indexed range belongs to no registered module".into());
        }
        Ok(())
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

impl<T: Send + Sync + 'static> AddrIndex<T> {
    /// Registers one range for a new module.
    ///
    /// ```
    /// use latchtree::{AddrIndex, AddrIndexError};
    /// let index = AddrIndex::new();
    /// assert!(index.insert(0x1000..0x2000, "a").is_ok());
    /// assert_eq!(index.insert(5..5, "b"), Err(AddrIndexError::EmptyRange(5..5)));
    /// ```
    pub fn insert(&self, range: Range<u64>, value: T) -> Result<ModuleId, AddrIndexError> {
        self.insert_module([range], value)
    }

    /// Registers a new module owning several ranges (text, data, rodata…),
    /// atomically: a reader sees all of them or none. Ranges may be given in
    /// any order; adjacent ranges (`a.end == b.start`) are fine.
    ///
    /// On error nothing changes and `value` is dropped.
    ///
    /// ```
    /// use latchtree::{AddrIndex, AddrIndexError};
    /// let index = AddrIndex::new();
    /// let id = index.insert_module([0x2000..0x3000, 0x1000..0x2000], "m").unwrap();
    /// assert_eq!(index.lookup(0x1fff).unwrap().id(), id);
    /// assert_eq!(
    ///     index.insert_module([0x5000..0x6000, 0x5800..0x5900], "n"),
    ///     Err(AddrIndexError::SelfOverlap(0x5000..0x6000, 0x5800..0x5900))
    /// );
    /// assert_eq!(index.module_count(), 1);
    /// ```
    pub fn insert_module(
        &self,
        ranges: impl IntoIterator<Item = Range<u64>>,
        value: T,
    ) -> Result<ModuleId, AddrIndexError> {
        let mut ranges: Vec<Range<u64>> = ranges.into_iter().collect();
        if ranges.is_empty() {
            return Err(AddrIndexError::NoRanges);
        }
        for r in &ranges {
            validate(r)?;
        }
        ranges.sort_unstable_by_key(|r| r.start);
        for w in ranges.windows(2) {
            if w[0].end > w[1].start {
                return Err(AddrIndexError::SelfOverlap(w[0].clone(), w[1].clone()));
            }
        }
        // Pin before taking the writer lock: crossbeam runs deferred
        // destructors only on a thread's outermost pin, so none (a module
        // value's `Drop` that writes to this index, say) runs under the lock.
        let guard = self.modules.pin();
        self.ranges.write(
            |txn, writer| {
                // Validate against the registered ranges before changing
                // anything: the latch is not even flipped on error.
                for r in &ranges {
                    // Ends increase with starts, so the registered range with
                    // the lowest end above `r.start` is the lowest one that
                    // can overlap `r`; it does if it starts before `r.end`.
                    let mut first_above = None;
                    txn.find(|n| {
                        if n.end.load(Ordering::Relaxed) > r.start {
                            first_above = Some((
                                n.start.load(Ordering::Relaxed)..n.end.load(Ordering::Relaxed),
                                n.id.load(Ordering::Relaxed),
                            ));
                            Some(Dir::Left)
                        } else {
                            Some(Dir::Right)
                        }
                    });
                    if let Some((existing, owner)) = first_above.filter(|(e, _)| e.start < r.end) {
                        return Err(AddrIndexError::Overlap {
                            range: r.clone(),
                            existing,
                            module: ModuleId(owner),
                        });
                    }
                }
                let id = ModuleId(writer.next_id);
                writer.next_id += 1;
                let boxed_ranges = ranges.clone().into_boxed_slice();
                writer.live.insert(id.0, boxed_ranges.clone());
                self.modules.insert(
                    id,
                    Module {
                        value,
                        ranges: boxed_ranges,
                    },
                );
                let module = self
                    .modules
                    .get(&id, &guard)
                    .map(|m| ptr::from_ref(m).cast_mut())
                    .expect("the record was inserted just above, under the writer lock");
                // Flip the latch before recycling any node: the stores in
                // `alloc` must be sequenced after a flip of this thread, so
                // that a stale reader on a recycled node fails validation
                // (slab.rs).
                txn.begin();
                for r in &ranges {
                    let slot = txn.find(|n| {
                        Some(if r.start < n.start.load(Ordering::Relaxed) {
                            Dir::Left
                        } else {
                            Dir::Right
                        })
                    });
                    let node = writer.slab.alloc(r.start, r.end, id.0, module);
                    // SAFETY: `node` is a free slab node (in no copy) that
                    // stays allocated as long as the index; `slot` is
                    // vacant and fresh.
                    unsafe { txn.insert(node, slot) };
                }
                Ok(id)
            },
            |copy, first, last| self.publish_bounds(copy, first, last),
            |writer, node| writer.slab.recycle(node),
        )
    }

    /// Removes module `id` and all its ranges, atomically. Returns `false`
    /// if `id` is unknown or was already removed. The module's value is
    /// dropped once no reader can see it.
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// let id = index.insert_module([0..10, 20..30], ()).unwrap();
    /// assert!(index.remove(id));
    /// assert!(!index.remove(id));
    /// assert!(index.lookup(25).is_none());
    /// ```
    pub fn remove(&self, id: ModuleId) -> bool {
        let removed = self.ranges.write(
            |txn, writer| {
                let Some(ranges) = writer.live.remove(&id.0) else {
                    return false;
                };
                for r in ranges {
                    let slot = txn.find(|n| {
                        let s = n.start.load(Ordering::Relaxed);
                        if r.start == s {
                            None
                        } else {
                            Some(if r.start < s { Dir::Left } else { Dir::Right })
                        }
                    });
                    let Slot::Occupied(node) = slot else {
                        unreachable!("a live module's range is indexed")
                    };
                    // SAFETY: `node` came from `find` just now.
                    unsafe { txn.erase(node) };
                }
                true
            },
            |copy, first, last| self.publish_bounds(copy, first, last),
            |writer, node| writer.slab.recycle(node),
        );
        // After the commit: the ranges are out of both copies, so retiring
        // the record now cannot free it under a reader that validated. Only
        // the remove that took `id` out of `live` gets here.
        removed && self.modules.remove(&id)
    }

    fn publish_bounds(
        &self,
        copy: usize,
        first: Option<&RangeNode<Module<T>>>,
        last: Option<&RangeNode<Module<T>>>,
    ) {
        let (lo, hi) = match (first, last) {
            (Some(f), Some(l)) => (
                f.start.load(Ordering::Relaxed),
                l.end.load(Ordering::Relaxed),
            ),
            _ => (u64::MAX, 0),
        };
        // Relaxed: readers reach this copy's bounds only through the latch,
        // whose flips order these stores (see `raw::latch`).
        self.bounds[copy][0].store(lo, Ordering::Relaxed);
        self.bounds[copy][1].store(hi, Ordering::Relaxed);
    }
}

impl<T> Default for AddrIndex<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> fmt::Debug for AddrIndex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Ranges(Vec<(Range<u64>, ModuleId)>);
        impl fmt::Debug for Ranges {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_map()
                    .entries(
                        self.0
                            .iter()
                            .map(|(r, id)| (format!("{:#x}..{:#x}", r.start, r.end), id)),
                    )
                    .finish()
            }
        }
        f.debug_struct("AddrIndex")
            .field("modules", &self.module_count())
            .field("ranges", &Ranges(self.snapshot()))
            .finish()
    }
}
