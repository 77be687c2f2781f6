//! Where a large index's range nodes lie in memory: when a tree is moved
//! into fresh memory in van Emde Boas order, and how much of that work one
//! write does ([`LayoutPolicy`]); the move itself is `migration.rs`'s.
//!
//! Nodes are allocated in the order ranges arrive, which for a loader or a
//! JIT is address order, so a balanced tree over them keeps each level's
//! nodes spread across the whole slab: past the last-level cache every
//! node of a lookup's path lies on its own page (a TLB miss a level). So a
//! tree of at least [`LayoutPolicy::layout_min`] ranges is rebuilt by a
//! *migration* into fresh slab memory in van Emde Boas order
//! (`raw::VebOrder`): a subtree of 4 or 5 levels then shares a 4 KiB page.
//! A smaller tree is rebuilt in place by the commit that makes it due
//! (`raw`'s own cadence).
//!
//! # When
//!
//! * A migration starts once the tree is due a rebuild (`Txn::rebuild_due`)
//!   and [`LayoutPolicy::move_every`] allows it, and never while a tree an
//!   earlier migration replaced still holds memory (`Txn::retiring`): so at
//!   most one replaced tree waits at a time, and the slab stays within
//!   about twice the largest live tree (`tests.rs` checks the bound over
//!   random operation mixes).
//! * Each write that changed something does a slice of the migration
//!   running ([`LayoutPolicy::slice`], plus
//!   [`LayoutPolicy::work_per_change`] for each change it made, so that a
//!   bulk batch leaves its tree migrated), and gives back up to
//!   [`LayoutPolicy::release_per_write`] nodes of the replaced tree.
//! * [`rebalance`](Layout::rebalance) runs a whole migration in its one
//!   write (after giving back every replaced tree first), for the exact
//!   shape at once.
//!
//! A large tree is rebuilt only by migration, never in place by its commit
//! (the index's tree takes `layout_min - 1` as its in-place limit): between
//! two moves it keeps the shape it has, which the red-black rules bound.

mod migration;
#[cfg(all(test, not(latchtree_loom)))]
mod tests;

use super::record::Record;
use super::slab::{Node, Slab};
use crate::raw::Txn;
use alloc::boxed::Box;
use migration::Migration;

/// How an [`AddrIndex`](crate::AddrIndex) lays out a large tree: when a
/// rebuild moves it into fresh memory, and how much of that work one write
/// does. One value per index, fixed when it is created, the same in debug
/// and release builds; [`AddrIndex::new`](crate::AddrIndex::new) takes
/// [`DEFAULT`](LayoutPolicy::DEFAULT). Not part of the documented API: for
/// tests that need small thresholds (they ask for them with
/// [`AddrIndex::with_policy`](crate::AddrIndex::with_policy)) and for
/// measurements.
///
/// Work is counted in *units*: a range collected, a node built, four
/// recycled free nodes reserved (or one never written) each count one;
/// about 50 ns a unit with cold nodes.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayoutPolicy {
    /// The fewest ranges a tree must hold for a rebuild to move it: below
    /// that its nodes' first cache lines fit the L2 cache and its pages the
    /// first-level TLB, so the order in memory hardly matters (4096 in
    /// [`DEFAULT`](LayoutPolicy::DEFAULT); a rebuild in place of 4096 nodes
    /// takes well under a millisecond).
    pub layout_min: usize,
    /// A migration starts only once the inserts and erases since the last
    /// rebuild or adoption reach `len / move_every`. A migration moves every
    /// node (some 550 instructions a node over its phases), so growth by
    /// single inserts pays about `move_every + 1` moves a node; 2 kept
    /// growth to 65 536 under 4,000 instructions an insert in every order,
    /// at some 3 % of lookup time on a tree grown since its last move.
    pub move_every: usize,
    /// The units of migration work at the end of one write (512: a slice
    /// takes some 25 µs; 2048 gave a p99 insert twice as slow).
    pub slice: usize,
    /// The units a write may add to its slice for each change it made:
    /// more than catching the change up costs, so that a migration keeps
    /// up with writes of any size.
    pub work_per_change: usize,
    /// What catching up one change costs: a search of the shadow from its
    /// root, a cold node a level (some 1.5 µs at 262 144 ranges).
    pub catch_up_cost: usize,
    /// What placing a node costs when it starts a page of the shadow's rank
    /// map: a fresh 4 KiB page to allocate and fault in (2–7 µs).
    pub map_page_cost: usize,
    /// The most nodes of a tree a migration replaced that one write gives
    /// back to the slab's free list (512: some 25 µs of cold nodes; a whole
    /// tree of 262 144 at once took milliseconds).
    pub release_per_write: usize,
}

