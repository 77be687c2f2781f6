//! A tree built off to the side ([`Shadow`]): over several transactions, a
//! front-end links nodes that no copy holds into a red-black tree of their
//! own, in both link sets at once, then swaps it in for copy 0's and copy
//! 1's content in one transaction ([`Txn::adopt`](super::Txn::adopt)).
//!
//! No reader can reach a shadow node before the adoption: no root or link
//! of either copy points at one (the shadow's roots are its own words, not
//! a copy's head), so the writer may write its links while `seq` is even
//! or odd. The stores are `Release` all the same (the one link-store
//! order), and the adoption's root stores publish them (`links.rs`).
//!
//! Both link sets of every shadow node are kept equal, so that after the
//! adoption copy 0 (link set 0) and copy 1 (link set 1) hold the same
//! shape, as everywhere else (invariant 4 of `raw`).

use super::Shape;
use super::build::Spot;
use crate::raw::links::{Dir, HEIGHTS_MAX, Linked, link_store_order};
use crate::raw::rbtree::Side;
use crate::raw::txn::{Ends, Op, Slot, Txn};
use crate::sync::{AtomicPtr, Ordering};
use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;
use core::ptr::{self, NonNull};

/// Ranks a block of [`Shadow`]'s placed map covers (one 4 KiB page of
/// pointers).
const PLACED_BLOCK: usize = 4096 / size_of::<usize>();

/// One block of [`Shadow`]'s placed map.
type PlacedBlock<N> = [*mut N; PLACED_BLOCK];

/// A red-black tree of nodes in no copy, kept identical in both link sets;
/// see the module docs. Either built in the balanced shape ([`place`]) and
/// then changed like a copy ([`insert`], [`erase`]), or only changed.
///
/// [`place`]: Shadow::place
/// [`insert`]: Shadow::insert
/// [`erase`]: Shadow::erase
pub(crate) struct Shadow<N> {
    /// The root, once per link set (each `Side` owns one root word).
    roots: [AtomicPtr<N>; 2],
    len: usize,
    /// The node count of the balanced shape `place` links.
    shape_len: usize,
    /// The nodes placed so far, by rank (null: not yet), while placing: in
    /// blocks of [`PLACED_BLOCK`] ranks, each allocated when first written
    /// (one zeroed map of the whole shape took a millisecond to allocate
    /// at 262 144 ranks inside one write, and the first nodes of the van
    /// Emde Boas order, spread over every rank, fault in a page each).
    placed: Vec<Option<Box<PlacedBlock<N>>>>,
    /// Inserts and erases since the balanced shape (the `Shape` the copies
    /// take on at adoption), and the deepest insert among them.
    pub(super) updates: usize,
    pub(super) deepest: usize,
    /// The shadow keeps its nodes' heights (set by `place`, kept by
    /// `insert` and `erase`) as copy 0 does (`txn::Shape::heights`): while
    /// it never held more than [`HEIGHTS_MAX`] nodes.
    heights: bool,
}

impl<N> core::fmt::Debug for Shadow<N> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Shadow")
            .field("len", &self.len)
            .field("shape_len", &self.shape_len)
            .finish_non_exhaustive()
    }
}

impl<N: Linked> Shadow<N> {
    /// An empty shadow that [`place`](Shadow::place) fills into the
    /// balanced shape over `shape_len` nodes.
    pub(crate) fn new(shape_len: usize) -> Self {
        Shadow {
            roots: [
                AtomicPtr::new(ptr::null_mut()),
                AtomicPtr::new(ptr::null_mut()),
            ],
            len: 0,
            shape_len,
            placed: Vec::new(),
            updates: 0,
            deepest: 0,
            heights: shape_len <= HEIGHTS_MAX,
        }
    }

