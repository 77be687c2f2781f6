//! Bulk loading in O(n) as one version: [`LatchTree::from_sorted`],
//! `FromIterator`, `Extend`, and `Clone`.
//!
//! The entries become nodes first (outside any lock: no user code runs
//! under one), then `raw::build` links them into a balanced tree in both
//! copies at once. This needs `&mut` access or a fresh tree, so it never
//! races a reader; `Extend` through `&LatchTree` is one batch instead.

use super::{LatchTree, Node, free_nodes};
use alloc::vec::Vec;
use core::fmt;
use core::ptr::NonNull;

/// The error of [`LatchTree::from_sorted`]: the input was not in strictly
/// increasing key order.
///
/// ```
/// let err = latchtree::LatchTree::from_sorted([(1, 'a'), (1, 'b')]).unwrap_err();
/// assert_eq!(err.position(), 1);
/// assert_eq!(err.to_string(), "bulk load: the key at position 1 is not greater than the key before it");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnsortedInput {
    position: usize,
}

impl UnsortedInput {
    /// The position (0-based) of the first pair whose key is not greater
    /// than the key before it.
    ///
    /// ```
    /// let err = latchtree::LatchTree::from_sorted([(2, ()), (3, ()), (1, ())]).unwrap_err();
    /// assert_eq!(err.position(), 2);
    /// ```
    pub fn position(&self) -> usize {
        self.position
    }
}

impl fmt::Display for UnsortedInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "bulk load: the key at position {} is not greater than the key before it",
            self.position
        )
    }
}

impl core::error::Error for UnsortedInput {}

/// Nodes allocated for a load, freed if the load does not finish (an
/// unsorted input, a panicking iterator or `Ord`).
struct Run<K, V>(Vec<NonNull<Node<K, V>>>);

impl<K, V> Drop for Run<K, V> {
    fn drop(&mut self) {
        // Never shared with a reader.
        free_nodes(self.0.drain(..));
    }
}

impl<K, V> Run<K, V> {
    /// Links the run into `tree`, which must be empty; one write.
    fn build_into(mut self, tree: &mut LatchTree<K, V>) {
        debug_assert!(tree.raw.len() == 0);
        // `tree` is empty and exclusively borrowed; the nodes are fresh,
        // distinct and in no tree.
        // SAFETY: and in strictly increasing key order (every caller checks or establishes it),
        // owned by the tree from now on (taken out of the run).
        unsafe { tree.raw.build(&self.0) };
        self.0.clear();
    }
}

impl<K: Ord, V> LatchTree<K, V> {
    /// A tree holding `entries`, which must be in strictly increasing key
    /// order, built in O(n) as one version (one write, no per-entry latch
    /// flips or rebalancing). On unsorted input (or a repeated key) it
    /// returns an error and drops what it consumed.
    ///
    /// ```
    /// let tree = latchtree::LatchTree::from_sorted((0..1000).map(|k| (k, k * 2))).unwrap();
    /// assert_eq!(tree.len(), 1000);
    /// assert_eq!(tree.stats().writes, 1);
    /// assert!(latchtree::LatchTree::from_sorted([(2, ()), (1, ())]).is_err());
    /// ```
    pub fn from_sorted(entries: impl IntoIterator<Item = (K, V)>) -> Result<Self, UnsortedInput> {
        let entries = entries.into_iter();
        let mut run = Run(Vec::with_capacity(entries.size_hint().0));
        for (position, (key, value)) in entries.enumerate() {
            if let Some(last) = run.0.last() {
                // SAFETY: the run's nodes are ours and alive.
                if unsafe { last.as_ref() }.key >= key {
                    return Err(UnsortedInput { position });
                }
            }
            run.0.push(Node::alloc(key, value));
        }
        let mut tree = LatchTree::new();
        run.build_into(&mut tree);
        Ok(tree)
    }