impl LayoutPolicy {
    /// What [`AddrIndex::new`](crate::AddrIndex::new) uses. Under the
    /// crate's loom build, `layout_min` is 4 (its models move 4 nodes).
    pub const DEFAULT: LayoutPolicy = LayoutPolicy {
        layout_min: if cfg!(latchtree_loom) { 4 } else { 4096 },
        move_every: 2,
        slice: 512,
        work_per_change: 32,
        catch_up_cost: 24,
        map_page_cost: 64,
        release_per_write: 512,
    };

    /// Tiny thresholds, for tests: trees from `layout_min` ranges up
    /// migrate, over many writes (a few units a slice), so that small
    /// trees exercise every phase with writes interleaved.
    pub const fn small(layout_min: usize) -> LayoutPolicy {
        LayoutPolicy {
            layout_min,
            move_every: 8,
            slice: 3,
            work_per_change: 8,
            catch_up_cost: 1,
            map_page_cost: 1,
            release_per_write: 16,
        }
    }

    /// The units one write of a `synchronize` does ([`Layout::finish`]):
    /// 16 slices (8192 units, some 0.4 ms with cold nodes), and enough to
    /// move a node whatever the slice.
    pub(super) const fn finish_units(&self) -> usize {
        let units = self.slice.saturating_mul(16);
        if units > MOVE_UNITS {
            units
        } else {
            MOVE_UNITS
        }
    }

    /// What growing the slab by a chunk counts against a slice: more than
    /// a single insert's whole budget, so that such a write grows one chunk
    /// at most.
    const fn chunk_cost(&self) -> usize {
        2 * self.slice
    }
}

impl Default for LayoutPolicy {
    fn default() -> Self {
        LayoutPolicy::DEFAULT
    }
}

/// What moving one node out of a chunk to empty it costs in units
/// ([`Layout::finish`]): a cold node read and a fresh one written and
/// linked in both copies (some 375 ns).
const MOVE_UNITS: usize = 8;

/// The wholly free chunks one write of a `synchronize` purges
/// ([`Layout::finish`]).
const PURGES_PER_FINISH: usize = 1;

/// What a migration costs a node over its phases, in units, at most.
const MIGRATION_UNITS: usize = 8;

/// The writer's layout state: its policy and the migration running, if any.
pub(super) struct Layout<T> {
    policy: LayoutPolicy,
    migration: Option<Box<Migration<T>>>,
    /// Migrations adopted so far (tests).
    pub(super) adopted: usize,
    /// Whether a build ever placed a node at a lower address than the one
    /// before it (tests: never, the reserve hands nodes out lowest first).
    pub(super) out_of_order: bool,
}

impl<T> Layout<T> {
    pub(super) const fn new(policy: LayoutPolicy) -> Self {
        Layout {
            policy,
            migration: None,
            adopted: 0,
            out_of_order: false,
        }
    }

    /// The policy it follows.
    pub(super) fn policy(&self) -> &LayoutPolicy {
        &self.policy
    }

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

