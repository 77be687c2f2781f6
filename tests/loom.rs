//! Loom models of the latch protocol, through the public API.
//!
//! Run with
//! `RUSTFLAGS="--cfg latchtree_loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --test loom`
//! (use a separate target dir: the cfg changes every crate's build).
//!
//! Under `cfg(latchtree_loom)` the crate's atomics, fences and locks are loom's
//! (`src/sync.rs`), and retired nodes go to a graveyard freed when the tree
//! drops (`src/reclaim/`). crossbeam-epoch is plain code here: readers pin
//! it as usual, loom does not explore it.
//!
//! Every `LatchTree` model uses [`Key`], whose value lives in a loom
//! `UnsafeCell`: loom then checks that every key a reader compares was
//! published to it (happens-before its read), which is exactly what the
//! `Release` link stores and `Acquire` link loads must guarantee.
//!
//! Each model asserts that a reader only ever returns an answer that belongs
//! to one whole committed version. The planted defects
//! (`--cfg latchtree_defect="…"`) make these fail (`.ci/run`, layer teeth):
//!
//! | defect | failing models |
//! |---|---|
//! | `no_release_fence` | `batch_is_all_or_nothing` (a half-done length), `addr_index_recycled_node_*` (B's id with A's range) |
//! | `relaxed_link` | `batch_is_all_or_nothing`, `flip_with_concurrent_reader` (causality violation), `insert_double_rotation_races_lookup` |
//! | `no_depth_cap` | `rollback_races_lookup` (the reader never stops: loom's branch limit) |

#![cfg(latchtree_loom)]

mod common;

use common::loom_model as model;
use latchtree::{AddrIndex, LatchTree};
use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;
use std::cmp::Ordering;
use std::fmt;
use std::ops::Bound;

/// A `u32` key whose every read goes through loom's causality checker: a
/// reader that compares a key whose creation does not happen-before the read
/// makes loom fail the model ("Causality violation").
struct Key(UnsafeCell<u32>);

// SAFETY: the cell is written only by `UnsafeCell::new`; afterwards it is
// only read, and loom checks every read against that write.
unsafe impl Sync for Key {}

impl Key {
    fn new(v: u32) -> Self {
        Key(UnsafeCell::new(v))
    }

    fn get(&self) -> u32 {
        // SAFETY: never written after creation (see the `Sync` impl); loom
        // reports a read that is not ordered after the creation.
        self.0.with(|p| unsafe { *p })
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}
impl Eq for Key {}
impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        self.get().cmp(&other.get())
    }
}
impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.get())
    }
}

type Tree = LatchTree<Key, u32>;

/// A tree holding `(k, 10 * k)` for each `k`, built by the calling thread.
fn tree_of(keys: &[u32]) -> Arc<Tree> {
    let tree = Tree::new();
    for &k in keys {
        assert!(tree.insert(Key::new(k), 10 * k));
    }
    Arc::new(tree)
}

/// Runs `read` on a new thread against `tree`.
fn reader<T: Send + 'static>(
    tree: &Arc<Tree>,
    read: impl FnOnce(&Tree) -> T + Send + 'static,
) -> thread::JoinHandle<T> {
    let tree = tree.clone();
    thread::spawn(move || read(&tree))
}

/// The value under `k`.
fn get(tree: &Tree, k: u32) -> Option<u32> {
    let guard = latchtree::pin();
    tree.get(&Key::new(k), &guard).copied()
}

/// The greatest key `<= k`.
fn floor(tree: &Tree, k: u32) -> Option<u32> {
    let guard = latchtree::pin();
    tree.upper_bound(Bound::Included(&Key::new(k)), &guard)
        .map(|(k, _)| k.get())
}

/// The smallest key `> k`.
fn above(tree: &Tree, k: u32) -> Option<u32> {
    let guard = latchtree::pin();
    tree.lower_bound(Bound::Excluded(&Key::new(k)), &guard)
        .map(|(k, _)| k.get())
}

/// Every `(key, value)` pair, from one consistent read.
fn snapshot(tree: &Tree) -> Vec<(u32, u32)> {
    let guard = latchtree::pin();
    tree.snapshot(&guard)
        .into_iter()
        .map(|(k, v)| (k.get(), *v))
        .collect()
}

/// `(k, 10 * k)` for each `k`.
fn pairs(keys: &[u32]) -> Vec<(u32, u32)> {
    keys.iter().map(|&k| (k, 10 * k)).collect()
}

/// Joins the reader, checks the settled tree against `want`, and returns
/// the number of retried reads.
fn finish(tree: &Tree, r: thread::JoinHandle<()>, want: &[(u32, u32)]) -> u64 {
    r.join().unwrap();
    tree.check_invariants().unwrap();
    assert_eq!(snapshot(tree), want);
    assert_eq!(tree.len(), want.len());
    tree.stats().read_retries
}

