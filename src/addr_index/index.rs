//! The index itself: the [`AddrIndex`] struct (the range tree, the
//! per-copy bounds and module tables), the writer state under the tree's
//! lock, construction, the `publish` hook every transaction runs for each
//! copy, and `Drop`. Reads are `queries.rs`'s, writes `write.rs`'s and
//! `batch.rs`'s.

use super::garbage::{Garbage, make_record};
use super::kept::{KeepRemoved, Kept};
use super::layout::{Layout, LayoutPolicy};
use super::record::Record;
use super::slab::{Node, Slab};
use super::table::{Dirty, Table};
use super::types::{ModuleId, Segments};
use crate::raw::{RawTree, View};
use crate::reclaim::{Pending, Reclaim, Reclaimer, Sections};
use crate::sync::{AtomicU64, Ordering};
use alloc::boxed::Box;
use alloc::format;
use alloc::vec::Vec;
use core::fmt;
use core::ptr::NonNull;

/// The writer-only state, under the range tree's writer lock.
pub(super) struct Writer<T> {
    pub(super) slab: Slab<Record<T>>,
    pub(super) next_id: u64,
    /// Slots of table 0 written by the running transaction.
    pub(super) dirty: Dirty,
    /// Records made by the running transaction (retired if it rolls back).
    pub(super) created: Vec<NonNull<Record<T>>>,
    /// Records the running transaction took out (retired if it commits).
    pub(super) retired: Vec<NonNull<Record<T>>>,
    /// Reclamation's part (`crate::reclaim`): the records and table
    /// segments that left every copy, waiting for their grace period (the
    /// epoch's and the handler sections'), and recycled record memory.
    pub(super) pending: Pending<Garbage<T>>,
    /// The rebuild into fresh memory running, if any (`layout.rs`).
    pub(super) layout: Layout<T>,
}

impl<T> Writer<T> {
    /// A new record, in recycled memory if some is ready (`garbage.rs`),
    /// owned by the index from now on.
    pub(super) fn make_record(
        &mut self,
        id: u64,
        value: T,
        segments: Segments,
        base: u64,
        tag: u64,
    ) -> NonNull<Record<T>> {
        make_record(self.pending.shells(), id, value, segments, base, tag)
    }
}