    /// The end of every batch that returned: gives back a slice of the
    /// tree the last migration replaced, records the write's changes for
    /// the migration running and does a slice of it, or starts one if the
    /// writes made a rebuild due (a small tree rebuilds in place at once).
    /// Nothing in a write that changed nothing (a slice would flip `seq`
    /// for it).
    pub(super) fn settle(&mut self, txn: &mut Txn<'_, Node<T>>, slab: &mut Slab<Record<T>>) {
        if !txn.started() {
            return;
        }
        txn.release_retired(self.policy.release_per_write, |n| slab.recycle(n));
        slab.purge_emptied();
        if let Some(m) = &mut self.migration {
            if !m.record(txn) {
                self.abandon(slab);
            }
        } else if self.move_due(txn) {
            self.migration = Some(Migration::new());
        }
        if self.migration.is_none() {
            // Nothing to do (the common case: most writes of most trees; a
            // small tree is rebuilt in place by the commit when due).
            return;
        }
        // A write of many changes (a batch) takes time in proportion anyway:
        // it may take the migration's work in proportion too, so that a bulk
        // load of n ranges leaves its tree rebuilt (a node costs about five
        // units over the phases).
        let mut changes = 0_usize;
        txn.changes(|_| changes += 1);
        let budget =
            (self.policy.slice).saturating_add(changes.saturating_mul(self.policy.work_per_change));
        self.step(txn, slab, budget);
    }

    /// Rebuilds the version being built into the balanced shape within
    /// this write: a tree of at least `layout_min` nodes by a whole
    /// migration (any migration running is dropped first: what it built
    /// has missed this write's changes), a smaller one in place.
    pub(super) fn rebalance(&mut self, txn: &mut Txn<'_, Node<T>>, slab: &mut Slab<Record<T>>) {
        self.abandon(slab);
        if txn.balanced() {
            return;
        }
        // The trees earlier migrations replaced go back first (after this
        // write's flip, as any release: `slab.rs`), so that this one builds
        // in their memory.
        txn.begin();
        txn.release_retired(usize::MAX, |n| slab.recycle(n));
        if txn.len() >= self.policy.layout_min {
            self.migration = Some(Migration::new());
            self.step(txn, slab, usize::MAX);
            debug_assert!(self.migration.is_none(), "a whole migration in one write");
        } else {
            txn.rebuild();
        }
    }

    /// Does a bounded slice of what writes do a slice at a time, and gives
    /// memory back, for a caller that wants it back now (`synchronize`,
    /// which repeats it until it returns false). One kind of work a write,
    /// in this order, each taking at most [`LayoutPolicy::finish_units`]
    /// units: the trees a migration replaced, given back; the migration
    /// running, if any (a move that came due meanwhile is started here);
    /// if the live nodes fit in the free nodes of older chunks, a
    /// defragmentation that moves the nodes of the newer chunks there
    /// (`Txn::replace`: O(1) a node, and a reader sees the old node or the
    /// new one, each whole), so that those chunks empty; last, once nothing
    /// can fill a chunk again, the wholly free chunks' pages, one chunk a
    /// write. So no write of a `synchronize` holds the writer lock long
    /// (besides this, the write's own `settle` slice): one write did nearly
    /// all of it before, and a writer beside it waited up to 9.7 ms at
    /// 262 144 ranges with three in four removed; now 0.3–0.5 ms
    /// (`benches/src/bin/synchronize.rs`). Returns
    /// whether another write has more to do or to give back: a tree swapped
    /// in or nodes moved leave copy 1 only at this write's commit. A write
    /// with nothing to do changes nothing (and is not counted).
    pub(super) fn finish(
        &mut self,
        txn: &mut Txn<'_, Node<T>>,
        slab: &mut Slab<Record<T>>,
    ) -> bool {
        let work = self.migration.is_some()
            || txn.retiring()
            || slab.has_free_chunk()
            || self.evacuation(txn, slab).is_some();
        if !work {
            return false;
        }
        let budget = self.policy.finish_units();
        // Every release, purge and rewrite below comes after this write's
        // flip (`slab.rs`).
        txn.begin();
        txn.release_retired(budget, |n| slab.recycle(n));
        if txn.retiring() {
            // The rest next write: until the replaced trees are back, no
            // move starts and no defragmentation can count them.
            return true;
        }
        if self.migration.is_none() && self.move_due(txn) {
            self.migration = Some(Migration::new());
        }
        if self.migration.is_some() {
            self.step(txn, slab, budget);
            return true;
        }
        if let Some(first) = self.evacuation(txn, slab) {
            for old in slab.nodes_from(first, budget / MOVE_UNITS) {
                let new = slab.pop_free().expect("evacuation: room in older chunks");
                // Every node in use is in the tree (`evacuation`), so `old`
                // is a live node of copy 0, and `new` a free node in no
                // copy, written with `old`'s fields (its range is `old`'s);
                // this transaction flipped `seq` (above).
                // SAFETY: so `fill` writes an unreachable node and
                // `replace` swaps a live node of copy 0 for it.
                unsafe {
                    slab.fill(new, old.as_ref().fields());
                    txn.replace(old, new);
                }
            }
            return true;
        }
        // Purged last: a migration's reservation or a defragmentation would
        // fill the chunks again.
        !slab.purge_free_chunks(PURGES_PER_FINISH)
    }

