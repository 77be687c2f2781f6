//! Unit tests of the raw core without any epoch: nodes are plain boxes freed
//! at the end of each test. These are the tests Miri runs under the default
//! (Stacked Borrows) model with strict provenance.

use super::{Dir, Height, KidKeys, LinkRef, Linked, Links, RawTree, Slot};
use alloc::sync::Arc;
use core::ptr::NonNull;
use std::collections::BTreeSet;

/// The harnesses' hooks: nothing is published beside the tree, and the
/// harness frees every node it made when it drops.
struct Keep;

impl<N, W> super::Hooks<N, W> for Keep {
    fn release(&self, _: &mut W, _: core::ptr::NonNull<N>) {}
}

/// A test node. With `EXTRAS` (the default) it keeps everything a node may
/// keep: copy 0 caches its children's keys and records its height, as
/// `AddrIndex`'s range nodes do, so that these tests (and Miri's run of
/// them) check that bookkeeping too. Without, it keeps only links, as
/// `LatchTree`'s nodes do (a plan from the black height, or the balanced
/// shape's after a rebuild).
struct Node<const EXTRAS: bool = true> {
    links: [Links<Node<EXTRAS>>; 2],
    keys: KidKeys,
    height: Height,
    key: u64,
}

// SAFETY: two distinct link sets, indexed by copy.
unsafe impl<const EXTRAS: bool> Linked for Node<EXTRAS> {
    fn links(&self, copy: usize) -> LinkRef<'_, Self> {
        if copy == 0 && EXTRAS {
            self.links[0].with_keys(self, &self.keys)
        } else {
            self.links[copy].get()
        }
    }

    const COPY0_KID_KEYS: bool = EXTRAS;
    const HAS_HEIGHT: bool = EXTRAS;

    fn search_key(&self) -> u64 {
        self.key
    }

    fn height(&self) -> Option<&Height> {
        EXTRAS.then_some(&self.height)
    }
}

/// A raw tree plus every node ever allocated (freed on drop, never before,
/// so that concurrent readers may stand on released nodes).
struct Harness<const EXTRAS: bool = true> {
    tree: RawTree<Node<EXTRAS>, ()>,
    all: std::sync::Mutex<Vec<NonNull<Node<EXTRAS>>>>,
}

// SAFETY: nodes hold only atomics and a `u64` written before publication.
unsafe impl<const E: bool> Send for Harness<E> {}
// SAFETY: as above.
unsafe impl<const E: bool> Sync for Harness<E> {}

impl Harness {
    fn new() -> Self {
        Harness {
            tree: RawTree::new((), usize::MAX),
            all: std::sync::Mutex::new(Vec::new()),
        }
    }
}

impl Harness<false> {
    /// Nodes with links only (`LatchTree`'s kind).
    fn plain() -> Self {
        Harness {
            tree: RawTree::new((), usize::MAX),
            all: std::sync::Mutex::new(Vec::new()),
        }
    }
}

impl<const E: bool> Harness<E> {
    fn alloc(&self, key: u64) -> NonNull<Node<E>> {
        let n = NonNull::from(Box::leak(Box::new(Node {
            links: [Links::new(), Links::new()],
            keys: KidKeys::new(),
            height: Height::new(),
            key,
        })));
        self.all.lock().unwrap().push(n);
        n
    }

    /// Inserts or erases each key; returns what changed.
    fn apply(&self, ops: &[(bool, u64)], panic_after: Option<usize>) -> Vec<bool> {
        self.tree.write(&Keep, |txn, _| {
            let mut out = Vec::new();
            for (i, &(insert, key)) in ops.iter().enumerate() {
                if panic_after == Some(i) {
                    panic!("planned panic");
                }
                let slot = txn.find(|n| match key.cmp(&n.key) {
                    core::cmp::Ordering::Less => Some(Dir::Left),
                    core::cmp::Ordering::Greater => Some(Dir::Right),
                    core::cmp::Ordering::Equal => None,
                });
                match (insert, slot) {
                    (true, Slot::Vacant { .. }) => {
                        let n = self.alloc(key);
                        // SAFETY: fresh node, fresh vacant slot.
                        unsafe { txn.insert(n, slot) };
                        out.push(true);
                    }
                    (true, Slot::Occupied(old)) => {
                        let n = self.alloc(key);
                        // SAFETY: `old` from `find`, `n` fresh.
                        unsafe { txn.replace(old, n) };
                        out.push(false);
                    }
                    (false, Slot::Occupied(n)) => {
                        // SAFETY: `n` from `find`.
                        unsafe { txn.erase(n) };
                        out.push(true);
                    }
                    (false, Slot::Vacant { .. }) => out.push(false),
                }
            }
            out
        })
    }