/// An address-range index: non-overlapping `[start, end)` ranges of `u64`
/// addresses, each owned by a module with a value `T`, a base and a tag.
///
/// The Linux kernel's `__module_address()` for Rust: a latched red-black tree
/// keyed by range start, whose lookups never block and never retry unless a
/// write lands meanwhile. [`lookup`](AddrIndex::lookup) is
/// async-signal-safe and returns the module's id, base and tag with the
/// range, all from one version of the index.
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
/// assert_eq!((hit.id(), hit.range(), hit.module_offset(0x9010)), (libc, 0x9000..0x9400, 0x2010));
///
/// let guard = MODULES.pin();
/// let hit = MODULES.module_address(0x7abc, &guard).unwrap();
/// assert_eq!(*hit.value(), "libc.so.6");
/// assert!(MODULES.lookup(0x8800).is_none());
/// ```
///
/// ## A JIT code registry with a trap handler
///
/// The handler (here called directly; in a real program a `SIGSEGV`/`SIGILL`
/// handler) opens a [`HandlerSection`](crate::HandlerSection) and reads the
/// module's trap table, its value, in place. Tier-up swaps the table in
/// place: same id, same ranges, and a concurrent trap sees the old table or
/// the new one, never neither; the old one is freed by the index once no
/// section can see it (`examples/jit` runs this with real traps).
///
/// ```
/// use latchtree::AddrIndex;
///
/// /// What a trap needs to know: the module's value, read by the handler.
/// struct TrapTable { tier: u8, traps: Vec<(u64, &'static str)> }
///
/// static CODE: AddrIndex<TrapTable> = AddrIndex::new();
///
/// /// The trap handler's work: async-signal-safe.
/// fn on_trap(pc: u64) -> Option<&'static str> {
///     let section = CODE.handler_section();
///     let hit = section.lookup(pc)?;
///     let at = hit.module_offset(pc);
///     hit.value().traps.iter().find(|t| t.0 == at).map(|t| t.1)
/// }
///
/// let baseline = TrapTable { tier: 0, traps: vec![(0x10, "out of bounds")] };
/// let f = CODE.insert(0x10_0000..0x10_0400, baseline).unwrap();
/// assert_eq!(on_trap(0x10_0010), Some("out of bounds"));
///
/// // Tier-up: the optimized code traps elsewhere. The old table and tag
/// // come back.
/// let optimized = TrapTable { tier: 1, traps: vec![(0x20, "integer overflow")] };
/// let old = CODE.set_value(f, optimized, 1).map_err(|e| e.to_string()).unwrap();
/// assert_eq!((old.tier, old.tag()), (0, 0));
/// assert_eq!(on_trap(0x10_0020), Some("integer overflow"));
///
/// // Unmapping an arena: every function in it goes, in one transaction.
/// let g = CODE.insert(0x10_1000..0x10_1100, TrapTable { tier: 0, traps: vec![] }).unwrap();
/// let guard = CODE.pin();
/// let doomed: Vec<_> = CODE.overlapping(0x10_0000..0x11_0000, &guard).map(|h| h.id()).collect();
/// drop(guard);
/// assert_eq!(doomed, [f, g]);
/// CODE.write(|batch| {
///     for id in doomed {
///         batch.remove(id);
///     }
/// });
/// CODE.synchronize(); // no handler can still read the tables: the code may go
/// assert!(CODE.is_empty() && on_trap(0x10_0010).is_none());
/// ```
///
/// ## A sampling profiler that follows `dlopen`/`dlclose`
///
/// The `SIGPROF` handler records `(id, module_offset)` pairs; they are
/// resolved later, after the library may have been unloaded: the index
/// keeps the last removed modules ([`keeping_removed`](AddrIndex::keeping_removed)).
///
/// ```
/// use latchtree::{AddrIndex, KeepRemoved, ModuleId, ModuleMeta};
///
/// struct Library { name: String }
///
/// static LOADED: AddrIndex<Library> = AddrIndex::keeping_removed(KeepRemoved::Last(256));
///
/// /// The handler's work: async-signal-safe.
/// fn sample(pc: u64) -> Option<(u64, u64)> {
///     LOADED.lookup(pc).map(|h| (h.id().get(), h.module_offset(pc)))
/// }
///
/// let meta = ModuleMeta { base: Some(0x7f00_0000), tag: 0 };
/// let lib = Library { name: "libplugin.so".into() };
/// let id = LOADED.insert_module_with([0x7f00_1000..0x7f00_5000], lib, meta).unwrap();
/// let samples = [sample(0x7f00_1234).unwrap(), sample(0x7f00_4000).unwrap()];
///
/// LOADED.remove(id); // dlclose
///
/// // Later: resolve every sample, whether the library is still loaded or not.
/// let guard = LOADED.pin();
/// let resolved: Vec<(String, u64)> = samples
///     .iter()
///     .map(|&(id, offset)| {
///         let id = ModuleId::from_raw(id);
///         let name = match LOADED.get(id, &guard) {
///             Some(lib) => lib.name.clone(),
///             None => LOADED.removed(id).unwrap().name.clone(),
///         };
///         (name, offset)
///     })
///     .collect();
/// assert_eq!(resolved, [("libplugin.so".into(), 0x1234), ("libplugin.so".into(), 0x4000)]);
/// ```
///
/// # What may run in a signal handler
///
/// [`lookup`](AddrIndex::lookup), [`lookup_many`](AddrIndex::lookup_many),
/// [`handler_section`](AddrIndex::handler_section) and its lookups,
/// [`bounds`](AddrIndex::bounds), [`range_count`](AddrIndex::range_count),
/// [`module_count`](AddrIndex::module_count) and
/// [`is_empty`](AddrIndex::is_empty): they take no lock, pin no epoch, touch
/// no thread-local, allocate nothing and free nothing, and a handler that
/// interrupted a writer on its own thread still gets an answer (it reads the
/// other copy). A handler that needs per-module data reads the module's
/// value through a [`HandlerSection`](crate::HandlerSection) (the index
/// frees a removed value only after the sections that could see it closed)
/// and stores [`RawHit::module_offset`](crate::RawHit::module_offset), not
/// [`RawHit::offset`](crate::RawHit::offset), to resolve a sample later.
/// Everything else may allocate or lock: `module_address`,
/// `get` and the other guarded reads need a pinned epoch guard
/// (thread-local; pinning may run deferred work); writes take the writer
/// lock and allocate.
///
/// # Atomicity
///
/// Every write — one `insert`, `insert_module`, `remove`, `set_value`, or a
/// whole [`write`](AddrIndex::write) batch — is one transaction: the ranges,
/// the module records and the counts change together, in one pair of latch
/// flips, so no reader ever sees a module's ranges without its record (or
/// the reverse), or counts that disagree with either.
///
/// # Memory
///
/// A range costs one 128-byte node (two cache lines: what `lookup` reads
/// fills the first) plus its module's record and value and two table slots.
/// Writes reuse the nodes of removed ranges (oldest chunk first), and the
/// module tables and the limbo shrink as modules go. The node chunks
/// themselves are never returned to the allocator while the index lives:
/// the signal-safe [`lookup`](AddrIndex::lookup) pins nothing and registers
/// nowhere, so no grace period can tell when a reader that started before
/// a removal (a descheduled thread, or a signal handler that interrupted
/// one) has left the chunk it stands on. Their **pages** go back to the OS
/// instead, on Linux with `std`: a chunk whose every node is free is
/// purged (`madvise`) while its addresses stay mapped, by writes when the
/// index keeps enough free nodes elsewhere, and by
/// [`synchronize`](AddrIndex::synchronize), which first moves the live
/// ranges out of the newest chunks when they fit in the older ones (a
/// bounded slice a write, under a millisecond, so that writers on other
/// threads get the lock in between);
/// [`node_memory`](AddrIndex::node_memory) tells how much is resident.
/// [`shrink_to_fit`](AddrIndex::shrink_to_fit) (`&mut self`: the proof that
/// no reader is left) also returns the chunks themselves; dropping the
/// index frees everything.
/// (Writes also keep up to 128 removed modules' record and value
/// allocations for reuse, `128 × size_of::<T>()` bytes of values at most:
/// `shrink_to_fit` frees them too.)
///
/// # When a removed value is dropped
///
/// The index shares each value with the readers that may still see it
/// through a guard, as an [`Arc`](alloc::sync::Arc): `remove` and `set_value`
/// hand the caller a clone of it. The index lets go of its own reference by
/// the same writer-side reclamation as `LatchTree`'s: a
/// removed (or replaced) module's record waits, with the writer, until no
/// guard pinned before its removal is left, and is then dropped by a later
/// write of this index (after its lock is released), by
/// [`flush`](AddrIndex::flush), or when the index is dropped, on the thread
/// that does it. Never by a reader, never inside a reader's pin, never under
/// a writer lock: a write nested in another tree's or index's batch closure
/// leaves what it would drop until that outer write has released its lock.
///
/// **How much waits** (tested over random operation sequences,
/// `tests/reclaim_bound.rs`): while no guard is held on any thread, after
/// every write at most 128 removed values are still held by the index
/// besides those the last 16 writes removed, whatever the writes; one
/// `flush` lets go of all of them, also with up to 3,968 bags of other
/// code's garbage queued in crossbeam's collector ahead of them
/// (`tests/addr_index_flush_backlog.rs`; past that, call it again, or
/// [`synchronize`](AddrIndex::synchronize), which keeps going). A guard
/// held somewhere keeps what it may see, and what was removed after it,
/// until it is dropped; many writes nested in one batch closure of
/// another index or tree likewise keep what they remove until that batch
/// ends. Once older than the last 16 writes that removed anything, such a
/// backlog goes at most 1,024 values a write, besides twice what those
/// writes removed and, once it is gone, their removals, so that no one
/// write pays for a mass removal made of many writes
/// (`tests/reclaim_backlog.rs`); `flush` drops all of it. (A removal made
/// of 16 writes or fewer, say one large batch, is dropped by one write.)
///
/// The value itself is dropped when the last `Arc` goes: the index's, the
/// caller's [`Removed`](crate::Removed), or a clone the caller kept.
/// Values of rejected writes are handed back in an
/// [`InsertError`](crate::InsertError), and every value still registered is
/// dropped when the index is.
pub struct AddrIndex<T> {
    pub(super) tree: RawTree<Node<T>, Writer<T>>,
    /// Per copy: the lowest start and the highest end (`MAX..0` when empty),
    /// for the bounds fast path. Written by the writer in `publish` before
    /// readers are steered to that copy. Each copy's on its own lines, as
    /// the raw tree's per-copy heads (`raw::shared::Head`).
    pub(super) bounds: [CopyBounds; 2],
    /// Per copy: id → record (`table.rs`).
    pub(super) tables: [Table<T>; 2],
    /// Which collector guards pin, and what the drops after a write's lock
    /// hand back (`crate::reclaim`).
    pub(super) reclaim: Reclaim<Garbage<T>>,
    /// Open handler sections, which keep removed records alive.
    pub(super) sections: Sections,
    /// Removed modules kept for late samples, if asked (`kept.rs`).
    pub(super) kept: Kept<T>,
}

