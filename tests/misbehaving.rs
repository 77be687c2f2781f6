//! User code that misbehaves: a key `Ord` that panics or lies, a write
//! closure that panics, a value `Drop` that panics, a guard of the wrong
//! collector. None of it may cause undefined behaviour, a reader crash, a
//! torn read or a loop; a panicking write leaves the tree exactly as it was.
//!
//! Sizes shrink under Miri (run with `-Zmiri-tree-borrows`).

use latchtree::{AddrIndex, AddrIndexError, Batch, Collector, LatchTree};
use std::cell::Cell;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{
    AtomicBool, AtomicU64, AtomicUsize,
    Ordering::{Acquire, Relaxed, Release},
};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::Duration;

mod common;
use common::Rng;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// Scales a size down under Miri.
fn size(normal: u64, miri: u64) -> u64 {
    if cfg!(miri) { miri } else { normal }
}

/// Counts values created and dropped.
#[derive(Default, Debug)]
struct Tally {
    created: AtomicUsize,
    dropped: AtomicUsize,
}

impl Tally {
    fn assert_balanced(&self) {
        assert_eq!(
            self.dropped.load(Relaxed),
            self.created.load(Relaxed),
            "drops != values created"
        );
    }

    fn flush_default_collector_until_balanced(&self) {
        for _ in 0..1_000_000 {
            if self.dropped.load(Relaxed) >= self.created.load(Relaxed) {
                break;
            }
            latchtree::pin().flush();
            thread::yield_now();
        }
        self.assert_balanced();
    }
}

/// A counted value with a tag; cloning makes a new counted value.
#[derive(Debug)]
struct Val {
    tag: u64,
    tally: Arc<Tally>,
}

impl Val {
    fn new(tag: u64, tally: &Arc<Tally>) -> Self {
        tally.created.fetch_add(1, Relaxed);
        Val {
            tag,
            tally: Arc::clone(tally),
        }
    }
}

impl Clone for Val {
    fn clone(&self) -> Self {
        Val::new(self.tag, &self.tally)
    }
}

impl PartialEq for Val {
    fn eq(&self, other: &Self) -> bool {
        self.tag == other.tag
    }
}

impl Drop for Val {
    fn drop(&mut self) {
        self.tally.dropped.fetch_add(1, Relaxed);
    }
}

/// Runs `f` on another thread and fails if it does not finish within
/// `limit`: a loop in the code under test fails the test instead of hanging
/// it. A panic of `f` is resumed here.
fn bounded<R: Send + 'static>(limit: Duration, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel::<()>();
    let worker = thread::spawn(move || {
        let r = f();
        drop(tx);
        r
    });
    match rx.recv_timeout(limit) {
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("did not finish within {limit:?}: a loop?"),
        _ => worker
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p)),
    }
}

/// The watchdog limit: generous, since Miri is slow.
fn watchdog() -> Duration {
    Duration::from_secs(if cfg!(miri) { 3600 } else { 60 })
}

// ---------------------------------------------------------------------------
// A key whose `Ord` panics on demand
// ---------------------------------------------------------------------------

thread_local! {
    /// Comparisons left on this thread before a `Touchy` key panics; `None`
    /// means never. Thread-local, so that only the thread that armed it
    /// (and no concurrent reader, nor another test) sees the panic.
    static FUSE: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Arms the fuse: the `n`th comparison from now (0-based) panics.
fn arm(n: u64) {
    FUSE.with(|f| f.set(Some(n)));
}

fn disarm() {
    FUSE.with(|f| f.set(None));
}

const FUSE_MESSAGE: &str = "Touchy::cmp: the fuse burnt out";

/// A key whose comparisons panic when this thread's fuse burns out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Touchy(u64);

impl Ord for Touchy {
    fn cmp(&self, other: &Self) -> Ordering {
        FUSE.with(|f| match f.get() {
            Some(0) => {
                f.set(None);
                panic!("{FUSE_MESSAGE}");
            }
            Some(n) => f.set(Some(n - 1)),
            None => {}
        });
        self.0.cmp(&other.0)
    }
}

impl PartialOrd for Touchy {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

type TouchyTree = LatchTree<Touchy, Val>;

/// The tree's contents as plain pairs (the fuse must be disarmed).
fn contents(tree: &TouchyTree) -> Vec<(u64, u64)> {
    tree.to_vec()
        .into_iter()
        .map(|(k, v)| (k.0, v.tag))
        .collect()
}

/// Asserts that a failed write left `tree` exactly as `before`.
fn assert_unchanged(tree: &TouchyTree, before: &[(u64, u64)], writes_before: u64, what: &str) {
    disarm();
    assert_eq!(
        contents(tree),
        before,
        "{what}: a panicking write changed the tree"
    );
    assert_eq!(tree.len(), before.len(), "{what}: len changed");
    assert_eq!(
        tree.stats().writes,
        writes_before,
        "{what}: a rolled-back write was counted"
    );
    tree.check_invariants()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
}

fn expect_fuse_panic(r: std::thread::Result<impl Sized>, what: &str) -> bool {
    match r {
        Ok(_) => false,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| p.downcast_ref::<&str>().copied())
                .unwrap_or("");
            assert!(
                msg.contains(FUSE_MESSAGE) || msg.contains("closure"),
                "{what}: unexpected panic {msg:?}"
            );
            true
        }
    }
}