    /// Copy 0's height (nodes on its longest path), the sum of its nodes'
    /// depths (a node's depth: the nodes on its path, itself included) and
    /// its published plan.
    fn shape(&self) -> (usize, usize, super::descent::Descent) {
        fn walk<const E: bool>(n: *mut Node<E>, depth: usize, sum: &mut usize) -> usize {
            // SAFETY: nodes are freed only when the harness drops; no write
            // runs (the caller's thread is the only writer).
            unsafe { n.as_ref() }.map_or(depth - 1, |node| {
                *sum += depth;
                let l = walk(node.links[0].get().load_child(Dir::Left), depth + 1, sum);
                l.max(walk(
                    node.links[0].get().load_child(Dir::Right),
                    depth + 1,
                    sum,
                ))
            })
        }
        let head = &self.tree.shared.heads[0];
        let mut sum = 0;
        let height = walk(head.root.load(crate::sync::Ordering::Relaxed), 1, &mut sum);
        let plan = head.descent.load(crate::sync::Ordering::Relaxed);
        (height, sum, super::descent::Descent::from_word(plan))
    }

    fn contains(&self, key: u64) -> bool {
        // SAFETY: nodes are freed only when the harness drops.
        unsafe {
            self.tree.read(|view| {
                let mut found = false;
                view.descend(|n| match key.cmp(&n.key) {
                    core::cmp::Ordering::Less => Some(Dir::Left),
                    core::cmp::Ordering::Greater => Some(Dir::Right),
                    core::cmp::Ordering::Equal => {
                        found = true;
                        None
                    }
                })?;
                Some(found)
            })
        }
    }

    fn keys(&self) -> Vec<u64> {
        // SAFETY: as in `contains`.
        unsafe {
            self.tree.read(|view| {
                let mut out = Vec::new();
                view.walk(|n| out.push(n.key))?;
                Some(out)
            })
        }
    }

    /// The nodes' addresses, in key order.
    fn addrs(&self) -> Vec<usize> {
        // SAFETY: as in `contains`.
        unsafe {
            self.tree.read(|view| {
                let mut out = Vec::new();
                view.walk(|n| out.push(core::ptr::from_ref(n).addr()))?;
                Some(out)
            })
        }
    }

    fn check(&self) {
        self.tree.check(|a, b| a.key < b.key).unwrap();
    }
}

impl<const E: bool> Drop for Harness<E> {
    fn drop(&mut self) {
        for n in self.all.get_mut().unwrap().drain(..) {
            // SAFETY: each pointer came from `Box::leak` and is freed once.
            drop(unsafe { Box::from_raw(n.as_ptr()) });
        }
    }
}

/// A small deterministic generator (no dependency, Miri-fast).
fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[test]
fn random_ops_match_a_set_and_keep_invariants() {
    let h = Harness::new();
    let mut model = BTreeSet::new();
    let mut s = 0x9e37_79b9_7f4a_7c15;
    let rounds = if cfg!(miri) { 150 } else { 5000 };
    for round in 0..rounds {
        let key = xorshift(&mut s) % 64;
        let insert = !xorshift(&mut s).is_multiple_of(3);
        let changed = h.apply(&[(insert, key)], None)[0];
        let want = if insert {
            model.insert(key)
        } else {
            model.remove(&key)
        };
        assert_eq!(changed, want);
        // The full check walks the tree: under Miri every fourth write
        // (the writes themselves are what Miri is here for).
        if !cfg!(miri) || round % 4 == 0 {
            h.check();
        }
        assert_eq!(h.tree.len(), model.len());
        assert_eq!(h.contains(key), model.contains(&key));
    }
    assert_eq!(h.keys(), model.into_iter().collect::<Vec<_>>());
}

