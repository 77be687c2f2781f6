//! A migration: a rebuild of a large tree into fresh slab memory, in van
//! Emde Boas order, done a slice per write off to the side where no reader
//! can reach it (`mod.rs` says when one starts and how large a slice is).
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
//!    (`Txn::release_retired`).
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
//! nodes then stay unused in the slab until the index is dropped or
//! compacted (memory, never unsoundness), and the write rolls back as
//! usual.
//!
//! The adopted tree is the balanced shape changed by the writes caught up,
//! so its readers follow the exact plan only if no write came meanwhile.

use super::LayoutPolicy;
use crate::addr_index::record::Record;
use crate::addr_index::slab::{Fields, Node, Slab};
use crate::raw::{Change, Dir, Shadow, Slot, Txn, VebOrder};
use crate::sync::Ordering;
use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::vec;
use alloc::vec::Vec;
use core::ptr::NonNull;

/// A rebuild into fresh memory in progress; see the module docs.
pub(super) struct Migration<T> {
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
/// vector of many MiB (14 MiB at n = 262 144) takes a millisecond or more
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

    #[inline]
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

    #[inline]
    fn get(&self, i: usize) -> Fields<Record<T>> {
        self.blocks[i / BLOCK][i % BLOCK]
    }

    /// Frees the last block.
    fn pop_block(&mut self) {
        self.blocks.pop();
    }
}

/// Free nodes for a build, handed out lowest address first, without a
/// sort (sorting the free list would be a tenth of a growth's work): a
/// bitmap of the free nodes of each chunk, lowest chunk first, filled a
/// slice at a time with nodes popped off the slab (`mark`: the oldest
/// chunks' free nodes first, or fresh chunks), then scanned upwards
/// (`lowest`). It takes only the
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
    /// (writing it may fault its page in: some 7 µs a 4 KiB page of 32
    /// nodes). Returns the units spent, or `None` once `need`
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
        let budget = budget.saturating_mul(4);
        while self.marked < need && quarters < budget {
            // A word's free nodes at a time, no more than the budget's
            // worth at a whole unit each.
            let max = (need - self.marked).min((budget - quarters).div_ceil(4));
            let Some((n, taken, fresh)) = slab.pop_free_run(max) else {
                slab.grow_free();
                self.resync(slab);
                continue;
            };
            let count = taken.count_ones() as usize;
            quarters += (count - fresh) + 4 * fresh;
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
            // `n` is node `64 w` of its chunk (`pop_free_run`).
            let i = (a - self.spans[c].0.as_ptr().addr()) / size;
            debug_assert!(i < self.spans[c].1, "a node outside every chunk");
            debug_assert_eq!(i % 64, 0, "a run starts a word");
            self.bits[c][i / 64] |= taken;
            self.marked += count;
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
    pub(super) fn new() -> Box<Self> {
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
    pub(super) fn record(&mut self, txn: &Txn<'_, Node<T>>) -> bool {
        let frontier = match self.phase {
            Phase::Collect => self.staged.last().map(|f| f.hit.start),
            _ => Some(u64::MAX),
        };
        let Some(frontier) = frontier else {
            return true;
        };
        let mut cleared = false;
        txn.changes(|c| match c {
            Change::Put(n) => {
                let f = n.fields();
                if f.hit.start <= frontier {
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
    pub(super) fn advance(
        &mut self,
        txn: &Txn<'_, Node<T>>,
        slab: &mut Slab<Record<T>>,
        policy: &LayoutPolicy,
        mut budget: usize,
    ) -> bool {
        while budget > 0 {
            match self.phase {
                Phase::Collect => {
                    let frontier = self.staged.last().map(|f| f.hit.start);
                    let before = self.staged.len();
                    let done = txn.scan(
                        // Relaxed: writer-only reads under the lock.
                        |n| frontier.is_none_or(|f| n.start.load(Ordering::Relaxed) > f),
                        budget,
                        |n| self.staged.push(n.fields()),
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
                        budget = budget.saturating_sub(policy.chunk_cost());
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
                        budget = budget.saturating_sub(policy.slice);
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
                    budget = budget.saturating_sub(if fresh { policy.map_page_cost } else { 1 });
                }
                Phase::Return if !self.staged.is_empty() => {
                    self.staged.pop_block();
                    // An unmap of 256 KiB: up to a few hundred microseconds.
                    budget = budget.saturating_sub(policy.slice / 2);
                }
                Phase::Return => self.phase = Phase::CatchUp,
                Phase::CatchUp => {
                    let Some(edit) = self.pending.pop_front() else {
                        return true;
                    };
                    self.apply(edit, slab);
                    budget = budget.saturating_sub(policy.catch_up_cost);
                }
            }
        }
        false
    }

    /// Applies one change to the shadow.
    fn apply(&mut self, edit: Edit<T>, slab: &mut Slab<Record<T>>) {
        match edit {
            Edit::Put(f) => match self.shadow.find(toward(f.hit.start)) {
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

    /// Whether a build placed a node at a lower address than the one
    /// before it (tests: never, the reserve hands nodes out lowest first).
    pub(super) fn out_of_order(&self) -> bool {
        self.out_of_order
    }

    /// Swaps the finished shadow in for copy 0 ([`Txn::adopt`]); the tree
    /// it replaces is given back later (`Txn::release_retired`).
    ///
    /// # Safety
    /// [`advance`](Migration::advance) returned `true` and no change came
    /// since: the shadow holds copy 0's content.
    pub(super) unsafe fn adopt(self: Box<Self>, txn: &mut Txn<'_, Node<T>>) {
        if cfg!(debug_assertions) {
            assert_same_content(txn, &self.shadow);
        }
        // SAFETY: the shadow's nodes are slab nodes (allocated as long as
        // the index) in no copy, holding copy 0's content (caller).
        unsafe { txn.adopt(self.shadow) };
    }

    /// Gives up: every node taken goes back to the free list (none was ever
    /// reachable by a reader).
    pub(super) fn abandon(mut self, slab: &mut Slab<Record<T>>) {
        self.reserve.give_back(slab);
        for n in self.shadow.nodes() {
            slab.recycle(n);
        }
    }
}

/// Debug builds: the shadow holds exactly copy 0's ranges, with the same
/// fields.
fn assert_same_content<T>(txn: &Txn<'_, Node<T>>, shadow: &Shadow<Node<T>>) {
    let key = |f: Fields<Record<T>>| (f.hit, f.module);
    let mut live = Vec::new();
    txn.scan(|_| true, usize::MAX, |n| live.push(key(n.fields())));
    let built: Vec<_> = (shadow.nodes().into_iter())
        // SAFETY: shadow nodes are live slab nodes.
        .map(|n| key(unsafe { n.as_ref() }.fields()))
        .collect();
    assert!(live == built, "the migration lost track of a change");
}
