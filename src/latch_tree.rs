//! `LatchTree<K, V>`: the generic ordered map front-end.

use crate::raw::{Dir, Linked, Links, RawTree, Slot, Txn};
use crate::reclaim::Reclaimer;
use crate::stats::Stats;
use core::borrow::Borrow;
use core::cmp::Ordering;
use core::fmt;
use core::marker::PhantomData;
use core::ops::Bound;
use core::ptr::NonNull;
use crossbeam_epoch::{Collector, Guard};

/// One entry. Copy 0's links (the copy readers use while no write runs) sit
/// right before the key, so that a descent step touches one small span of
/// the node; copy 1's links and the value follow. (Aligning the node to 32
/// bytes, so that span never straddles a cache line, sends every allocation
/// through glibc's slow `posix_memalign` and measured no better overall.)
#[repr(C)]
struct Node<K, V> {
    hot: Links<Node<K, V>>,
    key: K,
    cold: Links<Node<K, V>>,
    value: V,
}

// SAFETY: copy 0 is always `hot` and copy 1 always `cold`: distinct sets.
unsafe impl<K, V> Linked for Node<K, V> {
    #[inline(always)]
    fn links(&self, copy: usize) -> &Links<Self> {
        if copy == 0 { &self.hot } else { &self.cold }
    }
}

impl<K, V> Node<K, V> {
    /// Allocates an unlinked node. Its key and value are never written again.
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

/// Which way to go from `node` when looking for `key`.
#[inline(always)]
fn toward<K: Borrow<Q>, V, Q: Ord + ?Sized>(key: &Q, node: &Node<K, V>) -> Option<Dir> {
    match key.cmp(node.key.borrow()) {
        Ordering::Less => Some(Dir::Left),
        Ordering::Greater => Some(Dir::Right),
        Ordering::Equal => None,
    }
}

/// A concurrent ordered map whose readers never block and never write shared
/// memory: a red-black tree kept twice behind a seqcount latch.
///
/// Readers pin an epoch [`Guard`] (see [`pin`](crate::pin)) and get
/// references that live as long as the guard. Writers are serialized by an
/// internal lock and never wait for readers. See the [crate docs](crate) for
/// how it works and what it guarantees.
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
/// A panic in `K`'s or `V`'s `Drop` while a retired entry is reclaimed in the
/// background is caught and discarded; during `drop` of the tree, the other
/// entries are still dropped and the first panic is then resumed.
pub struct LatchTree<K, V> {
    raw: RawTree<Node<K, V>, ()>,
    reclaim: Reclaimer,
    /// The tree owns its keys and values.
    _owns: PhantomData<Box<Node<K, V>>>,
}

// SAFETY: the tree owns `K`s and `V`s (moved in, dropped possibly on another
// thread: `Send`), and shares `&K`/`&V` with readers on any thread (`Sync`).
// Every racy word of a node is an atomic.
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
                raw: RawTree::new(()),
                reclaim: Reclaimer::global(),
                _owns: PhantomData,
            }
        }
    }

    /// An empty tree whose readers pin `collector` instead of the default
    /// one. Guards must then come from a handle of that collector. Methods
    /// that pin internally (`contains_key`, `to_vec`, writes, [`pin`]) then
    /// register a fresh participant each time, which allocates: on hot paths
    /// keep a [`LocalHandle`](crate::LocalHandle) of the collector and pass
    /// its guards.
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
        LatchTree {
            raw: RawTree::new(()),
            reclaim: Reclaimer::with_collector(collector),
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

    /// Counters for observability: reads retried and writes done.
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
        attempt: impl FnMut(crate::raw::View<'g, Node<K, V>>) -> Option<R>,
    ) -> R {
        self.reclaim.check_guard(guard);
        // `guard` pins this tree's collector (checked above) for 'g, and a
        // node is retired through it only after it left both copies; `Drop`
        // frees the rest and needs `&mut self`, impossible while `&'g self`.
        // SAFETY: so every node this read can reach stays allocated for 'g.
        unsafe { self.raw.read(attempt) }
    }
}

