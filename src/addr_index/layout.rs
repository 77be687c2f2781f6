//! Where a large index's range nodes lie in memory, and how a large tree
//! gets there without a long write.
//!
//! Nodes are allocated in the order ranges arrive, which for a loader or a
//! JIT is address order, so a balanced tree over them keeps each level's
//! nodes spread across the whole slab: at n = 262 144 (32 MiB of nodes) a
//! lookup's 18 nodes lie on 18 different pages, and every one of them is a
//! TLB miss (DESIGN §7b). So when a rebuild of a large tree comes due (no
//! sooner than [`MOVE_EVERY`] allows), the tree is rebuilt into fresh slab
//! memory in van Emde Boas order (`raw::VebOrder`): a subtree of 4 or 5
//! levels then shares a 4 KiB page, and a lookup touches 4 to 6 pages.
//!
//! # A migration, a slice per write
//!
//! Round 3 moved every node inside the one write that made the rebuild due
//! (52–83 ms at n = 262 144, DESIGN §7c). Now a [`Migration`] does the same
//! work over many writes, at most [`SLICE`] units of it at the end of each
//! one (`IndexBatch::settle`; plus [`WORK_PER_CHANGE`] for each change the
//! write made, so that a bulk batch leaves its tree migrated), off to the
//! side where no reader can reach it:
//!
//! 1. *Collect*: copy 0's node fields, in key order, into a private
//!    snapshot, from where the last slice stopped (the *frontier*, a range
//!    start) onwards (`Txn::scan`).
//! 2. *Reserve*: grow the slab's free list by whole chunks until it holds
//!    one node per collected range, then pop that many and mark them in a
//!    bitmap per chunk, a slice at a time, to hand them out lowest address
//!    first.
//! 3. *Build*: link one node per collected range, with its fields, into a
//!    [`Shadow`] tree in the balanced shape, in van Emde Boas order, each
//!    at the next rising address (`Shadow::place`).
//! 4. *Return*: free the snapshot, a block at a time.
//! 5. *Catch up*: apply to the shadow every change the writes made
//!    meanwhile to what was collected (each write's own changes are
//!    recorded at its end from its log, `Txn::changes`: during collection
//!    only those at or below the frontier, since the walk sees the others).
//! 6. *Adopt*: once nothing is left to catch up, `Txn::adopt` swaps the
//!    shadow in for both copies (one root store each) in that write; the
//!    old nodes go back to the free list a slice per later write
//!    (`raw/tree.rs`).
//!
//! Readers never see any of it before the adoption, which is one write
//! like any other: they see the old nodes or the new ones, each whole
//! (`slab.rs`), and a reader that overlaps it retries. The shadow's nodes
//! come from the free list or fresh chunks and are written only by
//! transactions that have flipped `seq` (a slice runs only in a write that
//! changed something, after its first flip), as `slab.rs` requires of any
//! rewrite. Records hold no node pointers (a module's nodes are found by
//! address), so nothing else changes. A write that panics in its closure
//! rolls back before its end, so it records nothing and takes no slice; a
//! panic inside a slice (a bug of this file) drops the migration, whose
//! nodes then stay unused in the slab until the index is dropped (memory,
//! never unsoundness), and the write rolls back as usual.
//!
//! While a migration runs, no write rebuilds the tree (`Txn::defer_rebuilds`):
//! it keeps the shape it had, which the red-black rules bound anyway. The
//! adopted tree is the balanced shape changed by the writes caught up, so
//! its readers follow the exact plan only if no write came meanwhile
//! ([`rebalance`](crate::AddrIndex::rebalance) runs a whole migration in its
//! one write, for the exact shape at once).
//!
//! Measured against the one-write move (`compare --pauses`: growth to
//! 262 144 ranges by single inserts, the largest insert in thread CPU
//! time, 2-core VM): ascending 42–53 → 4–13 ms, random 37–87 → 4–11 ms
//! when it landed; what stayed above a millisecond was growth, which now
//! is incremental too: a fresh chunk's nodes are written a page at a time
//! as they are taken (`slab.rs`), and the module table grows by segments
//! (`table.rs`). Since then the largest insert is 0.5–0.7 ms (the table's
//! two 1 MiB segments at 2^17 modules) with default features; a slice of
//! the migration takes some 25 µs. The price: p99 of those inserts 3 →
//! 35 µs (7 % of the writes carry a slice). Callgrind, growth to 65 536:
//! 7,050 → 6,680 instructions an insert. `rebalance` (a whole migration in
//! one write) takes about what the move took (30–43 ms at 262 144).

