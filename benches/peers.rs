//! `latchtree` against the structures Rust programs use today for "which
//! range contains this address" (issue "benchmarks").
//!
//! Group `contains/<structure>/<n>`: `n` disjoint ranges `[start, end)` with
//! random gaps; 90% of the queried addresses fall inside a range. Every
//! structure answers the same question (predecessor of the address, then an
//! end check) and all answers are cross-checked before anything is timed:
//!
//! * `addr_index_lookup`: [`AddrIndex::lookup`] (async-signal-safe path);
//! * `module_address_held` / `module_address_pin`: [`AddrIndex::module_address`]
//!   with one guard held across lookups / a fresh [`latchtree::pin`] per lookup;
//! * `latchtree_upper_bound`: [`LatchTree::upper_bound`], guard held;
//! * `btreemap` (unsynchronized baseline) and `sorted_vec` (`partition_point`,
//!   the floor for a read-only structure);
//! * `std_rwlock`, `parking_lot_rwlock`: `RwLock<BTreeMap>`, read lock per lookup;
//! * `arc_swap`: `ArcSwap<BTreeMap>`, one `load` per lookup;
//! * `left_right`: a `left_right` pair of `BTreeMap`s, one `enter` per lookup;
//! * `skipmap`: `crossbeam_skiplist::SkipMap::upper_bound` (pins internally);
//! * `scc_treeindex`: `scc::TreeIndex` 2.x has no predecessor query (its range
//!   iterator only goes forward), so ranges are keyed by their end and the
//!   query is the first range whose end is above the address, then a start
//!   check — valid only because the ranges are disjoint. Guard held. Its
//!   range start is positioned approximately, with a fallback scan from the
//!   smallest key, so many lookups cost O(n): measured up to n = 1024 only.
//!
//! Group `write/<op>/<structure>/<n>`: `insert_remove` (insert a fresh key,
//! then remove it), `replace` (insert over an existing key) and `batch8`
//! (8 fresh inserts in one atomic write, then 8 removes in another). Every
//! write is made visible to readers before the next one starts (left-right:
//! `publish` after each write). Structures without atomic batches
//! (`skipmap`, `scc_treeindex`) or without an upsert (`scc_treeindex`) are
//! left out of the groups where they have no equivalent.
//!
//! Run with `cargo bench --bench peers` (about 5 minutes); pass a filter,
//! e.g. `cargo bench --bench peers -- contains/.*/84`, for a subset.
//!
//! Times are the benchmark thread's CPU time (robust on a shared machine;
//! single-threaded, nothing here blocks); `LATCHTREE_BENCH_WALL=1` switches
//! to wall time.

use arc_swap::ArcSwap;
use criterion::measurement::Measurement;
use criterion::{Bencher, BenchmarkId, Criterion};
use crossbeam_skiplist::SkipMap;
use latchtree::{AddrIndex, LatchTree};
use left_right::Absorb;
use std::collections::BTreeMap;
use std::hint::black_box;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

mod common;
use common::ThreadCpu;

/// Sizes of the lookup group.
const SIZES: [usize; 7] = [16, 84, 1024, 4096, 65_536, 262_144, 1 << 20];
/// Sizes of the write group (ArcSwap copies the whole map per write).
const WRITE_SIZES: [usize; 2] = [84, 4096];
/// `scc::TreeIndex::range` positions its start approximately and falls back
/// to a scan from the smallest key when the bound lies below a node's first
/// separator: point queries cost O(n) on many addresses, so it is only
/// measured up to this size.
const SCC_MAX_N: usize = 1024;
/// Length of every query array (a power of two, walked cyclically).
const QUERIES: usize = 1 << 16;

/// A small deterministic generator (SplitMix64); no `rand` dependency.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// `n` disjoint ranges in address order (gaps and lengths of 1..=2^20 bytes,
/// starting above 2^40) and a query array: 90% of the addresses inside a
/// random range, 10% in a gap or past the last range.
fn workload(n: usize, seed: u64) -> (Vec<(u64, u64)>, Vec<u64>) {
    let mut rng = SplitMix64(seed);
    let mut ranges = Vec::with_capacity(n);
    let mut at = 1u64 << 40;
    for _ in 0..n {
        at += 1 + rng.below(1 << 20);
        let len = 1 + rng.below(1 << 20);
        ranges.push((at, at + len));
        at += len;
    }
    let queries = (0..QUERIES)
        .map(|_| {
            let (s, e) = ranges[rng.below(n as u64) as usize];
            if rng.below(10) < 9 {
                s + rng.below(e - s)
            } else {
                e + rng.below(1 << 20) // a gap, possibly another range's start
            }
        })
        .collect();
    (ranges, queries)
}

