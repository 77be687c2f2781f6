//! Core lookup and write costs of `latchtree` against an unsynchronized
//! `BTreeMap` measured in the same run (issue "core").
//!
//! * `get/{latchtree,btreemap}/n`: exact-key lookups, half of them for keys
//!   that are present and half for random (absent) keys.
//! * `upper_bound/...`: greatest key `<=` a query (`LatchTree::upper_bound`
//!   with a guard held across lookups vs `range(..=k).next_back()`).
//! * `insert_remove/...`: one insert and one remove of a fresh key.
//! * `kernel84/...`: the Linux `__module_address` workload, 84 modules, 90% of
//!   the addresses inside a module: `AddrIndex::lookup`,
//!   `AddrIndex::module_address` (held guard), and a `BTreeMap` predecessor
//!   query plus end check.
//!
//! * `orders/...`: `AddrIndex::lookup` and `lookup_many` on indexes grown
//!   in ascending, descending, random and bulk order (see `bench_orders`).
//!
//! Keys are random `u64`s from a fixed seed; every routine walks a
//! precomputed query array cyclically so that the branch predictor cannot
//! learn the path. Run with `cargo bench -p latchtree-benches --bench lookup` (about 3 minutes).
//!
//! Times are the benchmark thread's CPU time (robust on a shared machine;
//! these loops never block); `LATCHTREE_BENCH_WALL=1` switches to wall time.

use criterion::measurement::Measurement;
use criterion::{BenchmarkId, Criterion};
use latchtree::{AddrIndex, LatchTree};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::ops::Bound;
use std::time::Duration;

use latchtree_benches::thread_cpu::ThreadCpu;
use latchtree_benches::workload::{
    QUERIES, SplitMix64, Workload, mixed_queries, random_keys, shuffled,
};

/// Lookup sizes: module-sized, page-of-symbols-sized, large.
const SIZES: [usize; 3] = [84, 4096, 262_144];
/// Sizes for the write-cost group.
const WRITE_SIZES: [usize; 2] = [84, 4096];
/// Both maps grown by single inserts in `keys`' (random) order: no
/// bulk-built, perfectly packed B-tree nodes.
fn build(keys: &[u64]) -> (LatchTree<u64, u64>, BTreeMap<u64, u64>) {
    let tree = LatchTree::new();
    let mut map = BTreeMap::new();
    for &k in keys {
        tree.insert(k, !k);
        map.insert(k, !k);
    }
    (tree, map)
}

/// Tight, modest criterion settings so the whole file runs in ~3 minutes.
fn config() -> Criterion {
    Criterion::default()
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500))
        .sample_size(30)
}

fn bench_get<M: Measurement>(c: &mut Criterion<M>) {
    let mut group = c.benchmark_group("get");
    for &n in &SIZES {
        let mut rng = SplitMix64(0x6765_7400 ^ n as u64);
        let keys = random_keys(n, &mut rng);
        let queries = mixed_queries(&keys, &mut rng);
        let (tree, map) = build(&keys);

        group.bench_with_input(BenchmarkId::new("latchtree", n), &n, |b, _| {
            let guard = latchtree::pin();
            let mut i = 0;
            b.iter(|| {
                let q = queries[i];
                i = (i + 1) & (QUERIES - 1);
                black_box(tree.get(black_box(&q), &guard))
            });
        });
        group.bench_with_input(BenchmarkId::new("btreemap", n), &n, |b, _| {
            let mut i = 0;
            b.iter(|| {
                let q = queries[i];
                i = (i + 1) & (QUERIES - 1);
                black_box(map.get(black_box(&q)))
            });
        });
    }
    group.finish();
}