use super::index::Node;
use super::record::Record;
use super::slab::{Fields, Slab};
use crate::raw::{Change, Dir, Shadow, Slot, Txn, VebOrder};
use crate::sync::Ordering;
use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::vec;
use alloc::vec::Vec;
use core::ptr::NonNull;

/// The fewest nodes a tree must hold for a rebuild to move them: below
/// that, the tree's first cache lines (64 bytes a node) fit the L2 cache and
/// its pages the first-level TLB, so the order in memory hardly matters, and
/// a move would only cost memory (a rebuild in place of 4096 nodes takes
/// well under a millisecond). Tiny in debug builds, so that the model tests
/// and the fuzz targets migrate small trees; 4 under loom, whose models
/// rebuild 3 nodes in place and move 4; 16 under Miri, where a move at
/// every rebuild of the model tests' small trees cost most of their time
/// and this file's test moves trees of 16 to 32 (issue 24: the budget).
pub(super) const LAYOUT_MIN: usize = if cfg!(latchtree_loom) {
    4
} else if cfg!(miri) {
    16
} else if cfg!(debug_assertions) {
    2
} else {
    4096
};

/// A migration starts once the tree is due a rebuild (`Txn::rebuild_due`:
/// its shape has gone bad, at least `len / 8` updates since the last) and
/// `Txn::updates` reaches `len / MOVE_EVERY`: the inserts and erases since
/// the last rebuild, or since the last adoption plus the changes that
/// adoption caught up.
/// A migration moves every node (some 550 instructions a node over its
/// phases, callgrind), so while a tree grows by single inserts it costs
/// `MOVE_EVERY + 1` moves a node or so: at `len / 8` (a rebuild's own
/// cadence, round 3) growth to 65 536 took 6,531 instructions an insert
/// ascending and 6,600 random; at `len / 2`, 3,697 and 3,356 (issue 26's
/// target: 4,000); `len / 4` gave 4,443 and 4,088, `len` 2,690 and 2,386.
/// The price is in the reads of a tree that grew since its last move: its
/// newer nodes lie where the slab had room, not in van Emde Boas order. At
/// 262 144 grown by single inserts (`orders`, four interleaved runs of one
/// binary) lookups took 1.25–1.41× the sorted `Vec` at `len / 8`,
/// 1.28–1.45× at `len / 2`, and 1.63–1.8× at `len`. Every 8 in debug
/// builds, a rebuild's own cadence: the tests, Miri and the fuzz targets
/// migrate as often as they were written for (at 4, a second fill of
/// `tests/reclaim_memory.rs` peaked a migration's worth of slab higher than
/// the first); the rule itself is tested in release builds
/// (`migrations_start_no_sooner_than_move_every_allows`, which CI's release
/// test run includes).
const MOVE_EVERY: usize = if cfg!(debug_assertions) { 8 } else { 2 };

/// The units of migration work at the end of one write: a range collected,
/// a node built, four recycled free nodes marked or given back (or one
/// never written) each count one; a change caught up counts
/// [`CATCH_UP_COST`], a node that starts a page of the rank map
/// [`MAP_PAGE_COST`], a snapshot block freed half a slice, a fresh chunk a
/// whole one ([`CHUNK_COST`]). About 50 ns a unit (cold nodes), so
/// a slice takes some 25 µs. Measured at n = 262 144 (`compare --pauses`,
/// two runs each): 2048 units gave p99 32–67 µs, 512 gave 25–30 µs (7 % of
/// the writes carry a slice then, against 2 %), the largest writes being
/// chunk growth either way. Tiny in debug builds, so that the tests'
/// migrations span many writes (and so see writes interleaved).
const SLICE: usize = if cfg!(debug_assertions) { 3 } else { 512 };

/// The units of migration work a write may add to its slice for each
/// change it made ([`Layout::settle`]): more than catching the change up
/// costs ([`CATCH_UP_COST`]), so that a migration keeps up with writes of
/// any size, and about what the change itself cost the write (a search of
/// the tree), so that a batch's time stays in proportion.
const WORK_PER_CHANGE: usize = if cfg!(debug_assertions) { 8 } else { 32 };

/// What growing the slab by a chunk counts against a slice: more than a
/// single insert's whole budget (`SLICE` plus a change's), so that such a
/// write grows one chunk at most. The chunk's nodes are written as they are
/// handed out (`Slab::touch`), but its allocation may still map fresh
/// memory.
const CHUNK_COST: usize = 2 * SLICE;

/// What catching up one change costs: a search of the shadow from its root,
/// a cold node a level (some 1.5 µs at 262 144 on the 2-core VM, where a
/// unit each let one slice take 0.9 ms). One unit in debug builds, like
/// their tiny [`SLICE`].
const CATCH_UP_COST: usize = if cfg!(debug_assertions) { 1 } else { 24 };

