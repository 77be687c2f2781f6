//! Red-black insertion, erasure and replacement on one copy's link set.
//!
//! Every function here runs under the writer lock, on the copy that readers
//! are *not* using (see `latch`), once for copy 0 and then identically for
//! copy 1. Because both copies always receive the same operations in the same
//! order, they always have the same shape and colours; the transaction log in
//! `tree` relies on that to replay a batch without re-running user code.
//!
//! The algorithms are the textbook ones (insert fix-up with the uncle cases,
//! erase with transplant and the four sibling cases), written over `Dir` so
//! that each mirror-image case is written once. Nil children are null
//! pointers, which count as black.
//!
//! Nodes that keep a [`Height`](super::links::Height) have it kept here on
//! copy 0 (the copy whose shape a write's plan is taken from), by a side
//! made with [`Side::keeping_heights`]: a node's height is recomputed
//! whenever its children change (`fix_height`), and the change carried up
//! its ancestors until one keeps its height (`propagate`). Copy 1's replay
//! and the shadow (`shadow.rs`) leave heights alone.

use super::links::{Dir, LinkRef, Linked, link_store_order};
use crate::sync::{AtomicPtr, Ordering};

/// Copy `C` of the tree (0 or 1), as seen by the writer. The copy is a
/// type parameter, so every link access picks its link set at compile time
/// (a branch on a runtime copy at every access: 79 more instructions of a
/// `LatchTree` insert + remove at n = 84).
pub(crate) struct Side<'t, N, const C: usize> {
    root: &'t AtomicPtr<N>,
    /// Keeps the nodes' heights (copy 0 of nodes that have one, while the
    /// tree's shape says they are kept: `txn::Shape::heights`).
    heights: bool,
}

impl<'t, N: Linked> Side<'t, N, 0> {
    /// Copy 0, keeping its nodes' heights if `heights` (and they have one).
    pub(crate) fn keeping_heights(root: &'t AtomicPtr<N>, heights: bool) -> Self {
        Side {
            root,
            heights: heights && N::HAS_HEIGHT,
        }
    }
}

impl<'t, N: Linked, const C: usize> Side<'t, N, C> {
    /// A side that keeps no heights.
    pub(crate) fn new(root: &'t AtomicPtr<N>) -> Self {
        const { assert!(C < 2, "a tree has copies 0 and 1") };
        Side {
            root,
            heights: false,
        }
    }

    pub(crate) fn root(&self) -> *mut N {
        self.root.load(Ordering::Relaxed)
    }

    fn set_root(&self, n: *mut N) {
        // Release: pairs with the reader's Acquire load of the root.
        self.root.store(n, link_store_order());
    }

