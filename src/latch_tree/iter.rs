//! Iterators under a guard: [`Iter`], [`Range`], [`Keys`], [`Values`].
//!
//! # Semantics
//!
//! Each end of an iterator is a cursor (`raw::cursor`) standing on the
//! last node it yielded, in the version it read. A step walks that version's
//! links to the neighbour and validates with the latch; only when a writer
//! flipped the latch meanwhile does it seek again from the root, for the
//! neighbour of the last key it yielded in the current version. Hence,
//! under concurrent writes, an iterator
//!
//! * yields keys in strictly increasing order from the front (decreasing
//!   from the back), never one twice, the two ends never crossing;
//! * yields every key that is in the tree (within the range) for the whole
//!   walk;
//! * may or may not yield a key inserted or removed during the walk; each
//!   yielded entry was in the tree at some moment of the walk.
//!
//! This is `crossbeam_skiplist::SkipMap`'s guarantee. For one consistent
//! version use [`LatchTree::snapshot`]. No step allocates; with no writer a
//! step is a few link loads and one counter re-check.
//!
//! Walking an unbounded end calls no `Ord` (as `BTreeMap`'s iteration
//! calls none); bounds, the point where a walk from both ends meets, and a
//! step after a concurrent write (it seeks again by key) compare keys.
//!
//! A bounded end (`..=hi`) is resolved when the range is made, to the last
//! entry at or below `hi` then: the front stops there. Entries inserted
//! above it later were not present for the whole walk, so not yielding them
//! keeps the guarantee.

use super::{LatchTree, Node, entry};
use crate::raw::{Cursor, Dir, Step};
use core::borrow::Borrow;
use core::fmt;
use core::iter::FusedIterator;
use core::ops::{Bound, RangeBounds};
use core::ptr;
use crossbeam_epoch::Guard;

impl<K: Ord, V> LatchTree<K, V> {
    /// A double-ended iterator over the entries in key order; see the
    /// module docs' [semantics](crate::Range#semantics-under-concurrent-writes).
    ///
    /// # Panics
    /// If `guard` does not pin this tree's collector.
    ///
    /// ```
    /// let tree: latchtree::LatchTree<_, _> = [(2, 'b'), (1, 'a'), (3, 'c')].into_iter().collect();
    /// let guard = latchtree::pin();
    /// let mut it = tree.iter(&guard);
    /// assert_eq!(it.next(), Some((&1, &'a')));
    /// assert_eq!(it.next_back(), Some((&3, &'c')));
    /// assert_eq!(it.collect::<Vec<_>>(), [(&2, &'b')]);
    /// ```
    ///
    /// An item cannot outlive its guard:
    ///
    /// ```compile_fail
    /// let tree: latchtree::LatchTree<_, _> = [(1, 'a')].into_iter().collect();
    /// let first = {
    ///     let guard = latchtree::pin();
    ///     tree.iter(&guard).next()
    /// };
    /// drop(first);
    /// ```
    pub fn iter<'g>(&'g self, guard: &'g Guard) -> Iter<'g, K, V> {
        Iter(self.range::<K, _>(.., guard))
    }

