//! [`Batch`]: the writer's handle inside
//! [`LatchTree::write`](crate::LatchTree::write), which reads its own writes.

use super::{Node, Shells, bound_step, entry, exact, key_step};
use crate::raw::{Dir, Slot, Txn};
use crate::unwind::{AssertUnwindSafe, catch_unwind, resume_unwind};
use core::borrow::Borrow;
use core::cmp::Ordering;
use core::fmt;
use core::ops::Bound;
use core::ptr::{self, NonNull};

/// The writer's handle inside [`LatchTree::write`](crate::LatchTree::write):
/// its changes become
/// visible to readers together when the closure returns, and its own reads
/// ([`get`](Batch::get), [`upper_bound`](Batch::upper_bound)…) see them at
/// once (read-your-writes).
///
/// References returned by a batch's reads borrow the batch, so they end
/// before its next change:
///
/// ```compile_fail
/// let tree = latchtree::LatchTree::new();
/// tree.write(|b| {
///     b.insert(1, String::from("one"));
///     let v = b.get(&1).unwrap();
///     b.remove(&1);
///     assert_eq!(v, "one");
/// });
/// ```
pub struct Batch<'t, K, V> {
    txn: &'t mut Txn<'t, Node<K, V>>,
    /// Where new nodes come from (recycled shells first).
    shells: &'t mut Shells<K, V>,
}

impl<K, V> fmt::Debug for Batch<'_, K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batch")
            .field("len", &self.txn.len())
            .finish()
    }
}

/// A key and value a write did not take, handed back to be dropped after
/// the writer lock is released.
pub(super) type Rejected<K, V> = Option<(K, V)>;

/// Which way to go from `node` when looking for `key`.
#[inline(always)]
fn toward<K: Borrow<Q>, V, Q: Ord + ?Sized>(key: &Q, node: &Node<K, V>) -> Option<Dir> {
    match key.cmp(node.key.borrow()) {
        Ordering::Less => Some(Dir::Left),
        Ordering::Greater => Some(Dir::Right),
        Ordering::Equal => None,
    }
}

