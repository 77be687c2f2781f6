//! Concurrent stress tests for both front-ends.
//!
//! Readers look up keys (addresses) that are known to be present and known
//! to be absent while a writer churns *other* keys with single inserts,
//! removes, replaces and atomic batches; every answer about a stable key must
//! be right, every value must be dropped exactly once, and a value must never
//! be dropped while a guard can still reach it.
//!
//! Sizes shrink under Miri. `long_stress` is `#[ignore]`d (about 25 s); run it
//! with `cargo test --release --test stress -- --ignored`.

use latchtree::{AddrIndex, AddrIndexError, Batch, Collector, LatchTree, LayoutPolicy, ModuleId};
use std::collections::{BTreeMap, HashMap};
use std::ops::{Bound, Range};
use std::sync::Arc;
use std::sync::atomic::{
    AtomicBool, AtomicU64, AtomicUsize,
    Ordering::{Acquire, Relaxed, Release},
};
use std::thread;
use std::time::{Duration, Instant};

mod common;
use common::Rng;

// ---------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------

/// How big a run is.
#[derive(Clone, Copy, Debug)]
struct Cfg {
    readers: usize,
    /// Stable entries (keys, or modules for the address index).
    stable: u64,
    /// The writer stops after this many operations...
    max_writes: u64,
    /// ...or after this long, whichever comes first.
    time: Duration,
    /// Each reader runs at least this many rounds, even if the writer is done.
    min_rounds: u64,
    /// Lookups per reader round (one guard per round).
    per_round: u64,
    /// A reader checks a full snapshot every this many rounds.
    snapshot_every: u64,
}

impl Cfg {
    /// The default run: a few hundred operations under Miri, about a second
    /// of churn otherwise.
    fn quick() -> Self {
        if cfg!(miri) {
            Cfg {
                readers: 2,
                stable: 8,
                max_writes: 60,
                time: Duration::from_secs(3600),
                min_rounds: 4,
                per_round: 3,
                snapshot_every: 4,
            }
        } else {
            Cfg {
                readers: 3,
                stable: 256,
                max_writes: 1_000_000,
                time: Duration::from_millis(1200),
                min_rounds: 200,
                per_round: 16,
                snapshot_every: 32,
            }
        }
    }

    /// The explicit long run.
    fn long() -> Self {
        Cfg {
            readers: 4,
            stable: 2048,
            max_writes: u64::MAX,
            time: Duration::from_secs(12),
            min_rounds: 1000,
            per_round: 16,
            snapshot_every: 32,
        }
    }
}

/// Sets the flag when dropped, so that readers stop even if the writer
/// panics.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Release);
    }
}

const MAGIC: u64 = 0x5AFE_C0DE_5AFE_C0DE;

/// Counts values created and dropped, and drops of already-dropped values.
#[derive(Default, Debug)]
struct Tally {
    created: AtomicUsize,
    dropped: AtomicUsize,
    dropped_twice: AtomicUsize,
}

impl Tally {
    fn assert_balanced(&self) {
        assert_eq!(
            self.dropped_twice.load(Relaxed),
            0,
            "a value was dropped twice"
        );
        assert_eq!(
            self.dropped.load(Relaxed),
            self.created.load(Relaxed),
            "drops != values created"
        );
    }

    /// Pins the default collector and flushes until every value created was
    /// dropped, for structures that retire through the default collector.
    fn wait_balanced_on_default_collector(&self) {
        let start = Instant::now();
        let mut rounds = 0u64;
        while self.dropped.load(Relaxed) < self.created.load(Relaxed) {
            assert!(
                start.elapsed() < Duration::from_secs(10) && rounds < 1_000_000,
                "values never dropped: created {}, dropped {} after {rounds} flushes",
                self.created.load(Relaxed),
                self.dropped.load(Relaxed),
            );
            latchtree::pin().flush();
            thread::yield_now();
            rounds += 1;
        }
        self.assert_balanced();
    }
}

/// The canary of a value: `MAGIC` while alive, 0 once dropped. Reading it
/// through a reference obtained under a guard checks that the guard kept the
/// value alive.
struct Canary {
    word: AtomicU64,
    tally: Arc<Tally>,
}

impl Canary {
    fn new(tally: &Arc<Tally>) -> Self {
        tally.created.fetch_add(1, Relaxed);
        Canary {
            word: AtomicU64::new(MAGIC),
            tally: Arc::clone(tally),
        }
    }

