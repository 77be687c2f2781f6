//! Intrusive link sets: one per copy of the tree, every word an atomic.
//!
//! A node of either front-end embeds two link sets, one per copy: each a
//! [`Kids`] pair and a [`Parent`] word, kept together ([`Links`]) or, where
//! the node's layout wants it, apart. Point readers only load the kids and
//! the roots; cursors (`cursor.rs`) also climb the parent word to step to a
//! neighbour without a stack.
//!
//! Orderings: `left`/`right`/root stores and parent-word stores are
//! `Release`, and reader loads of them are `Acquire`: the pair publishes a
//! node's fields to a reader that reaches it through any link, down or up.
//! The writer's own loads of the parent word are `Relaxed`: the writer lock
//! orders writers.

use crate::sync::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use core::ptr;

/// A node that carries two link sets and may be put in a [`RawTree`].
///
/// Beyond the safety contract, readers' answers depend on three promises
/// of an implementor that keeps the optional extras (a broken one gives
/// wrong answers that validate, never undefined behaviour; the checker,
/// `check.rs`, catches each in the tests):
/// * with [`COPY0_KID_KEYS`](Linked::COPY0_KID_KEYS), `links(0)` is built
///   with [`LinkRef::with_keys`] (its [`KidKeys`]);
/// * [`search_key`](Linked::search_key) is the key the tree's searches
///   order nodes by (`View::search_by_key`'s `key`), and never changes
///   while the node is in a copy or a shadow;
/// * with [`HAS_HEIGHT`](Linked::HAS_HEIGHT), [`height`](Linked::height) is
///   `Some` for every node.
///
/// # Safety
/// `links(c)` must return views of the same `Kids` and `Parent` every time
/// for the same `c` (for `c` in `0..2`), and the two copies' words must be
/// distinct.
///
/// [`RawTree`]: super::RawTree
pub(crate) unsafe trait Linked: Sized {
    /// The link set of copy `copy` (0 or 1).
    fn links(&self, copy: usize) -> LinkRef<'_, Self>;

    /// Whether copy 0's links cache the children's keys ([`KidKeys`],
    /// [`Linked::search_key`]).
    const COPY0_KID_KEYS: bool = false;

    /// Whether nodes of this type keep a [`Height`]: then
    /// [`height`](Linked::height) is `Some` for every node. A tree of them
    /// always knows its exact height, so its readers descend by an exact
    /// plan (`descent.rs`).
    const HAS_HEIGHT: bool = false;

    /// This node's [`Height`] in copy 0, if the node keeps one.
    #[inline(always)]
    fn height(&self) -> Option<&Height> {
        None
    }

    /// The word a link set with [`KidKeys`] caches for this node in its
    /// parent: a search key that never changes while the node is in a
    /// tree. Only nodes whose `links` hand out [`KidKeys`] need it.
    #[inline(always)]
    fn search_key(&self) -> u64 {
        0
    }
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

/// Low bit of the parent word: set for black nodes.
const BLACK: usize = 1;

/// One copy's child links of one node: `[left, right]`, indexed by `Dir`.
/// What a descent reads.
pub(crate) struct Kids<N>([AtomicPtr<N>; 2]);

/// One copy's cache of a node's children's search keys
/// ([`Linked::search_key`]), `[left, right]`, each beside its link: a
/// descent that has the key of the node it stands on knows its child's key
/// the moment it knows the child, without a load through the child
/// (`View::search_by_key`). A nil child's entry is the node's own key, so
/// that a walk standing still there keeps the key it had. Every store of a
/// link through a [`LinkRef`] that has them stores the child's key too.
pub(crate) struct KidKeys([AtomicU64; 2]);

impl KidKeys {
    crate::sync::const_fn_unless_loom! {
        /// No children.
        pub(crate) fn new() -> Self {
            KidKeys([AtomicU64::new(0), AtomicU64::new(0)])
        }
    }
}

/// The height of a node's subtree in copy 0 (1 for a leaf; nil counts 0),
/// kept by the writer through every change of copy 0's shape while the
/// tree keeps heights (`txn::Shape::heights`: up to [`HEIGHTS_MAX`]
/// nodes; `rbtree.rs`, `build.rs`, `shadow.rs`, a rollback), stale
/// otherwise until a rebuild, a clear or the adoption of a shadow that kept
/// them sets them again; read only by the writer: the root's is the exact
/// plan readers follow. Both copies have the same shape once a write ends,
/// so one height serves both. An atomic because readers hold `&Node`;
/// `Relaxed`, the writer lock orders writers.
pub(crate) struct Height(AtomicUsize);

impl Height {
    crate::sync::const_fn_unless_loom! {
        /// A leaf's.
        pub(crate) fn new() -> Self {
            Height(AtomicUsize::new(1))
        }
    }

