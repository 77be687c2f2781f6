//! Where a large index's range nodes lie in memory.
//!
//! Nodes are allocated in the order ranges arrive, which for a loader or a
//! JIT is address order, so a balanced tree over them keeps each level's
//! nodes spread across the whole slab: at n = 262 144 (32 MiB of nodes) a
//! lookup's 18 nodes lie on 18 different pages, and every one of them is a
//! TLB miss (DESIGN §7b). So whenever a write leaves a large tree freshly
//! rebuilt, it rebuilds it by moving every node into fresh slab memory
//! in van Emde Boas order (`raw::build::van_emde_boas`): a subtree of 4 or 5
//! levels then shares a 4 KiB page, and a lookup touches 4 to 6 pages.
//!
//! The move is a rebuild that links copies instead of the nodes themselves
//! (`Txn::relocate`): a copy of each node, with the same fields, allocated
//! at rising addresses in van Emde Boas order, takes its place in copy 0,
//! the log replays that on copy 1, and the old nodes go back to the free
//! list once they left both copies, like any replaced node. It walks the
//! nodes once, as the rebuild in place it stands for does, but also copies
//! them and sorts the free list (measured below). Readers see the
//! old nodes or the new ones, each whole (`slab.rs`), and a reader that
//! overlaps the move retries, as with any write. Records hold no node
//! pointers (a module's nodes are found by address), so nothing else
//! changes. At rest the slab holds at most about twice the nodes of the
//! largest tree it held: a move takes the lowest free nodes first
//! (`Slab::alloc_run`), so the next one reuses the memory the last one
//! freed.
//!
//! Measured (callgrind, a tree grown by 65 536 single inserts; `orders` at
//! n = 262 144, 2-core VM): moving at every rebuild costs 7,000
//! instructions an insert against 4,700 without moves (a third of the
//! difference sorts the free list), and makes lookups 0.70–0.87× the
//! previous ones in every growth order. Moving only every `len / 4`
//! updates, and rebuilding in place in between, cost 5,500 but kept only
//! 0.93× on randomly grown trees (their newer nodes lie anywhere), so every
//! rebuild moves: inserts are rare next to lookups in this index's users.

use super::index::Node;
use super::record::Record;
use super::slab::Fields;
use super::slab::Slab;
use crate::raw::Txn;
use core::ptr::NonNull;

/// The fewest nodes a tree must hold for a rebuild to move them: below
/// that, the tree's first cache lines (64 bytes a node) fit the L2 cache and
/// its pages the first-level TLB, so the order in memory hardly matters, and
/// a move would only cost memory. Tiny in debug builds, so that the model
/// tests and the fuzz targets move small trees; 4 under loom, whose models
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

/// Rebuilds copy 0 into fresh slab memory in van Emde Boas order: one
/// pass that relinks and moves every node (`Txn::relocate`).
pub(super) fn relocate<T>(txn: &mut Txn<'_, Node<T>>, slab: &mut Slab<Record<T>>) {
    // `relocate` flips to odd before it calls `place`, so the allocations
    // below may rewrite recycled nodes (`Slab::alloc`).
    let place = |old: &[NonNull<Node<T>>]| {
        // SAFETY: the nodes of copy 0 are live while the writer lock is held.
        slab.alloc_run(old.iter().map(|n| Fields::of(unsafe { n.as_ref() })))
    };
    // SAFETY: `alloc_run` gives one free node per node, each a copy of its
    // original (so holding its key), in no tree, allocated as long as the
    // index.
    unsafe { txn.relocate(place) };
}

#[cfg(all(test, not(latchtree_loom)))]
mod tests {
    use super::LAYOUT_MIN;
    use crate::AddrIndex;

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

    /// Every rebuild of a tree of at least `LAYOUT_MIN` nodes, the ones
    /// writes make on their own and `rebalance`, lays the nodes out in van
    /// Emde Boas order, for ascending, descending and random growth; the
    /// index answers as before, and a later move reuses the memory the
    /// last one freed.
    #[test]
    fn large_rebuilds_lay_nodes_out_in_van_emde_boas_order() {
        let n = LAYOUT_MIN.max(if cfg!(miri) { 16 } else { 700 }) as u64 * 2;
        for order in ["ascending", "descending", "random"] {
            let index = AddrIndex::new();
            let mut keys: Vec<u64> = (0..n).collect();
            match order {
                "descending" => keys.reverse(),
                "random" => {
                    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
                    for i in (1..keys.len()).rev() {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        keys.swap(i, (x % (i as u64 + 1)) as usize);
                    }
                }
                _ => {}
            }
            let mut laid_out = 0;
            for &k in &keys {
                index.insert(k * 16..k * 16 + 8, k).unwrap();
                let (addrs, balanced) = layout(&index);
                if balanced && addrs.len() >= LAYOUT_MIN {
                    assert!(
                        in_van_emde_boas_order(&addrs),
                        "{order}: rebuilt at {}",
                        addrs.len()
                    );
                    laid_out += 1;
                }
            }
            assert!(laid_out > 0, "{order}: no write rebuilt the tree");
            index.remove(index.lookup(8 * 16).unwrap().id()).unwrap();
            index.rebalance();
            let (addrs, balanced) = layout(&index);
            assert!(
                balanced && in_van_emde_boas_order(&addrs),
                "{order}: rebalance"
            );
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
}
