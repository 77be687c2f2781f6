//! Loom models of iterators (cursors) racing a writer that rotates the
//! nodes they stand on.
//!
//! Run with
//! `RUSTFLAGS="--cfg latchtree_loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --test loom_iter`
//! (a separate target dir: the cfg changes every crate's build).
//!
//! Harness as in `tests/loom.rs`: the writer runs on the main thread and the
//! iterator on a spawned one (loom explores reader loads against writer
//! stores fully that way), keys are read through loom's causality checker
//! (so a cursor that climbs to a node whose key was not published to it
//! fails the model), and a model that never made a reader retry fails.
//! Each model asserts the iterator guarantee: strictly monotone keys, no key
//! twice, every stable key yielded.

#![cfg(latchtree_loom)]

mod common;

use common::{LoomKey as Key, loom_model as model};
use latchtree::LatchTree;
use loom::sync::Arc;
use loom::thread;

type Tree = LatchTree<Key, u32>;

fn tree_of(keys: &[u32]) -> Arc<Tree> {
    let tree = Tree::new();
    for &k in keys {
        assert!(tree.insert(Key::new(k), k));
    }
    Arc::new(tree)
}

/// Asserts the iterator guarantee for keys yielded in `increasing` order.
fn check(keys: &[u32], increasing: bool, stable: &[u32]) {
    for w in keys.windows(2) {
        assert!(
            if increasing { w[0] < w[1] } else { w[0] > w[1] },
            "not strictly monotone or repeated: {keys:?}"
        );
    }
    for s in stable {
        assert!(keys.contains(s), "stable key {s} skipped: {keys:?}");
    }
}

/// Stable keys 4 and 6 (4 the black root, 6 its red right child); the
/// writer inserts 7, which rotates left at 4: 6 becomes the root, with 4
/// and 7 as children. The forward iterator stands on 4 or 6 while their
/// links (child and parent) are rewritten.
#[test]
fn forward_iterator_races_a_rotation() {
    model(|| {
        let tree = tree_of(&[4, 6]);
        let t = tree.clone();
        let r = thread::spawn(move || {
            let guard = latchtree::pin();
            let keys: Vec<u32> = t.keys(&guard).map(Key::get).collect();
            check(&keys, true, &[4, 6]);
        });
        assert!(tree.insert(Key::new(7), 7));
        r.join().unwrap();
        tree.check_invariants().unwrap();
        tree.stats().read_retries
    });
}

/// The mirror image: stable keys 6 (root) and 4; the writer inserts 3,
/// which rotates right at 6, while a reverse iterator walks down.
#[test]
fn reverse_iterator_races_a_rotation() {
    model(|| {
        let tree = tree_of(&[6, 4]);
        let t = tree.clone();
        let r = thread::spawn(move || {
            let guard = latchtree::pin();
            let keys: Vec<u32> = t.keys(&guard).rev().map(Key::get).collect();
            check(&keys, false, &[4, 6]);
        });
        assert!(tree.insert(Key::new(3), 3));
        r.join().unwrap();
        tree.check_invariants().unwrap();
        tree.stats().read_retries
    });
}

/// A removal under the iterator: stable keys 2 and 6 around a churned 4
/// (the root); removing 4 makes 6 (or 2) the root while the iterator stands
/// on 2 or 4.
#[test]
fn forward_iterator_races_a_removal() {
    model(|| {
        let tree = tree_of(&[4, 2, 6]);
        let t = tree.clone();
        let r = thread::spawn(move || {
            let guard = latchtree::pin();
            let keys: Vec<u32> = t.keys(&guard).map(Key::get).collect();
            check(&keys, true, &[2, 6]);
        });
        assert!(tree.remove(&Key::new(4)));
        r.join().unwrap();
        tree.check_invariants().unwrap();
        tree.stats().read_retries
    });
}