/// The latch flip itself: a write that replaces both values of a two-entry
/// tree (no shape change: two `Replace`s between the two flips), against a
/// reader whose snapshot and length must come from one whole version.
#[test]
fn flip_with_concurrent_reader() {
    model(|| {
        let tree = tree_of(&[1, 2]);
        let r = reader(&tree, |tree| {
            let snap = snapshot(tree);
            assert!(
                snap == [(1, 10), (2, 20)] || snap == [(1, 11), (2, 22)],
                "mixed snapshot {snap:?}"
            );
            assert_eq!(tree.len(), 2);
        });
        tree.write(|b| {
            assert!(!b.insert(Key::new(1), 11));
            assert!(!b.insert(Key::new(2), 22));
        });
        finish(&tree, r, &[(1, 11), (2, 22)])
    });
}

/// Insert with a root rotation on a 2-node tree (the root changes in both
/// copies) racing lookups of the stable keys and of the new one.
#[test]
fn insert_rotating_root_races_lookup() {
    model(|| {
        let tree = tree_of(&[10, 20]);
        let r = reader(&tree, |tree| {
            assert_eq!(get(tree, 10), Some(100));
            let new = get(tree, 30);
            assert!(new.is_none() || new == Some(300));
            assert_eq!(get(tree, 20), Some(200));
            // Once the new key was seen, it stays.
            if new.is_some() {
                assert_eq!(get(tree, 30), Some(300));
            }
        });
        assert!(tree.insert(Key::new(30), 300));
        finish(&tree, r, &pairs(&[10, 20, 30]))
    });
}

/// Insert with a double rotation (inner grandchild) on a 4-node tree,
/// racing lookups that cross the rotated nodes.
#[test]
fn insert_double_rotation_races_lookup() {
    model(|| {
        // Shape: 20 black; 10 black, 30 black; 40 red under 30.
        // Inserting 35 rotates 40 right, then 30 left.
        let tree = tree_of(&[10, 20, 30, 40]);
        let r = reader(&tree, |tree| {
            assert_eq!(get(tree, 40), Some(400));
            let f = floor(tree, 37);
            assert!(f == Some(30) || f == Some(35), "floor(37) = {f:?}");
            assert_eq!(get(tree, 30), Some(300));
        });
        assert!(tree.insert(Key::new(35), 350));
        finish(&tree, r, &pairs(&[10, 20, 30, 35, 40]))
    });
}

/// Erase of a two-child node whose successor is deeper down (it is moved up
/// from two levels below), racing lookups of the keys around it.
#[test]
fn erase_two_children_races_lookup() {
    model(|| {
        // Shape: 20 black; 10 black, 30 black; 25 red under 30.
        // Erasing 20 moves 25 to the root.
        let tree = tree_of(&[10, 20, 25, 30]);
        let r = reader(&tree, |tree| {
            assert_eq!(get(tree, 30), Some(300));
            assert_eq!(above(tree, 20), Some(25));
            let gone = get(tree, 20);
            assert!(gone.is_none() || gone == Some(200));
            assert_eq!(get(tree, 10), Some(100));
        });
        assert!(tree.remove(&Key::new(20)));
        finish(&tree, r, &pairs(&[10, 25, 30]))
    });
}

/// Erase of the root whose successor is its own child, with a fix-up,
/// racing lookups.
#[test]
fn erase_root_races_lookup() {
    model(|| {
        // Shape: 20 black; 10 black, 30 black; 40 red under 30.
        // Erasing 20 moves 30 up and recolours 40.
        let tree = tree_of(&[10, 20, 30, 40]);
        let r = reader(&tree, |tree| {
            assert_eq!(get(tree, 40), Some(400));
            let f = floor(tree, 25);
            assert!(f == Some(20) || f == Some(10), "floor(25) = {f:?}");
            assert_eq!(get(tree, 30), Some(300));
        });
        assert!(tree.remove(&Key::new(20)));
        finish(&tree, r, &pairs(&[10, 30, 40]))
    });
}

/// A reader whose reads span two writes (four flips): its snapshot comes
/// from one of the three versions, and a later read never sees an older one.
#[test]
fn reader_spans_two_writes() {
    model(|| {
        let tree = tree_of(&[1, 2]);
        let r = reader(&tree, |tree| {
            let versions = [pairs(&[1, 2]), pairs(&[1, 2, 3]), pairs(&[2, 3])];
            let snap = snapshot(tree);
            let v = versions
                .iter()
                .position(|v| *v == snap)
                .unwrap_or_else(|| panic!("snapshot {snap:?} is no version"));
            let one = get(tree, 1);
            assert!(v < 2 || one.is_none(), "1 came back after version {v}");
        });
        assert!(tree.insert(Key::new(3), 30));
        assert!(tree.remove(&Key::new(1)));
        finish(&tree, r, &pairs(&[2, 3]))
    });
}