#[test]
fn batches_apply_in_order() {
    let h = Harness::new();
    let ops: Vec<(bool, u64)> = (0..40).map(|i| (i % 7 != 3, (i * 5) % 17)).collect();
    h.apply(&ops, None);
    h.check();
    let mut model = BTreeSet::new();
    for &(ins, k) in &ops {
        if ins {
            model.insert(k);
        } else {
            model.remove(&k);
        }
    }
    assert_eq!(h.keys(), model.into_iter().collect::<Vec<_>>());
}

#[test]
#[cfg_attr(
    not(feature = "std"),
    ignore = "without std a panic inside a write or a drop aborts (unwind.rs)"
)]
fn a_panicking_body_rolls_back_everything() {
    let h = Harness::new();
    h.apply(&(0..20).map(|k| (true, k)).collect::<Vec<_>>(), None);
    let before = h.keys();
    let seq_before = h.tree.stats().1;
    // Inserts, replaces and erases (two-child erases included), then a panic.
    let ops: Vec<(bool, u64)> = vec![
        (true, 100),
        (false, 10),
        (true, 5),
        (false, 3),
        (true, 101),
        (false, 100),
    ];
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        h.apply(&ops, Some(ops.len() - 1))
    }));
    assert!(r.is_err());
    h.check();
    assert_eq!(h.keys(), before);
    assert_eq!(
        h.tree.stats().1,
        seq_before,
        "a rolled-back write is not counted"
    );
    // The tree still works afterwards.
    h.apply(&[(true, 1000)], None);
    h.check();
    assert!(h.contains(1000));
}

#[test]
fn readers_never_see_a_torn_batch() {
    // Each batch moves a pair of keys: readers must always find exactly one
    // of the pair (the batch is atomic), and the stable keys always.
    let h = Arc::new(Harness::new());
    let stable: Vec<u64> = (0..16).map(|k| k * 4 + 1000).collect();
    h.apply(&stable.iter().map(|&k| (true, k)).collect::<Vec<_>>(), None);
    h.apply(&[(true, 1)], None);
    let rounds = if cfg!(miri) { 20 } else { 3000 };
    let reader = {
        let h = Arc::clone(&h);
        let stable = stable.clone();
        std::thread::spawn(move || {
            for i in 0..rounds {
                // A snapshot is one version: exactly one of the pair.
                let keys = h.keys();
                assert!(
                    keys.contains(&1) != keys.contains(&2),
                    "torn batch: {keys:?}"
                );
                assert!(h.contains(stable[i % stable.len()]));
            }
        })
    };
    for i in 0..rounds {
        let (from, to) = if i % 2 == 0 { (1, 2) } else { (2, 1) };
        h.apply(&[(false, from), (true, to)], None);
    }
    reader.join().unwrap();
    h.check();
}

/// Links `n` fresh nodes into a right-leaning chain (keys 0..n) in both
/// copies: not a red-black tree, but a path of exactly `n` nodes.
fn chain(h: &Harness, n: usize) -> Vec<NonNull<Node>> {
    let nodes: Vec<NonNull<Node>> = (0..n as u64).map(|k| h.alloc(k)).collect();
    for copy in 0..2 {
        for (i, n) in nodes.iter().enumerate() {
            // SAFETY: the harness owns the nodes until it drops.
            let l = unsafe { n.as_ref() }.links(copy);
            let next = nodes
                .get(i + 1)
                .map_or(core::ptr::null_mut(), |m| m.as_ptr());
            let prev = if i == 0 {
                core::ptr::null_mut()
            } else {
                nodes[i - 1].as_ptr()
            };
            // SAFETY: null or a node of the harness.
            unsafe {
                l.set_child(Dir::Left, core::ptr::null_mut());
                l.set_child(Dir::Right, next);
            }
            l.set_parent_color(prev, true);
        }
        h.tree.shared.heads[copy]
            .root
            .store(nodes[0].as_ptr(), crate::sync::Ordering::Release);
        h.tree.shared.heads[copy]
            .len
            .store(n, crate::sync::Ordering::Relaxed);
        // A tail plan: readers walk the chain to its end.
        let plan = super::descent::Descent {
            trips: 0,
            exact: false,
        };
        h.tree.shared.heads[copy]
            .descent
            .store(plan.word(), crate::sync::Ordering::Relaxed);
    }
    nodes
}