    /// # Safety
    /// `n` is non-null and points to a live node.
    unsafe fn links(&self, n: *mut N) -> LinkRef<'t, N> {
        // The caller promises `n` is live; nodes outlive every writer operation that can reach them
        // (they are released only after the transaction that unlinked them has finished).
        // SAFETY: so `n` points to a live node.
        unsafe { (*n).links(C) }
    }

    /// # Safety
    /// `n` is non-null and live.
    pub(crate) unsafe fn child(&self, n: *mut N, dir: Dir) -> *mut N {
        // SAFETY: forwarded from the caller.
        unsafe { self.links(n) }.load_child(dir)
    }

    /// # Safety
    /// `n` is non-null and live; `c` is null or live.
    unsafe fn set_child(&self, n: *mut N, dir: Dir, c: *mut N) {
        // SAFETY: forwarded from the caller.
        unsafe { self.links(n).set_child(dir, c) };
    }

    /// # Safety
    /// `n` is non-null and live.
    pub(crate) unsafe fn parent(&self, n: *mut N) -> *mut N {
        // SAFETY: forwarded from the caller.
        unsafe { self.links(n) }.parent()
    }

    /// # Safety
    /// `n` is null or live. Null (nil) counts as black.
    pub(crate) unsafe fn is_red(&self, n: *mut N) -> bool {
        // SAFETY: non-null here, live by the caller's promise.
        !n.is_null() && unsafe { self.links(n) }.is_red()
    }

    /// # Safety
    /// `n` is non-null and live.
    unsafe fn set_black(&self, n: *mut N, black: bool) {
        // SAFETY: forwarded from the caller.
        unsafe { self.links(n) }.set_black(black);
    }

    /// # Safety
    /// `n` is non-null and live.
    unsafe fn set_parent(&self, n: *mut N, p: *mut N) {
        // SAFETY: forwarded from the caller.
        unsafe { self.links(n) }.set_parent(p);
    }

    /// Whether this side keeps heights.
    #[inline(always)]
    fn keeps_heights(&self) -> bool {
        // The type's answer first: for nodes without heights every check
        // below folds away.
        C == 0 && N::HAS_HEIGHT && self.heights
    }

    /// The height of `n`'s subtree (0 for nil).
    ///
    /// # Safety
    /// `n` is null or live; this side keeps heights.
    unsafe fn height_of(n: *mut N) -> usize {
        // SAFETY: null or live (caller).
        unsafe { n.as_ref() }.map_or(0, |n| n.height().map_or(0, |h| h.get()))
    }

    /// Recomputes `n`'s height from its children's; whether it changed.
    ///
    /// # Safety
    /// `n` is a live node of this copy; this side keeps heights, and its
    /// children's heights are right.
    unsafe fn fix_height(&self, n: *mut N) -> bool {
        // SAFETY: `n` and its children are live nodes of this copy (caller).
        unsafe {
            let l = Self::height_of(self.child(n, Dir::Left));
            let r = Self::height_of(self.child(n, Dir::Right));
            let h = 1 + l.max(r);
            let Some(word) = (*n).height() else {
                return false;
            };
            if word.get() == h {
                return false;
            }
            word.set(h);
            true
        }
    }

    /// After `n`'s children changed: recomputes the heights from `n` up,
    /// until a node keeps its height; the nodes above it cannot change
    /// then. A no-op on a side that keeps no heights.
    ///
    /// # Safety
    /// `n` is null or a live node of this copy; every other node records
    /// the height its subtree has, or (a node that took another's place
    /// above `n`) the height that place had, which stays right unless the
    /// change reaches it.
    unsafe fn propagate(&self, mut n: *mut N) {
        if !self.keeps_heights() {
            return;
        }
        // SAFETY: `n` and its ancestors are live nodes of this copy; each
        // is fixed after its children (caller, and the walk goes up).
        unsafe {
            while !n.is_null() && self.fix_height(n) {
                n = self.parent(n);
            }
        }
    }

    /// Recomputes every node's height from scratch, bottom up (a rollback's
    /// copy 0, relinked like copy 1 whatever its heights said). A no-op on
    /// a side that keeps no heights.
    ///
    /// # Safety
    /// The copy is a valid tree of live nodes.
    pub(crate) unsafe fn recompute_heights(&self) {
        /// The height of `n`'s subtree, recorded in each of its nodes.
        ///
        /// # Safety
        /// `n` is null or a live node of `side`'s copy.
        unsafe fn walk<N: Linked, const C: usize>(side: &Side<'_, N, C>, n: *mut N) -> usize {
            if n.is_null() {
                return 0;
            }
            // SAFETY: `n` and its descendants are live nodes of the copy;
            // the recursion is as deep as the tree (at most `MAX_DEPTH`).
            unsafe {
                let l = walk(side, side.child(n, Dir::Left));
                let r = walk(side, side.child(n, Dir::Right));
                let h = 1 + l.max(r);
                if let Some(word) = (*n).height() {
                    word.set(h);
                }
                h
            }
        }
        if self.keeps_heights() {
            // SAFETY: the copy's nodes are live (caller).
            unsafe { walk(self, self.root()) };
        }
    }

    /// Points `parent`'s link that held `old` (or the root) at `new`.
    ///
    /// # Safety
    /// `parent` is null or live; if non-null, `old` is one of its children;
    /// `new` is null or live.
    unsafe fn change_child(&self, old: *mut N, new: *mut N, parent: *mut N) {
        if parent.is_null() {
            self.set_root(new);
        } else {
            // SAFETY: `parent` is live (caller).
            unsafe {
                let dir = if self.child(parent, Dir::Left) == old {
                    Dir::Left
                } else {
                    Dir::Right
                };
                self.set_child(parent, dir, new);
            }
        }
    }

    /// Rotates `x` down in direction `dir`; its child on the other side
    /// takes its place.
    ///
    /// # Safety
    /// `x` is live, in this copy, and has a child on side `dir.flip()`.
    unsafe fn rotate(&self, x: *mut N, dir: Dir) {
        // SAFETY: `x` and its `dir.flip()` child `y` are live nodes of this
        // copy (caller); `b` and `p` are null or live nodes of this copy.
        unsafe {
            let y = self.child(x, dir.flip());
            let b = self.child(y, dir);
            let p = self.parent(x);
            self.set_child(x, dir.flip(), b);
            if !b.is_null() {
                self.set_parent(b, x);
            }
            self.set_child(y, dir, x);
            self.set_parent(x, y);
            self.set_parent(y, p);
            self.change_child(x, y, p);
            if self.keeps_heights() {
                // `x`'s children, then `y`'s (now `x` among them), then
                // up from `p`: only these nodes' subtrees changed.
                self.fix_height(x);
                self.fix_height(y);
                self.propagate(p);
            }
        }
    }

    /// Links `node` as the `dir` child of `parent` (or as the root when
    /// `parent` is null) and restores the red-black rules. Returns whether
    /// the copy's black height grew (by one: the fix-up blackened a red
    /// root).
    ///
    /// # Safety
    /// `node` is live and not in this copy; `parent` is null (only when the
    /// copy is empty) or a live node of this copy whose `dir` child is nil.
    #[inline]
    pub(crate) unsafe fn insert(&self, node: *mut N, parent: *mut N, dir: Dir) -> bool {
        // Every pointer dereferenced below is `node`, `parent`, or a node reached from them through
        // this copy's links: all live (the caller's promise, and the tree holds only live nodes).
        // SAFETY: so every dereference below is of a live node.
        unsafe {
            let l = self.links(node);
            // Initialise the links before the node is published below.
            l.set_child(Dir::Left, core::ptr::null_mut());
            l.set_child(Dir::Right, core::ptr::null_mut());
            l.set_parent_color(parent, false);
            if self.keeps_heights()
                && let Some(h) = (*node).height()
            {
                h.set(1);
            }
            if parent.is_null() {
                self.set_root(node);
            } else {
                self.set_child(parent, dir, node);
            }
            self.propagate(parent);
            let mut z = node;
            loop {
                let mut p = self.parent(z);
                if p.is_null() {
                    // `z` is the root and red (the new node, or a
                    // grandparent the loop reddened): one more black on
                    // every path.
                    self.set_black(z, true);
                    return true;
                }
                if !self.is_red(p) {
                    return false;
                }
                // `p` is red, so it is not the root: `g` exists.
                let g = self.parent(p);
                let pdir = if self.child(g, Dir::Left) == p {
                    Dir::Left
                } else {
                    Dir::Right
                };
                let uncle = self.child(g, pdir.flip());
                if self.is_red(uncle) {
                    self.set_black(p, true);
                    self.set_black(uncle, true);
                    self.set_black(g, false);
                    z = g;
                    continue;
                }
                if self.child(p, pdir.flip()) == z {
                    // Inner grandchild: rotate it to the outside first.
                    self.rotate(p, pdir);
                    z = p;
                    p = self.parent(z);
                }
                self.set_black(p, true);
                self.set_black(g, false);
                self.rotate(g, pdir.flip());
                return false;
            }
        }
    }

    /// Puts `v` (possibly nil) where `u` hangs.
    ///
    /// # Safety
    /// `u` is a live node of this copy; `v` is null or live.
    unsafe fn transplant(&self, u: *mut N, v: *mut N) {
        // SAFETY: forwarded from the caller.
        unsafe {
            let up = self.parent(u);
            self.change_child(u, v, up);
            if !v.is_null() {
                self.set_parent(v, up);
            }
        }
    }

    /// Unlinks `z` from this copy and restores the red-black rules. `z`'s own
    /// links are left as they were (a reader may still be standing on it).
    /// Returns whether the copy's black height shrank (by one).
    ///
    /// # Safety
    /// `z` is a live node of this copy.
    #[inline]
    pub(crate) unsafe fn erase(&self, z: *mut N) -> bool {
        // SAFETY: `z` and every node reached from it or the root through
        // this copy's links are live nodes of this copy.
        unsafe {
            let zl = self.child(z, Dir::Left);
            let zr = self.child(z, Dir::Right);
            let (x, xp, removed_black);
            if zl.is_null() || zr.is_null() {
                x = if zl.is_null() { zr } else { zl };
                xp = self.parent(z);
                removed_black = !self.is_red(z);
                self.transplant(z, x);
            } else {
                // Two children: the successor `y` takes `z`'s place.
                let mut y = zr;
                loop {
                    let l = self.child(y, Dir::Left);
                    if l.is_null() {
                        break;
                    }
                    y = l;
                }
                removed_black = !self.is_red(y);
                x = self.child(y, Dir::Right);
                if self.parent(y) == z {
                    xp = y;
                } else {
                    xp = self.parent(y);
                    self.transplant(y, x);
                    self.set_child(y, Dir::Right, zr);
                    self.set_parent(zr, y);
                }
                if self.keeps_heights()
                    // The planted defect `stale_heights` (a test-only cfg):
                    // the successor keeps its old height, which the checker
                    // must notice.
                    && !cfg!(latchtree_defect = "stale_heights")
                    && let (Some(zh), Some(yh)) = ((*z).height(), (*y).height())
                {
                    // `y` takes `z`'s place and starts from its height: where
                    // the walk below stops under `y`, `y`'s children have
                    // the heights `z`'s had, so that height is `y`'s.
                    yh.set(zh.get());
                }
                self.transplant(z, y);
                self.set_child(y, Dir::Left, zl);
                self.set_parent(zl, y);
                self.set_black(y, !self.is_red(z));
            }
            // `xp` lost a child; `y` (which took `z`'s children and height)
            // is `xp` or above it, on the walk's way.
            self.propagate(xp);
            removed_black && self.erase_fixup(x, xp)
        }
    }

    /// Restores the black height after a black node was removed above `x`
    /// (possibly nil), whose parent is `xp`. Returns whether the missing
    /// black reached the root, which absorbs it: every path then holds one
    /// black fewer.
    ///
    /// # Safety
    /// `x` is null or live, `xp` is `x`'s parent in this copy (null only if
    /// `x` is the root).
    unsafe fn erase_fixup(&self, mut x: *mut N, mut xp: *mut N) -> bool {
        // All nodes reached are live nodes of this copy. A nil `x` that is not the root has a
        // non-nil sibling, because the removed black node left its sibling subtree with black
        // height >= 1.
        // SAFETY: so every dereference below is of a live node.
        unsafe {
            while x != self.root() && !self.is_red(x) {
                // `x` is nil or the child on side `dir` of `xp`. When `x` is
                // nil and the left child is nil too, `x` is the left one: the
                // sibling cannot be nil as well.
                let dir = if self.child(xp, Dir::Left) == x {
                    Dir::Left
                } else {
                    Dir::Right
                };
                let mut w = self.child(xp, dir.flip());
                if self.is_red(w) {
                    self.set_black(w, true);
                    self.set_black(xp, false);
                    self.rotate(xp, dir);
                    w = self.child(xp, dir.flip());
                }
                if !self.is_red(self.child(w, Dir::Left)) && !self.is_red(self.child(w, Dir::Right))
                {
                    self.set_black(w, false);
                    x = xp;
                    xp = self.parent(x);
                } else {
                    if !self.is_red(self.child(w, dir.flip())) {
                        self.set_black(self.child(w, dir), true);
                        self.set_black(w, false);
                        self.rotate(w, dir.flip());
                        w = self.child(xp, dir.flip());
                    }
                    self.set_black(w, !self.is_red(xp));
                    self.set_black(xp, true);
                    self.set_black(self.child(w, dir.flip()), true);
                    self.rotate(xp, dir);
                    // Resolved by the rotation: every path keeps its count.
                    x = self.root();
                    if !x.is_null() {
                        self.set_black(x, true);
                    }
                    return false;
                }
            }
            // Left at a red node (blackened: the count is back) or at the
            // root, black or nil (the count fell by one on every path).
            let shrank = !self.is_red(x);
            if !x.is_null() {
                self.set_black(x, true);
            }
            shrank
        }
    }

    /// Puts `new` exactly where `old` is (same links, same colour).
    ///
    /// # Safety
    /// `old` is a live node of this copy, `new` a live node not in it.
    pub(crate) unsafe fn replace(&self, old: *mut N, new: *mut N) {
        // SAFETY: `old`, `new` and `old`'s neighbours in this copy are live.
        unsafe {
            let lo = self.links(old);
            self.links(new).copy_from(lo);
            if self.keeps_heights()
                && let (Some(o), Some(n)) = ((*old).height(), (*new).height())
            {
                n.set(o.get());
            }
            for dir in [Dir::Left, Dir::Right] {
                let c = lo.load_child(dir);
                if !c.is_null() {
                    self.set_parent(c, new);
                }
            }
            self.change_child(old, new, lo.parent());
        }
    }

    /// The leftmost (`Dir::Left`) or rightmost node, or null.
    ///
    /// # Safety
    /// The copy holds only live nodes (always true under the writer lock).
    pub(crate) unsafe fn extreme(&self, dir: Dir) -> *mut N {
        let n = self.root();
        if n.is_null() {
            return n;
        }
        // SAFETY: a live node of this copy (caller).
        unsafe { self.extreme_under(n, dir) }
    }

    /// The leftmost (`Dir::Left`) or rightmost node of the subtree under
    /// `n`.
    ///
    /// # Safety
    /// `n` is a live node of this copy, which holds only live nodes.
    unsafe fn extreme_under(&self, mut n: *mut N, dir: Dir) -> *mut N {
        loop {
            // SAFETY: `n` is a live node of this copy.
            let c = unsafe { self.child(n, dir) };
            if c.is_null() {
                return n;
            }
            n = c;
        }
    }

    /// The node next to `n` in key order toward `dir` (`Dir::Right`: its
    /// successor), or null.
    ///
    /// # Safety
    /// As for [`Side::extreme_under`].
    pub(crate) unsafe fn neighbour(&self, n: *mut N, dir: Dir) -> *mut N {
        // SAFETY: `n` and every node reached from it are live nodes of this
        // copy (caller).
        unsafe {
            let c = self.child(n, dir);
            if !c.is_null() {
                return self.extreme_under(c, dir.flip());
            }
            let mut n = n;
            loop {
                let p = self.parent(n);
                if p.is_null() || self.child(p, dir.flip()) == n {
                    return p;
                }
                n = p;
            }
        }
    }

    /// The number of black nodes on every root-to-nil path of this copy (its
    /// leftmost path's count: the red-black rules make them all equal), so
    /// every path holds at least that many nodes and at most twice as many.
    ///
    /// # Safety
    /// As for [`Side::extreme`]; the copy is a valid red-black tree.
    pub(crate) unsafe fn black_height(&self) -> usize {
        let mut black = 0;
        let mut n = self.root();
        while !n.is_null() {
            // SAFETY: `n` is a live node of this copy.
            unsafe {
                black += usize::from(!self.is_red(n));
                n = self.child(n, Dir::Left);
            }
        }
        black
    }
}
