//! What readers see of the tree: the latch and the two copies' heads
//! ([`Shared`]), the stable copy handed to one read attempt ([`View`]), and
//! the cap on every reader's walk ([`MAX_DEPTH`]). The writer's side is in
//! `tree.rs`; the walks readers take are in `descent.rs`, `walk.rs` and
//! `cursor.rs`.

use super::latch::Latch;
use super::links::Linked;
use crate::sync::{AtomicPtr, AtomicUsize};
use core::ptr;

/// The most nodes a reader visits on one root-to-leaf path: a longer path
/// is treated as a torn read and retried. A red-black tree of `n` nodes is
/// at most `2 * log2(n + 1)` high, so a stable copy never comes near it.
/// The checker (`check.rs`) rejects a copy with a longer path, so that the
/// two agree on what a stable copy can hold.
pub(crate) const MAX_DEPTH: usize = if cfg!(latchtree_defect = "no_depth_cap") {
    usize::MAX
} else {
    128
};

/// The part of the tree readers can see.
pub(super) struct Shared<N> {
    pub(super) latch: Latch,
    pub(super) heads: [Head<N>; 2],
}

impl<N> Shared<N> {
    crate::sync::const_fn_unless_loom! {
        /// Both copies empty, the latch at rest.
        pub(super) fn new() -> Self {
            Shared {
                latch: Latch::new(),
                heads: [Head::new(), Head::new()],
            }
        }
    }
}

/// What a reader of one copy reads before its first node. Each copy's head
/// has its own pair of cache lines (128 bytes: adjacent-line prefetch pairs
/// lines), so that the writer, which stores to a copy's head only while
/// readers are steered away from that copy, never invalidates the line that
/// readers of the other copy are reading.
#[repr(align(128))]
pub(super) struct Head<N> {
    pub(super) root: AtomicPtr<N>,
    pub(super) len: AtomicUsize,
    /// How readers descend this copy (a
    /// `Descent` word, `descent.rs`), published with the copy
    /// (`RawTree::publish`); see `descent.rs`.
    pub(super) descent: AtomicUsize,
}

impl<N> Head<N> {
    crate::sync::const_fn_unless_loom! {
        fn new() -> Self {
            Head {
                root: AtomicPtr::new(ptr::null_mut()),
                len: AtomicUsize::new(0),
                descent: AtomicUsize::new(0),
            }
        }
    }
}

/// A stable copy, handed to one read attempt.
pub(crate) struct View<'g, N> {
    pub(super) root: &'g AtomicPtr<N>,
    pub(super) len: &'g AtomicUsize,
    pub(super) descent: &'g AtomicUsize,
    pub(super) copy: usize,
}

impl<N> Clone for View<'_, N> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<N> Copy for View<'_, N> {}

impl<'g, N: Linked> View<'g, N> {
    /// Which copy this view reads (for per-copy data kept by a front-end).
    #[inline(always)]
    pub(crate) fn copy(self) -> usize {
        self.copy
    }
}