fn touchy_tree(n: u64, tally: &Arc<Tally>, collector: &Collector) -> TouchyTree {
    let tree = LatchTree::with_collector(collector.clone());
    for k in 0..n {
        tree.insert(Touchy(2 * k), Val::new(k, tally));
    }
    tree
}

#[test]
#[cfg_attr(
    not(feature = "std"),
    ignore = "without std a panic inside a write or a drop aborts (unwind.rs)"
)]
fn panic_in_ord_during_insert_or_remove_leaves_the_tree_unchanged() {
    let tally = Arc::new(Tally::default());
    let collector = Collector::new();
    let n = size(64, 12);
    let tree = touchy_tree(n, &tally, &collector);
    // For each key (new, existing, absent) and each fuse length: panic in
    // the search, or succeed once the fuse is long enough.
    for key in [2 * n / 2 + 1, 2 * (n / 3), 2 * n + 7] {
        for op in ["insert", "remove"] {
            let mut panicked = 0;
            for fuse in 0.. {
                let before = contents(&tree);
                let writes = tree.stats().writes;
                arm(fuse);
                let r = catch_unwind(AssertUnwindSafe(|| match op {
                    "insert" => tree.insert(Touchy(key), Val::new(1000 + fuse, &tally)),
                    _ => tree.remove(&Touchy(key)),
                }));
                disarm();
                if expect_fuse_panic(r, op) {
                    assert_unchanged(&tree, &before, writes, op);
                    panicked += 1;
                    continue;
                }
                // It went through: the tree works, and is restored.
                tree.check_invariants().unwrap();
                let original = (key % 2 == 0 && key < 2 * n).then_some(key / 2);
                if op == "insert" {
                    assert_eq!(
                        tree.get(&Touchy(key), &tree.pin()).map(|v| v.tag),
                        Some(1000 + fuse)
                    );
                    match original {
                        Some(tag) => assert!(!tree.insert(Touchy(key), Val::new(tag, &tally))),
                        None => assert!(tree.remove(&Touchy(key))),
                    }
                } else if let Some(tag) = original {
                    assert!(tree.insert(Touchy(key), Val::new(tag, &tally)));
                }
                break;
            }
            assert!(panicked >= 2, "{op} of {key} never panicked");
        }
    }
    assert_eq!(
        contents(&tree),
        (0..n).map(|k| (2 * k, k)).collect::<Vec<_>>()
    );
    drop(tree);
    drop(collector);
    tally.assert_balanced();
}

#[test]
fn panic_in_ord_during_lookup_leaves_the_tree_usable() {
    let tally = Arc::new(Tally::default());
    let collector = Collector::new();
    let tree = touchy_tree(size(64, 12), &tally, &collector);
    let before = contents(&tree);
    let handle = collector.register();
    // A search for an absent key compares all the way down: at least twice.
    for fuse in 0..2 {
        let guard = handle.pin();
        arm(fuse);
        assert!(expect_fuse_panic(
            catch_unwind(AssertUnwindSafe(|| tree
                .get(&Touchy(7), &guard)
                .map(|v| v.tag))),
            "get"
        ));
        arm(fuse);
        let r = catch_unwind(AssertUnwindSafe(|| {
            tree.upper_bound(Bound::Excluded(&Touchy(7)), &guard)
                .map(|(k, _)| k.0)
        }));
        assert!(expect_fuse_panic(r, "upper_bound"));
        disarm();
        assert_eq!(tree.get(&Touchy(6), &guard).map(|v| v.tag), Some(3));
    }
    assert_unchanged(&tree, &before, tree.stats().writes, "lookups");
    drop((tree, handle, collector));
    tally.assert_balanced();
}