    /// A double-ended iterator over the entries whose keys lie in `range`,
    /// in key order, as `BTreeMap::range` (same bounds, `Borrow` lookups).
    ///
    /// An empty or inverted range (`5..3`, `5..5`, or both ends `Excluded`
    /// at the same key) yields nothing; unlike `BTreeMap::range`, it never
    /// panics: a concurrent map's bounds often come from data.
    ///
    /// # Panics
    /// If `guard` does not pin this tree's collector.
    ///
    /// ```
    /// use std::ops::Bound::{Excluded, Included};
    /// let tree: latchtree::LatchTree<_, _> = (0..10).map(|k| (k, k * 10)).collect();
    /// let guard = latchtree::pin();
    /// let keys: Vec<_> = tree.range(3..6, &guard).map(|(k, _)| *k).collect();
    /// assert_eq!(keys, [3, 4, 5]);
    /// let back: Vec<_> = tree.range((Excluded(3), Included(6)), &guard).rev().map(|(k, _)| *k).collect();
    /// assert_eq!(back, [6, 5, 4]);
    /// assert_eq!(tree.range(7..2, &guard).next(), None);
    ///
    /// let names: latchtree::LatchTree<_, _> = [("ant".to_string(), 1), ("bee".to_string(), 2)].into_iter().collect();
    /// assert_eq!(names.range::<str, _>((Included("b"), Excluded("c")), &guard).count(), 1);
    /// ```
    ///
    /// An item cannot outlive its guard:
    ///
    /// ```compile_fail
    /// let tree: latchtree::LatchTree<_, _> = [(1, 'a')].into_iter().collect();
    /// let guard = latchtree::pin();
    /// let mut range = tree.range(0.., &guard);
    /// let item = range.next();
    /// drop(guard);
    /// drop(item);
    /// ```
    pub fn range<'g, Q, R>(&'g self, range: R, guard: &'g Guard) -> Range<'g, K, V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
        R: RangeBounds<Q>,
    {
        self.check_guard(guard);
        // SAFETY: `guard` pins this tree's collector (checked) for 'g.
        let first = unsafe { self.seek_bound(range.start_bound(), Dir::Left) };
        // SAFETY: as above.
        let last = unsafe { self.seek_bound(range.end_bound(), Dir::Right) };
        let bounded = (
            !matches!(range.start_bound(), Bound::Unbounded),
            !matches!(range.end_bound(), Bound::Unbounded),
        );
        Range::new(self, first, last, bounded)
    }

    /// A double-ended iterator over the keys, in order (as
    /// [`iter`](LatchTree::iter)).
    ///
    /// ```
    /// let tree: latchtree::LatchTree<_, _> = [(2, 'b'), (1, 'a')].into_iter().collect();
    /// assert_eq!(tree.keys(&latchtree::pin()).copied().collect::<Vec<_>>(), [1, 2]);
    /// ```
    pub fn keys<'g>(&'g self, guard: &'g Guard) -> Keys<'g, K, V> {
        Keys(self.iter(guard).0)
    }

    /// A double-ended iterator over the values, in key order (as
    /// [`iter`](LatchTree::iter)).
    ///
    /// ```
    /// let tree: latchtree::LatchTree<_, _> = [(2, 'b'), (1, 'a')].into_iter().collect();
    /// assert_eq!(tree.values(&latchtree::pin()).rev().collect::<String>(), "ba");
    /// ```
    pub fn values<'g>(&'g self, guard: &'g Guard) -> Values<'g, K, V> {
        Values(self.iter(guard).0)
    }
}

/// Where one end of a [`Range`] goes next.
enum Next<'g, K, V> {
    /// Not positioned yet: the extreme of the tree on this side.
    Seek,
    /// Yield this node next (an end resolved when the range was made).
    First(Cursor<'g, Node<K, V>>),
    /// Yield the neighbour of this node, the last one yielded.
    After(Cursor<'g, Node<K, V>>),
    /// Exhausted.
    Done,
}

/// The node an end must not pass (`inclusive`: it may yield it).
struct Limit<'g, K, V> {
    node: &'g Node<K, V>,
    inclusive: bool,
}

// Manual impls: a derive would require `K: Copy, V: Copy`.
impl<K, V> Clone for Limit<'_, K, V> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K, V> Copy for Limit<'_, K, V> {}

impl<K: Ord, V> Limit<'_, K, V> {
    /// Whether an end moving toward `dir` must not yield `n`.
    #[inline(always)]
    fn excludes(self, n: &Node<K, V>, dir: Dir) -> bool {
        if ptr::eq(n, self.node) {
            return !self.inclusive;
        }
        match n.key.cmp(&self.node.key) {
            core::cmp::Ordering::Equal => !self.inclusive,
            ord => (ord == core::cmp::Ordering::Greater) == (dir == Dir::Right),
        }
    }
}

/// One end of a [`Range`].
struct End<'g, K, V> {
    next: Next<'g, K, V>,
    limit: Option<Limit<'g, K, V>>,
}

