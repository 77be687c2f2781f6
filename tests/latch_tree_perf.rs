//! Cost checks for issue 10, `#[ignore]`d (timing on shared machines is
//! noisy); run with
//! `cargo test --release --test latch_tree_perf -- --ignored --nocapture --test-threads=1`.
//! Each figure is the best of several runs, as a ratio against `BTreeMap`
//! (or against single inserts) in the same process.

use latchtree::LatchTree;
use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

fn best_of(runs: usize, mut f: impl FnMut()) -> Duration {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .unwrap()
}

/// Full `iter()` and a half-tree `range()` over n = 4096 with no writer.
#[test]
#[ignore = "timing; run explicitly"]
fn iter_and_range_against_btreemap_at_4096() {
    let n = 4096u64;
    // Insert in a scrambled order, as a tree built by use would be.
    let keys: Vec<u64> = (0..n).map(|i| (i * 2654435761) % n).collect();
    let tree = LatchTree::new();
    let mut map = BTreeMap::new();
    for &k in &keys {
        tree.insert(k, k);
        map.insert(k, k);
    }
    let reps = 200;
    let guard = latchtree::pin();
    let loaded = LatchTree::from_sorted((0..n).map(|k| (k, k))).unwrap();
    let t_loaded = best_of(15, || {
        for _ in 0..reps {
            black_box(loaded.iter(&guard).map(|(k, v)| k ^ v).sum::<u64>());
        }
    });
    let t_tree = best_of(15, || {
        for _ in 0..reps {
            black_box(tree.iter(&guard).map(|(k, v)| k ^ v).sum::<u64>());
        }
    });
    let t_map = best_of(15, || {
        for _ in 0..reps {
            black_box(map.iter().map(|(k, v)| k ^ v).sum::<u64>());
        }
    });
    let t_rev = best_of(15, || {
        for _ in 0..reps {
            black_box(tree.iter(&guard).rev().map(|(k, v)| k ^ v).sum::<u64>());
        }
    });
    let t_map_rev = best_of(15, || {
        for _ in 0..reps {
            black_box(map.iter().rev().map(|(k, v)| k ^ v).sum::<u64>());
        }
    });
    let lo = n / 4;
    let hi = 3 * n / 4;
    let t_range = best_of(15, || {
        for _ in 0..reps {
            black_box(tree.range(lo..hi, &guard).map(|(k, _)| *k).sum::<u64>());
        }
    });
    let t_map_range = best_of(15, || {
        for _ in 0..reps {
            black_box(map.range(lo..hi).map(|(k, _)| *k).sum::<u64>());
        }
    });
    let per = |d: Duration, items: u64| d.as_nanos() as f64 / (reps as f64 * items as f64);
    println!(
        "iter():       LatchTree {:.2} ns/item, BTreeMap {:.2} ns/item, ratio {:.2}",
        per(t_tree, n),
        per(t_map, n),
        t_tree.as_secs_f64() / t_map.as_secs_f64()
    );
    println!(
        "iter() of a bulk-loaded tree (nodes in key order): {:.2} ns/item, ratio {:.2}",
        per(t_loaded, n),
        t_loaded.as_secs_f64() / t_map.as_secs_f64()
    );
    println!(
        "iter().rev(): LatchTree {:.2} ns/item, BTreeMap {:.2} ns/item, ratio {:.2}",
        per(t_rev, n),
        per(t_map_rev, n),
        t_rev.as_secs_f64() / t_map_rev.as_secs_f64()
    );
    println!(
        "range(n/4..3n/4): LatchTree {:.2} ns/item, BTreeMap {:.2} ns/item, ratio {:.2}",
        per(t_range, hi - lo),
        per(t_map_range, hi - lo),
        t_range.as_secs_f64() / t_map_range.as_secs_f64()
    );
}

/// 1M entries: bulk load against 1M `insert` calls.
#[test]
#[ignore = "timing; run explicitly"]
fn bulk_load_against_single_inserts_at_1m() {
    let n = 1_000_000u64;
    let t_insert = best_of(3, || {
        let tree = LatchTree::new();
        for k in 0..n {
            tree.insert(k, k);
        }
        black_box(&tree);
    });
    let t_sorted = best_of(3, || {
        black_box(LatchTree::from_sorted((0..n).map(|k| (k, k))).unwrap());
    });
    let t_collect = best_of(3, || {
        black_box((0..n).map(|k| (k, k)).collect::<LatchTree<_, _>>());
    });
    let scrambled: Vec<(u64, u64)> = (0..n).map(|i| ((i * 2654435761) % n, i)).collect();
    let t_collect_unsorted = best_of(3, || {
        black_box(scrambled.iter().copied().collect::<LatchTree<_, _>>());
    });
    println!(
        "1M inserts {:?}; from_sorted {:?} ({:.1}x faster); collect sorted {:?} ({:.1}x); collect unsorted {:?} ({:.1}x)",
        t_insert,
        t_sorted,
        t_insert.as_secs_f64() / t_sorted.as_secs_f64(),
        t_collect,
        t_insert.as_secs_f64() / t_collect.as_secs_f64(),
        t_collect_unsorted,
        t_insert.as_secs_f64() / t_collect_unsorted.as_secs_f64(),
    );
}
/// The iteration loops alone, one per test, for instruction, cache and
/// branch counts under cachegrind (deterministic, unlike wall time on a
/// shared machine); `REPS` sets the repetitions, and a run with `REPS=0`
/// measures the setup to subtract:
/// `REPS=100 valgrind --tool=cachegrind --cache-sim=yes --branch-sim=yes
/// target/release/deps/latch_tree_perf-* cachegrind_iter_latchtree --ignored --exact`
fn reps() -> u64 {
    std::env::var("REPS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1000)
}

#[test]
#[ignore = "for cachegrind; run explicitly"]
fn cachegrind_iter_latchtree() {
    let n = 4096u64;
    let tree = LatchTree::new();
    for i in 0..n {
        let k = (i * 2654435761) % n;
        tree.insert(k, k);
    }
    let g = latchtree::pin();
    for _ in 0..reps() {
        black_box(tree.iter(&g).map(|(k, v)| k ^ v).sum::<u64>());
    }
}

#[test]
#[ignore = "for cachegrind; run explicitly"]
fn cachegrind_iter_btreemap() {
    let n = 4096u64;
    let mut map = BTreeMap::new();
    for i in 0..n {
        let k = (i * 2654435761) % n;
        map.insert(k, k);
    }
    for _ in 0..reps() {
        black_box(map.iter().map(|(k, v)| k ^ v).sum::<u64>());
    }
}