/// One operation of a random batch.
#[derive(Clone, Copy, Debug)]
enum Op {
    Insert(u64, u64),
    Remove(u64),
    Contains(u64),
    /// The closure itself panics here.
    Panic,
}

fn apply(b: &mut Batch<'_, Touchy, Val>, op: Op, tally: &Arc<Tally>) {
    match op {
        Op::Insert(k, tag) => {
            b.insert(Touchy(k), Val::new(tag, tally));
        }
        Op::Remove(k) => {
            b.remove(&Touchy(k));
        }
        Op::Contains(k) => {
            b.contains_key(&Touchy(k));
        }
        Op::Panic => panic!("the batch closure panicked"),
    }
}

#[test]
#[cfg_attr(
    not(feature = "std"),
    ignore = "without std a panic inside a write or a drop aborts (unwind.rs)"
)]
fn panic_mid_batch_rolls_back_every_applied_change() {
    let tally = Arc::new(Tally::default());
    let collector = Collector::new();
    let tree: TouchyTree = LatchTree::with_collector(collector.clone());
    let mut model: BTreeMap<u64, u64> = BTreeMap::new();
    let mut rng = Rng::new(42);
    let keys = size(96, 24);
    let (mut committed, mut rolled_back_mid_batch, mut closure_panics) = (0, 0, 0);
    for round in 0..size(400, 40) {
        let ops: Vec<Op> = (0..1 + rng.below(8))
            .map(|_| match rng.below(20) {
                0..9 => Op::Insert(rng.below(keys), round),
                9..16 => Op::Remove(rng.below(keys)),
                16..19 => Op::Contains(rng.below(keys)),
                _ => Op::Panic,
            })
            .collect();
        let before = contents(&tree);
        let writes = tree.stats().writes;
        let applied = Cell::new(0);
        // Sometimes no fuse; otherwise one anywhere within the batch.
        let fuse = (rng.below(4) != 0).then(|| rng.below(ops.len() as u64 * 10));
        let r = catch_unwind(AssertUnwindSafe(|| {
            tree.write(|b| {
                if let Some(f) = fuse {
                    arm(f);
                }
                for &op in &ops {
                    apply(b, op, &tally);
                    applied.set(applied.get() + 1);
                }
            })
        }));
        disarm();
        if expect_fuse_panic(r, "batch") {
            assert_unchanged(
                &tree,
                &before,
                writes,
                &format!("round {round}, ops {ops:?}"),
            );
            if applied.get() > 0 {
                rolled_back_mid_batch += 1;
            }
            if ops
                .get(applied.get())
                .is_some_and(|op| matches!(op, Op::Panic))
            {
                closure_panics += 1;
            }
        } else {
            for op in ops {
                match op {
                    Op::Insert(k, tag) => {
                        model.insert(k, tag);
                    }
                    Op::Remove(k) => {
                        model.remove(&k);
                    }
                    Op::Contains(_) | Op::Panic => {}
                }
            }
            committed += 1;
            assert_eq!(
                contents(&tree),
                model.iter().map(|(&k, &v)| (k, v)).collect::<Vec<_>>()
            );
            tree.check_invariants().unwrap();
        }
    }
    println!(
        "{committed} committed, {rolled_back_mid_batch} rolled back mid-batch ({closure_panics} by the closure)"
    );
    assert!(committed > 0 && rolled_back_mid_batch > 0 && closure_panics > 0);
    // Later writes work.
    assert!(tree.insert(Touchy(keys + 1), Val::new(0, &tally)));
    tree.check_invariants().unwrap();
    drop(tree);
    drop(collector);
    tally.assert_balanced();
}