/// What placing a node costs when it is the first in its page of the
/// shadow's rank map (`Shadow::place`): a fresh 4 KiB page, some 2–7 µs to
/// allocate and fault in on the 2-core VM. The van Emde Boas order's first
/// nodes spread over every rank, so without it the first build slice took
/// a page for nearly every node (1 ms at 262 144). One unit in debug
/// builds.
const MAP_PAGE_COST: usize = if cfg!(debug_assertions) { 1 } else { 64 };

/// The writer's layout state: the migration running, if any.
pub(super) struct Layout<T> {
    migration: Option<Box<Migration<T>>>,
    /// Migrations adopted so far (tests).
    pub(super) adopted: usize,
    /// Whether a build ever placed a node at a lower address than the one
    /// before it (tests: never, the reserve hands nodes out lowest first).
    pub(super) out_of_order: bool,
}

/// A rebuild into fresh memory in progress; see the module docs.
struct Migration<T> {
    phase: Phase,
    /// Copy 0's fields in key order, as collected.
    staged: Staged<T>,
    /// What changed since, oldest first (see `record`).
    pending: VecDeque<Edit<T>>,
    reserve: Reserve<T>,
    order: VebOrder,
    shadow: Shadow<Node<T>>,
    /// The address of the last node built.
    last: usize,
    out_of_order: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Collect,
    Reserve,
    Build,
    /// The snapshot is freed.
    Return,
    CatchUp,
}

/// One change to the content since it was collected.
enum Edit<T> {
    /// The range starting at `start` now has these fields (inserted, or its
    /// module's value replaced).
    Put(Fields<Record<T>>),
    /// The range starting here left the index.
    Erase(u64),
}

/// The collected fields, in blocks of [`BLOCK`]: growing or freeing one
/// vector of many MiB (14 MiB at n = 262 144) took a millisecond or more
/// in one write (a copy, an unmap); blocks are allocated and freed one at a
/// time.
struct Staged<T> {
    blocks: Vec<Vec<Fields<Record<T>>>>,
}

/// Fields a block of [`Staged`] holds (256 KiB).
const BLOCK: usize = 4096;

impl<T> Default for Staged<T> {
    fn default() -> Self {
        Staged { blocks: Vec::new() }
    }
}

impl<T> Staged<T> {
    fn len(&self) -> usize {
        self.blocks
            .last()
            .map_or(0, |b| (self.blocks.len() - 1) * BLOCK + b.len())
    }

    fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    fn last(&self) -> Option<&Fields<Record<T>>> {
        self.blocks.last()?.last()
    }

    fn push(&mut self, f: Fields<Record<T>>) {
        match self.blocks.last_mut() {
            Some(b) if b.len() < BLOCK => b.push(f),
            _ => {
                let mut b = Vec::with_capacity(BLOCK);
                b.push(f);
                self.blocks.push(b);
            }
        }
    }

    fn get(&self, i: usize) -> Fields<Record<T>> {
        self.blocks[i / BLOCK][i % BLOCK]
    }

    /// Frees the last block.
    fn pop_block(&mut self) {
        self.blocks.pop();
    }
}

/// Free nodes for a build, handed out lowest address first, without a
/// sort (sorting the free list was a tenth of a growth's instructions): a
/// bitmap of the free nodes of each chunk, lowest chunk first, filled a
/// slice at a time with nodes popped off the slab's free list (`mark`: the
/// most recently freed ones, mostly the tree the last migration replaced,
/// or fresh chunks), then scanned upwards (`lowest`). It takes only the
/// nodes the build needs: the rest of the free list stays where it is.
struct Reserve<T> {
    /// Each chunk's first node and node count, lowest first (once marking
    /// began), and its bitmap.
    spans: Vec<(NonNull<Node<T>>, usize)>,
    bits: Vec<Vec<u64>>,
    /// Where `lowest` looks next: chunk, word.
    at: (usize, usize),
    /// Nodes marked.
    marked: usize,
}

impl<T> Reserve<T> {
    fn new() -> Self {
        Reserve {
            spans: Vec::new(),
            bits: Vec::new(),
            at: (0, 0),
            marked: 0,
        }
    }

    /// Takes `slab`'s chunks again (after it grew), keeping the marks.
    fn resync(&mut self, slab: &Slab<Record<T>>) {
        let spans = slab.chunk_spans();
        let bits = (spans.iter())
            .map(
                |&(first, len)| match self.spans.binary_search_by_key(&first, |s| s.0) {
                    Ok(i) => core::mem::take(&mut self.bits[i]),
                    Err(_) => vec![0; len.div_ceil(64)],
                },
            )
            .collect();
        (self.spans, self.bits) = (spans, bits);
    }

