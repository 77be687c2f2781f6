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
//! * `scc_treeindex`: `scc::TreeIndex::locate` (scc 3's predecessor query),
//!   then an end check; guard held.
//!
//! Group `write/<op>/<structure>/<n>`: `insert_remove` (insert a fresh key,
//! then remove it), `replace` (insert over an existing key) and `batch8`
//! (8 fresh inserts in one atomic write, then 8 removes in another). Every
//! write is made visible to readers before the next one starts (left-right:
//! `publish` after each write). Structures without atomic batches
//! (`skipmap`, `scc_treeindex`) or without an upsert (`scc_treeindex`) are
//! left out of the groups where they have no equivalent.
//!
//! Run with `cargo bench -p latchtree-benches --bench peers` (about 5 minutes); pass a filter,
//! e.g. `cargo bench -p latchtree-benches --bench peers -- contains/.*/84`, for a subset.
//!
//! Times are the benchmark thread's CPU time (robust on a shared machine;
//! single-threaded, nothing here blocks); `LATCHTREE_BENCH_WALL=1` switches
//! to wall time.

use criterion::measurement::Measurement;
use criterion::{Bencher, BenchmarkId, Criterion};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use latchtree_benches::peers::{
    Op, Peers, btree_contains, latch_contains, scc_contains, skip_contains, vec_contains,
};
use latchtree_benches::thread_cpu::ThreadCpu;
use latchtree_benches::workload::{QUERIES, Workload};

/// Sizes of the lookup group.
const SIZES: [usize; 7] = [16, 84, 1024, 4096, 65_536, 262_144, 1 << 20];
/// Sizes of the write group (ArcSwap copies the whole map per write).
const WRITE_SIZES: [usize; 2] = [84, 4096];

/// Every lookup path, by name; each returns the containing range's start.
fn lookup(
    p: &Peers,
    which: &str,
    a: u64,
    guard: &latchtree::Guard,
    scc_guard: &scc::Guard,
) -> Option<u64> {
    match which {
        "addr_index_lookup" => p.index.lookup(a).map(|h| h.range().start),
        "module_address_held" => p.index.module_address(a, guard).map(|h| h.range().start),
        "module_address_pin" => {
            let g = latchtree::pin();
            p.index.module_address(a, &g).map(|h| h.range().start)
        }
        "latchtree_upper_bound" => latch_contains(&p.tree, a, guard),
        "btreemap" => btree_contains(&p.map, a),
        "sorted_vec" => vec_contains(&p.vec, a),
        "std_rwlock" => btree_contains(&p.std_rw.read().unwrap_or_else(|e| e.into_inner()), a),
        "parking_lot_rwlock" => btree_contains(&p.pl_rw.read(), a),
        "arc_swap" => btree_contains(&p.swap.load(), a),
        "left_right" => btree_contains(&p.lr_read.enter().expect("writer alive"), a),
        "skipmap" => skip_contains(&p.skip, a),
        "scc_treeindex" => scc_contains(&p.scc, a, scc_guard),
        _ => unreachable!("unknown structure {which}"),
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
        let Workload { ranges, queries } = Workload::ranges(n, 0x7065_6572 ^ n as u64);
        let p = Peers::new(&ranges);
        {
            let guard = latchtree::pin();
            let scc_guard = scc::Guard::new();
            for &a in &queries {
                let want = btree_contains(&p.map, a);
                for which in LOOKUPS {
                    assert_eq!(
                        lookup(&p, which, a, &guard, &scc_guard),
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
        bench!("sorted_vec", |a| vec_contains(&p.vec, a));
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
            bench!("latchtree_upper_bound", |a| latch_contains(
                &p.tree, a, &guard
            ));
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
        bench!("skipmap", |a| skip_contains(&p.skip, a));
        {
            let scc_guard = scc::Guard::new();
            bench!("scc_treeindex", |a| scc_contains(&p.scc, a, &scc_guard));
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
        let ranges = Workload::ranges(n, 0x7772_6974 ^ n as u64).ranges;
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
        bench!("insert_remove", "scc_treeindex", |k| {
            p.scc.insert_sync(k, k + 1).expect("fresh key");
            p.scc.remove_sync(&k)
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
        assert_eq!(p.index.range_count(), n);
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