#[test]
#[cfg_attr(
    not(feature = "std"),
    ignore = "without std a panic inside a write or a drop aborts (unwind.rs)"
)]
fn readers_never_see_any_part_of_a_rolled_back_batch() {
    // Keys: 0..PAIRS*2 are pairs (2i, 2i+1) inserted and removed together
    // by successful batches; STABLE is always present with tag 1; keys from
    // GHOST on are only ever inserted by batches that panic.
    const STABLE: u64 = 10_000;
    const GHOST: u64 = 20_000;
    let pairs = size(32, 6);
    let rounds = size(3000, 60);
    let tally = Arc::new(Tally::default());
    let collector = Collector::new();
    let tree: TouchyTree = LatchTree::with_collector(collector.clone());
    tree.insert(Touchy(STABLE), Val::new(1, &tally));
    let done = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    thread::scope(|s| {
        for r in 0..2 {
            let (tree, collector, done, reads) = (&tree, &collector, &done, &reads);
            s.spawn(move || {
                let handle = collector.register();
                let mut rng = Rng::new(r);
                let mut n = 0u64;
                while !done.load(Acquire) || n < 8 {
                    let g = handle.pin();
                    let ghost = GHOST + rng.below(pairs);
                    assert!(tree.get(&Touchy(ghost), &g).is_none(), "saw ghost {ghost}");
                    assert_eq!(
                        tree.get(&Touchy(STABLE), &g).map(|v| v.tag),
                        Some(1),
                        "stable key changed"
                    );
                    let lb = tree.lower_bound(Bound::Excluded(&Touchy(STABLE)), &g);
                    assert!(
                        lb.is_none(),
                        "saw {:?} above the stable key",
                        lb.map(|(k, _)| k)
                    );
                    if n.is_multiple_of(4) {
                        let snap = tree.snapshot(&g);
                        let keys: Vec<u64> = snap.iter().map(|(k, _)| k.0).collect();
                        assert_eq!(keys.last(), Some(&STABLE), "snapshot {keys:?}");
                        for w in keys[..keys.len() - 1].chunks(2) {
                            assert!(
                                w.len() == 2 && w[0] % 2 == 0 && w[1] == w[0] + 1,
                                "torn pair in {keys:?}"
                            );
                        }
                    }
                    n += 1;
                }
                reads.fetch_add(n, Relaxed);
            });
        }
        let _stop = StopOnDrop(&done);
        let mut rng = Rng::new(99);
        let mut present = vec![false; pairs as usize];
        let mut rolled_back = 0;
        for round in 0..rounds {
            let i = rng.below(pairs);
            let (a, b) = (Touchy(2 * i), Touchy(2 * i + 1));
            if rng.below(2) == 0 {
                // Successful: toggle a pair.
                let was = present[i as usize];
                tree.write(|batch| {
                    if was {
                        assert!(batch.remove(&a) && batch.remove(&b));
                    } else {
                        assert!(
                            batch.insert(a, Val::new(round, &tally))
                                && batch.insert(b, Val::new(round, &tally))
                        );
                    }
                });
                present[i as usize] = !was;
            } else {
                // Doomed: ghosts, half a pair, the stable key removed and
                // replaced, then a panic from `Ord` or from the closure.
                let by_closure = rng.below(2) == 0;
                let r = catch_unwind(AssertUnwindSafe(|| {
                    tree.write(|batch| {
                        batch.insert(Touchy(GHOST + i), Val::new(round, &tally));
                        batch.remove(&Touchy(STABLE));
                        batch.insert(Touchy(STABLE), Val::new(666, &tally));
                        if present[i as usize] {
                            batch.remove(&a);
                        } else {
                            batch.insert(a, Val::new(round, &tally));
                        }
                        if by_closure {
                            panic!("the batch closure panicked");
                        }
                        arm(0);
                        batch.insert(b, Val::new(round, &tally));
                    })
                }));
                disarm();
                assert!(
                    expect_fuse_panic(r, "doomed batch"),
                    "a doomed batch did not panic"
                );
                rolled_back += 1;
            }
        }
        assert!(rolled_back > 0);
    });
    assert!(reads.load(Relaxed) > 0);
    tree.check_invariants().unwrap();
    drop(tree);
    drop(collector);
    tally.assert_balanced();
}

/// Sets the flag when dropped, so that readers stop even if the writer
/// panics.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Release);
    }
}

#[test]
fn reads_inside_a_write_see_the_old_version_without_waiting() {
    let collector = Collector::new();
    let mut tree = LatchTree::with_collector(collector.clone());
    tree.extend((0..16).map(|k| (k, k)));
    let handle = collector.register();
    let guard = handle.pin();
    tree.write(|b| {
        b.insert(100, 100);
        b.remove(&3);
        b.insert(4, 40);
        // The same thread reads the tree mid-write: the old version, at once.
        assert_eq!(tree.get(&100, &guard), None);
        assert_eq!(tree.get(&3, &guard), Some(&3));
        assert_eq!(tree.get(&4, &guard), Some(&4));
        assert_eq!(tree.len(), 16);
        assert_eq!(tree.last_key_value(&guard), Some((&15, &15)));
        assert_eq!(tree.snapshot(&guard).len(), 16);
        assert!(b.contains_key(&100) && !b.contains_key(&3));
    });
    assert_eq!(tree.get(&100, &guard), Some(&100));
    assert_eq!(tree.get(&3, &guard), None);
    assert_eq!(tree.get(&4, &guard), Some(&40));
    tree.check_invariants().unwrap();
}

