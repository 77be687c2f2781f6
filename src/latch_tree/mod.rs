//! `LatchTree<K, V>`: the generic ordered map front-end.
//!
//! * `mod.rs`: the node, the type, construction, `Drop` and the traits;
//! * `read.rs`: point queries and snapshots; `iter.rs`: iterators;
//! * `write.rs`: single writes and read-modify-write; `batch.rs`: [`Batch`];
//! * `bulk.rs`: O(n) bulk loading and `Clone`; `serde.rs` (feature `serde`).

mod batch;
mod bulk;
mod iter;
mod read;
#[cfg(feature = "serde")]
mod serde;
mod write;

pub use batch::Batch;
pub use bulk::UnsortedInput;
pub use iter::{Iter, Keys, Range, Values};

use crate::raw::{Cursor, Dir, LinkRef, Linked, Links, RawTree, View};
use crate::reclaim::{Garbage, Pending, Reclaim, Reclaimer, Shell, Spares, contain, drop_all};
use crate::stats::Stats;
use alloc::boxed::Box;
use core::borrow::Borrow;
use core::cmp::Ordering;
use core::fmt;
use core::marker::PhantomData;
use core::ops::Bound;
use core::ptr::{self, NonNull};
use crossbeam_epoch::{Collector, Guard};

/// One entry. Copy 0's links (the copy readers use while no write runs) sit
/// right before the key, so that a descent step touches one small span of
/// the node; copy 1's links and the value follow. (Aligning the node to 32
/// bytes, so that span never straddles a cache line, sends every allocation
/// through glibc's slow `posix_memalign` and measured no better overall.)
#[repr(C)]
pub(crate) struct Node<K, V> {
    hot: Links<Node<K, V>>,
    key: K,
    cold: Links<Node<K, V>>,
    value: V,
}

// SAFETY: copy 0 is always `hot` and copy 1 always `cold`: distinct sets.
unsafe impl<K, V> Linked for Node<K, V> {
    #[inline(always)]
    fn links(&self, copy: usize) -> LinkRef<'_, Self> {
        if copy == 0 {
            self.hot.get()
        } else {
            self.cold.get()
        }
    }
}

impl<K, V> Node<K, V> {
    /// Allocates an unlinked node. Its key and value are never written again
    /// while it is reachable.
    fn alloc(key: K, value: V) -> NonNull<Self> {
        let b = Box::new(Node {
            hot: Links::new(),
            key,
            cold: Links::new(),
            value,
        });
        NonNull::from(Box::leak(b))
    }
}

// A removed node is emptied in place (its key and value dropped), and its
// allocation, a *shell*, is reused by a later insert ([`Shells::alloc`]).
impl<K, V> Garbage for NonNull<Node<K, V>> {
    type Shell = Node<K, V>;
    const TICKETS: bool = false;

    /// Drops the key and value in place, each `Drop` contained (a panic in
    /// the key's still lets the value's run), leaving the node's
    /// allocation as a shell.
    unsafe fn empty(self) -> Option<NonNull<Node<K, V>>> {
        let p = self.as_ptr();
        // The caller hands over the only access to a node whose key and
        // value are initialized (its grace period passed); each is dropped
        // once.
        // SAFETY: so dropping the key in place is sound.
        contain(|| unsafe { ptr::drop_in_place(&raw mut (*p).key) });
        // SAFETY: as above, for the value.
        contain(|| unsafe { ptr::drop_in_place(&raw mut (*p).value) });
        Some(self)
    }
}

// SAFETY: a shell's copy-0 left link is read by no reader (its grace
// period passed) and by nothing else while it is in a chain or on a return
// stack, and `free` only frees the allocation (its key and value are gone).
unsafe impl<K, V> Shell for Node<K, V> {
    /// Enough for the churn between two hand-outs of due nodes (the limbo
    /// announces them 128 at a time, `reclaim::limbo::HELP_BACKLOG`), with
    /// room to spare; more go back to the allocator.
    const KEPT: usize = 160;

    unsafe fn next(this: NonNull<Self>) -> *mut Self {
        // SAFETY: the caller holds the shell, allocated; only its `hot`
        // links are referenced (its key and value are gone).
        unsafe { &(*this.as_ptr()).hot }.get().load_child(Dir::Left)
    }