/// A batch of two inserts and a remove is seen all-or-nothing: by the
/// length (3 in the middle of the batch), by a snapshot, and by lookups
/// made one after the other.
#[test]
fn batch_is_all_or_nothing() {
    model(|| {
        let tree = tree_of(&[1, 5]);
        let r = reader(&tree, |tree| {
            let len = tree.len();
            assert!(len == 2 || len == 3, "len {len} is no version");
            let snap = snapshot(tree);
            assert!(
                snap == pairs(&[1, 5]) || snap == pairs(&[1, 2, 3]),
                "snapshot {snap:?} is no version"
            );
            let three = get(tree, 3);
            let five = get(tree, 5);
            assert!(three.is_none() || five.is_none(), "saw 3, then 5");
        });
        tree.write(|b| {
            assert!(b.insert(Key::new(2), 20));
            assert!(b.insert(Key::new(3), 30));
            assert!(b.remove(&Key::new(5)));
        });
        finish(&tree, r, &pairs(&[1, 2, 3]))
    });
}

/// The payload of the deliberate panic in `rollback_races_lookup`.
struct Abort;

/// A write that rotates the tree and then panics is rolled back while a
/// reader that started before it walks copy 0. Mid-rollback, copy 0 mixes
/// restored and rotated links (here 10 → 20 → 10, a cycle, for a search
/// between them): the descent cap is what makes the reader give up and
/// retry. Without it (`latchtree_defect="no_depth_cap"`) the reader loops
/// for ever and loom stops the model at its branch limit.
#[test]
fn rollback_races_lookup() {
    quiet_abort_panics();
    model(|| {
        let tree = tree_of(&[10, 20]);
        let r = reader(&tree, |tree| {
            assert_eq!(get(tree, 15), None);
            assert_eq!(get(tree, 20), Some(200));
        });
        let rolled_back = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            tree.write(|b| {
                assert!(b.insert(Key::new(30), 300));
                std::panic::panic_any(Abort);
            })
        }));
        assert!(rolled_back.is_err_and(|p| p.is::<Abort>()));
        finish(&tree, r, &pairs(&[10, 20]))
    });
}

/// Keeps the deliberate `Abort` panics of `rollback_races_lookup` (one per
/// explored execution) out of the test output; other panics print as usual.
fn quiet_abort_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !info.payload().is::<Abort>() {
                default(info);
            }
        }));
    });
}

/// `(range, module id)` as a reader saw it.
type Seen = Option<(std::ops::Range<u64>, u64)>;

/// The address index's recycled-node path (through the signal-safe `lookup`
/// it is `tests/loom_addr_index.rs`'s `recycled_node_base_and_tag_are_validated`,
/// which checks base and tag too, over the same interleavings):
/// module A (`10..20`, id 1) is removed and module B (`12..30`, id 2)
/// inserted, and B's range reuses A's slab node (the free list is LIFO), so
/// its `start`/`end`/`id`/`module` words are rewritten while a reader may
/// still stand on the node. `read` must see A's whole answer, B's whole
/// answer, or none: never A's range with B's id, or a mix of bounds.
fn recycled_node_model(read: fn(&AddrIndex<u64>) -> Seen) {
    // One preemption puts the reader between two reads of the node while
    // both writes run whole (`loom_model_preempted_once`).
    common::loom_model_preempted_once(move || {
        let index = Arc::new(AddrIndex::<u64>::new());
        let a = index.insert(10..20, 1).unwrap();
        assert_eq!(a.get(), 1);
        let r = {
            let index = index.clone();
            thread::spawn(move || {
                let seen = read(&index);
                assert!(
                    seen.is_none() || seen == Some((10..20, 1)) || seen == Some((12..30, 2)),
                    "read {seen:?}, which is no version"
                );
            })
        };
        assert!(index.remove(a).is_some());
        assert_eq!(index.insert(12..30, 2).unwrap().get(), 2);
        r.join().unwrap();
        index.check_invariants().unwrap();
        let guard = index.pin();
        let left: Vec<_> = index
            .snapshot(&guard)
            .iter()
            .map(|h| (h.range(), h.id().get()))
            .collect();
        assert_eq!(left, [(12..30, 2)]);
        index.stats().read_retries
    });
}

/// [`recycled_node_model`] through `module_address`, which also checks that
/// the value belongs to the module id it came with.
#[test]
fn addr_index_recycled_node_module_address() {
    recycled_node_model(|index| {
        let guard = latchtree::pin();
        let hit = index.module_address(15, &guard)?;
        assert_eq!(*hit.value(), hit.id().get(), "the value of another module");
        Some((hit.range(), hit.id().get()))
    });
}