// ---------------------------------------------------------------------------
// Keys whose `Ord` lies
// ---------------------------------------------------------------------------

thread_local! {
    static CHAOS: Cell<u64> = const { Cell::new(0x1234_5678_9ABC_DEF1) };
}

/// A key whose comparisons are random: not even consistent with itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Chaos(u64);

impl Ord for Chaos {
    fn cmp(&self, _other: &Self) -> Ordering {
        CHAOS.with(|c| {
            let mut x = c.get();
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            c.set(x);
            [Ordering::Less, Ordering::Equal, Ordering::Greater][(x % 3) as usize]
        })
    }
}

impl PartialOrd for Chaos {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A key ordered like rock-paper-scissors by `self.0 % 3`: antisymmetric but not
/// transitive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rps(u64);

impl Ord for Rps {
    fn cmp(&self, other: &Self) -> Ordering {
        let (a, b) = (self.0 % 3, other.0 % 3);
        if a == b {
            self.0.cmp(&other.0)
        } else if (a + 1) % 3 == b {
            Ordering::Less
        } else {
            Ordering::Greater
        }
    }
}

impl PartialOrd for Rps {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Runs every operation with keys of a lying `Ord`, with a concurrent
/// reader; everything must terminate, the structure must stay a valid tree
/// of `len` nodes, and every value must be dropped exactly once.
fn lying_ord_run<K>(make: fn(u64) -> K, seed: u64)
where
    K: Ord + Send + Sync + Clone + std::fmt::Debug + 'static,
{
    let tally = Arc::new(Tally::default());
    let collector = Collector::new();
    let tree = Arc::new(LatchTree::<K, Val>::with_collector(collector.clone()));
    let ops = size(2000, 80);
    let t = Arc::clone(&tree);
    let c = collector.clone();
    let tal = Arc::clone(&tally);
    bounded(watchdog(), move || {
        let done = Arc::new(AtomicBool::new(false));
        let reader = {
            let (t, c, done) = (Arc::clone(&t), c.clone(), Arc::clone(&done));
            thread::spawn(move || {
                let handle = c.register();
                let mut rng = Rng::new(seed + 1);
                let mut n = 0;
                while !done.load(Acquire) || n < 4 {
                    let g = handle.pin();
                    let k = make(rng.below(64));
                    let _ = t.get(&k, &g).map(|v| v.tag);
                    let _ = t.upper_bound(Bound::Included(&k), &g);
                    let _ = t.lower_bound(Bound::Excluded(&k), &g);
                    let _ = (t.first_key_value(&g), t.last_key_value(&g));
                    let len = t.snapshot(&g).len();
                    assert!(len <= 64 * 2, "snapshot of {len} entries");
                    n += 1;
                }
            })
        };
        let _stop = StopOnDrop(&done);
        let mut rng = Rng::new(seed);
        for i in 0..ops {
            let k = make(rng.below(64));
            match rng.below(5) {
                0 | 1 => {
                    t.insert(k, Val::new(i, &tal));
                }
                2 => {
                    t.remove(&k);
                }
                3 => t.write(|b| {
                    for _ in 0..rng.below(6) {
                        let k = make(rng.below(64));
                        if rng.below(2) == 0 {
                            b.insert(k, Val::new(i, &tal));
                        } else {
                            b.remove(&k);
                        }
                    }
                }),
                _ => {
                    let g = t.pin();
                    let _ = t.get(&k, &g);
                    // The structure is intact: a walk sees exactly `len` nodes.
                    assert_eq!(t.snapshot(&g).len(), t.len());
                }
            }
            // With a lying `Ord` the order check may fail; it must not crash.
            if i % 64 == 0 {
                let _ = t.check_invariants();
            }
        }
        drop(_stop);
        reader.join().expect("a reader crashed");
        let g = t.pin();
        assert_eq!(t.snapshot(&g).len(), t.len());
    });
    // Every node is still reachable: dropping the tree and the collector
    // drops every value exactly once.
    match Arc::try_unwrap(tree) {
        Ok(tree) => drop(tree),
        Err(_) => panic!("the worker still holds the tree"),
    }
    drop(collector);
    tally.assert_balanced();
}

#[test]
fn random_ord_neither_crashes_nor_loops() {
    lying_ord_run(Chaos, 5);
}

#[test]
fn non_transitive_ord_neither_crashes_nor_loops() {
    lying_ord_run(Rps, 6);
}

// ---------------------------------------------------------------------------
// Values whose `Drop` panics
// ---------------------------------------------------------------------------

const BOMB_MESSAGE: &str = "Bomb::drop went off";

/// A counted value whose `Drop` panics when armed.
#[derive(Debug)]
struct Bomb {
    armed: bool,
    id: u64,
    _val: Val,
}

impl Bomb {
    fn new(id: u64, armed: bool, tally: &Arc<Tally>) -> Self {
        Bomb {
            armed,
            id,
            _val: Val::new(id, tally),
        }
    }
}

impl Drop for Bomb {
    fn drop(&mut self) {
        // `_val` is still dropped (counted) while this panic unwinds.
        if self.armed {
            panic!("{BOMB_MESSAGE} (bomb {})", self.id);
        }
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

#[test]
#[cfg_attr(
    not(feature = "std"),
    ignore = "without std a panic inside a write or a drop aborts (unwind.rs)"
)]
fn panicking_drop_of_a_removed_or_replaced_value_is_contained() {
    let tally = Arc::new(Tally::default());
    let collector = Collector::new();
    let tree: LatchTree<u64, Bomb> = LatchTree::with_collector(collector.clone());
    let n = size(64, 12);
    for k in 0..n {
        tree.insert(k, Bomb::new(k, k % 2 == 1, &tally));
    }
    let done = AtomicBool::new(false);
    thread::scope(|s| {
        // Readers pin and flush: deferred drops (and their panics) may run
        // on their threads too.
        for _ in 0..2 {
            let (tree, collector, done) = (&tree, &collector, &done);
            s.spawn(move || {
                let handle = collector.register();
                let mut rounds = 0;
                // Under Miri a spinning reader takes most of the
                // interpreter's time (four minutes of it here): a few
                // dozen rounds still overlap the writes.
                let most = size(u64::MAX, 24);
                while (!done.load(Acquire) || rounds < 4) && rounds < most {
                    let g = handle.pin();
                    assert_eq!(tree.get(&0, &g).map(|b| b.id), Some(0));
                    g.flush();
                    rounds += 1;
                }
            });
        }
        let _stop = StopOnDrop(&done);
        let handle = collector.register();
        for k in (1..n).step_by(2) {
            // Remove, replace, and remove in a batch: the armed bomb goes off
            // later, inside some thread's pin or flush, and is contained.
            match k % 3 {
                0 => assert!(tree.remove(&k)),
                1 => assert!(!tree.insert(k, Bomb::new(k, false, &tally))),
                _ => assert!(tree.write(|b| b.remove(&k))),
            }
            handle.pin().flush();
        }
        for _ in 0..size(64, 8) {
            handle.pin().flush();
        }
    });
    assert_eq!(tree.get(&0, &tree.pin()).map(|b| b.id), Some(0));
    tree.check_invariants().unwrap();
    // What is left is unarmed: dropping the tree does not panic; dropping
    // the collector runs the remaining deferred drops, panics contained.
    drop(tree);
    drop(collector);
    tally.assert_balanced();
}

#[test]
#[cfg_attr(
    not(feature = "std"),
    ignore = "without std a panic inside a write or a drop aborts (unwind.rs)"
)]
fn dropping_a_tree_drops_every_value_once_then_resumes_the_panic() {
    let tally = Arc::new(Tally::default());
    let collector = Collector::new();
    let n = size(100, 16);
    let tree: LatchTree<u64, Bomb> = LatchTree::with_collector(collector.clone());
    for k in 0..n {
        // Keys 3 and 7 (in key order: 3 first) are armed.
        tree.insert(k, Bomb::new(k, k == 3 || k == 7, &tally));
    }
    let r = catch_unwind(AssertUnwindSafe(move || drop(tree)));
    let msg = panic_message(&*r.expect_err("dropping the tree should resume the bomb's panic"));
    assert!(
        msg.contains(BOMB_MESSAGE) && msg.contains("bomb 3"),
        "{msg:?}"
    );
    assert_eq!(
        tally.dropped.load(Relaxed),
        n as usize,
        "every value dropped exactly once"
    );
    drop(collector);
    tally.assert_balanced();
}