    unsafe fn set_next(this: NonNull<Self>, next: *mut Self) {
        // As in `next`; these links cache no keys (`Links::get`), so
        // `set_child` only stores `next` (null or a shell).
        // SAFETY: so the store writes the caller's shell alone.
        unsafe { (*this.as_ptr()).hot.get().set_child(Dir::Left, next) };
    }

    unsafe fn free(this: NonNull<Self>) {
        // `MaybeUninit<Node>` has `Node`'s layout; dropping the box frees
        // the allocation without dropping the (gone) key and value.
        // SAFETY: the caller hands over a shell of a `Box<Node<K, V>>`'s
        // allocation, freed once.
        drop(unsafe { Box::from_raw(this.as_ptr().cast::<core::mem::MaybeUninit<Self>>()) });
    }
}

/// Shells ready for reuse by a write's inserts (under the writer lock).
type Shells<K, V> = Spares<Node<K, V>>;

impl<K, V> Shells<K, V> {
    /// An unlinked node holding `key` and `value`: a recycled shell if one
    /// is ready, else a fresh allocation.
    fn alloc(&mut self, key: K, value: V) -> NonNull<Node<K, V>> {
        let Some(shell) = self.pop() else {
            return Node::alloc(key, value);
        };
        let node = Node {
            hot: Links::new(),
            key,
            cold: Links::new(),
            value,
        };
        // No reader can reach a shell (its grace period passed before it
        // became one) and the writer lock makes this batch its only user; its
        // allocation fits a `Node<K, V>`.
        // SAFETY: so writing a whole new node over it races with nothing.
        unsafe { shell.as_ptr().write(node) };
        shell
    }
}

/// The writer-only state, under the writer lock: reclamation's part.
type Writer<K, V> = Pending<NonNull<Node<K, V>>>;

/// A concurrent ordered map whose readers never block: a red-black tree kept
/// twice behind a seqcount latch.
///
/// Readers pin an epoch [`Guard`] (see [`pin`](crate::pin)) and get
/// references that live as long as the guard. Writers are serialized by an
/// internal lock and never wait for readers. See the [crate docs](crate) for
/// how it works and what it guarantees.
///
/// **Porting from `BTreeMap` or `SkipMap`?** Read the crate's guide page
/// `guide::from_btreemap` first: reads take a
/// guard, `insert` replaces the key too and returns no old value,
/// iterators see concurrent writes and have no exact size, an inverted
/// `range` is empty rather than a panic, and removed entries are dropped
/// later.
///
/// # Examples
///
/// ```
/// use latchtree::LatchTree;
/// use std::ops::Bound;
///
/// let tree = LatchTree::new();
/// tree.insert(10, "ten");
/// tree.insert(20, "twenty");
///
/// let guard = latchtree::pin();
/// assert_eq!(tree.get(&10, &guard), Some(&"ten"));
/// assert_eq!(tree.upper_bound(Bound::Included(&15), &guard), Some((&10, &"ten")));
/// assert_eq!(tree.lower_bound(Bound::Excluded(&10), &guard), Some((&20, &"twenty")));
/// ```
///
/// A reference cannot outlive its guard:
///
/// ```compile_fail
/// let tree = latchtree::LatchTree::new();
/// tree.insert(1, 1);
/// let r = {
///     let guard = latchtree::pin();
///     tree.get(&1, &guard)
/// };
/// drop(r);
/// ```
///
/// # User code that misbehaves
///
/// A panic in `K`'s `Ord` (or in a [`write`](LatchTree::write) closure)
/// during a write rolls the whole write back: readers never see any of it, the
/// tree keeps its previous contents, and the panic propagates to the writer.
/// An `Ord` that is not a total order cannot cause undefined behaviour or
/// make a reader loop; lookups may then miss entries, as with `BTreeMap`.
/// A panic in `K`'s or `V`'s `Drop` while a removed entry is reclaimed is
/// caught and counted by
/// [`swallowed_drop_panics`](crate::swallowed_drop_panics).
/// During `drop` of the tree, the other entries are still dropped and the
/// first panic from a live entry is then resumed, unless the thread is
/// already unwinding: then it is counted instead (resuming it would abort
/// the process). Without the `std` feature nothing can catch a panic:
/// one that unwinds out of user code inside a write aborts instead
/// (the `guide::no_std` page).
///
/// # When a removed entry is dropped
///
/// By the tree's writer, never by a reader: a removed (or replaced) entry
/// waits, with the writer, until no guard pinned before its removal is
/// left, and is then dropped by a later write of this tree (after its lock
/// is released), by [`flush`](LatchTree::flush), or when the tree is
/// dropped, on the thread that does it. Readers' pins only run a tiny
/// announcement (at most one per tree per epoch step), never a `K` or `V`
/// `Drop`. No `K` or `V` is ever dropped under a writer lock: a write nested
/// in another tree's batch closure leaves what it would drop until that
/// outer write has released its lock, so a `Drop` may itself write to
/// either tree. The memory of a dropped entry is reused by later inserts
/// (up to 160 nodes per tree are kept for that; `flush` frees them).
///
/// **How much waits** (tested over random operation sequences,
/// `tests/reclaim_bound.rs`): while no guard is held on any thread, after
/// every write at most 128 removed entries are still alive besides those the
/// last 16 writes removed, whatever the writes (inserts only, removes,
/// batches, `clear`, a write nested in another tree's batch); one
/// [`flush`](LatchTree::flush) drops all of them. A guard held somewhere
/// keeps what it may see, and what was removed after it, until it is
/// dropped; many writes nested in one batch closure of another tree
/// likewise keep what they remove until that batch ends. Once older than
/// the last 16 writes that removed anything, such a backlog goes at most
/// 1,024 entries a write, besides twice what those writes removed and,
/// once it is gone, their removals, so that no one write pays for a mass
/// removal made of many writes (`tests/reclaim_backlog.rs`); `flush` drops
/// all of it. (A removal made of 16 writes or fewer, say one `clear`, is
/// dropped by one write.)
///
/// # Iteration and `&LatchTree` in `for` loops
///
/// [`iter`](LatchTree::iter), [`range`](LatchTree::range),
/// [`keys`](LatchTree::keys) and [`values`](LatchTree::values) take a guard,
/// because their items borrow from it. `IntoIterator` is therefore not
/// implemented for `&LatchTree`: such an iterator would have to own its
/// guard, and items borrowed from a guard the iterator owns would dangle
/// once the iterator is dropped. Write `for (k, v) in tree.iter(&guard)`.
pub struct LatchTree<K, V> {
    raw: RawTree<Node<K, V>, Writer<K, V>>,
    reclaim: Reclaim<NonNull<Node<K, V>>>,
    /// The tree owns its keys and values.
    _owns: PhantomData<Box<Node<K, V>>>,
}