impl<'t, K, V> Batch<'t, K, V> {
    pub(super) fn new(txn: &'t mut Txn<'t, Node<K, V>>, shells: &'t mut Shells<K, V>) -> Self {
        Batch { txn, shells }
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

    /// Removes every entry (O(1) here; the entries are dropped after the
    /// write, once no reader can see them).
    ///
    /// ```
    /// let tree: latchtree::LatchTree<_, _> = (0..5).map(|k| (k, k)).collect();
    /// tree.write(|b| {
    ///     b.clear();
    ///     b.insert(9, 9);
    /// });
    /// assert_eq!(tree.to_vec(), vec![(9, 9)]);
    /// ```
    pub fn clear(&mut self) {
        self.txn.clear();
    }

    /// Relinks the tree into the balanced shape as part of this batch (see
    /// [`LatchTree::rebalance`](crate::LatchTree::rebalance)); nothing if
    /// it is in that shape already.
    ///
    /// ```
    /// let tree = latchtree::LatchTree::new();
    /// tree.write(|b| {
    ///     for k in 0..100 {
    ///         b.insert(k, k);
    ///     }
    ///     b.rebalance();
    /// });
    /// assert_eq!(tree.len(), 100);
    /// ```
    pub fn rebalance(&mut self) {
        self.txn.rebuild();
    }
}

impl<K: Ord, V> Batch<'_, K, V> {
    /// Inserts or replaces; returns `true` if the key was new.
    ///
    /// ```
    /// let tree = latchtree::LatchTree::new();
    /// assert!(tree.write(|b| b.insert(1, 1)));
    /// ```
    #[inline]
    pub fn insert(&mut self, key: K, value: V) -> bool {
        let (key, value, slot) = self.find_owned(key, value);
        let node = self.shells.alloc(key, value);
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

    /// Inserts unless `key` is present; returns the node now in the tree
    /// for `key`, and on a hit the rejected key and value.
    pub(super) fn insert_if_absent(
        &mut self,
        key: K,
        value: V,
    ) -> (NonNull<Node<K, V>>, Rejected<K, V>) {
        match self.find_owned(key, value) {
            (key, value, Slot::Occupied(old)) => (old, Some((key, value))),
            (key, value, slot) => {
                let node = self.shells.alloc(key, value);
                // SAFETY: as in `insert`.
                unsafe { self.txn.insert(node, slot) };
                (node, None)
            }
        }
    }

    /// Finds `key`'s slot. If `Ord` panics, the key and value are handed to
    /// the transaction, which releases them after the writer lock (no user
    /// `Drop` under the lock), and the panic resumes.
    fn find_owned(&mut self, key: K, value: V) -> (K, V, Slot<Node<K, V>>) {
        match catch_unwind(AssertUnwindSafe(|| self.txn.find(|n| toward(&key, n)))) {
            Ok(slot) => (key, value, slot),
            Err(panic) => {
                // SAFETY: a fresh node, in no tree, never used again here.
                unsafe { self.txn.discard(self.shells.alloc(key, value)) };
                resume_unwind(panic)
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
    #[inline]
    pub fn remove<Q>(&mut self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.take(key).is_some()
    }

    /// Removes `key` and returns its node (released after the write).
    #[inline]
    pub(super) fn take<Q>(&mut self, key: &Q) -> Option<NonNull<Node<K, V>>>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        match self.txn.find(|n| toward(key, n)) {
            Slot::Occupied(node) => {
                // SAFETY: `node` came from `find` just now.
                unsafe { self.txn.erase(node) };
                Some(node)
            }
            Slot::Vacant { .. } => None,
        }
    }

    /// Removes the first (`Left`) or last entry and returns its node.
    pub(super) fn take_extreme(&mut self, end: Dir) -> Option<NonNull<Node<K, V>>> {
        let node = self.txn.extreme(end)?;
        // SAFETY: `node` came from `extreme` just now.
        unsafe { self.txn.erase(node) };
        Some(node)
    }

    /// Removes `node` if it is still the entry for its key (for `retain`).
    pub(super) fn remove_node(&mut self, node: &Node<K, V>) {
        if let Slot::Occupied(now) = self.txn.find(|n| toward(&node.key, n))
            && ptr::eq(now.as_ptr(), node)
        {
            // SAFETY: `now` came from `find` just now.
            unsafe { self.txn.erase(now) };
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
        self.get_key_value(key).is_some()
    }

    /// The entry for `key` in the version this batch is building.
    ///
    /// ```
    /// let tree = latchtree::LatchTree::new();
    /// tree.write(|b| {
    ///     b.insert(1, 'a');
    ///     assert_eq!(b.get_key_value(&1), Some((&1, &'a')));
    /// });
    /// ```
    pub fn get_key_value<Q>(&self, key: &Q) -> Option<(&K, &V)>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let mut cand = None;
        self.txn.descend(key_step(key, &mut cand));
        exact(key, cand).map(entry)
    }

    /// The value for `key` in the version this batch is building.
    ///
    /// ```
    /// let tree = latchtree::LatchTree::new();
    /// tree.insert("hits", 1);
    /// tree.write(|b| {
    ///     let n = *b.get("hits").unwrap();
    ///     b.insert("hits", n + 1);
    ///     assert_eq!(b.get("hits"), Some(&2));
    /// });
    /// ```
    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.get_key_value(key).map(|(_, v)| v)
    }

    /// As [`LatchTree::upper_bound`](crate::LatchTree::upper_bound), in the version this batch is building.
    ///
    /// ```
    /// use std::ops::Bound::*;
    /// let tree = latchtree::LatchTree::new();
    /// tree.write(|b| {
    ///     b.insert(1, 'a');
    ///     b.insert(5, 'b');
    ///     assert_eq!(b.upper_bound(Excluded(&5)), Some((&1, &'a')));
    /// });
    /// ```
    pub fn upper_bound<Q>(&self, bound: Bound<&Q>) -> Option<(&K, &V)>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.bound(bound, Dir::Right)
    }

    /// As [`LatchTree::lower_bound`](crate::LatchTree::lower_bound), in the version this batch is building.
    ///
    /// ```
    /// use std::ops::Bound::*;
    /// let tree = latchtree::LatchTree::new();
    /// tree.write(|b| {
    ///     b.insert(1, 'a');
    ///     b.insert(5, 'b');
    ///     assert_eq!(b.lower_bound(Excluded(&1)), Some((&5, &'b')));
    /// });
    /// ```
    pub fn lower_bound<Q>(&self, bound: Bound<&Q>) -> Option<(&K, &V)>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.bound(bound, Dir::Left)
    }

    fn bound<Q>(&self, bound: Bound<&Q>, toward_end: Dir) -> Option<(&K, &V)>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let mut best = None;
        self.txn.descend(bound_step(bound, toward_end, &mut best));
        best.map(entry)
    }

    /// The entry with the smallest key in the version this batch is
    /// building.
    ///
    /// ```
    /// let tree: latchtree::LatchTree<_, _> = [(2, 'b')].into_iter().collect();
    /// tree.write(|b| {
    ///     b.insert(1, 'a');
    ///     assert_eq!(b.first_key_value(), Some((&1, &'a')));
    /// });
    /// ```
    pub fn first_key_value(&self) -> Option<(&K, &V)> {
        self.lower_bound::<K>(Bound::Unbounded)
    }

    /// The entry with the greatest key in the version this batch is
    /// building.
    ///
    /// ```
    /// let tree: latchtree::LatchTree<_, _> = [(2, 'b')].into_iter().collect();
    /// tree.write(|b| {
    ///     b.remove(&2);
    ///     assert_eq!(b.last_key_value(), None);
    /// });
    /// ```
    pub fn last_key_value(&self) -> Option<(&K, &V)> {
        self.upper_bound::<K>(Bound::Unbounded)
    }
}