    /// The height recorded.
    #[inline]
    pub(crate) fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    /// Records `h`.
    #[inline]
    pub(crate) fn set(&self, h: usize) {
        self.0.store(h, Ordering::Relaxed);
    }
}

/// The most nodes for which copy 0's heights are kept through inserts and
/// erases (`rbtree.rs`). Keeping them costs a walk up the changed path and
/// after each rotation (about a sixth of an insert's instructions), while
/// what they buy, an exact plan within two levels of the balanced height
/// (`shape/`), pays most at small sizes (random growth at n = 84: lookups
/// about 1.6× a sorted `Vec`'s time instead of 2.3–3.0×) and is rare at
/// large ones (a tree of 262 144 grown in random order is three or more
/// levels above balanced). The size of the largest in-place rebuild
/// (`shape::IN_PLACE_MAX`), which sets them again.
pub(crate) const HEIGHTS_MAX: usize = 4096;

/// One copy's parent pointer of one node, with the colour in its low bit
/// (nodes are at least 8-aligned, so the bit is free). Written and read by
/// the writer; cursors climb it. A node may keep it apart from its
/// [`Kids`] (`RangeNode` does, so that a descent's words share a line).
pub(crate) struct Parent<N>(AtomicPtr<N>);

impl<N> Kids<N> {
    crate::sync::const_fn_unless_loom! {
        /// No children.
        pub(crate) fn new() -> Self {
            Kids([AtomicPtr::new(ptr::null_mut()), AtomicPtr::new(ptr::null_mut())])
        }
    }
}

impl<N> Parent<N> {
    crate::sync::const_fn_unless_loom! {
        /// Red, no parent.
        pub(crate) fn new() -> Self {
            Parent(AtomicPtr::new(ptr::null_mut()))
        }
    }
}

/// One copy's links of one node, kept together (the usual layout).
pub(crate) struct Links<N> {
    kids: Kids<N>,
    parent: Parent<N>,
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
                kids: Kids::new(),
                parent: Parent::new(),
            }
        }
    }

    /// A view of these links.
    #[inline(always)]
    pub(crate) fn get(&self) -> LinkRef<'_, N> {
        LinkRef::new(&self.kids, &self.parent)
    }

    /// A view of these links, those of `node`, with `keys` caching the
    /// children's keys.
    #[cfg(test)]
    pub(crate) fn with_keys<'a>(&'a self, node: &'a N, keys: &'a KidKeys) -> LinkRef<'a, N> {
        LinkRef::with_keys(node, &self.kids, &self.parent, keys)
    }
}

/// One copy's links of one node, wherever the node keeps them.
pub(crate) struct LinkRef<'a, N> {
    kids: &'a Kids<N>,
    parent: &'a Parent<N>,
    /// The key cache and the node whose links these are.
    keys: Option<(&'a KidKeys, &'a N)>,
}

impl<N> Clone for LinkRef<'_, N> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<N> Copy for LinkRef<'_, N> {}

impl<'a, N> LinkRef<'a, N> {
    /// The links made of `kids` and `parent`.
    #[inline(always)]
    pub(crate) fn new(kids: &'a Kids<N>, parent: &'a Parent<N>) -> Self {
        LinkRef {
            kids,
            parent,
            keys: None,
        }
    }

    /// The links of `node` made of `kids` and `parent`, with `keys` caching
    /// the children's search keys.
    #[inline(always)]
    pub(crate) fn with_keys(
        node: &'a N,
        kids: &'a Kids<N>,
        parent: &'a Parent<N>,
        keys: &'a KidKeys,
    ) -> Self {
        LinkRef {
            kids,
            parent,
            keys: Some((keys, node)),
        }
    }