    /// Builds `self` (empty) from entries in any order: sorted if needed
    /// (stable, so that the last of equal keys wins, as with
    /// `BTreeMap::from_iter`), then linked in O(n).
    fn load(&mut self, entries: impl IntoIterator<Item = (K, V)>) {
        let mut entries: Vec<(K, V)> = entries.into_iter().collect();
        if !entries.is_sorted_by(|a, b| a.0 < b.0) {
            entries.sort_by(|a, b| a.0.cmp(&b.0));
        }
        let mut run = Run(Vec::with_capacity(entries.len()));
        for (key, value) in entries {
            if let Some(last) = run.0.last_mut() {
                // SAFETY: the run's nodes are ours and alive.
                let last_key: &K = &unsafe { last.as_ref() }.key;
                if last_key.cmp(&key) == core::cmp::Ordering::Equal {
                    // A later equal key replaces the earlier entry.
                    free_nodes([core::mem::replace(last, Node::alloc(key, value))]);
                    continue;
                }
            }
            run.0.push(Node::alloc(key, value));
        }
        run.build_into(self);
    }
}

impl<K: Ord + Send + 'static, V: Send + 'static> FromIterator<(K, V)> for LatchTree<K, V> {
    /// Builds the tree in O(n) as one version (O(n log n) to sort the input
    /// if it is not sorted already); for equal keys the last one wins.
    ///
    /// ```
    /// let tree: latchtree::LatchTree<_, _> = [(3, 'c'), (1, 'a'), (3, 'C')].into_iter().collect();
    /// assert_eq!(tree.to_vec(), vec![(1, 'a'), (3, 'C')]);
    /// assert_eq!(tree.stats().writes, 1);
    /// ```
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut tree = LatchTree::new();
        tree.load(iter);
        tree
    }
}

impl<K: Ord + Send + 'static, V: Send + 'static> Extend<(K, V)> for LatchTree<K, V> {
    /// Into an empty tree: a bulk load (O(n), one version). Otherwise one
    /// atomic batch of inserts.
    ///
    /// ```
    /// let mut tree = latchtree::LatchTree::new();
    /// tree.extend([(2, 'b'), (1, 'a')]);
    /// tree.extend([(3, 'c')]);
    /// assert_eq!(tree.to_vec(), vec![(1, 'a'), (2, 'b'), (3, 'c')]);
    /// ```
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        if self.is_empty() {
            self.load(iter);
        } else {
            (&*self).extend(iter);
        }
    }
}

impl<K: Ord + Send + 'static, V: Send + 'static> Extend<(K, V)> for &LatchTree<K, V> {
    /// Inserts every pair as one atomic batch.
    ///
    /// ```
    /// let tree = latchtree::LatchTree::new();
    /// (&tree).extend([(1, 'a'), (2, 'b')]);
    /// assert_eq!(tree.len(), 2);
    /// ```
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        // The caller's iterator (its `next`, its adapters' closures, the
        // items it discards) runs here, before the writer lock is taken; and
        // whatever the batch did not consume (an `Ord` panic stops it) is
        // dropped after the lock is released, when `pending` goes out of
        // scope, also while unwinding.
        let mut pending: alloc::vec::IntoIter<(K, V)> =
            iter.into_iter().collect::<Vec<_>>().into_iter();
        self.write(|batch| {
            for (k, v) in pending.by_ref() {
                batch.insert(k, v);
            }
        });
        drop(pending);
    }
}

impl<K: Ord + Clone, V: Clone> Clone for LatchTree<K, V> {
    /// Clones one version of the tree in O(n), into a tree that uses the
    /// same collector.
    ///
    /// ```
    /// let tree: latchtree::LatchTree<_, _> = [(1, 'a')].into_iter().collect();
    /// let copy = tree.clone();
    /// tree.insert(2, 'b');
    /// assert_eq!(copy.to_vec(), vec![(1, 'a')]);
    /// ```
    fn clone(&self) -> Self {
        let guard = self.pin();
        let nodes = self.snapshot_nodes(&guard);
        let mut run = Run(Vec::with_capacity(nodes.len()));
        for n in nodes {
            run.0.push(Node::alloc(n.key.clone(), n.value.clone()));
        }
        let mut tree = LatchTree::with_reclaimer(self.reclaim.same_collector());
        run.build_into(&mut tree);
        tree
    }
}