    fn assert_alive(&self, what: &dyn std::fmt::Display) {
        assert_eq!(
            self.word.load(Relaxed),
            MAGIC,
            "{what} was read after it was dropped"
        );
    }
}

impl Drop for Canary {
    fn drop(&mut self) {
        if self.word.swap(0, Relaxed) != MAGIC {
            self.tally.dropped_twice.fetch_add(1, Relaxed);
        }
        self.tally.dropped.fetch_add(1, Relaxed);
    }
}

// ---------------------------------------------------------------------------
// LatchTree
// ---------------------------------------------------------------------------
//
// Key layout, for `s` stable keys (zones `1..=s`):
// * `4i` (i in 1..=s): stable, inserted before the readers start with
//   generation 0, never touched again;
// * `4i + 1`, and 0..4: never inserted;
// * `4i + 2`, `4i + 3` (i in 1..s): churned. In odd zones each key changes
//   alone (insert, remove, replace); in even zones both change together, in
//   one batch, with the same generation, so a consistent snapshot holds both
//   or neither.

/// A tree value: the key it belongs to, a generation, and a canary.
struct Val {
    key: u64,
    version: u64,
    canary: Canary,
}

impl Val {
    fn new(key: u64, version: u64, tally: &Arc<Tally>) -> Self {
        Val {
            key,
            version,
            canary: Canary::new(tally),
        }
    }

    /// Checks that the value is alive and belongs to `key`.
    fn check(&self, key: u64) {
        self.canary
            .assert_alive(&format_args!("the value of key {key}"));
        assert_eq!(
            self.key, key,
            "key {key} maps to the value of key {}",
            self.key
        );
    }
}

type Tree = LatchTree<u64, Val>;

fn is_paired_zone(zone: u64) -> bool {
    zone.is_multiple_of(2)
}

/// Checks an answer that must be one of `allowed` (or `None` if `allowed` is
/// empty), with a value that belongs to it.
fn expect_one_of(got: Option<(&u64, &Val)>, allowed: &[u64], what: &str) {
    match got {
        None => assert!(
            allowed.is_empty(),
            "{what}: got None, expected one of {allowed:?}"
        ),
        Some((&k, v)) => {
            assert!(
                allowed.contains(&k),
                "{what}: got {k}, expected one of {allowed:?}"
            );
            v.check(k);
            if k % 4 == 0 {
                assert_eq!(v.version, 0, "{what}: stable key {k} has a new generation");
            }
        }
    }
}

/// Checks a consistent snapshot: sorted, every stable key with its original
/// value, no never-inserted key, and both keys of a paired zone or neither.
fn check_tree_snapshot(snap: &[(&u64, &Val)], s: u64) {
    for w in snap.windows(2) {
        assert!(
            w[0].0 < w[1].0,
            "snapshot out of order: {} then {}",
            w[0].0,
            w[1].0
        );
    }
    let mut stable = 0;
    for (idx, &(&k, v)) in snap.iter().enumerate() {
        v.check(k);
        let zone = k / 4;
        match k % 4 {
            0 => {
                assert!(
                    (1..=s).contains(&zone),
                    "snapshot holds never-inserted key {k}"
                );
                assert_eq!(v.version, 0, "stable key {k} changed");
                stable += 1;
            }
            1 => panic!("snapshot holds never-inserted key {k}"),
            r => {
                assert!(
                    (1..s).contains(&zone),
                    "snapshot holds never-inserted key {k}"
                );
                if is_paired_zone(zone) {
                    // Both halves of a pair, adjacent, with one generation.
                    let partner = if r == 2 {
                        snap.get(idx + 1)
                    } else {
                        idx.checked_sub(1).map(|i| &snap[i])
                    };
                    let partner_key = if r == 2 { k + 1 } else { k - 1 };
                    match partner {
                        Some(&(&pk, pv)) if pk == partner_key => {
                            assert_eq!(pv.version, v.version, "pair {k}/{pk} mixes two batches");
                        }
                        _ => panic!("snapshot holds {k} without {partner_key}: a torn batch"),
                    }
                }
            }
        }
    }
    assert_eq!(stable, s, "snapshot lacks stable keys");
}