    /// Pops more free nodes off `slab` (growing it by a chunk if none is
    /// left) and marks them, until `need` are or `budget` units are spent:
    /// a recycled node costs a quarter, a never-written one a whole unit
    /// (writing it may fault its page in: some 7 µs a 4 KiB page on the
    /// 2-core VM, 32 nodes). Returns the units spent, or `None` once `need`
    /// are marked.
    fn mark(&mut self, slab: &mut Slab<Record<T>>, need: usize, budget: usize) -> Option<usize> {
        if self.marked >= need {
            return None;
        }
        // Writes between two slices may have grown the slab (an insert
        // that found no free node).
        if self.spans.len() != slab.chunk_count() {
            self.resync(slab);
        }
        let size = size_of::<Node<T>>();
        let (mut c, mut quarters) = (0, 0_usize);
        while self.marked < need && quarters < budget.saturating_mul(4) {
            quarters += if slab.recycled_len() > 0 { 1 } else { 4 };
            let n = match slab.pop_free() {
                Some(n) => n,
                None => {
                    let n = slab.alloc_chunk();
                    self.resync(slab);
                    n
                }
            };
            let a = n.as_ptr().addr();
            let within = |c: usize| {
                let (first, len) = self.spans[c];
                a.wrapping_sub(first.as_ptr().addr()) < len * size
            };
            // Runs of free nodes mostly share a chunk: try the last one
            // first, then the last chunk starting at or below `a`.
            if !within(c) {
                c = self.spans.partition_point(|s| s.0.as_ptr().addr() <= a) - 1;
            }
            let i = (a - self.spans[c].0.as_ptr().addr()) / size;
            debug_assert!(i < self.spans[c].1, "a node outside every chunk");
            self.bits[c][i / 64] |= 1 << (i % 64);
            self.marked += 1;
        }
        Some(quarters.div_ceil(4))
    }

    /// The lowest marked node not handed out yet, or `None`.
    fn lowest(&mut self) -> Option<NonNull<Node<T>>> {
        let (mut c, mut w) = self.at;
        while c < self.bits.len() {
            if let Some(&word) = self.bits[c].get(w)
                && word != 0
            {
                let b = word.trailing_zeros() as usize;
                self.bits[c][w] &= !(1 << b);
                self.at = (c, w);
                // SAFETY: a marked bit is a node of this chunk (`mark`), so
                // `first + i` is inside it.
                return Some(unsafe { self.spans[c].0.add(w * 64 + b) });
            }
            w += 1;
            if w >= self.bits[c].len() {
                (c, w) = (c + 1, 0);
            }
        }
        self.at = (c, w);
        None
    }

    /// Puts every marked node not handed out back on the free list (a
    /// migration given up).
    fn give_back(&mut self, slab: &mut Slab<Record<T>>) {
        while let Some(n) = self.lowest() {
            slab.recycle(n);
        }
    }
}

/// Steps a search of the range starting at `start`.
fn toward<T>(start: u64) -> impl FnMut(&Node<T>) -> Option<Dir> {
    move |n| {
        // Relaxed: writer-only reads under the lock.
        let s = n.start.load(Ordering::Relaxed);
        (start != s).then_some(Dir::toward(start > s))
    }
}

impl<T> Migration<T> {
    fn new() -> Box<Self> {
        Box::new(Migration {
            phase: Phase::Collect,
            staged: Staged::default(),
            pending: VecDeque::new(),
            reserve: Reserve::new(),
            order: VebOrder::new(0),
            shadow: Shadow::new(0),
            last: 0,
            out_of_order: false,
        })
    }

    /// Records the changes `txn` made, before this write's slice: while
    /// collecting, those at or below the frontier (the walk finds the
    /// others as they are), after it all of them. `false` for a clear (the
    /// migration is then dropped).
    fn record(&mut self, txn: &Txn<'_, Node<T>>) -> bool {
        let frontier = match self.phase {
            Phase::Collect => self.staged.last().map(|f| f.start),
            _ => Some(u64::MAX),
        };
        let Some(frontier) = frontier else {
            return true;
        };
        let mut cleared = false;
        txn.changes(|c| match c {
            Change::Put(n) => {
                let f = Fields::of(n);
                if f.start <= frontier {
                    self.pending.push_back(Edit::Put(f));
                }
            }
            Change::Erase(n) => {
                // Relaxed: writer-only reads under the lock.
                let start = n.start.load(Ordering::Relaxed);
                if start <= frontier {
                    self.pending.push_back(Edit::Erase(start));
                }
            }
            Change::Clear => cleared = true,
        });
        !cleared
    }

