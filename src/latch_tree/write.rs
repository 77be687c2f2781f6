//! Single writes and read-modify-write, each one transaction (one version).
//!
//! No user code runs under the writer lock except `K`'s `Ord`: closures
//! (`get_or_insert_with`'s `f`, `retain`'s predicate) run before the write,
//! a rejected value is handed back out of it, and entries that leave the
//! tree are retired after the lock is released, inside a
//! [`WriterScope`](crate::reclaim::WriterScope) that postpones any deferred
//! destructor that would otherwise run under the lock.

use super::{Batch, LatchTree, Node, entry};
use crate::raw::Dir;
use crate::reclaim::{Reclaimer, WriterScope};
use core::borrow::Borrow;
use core::ptr::NonNull;
use crossbeam_epoch::Guard;

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
        // Declared first, so dropped last: after the writer lock is released
        // and after `retiring` below; see `reclaim`.
        let _scope = WriterScope::enter();
        // Released nodes are retired after the writer lock is dropped (also
        // when unwinding): no epoch pin for writes that release nothing, and
        // none under the lock.
        let mut retiring = Retiring {
            reclaim: &self.reclaim,
            first: None,
            rest: Vec::new(),
        };
        self.raw.write(
            |txn, _| f(&mut Batch::new(txn)),
            |_, _, _| {},
            |_, node| match retiring.first {
                None => retiring.first = Some(node),
                Some(_) => retiring.rest.push(node),
            },
        )
    }
}

/// A node that was in the tree (or just left it) during a write that
/// finished after `guard` pinned, borrowed for the guard's lifetime.
///
/// # Safety
/// `node` came from this tree and was in it at some point of a write that
/// started after `guard` pinned (and `guard` pins this tree's collector).
/// Then it is retired, if ever, after `guard` pinned, so crossbeam frees it
/// only after `guard` is gone.
unsafe fn removed<K, V>(node: NonNull<Node<K, V>>, _guard: &Guard) -> &Node<K, V> {
    // SAFETY: caller.
    unsafe { node.as_ref() }
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