/// One reader: random point queries about stable and never-inserted keys.
/// Returns the number of rounds run.
fn tree_reader(tree: &Tree, collector: &Collector, cfg: Cfg, seed: u64, done: &AtomicBool) -> u64 {
    let handle = collector.register();
    let s = cfg.stable;
    let mut rng = Rng::new(seed);
    let mut rounds = 0u64;
    loop {
        let finished = done.load(Acquire);
        // Mostly a long-lived handle, sometimes the tree's own `pin`.
        let guard = if rng.chance(10) {
            tree.pin()
        } else {
            handle.pin()
        };
        let g = &guard;
        for _ in 0..cfg.per_round {
            let i = 1 + rng.below(s);
            let k = 4 * i;
            expect_one_of(tree.get_key_value(&k, g), &[k], "get_key_value(stable)");
            let v = tree.get(&k, g).expect("a stable key is missing");
            v.check(k);
            assert!(
                tree.get(&(k + 1), g).is_none(),
                "found never-inserted {}",
                k + 1
            );
            assert!(
                tree.get(&(k - 3), g).is_none(),
                "found never-inserted {}",
                k - 3
            );
            expect_one_of(
                tree.upper_bound(Bound::Included(&(k + 1)), g),
                &[k],
                "upper_bound(<= 4i+1)",
            );
            let below: &[u64] = if i == 1 { &[] } else { &[k - 1, k - 2, k - 4] };
            expect_one_of(
                tree.upper_bound(Bound::Excluded(&k), g),
                below,
                "upper_bound(< 4i)",
            );
            let above: &[u64] = if i == s { &[] } else { &[k + 2, k + 3, k + 4] };
            expect_one_of(
                tree.lower_bound(Bound::Excluded(&k), g),
                above,
                "lower_bound(> 4i)",
            );
            let at_or_above: &[u64] = if i == 1 { &[k] } else { &[k - 1, k] };
            expect_one_of(
                tree.lower_bound(Bound::Included(&(k - 1)), g),
                at_or_above,
                "lower_bound(>= 4i-1)",
            );
            let at_or_below: &[u64] = if i == s { &[k] } else { &[k + 3, k + 2, k] };
            expect_one_of(
                tree.upper_bound(Bound::Included(&(k + 3)), g),
                at_or_below,
                "upper_bound(<= 4i+3)",
            );
            let churned: &[u64] = if i == s { &[] } else { &[k + 2] };
            if let Some(e) = tree.get_key_value(&(k + 2), g) {
                expect_one_of(Some(e), churned, "get_key_value(churned)");
            }
        }
        expect_one_of(tree.first_key_value(g), &[4], "first_key_value");
        expect_one_of(tree.last_key_value(g), &[4 * s], "last_key_value");
        assert!(tree.get(&0, g).is_none() && tree.get(&(4 * s + 4), g).is_none());
        if rng.chance(5) {
            assert!(
                tree.contains_key(&(4 * (1 + rng.below(s)))),
                "contains_key(stable) is false"
            );
        }
        if rounds.is_multiple_of(cfg.snapshot_every) {
            check_tree_snapshot(&tree.snapshot(g), s);
            assert!(tree.len() >= s as usize);
        }
        drop(guard);
        rounds += 1;
        if finished && rounds >= cfg.min_rounds {
            return rounds;
        }
    }
}

/// An odd zone in `1..s` (keys change one at a time).
fn odd_zone(rng: &mut Rng, s: u64) -> u64 {
    1 + 2 * rng.below(s / 2)
}

/// An even zone in `1..s` (keys change in pairs).
fn even_zone(rng: &mut Rng, s: u64) -> u64 {
    2 + 2 * rng.below((s - 1) / 2)
}

/// One single-key change inside a batch, checked against the model.
fn batch_single_op(
    b: &mut Batch<'_, u64, Val>,
    model: &mut BTreeMap<u64, u64>,
    rng: &mut Rng,
    s: u64,
    version: u64,
    tally: &Arc<Tally>,
) {
    let k = 4 * odd_zone(rng, s) + 2 + rng.below(2);
    let present = model.contains_key(&k);
    assert_eq!(b.contains_key(&k), present, "Batch::contains_key({k})");
    if present && rng.chance(50) {
        assert!(b.remove(&k), "Batch::remove({k}) of a present key");
        model.remove(&k);
    } else {
        assert_eq!(
            b.insert(k, Val::new(k, version, tally)),
            !present,
            "Batch::insert({k})"
        );
        model.insert(k, version);
    }
}