    /// Does up to `budget` units of work; returns whether the shadow is
    /// ready for adoption (holds copy 0's content).
    ///
    /// Call only in a transaction that flipped `seq` (`Txn::begin`): it
    /// rewrites free nodes.
    fn advance(
        &mut self,
        txn: &Txn<'_, Node<T>>,
        slab: &mut Slab<Record<T>>,
        mut budget: usize,
    ) -> bool {
        while budget > 0 {
            match self.phase {
                Phase::Collect => {
                    let frontier = self.staged.last().map(|f| f.start);
                    let before = self.staged.len();
                    let done = txn.scan(
                        // Relaxed: writer-only reads under the lock.
                        |n| frontier.is_none_or(|f| n.start.load(Ordering::Relaxed) > f),
                        budget,
                        |n| self.staged.push(Fields::of(n)),
                    );
                    budget -= self.staged.len() - before;
                    if done {
                        self.phase = Phase::Reserve;
                    }
                }
                Phase::Reserve => {
                    if self.reserve.marked == 0 && slab.free_len() < self.staged.len() {
                        // Grown first, a chunk a slice, so that marking
                        // seldom grows.
                        slab.grow_free();
                        budget = budget.saturating_sub(CHUNK_COST);
                    } else if let Some(spent) = self.reserve.mark(slab, self.staged.len(), budget) {
                        budget = budget.saturating_sub(spent);
                    } else {
                        self.shadow = Shadow::new(self.staged.len());
                        self.order = VebOrder::new(self.staged.len());
                        self.phase = Phase::Build;
                        // Counts a whole slice: the build's first nodes (cold,
                        // a rank map to allocate) start with the next one,
                        // unless this write may do more (a batch,
                        // `rebalance`).
                        budget = budget.saturating_sub(SLICE);
                    }
                }
                Phase::Build => {
                    let Some(spot) = self.order.next() else {
                        self.phase = Phase::Return;
                        continue;
                    };
                    let node = self.reserve.lowest().expect("one free node per range");
                    let addr = node.as_ptr().addr();
                    self.out_of_order |= addr <= self.last;
                    self.last = addr;
                    // SAFETY: a free node of this slab (popped off its free
                    // list), in no copy; this transaction flipped `seq`
                    // (caller).
                    unsafe { slab.fill(node, self.staged.get(spot.rank)) };
                    // The node holds the range of rank `spot.rank` among those collected (in
                    // key order); the spots come from a `VebOrder` over as many, in its order;
                    // SAFETY: so with no insert or erase yet, and slab nodes as long-lived as
                    // the index, `place`'s contract holds.
                    let fresh = unsafe { self.shadow.place(spot, node) };
                    budget = budget.saturating_sub(if fresh { MAP_PAGE_COST } else { 1 });
                }
                Phase::Return if !self.staged.is_empty() => {
                    self.staged.pop_block();
                    // An unmap of 256 KiB: up to a few hundred microseconds.
                    budget = budget.saturating_sub(SLICE / 2);
                }
                Phase::Return => self.phase = Phase::CatchUp,
                Phase::CatchUp => {
                    let Some(edit) = self.pending.pop_front() else {
                        return true;
                    };
                    self.apply(edit, slab);
                    budget = budget.saturating_sub(CATCH_UP_COST);
                }
            }
        }
        false
    }

    /// Applies one change to the shadow.
    fn apply(&mut self, edit: Edit<T>, slab: &mut Slab<Record<T>>) {
        match edit {
            Edit::Put(f) => match self.shadow.find(toward(f.start)) {
                // SAFETY: a shadow node is a node of this slab.
                Slot::Occupied(n) => unsafe { slab.fill(n, f) },
                slot @ Slot::Vacant { .. } => {
                    let n = slab.alloc(f);
                    // SAFETY: a free slab node, in no copy, allocated as long as
                    // the index; `slot` is fresh.
                    unsafe { self.shadow.insert(n, slot) };
                }
            },
            Edit::Erase(start) => match self.shadow.find(toward(start)) {
                Slot::Occupied(n) => {
                    // SAFETY: `n` came from `find` just now.
                    unsafe { self.shadow.erase(n) };
                    // No reader ever reached it (it was only in the shadow).
                    slab.recycle(n);
                }
                Slot::Vacant { .. } => debug_assert!(false, "erased a range never collected"),
            },
        }
    }

    /// Gives up: every node taken goes back to the free list (none was ever
    /// reachable by a reader).
    fn abandon(mut self, slab: &mut Slab<Record<T>>) {
        self.reserve.give_back(slab);
        for n in self.shadow.nodes() {
            slab.recycle(n);
        }
    }
}