impl<K: Ord, V> LatchTree<K, V> {
    /// The entry with key `key`, if any.
    ///
    /// ```
    /// let tree = latchtree::LatchTree::new();
    /// tree.insert(String::from("k"), 1);
    /// let guard = latchtree::pin();
    /// assert_eq!(tree.get_key_value("k", &guard), Some((&String::from("k"), &1)));
    /// ```
    #[inline]
    pub fn get_key_value<'g, Q>(&'g self, key: &Q, guard: &'g Guard) -> Option<(&'g K, &'g V)>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.read(guard, |view| {
            // Branch-free descent to a leaf, keeping the last node whose key
            // is <= `key`; equality is tested once, at the bottom.
            let mut cand: Option<&'g Node<K, V>> = None;
            view.descend(|n| {
                let right = key.cmp(n.key.borrow()) != Ordering::Less;
                cand = if right { Some(n) } else { cand };
                Some(Dir::toward(right))
            })?;
            Some(
                cand.filter(|n| key.cmp(n.key.borrow()) == Ordering::Equal)
                    .map(|n| (&n.key, &n.value)),
            )
        })
    }

    /// The value for `key`, if any.
    ///
    /// ```
    /// let tree = latchtree::LatchTree::new();
    /// tree.insert(7, "seven");
    /// let guard = latchtree::pin();
    /// assert_eq!(tree.get(&7, &guard), Some(&"seven"));
    /// assert_eq!(tree.get(&8, &guard), None);
    /// ```
    #[inline]
    pub fn get<'g, Q>(&'g self, key: &Q, guard: &'g Guard) -> Option<&'g V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.get_key_value(key, guard).map(|(_, v)| v)
    }

    /// Whether `key` is present; pins internally.
    ///
    /// ```
    /// let tree = latchtree::LatchTree::new();
    /// tree.insert(1, ());
    /// assert!(tree.contains_key(&1));
    /// ```
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let guard = self.pin();
        self.get_key_value(key, &guard).is_some()
    }

    /// The entry with the greatest key at or below an `Included` bound,
    /// strictly below an `Excluded` one, or the last entry for `Unbounded`.
    ///
    /// ```
    /// use std::ops::Bound::*;
    /// let tree: latchtree::LatchTree<_, _> = [(1, 'a'), (5, 'b')].into_iter().collect();
    /// let g = latchtree::pin();
    /// assert_eq!(tree.upper_bound(Included(&5), &g), Some((&5, &'b')));
    /// assert_eq!(tree.upper_bound(Excluded(&5), &g), Some((&1, &'a')));
    /// assert_eq!(tree.upper_bound(Excluded(&1), &g), None);
    /// assert_eq!(tree.upper_bound(Unbounded, &g), Some((&5, &'b')));
    /// ```
    #[inline]
    pub fn upper_bound<'g, Q>(
        &'g self,
        bound: Bound<&Q>,
        guard: &'g Guard,
    ) -> Option<(&'g K, &'g V)>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.bound(bound, Dir::Right, guard)
    }

    /// The entry with the smallest key at or above an `Included` bound,
    /// strictly above an `Excluded` one, or the first entry for `Unbounded`.
    ///
    /// ```
    /// use std::ops::Bound::*;
    /// let tree: latchtree::LatchTree<_, _> = [(1, 'a'), (5, 'b')].into_iter().collect();
    /// let g = latchtree::pin();
    /// assert_eq!(tree.lower_bound(Included(&2), &g), Some((&5, &'b')));
    /// assert_eq!(tree.lower_bound(Excluded(&5), &g), None);
    /// assert_eq!(tree.lower_bound(Unbounded, &g), Some((&1, &'a')));
    /// ```
    #[inline]
    pub fn lower_bound<'g, Q>(
        &'g self,
        bound: Bound<&Q>,
        guard: &'g Guard,
    ) -> Option<(&'g K, &'g V)>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.bound(bound, Dir::Left, guard)
    }

    /// `upper_bound` (`toward == Right`: the last key on the low side of the
    /// bound) and its mirror image `lower_bound`.
    #[inline(always)]
    fn bound<'g, Q>(
        &'g self,
        bound: Bound<&Q>,
        toward_end: Dir,
        guard: &'g Guard,
    ) -> Option<(&'g K, &'g V)>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        // Branch-free descent to a leaf, keeping the last node on the wanted
        // side of the bound: for `upper_bound` (toward_end == Right) keys
        // below the bound (or equal, when Included), and the mirror image.
        let away = toward_end.flip();
        self.read(guard, |view| {
            let mut best: Option<&'g Node<K, V>> = None;
            view.descend(|n| {
                let ok = match bound {
                    Bound::Unbounded => true,
                    Bound::Included(q) => {
                        let ord = n.key.borrow().cmp(q);
                        ord == Ordering::Equal
                            || (ord == Ordering::Less) == (toward_end == Dir::Right)
                    }
                    Bound::Excluded(q) => {
                        let ord = n.key.borrow().cmp(q);
                        ord != Ordering::Equal
                            && (ord == Ordering::Less) == (toward_end == Dir::Right)
                    }
                };
                best = if ok { Some(n) } else { best };
                Some(if ok { toward_end } else { away })
            })?;
            Some(best.map(|n| (&n.key, &n.value)))
        })
    }

    /// The entry with the smallest key.
    ///
    /// ```
    /// let tree: latchtree::LatchTree<_, _> = [(2, 'b'), (1, 'a')].into_iter().collect();
    /// assert_eq!(tree.first_key_value(&latchtree::pin()), Some((&1, &'a')));
    /// ```
    pub fn first_key_value<'g>(&'g self, guard: &'g Guard) -> Option<(&'g K, &'g V)> {
        self.lower_bound::<K>(Bound::Unbounded, guard)
    }

    /// The entry with the greatest key.
    ///
    /// ```
    /// let tree: latchtree::LatchTree<_, _> = [(2, 'b'), (1, 'a')].into_iter().collect();
    /// assert_eq!(tree.last_key_value(&latchtree::pin()), Some((&2, &'b')));
    /// ```
    pub fn last_key_value<'g>(&'g self, guard: &'g Guard) -> Option<(&'g K, &'g V)> {
        self.upper_bound::<K>(Bound::Unbounded, guard)
    }

    /// Every entry of one version of the tree, in key order: a consistent
    /// snapshot (the walk is retried if a write landed meanwhile).
    ///
    /// ```
    /// let tree: latchtree::LatchTree<_, _> = [(2, 'b'), (1, 'a')].into_iter().collect();
    /// let g = latchtree::pin();
    /// assert_eq!(tree.snapshot(&g), vec![(&1, &'a'), (&2, &'b')]);
    /// ```
    pub fn snapshot<'g>(&'g self, guard: &'g Guard) -> Vec<(&'g K, &'g V)> {
        self.read(guard, |view| {
            let mut out = Vec::new();
            view.walk(|n| out.push((&n.key, &n.value)))?;
            Some(out)
        })
    }

    /// Clones every entry of one version, in key order.
    ///
    /// ```
    /// let tree: latchtree::LatchTree<_, _> = [(2, 'b'), (1, 'a')].into_iter().collect();
    /// assert_eq!(tree.to_vec(), vec![(1, 'a'), (2, 'b')]);
    /// ```
    pub fn to_vec(&self) -> Vec<(K, V)>
    where
        K: Clone,
        V: Clone,
    {
        let guard = self.pin();
        self.snapshot(&guard)
            .into_iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    #[doc(hidden)]
    /// Checks every structural invariant; for tests.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.raw.check(|a, b| a.key < b.key)
    }
}