// SAFETY: the tree owns `K`s and `V`s (moved in, dropped possibly on another thread: `Send`), and
// shares `&K`/`&V` with readers on any thread (`Sync`). Every racy word of a node is an atomic.
unsafe impl<K: Send + Sync, V: Send + Sync> Send for LatchTree<K, V> {}
// SAFETY: as above.
unsafe impl<K: Send + Sync, V: Send + Sync> Sync for LatchTree<K, V> {}

impl<K, V> LatchTree<K, V> {
    crate::sync::const_fn_unless_loom! {
        /// An empty tree using crossbeam-epoch's default collector (the one
        /// [`latchtree::pin()`](crate::pin) pins). `const`, so a tree can be
        /// a `static`.
        ///
        /// ```
        /// static SYMBOLS: latchtree::LatchTree<u64, &str> = latchtree::LatchTree::new();
        /// SYMBOLS.insert(0x1000, "main");
        /// assert!(SYMBOLS.contains_key(&0x1000));
        /// ```
        pub fn new() -> Self {
            LatchTree {
                raw: RawTree::new(Writer::new(), usize::MAX),
                reclaim: Reclaim::new(Reclaimer::global()),
                _owns: PhantomData,
            }
        }
    }

    /// An empty tree whose readers pin `collector` instead of the default
    /// one. Guards must then come from a handle of that collector. Methods
    /// that pin internally (`contains_key`, `to_vec`, writes, [`pin`]) then
    /// register a fresh participant each time, which allocates: on hot paths
    /// keep a [`LocalHandle`](crate::LocalHandle) of the collector and pass
    /// its guards. On targets other than x86-64, put a
    /// `std::sync::atomic::fence(Release)` before each `handle.pin()`, as
    /// [`latchtree::pin`](crate::pin) does (it explains why).
    ///
    /// [`pin`]: LatchTree::pin
    ///
    /// ```
    /// use latchtree::{Collector, LatchTree};
    /// let collector = Collector::new();
    /// let tree = LatchTree::with_collector(collector.clone());
    /// tree.insert(1, 'a');
    /// let handle = collector.register();
    /// let guard = handle.pin();
    /// assert_eq!(tree.get(&1, &guard), Some(&'a'));
    /// ```
    pub fn with_collector(collector: Collector) -> Self {
        Self::with_reclaimer(Reclaimer::with_collector(collector))
    }