/// The reference answer: the start of the range containing `a`.
fn btree_contains(map: &BTreeMap<u64, u64>, a: u64) -> Option<u64> {
    map.range(..=a)
        .next_back()
        .filter(|&(_, &e)| a < e)
        .map(|(&s, _)| s)
}

/// A left-right operation on a `BTreeMap<u64, u64>`.
enum Op {
    Insert(u64, u64),
    Remove(u64),
}

impl Absorb<Op> for BTreeMap<u64, u64> {
    fn absorb_first(&mut self, op: &mut Op, _: &Self) {
        match *op {
            Op::Insert(k, v) => {
                self.insert(k, v);
            }
            Op::Remove(k) => {
                self.remove(&k);
            }
        }
    }

    fn sync_with(&mut self, first: &Self) {
        self.clone_from(first);
    }
}

/// Every structure of the comparison, filled with the same ranges.
struct Peers {
    index: AddrIndex<()>,
    tree: LatchTree<u64, u64>,
    map: BTreeMap<u64, u64>,
    vec: Vec<(u64, u64)>,
    std_rw: std::sync::RwLock<BTreeMap<u64, u64>>,
    pl_rw: parking_lot::RwLock<BTreeMap<u64, u64>>,
    swap: ArcSwap<BTreeMap<u64, u64>>,
    lr_write: left_right::WriteHandle<BTreeMap<u64, u64>, Op>,
    lr_read: left_right::ReadHandle<BTreeMap<u64, u64>>,
    skip: SkipMap<u64, u64>,
    /// Keyed by range *end*, valued by start (see the module docs).
    scc: scc::TreeIndex<u64, u64>,
}

impl Peers {
    /// Every structure grows by single inserts in one random order (no
    /// bulk-built B-tree nodes, no sorted-insertion tree shapes).
    fn new(ranges: &[(u64, u64)]) -> Self {
        let mut order = ranges.to_vec();
        let mut rng = SplitMix64(0x7368_7566 ^ ranges.len() as u64);
        for i in (1..order.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            order.swap(i, j);
        }
        let index = AddrIndex::new();
        let tree = LatchTree::new();
        // Each BTreeMap-based peer grows its own map by the same inserts (a
        // clone would be compactly allocated, unlike a map grown by updates).
        let [mut map, mut std_map, mut pl_map, mut swap_map] = [(); 4].map(|()| BTreeMap::new());
        let (mut lr_write, lr_read) = left_right::new::<BTreeMap<u64, u64>, Op>();
        let skip = SkipMap::new();
        let scc = scc::TreeIndex::new();
        for &(s, e) in &order {
            index.insert(s..e, ()).expect("disjoint ranges");
            tree.insert(s, e);
            for m in [&mut map, &mut std_map, &mut pl_map, &mut swap_map] {
                m.insert(s, e);
            }
            lr_write.append(Op::Insert(s, e));
            skip.insert(s, e);
            scc.insert(e, s).expect("distinct ends");
        }
        lr_write.publish();
        Peers {
            index,
            tree,
            vec: ranges.to_vec(),
            std_rw: std::sync::RwLock::new(std_map),
            pl_rw: parking_lot::RwLock::new(pl_map),
            swap: ArcSwap::from_pointee(swap_map),
            map,
            lr_write,
            lr_read,
            skip,
            scc,
        }
    }