impl<K: Ord + Send + 'static, V: Send + 'static> LatchTree<K, V> {
    /// Inserts `key → value`. Returns `true` if the key was new; otherwise
    /// the entry gets the new key and value, and the old ones are dropped
    /// once no reader can see them.
    ///
    /// ```
    /// let tree = latchtree::LatchTree::new();
    /// assert!(tree.insert(1, "a"));
    /// assert!(!tree.insert(1, "b"));
    /// assert_eq!(tree.get(&1, &latchtree::pin()), Some(&"b"));
    /// ```
    pub fn insert(&self, key: K, value: V) -> bool {
        self.write(|batch| batch.insert(key, value))
    }

    /// Removes `key`. Returns whether it was present.
    ///
    /// ```
    /// let tree = latchtree::LatchTree::new();
    /// tree.insert(1, "a");
    /// assert!(tree.remove(&1));
    /// assert!(!tree.remove(&1));
    /// ```
    pub fn remove<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.write(|batch| batch.remove(key))
    }

    /// Applies several inserts and removes as one atomic write: readers see
    /// all of them or none, and the whole batch costs two counter flips.
    /// If `f` panics, nothing it did is kept.
    ///
    /// # Panics
    /// If `f` starts another write on the same tree (use `batch` instead),
    /// and whenever `f` or `K`'s `Ord` panics.
    ///
    /// ```
    /// let tree = latchtree::LatchTree::new();
    /// tree.insert(1, "old");
    /// let added = tree.write(|batch| {
    ///     batch.remove(&1);
    ///     batch.insert(2, "two") as usize + batch.insert(3, "three") as usize
    /// });
    /// assert_eq!(added, 2);
    /// assert_eq!(tree.to_vec(), vec![(2, "two"), (3, "three")]);
    /// ```
    pub fn write<R>(&self, f: impl FnOnce(&mut Batch<'_, K, V>) -> R) -> R {
        // Released nodes are retired after the writer lock is dropped (also
        // when unwinding): no epoch pin for writes that release nothing, and
        // none under the lock, where crossbeam could run a deferred `Drop`
        // that writes to this very tree.
        let mut retiring = Retiring {
            reclaim: &self.reclaim,
            first: None,
            rest: Vec::new(),
        };
        self.raw.write(
            |txn, _| f(&mut Batch { txn }),
            |_, _, _| {},
            |_, node| match retiring.first {
                None => retiring.first = Some(node),
                Some(_) => retiring.rest.push(node),
            },
        )
    }
}

/// Nodes that left the tree, retired through the epoch when dropped.
struct Retiring<'a, K, V> {
    reclaim: &'a Reclaimer,
    first: Option<NonNull<Node<K, V>>>,
    rest: Vec<NonNull<Node<K, V>>>,
}