    /// An empty tree reclaiming through `reclaim`.
    fn with_reclaimer(reclaim: Reclaimer) -> Self {
        LatchTree {
            raw: RawTree::new(Writer::new(), usize::MAX),
            reclaim: Reclaim::new(reclaim),
            _owns: PhantomData,
        }
    }

    /// The number of entries.
    ///
    /// ```
    /// let tree = latchtree::LatchTree::new();
    /// tree.insert("a", 1);
    /// assert_eq!(tree.len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    /// Whether the tree is empty.
    ///
    /// ```
    /// let tree = latchtree::LatchTree::<u8, u8>::new();
    /// assert!(tree.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Counters for observability: reads retried and writes done (a bulk
    /// load counts as one write).
    ///
    /// ```
    /// let tree = latchtree::LatchTree::new();
    /// tree.insert(1, 1);
    /// assert_eq!(tree.stats().writes, 1);
    /// ```
    pub fn stats(&self) -> Stats {
        let (read_retries, writes) = self.raw.stats();
        Stats {
            read_retries,
            writes,
        }
    }

    /// Pins this tree's collector: the default one, or the one given to
    /// [`with_collector`](LatchTree::with_collector).
    ///
    /// ```
    /// let tree = latchtree::LatchTree::new();
    /// tree.insert(3, 9);
    /// let guard = tree.pin();
    /// assert_eq!(tree.get(&3, &guard), Some(&9));
    /// ```
    #[must_use = "a guard protects only while it is held"]
    pub fn pin(&self) -> Guard {
        self.reclaim.pin()
    }

    /// Panics unless `guard` pins this tree's collector.
    #[inline(always)]
    pub(crate) fn check_guard(&self, guard: &Guard) {
        self.reclaim.check_guard(guard);
    }

    /// Runs a bounded read against a stable copy.
    #[inline(always)]
    fn read<'g, R>(
        &'g self,
        guard: &'g Guard,
        attempt: impl FnMut(View<'g, Node<K, V>>) -> Option<R>,
    ) -> R {
        self.reclaim.check_guard(guard);
        // `guard` pins this tree's collector (checked above) for 'g, and a
        // node is retired through it only after it left both copies; `Drop`
        // frees the rest and needs `&mut self`, impossible while `&'g self`.
        // SAFETY: so every node this read can reach stays allocated for 'g.
        unsafe { self.raw.read(attempt) }
    }

    /// Runs a bounded read that stops on a node and returns a cursor there.
    ///
    /// # Safety
    /// A guard that pins this tree's collector (as checked by
    /// [`LatchTree::check_guard`]) lives for `'g`.
    #[inline(always)]
    unsafe fn seek_unchecked<'g>(
        &'g self,
        attempt: impl FnMut(View<'g, Node<K, V>>) -> Option<Option<&'g Node<K, V>>>,
    ) -> Option<Cursor<'g, Node<K, V>>> {
        // As in `read`, for the guard the caller promises; the cursor steps
        // only within 'g.
        // SAFETY: so every node the seek and its cursor's steps can reach
        // stays allocated for 'g.
        unsafe { self.raw.seek(attempt) }
    }
}

/// The step function of a point search for `key`: branch-free descent to a
/// leaf, keeping in `cand` the last node whose key is <= `key`; the caller
/// tests equality once, at the bottom.
#[inline(always)]
fn key_step<'n, 'q, K: Borrow<Q>, V, Q: Ord + ?Sized>(
    key: &'q Q,
    cand: &'q mut Option<&'n Node<K, V>>,
) -> impl FnMut(&'n Node<K, V>) -> Option<Dir> {
    move |n| {
        let right = key.cmp(n.key.borrow()) != Ordering::Less;
        *cand = if right { Some(n) } else { *cand };
        Some(Dir::toward(right))
    }
}

/// Whether `cand` (from [`key_step`]) holds `key`.
#[inline(always)]
fn exact<'a, K: Borrow<Q>, V, Q: Ord + ?Sized>(
    key: &Q,
    cand: Option<&'a Node<K, V>>,
) -> Option<&'a Node<K, V>> {
    cand.filter(|n| key.cmp(n.key.borrow()) == Ordering::Equal)
}