    /// Every lookup path, by name; each returns the containing range's start.
    fn lookup(
        &self,
        which: &str,
        a: u64,
        guard: &latchtree::Guard,
        scc_guard: &scc::ebr::Guard,
    ) -> Option<u64> {
        match which {
            "addr_index_lookup" => self.index.lookup(a).map(|h| h.range().start),
            "module_address_held" => self.index.module_address(a, guard).map(|h| h.range().start),
            "module_address_pin" => {
                let g = latchtree::pin();
                self.index.module_address(a, &g).map(|h| h.range().start)
            }
            "latchtree_upper_bound" => self
                .tree
                .upper_bound(Bound::Included(&a), guard)
                .filter(|&(_, &e)| a < e)
                .map(|(&s, _)| s),
            "btreemap" => btree_contains(&self.map, a),
            "sorted_vec" => {
                let i = self.vec.partition_point(|&(s, _)| s <= a);
                i.checked_sub(1)
                    .map(|i| self.vec[i])
                    .filter(|&(_, e)| a < e)
                    .map(|(s, _)| s)
            }
            "std_rwlock" => {
                btree_contains(&self.std_rw.read().unwrap_or_else(|e| e.into_inner()), a)
            }
            "parking_lot_rwlock" => btree_contains(&self.pl_rw.read(), a),
            "arc_swap" => btree_contains(&self.swap.load(), a),
            "left_right" => btree_contains(&self.lr_read.enter().expect("writer alive"), a),
            "skipmap" => self
                .skip
                .upper_bound(Bound::Included(&a))
                .filter(|e| a < *e.value())
                .map(|e| *e.key()),
            "scc_treeindex" => self
                .scc
                .range((Bound::Excluded(a), Bound::Unbounded), scc_guard)
                .next()
                .filter(|&(_, &s)| s <= a)
                .map(|(_, &s)| s),
            _ => unreachable!("unknown structure {which}"),
        }
    }
}

/// Names of the lookup paths, in table order.
const LOOKUPS: [&str; 12] = [
    "btreemap",
    "sorted_vec",
    "addr_index_lookup",
    "module_address_held",
    "module_address_pin",
    "latchtree_upper_bound",
    "std_rwlock",
    "parking_lot_rwlock",
    "arc_swap",
    "left_right",
    "skipmap",
    "scc_treeindex",
];

/// Times `f` over the query array, walked cyclically.
fn run<R, M: Measurement>(b: &mut Bencher<'_, M>, queries: &[u64], mut f: impl FnMut(u64) -> R) {
    let mut i = 0;
    b.iter(|| {
        let a = queries[i];
        i = (i + 1) & (QUERIES - 1);
        black_box(f(black_box(a)))
    });
}

fn bench_contains<M: Measurement>(c: &mut Criterion<M>) {
    let mut group = c.benchmark_group("contains");
    group
        .measurement_time(Duration::from_secs(1))
        .warm_up_time(Duration::from_millis(300))
        .sample_size(20);
    for &n in &SIZES {
        let (ranges, queries) = workload(n, 0x7065_6572 ^ n as u64);
        let p = Peers::new(&ranges);
        {
            let guard = latchtree::pin();
            let scc_guard = scc::ebr::Guard::new();
            for &a in &queries {
                let want = btree_contains(&p.map, a);
                for which in LOOKUPS
                    .iter()
                    .filter(|&&w| w != "scc_treeindex" || n <= SCC_MAX_N)
                {
                    assert_eq!(
                        p.lookup(which, a, &guard, &scc_guard),
                        want,
                        "{which} at {a:#x}, n = {n}"
                    );
                }
            }
        }
        // One closure per structure (not `p.lookup(name, ..)`), so that each
        // is timed without the dispatch on the name.
        macro_rules! bench {
            ($name:literal, |$a:ident| $body:expr) => {
                group.bench_with_input(BenchmarkId::new($name, n), &n, |b, _| {
                    run(b, &queries, |$a| $body)
                });
            };
        }
        bench!("btreemap", |a| btree_contains(&p.map, a));
        bench!("sorted_vec", |a| {
            let i = p.vec.partition_point(|&(s, _)| s <= a);
            i.checked_sub(1)
                .map(|i| p.vec[i])
                .filter(|&(_, e)| a < e)
                .map(|(s, _)| s)
        });
        bench!("addr_index_lookup", |a| p
            .index
            .lookup(a)
            .map(|h| h.range().start));
        {
            let guard = latchtree::pin();
            bench!("module_address_held", |a| p
                .index
                .module_address(a, &guard)
                .map(|h| h.range().start));
            bench!("latchtree_upper_bound", |a| p
                .tree
                .upper_bound(Bound::Included(&a), &guard)
                .filter(|&(_, &e)| a < e)
                .map(|(&s, _)| s));
        }
        bench!("module_address_pin", |a| {
            let g = latchtree::pin();
            p.index.module_address(a, &g).map(|h| h.range().start)
        });
        bench!("std_rwlock", |a| btree_contains(
            &p.std_rw.read().unwrap_or_else(|e| e.into_inner()),
            a
        ));
        bench!("parking_lot_rwlock", |a| btree_contains(&p.pl_rw.read(), a));
        bench!("arc_swap", |a| btree_contains(&p.swap.load(), a));
        bench!("left_right", |a| btree_contains(
            &p.lr_read.enter().expect("writer alive"),
            a
        ));
        bench!("skipmap", |a| p
            .skip
            .upper_bound(Bound::Included(&a))
            .filter(|e| a < *e.value())
            .map(|e| *e.key()));
        if n <= SCC_MAX_N {
            let scc_guard = scc::ebr::Guard::new();
            bench!("scc_treeindex", |a| p
                .scc
                .range((Bound::Excluded(a), Bound::Unbounded), &scc_guard)
                .next()
                .filter(|&(_, &s)| s <= a)
                .map(|(_, &s)| s));
        }
        drop(p);
    }
    group.finish();
}

