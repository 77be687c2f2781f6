//! Intrusive link sets: one per copy of the tree, every word an atomic.
//!
//! A node of either front-end embeds `[Links<Self>; 2]`. Point readers only
//! load `left`, `right` and the roots; cursors (`cursor.rs`) also climb
//! `parent_color` to step to a neighbour without a stack.
//!
//! Orderings: `left`/`right`/root stores and `parent_color` stores are
//! `Release`, and reader loads of them are `Acquire`: the pair publishes a
//! node's fields to a reader that reaches it through any link, down or up.
//! The writer's own loads of `parent_color` are `Relaxed`: the writer lock
//! orders writers.

use crate::sync::{AtomicPtr, Ordering};
use core::ptr;

/// A node that carries two link sets and may be put in a [`RawTree`].
///
/// # Safety
/// `links(c)` must return the same `Links` every time for the same `c`
/// (for `c` in `0..2`), and the two sets must be distinct.
///
/// [`RawTree`]: super::RawTree
pub(crate) unsafe trait Linked: Sized {
    /// The link set of copy `copy` (0 or 1).
    fn links(&self, copy: usize) -> &Links<Self>;
}

/// A child direction. `Left` holds smaller keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dir {
    Left = 0,
    Right = 1,
}

impl Dir {
    /// `Right` if `right`, else `Left`, without a branch: readers descend
    /// with data-dependent selects instead of unpredictable branches.
    #[inline(always)]
    pub(crate) fn toward(right: bool) -> Dir {
        [Dir::Left, Dir::Right][usize::from(right)]
    }

    pub(crate) fn flip(self) -> Dir {
        match self {
            Dir::Left => Dir::Right,
            Dir::Right => Dir::Left,
        }
    }
}

/// Low bit of `parent_color`: set for black nodes.
const BLACK: usize = 1;

/// One copy's links of one node.
pub(crate) struct Links<N> {
    /// `[left, right]`, indexed by `Dir`.
    kids: [AtomicPtr<N>; 2],
    /// Parent pointer with the colour in its low bit (nodes are at least
    /// 8-aligned, so the bit is free). Writer-only.
    parent_color: AtomicPtr<N>,
}

impl<N> core::fmt::Debug for Links<N> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Links").finish_non_exhaustive()
    }
}

impl<N> Links<N> {
    crate::sync::const_fn_unless_loom! {
        /// Unlinked, red, no parent.
        pub(crate) fn new() -> Self {
            Links {
                kids: [AtomicPtr::new(ptr::null_mut()), AtomicPtr::new(ptr::null_mut())],
                parent_color: AtomicPtr::new(ptr::null_mut()),
            }
        }
    }

    /// Reader load of a child link. `Acquire` pairs with the `Release` in
    /// [`Links::set_child`] (and the root store), so the node it returns has
    /// its key and value (or its atomic bounds) visible.
    #[inline(always)]
    pub(crate) fn load_child(&self, dir: Dir) -> *mut N {
        self.kids[dir as usize].load(Ordering::Acquire)
    }

    /// Writer store of a child link; `Release`, see [`Links::load_child`].
    #[inline]
    pub(crate) fn set_child(&self, dir: Dir, child: *mut N) {
        self.kids[dir as usize].store(child, link_store_order());
    }

    /// Reader load of the parent (null at the root). `Acquire` pairs with
    /// the `Release` in [`Links::set_parent_color`], as for child links.
    #[inline(always)]
    pub(crate) fn load_parent(&self) -> *mut N {
        self.parent_color
            .load(Ordering::Acquire)
            .map_addr(|a| a & !BLACK)
    }

    /// Writer-only: the parent.
    #[inline]
    pub(crate) fn parent(&self) -> *mut N {
        self.parent_color
            .load(Ordering::Relaxed)
            .map_addr(|a| a & !BLACK)
    }

    /// Writer-only: is this node red?
    #[inline]
    pub(crate) fn is_red(&self) -> bool {
        self.parent_color.load(Ordering::Relaxed).addr() & BLACK == 0
    }

    /// Writer-only: set the parent, keeping the colour.
    #[inline]
    pub(crate) fn set_parent(&self, parent: *mut N) {
        let black = !self.is_red();
        self.set_parent_color(parent, black);
    }

    /// Writer-only: set the colour, keeping the parent.
    #[inline]
    pub(crate) fn set_black(&self, black: bool) {
        self.set_parent_color(self.parent(), black);
    }

    /// Writer-only: set parent and colour. `Release`: pairs with the
    /// cursor's `Acquire` in [`Links::load_parent`].
    #[inline]
    pub(crate) fn set_parent_color(&self, parent: *mut N, black: bool) {
        let tagged = parent.map_addr(|a| a | usize::from(black));
        self.parent_color.store(tagged, link_store_order());
    }

    /// Writer-only: copy every link of `other` into `self` (published with
    /// `Release`).
    pub(crate) fn copy_from(&self, other: &Links<N>) {
        self.set_child(Dir::Left, other.kids[0].load(Ordering::Relaxed));
        self.set_child(Dir::Right, other.kids[1].load(Ordering::Relaxed));
        self.parent_color.store(
            other.parent_color.load(Ordering::Relaxed),
            link_store_order(),
        );
    }
}

/// The ordering of every reader-visible link store. `Release` always, except
/// in the test-only planted defect `relaxed_link`, which exists to prove that
/// the verification suite notices a missing `Release`.
#[inline(always)]
pub(crate) fn link_store_order() -> Ordering {
    if cfg!(latchtree_defect = "relaxed_link") {
        Ordering::Relaxed
    } else {
        Ordering::Release
    }
}