impl<K, V> Drop for Retiring<'_, K, V> {
    fn drop(&mut self) {
        let Some(first) = self.first.take() else {
            return;
        };
        let guard = self.reclaim.pin();
        for node in core::iter::once(first).chain(self.rest.drain(..)) {
            // Each node was released by a finished transaction: it left both
            // copies (or was never in one readers could validate).
            // SAFETY: unreachable for later pins, from `Node::alloc` (a
            // leaked `Box`), released exactly once; `guard` is ours.
            unsafe { self.reclaim.retire(&guard, node) };
        }
    }
}

/// The writer's handle inside [`LatchTree::write`]: its changes become
/// visible together when the closure returns.
pub struct Batch<'t, K, V> {
    txn: &'t mut Txn<'t, Node<K, V>>,
}

impl<K, V> fmt::Debug for Batch<'_, K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batch")
            .field("len", &self.txn.len())
            .finish()
    }
}

impl<K: Ord, V> Batch<'_, K, V> {
    /// Inserts or replaces; returns `true` if the key was new.
    ///
    /// ```
    /// let tree = latchtree::LatchTree::new();
    /// assert!(tree.write(|b| b.insert(1, 1)));
    /// ```
    pub fn insert(&mut self, key: K, value: V) -> bool {
        let slot = self.txn.find(|n| toward(&key, n));
        let node = Node::alloc(key, value);
        match slot {
            Slot::Occupied(old) => {
                // SAFETY: `old` came from `find` just now; `node` is fresh.
                unsafe { self.txn.replace(old, node) };
                false
            }
            Slot::Vacant { .. } => {
                // SAFETY: `node` is fresh and stays allocated until released;
                // `slot` is vacant and nothing changed since `find`.
                unsafe { self.txn.insert(node, slot) };
                true
            }
        }
    }

    /// Removes `key`; returns whether it was present.
    ///
    /// ```
    /// let tree = latchtree::LatchTree::new();
    /// tree.insert(1, 1);
    /// assert!(tree.write(|b| b.remove(&1)));
    /// ```
    pub fn remove<Q>(&mut self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        match self.txn.find(|n| toward(key, n)) {
            Slot::Occupied(node) => {
                // SAFETY: `node` came from `find` just now.
                unsafe { self.txn.erase(node) };
                true
            }
            Slot::Vacant { .. } => false,
        }
    }

    /// Whether `key` is present in the version this batch is building.
    ///
    /// ```
    /// let tree = latchtree::LatchTree::new();
    /// tree.write(|b| {
    ///     b.insert(1, 1);
    ///     assert!(b.contains_key(&1));
    /// });
    /// ```
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        matches!(self.txn.find(|n| toward(key, n)), Slot::Occupied(_))
    }

    /// The number of entries in the version this batch is building.
    ///
    /// ```
    /// let tree = latchtree::LatchTree::new();
    /// tree.write(|b| {
    ///     b.insert(1, 1);
    ///     assert_eq!(b.len(), 1);
    /// });
    /// ```
    pub fn len(&self) -> usize {
        self.txn.len()
    }

    /// Whether the version this batch is building is empty.
    ///
    /// ```
    /// let tree = latchtree::LatchTree::<u8, u8>::new();
    /// tree.write(|b| assert!(b.is_empty()));
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K, V> Drop for LatchTree<K, V> {
    fn drop(&mut self) {
        let mut panic = None;
        for node in self.raw.drain_nodes() {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                // SAFETY: `&mut self`: no reader or writer is left; every
                // node in the tree came from `Node::alloc` and is freed once
                // (nodes that left the tree were retired, not drained).
                drop(unsafe { Box::from_raw(node.as_ptr()) });
            }));
            if let Err(p) = r {
                panic.get_or_insert(p);
            }
        }
        if let Some(p) = panic {
            std::panic::resume_unwind(p);
        }
    }
}

impl<K, V> Default for LatchTree<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Ord + fmt::Debug, V: fmt::Debug> fmt::Debug for LatchTree<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let guard = self.pin();
        f.debug_map().entries(self.snapshot(&guard)).finish()
    }
}

impl<K: Ord + Send + 'static, V: Send + 'static> FromIterator<(K, V)> for LatchTree<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut tree = LatchTree::new();
        tree.extend(iter);
        tree
    }
}

impl<K: Ord + Send + 'static, V: Send + 'static> Extend<(K, V)> for LatchTree<K, V> {
    /// Inserts every pair as one atomic batch.
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        (&*self).extend(iter);
    }
}

impl<K: Ord + Send + 'static, V: Send + 'static> Extend<(K, V)> for &LatchTree<K, V> {
    /// Inserts every pair as one atomic batch.
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        self.write(|batch| {
            for (k, v) in iter {
                batch.insert(k, v);
            }
        });
    }
}