/// The step function of a bound search: for `toward_end == Right`
/// (`upper_bound`) it keeps in `best` the last node below the bound (or
/// equal, when `Included`), and the mirror image for `Left`.
#[inline(always)]
fn bound_step<'n, 'q, K: Borrow<Q>, V, Q: Ord + ?Sized>(
    bound: Bound<&'q Q>,
    toward_end: Dir,
    best: &'q mut Option<&'n Node<K, V>>,
) -> impl FnMut(&'n Node<K, V>) -> Option<Dir> {
    let away = toward_end.flip();
    move |n| {
        let ok = match bound {
            Bound::Unbounded => true,
            Bound::Included(q) => {
                let ord = n.key.borrow().cmp(q);
                ord == Ordering::Equal || (ord == Ordering::Less) == (toward_end == Dir::Right)
            }
            Bound::Excluded(q) => {
                let ord = n.key.borrow().cmp(q);
                ord != Ordering::Equal && (ord == Ordering::Less) == (toward_end == Dir::Right)
            }
        };
        *best = if ok { Some(n) } else { *best };
        Some(if ok { toward_end } else { away })
    }
}

/// A node's entry as the pair of references the API hands out.
#[inline(always)]
fn entry<K, V>(n: &Node<K, V>) -> (&K, &V) {
    (&n.key, &n.value)
}

impl<K, V> Drop for LatchTree<K, V> {
    /// Drops every entry, and every removed one still waiting for its grace
    /// period (no reader is left: `&mut self`); the shells kept for reuse
    /// go with the fields. A panic from a removed entry's `Drop` is counted,
    /// as during reclamation by a write; the first from a live entry's is
    /// resumed (see the type docs).
    fn drop(&mut self) {
        for node in self.raw.state_mut().take_waiting() {
            // SAFETY: a removed node, out of both copies, with its key and
            // value, reachable by no reader (`&mut self`), handed out once.
            unsafe { crate::reclaim::free_now(node) };
        }
        free_nodes(self.raw.drain_nodes());
    }
}

/// Frees nodes that no reader can reach any more (the tree's `Drop`, a bulk
/// load that failed), dropping every one even if some `Drop` panics; the
/// first panic is then resumed, or counted if the thread is already
/// unwinding (resuming would abort the process).
fn free_nodes<K, V>(nodes: impl IntoIterator<Item = NonNull<Node<K, V>>>) {
    drop_all(nodes, |node| {
        // The caller hands over nodes that came from `Node::alloc` or `Shells::alloc` (a
        // `Box<Node>`'s allocation, holding a key and value), are reachable by no reader and
        // are freed once.
        // SAFETY: so each is a live `Box<Node>`, unreachable, freed once.
        drop(unsafe { Box::from_raw(node.as_ptr()) });
    });
}

impl<K, V> Default for LatchTree<K, V> {
    /// An empty tree, as [`LatchTree::new`].
    ///
    /// ```
    /// let tree: latchtree::LatchTree<u8, u8> = Default::default();
    /// assert!(tree.is_empty());
    /// ```
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Ord + fmt::Debug, V: fmt::Debug> fmt::Debug for LatchTree<K, V> {
    /// The entries of one version, as a map.
    ///
    /// ```
    /// let tree: latchtree::LatchTree<_, _> = [(1, 'a')].into_iter().collect();
    /// assert_eq!(format!("{tree:?}"), "{1: 'a'}");
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let guard = self.pin();
        f.debug_map().entries(self.snapshot(&guard)).finish()
    }
}

impl<K: Ord + PartialEq, V: PartialEq> PartialEq for LatchTree<K, V> {
    /// Compares one version of each tree (each read consistently on its
    /// own; no version is shared between two trees).
    ///
    /// ```
    /// let a: latchtree::LatchTree<_, _> = [(1, 'a'), (2, 'b')].into_iter().collect();
    /// let b = latchtree::LatchTree::new();
    /// b.insert(2, 'b');
    /// assert_ne!(a, b);
    /// b.insert(1, 'a');
    /// assert_eq!(a, b);
    /// ```
    fn eq(&self, other: &Self) -> bool {
        let (g1, g2) = (self.pin(), other.pin());
        self.snapshot(&g1) == other.snapshot(&g2)
    }
}

impl<K: Ord + Eq, V: Eq> Eq for LatchTree<K, V> {}