    /// The nodes it holds.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn root(&self) -> *mut N {
        self.roots[0].load(Ordering::Relaxed)
    }

    /// Link set 0 (keeping heights while the shadow does).
    fn side0(&self) -> Side<'_, N, 0> {
        Side::keeping_heights(&self.roots[0], self.heights)
    }

    /// Link set 1.
    fn side1(&self) -> Side<'_, N, 1> {
        Side::new(&self.roots[1])
    }

    /// Links `node` at `spot` of the balanced shape over `shape_len` nodes
    /// (`build.rs`: the shape `link` makes, with its colours), under its
    /// parent, in both link sets.
    ///
    /// # Safety
    /// `node` is live, distinct from every node placed, in no copy, stays
    /// allocated while it is in the shadow, and its key has rank `spot.rank`
    /// among the nodes placed; `spot` comes from a
    /// [`VebOrder`](super::build::VebOrder) over `shape_len` nodes, taken in
    /// its order (parents first), and no `insert` or `erase` came before.
    ///
    /// Returns whether this was the first rank placed in its block of the
    /// map (a fresh page: the caller may count it as more work).
    #[inline]
    pub(crate) unsafe fn place(&mut self, spot: Spot, node: NonNull<N>) -> bool {
        debug_assert!(self.updates == 0, "place after insert or erase");
        if self.placed.is_empty() {
            self.placed = (0..self.shape_len.div_ceil(PLACED_BLOCK))
                .map(|_| None)
                .collect();
        }
        let n = node.as_ptr();
        let parent = spot.parent.map_or(ptr::null_mut(), |p| {
            self.placed[p / PLACED_BLOCK]
                .as_ref()
                .map_or(ptr::null_mut(), |b| b[p % PLACED_BLOCK])
        });
        debug_assert!(spot.parent.is_none() || !parent.is_null(), "parent first");
        let block = &mut self.placed[spot.rank / PLACED_BLOCK];
        let fresh = block.is_none();
        // Zeroed memory (null pointers), which the allocator hands out
        // without writing it where it maps fresh pages.
        let block = block.get_or_insert_with(|| {
            vec![ptr::null_mut(); PLACED_BLOCK]
                .into_boxed_slice()
                .try_into()
                .expect("a block of PLACED_BLOCK ranks")
        });
        block[spot.rank % PLACED_BLOCK] = n;
        let full = (self.shape_len + 1).ilog2() as usize;
        // SAFETY: `node` is live (caller).
        let links = |copy| unsafe { node.as_ref() }.links(copy);
        // A `VebOrder` over `shape_len` nodes gives heights exactly when
        // this shadow keeps them (both: up to `HEIGHTS_MAX` nodes).
        debug_assert!(
            !self.heights || spot.height > 0,
            "a spot without its height"
        );
        if self.heights
            // SAFETY: as above.
            && let Some(h) = unsafe { node.as_ref() }.height()
        {
            // Its subtree's height in the balanced shape, which the shadow
            // has once every node is placed (no insert or erase comes
            // before: see above).
            h.set(spot.height);
        }
        for copy in 0..2 {
            let l = links(copy);
            // SAFETY: null children.
            unsafe {
                l.set_child(Dir::Left, ptr::null_mut());
                l.set_child(Dir::Right, ptr::null_mut());
            }
            l.set_parent_color(parent, spot.depth < full);
            if parent.is_null() {
                // Release, the one link-store order (module docs).
                self.roots[copy].store(n, link_store_order());
            } else {
                // SAFETY: `parent` is a placed, live shadow node (caller:
                // parents first).
                // `n` is live and filled (caller).
                unsafe { (*parent).links(copy).set_child(spot.dir, n) };
            }
        }
        self.len += 1;
        if self.len == self.shape_len {
            self.placed = Vec::new();
        }
        fresh
    }

    /// Searches the shadow like [`Txn::find`](super::Txn::find) searches
    /// copy 0.
    pub(crate) fn find(&self, step: impl FnMut(&N) -> Option<Dir>) -> Slot<N> {
        // SAFETY: the shadow holds only live nodes (`place`, `insert`).
        unsafe { crate::raw::txn::search(self.side0(), step) }
    }

    /// Links `node` at a vacant slot of the shadow, in both link sets.
    ///
    /// # Safety
    /// `node` is live, in no copy and not in the shadow, stays allocated
    /// while in it; `slot` is `Vacant` and came from this shadow's `find`
    /// with no change since.
    pub(crate) unsafe fn insert(&mut self, node: NonNull<N>, slot: Slot<N>) {
        let Slot::Vacant { parent, dir, depth } = slot else {
            unreachable!("insert into an occupied slot")
        };
        if self.len + 1 > HEIGHTS_MAX {
            self.heights = false;
        }
        // SAFETY: caller; both link sets have the same shape, so the slot
        // found in set 0 is vacant in set 1 too.
        unsafe {
            self.side0().insert(node.as_ptr(), parent, dir);
            self.side1().insert(node.as_ptr(), parent, dir);
        }
        self.len += 1;
        self.updates += 1;
        self.deepest = self.deepest.max(depth);
    }

    /// Unlinks `node` from the shadow, in both link sets; the caller may
    /// reuse it at once (no reader ever reached it through the shadow).
    ///
    /// # Safety
    /// `node` came from this shadow's `find` with no change since.
    pub(crate) unsafe fn erase(&mut self, node: NonNull<N>) {
        // SAFETY: caller; the same operation on both sets keeps them equal
        // (`rbtree.rs`).
        unsafe {
            self.side0().erase(node.as_ptr());
            self.side1().erase(node.as_ptr());
        }
        self.len -= 1;
        self.updates += 1;
    }

    /// Every node of the shadow, in key order (for a caller that gives it
    /// up, or checks it).
    pub(crate) fn nodes(&self) -> Vec<NonNull<N>> {
        // SAFETY: the shadow holds only live nodes, and nothing changes it
        // during this borrow.
        unsafe { crate::raw::walk::nodes_in_order(self.root(), 0) }
    }
}