/// A double-ended iterator over a range of a [`LatchTree`]'s entries, made by
/// [`LatchTree::range`]; its items borrow the guard.
///
/// # Semantics under concurrent writes
///
/// Each step reads the tree's current version: the front yields keys in
/// strictly increasing order (the back in decreasing order), never one twice,
/// and the two ends never cross; every key in the range that is present for
/// the whole walk is yielded; a key inserted or removed meanwhile may or may
/// not be (the `crossbeam_skiplist::SkipMap` guarantee). A step walks the
/// links of the version it last read and seeks again from the root only when
/// a writer flipped the latch meanwhile; it never allocates. For a view of
/// one version, use [`LatchTree::snapshot`].
///
/// ```
/// let tree: latchtree::LatchTree<_, _> = (0..4).map(|k| (k, ())).collect();
/// let guard = latchtree::pin();
/// let mut it = tree.range(1.., &guard);
/// assert_eq!(it.next().map(|(k, _)| *k), Some(1));
/// tree.remove(&2); // removed meanwhile: may or may not be yielded
/// tree.insert(0, ()); // behind the front: never yielded
/// let rest: Vec<_> = it.map(|(k, _)| *k).collect();
/// assert!(rest == [3] || rest == [2, 3]);
/// ```
///
/// # No exact size
///
/// `size_hint` is `(0, None)`, and the iterators are not
/// `ExactSizeIterator`, unlike `BTreeMap`'s: each step reads the latest
/// version, so how many entries a walk yields is known only when it ends
/// (entries ahead of it may be removed, or inserted, while it runs). A
/// bound read from the tree when the walk began would be broken by the
/// next write. For an exact count, walk one version:
/// [`snapshot`](LatchTree::snapshot) is a `Vec`.
///
/// ```
/// let tree: latchtree::LatchTree<_, _> = (0..4).map(|k| (k, ())).collect();
/// let guard = latchtree::pin();
/// let it = tree.iter(&guard);
/// assert_eq!(it.size_hint(), (0, None));
/// tree.insert(9, ()); // ahead of the walk: yielded
/// assert_eq!(it.count(), 5);
/// assert_eq!(tree.snapshot(&guard).into_iter().len(), 5);
/// ```
pub struct Range<'g, K, V> {
    tree: &'g LatchTree<K, V>,
    front: End<'g, K, V>,
    back: End<'g, K, V>,
}

impl<K, V> fmt::Debug for Range<'_, K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Range").finish_non_exhaustive()
    }
}

impl<'g, K: Ord, V> Range<'g, K, V> {
    /// A range from its resolved ends: `first`/`last` are the first and last
    /// entries within the bounds (if any) when it was made; `bounded` says
    /// which ends had a bound.
    fn new(
        tree: &'g LatchTree<K, V>,
        first: Option<Cursor<'g, Node<K, V>>>,
        last: Option<Cursor<'g, Node<K, V>>>,
        (lo_bounded, hi_bounded): (bool, bool),
    ) -> Self {
        // Keys are compared only when both ends are bounded (an inverted
        // range is empty): walking an unbounded end never calls `Ord`, as
        // `BTreeMap`'s iteration never does (one that lies would otherwise
        // make a whole tree look empty).
        let inverted = |f: Cursor<'g, Node<K, V>>, l: Cursor<'g, Node<K, V>>| {
            lo_bounded && hi_bounded && f.node().key > l.node().key
        };
        let empty = (lo_bounded && first.is_none())
            || (hi_bounded && last.is_none())
            || matches!((first, last), (Some(f), Some(l)) if inverted(f, l));
        let end = |bounded: bool, at: Option<Cursor<'g, Node<K, V>>>| match (empty, bounded, at) {
            (false, true, Some(c)) => End {
                next: Next::First(c),
                limit: None,
            },
            (false, false, _) => End {
                next: Next::Seek,
                limit: None,
            },
            _ => End {
                next: Next::Done,
                limit: None,
            },
        };
        let mut front = end(lo_bounded, first);
        let mut back = end(hi_bounded, last);
        // A bounded end also limits the other end, inclusively.
        if hi_bounded {
            front.limit = last.map(|c| Limit {
                node: c.node(),
                inclusive: true,
            });
        }
        if lo_bounded {
            back.limit = first.map(|c| Limit {
                node: c.node(),
                inclusive: true,
            });
        }
        Range { tree, front, back }
    }

    /// The next node from the front (`dir == Right`) or the back.
    #[inline]
    fn advance(&mut self, dir: Dir) -> Option<&'g Node<K, V>> {
        let (this, other) = match dir {
            Dir::Right => (&mut self.front, &mut self.back),
            Dir::Left => (&mut self.back, &mut self.front),
        };
        // `Range`s are made from a checked guard that lives for 'g.
        let cand = match this.next {
            Next::Done => return None,
            Next::First(c) => Some(c),
            // SAFETY: see above.
            Next::Seek => unsafe { self.tree.seek_bound::<K>(Bound::Unbounded, dir.flip()) },
            Next::After(c) => match c.step(dir) {
                Step::To(n) => Some(n),
                Step::End => None,
                // SAFETY: see above.
                Step::Stale => unsafe {
                    self.tree
                        .seek_bound(Bound::Excluded(&c.node().key), dir.flip())
                },
            },
        };
        match cand {
            Some(c) if !this.limit.is_some_and(|l| l.excludes(c.node(), dir)) => {
                this.next = Next::After(c);
                other.limit = Some(Limit {
                    node: c.node(),
                    inclusive: false,
                });
                Some(c.node())
            }
            _ => {
                this.next = Next::Done;
                other.next = Next::Done;
                None
            }
        }
    }
}