/// One copy's `[lowest start, highest end]`, alone on a pair of cache lines.
#[repr(align(128))]
pub(super) struct CopyBounds(pub(super) [AtomicU64; 2]);

// The index owns `Arc<T>`s (dropped possibly on another thread, and shared with any thread: `T:
// Send + Sync`) and hands out `&T` to any thread (`Sync`). Range nodes and tables hold only
// atomics; their raw pointers point into storage the index owns, and the writer state behind them
// is only touched under the writer lock.
// SAFETY: so sending the index to another thread is sound.
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
            Self::with_policy(LayoutPolicy::DEFAULT)
        }
    }

    crate::sync::const_fn_unless_loom! {
        /// An empty index that lays out large trees by `policy` (see
        /// [`LayoutPolicy`]): for tests that need small thresholds, and for
        /// measurements. Not part of the documented API.
        #[doc(hidden)]
        pub fn with_policy(policy: LayoutPolicy) -> Self {
            AddrIndex {
                tree: RawTree::new(
                    Writer {
                    slab: Slab::new(),
                    next_id: 1,
                    dirty: Dirty::new(),
                    created: Vec::new(),
                    retired: Vec::new(),
                    pending: Pending::new(),
                    layout: Layout::new(policy),
                },
                    // Large trees move into fresh memory instead (`layout/`).
                    policy.layout_min.saturating_sub(1),
                ),
                bounds: [
                    CopyBounds([AtomicU64::new(u64::MAX), AtomicU64::new(0)]),
                    CopyBounds([AtomicU64::new(u64::MAX), AtomicU64::new(0)]),
                ],
                tables: [Table::new(), Table::new()],
                reclaim: Reclaim::new(Reclaimer::global()),
                sections: Sections::new(),
                kept: Kept::new(KeepRemoved::Last(0)),
            }
        }
    }

    /// Runs `attempt` against a stable copy; type-stable storage makes this
    /// safe without a guard.
    #[inline(always)]
    pub(super) fn read<'a, R>(&'a self, attempt: impl FnMut(View<'a, Node<T>>) -> Option<R>) -> R {
        // Every pointer a reader can load from `tree` is null or points into the slab's chunks,
        // which are freed only when the index is dropped, impossible while `&'a self` is held
        // (slab.rs).
        // SAFETY: so `tree.read`'s contract holds for 'a.
        unsafe { self.tree.read(attempt) }
    }

    /// Called by the transaction for each copy once it holds its final
    /// state, before readers are steered to it: the bounds, and the module
    /// table (table 1 catches up with table 0 on commit; table 0 goes back to
    /// table 1 on rollback).
    #[inline]
    pub(super) fn publish(
        &self,
        copy: usize,
        first: Option<&Node<T>>,
        last: Option<&Node<T>>,
        end: Ending,
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
        self.bounds[copy].0[0].store(lo, Ordering::Relaxed);
        self.bounds[copy].0[1].store(hi, Ordering::Relaxed);
        match (copy, end) {
            (1, Ending::Commit(dirty)) => self.tables[1].sync_from(&self.tables[0], dirty),
            (0, Ending::Rollback) => self.tables[0].sync_from(&self.tables[1], Dirty::all()),
            _ => {}
        }
    }
}