    /// Reader load of the cached search key of the child `dir` leads to
    /// (the node's own where it is nil), or `None` if these links cache
    /// none. `Relaxed`:
    /// a word of this copy like the others, validated by the latch.
    #[inline(always)]
    pub(crate) fn load_child_key(self, dir: Dir) -> Option<u64> {
        self.keys
            .map(|(k, _)| k.0[dir as usize].load(Ordering::Relaxed))
    }

    /// Reader load of a child link. `Acquire` pairs with the `Release` in
    /// [`LinkRef::set_child`] (and the root store), so the node it returns
    /// has its key and value (or its atomic bounds) visible.
    #[inline(always)]
    pub(crate) fn load_child(self, dir: Dir) -> *mut N {
        self.kids.0[dir as usize].load(Ordering::Acquire)
    }

    /// Writer store of a child link; `Release`, see [`LinkRef::load_child`].
    /// Where these links cache their children's keys ([`KidKeys`]), the
    /// child's key is stored first (`Relaxed`: a reader that reads it reads
    /// a word of this copy, validated by the latch like the link).
    ///
    /// # Safety
    /// `child` is null or points to a live node.
    #[inline]
    pub(crate) unsafe fn set_child(self, dir: Dir, child: *mut N)
    where
        N: Linked,
    {
        if let Some((keys, node)) = self.keys {
            // A nil child's entry is the node's own key: a walk that stands
            // still there keeps its key without a select.
            // SAFETY: non-null, so live (caller).
            let key = unsafe { child.as_ref() }.map_or_else(|| node.search_key(), N::search_key);
            keys.0[dir as usize].store(key, Ordering::Relaxed);
        }
        self.kids.0[dir as usize].store(child, link_store_order());
    }

    /// Reader load of the parent (null at the root). `Acquire` pairs with
    /// the `Release` in [`LinkRef::set_parent_color`], as for child links.
    #[inline(always)]
    pub(crate) fn load_parent(self) -> *mut N {
        self.parent
            .0
            .load(Ordering::Acquire)
            .map_addr(|a| a & !BLACK)
    }

    /// Writer-only: the parent.
    #[inline]
    pub(crate) fn parent(self) -> *mut N {
        self.parent
            .0
            .load(Ordering::Relaxed)
            .map_addr(|a| a & !BLACK)
    }

    /// Writer-only: is this node red?
    #[inline]
    pub(crate) fn is_red(self) -> bool {
        self.parent.0.load(Ordering::Relaxed).addr() & BLACK == 0
    }

    /// Writer-only: set the parent, keeping the colour.
    #[inline]
    pub(crate) fn set_parent(self, parent: *mut N) {
        let black = !self.is_red();
        self.set_parent_color(parent, black);
    }

    /// Writer-only: set the colour, keeping the parent.
    #[inline]
    pub(crate) fn set_black(self, black: bool) {
        self.set_parent_color(self.parent(), black);
    }

    /// Writer-only: set parent and colour. `Release`: pairs with the
    /// cursor's `Acquire` in [`LinkRef::load_parent`].
    #[inline]
    pub(crate) fn set_parent_color(self, parent: *mut N, black: bool) {
        let tagged = parent.map_addr(|a| a | usize::from(black));
        self.parent.0.store(tagged, link_store_order());
    }

    /// Writer-only: copy every link of `other` into `self` (published with
    /// `Release`).
    ///
    /// # Safety
    /// `other`'s children are null or live nodes.
    pub(crate) unsafe fn copy_from(self, other: LinkRef<'_, N>)
    where
        N: Linked,
    {
        // SAFETY: null or live (caller).
        unsafe {
            self.set_child(Dir::Left, other.kids.0[0].load(Ordering::Relaxed));
            self.set_child(Dir::Right, other.kids.0[1].load(Ordering::Relaxed));
        }
        self.parent
            .0
            .store(other.parent.0.load(Ordering::Relaxed), link_store_order());
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
