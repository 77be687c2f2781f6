//! Coming from `BTreeMap` or `SkipMap`: what [`LatchTree`] does differently,
//! in one place. Read it before porting code (or tests) from
//! `std::collections::BTreeMap` or `crossbeam_skiplist::SkipMap`; every
//! difference below was found by running those maps' own test suites
//! against `LatchTree`. Each example is compiled and run as a test.
//!
//! # Reads take a guard; references live as long as it
//!
//! `get`, `range`, `iter`, `first_key_value`… take a [`Guard`]
//! ([`pin()`](crate::pin)) and return references tied to it: the borrow
//! checker ends them when the guard goes, and a removed entry is freed only
//! after every guard that could see it is gone. `SkipMap` hands out
//! reference-counted `Entry`s instead; `BTreeMap` borrows the map itself.
//! Since iterators borrow a guard, `&LatchTree` is not `IntoIterator`: write
//! `for (k, v) in tree.iter(&guard)`.
//!
//! ```
//! let tree = latchtree::LatchTree::new();
//! tree.insert(1, "one");
//! let guard = latchtree::pin();
//! let one: &&str = tree.get(&1, &guard).unwrap();
//! tree.remove(&1); // `one` stays valid: `guard` still pins it
//! assert_eq!(*one, "one");
//! ```
//!
//! # Writes take `&self` and return no old value
//!
//! [`insert`](crate::LatchTree::insert) and [`remove`](crate::LatchTree::remove) return
//! whether the key was new, or present: the old entry cannot be handed back
//! by value while readers may still hold references to it. It is dropped
//! later, by the tree's writer, once no guard can see it (see [when a
//! removed entry is dropped](crate::LatchTree#when-a-removed-entry-is-dropped)).
//! To see what a removal took out, use
//! [`remove_entry`](crate::LatchTree::remove_entry) (borrowed for a guard). There
//! is no `get_mut` or `entry`: values are immutable once in; replace them
//! with `insert`, insert-if-absent with
//! [`get_or_insert_with`](crate::LatchTree::get_or_insert_with), and group writes
//! into one atomic version with [`write`](crate::LatchTree::write).
//!
//! ```
//! let tree = latchtree::LatchTree::new();
//! assert!(tree.insert("k", 1)); // new (`BTreeMap::insert` returns `None`)
//! assert!(!tree.insert("k", 2)); // replaced (`BTreeMap` returns `Some(1)`)
//! let guard = latchtree::pin();
//! assert_eq!(tree.remove_entry("k", &guard), Some((&"k", &2)));
//! tree.write(|batch| {
//!     batch.insert("a", 1);
//!     batch.insert("b", 2); // readers see both or neither
//! });
//! ```
//!
//! # `insert` on a present key replaces the key too
//!
//! `BTreeMap::insert` keeps the key already in the map and replaces only
//! the value. [`LatchTree::insert`] replaces the whole entry, key and value
//! (the old pair goes together). It shows only with keys that compare
//! equal but differ otherwise:
//!
//! ```
//! use std::cmp::Ordering;
//! /// Ordered by `id` only.
//! #[derive(Debug, Eq)]
//! struct Key { id: u32, note: &'static str }
//! impl PartialEq for Key { fn eq(&self, o: &Self) -> bool { self.id == o.id } }
//! impl Ord for Key { fn cmp(&self, o: &Self) -> Ordering { self.id.cmp(&o.id) } }
//! impl PartialOrd for Key { fn partial_cmp(&self, o: &Self) -> Option<Ordering> { Some(self.cmp(o)) } }
//!
//! let mut std = std::collections::BTreeMap::new();
//! std.insert(Key { id: 1, note: "first" }, 'a');
//! std.insert(Key { id: 1, note: "second" }, 'b');
//! assert_eq!(std.keys().next().unwrap().note, "first");
//!
//! let tree = latchtree::LatchTree::new();
//! tree.insert(Key { id: 1, note: "first" }, 'a');
//! tree.insert(Key { id: 1, note: "second" }, 'b');
//! let guard = latchtree::pin();
//! let (key, value) = tree.first_key_value(&guard).unwrap();
//! assert_eq!((key.note, *value), ("second", 'b'));
//! ```
//!
//! # Iterators see the tree as it changes, and have no exact size
//!
//! An iterator reads the latest version at each step, as `SkipMap`'s do:
//! it yields every key present for the whole walk, in order, never one
//! twice, and may or may not yield a key inserted or removed meanwhile (see
//! [`Range`](crate::Range#semantics-under-concurrent-writes)). Hence its
//! `size_hint` is `(0, None)` and it is not `ExactSizeIterator` (so no
//! `.len()` on it, and `collect` cannot preallocate): how many entries it
//! yields is known only when it ends. [`LatchTree::len`] is the count of
//! one moment, and may differ from what a walk then yields.
//! [`snapshot`](crate::LatchTree::snapshot) gives one version as a `Vec`, with its
//! exact length.
//!
//! ```
//! let tree: latchtree::LatchTree<_, _> = (0..3).map(|k| (k, ())).collect();
//! let guard = latchtree::pin();
//! assert_eq!(tree.iter(&guard).size_hint(), (0, None));
//! let snapshot = tree.snapshot(&guard);
//! assert_eq!(snapshot.len(), 3); // a `Vec`: exact
//! ```
//!
//! # An inverted `range` is empty, not a panic
//!
//! `BTreeMap::range` panics when the start is greater than the end (or both
//! are `Excluded` at the same key). [`LatchTree::range`] yields nothing:
//! bounds often come from data, and a panic there would be a crash in a
//! concurrent reader.
//!
//! ```
//! use std::ops::Bound::Excluded;
//! let tree: latchtree::LatchTree<_, _> = (0..10).map(|k| (k, ())).collect();
//! let guard = latchtree::pin();
//! assert_eq!(tree.range(7..2, &guard).count(), 0);
//! assert_eq!(tree.range((Excluded(4), Excluded(4)), &guard).count(), 0);
//! let std: std::collections::BTreeMap<_, _> = (0..10).map(|k| (k, ())).collect();
//! assert!(std::panic::catch_unwind(|| std.range(7..2).count()).is_err());
//! ```
//!
//! # An `Ord` that lies
//!
//! As with `BTreeMap`, an `Ord` that is not a total order cannot cause
//! undefined behaviour (nor, here, a reader that loops); lookups and bounded
//! ranges may then miss entries. Like `BTreeMap`'s iteration, a walk of an
//! unbounded end ([`iter`](crate::LatchTree::iter), [`keys`](crate::LatchTree::keys),
//! [`values`](crate::LatchTree::values), `range(..)`, from the front or from the
//! back) calls no `Ord`, so it yields every entry, as many as
//! [`len`](crate::LatchTree::len) says. What does compare keys: a bounded range's
//! bounds, the point where a walk from both ends (`next` and `next_back` on
//! one iterator) meets, and a step that follows a concurrent write (it
//! seeks again by key).
//!
//! ```
//! use std::cmp::Ordering;
//! /// Claims to be greater than everything.
//! #[derive(Debug, PartialEq, Eq)]
//! struct Liar(u32);
//! impl Ord for Liar { fn cmp(&self, _: &Self) -> Ordering { Ordering::Greater } }
//! impl PartialOrd for Liar { fn partial_cmp(&self, o: &Self) -> Option<Ordering> { Some(self.cmp(o)) } }
//!
//! let tree = latchtree::LatchTree::new();
//! tree.insert(Liar(1), ());
//! tree.insert(Liar(2), ());
//! let guard = latchtree::pin();
//! assert_eq!(tree.len(), 2);
//! assert_eq!(tree.iter(&guard).count(), 2);
//! assert_eq!(tree.keys(&guard).rev().count(), 2);
//! assert_eq!(tree.get(&Liar(1), &guard), None); // a lookup compares, and is misled
//! ```
//!
//! # Drops happen later, on a writer's thread
//!
//! A removed or replaced entry is not dropped by `remove` or `insert`: it
//! waits until no guard that could see it is left, and is then dropped by a
//! later write of the same tree, by [`flush`](crate::LatchTree::flush), or when the
//! tree is dropped, after the writer lock is released. A test that counts
//! drops right after a `remove` (as `BTreeMap`'s suite does) calls `flush`
//! first, with no guard held.
//!
//! ```
//! use std::sync::Arc;
//! let value = Arc::new(0);
//! let tree = latchtree::LatchTree::new();
//! tree.insert(1, Arc::clone(&value));
//! tree.remove(&1);
//! tree.flush();
//! assert_eq!(Arc::strong_count(&value), 1);
//! ```
//!
//! [`LatchTree`]: crate::LatchTree
//! [`LatchTree::insert`]: crate::LatchTree::insert
//! [`LatchTree::range`]: crate::LatchTree::range
//! [`LatchTree::len`]: crate::LatchTree::len
//! [`Guard`]: crate::Guard
