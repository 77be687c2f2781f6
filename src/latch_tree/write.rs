//! Single writes and read-modify-write, each one transaction (one version).
//!
//! No user code runs under the writer lock except `K`'s `Ord`: closures
//! (`get_or_insert_with`'s `f`, `retain`'s predicate) run before the write,
//! a rejected value is handed back out of it, and entries that leave the
//! tree are retired into reclamation's limbo until their grace period
//! passed; a later write drops them after its lock is released, and
//! recycles their nodes (`crate::reclaim`, through [`LatchTree::transact`]).

use super::{Batch, LatchTree, Node, Writer, entry};
use crate::raw::{Dir, Hooks, Txn};
use crate::reclaim::{Front, Reclaim, Transaction};
use core::borrow::Borrow;
use core::ptr::NonNull;
use crossbeam_epoch::Guard;

impl<K: Ord + Send + 'static, V: Send + 'static> LatchTree<K, V> {
    /// Inserts `key → value`. Returns `true` if the key was new; otherwise
    /// the entry gets the new key and value, and the old ones are dropped
    /// once no reader can see them (see [when a removed entry is
    /// dropped](LatchTree#when-a-removed-entry-is-dropped)).
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

    /// Removes `key` and returns the removed entry, borrowed for the
    /// guard's lifetime: the entry is dropped once no guard that could see
    /// it is left, and `guard` is one of them.
    ///
    /// # Panics
    /// If `guard` does not pin this tree's collector.
    ///
    /// ```
    /// let tree = latchtree::LatchTree::new();
    /// tree.insert(1, String::from("one"));
    /// let guard = latchtree::pin();
    /// assert_eq!(tree.remove_entry(&1, &guard), Some((&1, &String::from("one"))));
    /// assert_eq!(tree.remove_entry(&1, &guard), None);
    /// ```
    pub fn remove_entry<'g, Q>(&'g self, key: &Q, guard: &'g Guard) -> Option<(&'g K, &'g V)>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.check_guard(guard);
        let node = self.write(|batch| batch.take(key))?;
        // SAFETY: see `removed`.
        Some(entry(unsafe { removed(node, guard) }))
    }

    /// Removes the entry with the smallest key and returns it, borrowed for
    /// the guard's lifetime (as [`remove_entry`](LatchTree::remove_entry):
    /// no `Clone` needed, and nothing is dropped under the writer lock).
    ///
    /// # Panics
    /// If `guard` does not pin this tree's collector.
    ///
    /// ```
    /// let tree: latchtree::LatchTree<_, _> = [(1, 'a'), (2, 'b')].into_iter().collect();
    /// let guard = latchtree::pin();
    /// assert_eq!(tree.pop_first(&guard), Some((&1, &'a')));
    /// assert_eq!(tree.pop_first(&guard), Some((&2, &'b')));
    /// assert_eq!(tree.pop_first(&guard), None);
    /// ```
    pub fn pop_first<'g>(&'g self, guard: &'g Guard) -> Option<(&'g K, &'g V)> {
        self.pop(Dir::Left, guard)
    }

    /// Removes the entry with the greatest key and returns it, borrowed for
    /// the guard's lifetime (see [`pop_first`](LatchTree::pop_first)).
    ///
    /// # Panics
    /// If `guard` does not pin this tree's collector.
    ///
    /// ```
    /// let tree: latchtree::LatchTree<_, _> = [(1, 'a'), (2, 'b')].into_iter().collect();
    /// let guard = latchtree::pin();
    /// assert_eq!(tree.pop_last(&guard), Some((&2, &'b')));
    /// assert_eq!(tree.len(), 1);
    /// ```
    pub fn pop_last<'g>(&'g self, guard: &'g Guard) -> Option<(&'g K, &'g V)> {
        self.pop(Dir::Right, guard)
    }

    fn pop<'g>(&'g self, end: Dir, guard: &'g Guard) -> Option<(&'g K, &'g V)> {
        self.check_guard(guard);
        let node = self.write(|batch| batch.take_extreme(end))?;
        // SAFETY: see `removed`.
        Some(entry(unsafe { removed(node, guard) }))
    }

    /// The value for `key`, inserting `f()` first if the key is absent.
    /// `f` runs at most once, only if `key` was absent when looked up, and
    /// before the write (no user code under the writer lock). If another
    /// writer inserts `key` between the lookup and the write, its entry is
    /// kept and returned, and `f`'s value is dropped after the write.
    ///
    /// # Panics
    /// If `guard` does not pin this tree's collector, or if `f` panics (the
    /// tree is then unchanged).
    ///
    /// ```
    /// let tree = latchtree::LatchTree::new();
    /// let guard = latchtree::pin();
    /// assert_eq!(tree.get_or_insert_with(1, || "new", &guard), &"new");
    /// assert_eq!(tree.get_or_insert_with(1, || unreachable!(), &guard), &"new");
    /// ```
    pub fn get_or_insert_with<'g>(
        &'g self,
        key: K,
        f: impl FnOnce() -> V,
        guard: &'g Guard,
    ) -> &'g V {
        if let Some(v) = self.get(&key, guard) {
            return v;
        }
        let value = f();
        let (node, rejected) = self.write(|batch| batch.insert_if_absent(key, value));
        drop(rejected);
        // `node` was in the tree when the write committed.
        // SAFETY: so, as for `removed`, it is retired (if ever) after
        // `guard` pinned, and stays allocated while `guard` lives.
        &unsafe { removed(node, guard) }.value
    }

    /// Removes every entry, as one write (readers see the full tree or an
    /// empty one). The entries are dropped once no reader can see them.
    ///
    /// ```
    /// let tree: latchtree::LatchTree<_, _> = (0..10).map(|k| (k, k)).collect();
    /// tree.clear();
    /// assert!(tree.is_empty());
    /// ```
    pub fn clear(&self) {
        self.write(|batch| batch.clear());
    }

    /// Relinks the tree into the perfectly balanced shape now, as one more
    /// write (readers that overlap it retry, as with any write). Lookups in
    /// that shape take a fixed number of steps (its height), with no loop
    /// exit to mispredict. Writes do this on their own for trees of up to
    /// 4096 entries, once an insert lands two levels below the balanced
    /// height (at most every `n / 8` inserts and removes); a larger tree
    /// keeps its red-black shape, so that no single write relinks the
    /// whole tree (about 0.15 µs an entry: tens of milliseconds at 262 144).
    /// Call this where that one long write is affordable, e.g. after a bulk
    /// load of single inserts. A tree already in that shape (no insert or
    /// remove since its last rebuild, or built by
    /// [`FromIterator`] or [`Extend`] into an empty tree) is
    /// left alone: no write happens.
    ///
    /// ```
    /// let tree = latchtree::LatchTree::new();
    /// for k in 0..10_000u64 {
    ///     tree.insert(k, k);
    /// }
    /// tree.rebalance();
    /// assert_eq!(tree.get(&4_000, &tree.pin()), Some(&4_000));
    /// ```
    pub fn rebalance(&self) {
        self.write(|batch| batch.rebalance());
    }

    /// Removes every entry for which `keep` returns `false`, as one write.
    ///
    /// `keep` runs once per entry of one version of the tree, *before* the
    /// write (no user code under the writer lock), and sees values by
    /// shared reference (they are immutable while published). The write then
    /// removes exactly the rejected entries that are still in the tree
    /// unchanged; an entry that a concurrent write replaced or removed
    /// meanwhile, or inserted, was not judged and is left alone.
    ///
    /// ```
    /// let tree: latchtree::LatchTree<_, _> = (0..10).map(|k| (k, k * 10)).collect();
    /// tree.retain(|k, _| k % 2 == 0);
    /// assert_eq!(tree.to_vec(), vec![(0, 0), (2, 20), (4, 40), (6, 60), (8, 80)]);
    /// ```
    pub fn retain(&self, mut keep: impl FnMut(&K, &V) -> bool) {
        let guard = self.pin();
        let mut doomed = self.snapshot_nodes(&guard);
        doomed.retain(|n| !keep(&n.key, &n.value));
        if doomed.is_empty() {
            return;
        }
        self.write(|batch| {
            for node in doomed {
                batch.remove_node(node);
            }
        });
    }

    /// Applies several inserts and removes as one atomic write: readers see
    /// all of them or none, and the whole batch costs two counter flips.
    /// The batch reads its own writes ([`Batch::get`] and friends), so a
    /// read-modify-write is one batch. If `f` panics, nothing it did is
    /// kept.
    ///
    /// Reads of the tree itself (`tree.get`, `tree.iter`…) inside `f` see
    /// the version before the batch, without waiting.
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
    ///
    /// // Read-modify-write in one atomic batch.
    /// let counters = latchtree::LatchTree::new();
    /// counters.write(|b| {
    ///     let n = b.get("hits").copied().unwrap_or(0);
    ///     b.insert("hits", n + 1);
    /// });
    /// assert_eq!(counters.get("hits", &latchtree::pin()), Some(&1));
    /// ```
    pub fn write<R>(&self, f: impl FnOnce(&mut Batch<'_, K, V>) -> R) -> R {
        self.transact(|txn, w| f(&mut Batch::new(txn, w.shells())))
    }

    /// Runs `body` as a transaction of the tree, with reclamation's part of
    /// it (`reclaim::Reclaim::transact`): what became due is handed out
    /// before `body` and dropped after the lock, and what the transaction
    /// releases is retired.
    fn transact<R>(
        &self,
        body: impl for<'b> FnOnce(&'b mut Txn<'b, Node<K, V>>, &'b mut Writer<K, V>) -> R,
    ) -> R {
        /// What leaves the tree is retired (nothing is published beside
        /// the tree).
        struct Retire<'a, K: 'static, V: 'static>(&'a Transaction<'a, NonNull<Node<K, V>>>);
        impl<K, V> Hooks<Node<K, V>, Writer<K, V>> for Retire<'_, K, V> {
            #[inline]
            fn release(&self, w: &mut Writer<K, V>, node: NonNull<Node<K, V>>) {
                self.0.retire(w, node);
            }
        }
        self.reclaim.transact(|tx| {
            self.raw.write(&Retire(tx), |txn, w| {
                tx.begin(w, None);
                body(txn, w)
            })
        })
    }

    /// Frees what earlier writes removed and no reader can see any more
    /// (their keys and values are dropped here), working the epoch until
    /// nothing is left or it stops advancing: a guard held on any thread
    /// (this one's included) keeps what it may see. Writes do this work
    /// themselves, a little at a time: a tree whose writes have stopped
    /// keeps the entries its last writes removed until the next write,
    /// `flush`, or its drop. Cheap when nothing waits.
    ///
    /// When no guard is held, one call frees everything, unless the
    /// collector holds much other garbage queued ahead of this tree's (it
    /// frees a bounded amount per round, oldest first; e.g. after a guard
    /// held elsewhere for a long time): then a later call finishes.
    ///
    /// It also frees the node shells the tree keeps for reuse, so after a
    /// `flush` with no guard held the tree holds memory only for its live
    /// entries (and its empty limbo).
    ///
    /// # Panics
    /// If called inside a [`write`](LatchTree::write) of this tree.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let tree = latchtree::LatchTree::new();
    /// let value = Arc::new(5);
    /// tree.insert(1, Arc::clone(&value));
    /// tree.remove(&1);
    /// tree.flush();
    /// assert_eq!(Arc::strong_count(&value), 1, "the removed value was dropped");
    /// ```
    pub fn flush(&self) {
        crate::reclaim::flush(self);
        // Memory too: the shells kept for reuse, and those the rounds above
        // gave back, go back to the allocator.
        crate::reclaim::free_shells(self);
    }
}

impl<K: Ord + Send + 'static, V: Send + 'static> Front for LatchTree<K, V> {
    type Garbage = NonNull<Node<K, V>>;

    fn reclaim(&self) -> &Reclaim<NonNull<Node<K, V>>> {
        &self.reclaim
    }

    fn empty_write<R>(&self, f: impl FnOnce(&mut Writer<K, V>) -> R) -> R {
        // A write that changes nothing (no flip, not counted).
        self.transact(|_, w| f(w))
    }
}

/// A node that was in the tree (or just left it) during a write that
/// finished after `guard` pinned, borrowed for the guard's lifetime.
///
/// # Safety
/// `node` came from this tree and was in it at some point of a write that
/// started after `guard` pinned (and `guard` pins this tree's collector).
/// Then it is retired, if ever, after `guard` pinned, and the limbo frees or
/// recycles it only after an announcement deferred after that retirement
/// has run, which crossbeam does only after `guard` is gone.
unsafe fn removed<K, V>(node: NonNull<Node<K, V>>, _guard: &Guard) -> &Node<K, V> {
    // SAFETY: caller.
    unsafe { node.as_ref() }
}