    /// A bound on the writes that [`finish`](Layout::finish) needs to
    /// finish the work `slab` can hold, four times what it can take
    /// (every node released, moved by a migration and moved again by a
    /// defragmentation, a slice at a time; every chunk, and as many again
    /// grown by the migration, purged), so that only writers on other
    /// threads that keep making new work reach it: what `synchronize`
    /// bounds its loop by, so that they cannot keep it from returning.
    pub(super) fn finish_writes(&self, slab: &Slab<Record<T>>) -> usize {
        let units = slab
            .nodes()
            .saturating_mul(1 + MIGRATION_UNITS + MOVE_UNITS);
        let chunks = 2 * slab.chunk_count() / PURGES_PER_FINISH;
        (16 + units / self.policy.finish_units() + chunks).saturating_mul(4)
    }

    /// The oldest chunk from which on the nodes in use can all move to free
    /// nodes of older chunks ([`Slab::evacuation`]), if the OS lets emptied
    /// chunks be purged and every node in use is in the tree (no migration
    /// running, no replaced tree waiting, no other change in this write).
    fn evacuation(&self, txn: &Txn<'_, Node<T>>, slab: &Slab<Record<T>>) -> Option<usize> {
        let settled = self.migration.is_none() && !txn.retiring() && !txn.changed();
        let in_use = slab.nodes() - slab.free_len();
        if !crate::addr_index::slab::CAN_PURGE || !settled || in_use != txn.len() {
            return None;
        }
        slab.evacuation()
    }

    fn abandon(&mut self, slab: &mut Slab<Record<T>>) {
        if let Some(m) = self.migration.take() {
            m.abandon(slab);
        }
    }

    /// A slice of the migration running, if any, then its adoption if it
    /// is ready.
    fn step(&mut self, txn: &mut Txn<'_, Node<T>>, slab: &mut Slab<Record<T>>, budget: usize) {
        // Out of `self` while it works: a panic below drops it (see
        // `migration.rs`).
        if let Some(mut m) = self.migration.take() {
            if m.advance(txn, slab, &self.policy, budget) {
                self.out_of_order |= m.out_of_order();
                // SAFETY: the shadow's nodes are slab nodes (allocated as
                // long as the index) in no copy, holding copy 0's content
                // (collected, then caught up with every change since).
                unsafe { m.adopt(txn) };
                self.adopted += 1;
            } else {
                self.migration = Some(m);
            }
        }
    }

    /// Whether a write should start moving a large tree (see
    /// [`LayoutPolicy::move_every`]).
    fn move_due(&self, txn: &Txn<'_, Node<T>>) -> bool {
        let p = &self.policy;
        txn.len() >= p.layout_min
            && txn.rebuild_due()
            && txn.updates() >= txn.len() / p.move_every
            && !txn.retiring()
    }
}