#[test]
#[cfg_attr(
    not(feature = "std"),
    ignore = "without std a panic inside a write or a drop aborts (unwind.rs)"
)]
fn addr_index_contains_panicking_module_drops() {
    let tally = Arc::new(Tally::default());
    // Tiny layout thresholds: the rolled-back writes migrate too.
    let index: AddrIndex<Bomb> = AddrIndex::with_policy(latchtree::LayoutPolicy::small(2));
    let n = size(32, 6);
    let ids: Vec<_> = (0..n)
        .map(|k| {
            index
                .insert_module(
                    [
                        k * 0x100..k * 0x100 + 0x10,
                        k * 0x100 + 0x80..k * 0x100 + 0x90,
                    ],
                    Bomb::new(k, true, &tally),
                )
                .unwrap()
        })
        .collect();
    // Removing armed modules. The value's last reference is the caller's
    // `Removed` (its drop panics in the caller's frame: caught here) or the
    // index's, dropped later by a write or flush, where the panic is
    // contained.
    for &id in ids.iter().step_by(2) {
        let removed = index.remove(id).unwrap();
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| drop(removed))) {
            assert!(panic_message(&*p).contains(BOMB_MESSAGE));
        }
    }
    let removed = ids.len().div_ceil(2);
    for _ in 0..1_000_000 {
        if tally.dropped.load(Relaxed) >= removed {
            break;
        }
        index.flush();
        thread::yield_now();
    }
    assert_eq!(
        tally.dropped.load(Relaxed),
        removed,
        "removed modules were not dropped"
    );
    assert_eq!(index.lookup(0x105).map(|h| h.id()), Some(ids[1]));
    index.check_invariants().unwrap();
    // A rejected module whose value panics when dropped: the value comes
    // back (never dropped under the writer lock), dropping it panics in the
    // caller's frame, and the index is unchanged and still works.
    let err = index
        .insert(0x105..0x106, Bomb::new(999, true, &tally))
        .unwrap_err();
    assert!(matches!(err.error(), AddrIndexError::Overlap { .. }));
    let r = catch_unwind(AssertUnwindSafe(|| drop(err)));
    assert!(panic_message(&*r.expect_err("the bomb went off")).contains(BOMB_MESSAGE));
    assert_eq!(index.module_count(), ids.len() - removed);
    index.check_invariants().unwrap();
    let fresh = index
        .insert(0x20..0x30, Bomb::new(1000, false, &tally))
        .unwrap();
    assert_eq!(index.lookup(0x25).map(|h| h.id()), Some(fresh));
    // Dropping the index drops every remaining module, then resumes the
    // first panic.
    let left = tally.created.load(Relaxed) - tally.dropped.load(Relaxed);
    assert_eq!(left, ids.len() - removed + 1);
    let r = catch_unwind(AssertUnwindSafe(move || drop(index)));
    assert!(panic_message(&*r.expect_err("the remaining bombs went off")).contains(BOMB_MESSAGE));
    tally.flush_default_collector_until_balanced();
}