/// Toggles one pair (both keys of an even zone) inside a batch.
fn batch_pair_op(
    b: &mut Batch<'_, u64, Val>,
    model: &mut BTreeMap<u64, u64>,
    rng: &mut Rng,
    s: u64,
    version: u64,
    tally: &Arc<Tally>,
) {
    let zone = even_zone(rng, s);
    let (a, c) = (4 * zone + 2, 4 * zone + 3);
    let present = model.contains_key(&a);
    assert_eq!(model.contains_key(&c), present);
    if present && rng.chance(50) {
        assert!(
            b.remove(&a) && b.remove(&c),
            "Batch::remove of a present pair"
        );
        model.remove(&a);
        model.remove(&c);
    } else {
        for k in [a, c] {
            assert_eq!(
                b.insert(k, Val::new(k, version, tally)),
                !present,
                "Batch::insert({k})"
            );
            model.insert(k, version);
        }
    }
}

/// The writer: churns the keys `4i+2` and `4i+3` and returns the model.
fn tree_writer(tree: &Tree, tally: &Arc<Tally>, cfg: Cfg, seed: u64) -> (BTreeMap<u64, u64>, u64) {
    let s = cfg.stable;
    let mut rng = Rng::new(seed);
    let mut model = BTreeMap::new();
    let start = Instant::now();
    let mut version = 0;
    while version < cfg.max_writes && start.elapsed() < cfg.time {
        version += 1;
        match rng.below(100) {
            // Single-key writes on odd zones.
            0..40 => {
                let k = 4 * odd_zone(&mut rng, s) + 2 + rng.below(2);
                let present = model.contains_key(&k);
                match (present, rng.below(3)) {
                    (true, 0) => {
                        assert!(tree.remove(&k), "remove({k}) of a present key");
                        model.remove(&k);
                    }
                    (false, 0) => assert!(!tree.remove(&k), "remove({k}) of an absent key"),
                    _ => {
                        // Insert, or replace when present.
                        assert_eq!(
                            tree.insert(k, Val::new(k, version, tally)),
                            !present,
                            "insert({k})"
                        );
                        model.insert(k, version);
                    }
                }
            }
            // A batch: one pair, a few single keys, and a key that is
            // inserted, replaced and removed again inside the batch.
            40..85 => tree.write(|b| {
                batch_pair_op(b, &mut model, &mut rng, s, version, tally);
                for _ in 0..rng.below(3) {
                    batch_single_op(b, &mut model, &mut rng, s, version, tally);
                }
                let t = 4 * odd_zone(&mut rng, s) + 2 + rng.below(2);
                if !model.contains_key(&t) {
                    assert!(b.insert(t, Val::new(t, version, tally)));
                    assert!(!b.insert(t, Val::new(t, version, tally)));
                    assert!(b.contains_key(&t) && b.remove(&t) && !b.contains_key(&t));
                }
                assert_eq!(b.len(), s as usize + model.len(), "Batch::len");
            }),
            // A large batch over many pairs.
            85..95 => tree.write(|b| {
                for _ in 0..1 + rng.below(16) {
                    batch_pair_op(b, &mut model, &mut rng, s, version, tally);
                }
            }),
            // A batch that changes nothing.
            _ => assert_eq!(tree.write(|b| b.len()), s as usize + model.len()),
        }
        if version % if cfg!(miri) { 32 } else { 1024 } == 0 {
            tree.check_invariants().expect("invariants during churn");
        }
    }
    (model, version)
}

/// Runs readers against one writer on a tree with its own collector; then
/// checks the final contents and that every value was dropped exactly once.
fn latch_tree_stress(cfg: Cfg, seed: u64) {
    let s = cfg.stable;
    let tally = Arc::new(Tally::default());
    let collector = Collector::new();
    let tree: Tree = LatchTree::with_collector(collector.clone());
    tree.write(|b| {
        for i in 1..=s {
            b.insert(4 * i, Val::new(4 * i, 0, &tally));
        }
    });
    let done = AtomicBool::new(false);
    let (model, writes, rounds) = thread::scope(|scope| {
        let readers: Vec<_> = (0..cfg.readers)
            .map(|r| {
                let (tree, collector, done) = (&tree, &collector, &done);
                scope.spawn(move || tree_reader(tree, collector, cfg, seed + 1 + r as u64, done))
            })
            .collect();
        let _stop = SetOnDrop(&done);
        let (model, writes) = tree_writer(&tree, &tally, cfg, seed);
        drop(_stop);
        let rounds: Vec<u64> = readers
            .into_iter()
            .map(|h| h.join().expect("a reader failed"))
            .collect();
        (model, writes, rounds)
    });
    assert!(rounds.iter().all(|&r| r >= cfg.min_rounds));
    tree.check_invariants().expect("invariants after the run");
    let guard = tree.pin();
    let got: Vec<(u64, u64)> = tree
        .snapshot(&guard)
        .into_iter()
        .map(|(&k, v)| {
            v.check(k);
            (k, v.version)
        })
        .collect();
    drop(guard);
    let mut want: BTreeMap<u64, u64> = (1..=s).map(|i| (4 * i, 0)).collect();
    want.extend(model);
    assert_eq!(
        got,
        want.into_iter().collect::<Vec<_>>(),
        "final contents differ from the model"
    );
    println!(
        "latch tree: {writes} writes, reader rounds {rounds:?}, read retries {}",
        tree.stats().read_retries
    );
    // Dropping the tree drops what it holds; dropping the last collector
    // handle runs every deferred drop.
    drop(tree);
    drop(collector);
    tally.assert_balanced();
}