impl<'g, K: Ord, V> Iterator for Range<'g, K, V> {
    type Item = (&'g K, &'g V);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        self.advance(Dir::Right).map(entry)
    }
}

impl<K: Ord, V> DoubleEndedIterator for Range<'_, K, V> {
    #[inline]
    fn next_back(&mut self) -> Option<Self::Item> {
        self.advance(Dir::Left).map(entry)
    }
}

impl<K: Ord, V> FusedIterator for Range<'_, K, V> {}

/// Defines a wrapper iterator over [`Range`] with a projection.
macro_rules! wrapper {
    ($(#[$m:meta])* $name:ident, $item:ty, |$n:ident| $project:expr) => {
        $(#[$m])*
        pub struct $name<'g, K, V>(Range<'g, K, V>);

        impl<K, V> fmt::Debug for $name<'_, K, V> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($name)).finish_non_exhaustive()
            }
        }

        impl<'g, K: Ord, V> Iterator for $name<'g, K, V> {
            type Item = $item;

            #[inline]
            fn next(&mut self) -> Option<Self::Item> {
                self.0.advance(Dir::Right).map(|$n| $project)
            }
        }

        impl<K: Ord, V> DoubleEndedIterator for $name<'_, K, V> {
            #[inline]
            fn next_back(&mut self) -> Option<Self::Item> {
                self.0.advance(Dir::Left).map(|$n| $project)
            }
        }

        impl<K: Ord, V> FusedIterator for $name<'_, K, V> {}
    };
}

wrapper!(
    /// A double-ended iterator over all of a [`LatchTree`]'s entries, made by
    /// [`LatchTree::iter`]; see [`Range`] for its semantics.
    ///
    /// ```
    /// let tree: latchtree::LatchTree<_, _> = [(1, 'a')].into_iter().collect();
    /// let guard = latchtree::pin();
    /// let it: latchtree::Iter<'_, _, _> = tree.iter(&guard);
    /// assert_eq!(it.count(), 1);
    /// ```
    Iter, (&'g K, &'g V), |n| entry(n)
);
wrapper!(
    /// A double-ended iterator over a [`LatchTree`]'s keys, made by
    /// [`LatchTree::keys`]; see [`Range`] for its semantics.
    ///
    /// ```
    /// let tree: latchtree::LatchTree<_, _> = [(1, 'a')].into_iter().collect();
    /// let guard = latchtree::pin();
    /// let keys: latchtree::Keys<'_, _, _> = tree.keys(&guard);
    /// assert_eq!(keys.collect::<Vec<_>>(), [&1]);
    /// ```
    Keys, &'g K, |n| &n.key
);
wrapper!(
    /// A double-ended iterator over a [`LatchTree`]'s values, made by
    /// [`LatchTree::values`]; see [`Range`] for its semantics.
    ///
    /// ```
    /// let tree: latchtree::LatchTree<_, _> = [(1, 'a')].into_iter().collect();
    /// let guard = latchtree::pin();
    /// let values: latchtree::Values<'_, _, _> = tree.values(&guard);
    /// assert_eq!(values.collect::<String>(), "a");
    /// ```
    Values, &'g V, |n| &n.value
);