fn bench_write<M: Measurement>(c: &mut Criterion<M>) {
    let mut group = c.benchmark_group("write");
    group
        .measurement_time(Duration::from_secs(1))
        .warm_up_time(Duration::from_millis(300))
        .sample_size(20);
    for &n in &WRITE_SIZES {
        let (ranges, _) = workload(n, 0x7772_6974 ^ n as u64);
        let mut p = Peers::new(&ranges);
        // Fresh keys: one past each range's end is never a start (gaps >= 1),
        // and batches of 8 consecutive ends are distinct.
        let fresh: Vec<u64> = ranges.iter().map(|&(_, e)| e).collect();
        let existing: Vec<u64> = ranges.iter().map(|&(s, _)| s).collect();
        let len = fresh.len();
        let mut i = 0usize;
        let mut next = move || {
            i = (i + 1) % len;
            i
        };

        macro_rules! bench {
            ($op:literal, $name:literal, |$k:ident| $body:expr) => {
                group.bench_function(BenchmarkId::new(format!("{}/{}", $op, $name), n), |b| {
                    b.iter(|| {
                        let $k = fresh[next()];
                        black_box($body)
                    })
                });
            };
        }

        // insert_remove: insert a fresh key, then remove it.
        bench!("insert_remove", "latchtree", |k| (
            p.tree.insert(k, k),
            p.tree.remove(&k)
        ));
        bench!("insert_remove", "addr_index", |k| {
            let id = p.index.insert(k..k + 1, ()).expect("fresh range");
            p.index.remove(id)
        });
        bench!("insert_remove", "btreemap", |k| (
            p.map.insert(k, k),
            p.map.remove(&k)
        ));
        bench!("insert_remove", "std_rwlock", |k| {
            let mut m = p.std_rw.write().unwrap_or_else(|e| e.into_inner());
            (m.insert(k, k), m.remove(&k))
        });
        bench!("insert_remove", "parking_lot_rwlock", |k| {
            let mut m = p.pl_rw.write();
            (m.insert(k, k), m.remove(&k))
        });
        bench!("insert_remove", "arc_swap", |k| {
            let mut m = BTreeMap::clone(&p.swap.load());
            m.insert(k, k);
            p.swap.store(Arc::new(m));
            let mut m = BTreeMap::clone(&p.swap.load());
            m.remove(&k);
            p.swap.store(Arc::new(m));
        });
        bench!("insert_remove", "left_right", |k| {
            p.lr_write.append(Op::Insert(k, k)).publish();
            p.lr_write.append(Op::Remove(k)).publish();
        });
        bench!("insert_remove", "skipmap", |k| {
            p.skip.insert(k, k);
            p.skip.remove(&k).is_some()
        });
        // Keyed by end: the fresh range `[k, k+1)` goes in under `k + 1`.
        bench!("insert_remove", "scc_treeindex", |k| {
            p.scc.insert(k + 1, k).expect("fresh end");
            p.scc.remove(&(k + 1))
        });

        // replace: insert over an existing key (the value changes).
        group.bench_function(BenchmarkId::new("replace/latchtree", n), |b| {
            b.iter(|| {
                let k = existing[next()];
                black_box(p.tree.insert(k, k ^ 1))
            })
        });
        group.bench_function(BenchmarkId::new("replace/btreemap", n), |b| {
            b.iter(|| {
                let k = existing[next()];
                black_box(p.map.insert(k, k ^ 1))
            })
        });
        group.bench_function(BenchmarkId::new("replace/parking_lot_rwlock", n), |b| {
            b.iter(|| {
                let k = existing[next()];
                black_box(p.pl_rw.write().insert(k, k ^ 1))
            })
        });
        group.bench_function(BenchmarkId::new("replace/arc_swap", n), |b| {
            b.iter(|| {
                let k = existing[next()];
                let mut m = BTreeMap::clone(&p.swap.load());
                m.insert(k, k ^ 1);
                p.swap.store(Arc::new(m));
            })
        });
        group.bench_function(BenchmarkId::new("replace/left_right", n), |b| {
            b.iter(|| {
                let k = existing[next()];
                p.lr_write.append(Op::Insert(k, k ^ 1)).publish();
            })
        });
        group.bench_function(BenchmarkId::new("replace/skipmap", n), |b| {
            b.iter(|| {
                let k = existing[next()];
                drop(p.skip.insert(k, k ^ 1));
            })
        });

        // batch8: 8 fresh keys inserted in one write, removed in another.
        let batch = |i: usize| fresh[(i * 8) % (len - len % 8)..][..8].to_vec();
        group.bench_function(BenchmarkId::new("batch8/latchtree", n), |b| {
            b.iter(|| {
                let keys = batch(next());
                p.tree.write(|w| {
                    for &k in &keys {
                        w.insert(k, k);
                    }
                });
                p.tree.write(|w| {
                    for k in &keys {
                        w.remove(k);
                    }
                });
            })
        });
        group.bench_function(BenchmarkId::new("batch8/btreemap", n), |b| {
            b.iter(|| {
                let keys = batch(next());
                for &k in &keys {
                    p.map.insert(k, k);
                }
                for k in &keys {
                    p.map.remove(k);
                }
            })
        });
        group.bench_function(BenchmarkId::new("batch8/parking_lot_rwlock", n), |b| {
            b.iter(|| {
                let keys = batch(next());
                let mut m = p.pl_rw.write();
                for &k in &keys {
                    m.insert(k, k);
                }
                drop(m);
                let mut m = p.pl_rw.write();
                for k in &keys {
                    m.remove(k);
                }
            })
        });
        group.bench_function(BenchmarkId::new("batch8/arc_swap", n), |b| {
            b.iter(|| {
                let keys = batch(next());
                let mut m = BTreeMap::clone(&p.swap.load());
                for &k in &keys {
                    m.insert(k, k);
                }
                p.swap.store(Arc::new(m));
                let mut m = BTreeMap::clone(&p.swap.load());
                for k in &keys {
                    m.remove(k);
                }
                p.swap.store(Arc::new(m));
            })
        });
        group.bench_function(BenchmarkId::new("batch8/left_right", n), |b| {
            b.iter(|| {
                let keys = batch(next());
                for &k in &keys {
                    p.lr_write.append(Op::Insert(k, k));
                }
                p.lr_write.publish();
                for &k in &keys {
                    p.lr_write.append(Op::Remove(k));
                }
                p.lr_write.publish();
            })
        });

        // Every structure still holds exactly the original ranges.
        assert_eq!(p.tree.len(), n);
        assert_eq!(p.index.len(), n);
        assert_eq!(p.map.len(), n);
        assert_eq!(p.pl_rw.read().len(), n);
        assert_eq!(p.swap.load().len(), n);
        assert_eq!(p.lr_read.enter().expect("writer alive").len(), n);
        assert_eq!(p.skip.len(), n);
        assert_eq!(p.scc.len(), n);
    }
    group.finish();
}

/// Every group, on either clock.
fn all<M: Measurement>(c: &mut Criterion<M>) {
    bench_contains(c);
    bench_write(c);
}

fn main() {
    if std::env::var_os("LATCHTREE_BENCH_WALL").is_some() {
        all(&mut Criterion::default().configure_from_args());
    } else {
        all(&mut Criterion::default()
            .with_measurement(ThreadCpu)
            .configure_from_args());
    }
    Criterion::default().configure_from_args().final_summary();
}