#[test]
fn latch_tree_readers_see_stable_keys_while_writer_churns() {
    latch_tree_stress(Cfg::quick(), 1);
}

#[test]
fn latch_tree_reference_outlives_removal_until_guard_drops() {
    let tally = Arc::new(Tally::default());
    let collector = Collector::new();
    let tree: Tree = LatchTree::with_collector(collector.clone());
    for k in 0..32 {
        tree.insert(k, Val::new(k, 0, &tally));
    }
    let reader = collector.register();
    let guard = reader.pin();
    let seven = tree.get(&7, &guard).unwrap();
    let eight = tree.get(&8, &guard).unwrap();
    assert!(tree.remove(&7));
    assert!(!tree.insert(8, Val::new(8, 1, &tally)));
    tree.write(|b| {
        b.remove(&9);
        b.insert(9, Val::new(9, 1, &tally));
    });
    // Other participants try hard to advance the epoch and collect.
    let other = collector.register();
    for _ in 0..if cfg!(miri) { 64 } else { 1024 } {
        other.pin().flush();
        tree.pin().flush();
    }
    assert_eq!(
        tally.dropped.load(Relaxed),
        0,
        "a value was dropped while a guard could reach it"
    );
    seven.check(7);
    eight.check(8);
    assert_eq!(eight.version, 0);
    assert_eq!(tree.get(&8, &guard).unwrap().version, 1);
    drop(guard);
    // Now they may go: flushing eventually drops the three old values.
    let start = Instant::now();
    while tally.dropped.load(Relaxed) < 3 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "removed values never dropped"
        );
        // The writer frees what the epoch announced (`LatchTree::flush`).
        tree.flush();
    }
    assert_eq!(tally.dropped.load(Relaxed), 3);
    drop((tree, reader, other, collector));
    tally.assert_balanced();
}

// ---------------------------------------------------------------------------
// AddrIndex
// ---------------------------------------------------------------------------
//
// Address layout: region `k` (k in 0..m) spans `BASE + k * REGION` plus
// `0..REGION`. In each region, module k owns two stable ranges
// (`STABLE_RANGES`), never removed; churned modules come and go in three
// slots (`SLOT_RANGES`, one module per slot at a time, owning a random
// non-empty subset of the slot's ranges); the rest is never registered.

const BASE: u64 = 0x10_0000;
const REGION: u64 = 0x1_0000;
const STABLE_RANGES: [(u64, u64); 2] = [(0x1000, 0x2000), (0x5000, 0x5800)];
const SLOT_RANGES: [&[(u64, u64)]; 3] = [
    // Adjacent to the stable range above it at 0x2000.
    &[(0x2000, 0x2800), (0x6000, 0x6400), (0x9000, 0x9100)],
    &[(0x3000, 0x4000)],
    // Two adjacent ranges of one module.
    &[(0xA000, 0xB000), (0xB000, 0xB800), (0xC000, 0xC800)],
];
const NEVER_RANGES: [(u64, u64); 7] = [
    (0, 0x1000),
    (0x2800, 0x3000),
    (0x4000, 0x5000),
    (0x5800, 0x6000),
    (0x6400, 0x9000),
    (0xB800, 0xC000),
    (0xC800, REGION),
];
/// The `slot` of stable modules.
const STABLE: u64 = u64::MAX;

fn in_region(k: u64, (lo, hi): (u64, u64)) -> Range<u64> {
    BASE + k * REGION + lo..BASE + k * REGION + hi
}

fn random_addr(rng: &mut Rng, r: &Range<u64>) -> u64 {
    r.start + rng.below(r.end - r.start)
}

/// A module value: where it belongs, its ranges, and a canary.
struct Module {
    region: u64,
    slot: u64,
    ranges: Vec<Range<u64>>,
    canary: Canary,
}

