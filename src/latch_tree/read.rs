//! Point queries and snapshots: each is one latched read of one version.

use super::{LatchTree, Node, bound_step, entry, exact, key_step};
use crate::raw::{Cursor, Dir};
use alloc::string::String;
use alloc::vec::Vec;
use core::borrow::Borrow;
use core::ops::Bound;
use crossbeam_epoch::Guard;

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
            let mut cand = None;
            view.descend(key_step(key, &mut cand))?;
            Some(exact(key, cand).map(entry))
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

    /// `upper_bound` (`toward_end == Right`: the last key on the low side of
    /// the bound) and its mirror image `lower_bound`.
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
        self.read(guard, |view| {
            let mut best = None;
            view.descend(bound_step(bound, toward_end, &mut best))?;
            Some(best.map(entry))
        })
    }

    /// [`bound`](Self::bound) as a cursor, for iteration.
    ///
    /// # Safety
    /// As for [`LatchTree::seek_unchecked`].
    #[inline]
    pub(super) unsafe fn seek_bound<'g, Q>(
        &'g self,
        bound: Bound<&Q>,
        toward_end: Dir,
    ) -> Option<Cursor<'g, Node<K, V>>>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let attempt = |view: crate::raw::View<'g, Node<K, V>>| {
            let mut best = None;
            view.descend(bound_step(bound, toward_end, &mut best))?;
            Some(best)
        };
        // SAFETY: forwarded from the caller.
        unsafe { self.seek_unchecked(attempt) }
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
    /// snapshot (the walk is retried if a write landed meanwhile). Unlike
    /// [`iter`](LatchTree::iter), which reads the latest version at each
    /// step, every entry here belongs to the same version.
    ///
    /// ```
    /// let tree: latchtree::LatchTree<_, _> = [(2, 'b'), (1, 'a')].into_iter().collect();
    /// let g = latchtree::pin();
    /// assert_eq!(tree.snapshot(&g), vec![(&1, &'a'), (&2, &'b')]);
    /// ```
    pub fn snapshot<'g>(&'g self, guard: &'g Guard) -> Vec<(&'g K, &'g V)> {
        self.snapshot_nodes(guard).into_iter().map(entry).collect()
    }

    /// The nodes of one version, in key order.
    pub(super) fn snapshot_nodes<'g>(&'g self, guard: &'g Guard) -> Vec<&'g Node<K, V>> {
        self.read(guard, |view| {
            let mut out = Vec::new();
            view.walk(|n| out.push(n))?;
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
        self.snapshot_nodes(&guard)
            .into_iter()
            .map(|n| (n.key.clone(), n.value.clone()))
            .collect()
    }

    #[doc(hidden)]
    /// Checks every structural invariant; for tests.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.raw.check(|a, b| a.key < b.key)
    }
}