/// Regression: the reader's descent cap gave up after its 128th node
/// without looking at that node's child, while the checker accepted a path
/// of 128 nodes: a stable copy the checker called valid made readers retry
/// forever. Both now accept a path of exactly `MAX_DEPTH` nodes and reject a
/// longer one.
#[test]
fn descent_cap_and_checker_agree_on_a_max_depth_path() {
    use super::shared::MAX_DEPTH;
    for (n, ok) in [(MAX_DEPTH, true), (MAX_DEPTH + 1, false)] {
        let h = Harness::new();
        chain(&h, n);
        let last = n as u64 - 1;
        // SAFETY: nodes are freed only when the harness drops; a single
        // attempt (no writer: the version never changes).
        let reached = unsafe {
            h.tree.read(|view| {
                let mut seen = 0;
                let r = view.descend(|node| {
                    seen += 1;
                    (node.key != last).then_some(Dir::Right)
                });
                // One attempt only: report what the cap said.
                Some(r.map(|()| seen))
            })
        };
        assert_eq!(reached.is_some(), ok, "descent over {n} nodes");
        // Past the last node: the descent steps to its nil child.
        // SAFETY: as above.
        let past = unsafe {
            h.tree
                .read(|view| Some(view.descend(|_| Some(Dir::Right)).is_some()))
        };
        assert_eq!(past, ok, "descent off the end of {n} nodes");
        let depth_error = h
            .tree
            .check(|a, b| a.key < b.key)
            .err()
            .is_some_and(|e| e.contains("deeper than the descent cap"));
        assert_eq!(!depth_error, ok, "checker on a path of {n} nodes");
        // Unlink before the harness frees the nodes.
        for copy in 0..2 {
            h.tree.shared.heads[copy]
                .root
                .store(core::ptr::null_mut(), crate::sync::Ordering::Relaxed);
            h.tree.shared.heads[copy]
                .len
                .store(0, crate::sync::Ordering::Relaxed);
        }
    }
}

/// A bulk build of every small size is a valid tree (both copies), and a
/// cursor walks it both ways in order.
#[test]
fn build_then_cursor_walks_both_ways() {
    for n in 0..if cfg!(miri) { 20 } else { 130 } {
        let mut h = Harness::new();
        let nodes: Vec<NonNull<Node>> = (0..n).map(|k| h.alloc(k * 2)).collect();
        // SAFETY: fresh, distinct, sorted nodes; empty tree; `&mut`.
        unsafe { h.tree.build(&nodes) };
        h.check();
        assert_eq!(h.keys(), (0..n).map(|k| k * 2).collect::<Vec<_>>());
        for (dir, start) in [(Dir::Right, Dir::Left), (Dir::Left, Dir::Right)] {
            // SAFETY: nodes are freed only when the harness drops.
            let mut at = unsafe {
                h.tree.seek(|view| {
                    let mut last = None;
                    view.descend(|node| {
                        last = Some(node);
                        Some(start)
                    })?;
                    Some(last)
                })
            };
            let mut seen = Vec::new();
            while let Some(c) = at {
                seen.push(c.node().key);
                at = match c.step(dir) {
                    super::Step::To(next) => Some(next),
                    super::Step::End => None,
                    super::Step::Stale => panic!("no writer, yet stale"),
                };
            }
            if dir == Dir::Left {
                seen.reverse();
            }
            assert_eq!(seen, (0..n).map(|k| k * 2).collect::<Vec<_>>(), "n = {n}");
        }
    }
}

/// A cursor whose version changed says so instead of walking on.
#[test]
fn a_cursor_goes_stale_after_a_write() {
    let h = Harness::new();
    h.apply(&[(true, 1), (true, 2), (true, 3)], None);
    // SAFETY: nodes are freed only when the harness drops.
    let c = unsafe {
        h.tree.seek(|view| {
            let mut last = None;
            view.descend(|node| {
                last = Some(node);
                Some(Dir::Left)
            })?;
            Some(last)
        })
    }
    .unwrap();
    assert!(matches!(c.step(Dir::Right), super::Step::To(_)));
    h.apply(&[(true, 4)], None);
    assert!(matches!(c.step(Dir::Right), super::Step::Stale));
}