/// How a transaction ends, as `publish` sees it.
#[derive(Clone, Copy, Debug)]
pub(super) enum Ending {
    /// The body returned; these slots of table 0 changed.
    Commit(Dirty),
    /// The body panicked.
    Rollback,
}

impl<T> Default for AddrIndex<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> fmt::Debug for AddrIndex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Ranges(Vec<(core::ops::Range<u64>, ModuleId)>);
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
        let ranges = self
            .raw_snapshot()
            .into_iter()
            .map(|(h, _)| (h.range(), h.id));
        f.debug_struct("AddrIndex")
            .field("modules", &self.module_count())
            .field("ranges", &Ranges(ranges.collect()))
            .finish()
    }
}

impl<T> Drop for AddrIndex<T> {
    /// Drops every registered value (each exactly once), then resumes the
    /// first panic a value's `Drop` raised, if any (unless the thread is
    /// already unwinding: a second panic would abort).
    fn drop(&mut self) {
        // Removed records and replaced segments still waiting for their grace
        // period (no reader is left: `&mut self`).
        for g in self.tree.state_mut().pending.take_waiting() {
            // SAFETY: out of every copy, reachable by no reader (`&mut
            // self`), handed out once by the limbo.
            unsafe { crate::reclaim::free_now(g) };
        }
        let mut records = Vec::new();
        self.tables[0].records(|r| records.push(r));
        for t in &mut self.tables {
            t.free();
        }
        crate::reclaim::drop_all(records, |r| {
            // SAFETY: a live record is owned by the index alone (readers
            // are gone: `&mut self`), and appears once in table 0.
            drop(unsafe { Box::from_raw(r) })
        });
    }
}
