//! The shape of a copy: when a commit rebuilds it into the balanced shape
//! (the *cadence*, [`rebuild_due`]), which descent plan its readers follow
//! ([`plan`]), and the two ways a balanced shape is made:
//!
//! * `build.rs`: the balanced shape itself (a bulk build, a rebuild in
//!   place) and the van Emde Boas order a front-end lays it out in;
//! * `shadow.rs`: a tree built off to the side over several transactions
//!   ([`Shadow`]) and swapped in whole (`Txn::adopt`), for a front-end that
//!   moves a large tree into fresh memory (`addr_index/layout/`).
//!
//! A commit rebuilds copy 0 in place once [`rebuild_due`] says so and the
//! tree holds at most its [`RawTree`](super::RawTree)'s in-place limit
//! (`IN_PLACE_MAX` unless the front-end set a lower one: `AddrIndex`
//! rebuilds its large trees by migration, never in place). Nothing else in
//! the core decides when the shape changes.

pub(super) mod build;
pub(super) mod shadow;

pub(crate) use build::{VebOrder, van_emde_boas};
pub(crate) use shadow::Shadow;

use super::descent::{Descent, balanced_height};
use super::links::{HEIGHTS_MAX, Linked};
use super::rbtree::Side;
use super::shared::Head;
use crate::sync::Ordering;

/// What the writer knows of copy 0's shape, kept across transactions.
/// With no update since the last rebuild (or since the tree was new or
/// cleared), the copy is in the balanced shape, descended by an exact plan.
#[derive(Clone, Copy)]
pub(super) struct Shape {
    /// Inserts and erases since the last rebuild.
    pub(super) updates: usize,
    /// The deepest an insert landed since the last rebuild (nodes from the
    /// root, itself included).
    pub(super) deepest: usize,
    /// Copy 0's recorded heights are right (`Linked::height`), so its plan
    /// may be the exact one of its height. Kept while the tree holds at
    /// most [`HEIGHTS_MAX`] nodes; a rebuild (or a clear) makes them right
    /// again.
    pub(super) heights: bool,
    /// Copy 0's black height, once a plan walked it (`plan`): kept by every
    /// insert and erase from then on (`Side::insert` and `Side::erase` say
    /// when it moves), so a plan with a tail walks it once, not at every
    /// commit. `None` after a rebuild or an adoption.
    pub(super) black: Option<usize>,
}

// A rebuild in place sets the heights again: every tree that keeps them
// can be rebuilt in place.
const _: () = assert!(HEIGHTS_MAX <= IN_PLACE_MAX);

/// The fewest updates between two automatic rebuilds: a small tree rebuilds
/// in a few microseconds, but not after every write. Off under loom (its
/// models explore a rebuild where they ask for one, `Txn::rebuild`).
const REBUILD_MIN: usize = if cfg!(latchtree_loom) { usize::MAX } else { 16 };

/// The most nodes a commit rebuilds in place on its own. A rebuild relinks
/// every node of both copies inside the one write that made it due (some
/// 0.6 ms at 4096 with cold nodes). A larger tree keeps its red-black shape (no path longer than
/// twice the shortest) unless its front-end rebuilds it: `AddrIndex` over
/// many writes, `LatchTree::rebalance` when asked.
pub(crate) const IN_PLACE_MAX: usize = 4096;

/// How far above the balanced height a copy whose nodes keep their heights
/// may be and still be descended by the exact plan of its height. Every
/// trip past a lookup's own path stands still, so an exact plan pays the
/// tallest path on every lookup: a few levels more cost less than the
/// tail's mispredicted exit, many more cost more (sequential growth
/// between two rebuilds leaves a spine twice the balanced height: there
/// the exact plan is 1.4 times as slow as the tail at n = 4096). Slacks of
/// 1, 2 and 3 are within noise of each other.
pub(super) const EXACT_SLACK: usize = 2;

impl Shape {
    /// Right after a rebuild.
    pub(super) const REBUILT: Shape = Shape {
        updates: 0,
        deepest: 0,
        heights: true,
        black: None,
    };

    /// Whether a commit rebuilds copy 0, of `len` nodes, in place: when a
    /// rebuild is due and the tree holds at most `in_place_max` nodes.
    #[inline]
    pub(super) fn commit_rebuilds(&self, len: usize, in_place_max: usize) -> bool {
        len <= in_place_max && rebuild_due(self.updates, self.deepest, len)
    }
}

/// Whether the tree of `len` nodes is due a rebuild into the balanced shape
/// (`build.rs`), after `since` inserts and erases of which the deepest
/// insert landed `deepest` nodes from the root: once the shape has gone bad
/// (an insert landed two levels below the balanced height; sequential
/// inserts, which grow an almost all-black tree with one long red spine,
/// get there within a few inserts), at most every `len / 8` updates (at
/// least [`REBUILD_MIN`]). A rebuild relinks `len` nodes per copy (about 150
/// instructions a node), so spread over the updates before it, it costs
/// below one insert. (One level lower would rebuild random churn at n = 84
/// every 16 updates, nearly tripling an insert + remove pair.)
#[inline]
pub(super) fn rebuild_due(since: usize, deepest: usize, len: usize) -> bool {
    since >= (len / 8).max(REBUILD_MIN) && deepest >= balanced_height(len) + 2
}

/// The plan readers of copy 0 (`head`), of shape `shape`, follow (see
/// `descent.rs`): exact in the balanced shape, or where nodes keep their
/// heights (`Linked::height`: the root's is the copy's) and the height is at
/// most [`EXACT_SLACK`] above the balanced one; else the black height (the
/// one `shape` keeps, or walked and kept from now on) and a tail.
///
/// # Safety
/// Writer lock held; the copy is a valid red-black tree of live nodes, and
/// `shape` is what the writer knows of it.
pub(super) unsafe fn plan<N: Linked>(shape: &mut Shape, head: &Head<N>) -> Descent {
    let len = head.len.load(Ordering::Relaxed);
    if shape.updates == 0 {
        return Descent::balanced(len);
    }
    if N::HAS_HEIGHT && shape.heights {
        let root = head.root.load(Ordering::Relaxed);
        // SAFETY: null or a live node (caller).
        let root = unsafe { root.as_ref() };
        debug_assert!(
            root.is_none_or(|r| r.height().is_some()),
            "HAS_HEIGHT without a height (see `Linked`)"
        );
        let height = root.and_then(N::height).map_or(0, |h| h.get());
        if height <= balanced_height(len) + EXACT_SLACK {
            return Descent {
                trips: height,
                exact: true,
            };
        }
    }
    let side = Side::<_, 0>::new(&head.root);
    // SAFETY: a valid red-black tree of live nodes (caller).
    let walk = || unsafe { side.black_height() };
    let black = match shape.black {
        Some(kept) => {
            debug_assert_eq!(kept, walk(), "copy 0's kept black height");
            kept
        }
        None => *shape.black.insert(walk()),
    };
    Descent {
        trips: black,
        exact: false,
    }
}