/// The published descent plan matches every copy's shape through
/// random batches, some of which panic and roll back, and some of which
/// rebuild (the checker verifies the plan after each).
#[test]
fn descent_plan_holds_through_random_batches_rollbacks_and_rebuilds() {
    let h = Harness::new();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..if cfg!(miri) { 36 } else { 3000 } {
        let len = (xorshift(&mut x) % 8) as usize + 1;
        let ops: Vec<(bool, u64)> = (0..len)
            .map(|_| (!xorshift(&mut x).is_multiple_of(3), xorshift(&mut x) % 200))
            .collect();
        // Without `std` a panic inside a write aborts (`unwind.rs`).
        let panic_after = xorshift(&mut x)
            .is_multiple_of(5)
            .then(|| (xorshift(&mut x) % len as u64) as usize)
            .filter(|_| cfg!(feature = "std"));
        let _ =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h.apply(&ops, panic_after)));
        h.check();
    }
}

/// A published exact plan one trip short of the height makes readers stop
/// above the deepest leaves and give wrong answers that validate, and the
/// checker says so (the `short_trips` defect plants the same error).
#[test]
fn an_exact_plan_one_trip_short_misleads_readers_and_the_checker_catches_it() {
    let h = Harness::new();
    let keys: Vec<u64> = (0..64).collect();
    h.apply(&keys.iter().map(|&k| (true, k)).collect::<Vec<_>>(), None);
    h.check();
    for copy in 0..2 {
        let head = &h.tree.shared.heads[copy].descent;
        let plan = super::descent::Descent::from_word(head.load(crate::sync::Ordering::Relaxed));
        assert!(plan.exact, "a batch of 64 inserts ends with a rebuild");
        assert_eq!(plan.trips, 7, "64 balanced nodes are 7 high");
        let short = super::descent::Descent {
            trips: plan.trips - 1,
            exact: true,
        };
        head.store(short.word(), crate::sync::Ordering::Relaxed);
    }
    let e = h.tree.check(|a, b| a.key < b.key).unwrap_err();
    assert!(e.contains("branch-free steps"), "{e}");
    assert!(keys.iter().any(|&k| !h.contains(k)));
}

/// Sequential inserts, one per write, grow a long red spine; every `len / 8` updates a write relinks both
/// copies into the balanced shape, after which readers follow an exact plan
/// of the balanced height, and in between the average path stays within one
/// node of the balanced tree's. (Nodes without heights: with them, every
/// plan is exact, see `heights_give_every_shape_an_exact_plan`.)
#[test]
fn sequential_inserts_are_rebuilt_into_the_balanced_shape() {
    for descending in [false, true] {
        let h = Harness::plain();
        let n: u64 = if cfg!(miri) { 48 } else { 1200 };
        let mut rebuilds = 0;
        for i in 0..n {
            let k = if descending { n - i } else { i };
            h.apply(&[(true, k)], None);
            if !cfg!(miri) || i % 4 == 0 {
                h.check();
            }
            let len = i as usize + 1;
            let (height, depths, plan) = h.shape();
            let balanced = super::descent::balanced_height(len);
            if plan.exact {
                rebuilds += 1;
                assert_eq!((height, plan.trips), (balanced, balanced), "n = {len}");
            }
            let mean = depths as f64 / len as f64;
            assert!(mean <= balanced as f64, "n = {len}: mean depth {mean:.2}");
        }
        assert!(
            rebuilds >= if cfg!(miri) { 2 } else { 5 },
            "only {rebuilds} rebuilds"
        );
    }
}