impl Module {
    fn new(region: u64, slot: u64, ranges: &[Range<u64>], tally: &Arc<Tally>) -> Self {
        Module {
            region,
            slot,
            ranges: ranges.to_vec(),
            canary: Canary::new(tally),
        }
    }

    fn check(&self, region: u64, slot: u64, range: &Range<u64>) {
        self.canary
            .assert_alive(&format_args!("module {region}/{slot}"));
        assert_eq!(
            (self.region, self.slot),
            (region, slot),
            "a hit in {range:?} returned another module"
        );
        assert!(
            self.ranges.contains(range),
            "{range:?} is not a range of its module"
        );
    }
}

type Index = AddrIndex<Module>;

/// The churned modules the writer left registered, by `(region, slot)`.
type Live = HashMap<(u64, u64), (ModuleId, Vec<Range<u64>>)>;

/// One reader: lookups and `module_address` on stable and never-registered
/// addresses (exact answers) and on churned ones (consistent answers).
fn index_reader(index: &Index, ids: &[ModuleId], cfg: Cfg, seed: u64, done: &AtomicBool) -> u64 {
    let m = cfg.stable;
    let mut rng = Rng::new(seed);
    let stable_span = in_region(0, STABLE_RANGES[0]).start..in_region(m - 1, STABLE_RANGES[1]).end;
    let mut rounds = 0u64;
    loop {
        let finished = done.load(Acquire);
        let guard = latchtree::pin();
        for _ in 0..cfg.per_round.div_ceil(2) {
            let k = rng.below(m);
            for &sr in &STABLE_RANGES {
                let r = in_region(k, sr);
                let a = random_addr(&mut rng, &r);
                let hit = index
                    .lookup(a)
                    .unwrap_or_else(|| panic!("lookup({a:#x}) missed stable module {k}"));
                assert_eq!(
                    (hit.id(), hit.range(), hit.offset(a)),
                    (ids[k as usize], r.clone(), a - r.start)
                );
                let hit = index
                    .module_address(a, &guard)
                    .unwrap_or_else(|| panic!("module_address({a:#x}) missed stable module {k}"));
                assert_eq!((hit.id(), hit.range()), (ids[k as usize], r.clone()));
                hit.value().check(k, STABLE, &r);
            }
            let never = in_region(k, *rng.pick(&NEVER_RANGES));
            let a = random_addr(&mut rng, &never);
            assert_eq!(
                index.lookup(a),
                None,
                "lookup({a:#x}) hit a never-registered address"
            );
            assert!(
                index.module_address(a, &guard).is_none(),
                "module_address({a:#x}) hit"
            );
            let slot = rng.below(SLOT_RANGES.len() as u64);
            let r = in_region(k, *rng.pick(SLOT_RANGES[slot as usize]));
            let a = random_addr(&mut rng, &r);
            if let Some(hit) = index.lookup(a) {
                assert_eq!(hit.range(), r, "lookup({a:#x}) returned a foreign range");
                assert!(
                    !ids.contains(&hit.id()),
                    "churned range {r:?} reported as stable"
                );
            }
            if let Some(hit) = index.module_address(a, &guard) {
                assert_eq!(
                    hit.range(),
                    r,
                    "module_address({a:#x}) returned a foreign range"
                );
                hit.value().check(k, slot, &r);
            }
            let v = index
                .get(ids[k as usize], &guard)
                .expect("a stable module is missing");
            v.check(k, STABLE, &in_region(k, STABLE_RANGES[0]));
        }
        assert_eq!(index.lookup(rng.below(BASE)), None);
        assert_eq!(index.lookup(BASE + m * REGION + rng.below(1 << 40)), None);
        assert_eq!(index.lookup(u64::MAX), None);
        let bounds = index.bounds().expect("bounds of a non-empty index");
        assert!(
            bounds.start == stable_span.start && bounds.end >= stable_span.end,
            "bounds {bounds:?}"
        );
        if rounds.is_multiple_of(cfg.snapshot_every) {
            let k = rng.below(m);
            let want: Vec<_> = STABLE_RANGES.iter().map(|&r| in_region(k, r)).collect();
            assert_eq!(index.ranges_of(ids[k as usize]), Some(want));
            let snap: Vec<_> = index
                .snapshot(&guard)
                .iter()
                .map(|h| (h.range(), h.id()))
                .collect();
            for w in snap.windows(2) {
                assert!(
                    w[0].0.end <= w[1].0.start,
                    "snapshot unsorted or overlapping: {w:?}"
                );
            }
            for (k, id) in ids.iter().enumerate() {
                for &r in &STABLE_RANGES {
                    assert!(
                        snap.contains(&(in_region(k as u64, r), *id)),
                        "snapshot lacks a stable range"
                    );
                }
            }
        }
        drop(guard);
        rounds += 1;
        if finished && rounds >= cfg.min_rounds {
            return rounds;
        }
    }
}