fn bench_upper_bound<M: Measurement>(c: &mut Criterion<M>) {
    let mut group = c.benchmark_group("upper_bound");
    for &n in &SIZES {
        let mut rng = SplitMix64(0x7562_0000 ^ n as u64);
        let keys = random_keys(n, &mut rng);
        let queries = mixed_queries(&keys, &mut rng);
        let (tree, map) = build(&keys);

        group.bench_with_input(BenchmarkId::new("latchtree", n), &n, |b, _| {
            let guard = latchtree::pin();
            let mut i = 0;
            b.iter(|| {
                let q = queries[i];
                i = (i + 1) & (QUERIES - 1);
                black_box(tree.upper_bound(Bound::Included(black_box(&q)), &guard))
            });
        });
        group.bench_with_input(BenchmarkId::new("btreemap", n), &n, |b, _| {
            let mut i = 0;
            b.iter(|| {
                let q = queries[i];
                i = (i + 1) & (QUERIES - 1);
                black_box(map.range(..=black_box(q)).next_back())
            });
        });
    }
    group.finish();
}

fn bench_insert_remove<M: Measurement>(c: &mut Criterion<M>) {
    let mut group = c.benchmark_group("insert_remove");
    for &n in &WRITE_SIZES {
        let mut rng = SplitMix64(0x7772_0000 ^ n as u64);
        let keys = random_keys(n, &mut rng);
        // Fresh keys are odd, so never present.
        let fresh: Vec<u64> = (0..QUERIES).map(|_| rng.next_u64() | 1).collect();
        let (tree, mut map) = build(&keys);

        group.bench_with_input(BenchmarkId::new("latchtree", n), &n, |b, _| {
            let mut i = 0;
            b.iter(|| {
                let k = fresh[i];
                i = (i + 1) & (QUERIES - 1);
                black_box(tree.insert(black_box(k), k));
                black_box(tree.remove(black_box(&k)))
            });
        });
        group.bench_with_input(BenchmarkId::new("btreemap", n), &n, |b, _| {
            let mut i = 0;
            b.iter(|| {
                let k = fresh[i];
                i = (i + 1) & (QUERIES - 1);
                black_box(map.insert(black_box(k), k));
                black_box(map.remove(black_box(&k)))
            });
        });
        assert_eq!(tree.len(), n);
        assert_eq!(map.len(), n);
    }
    group.finish();
}

fn bench_kernel<M: Measurement>(c: &mut Criterion<M>) {
    let mut group = c.benchmark_group("kernel84");
    let Workload { ranges, queries } = Workload::kernel(0x6b65_726e);
    // Both built by single inserts in a random module order.
    let index = AddrIndex::new();
    let mut map: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for (s, e) in shuffled(&ranges) {
        let m = ranges.partition_point(|&(start, _)| start < s);
        index.insert(s..e, m).expect("ranges do not overlap");
        map.insert(s, (e, m as u64));
    }

    // The three must agree before their speed means anything.
    let guard = latchtree::pin();
    for &a in &queries {
        let want = map
            .range(..=a)
            .next_back()
            .filter(|(_, (e, _))| a < *e)
            .map(|(&s, &(e, _))| s..e);
        assert_eq!(index.lookup(a).map(|h| h.range()), want);
        assert_eq!(index.module_address(a, &guard).map(|h| h.range()), want);
    }
    drop(guard);

    group.bench_function("addr_index_lookup", |b| {
        let mut i = 0;
        b.iter(|| {
            let a = queries[i];
            i = (i + 1) & (QUERIES - 1);
            black_box(index.lookup(black_box(a)))
        });
    });
    group.bench_function("module_address_held_guard", |b| {
        let guard = latchtree::pin();
        let mut i = 0;
        b.iter(|| {
            let a = queries[i];
            i = (i + 1) & (QUERIES - 1);
            black_box(index.module_address(black_box(a), &guard).map(|h| h.id()))
        });
    });
    // The floor the performance issue measures against: a sorted array
    // (`ranges` is sorted by start) and a binary search.
    group.bench_function("sorted_vec", |b| {
        let mut i = 0;
        b.iter(|| {
            let a = queries[i];
            i = (i + 1) & (QUERIES - 1);
            black_box(latchtree_benches::peers::vec_contains(
                &ranges,
                black_box(a),
            ))
        });
    });
    group.bench_function("btreemap", |b| {
        let mut i = 0;
        b.iter(|| {
            let a = queries[i];
            i = (i + 1) & (QUERIES - 1);
            let a = black_box(a);
            black_box(
                map.range(..=a)
                    .next_back()
                    .filter(|(_, (e, _))| a < *e)
                    .map(|(_, &(_, m))| m),
            )
        });
    });
    group.finish();
}