/// Nodes that keep their heights give every copy within `EXACT_SLACK`
/// levels of the balanced height an exact plan of exactly its height,
/// whatever shape the writes left (ascending, descending and random
/// inserts, erases, batches, rollbacks, rebuilds), and random writes keep
/// it there: readers do not take a branchy tail. The checker verifies each
/// node's recorded height and cached child keys after every write.
#[test]
fn heights_give_every_shape_an_exact_plan() {
    let n: u64 = if cfg!(miri) { 40 } else { 600 };
    for order in 0..3u64 {
        let h = Harness::new();
        let mut rng = 0x9E37_79B9_7F4A_7C15 ^ order;
        let mut set = BTreeSet::new();
        let mut tall = 0;
        for i in 0..2 * n {
            let k = match order {
                0 => i % n,
                1 => n - i % n,
                _ => xorshift(&mut rng) % n,
            };
            // Inserts while growing, then as many erases or inserts.
            let insert = i < n || xorshift(&mut rng).is_multiple_of(3);
            // Without `std` a panic inside a write aborts (`unwind.rs`).
            let panic_after = (i % 37 == 36 && cfg!(feature = "std")).then_some(1);
            let ops = [(insert, k), (!insert, k ^ 1)];
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                h.apply(&ops, panic_after)
            }));
            if r.is_ok() {
                for (ins, k) in ops {
                    if ins {
                        set.insert(k);
                    } else {
                        set.remove(&k);
                    }
                }
            }
            if !cfg!(miri) || i % 8 == 0 {
                h.check();
            }
            let (height, _, plan) = h.shape();
            let balanced = super::descent::balanced_height(set.len());
            if height <= balanced + super::shape::EXACT_SLACK {
                assert!(plan.exact, "order {order}, write {i}: a tail plan");
                assert_eq!(plan.trips, height, "order {order}, write {i}");
            } else {
                tall += 1;
            }
        }
        if order == 2 {
            assert_eq!(tall, 0, "random writes left a copy too tall");
        }
        assert_eq!(h.keys(), set.into_iter().collect::<Vec<_>>());
    }
}

/// Past `IN_PLACE_MAX` nodes no commit rebuilds on its own (no write
/// relinks the whole tree), the shape stays red-black (checked), and an
/// explicit rebuild still gives the exact plan.
#[test]
#[cfg_attr(miri, ignore = "grows past 4096 nodes")]
fn large_trees_are_rebuilt_only_when_asked() {
    let h = Harness::plain();
    let max = super::shape::IN_PLACE_MAX;
    let (mut below, mut above) = (0, 0);
    for k in 0..(max + max / 2) as u64 {
        h.apply(&[(true, k)], None);
        if h.shape().2.exact {
            *(if k as usize >= max {
                &mut above
            } else {
                &mut below
            }) += 1;
        }
    }
    h.check();
    assert!(below > 0, "no rebuild below {max} nodes");
    assert_eq!(
        above, 0,
        "a commit rebuilt a tree of over {max} nodes in place"
    );
    h.tree.write(&Keep, |txn, _| txn.rebuild());
    let (height, _, plan) = h.shape();
    assert!(plan.exact);
    assert_eq!(height, super::descent::balanced_height(max + max / 2));
    h.check();
}

/// Past `HEIGHTS_MAX` nodes copy 0's heights are no longer kept (no write
/// pays for them, and the plan falls back to the black height and a tail);
/// once the tree is small again a rebuild records them again, and writes
/// keep them from there. The checker verifies the heights whenever the
/// writer says it keeps them.
#[test]
#[cfg_attr(miri, ignore = "grows past 4096 nodes")]
fn heights_are_dropped_past_heights_max_and_kept_again_after_a_rebuild() {
    let h = Harness::new();
    let max = super::links::HEIGHTS_MAX as u64;
    let mut rng = 7;
    let mut keys: Vec<u64> = (0..max + 64).collect();
    for i in (1..keys.len()).rev() {
        keys.swap(i, (xorshift(&mut rng) % (i as u64 + 1)) as usize);
    }
    for chunk in keys.chunks(64) {
        h.apply(&chunk.iter().map(|&k| (true, k)).collect::<Vec<_>>(), None);
    }
    h.check();
    assert!(!h.tree.write(&Keep, |txn, _| txn.shape.heights));
    assert!(!h.shape().2.exact, "a plan from heights that are not kept");
    // Below the bound again: the next rebuild records them.
    h.apply(
        &keys[..1024].iter().map(|&k| (false, k)).collect::<Vec<_>>(),
        None,
    );
    h.tree.write(&Keep, |txn, _| txn.rebuild());
    h.check();
    for &k in &keys[..200] {
        h.apply(&[(true, k)], None);
        h.check();
        let (height, _, plan) = h.shape();
        let balanced = super::descent::balanced_height(h.keys().len());
        if height <= balanced + super::shape::EXACT_SLACK {
            assert!(
                plan.exact && plan.trips == height,
                "{plan:?}, height {height}"
            );
        }
    }
}