/// The writer: registers and removes multi-range modules in the slots, and
/// makes rejected calls. Returns the registered churn modules and the number
/// of operations.
fn index_writer(
    index: &Index,
    ids: &[ModuleId],
    tally: &Arc<Tally>,
    cfg: Cfg,
    seed: u64,
) -> (Live, u64) {
    let m = cfg.stable;
    let mut rng = Rng::new(seed);
    let mut live = Live::new();
    let mut last_id = *ids.iter().max().unwrap();
    let start = Instant::now();
    let mut ops = 0;
    while ops < cfg.max_writes && start.elapsed() < cfg.time {
        ops += 1;
        let k = rng.below(m);
        let slot = rng.below(SLOT_RANGES.len() as u64);
        if let Some((id, _)) = live.remove(&(k, slot)) {
            assert!(index.remove(id).is_some(), "remove({id}) of a live module");
            if rng.chance(10) {
                assert!(index.remove(id).is_none(), "remove({id}) twice");
            }
        } else {
            // A random non-empty subset of the slot's ranges, in random order.
            let all: Vec<Range<u64>> = SLOT_RANGES[slot as usize]
                .iter()
                .map(|&r| in_region(k, r))
                .collect();
            let mut ranges: Vec<Range<u64>> =
                all.iter().filter(|_| rng.chance(60)).cloned().collect();
            if ranges.is_empty() {
                ranges.push(rng.pick(&all).clone());
            }
            for i in (1..ranges.len()).rev() {
                ranges.swap(i, rng.below(i as u64 + 1) as usize);
            }
            let value = Module::new(k, slot, &ranges, tally);
            let id = if ranges.len() == 1 && rng.chance(50) {
                index.insert(ranges[0].clone(), value)
            } else {
                index.insert_module(ranges.clone(), value)
            }
            .expect("inserting into a free slot");
            assert!(id > last_id, "module ids must grow: {id} after {last_id}");
            last_id = id;
            ranges.sort_by_key(|r| r.start);
            live.insert((k, slot), (id, ranges));
        }
        // Rejected calls change nothing.
        if rng.chance(5) {
            let stable = in_region(k, STABLE_RANGES[0]);
            let bad = stable.start + 0x10..stable.end - 0x10;
            let err = index
                .insert(bad.clone(), Module::new(k, 99, &[], tally))
                .unwrap_err();
            assert_eq!(
                *err.error(),
                AddrIndexError::Overlap {
                    range: bad,
                    existing: stable,
                    module: ids[k as usize]
                }
            );
        }
        if rng.chance(3) {
            // A free slot's range plus an overlapping one: nothing of it may
            // appear.
            let free = (0..SLOT_RANGES.len() as u64).find(|s| !live.contains_key(&(k, *s)));
            if let Some(s) = free {
                let r = in_region(k, SLOT_RANGES[s as usize][0]);
                let clash = in_region(k, STABLE_RANGES[1]);
                let err = index.insert_module(
                    [r.clone(), clash.start..clash.start + 1],
                    Module::new(k, s, &[], tally),
                );
                assert!(
                    matches!(
                        err.as_ref().map_err(|e| e.error()),
                        Err(AddrIndexError::Overlap { .. })
                    ),
                    "{err:?}"
                );
                assert_eq!(index.lookup(r.start), None, "a rejected module is visible");
            }
        }
        if rng.chance(1) {
            // Remove everything churned at once: many nodes recycled.
            for (_, (id, _)) in live.drain() {
                assert!(index.remove(id).is_some());
            }
        }
        if ops % if cfg!(miri) { 32 } else { 1024 } == 0 {
            index.check_invariants().expect("invariants during churn");
        }
    }
    (live, ops)
}