impl<N: Linked> Txn<'_, N> {
    /// Makes the tree built in `shadow` the whole content of copy 0 now,
    /// and of copy 1 at the commit's replay: one root store each, whatever
    /// its size. The nodes copy 0 held until then leave the tree; they are
    /// released after the commit, a slice per later write (`tree.rs`), or
    /// if the transaction rolls back, the shadow's nodes are, the same way.
    /// Copy 0's shape becomes the shadow's (balanced but for the inserts and
    /// erases made in it).
    ///
    /// # Safety
    /// The shadow's nodes are in no copy and stay allocated until released,
    /// and hold the content copy 0 is to have. Every node pointer taken from
    /// copy 0 before the call is stale after it (its node left the tree).
    pub(crate) unsafe fn adopt(&mut self, shadow: Shadow<N>) {
        self.begin();
        // Room in the log first: nothing may fail between the root store and
        // logging it (an unlogged tree would never be released).
        self.log.reserve(1);
        let head = &self.shared.heads[0];
        let new = shadow.root();
        // Relaxed: the writer's own word, under the lock.
        let old = head.root.load(Ordering::Relaxed);
        // Release, as every root store: pairs with the Acquire load of the
        // root by a reader steered here by the next flip, which then sees
        // every shadow link and field stored before (`links.rs`).
        head.root.store(new, link_store_order());
        head.len.store(shadow.len(), Ordering::Relaxed);
        self.log.push(Op::Adopt { old, new });
        *self.shape = Shape {
            updates: shadow.updates,
            deepest: shadow.deepest,
            heights: shadow.heights,
            black: None,
        };
        let side = Side::<_, 0>::new(&head.root);
        // SAFETY: writer lock held; the shadow's nodes are live (caller),
        // and copy 0 is now the shadow's tree.
        *self.ends = unsafe {
            Ends {
                first: side.extreme(Dir::Left),
                last: side.extreme(Dir::Right),
            }
        };
    }
}
