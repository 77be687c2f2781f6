//! Bulk build: links a sorted run of fresh nodes into a balanced red-black
//! tree in O(n), in both copies at once, as one version.
//!
//! Splitting at the middle makes every subtree's halves differ in size by at
//! most one, so every nil link of an `n`-node tree lies at depth
//! `floor(log2(n + 1))` or one below. Colouring the nodes above that depth
//! black and those at it red gives every root-to-nil path the same number of
//! black nodes, and no red node has a red child (a red node's children are
//! nil). The checker verifies it in the tests.

use super::links::{Dir, Linked};
use super::tree::RawTree;
use crate::sync::Ordering;
use core::ptr::{self, NonNull};

impl<N: Linked, W> RawTree<N, W> {
    /// Makes `nodes` the whole content of this empty tree, in both copies,
    /// and counts one write (none if `nodes` is empty: nothing changed).
    ///
    /// # Safety
    /// The tree is empty; `nodes` are live, distinct, in no tree, in
    /// strictly increasing key order, and the tree owns them from now on.
    /// `&mut self`: no reader or writer runs meanwhile.
    pub(crate) unsafe fn build(&mut self, nodes: &[NonNull<N>]) {
        let s = &self.shared;
        debug_assert!(s.heads[0].root.load(Ordering::Relaxed).is_null());
        if nodes.is_empty() {
            return;
        }
        let full = (nodes.len() + 1).ilog2() as usize;
        // SAFETY: forwarded from the caller.
        let root = unsafe { link(nodes, ptr::null_mut(), 0, full) };
        for copy in 0..2 {
            // Release, as every root store: the tree may be shared later by
            // any means, and a reader's Acquire load of the root pairs with it.
            s.heads[copy]
                .root
                .store(root, super::links::link_store_order());
            s.heads[copy].len.store(nodes.len(), Ordering::Relaxed);
            let side = super::rbtree::Side::new(&s.heads[copy].root, copy);
            // SAFETY: the copy is the valid red-black tree just linked.
            let depth = unsafe { side.depth_bound() };
            // Relaxed: as the lengths; `&mut self` excludes readers.
            s.heads[copy].depth.store(depth, Ordering::Relaxed);
        }
        s.latch.count_write();
    }
}

/// Links `nodes` as a subtree under `parent` at `depth` and returns its root
/// (null for none). Nodes at depth `full` are red, the others black.
///
/// # Safety
/// As for [`RawTree::build`]; `parent` is null or one of the nodes.
unsafe fn link<N: Linked>(
    nodes: &[NonNull<N>],
    parent: *mut N,
    depth: usize,
    full: usize,
) -> *mut N {
    let Some(&mid) = nodes.get(nodes.len() / 2) else {
        return ptr::null_mut();
    };
    let n = mid.as_ptr();
    let half = nodes.len() / 2;
    // SAFETY: forwarded; the halves are disjoint runs of the same slice.
    let (left, right) = unsafe {
        (
            link(&nodes[..half], n, depth + 1, full),
            link(&nodes[half + 1..], n, depth + 1, full),
        )
    };
    // SAFETY: `mid` is live and owned by the tree (caller).
    let node = unsafe { mid.as_ref() };
    for copy in 0..2 {
        let l = node.links(copy);
        l.set_child(Dir::Left, left);
        l.set_child(Dir::Right, right);
        l.set_parent_color(parent, depth < full);
    }
    n
}