/// The van Emde Boas ranks are a permutation of the keys, top half of the
/// levels first: on 15 nodes, the root and its children, then each
/// two-level subtree below them, left to right.
#[test]
fn van_emde_boas_ranks_are_a_recursive_top_then_bottom_permutation() {
    use super::shape::van_emde_boas;
    assert_eq!(
        van_emde_boas(15),
        [7, 3, 11, 1, 0, 2, 5, 4, 6, 9, 8, 10, 13, 12, 14]
    );
    assert_eq!(van_emde_boas(0), [0usize; 0]);
    assert_eq!(van_emde_boas(1), [0]);
    for len in 0..if cfg!(miri) { 40 } else { 300 } {
        let mut ranks = van_emde_boas(len);
        // The root comes first, as `link` splits at the middle.
        assert!(len == 0 || ranks[0] == len / 2, "root of {len}");
        ranks.sort_unstable();
        assert!(
            ranks.iter().copied().eq(0..len),
            "not a permutation at {len}"
        );
    }
}

/// In one write: collects copy 0's keys (`Txn::scan`, a few at a time),
/// builds a shadow of fresh nodes for them in van Emde Boas order, inserts
/// `extra` and erases the first key in the shadow, and adopts it; panics
/// after it when `panic` is set. Returns the keys in the order built.
fn adopt(h: &Harness, extra: u64, panic: bool) -> Vec<u64> {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        h.tree.write(&Keep, |txn, _| {
            let mut keys: Vec<u64> = Vec::new();
            loop {
                let last = keys.last().copied();
                let done = txn.scan(|n| last.is_none_or(|l| n.key > l), 7, |n| keys.push(n.key));
                if done {
                    break;
                }
            }
            let mut shadow = super::Shadow::new(keys.len());
            let mut order = Vec::new();
            for spot in super::VebOrder::new(keys.len()) {
                order.push(keys[spot.rank]);
                // SAFETY: a fresh node holding the key of rank
                // `spot.rank`, spots in their order.
                unsafe { shadow.place(spot, h.alloc(keys[spot.rank])) };
            }
            let by = |key: u64| {
                move |n: &Node| match key.cmp(&n.key) {
                    core::cmp::Ordering::Less => Some(Dir::Left),
                    core::cmp::Ordering::Greater => Some(Dir::Right),
                    core::cmp::Ordering::Equal => None,
                }
            };
            let slot = shadow.find(by(extra));
            // SAFETY: a fresh node, a fresh vacant slot.
            unsafe { shadow.insert(h.alloc(extra), slot) };
            let Slot::Occupied(first) = shadow.find(by(keys[0])) else {
                panic!("placed keys are found");
            };
            // SAFETY: from `find` just now.
            unsafe { shadow.erase(first) };
            txn.begin();
            // SAFETY: fresh nodes, in no copy, freed when the harness drops.
            unsafe { txn.adopt(shadow) };
            assert!(!panic, "planned panic");
            order
        })
    }));
    r.unwrap_or_default()
}

