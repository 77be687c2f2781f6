//! The longest single write (DESIGN §7c): an `AddrIndex` and a
//! `LatchTree<u64, u64>` grown to n by single inserts, ascending and in
//! random order, every insert timed on its own (wall clock, `Instant`),
//! reported as p50, p99 and the largest; then one `rebalance()` of the
//! index and one `clear()` of the tree at that size. A structure that
//! reorganises itself in one write shows it here as a max far above p99.
//! On a shared machine the wall clock also counts the time the thread was
//! descheduled, so the largest write is also given in thread CPU time
//! (`cpu max`, read around the wall-clock reads: it includes page faults,
//! not preemption).

use crate::Config;
use crate::report::Row;
use latchtree::{AddrIndex, LatchTree};
use latchtree_benches::thread_cpu::thread_cpu;
use std::time::Instant;

/// The index's and the tree's names in these rows.
const INDEX: &str = "latchtree AddrIndex insert";
const TREE: &str = "latchtree LatchTree insert";

/// p50, p99 and max of `ns` (sorted in place).
fn quantiles(ns: &mut [u64]) -> [(&'static str, f64); 3] {
    ns.sort_unstable();
    let at = |q: f64| ns[((ns.len() - 1) as f64 * q).round() as usize] as f64;
    [("p50", at(0.5)), ("p99", at(0.99)), ("max", at(1.0))]
}

/// Times each of `n` calls of `insert(i)` on its own: wall-clock ns each,
/// and the most thread CPU ns one took.
fn per_insert(n: usize, mut insert: impl FnMut(usize)) -> (Vec<u64>, f64) {
    let mut ns = Vec::with_capacity(n);
    let mut cpu_max = 0;
    for i in 0..n {
        let c = thread_cpu();
        let t = Instant::now();
        insert(i);
        ns.push(t.elapsed().as_nanos() as u64);
        cpu_max = cpu_max.max((thread_cpu() - c).as_nanos() as u64);
    }
    (ns, cpu_max as f64)
}

fn once(f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_nanos() as f64
}

/// The growth sizes: 262 144 in the full run, 16 384 under `--quick`.
pub(crate) fn run(cfg: &Config, rows: &mut Vec<Row>) {
    let n = if cfg.iters < 1 << 17 {
        1 << 14
    } else {
        1 << 18
    };
    println!("pauses: single inserts up to n={n}, each timed (wall clock, ns)");
    for order in ["ascending", "random"] {
        let mut keys: Vec<u64> = (0..n as u64).collect();
        if order == "random" {
            let mut rng = latchtree_benches::workload::SplitMix64(0x7061_7573 ^ n as u64);
            for i in (1..keys.len()).rev() {
                keys.swap(i, rng.below(i as u64 + 1) as usize);
            }
        }
        let index = AddrIndex::new();
        let (mut ins, cpu) = per_insert(n, |i| {
            let k = keys[i] * 16;
            index.insert(k..k + 8, ()).expect("disjoint");
        });
        let mut line = format!("  {order:<9} {INDEX:<28}");
        for (q, v) in quantiles(&mut ins).into_iter().chain([("cpu max", cpu)]) {
            line += &format!(" {q} {v:>10.0}");
            rows.push(Row::new(
                "pause",
                format!("grow {order} {q}"),
                n,
                INDEX,
                v,
                "ns",
            ));
        }
        let r = once(|| index.rebalance());
        line += &format!("   rebalance {r:>10.0}");
        rows.push(Row::new(
            "pause",
            format!("{order} rebalance"),
            n,
            "latchtree AddrIndex rebalance",
            r,
            "ns",
        ));
        println!("{line}");
        drop(index);

        let tree = LatchTree::new();
        let (mut ins, cpu) = per_insert(n, |i| {
            tree.insert(keys[i], keys[i] + 1);
        });
        let mut line = format!("  {order:<9} {TREE:<28}");
        for (q, v) in quantiles(&mut ins).into_iter().chain([("cpu max", cpu)]) {
            line += &format!(" {q} {v:>10.0}");
            rows.push(Row::new(
                "pause",
                format!("grow {order} {q}"),
                n,
                TREE,
                v,
                "ns",
            ));
        }
        let c = once(|| tree.clear());
        line += &format!("   clear     {c:>10.0}");
        rows.push(Row::new(
            "pause",
            format!("{order} clear"),
            n,
            "latchtree LatchTree clear",
            c,
            "ns",
        ));
        println!("{line}");
    }
}