/// Runs readers against one writer on an address index; then checks the
/// final contents and that every module value was dropped exactly once.
fn addr_index_stress(cfg: Cfg, policy: LayoutPolicy, seed: u64) {
    let m = cfg.stable;
    let tally = Arc::new(Tally::default());
    let index: Index = AddrIndex::with_policy(policy);
    let ids: Vec<ModuleId> = (0..m)
        .map(|k| {
            let ranges: Vec<_> = STABLE_RANGES.iter().map(|&r| in_region(k, r)).collect();
            index
                .insert_module(
                    ranges.iter().rev().cloned(),
                    Module::new(k, STABLE, &ranges, &tally),
                )
                .unwrap()
        })
        .collect();
    let done = AtomicBool::new(false);
    let (live, ops, rounds) = thread::scope(|scope| {
        let readers: Vec<_> = (0..cfg.readers)
            .map(|r| {
                let (index, ids, done) = (&index, &ids, &done);
                scope.spawn(move || index_reader(index, ids, cfg, seed + 1 + r as u64, done))
            })
            .collect();
        let _stop = SetOnDrop(&done);
        let (live, ops) = index_writer(&index, &ids, &tally, cfg, seed);
        drop(_stop);
        let rounds: Vec<u64> = readers
            .into_iter()
            .map(|h| h.join().expect("a reader failed"))
            .collect();
        (live, ops, rounds)
    });
    assert!(rounds.iter().all(|&r| r >= cfg.min_rounds));
    index.check_invariants().expect("invariants after the run");
    let mut want: Vec<(Range<u64>, ModuleId)> = Vec::new();
    for (k, id) in ids.iter().enumerate() {
        want.extend(STABLE_RANGES.iter().map(|&r| (in_region(k as u64, r), *id)));
    }
    for (id, ranges) in live.values() {
        want.extend(ranges.iter().map(|r| (r.clone(), *id)));
    }
    want.sort_by_key(|(r, _)| r.start);
    let snap: Vec<_> = index
        .snapshot(&index.pin())
        .iter()
        .map(|h| (h.range(), h.id()))
        .collect();
    assert_eq!(snap, want, "final ranges differ from the model");
    assert_eq!(index.module_count(), ids.len() + live.len());
    for (id, ranges) in live.values() {
        assert_eq!(index.ranges_of(*id).as_ref(), Some(ranges));
    }
    println!(
        "addr index: {ops} writes, reader rounds {rounds:?}, read retries {}",
        index.stats().read_retries
    );
    drop(index);
    tally.wait_balanced_on_default_collector();
}

/// Tiny layout thresholds: the writer's trees migrate (a few units of
/// work a write) under the readers all the time.
#[test]
fn addr_index_readers_see_stable_modules_while_writer_churns() {
    addr_index_stress(Cfg::quick(), LayoutPolicy::small(2), 7);
}

/// The policy users get: these trees stay below its threshold and are
/// rebuilt in place by their commits.
#[test]
#[cfg_attr(
    miri,
    ignore = "the same paths as the test above but the migration; the budget"
)]
fn addr_index_readers_see_stable_modules_while_writer_churns_default_policy() {
    addr_index_stress(Cfg::quick(), LayoutPolicy::DEFAULT, 8);
}

#[test]
fn addr_index_module_value_outlives_removal_until_guard_drops() {
    let tally = Arc::new(Tally::default());
    let index: Index = AddrIndex::new();
    let r = 0x1000..0x2000;
    let id = index
        .insert(
            r.clone(),
            Module::new(0, 0, std::slice::from_ref(&r), &tally),
        )
        .unwrap();
    let guard = latchtree::pin();
    let hit = index.module_address(0x1800, &guard).unwrap();
    assert!(index.remove(id).is_some());
    assert_eq!(index.lookup(0x1800), None);
    // Nested pins of this thread, and other threads, try to collect.
    for _ in 0..if cfg!(miri) { 16 } else { 256 } {
        latchtree::pin().flush();
    }
    thread::spawn(|| {
        for _ in 0..if cfg!(miri) { 16 } else { 256 } {
            latchtree::pin().flush();
        }
    })
    .join()
    .unwrap();
    assert_eq!(
        tally.dropped.load(Relaxed),
        0,
        "a module was dropped while a guard could reach it"
    );
    hit.value().check(0, 0, &r);
    drop(guard);
    drop(index);
    tally.wait_balanced_on_default_collector();
}

#[test]
#[ignore = "long stress run (about 25 s); run explicitly"]
fn long_stress() {
    let cfg = Cfg::long();
    thread::scope(|s| {
        s.spawn(|| latch_tree_stress(cfg, 1001));
        s.spawn(|| addr_index_stress(cfg, LayoutPolicy::small(2), 2002));
        s.spawn(|| addr_index_stress(cfg, LayoutPolicy::DEFAULT, 2003));
    });
    latch_tree_stress(Cfg { stable: 16, ..cfg }, 3003);
}