/// `orders/{lookup,lookup_many8,btreemap}/{order}-{n}`: the range lookup
/// on structures grown the ways programs grow them (loaders hand out rising
/// or falling addresses): ascending, descending and random single inserts,
/// and one bulk batch (for `BTreeMap`: `FromIterator` of a sorted run).
/// `lookup_many8` is per address, 8 per call.
fn bench_orders<M: Measurement>(c: &mut Criterion<M>) {
    let mut group = c.benchmark_group("orders");
    for n in [84, 4096] {
        let w = Workload::ranges(n, 0x6c6f_6f6b ^ n as u64);
        let orders: [(&str, Vec<(u64, u64)>); 4] = [
            ("ascending", w.ranges.clone()),
            ("descending", w.ranges.iter().rev().copied().collect()),
            ("random", shuffled(&w.ranges)),
            ("bulk", w.ranges.clone()),
        ];
        for (order, grown) in orders {
            let index = AddrIndex::new();
            let map: BTreeMap<u64, u64> = if order == "bulk" {
                index.write(|b| {
                    for &(s, e) in &grown {
                        b.insert(s..e, ()).expect("disjoint");
                    }
                });
                grown.iter().copied().collect()
            } else {
                let mut m = BTreeMap::new();
                for &(s, e) in &grown {
                    index.insert(s..e, ()).expect("disjoint");
                    m.insert(s, e);
                }
                m
            };
            let q = &w.queries;
            for &a in q {
                assert_eq!(
                    index.lookup(a).map(|h| h.range().start),
                    latchtree_benches::peers::btree_contains(&map, a)
                );
            }
            let id = format!("{order}-{n}");
            group.bench_function(BenchmarkId::new("lookup", &id), |b| {
                let mut i = 0;
                b.iter(|| {
                    i = (i + 1) & (QUERIES - 1);
                    black_box(index.lookup(black_box(q[i])))
                });
            });
            group.throughput(criterion::Throughput::Elements(8));
            group.bench_function(BenchmarkId::new("lookup_many8", &id), |b| {
                let mut i = 0;
                b.iter(|| {
                    i = (i + 8) & (QUERIES - 1);
                    let addrs: [u64; 8] = core::array::from_fn(|k| q[i + k]);
                    black_box(index.lookup_many(black_box(addrs)))
                });
            });
            group.throughput(criterion::Throughput::Elements(1));
            group.bench_function(BenchmarkId::new("btreemap", &id), |b| {
                let mut i = 0;
                b.iter(|| {
                    i = (i + 1) & (QUERIES - 1);
                    black_box(latchtree_benches::peers::btree_contains(
                        &map,
                        black_box(q[i]),
                    ))
                });
            });
        }
    }
    group.finish();
}

/// Every group, on either clock.
fn all<M: Measurement>(c: &mut Criterion<M>) {
    bench_get(c);
    bench_upper_bound(c);
    bench_insert_remove(c);
    bench_kernel(c);
    bench_orders(c);
}

fn main() {
    if std::env::var_os("LATCHTREE_BENCH_WALL").is_some() {
        all(&mut config().configure_from_args());
    } else {
        all(&mut config().with_measurement(ThreadCpu).configure_from_args());
    }
    Criterion::default().configure_from_args().final_summary();
}