// ---------------------------------------------------------------------------
// Guards of the wrong collector
// ---------------------------------------------------------------------------

const WRONG_GUARD: &str = "the guard does not pin this tree's collector";

#[test]
#[should_panic(expected = "the guard does not pin this tree's collector")]
fn get_with_a_guard_of_another_collector_panics() {
    let tree = LatchTree::new();
    tree.insert(1, 1);
    let other = Collector::new();
    let handle = other.register();
    let guard = handle.pin();
    let _ = tree.get(&1, &guard);
}

#[test]
#[should_panic(expected = "the guard does not pin this tree's collector")]
fn default_guard_on_a_tree_with_its_own_collector_panics() {
    let tree = LatchTree::with_collector(Collector::new());
    tree.insert(1, 1);
    let _ = tree.get(&1, &latchtree::pin());
}

#[test]
fn every_guarded_read_checks_the_collector() {
    let mine = Collector::new();
    let theirs = Collector::new();
    let tree = LatchTree::with_collector(mine.clone());
    tree.insert(1, 1);
    let handle = theirs.register();
    let guard = handle.pin();
    let g = &guard;
    let reads: [(&str, &dyn Fn()); 6] = [
        ("get_key_value", &|| {
            let _ = tree.get_key_value(&1, g);
        }),
        ("upper_bound", &|| {
            let _ = tree.upper_bound(Bound::Included(&1), g);
        }),
        ("lower_bound", &|| {
            let _ = tree.lower_bound(Bound::Unbounded, g);
        }),
        ("first_key_value", &|| {
            let _ = tree.first_key_value(g);
        }),
        ("last_key_value", &|| {
            let _ = tree.last_key_value(g);
        }),
        ("snapshot", &|| {
            let _ = tree.snapshot(g);
        }),
    ];
    for (name, read) in reads {
        let r = catch_unwind(AssertUnwindSafe(read));
        let msg = panic_message(&*r.expect_err(name));
        assert!(msg.contains(WRONG_GUARD), "{name}: {msg:?}");
    }
    // The right collector's guard works.
    assert_eq!(tree.get(&1, &mine.register().pin()), Some(&1));
}

