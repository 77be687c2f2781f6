//! The longest single write (DESIGN §7c): an `AddrIndex` and a
//! `LatchTree<u64, u64>` grown to n by single inserts, ascending and in
//! random order, every insert timed on its own (wall clock, `Instant`),
//! reported as p50, p99 and the largest; then one `rebalance()` of the
//! index and one `clear()` of the tree at that size. A structure that
//! reorganises itself in one write shows it here as a max far above p99.
//! On a shared machine the wall clock also counts the time the thread was
//! descheduled, so the largest write is also given in thread CPU time
//! (`cpu max`, read around the wall-clock reads: it includes page faults,
//! not preemption, though a VM's stolen time may show in it). Each growth
//! runs [`RUNS`] times: p50 and p99 pool every insert of every run, `max`
//! and `cpu max` are the largest of any run, and `steady max` is the
//! largest over the inserts of each insert's least CPU time across the runs:
//! what the structure itself costs at its worst insert (a write that
//! reorganises takes long in every run; an interrupt or a stolen slice hits
//! one insert in one run). `rebalance` and `clear` give their median.

use crate::Config;
use crate::report::Row;
use latchtree::{AddrIndex, LatchTree};
use latchtree_benches::thread_cpu::thread_cpu;
use std::time::Instant;

/// The index's and the tree's names in these rows.
const INDEX: &str = "latchtree AddrIndex insert";
const TREE: &str = "latchtree LatchTree insert";

/// Growths of each structure, each order.
const RUNS: usize = 3;

/// p50 and p99 of `ns` (sorted in place).
fn quantiles(ns: &mut [u64]) -> [(&'static str, f64); 2] {
    ns.sort_unstable();
    let at = |q: f64| ns[((ns.len() - 1) as f64 * q).round() as usize] as f64;
    [("p50", at(0.5)), ("p99", at(0.99))]
}

/// Grows a fresh structure (`make`) by `n` calls of `insert(s, i)`, each
/// timed on its own, [`RUNS`] times, then times `finish` on each grown
/// one: the figures above, in the order p50, p99, max, cpu max, steady
/// max, and `finish`'s median.
fn grow<S>(
    n: usize,
    make: impl Fn() -> S,
    insert: impl Fn(&S, usize),
    finish: impl Fn(&S),
) -> ([(&'static str, f64); 5], f64) {
    let mut wall = Vec::with_capacity(n * RUNS);
    let mut least = vec![u64::MAX; n];
    let mut finishes = Vec::new();
    let (mut max, mut cpu_max) = (0, 0);
    for _ in 0..RUNS {
        let s = make();
        for (i, least) in least.iter_mut().enumerate() {
            let c = thread_cpu();
            let t = Instant::now();
            insert(&s, i);
            let ns = t.elapsed().as_nanos() as u64;
            let cpu = (thread_cpu() - c).as_nanos() as u64;
            wall.push(ns);
            (max, cpu_max) = (max.max(ns), cpu_max.max(cpu));
            *least = (*least).min(cpu);
        }
        let t = Instant::now();
        finish(&s);
        finishes.push(t.elapsed().as_nanos() as f64);
        drop(s);
    }
    let [p50, p99] = quantiles(&mut wall);
    let steady = least.into_iter().max().unwrap_or(0);
    finishes.sort_by(f64::total_cmp);
    (
        [
            p50,
            p99,
            ("max", max as f64),
            ("cpu max", cpu_max as f64),
            ("steady max", steady as f64),
        ],
        finishes[RUNS / 2],
    )
}

/// One structure's rows and line.
fn report(
    rows: &mut Vec<Row>,
    n: usize,
    order: &str,
    (name, finish_name, finish_row): (&'static str, &str, &'static str),
    (figures, finish): ([(&'static str, f64); 5], f64),
) {
    let mut line = format!("  {order:<9} {name:<28}");
    for (q, v) in figures {
        line += &format!(" {q} {v:>10.0}");
        rows.push(Row::new(
            "pause",
            format!("grow {order} {q}"),
            n,
            name,
            v,
            "ns",
        ));
    }
    line += &format!("   {finish_name:<9} {finish:>10.0}");
    rows.push(Row::new(
        "pause",
        format!("{order} {finish_name}"),
        n,
        finish_row,
        finish,
        "ns",
    ));
    println!("{line}");
}

/// The growth sizes: 262 144 in the full run, 16 384 under `--quick`.
pub(crate) fn run(cfg: &Config, rows: &mut Vec<Row>) {
    let n = if cfg.iters < 1 << 17 {
        1 << 14
    } else {
        1 << 18
    };
    println!("pauses: single inserts up to n={n}, each timed (ns), {RUNS} growths each");
    for order in ["ascending", "random"] {
        let mut keys: Vec<u64> = (0..n as u64).collect();
        if order == "random" {
            let mut rng = latchtree_benches::workload::SplitMix64(0x7061_7573 ^ n as u64);
            for i in (1..keys.len()).rev() {
                keys.swap(i, rng.below(i as u64 + 1) as usize);
            }
        }
        let index = grow(
            n,
            AddrIndex::new,
            |index, i| {
                let k = keys[i] * 16;
                index.insert(k..k + 8, ()).expect("disjoint");
            },
            AddrIndex::rebalance,
        );
        let names = (INDEX, "rebalance", "latchtree AddrIndex rebalance");
        report(rows, n, order, names, index);
        let tree = grow(
            n,
            LatchTree::new,
            |tree, i| {
                tree.insert(keys[i], keys[i] + 1);
            },
            LatchTree::clear,
        );
        report(
            rows,
            n,
            order,
            (TREE, "clear", "latchtree LatchTree clear"),
            tree,
        );
    }
}