impl<T> Layout<T> {
    /// Whether a migration is running (tests).
    #[cfg(test)]
    pub(super) fn running(&self) -> bool {
        self.migration.is_some()
    }

    /// Drops a running migration without giving its nodes back: for
    /// compaction (`compact.rs`), which frees the whole slab they live in.
    pub(super) fn forget(&mut self) {
        self.migration = None;
    }

    pub(super) const fn new() -> Self {
        Layout {
            migration: None,
            adopted: 0,
            out_of_order: false,
        }
    }

    /// The end of every batch that returned: records its changes for the
    /// migration running and does a slice of it, or starts one if the
    /// writes made a rebuild due (a small tree rebuilds in place at once).
    /// Nothing in a write that changed nothing (a slice would flip `seq`
    /// for it).
    pub(super) fn settle(&mut self, txn: &mut Txn<'_, Node<T>>, slab: &mut Slab<Record<T>>) {
        if !txn.started() {
            return;
        }
        let large = txn.len() >= LAYOUT_MIN;
        if let Some(m) = &mut self.migration {
            if !m.record(txn) {
                self.abandon(slab);
            }
        } else if !large {
            if txn.rebuild_due() {
                txn.rebuild();
            }
        } else if move_due(txn) {
            self.migration = Some(Migration::new());
        }
        if self.migration.is_none() {
            // Nothing to do (the common case: most writes of most trees). A
            // large tree is rebuilt only by a migration, never in place by
            // the commit (at `IN_PLACE_MAX` nodes it still could be).
            txn.defer_rebuilds(large);
            return;
        }
        // A write of many changes (a batch) takes time in proportion anyway:
        // it may take the migration's work in proportion too, so that a bulk
        // load of n ranges leaves its tree rebuilt, as one write did before
        // (a node costs about five units over the phases).
        let mut changes = 0_usize;
        txn.changes(|_| changes += 1);
        self.step(
            txn,
            slab,
            SLICE.saturating_add(changes.saturating_mul(WORK_PER_CHANGE)),
        );
    }

    /// Rebuilds the version being built into the balanced shape within
    /// this write: a tree of at least [`LAYOUT_MIN`] nodes by a whole
    /// migration (any migration running is dropped first: what it built
    /// has missed this write's changes), a smaller one in place.
    pub(super) fn rebalance(&mut self, txn: &mut Txn<'_, Node<T>>, slab: &mut Slab<Record<T>>) {
        self.abandon(slab);
        if txn.balanced() {
        } else if txn.len() >= LAYOUT_MIN {
            txn.begin();
            self.migration = Some(Migration::new());
            self.step(txn, slab, usize::MAX);
            debug_assert!(self.migration.is_none(), "a whole migration in one write");
        } else {
            txn.rebuild();
        }
        txn.defer_rebuilds(self.migration.is_some());
    }

    fn abandon(&mut self, slab: &mut Slab<Record<T>>) {
        if let Some(m) = self.migration.take() {
            m.abandon(slab);
        }
    }

    /// A slice of the migration running, if any, then its adoption if it
    /// is ready.
    fn step(&mut self, txn: &mut Txn<'_, Node<T>>, slab: &mut Slab<Record<T>>, budget: usize) {
        // Out of `self` while it works: a panic below drops it (see the
        // module docs).
        if let Some(mut m) = self.migration.take() {
            if m.advance(txn, slab, budget) {
                self.out_of_order |= m.out_of_order;
                if cfg!(debug_assertions) {
                    assert_same_content(txn, &m.shadow);
                }
                // SAFETY: the shadow's nodes are slab nodes (allocated as
                // long as the index) in no copy, holding copy 0's content
                // (collected, then caught up with every change since).
                unsafe { txn.adopt(m.shadow) };
                self.adopted += 1;
                // Enough writes may have come meanwhile to make the next
                // move due (a batch's changes, caught up, count as updates
                // of the adopted tree).
                if move_due(txn) {
                    self.migration = Some(Migration::new());
                }
            } else {
                self.migration = Some(m);
            }
        }
        txn.defer_rebuilds(self.migration.is_some() || txn.len() >= LAYOUT_MIN);
    }
}

/// Whether a write should start moving a large tree (see [`MOVE_EVERY`]).
fn move_due<T>(txn: &Txn<'_, Node<T>>) -> bool {
    txn.len() >= LAYOUT_MIN && txn.rebuild_due() && txn.updates() >= txn.len() / MOVE_EVERY
}