#[test]
#[should_panic(expected = "the guard does not pin this tree's collector")]
fn module_address_with_a_guard_of_another_collector_panics() {
    let index = AddrIndex::new();
    index.insert(0x1000..0x2000, "m").unwrap();
    let other = Collector::new();
    let handle = other.register();
    let _ = index.module_address(0x1800, &handle.pin());
}

#[test]
#[should_panic(expected = "the guard does not pin this tree's collector")]
fn addr_index_get_with_a_guard_of_another_collector_panics() {
    let index = AddrIndex::new();
    let id = index.insert(0x1000..0x2000, "m").unwrap();
    let other = Collector::new();
    let handle = other.register();
    let _ = index.get(id, &handle.pin());
}

// ---------------------------------------------------------------------------
// A value whose `Drop` writes to the same index
// ---------------------------------------------------------------------------

/// A module value whose `Drop` unregisters a companion module of the same
/// index (say, a JIT code object that owns a trampoline registered apart).
struct Companion(Option<latchtree::ModuleId>);

static COMPANIONS: AddrIndex<Companion> = AddrIndex::new();

impl Drop for Companion {
    fn drop(&mut self) {
        if let Some(id) = self.0 {
            assert!(
                COMPANIONS.remove(id).is_some(),
                "companion {id} was not registered"
            );
        }
    }
}

#[test]
/// Regression: `insert_module` used to pin inside the writer lock, where a
/// deferred module `Drop` writing to the same index hit the re-entrancy check.
fn module_value_drop_that_writes_to_the_same_index_takes_effect() {
    // The drop of a removed module runs later, after the lock of a later
    // write or flush of the index: the write it makes must happen.
    let n = size(3000, 60);
    bounded(watchdog(), move || {
        for i in 0..n {
            let base = i * 0x100;
            let companion = COMPANIONS
                .insert(
                    0x1000_0000 + base..0x1000_0000 + base + 0x10,
                    Companion(None),
                )
                .unwrap();
            let main = COMPANIONS
                .insert(base..base + 0x10, Companion(Some(companion)))
                .unwrap();
            assert!(COMPANIONS.remove(main).is_some());
        }
        for _ in 0..100_000 {
            if COMPANIONS.module_count() == 0 {
                break;
            }
            COMPANIONS.flush();
            thread::yield_now();
        }
        assert_eq!(
            COMPANIONS.module_count(),
            0,
            "companions left registered: a value's Drop lost its write"
        );
        COMPANIONS.check_invariants().unwrap();
    });
}

/// Counts the `Ord` calls on keys whose `Ord` says "greater" every time.
static ALWAYS_GREATER_CALLS: AtomicUsize = AtomicUsize::new(0);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct AlwaysGreater(u64);

impl Ord for AlwaysGreater {
    fn cmp(&self, _: &Self) -> Ordering {
        ALWAYS_GREATER_CALLS.fetch_add(1, Relaxed);
        Ordering::Greater
    }
}

impl PartialOrd for AlwaysGreater {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// `BTreeMap`'s iteration never calls `Ord`; a walk of an unbounded end of
/// a `LatchTree` calls none either, so an `Ord` that lies cannot hide
/// entries from it. (It compared the first and last keys to decide that
/// the range was empty, and yielded nothing where `len()` was 2.)
#[test]
fn unbounded_iteration_calls_no_ord() {
    let tree = LatchTree::new();
    assert!(tree.insert(AlwaysGreater(1), 'a'));
    assert!(tree.insert(AlwaysGreater(2), 'b'));
    assert_eq!(tree.len(), 2);
    let mut std = std::collections::BTreeMap::new();
    std.insert(AlwaysGreater(1), 'a');
    std.insert(AlwaysGreater(2), 'b');
    let g = latchtree::pin();
    ALWAYS_GREATER_CALLS.store(0, Relaxed);
    let ours: Vec<_> = tree.iter(&g).map(|(k, v)| (k.0, *v)).collect();
    let theirs: Vec<_> = std.iter().map(|(k, v)| (k.0, *v)).collect();
    assert_eq!(ours, theirs);
    assert_eq!(tree.keys(&g).rev().map(|k| k.0).collect::<Vec<_>>(), [2, 1]);
    assert_eq!(tree.values(&g).collect::<String>(), "ab");
    assert_eq!(tree.range::<AlwaysGreater, _>(.., &g).count(), 2);
    assert_eq!(
        ALWAYS_GREATER_CALLS.load(Relaxed),
        0,
        "an unbounded walk called Ord"
    );
}