/// An adoption replaces every node by the shadow's in both copies at once,
/// takes on the shadow's changes and shape, and rolls back whole; readers
/// running beside it never see a stable key missing.
#[test]
fn adoption_swaps_in_a_tree_built_aside() {
    let h = Arc::new(Harness::new());
    let keys: Vec<u64> = (0..if cfg!(miri) { 40 } else { 500 }).collect();
    h.apply(&keys.iter().map(|&k| (true, k)).collect::<Vec<_>>(), None);
    let before = h.addrs();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (h, stop) = (h.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut reads = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || reads == 0 {
                assert!(h.contains(1 + reads % 39), "a key went missing");
                reads += 1;
            }
        })
    };
    if cfg!(feature = "std") {
        // Without `std` a panic inside a write aborts (`unwind.rs`).
        let rolled = adopt(&h, 10_000, true);
        assert!(rolled.is_empty());
        h.check();
        assert_eq!(h.keys(), keys, "rolled back whole");
    }
    let order = adopt(&h, 10_000, false);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    reader.join().unwrap();
    h.check();
    let mut want: Vec<u64> = keys[1..].to_vec();
    want.push(10_000);
    assert_eq!(h.keys(), want);
    let ranks = super::shape::van_emde_boas(keys.len());
    assert_eq!(order, ranks.iter().map(|&r| keys[r]).collect::<Vec<_>>());
    assert!(
        h.addrs().iter().all(|a| !before.contains(a)),
        "a node was not replaced"
    );
    // A shadow without changes gives the exact plan.
    let keys = h.keys();
    h.tree.write(&Keep, |txn, _| {
        let mut shadow = super::Shadow::new(keys.len());
        for spot in super::VebOrder::new(keys.len()) {
            // SAFETY: as in `adopt`.
            unsafe { shadow.place(spot, h.alloc(keys[spot.rank])) };
        }
        // SAFETY: as in `adopt`.
        unsafe { txn.adopt(shadow) };
    });
    h.check();
    let (height, _, plan) = h.shape();
    assert_eq!(height, super::descent::balanced_height(keys.len()));
    assert_eq!(plan, super::descent::Descent::balanced(keys.len()));
}

/// The van Emde Boas order, as `VebOrder` takes it a node at a time, is the
/// recursive definition's: the top half of the levels, then each subtree
/// below them, left to right, each recursively.
#[test]
#[cfg_attr(
    miri,
    ignore = "safe arithmetic (VebOrder has no unsafe; the relinking that uses it runs under \
              Miri in the rebuild tests); 25 s there"
)]
fn van_emde_boas_order_is_the_recursive_one() {
    fn veb(keys: core::ops::Range<usize>, levels: usize, out: &mut Vec<usize>) {
        if keys.is_empty() || levels == 0 {
            return;
        }
        let mid = |k: &core::ops::Range<usize>| k.start + k.len() / 2;
        if levels == 1 {
            return out.push(mid(&keys));
        }
        let top = levels / 2;
        veb(keys.clone(), top, out);
        let mut subs = vec![keys];
        for _ in 0..top {
            subs = (subs.into_iter())
                .filter(|k| !k.is_empty())
                .flat_map(|k| [k.start..mid(&k), mid(&k) + 1..k.end])
                .collect();
        }
        for sub in subs {
            veb(sub, levels - top, out);
        }
    }
    for len in 0..2100 {
        let mut want = Vec::new();
        veb(0..len, super::descent::balanced_height(len), &mut want);
        assert_eq!(super::shape::van_emde_boas(len), want, "{len}");
    }
}

/// The van Emde Boas order puts every node after its parent, so a tree can
/// be linked in it (`Shadow::place`), and names each node's parent, side
/// and depth in the balanced shape (as `link` splits it).
#[test]
fn van_emde_boas_order_puts_parents_first() {
    for len in 0..if cfg!(miri) { 40 } else { 600 } {
        let mut seen = vec![false; len];
        for spot in super::VebOrder::new(len) {
            let rank = spot.rank;
            let mut keys = 0..len;
            let (mut parent, mut dir, mut depth) = (None, Dir::Left, 0);
            while keys.start + keys.len() / 2 != rank {
                let m = keys.start + keys.len() / 2;
                assert!(seen[m], "rank {rank} of {len} before its ancestor {m}");
                (parent, dir, depth) = (Some(m), Dir::toward(rank > m), depth + 1);
                keys = if rank > m {
                    m + 1..keys.end
                } else {
                    keys.start..m
                };
            }
            let want = (parent, dir, depth);
            assert_eq!((spot.parent, spot.dir, spot.depth), want, "{len}: {rank}");
            seen[rank] = true;
        }
        assert!(seen.iter().all(|&s| s), "{len}: not every rank");
    }
}