/// Debug builds: the shadow holds exactly copy 0's ranges, with the same
/// fields.
fn assert_same_content<T>(txn: &Txn<'_, Node<T>>, shadow: &Shadow<Node<T>>) {
    let key = |f: Fields<Record<T>>| (f.start, f.end, f.id, f.base, f.tag, f.flags, f.module);
    let mut live = Vec::new();
    txn.scan(|_| true, usize::MAX, |n| live.push(key(Fields::of(n))));
    let built: Vec<_> = (shadow.nodes().into_iter())
        // SAFETY: shadow nodes are live slab nodes.
        .map(|n| key(Fields::of(unsafe { n.as_ref() })))
        .collect();
    assert!(live == built, "the migration lost track of a change");
}

#[cfg(all(test, not(latchtree_loom)))]
mod tests {
    use super::{LAYOUT_MIN, MOVE_EVERY};
    use crate::{AddrIndex, ModuleId};
    use std::collections::BTreeMap;

    /// The nodes' addresses in key order, and whether the copy readers use
    /// is in the balanced shape.
    fn layout(index: &AddrIndex<u64>) -> (Vec<usize>, bool) {
        index.read(|view| {
            let mut addrs = Vec::new();
            view.walk(|n| addrs.push(core::ptr::from_ref(n).addr()))?;
            Some((addrs, view.exact()))
        })
    }

    /// Whether the nodes lie at rising addresses in van Emde Boas order.
    fn in_van_emde_boas_order(addrs: &[usize]) -> bool {
        let ranks = crate::raw::van_emde_boas(addrs.len());
        ranks.windows(2).all(|w| addrs[w[0]] < addrs[w[1]])
    }

    /// `(migrations adopted, one running, a build placed a node out of
    /// order)`.
    fn migrations(index: &AddrIndex<u64>) -> (usize, bool, bool) {
        index.tree.write(
            |_, w| {
                let l = &w.layout;
                (l.adopted, l.migration.is_some(), l.out_of_order)
            },
            |_, _, _| {},
            |_, _| {},
        )
    }

    fn shuffle(keys: &mut [u64], mut x: u64) {
        for i in (1..keys.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            keys.swap(i, (x % (i as u64 + 1)) as usize);
        }
    }

    /// Growing a tree past `LAYOUT_MIN` by single inserts migrates it over
    /// many writes (each adopted tree built at rising addresses), for
    /// ascending, descending and random growth; `rebalance` lays the nodes
    /// out in van Emde Boas order within its one write, in the exact shape;
    /// the index answers as before, and later migrations reuse the memory
    /// the earlier ones freed.
    #[test]
    fn large_rebuilds_lay_nodes_out_in_van_emde_boas_order() {
        // Under Miri, past a few rebuilds in place (`LAYOUT_MIN` is 16 there).
        let n = if cfg!(miri) {
            3 * LAYOUT_MIN
        } else {
            2 * LAYOUT_MIN.max(700)
        } as u64;
        for order in ["ascending", "descending", "random"] {
            let index = AddrIndex::new();
            let mut keys: Vec<u64> = (0..n).collect();
            match order {
                "descending" => keys.reverse(),
                "random" => shuffle(&mut keys, 0x9e37_79b9_7f4a_7c15),
                _ => {}
            }
            let mut spanned = false;
            for &k in &keys {
                index.insert(k * 16..k * 16 + 8, k).unwrap();
                spanned |= migrations(&index).1;
            }
            let (adopted, _, out_of_order) = migrations(&index);
            assert!(
                adopted > 0 && spanned,
                "{order}: no write migrated the tree"
            );
            assert!(
                !out_of_order,
                "{order}: a build placed a node below the last"
            );
            index.remove(index.lookup(8 * 16).unwrap().id()).unwrap();
            index.rebalance();
            let (addrs, balanced) = layout(&index);
            assert!(
                balanced && in_van_emde_boas_order(&addrs),
                "{order}: rebalance"
            );
            assert!(!migrations(&index).1, "{order}: rebalance left a migration");
            index.check_invariants().unwrap();
            for k in 0..n {
                let hit = index.lookup(k * 16 + 3);
                assert_eq!(
                    hit.map(|h| h.range()),
                    (k != 8).then_some(k * 16..k * 16 + 8)
                );
            }
            let nodes = index
                .tree
                .write(|_, w| w.slab.nodes(), |_, _, _| {}, |_, _| {});
            assert!(
                nodes <= 3 * n as usize,
                "{order}: {nodes} nodes in the slab for {n} ranges"
            );
        }
    }

