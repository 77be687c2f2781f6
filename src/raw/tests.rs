//! Unit tests of the raw core without any epoch: nodes are plain boxes freed
//! at the end of each test. These are the tests Miri runs under the default
//! (Stacked Borrows) model with strict provenance.

use super::{Dir, Linked, Links, RawTree, Slot};
use core::ptr::NonNull;
use std::collections::BTreeSet;
use std::sync::Arc;

struct Node {
    links: [Links<Node>; 2],
    key: u64,
}

// SAFETY: two distinct link sets, indexed by copy.
unsafe impl Linked for Node {
    fn links(&self, copy: usize) -> &Links<Self> {
        &self.links[copy]
    }
}

/// A raw tree plus every node ever allocated (freed on drop, never before,
/// so that concurrent readers may stand on released nodes).
struct Harness {
    tree: RawTree<Node, ()>,
    all: std::sync::Mutex<Vec<NonNull<Node>>>,
}

// SAFETY: nodes hold only atomics and a `u64` written before publication.
unsafe impl Send for Harness {}
// SAFETY: as above.
unsafe impl Sync for Harness {}

impl Harness {
    fn new() -> Self {
        Harness {
            tree: RawTree::new(()),
            all: std::sync::Mutex::new(Vec::new()),
        }
    }

    fn alloc(&self, key: u64) -> NonNull<Node> {
        let n = NonNull::from(Box::leak(Box::new(Node {
            links: [Links::new(), Links::new()],
            key,
        })));
        self.all.lock().unwrap().push(n);
        n
    }

    /// Inserts or erases each key; returns what changed.
    fn apply(&self, ops: &[(bool, u64)], panic_after: Option<usize>) -> Vec<bool> {
        self.tree.write(
            |txn, _| {
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
            },
            |_, _, _| {},
            |_, _| {},
        )
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

    fn check(&self) {
        self.tree.check(|a, b| a.key < b.key).unwrap();
    }
}

impl Drop for Harness {
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
    for _ in 0..rounds {
        let key = xorshift(&mut s) % 64;
        let insert = !xorshift(&mut s).is_multiple_of(3);
        let changed = h.apply(&[(insert, key)], None)[0];
        let want = if insert {
            model.insert(key)
        } else {
            model.remove(&key)
        };
        assert_eq!(changed, want);
        h.check();
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