    /// A migration starts only once `len / MOVE_EVERY` updates came since
    /// the tree was last rebuilt or adopted (issue 26: at a rebuild's own
    /// `len / 8`, growth by single inserts moved every node some seven
    /// times).
    #[test]
    fn migrations_start_no_sooner_than_move_every_allows() {
        let n = if cfg!(miri) {
            3 * LAYOUT_MIN
        } else {
            (3 * LAYOUT_MIN).max(1200)
        } as u64;
        let index = AddrIndex::new();
        let (mut running, mut starts) = (false, 0);
        for k in 0..n {
            let (updates, len) =
                index
                    .tree
                    .write(|txn, _| (txn.updates(), txn.len()), |_, _, _| {}, |_, _| {});
            index.insert(k * 16..k * 16 + 8, k).unwrap();
            let now = migrations(&index).1;
            if now && !running {
                starts += 1;
                // The insert's own update and range.
                let (updates, len) = (updates + 1, len + 1);
                assert!(
                    updates >= len / MOVE_EVERY,
                    "a migration started after {updates} updates at {len} ranges"
                );
            }
            running = now;
        }
        assert!(starts > 0, "no migration started");
    }

    /// Inserts, removes, value replacements and batches (some of which
    /// panic and roll back) interleaved with migrations in progress: after
    /// every write the index equals a model, its invariants hold, and
    /// every adopted tree held every change made while it was built (debug
    /// builds check that at each adoption).
    #[test]
    fn writes_during_a_migration_reach_the_adopted_tree() {
        // Keys for trees past `LAYOUT_MIN` (4096 in release builds, where
        // the rounds grow with them), checked less often when large.
        let space = (LAYOUT_MIN as u64 * 2).max(if cfg!(miri) { 96 } else { 600 });
        let rounds = if cfg!(miri) {
            150
        } else {
            (space * 5).max(3000)
        };
        let every = if cfg!(miri) {
            25
        } else if space > 1000 {
            97
        } else {
            7
        };
        let index = AddrIndex::new();
        let mut model: BTreeMap<u64, (ModuleId, u64)> = BTreeMap::new();
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        let mut rand = move |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let (mut panicked_mid, mut wrote_mid) = (0, 0);
        for round in 0..rounds {
            // Half the keys rising (a loader's order: the inserts that make
            // rebuilds due soonest), half anywhere.
            let k = if rand(2) == 0 {
                round / 2 % space
            } else {
                rand(space)
            };
            let running = migrations(&index).1;
            match rand(8) {
                0..=3 => {
                    if let std::collections::btree_map::Entry::Vacant(e) = model.entry(k) {
                        let id = index.insert(k * 16..k * 16 + 8, round).unwrap();
                        e.insert((id, round));
                    }
                }
                4 => {
                    if let Some((id, _)) = model.remove(&k) {
                        index.remove(id).unwrap();
                    }
                }
                5 => {
                    if let Some((id, v)) = model.get_mut(&k) {
                        index.set_value(*id, round, 0).unwrap();
                        *v = round;
                    }
                }
                // Without `std` a panic inside a write aborts (`unwind.rs`).
                6 if cfg!(feature = "std") => {
                    // A batch of several changes that panics at the end.
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        index.write(|b| {
                            for j in 0..4 {
                                let _ = b.insert((space + j) * 16..(space + j) * 16 + 8, round);
                            }
                            if let Some((id, _)) = model.get(&k) {
                                b.remove(*id);
                            }
                            panic!("planned panic");
                        })
                    }));
                    assert!(r.is_err());
                    panicked_mid += usize::from(running);
                }
                _ => {
                    // A committed batch: remove one, insert two.
                    let gone = model.remove(&k);
                    let fresh: Vec<u64> = (0..2).map(|_| rand(space)).collect();
                    index.write(|b| {
                        if let Some((id, _)) = gone {
                            b.remove(id).unwrap();
                        }
                        for &f in &fresh {
                            if let std::collections::btree_map::Entry::Vacant(e) = model.entry(f) {
                                let id = b.insert(f * 16..f * 16 + 8, round).unwrap();
                                e.insert((id, round));
                            }
                        }
                    });
                }
            }
            wrote_mid += usize::from(running);
            if round % every == 0 {
                index.check_invariants().unwrap();
                let got: Vec<(u64, u64)> = index
                    .snapshot(&index.pin())
                    .iter()
                    .map(|h| (h.range().start / 16, *h.value()))
                    .collect();
                let want: Vec<(u64, u64)> = model.iter().map(|(&k, &(_, v))| (k, v)).collect();
                assert_eq!(got, want, "round {round}");
            }
        }
        let (adopted, _, _) = migrations(&index);
        eprintln!("{adopted} migrations adopted over {rounds} rounds of {space} keys");
        assert!(adopted > 2, "only {adopted} migrations adopted");
        assert!(
            wrote_mid > 0 && (panicked_mid > 0 || !cfg!(feature = "std")),
            "no write during a migration"
        );
        index.rebalance();
        index.check_invariants().unwrap();
        assert!(layout(&index).1, "rebalance gives the exact shape");
    }
}
