//! The longest single write (DESIGN §7c, §7d), two ways.
//!
//! **A first growth in a fresh process** (what a JIT or a loader sees the
//! first time: cold allocator, every page faulted in for the first time,
//! wall clock): for every growth order, this binary runs itself as a child
//! (`compare --first-growth STRUCTURE ORDER N`) that grows one fresh
//! `AddrIndex` or `LatchTree<u64, u64>` to n by single inserts, each timed
//! on its own, and prints p50, p99 and the largest (wall; the largest in
//! thread CPU time too, and at which insert). "bulk" is one batch of all n
//! inserts: its one write is the largest. [`FRESH`] children per structure
//! and order, interleaved; the rows give the median of each figure over
//! the children (a preempted insert on a shared machine hits one child),
//! and the line lists each child's largest.
//!
//! **Growths in one process** (what the structure itself costs, CPU time):
//! each structure grown [`RUNS`] times in a row, ascending, descending and
//! random, every insert timed on its own (wall clock, `Instant`), reported
//! as p50, p99 and the largest; then one `rebalance()` of the index and one
//! `clear()` of the tree at that size. On a shared machine the wall clock
//! also counts the time the thread was descheduled, so the largest write is
//! also given in thread CPU time (`cpu max`, read around the wall-clock
//! reads: it includes page faults, not preemption, though a VM's stolen time
//! may show in it). p50 and p99 pool every insert of every run, `max` and
//! `cpu max` are the largest of any run, and `steady max` is the largest
//! over the inserts of each insert's least CPU time across the runs: what
//! the structure itself costs at its worst insert (a write that reorganises
//! takes long in every run; an interrupt or a stolen slice hits one insert
//! in one run). `rebalance` and `clear` give their median.

use crate::Config;
use crate::report::Row;
use latchtree::{AddrIndex, LatchTree};
use latchtree_benches::thread_cpu::thread_cpu;
use std::process::Command;
use std::time::Instant;

/// The index's and the tree's names in these rows.
const INDEX: &str = "latchtree AddrIndex insert";
const TREE: &str = "latchtree LatchTree insert";

/// Growths of each structure, each order, in one process.
const RUNS: usize = 3;

/// Fresh processes per structure and order (full run; 1 under `--quick`).
const FRESH: usize = 3;

/// The argument that makes this binary a first-growth child.
pub(crate) const CHILD_ARG: &str = "--first-growth";

/// The growth orders; `bulk` is one batch (fresh processes only).
const ORDERS: [&str; 4] = ["ascending", "descending", "random", "bulk"];

/// p50 and p99 of `ns` (sorted in place).
fn quantiles(ns: &mut [u64]) -> [(&'static str, f64); 2] {
    ns.sort_unstable();
    let at = |q: f64| ns[((ns.len() - 1) as f64 * q).round() as usize] as f64;
    [("p50", at(0.5)), ("p99", at(0.99))]
}

/// Keys `0..n` in the order `order` inserts them.
fn keys(n: usize, order: &str) -> Vec<u64> {
    let mut keys: Vec<u64> = (0..n as u64).collect();
    match order {
        "descending" => keys.reverse(),
        "random" => {
            let mut rng = latchtree_benches::workload::SplitMix64(0x7061_7573 ^ n as u64);
            for i in (1..keys.len()).rev() {
                keys.swap(i, rng.below(i as u64 + 1) as usize);
            }
        }
        _ => {}
    }
    keys
}

/// The range an index gets for key `k` (disjoint for distinct keys).
fn range_of(k: u64) -> std::ops::Range<u64> {
    k * 16..k * 16 + 8
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
    let mut line = format!("  {order:<10} {name:<28}");
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

/// The growth size: 262 144 in the full run, 16 384 under `--quick`.
fn size(cfg: &Config) -> usize {
    if cfg.iters < 1 << 17 {
        1 << 14
    } else {
        1 << 18
    }
}

/// Both parts: fresh processes first (nothing of this process's own
/// growths can warm them), then the growths in this process.
pub(crate) fn run(cfg: &Config, rows: &mut Vec<Row>) {
    let n = size(cfg);
    first_growths(cfg, n, rows);
    println!(
        "pauses, in this process: single inserts up to n={n}, each timed (ns), {RUNS} growths each"
    );
    for order in ["ascending", "descending", "random"] {
        let keys = keys(n, order);
        let index = grow(
            n,
            AddrIndex::new,
            |index, i| {
                index.insert(range_of(keys[i]), ()).expect("disjoint");
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

/// What one child measured, ns: p50, p99, the largest (wall), the largest
/// in thread CPU time, and the 0-based insert that took the largest.
struct FirstGrowth {
    p50: f64,
    p99: f64,
    max: f64,
    cpu_max: f64,
    at: usize,
}

/// Runs the children, interleaved (every structure and order once, then
/// again), and reports their figures.
fn first_growths(cfg: &Config, n: usize, rows: &mut Vec<Row>) {
    let fresh = if cfg.iters < 1 << 17 { 1 } else { FRESH };
    println!(
        "pauses, first growth in a fresh process: single inserts up to n={n} (bulk: one batch), \
         each timed (wall ns), {fresh} processes each (medians over them)"
    );
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            println!("  skipped: no path to this binary ({e})");
            return;
        }
    };
    let mut got: Vec<(&str, &str, Vec<FirstGrowth>)> = Vec::new();
    for _ in 0..fresh {
        for order in ORDERS {
            for structure in ["index", "tree"] {
                let out = Command::new(&exe)
                    .args([CHILD_ARG, structure, order, &n.to_string()])
                    .output()
                    .expect("run a first-growth child");
                let text = String::from_utf8_lossy(&out.stdout);
                let figures = parse_child(&text).unwrap_or_else(|| {
                    panic!(
                        "first-growth child {structure} {order} failed ({}): {text}{}",
                        out.status,
                        String::from_utf8_lossy(&out.stderr)
                    )
                });
                match got.iter_mut().find(|g| g.0 == structure && g.1 == order) {
                    Some(g) => g.2.push(figures),
                    None => got.push((structure, order, vec![figures])),
                }
            }
        }
    }
    for (structure, order, mut runs) in got {
        let name = if structure == "index" { INDEX } else { TREE };
        let median = |runs: &mut Vec<FirstGrowth>, f: fn(&FirstGrowth) -> f64| {
            let mut v: Vec<f64> = runs.iter().map(f).collect();
            crate::measure::median(&mut v)
        };
        let p50 = median(&mut runs, |r| r.p50);
        let p99 = median(&mut runs, |r| r.p99);
        let max = median(&mut runs, |r| r.max);
        let cpu_max = median(&mut runs, |r| r.cpu_max);
        let maxes: Vec<String> = runs
            .iter()
            .map(|r| format!("{:.0} at {}", r.max, r.at))
            .collect();
        let mut figures = vec![("max", max), ("cpu max", cpu_max)];
        if order != "bulk" {
            figures.splice(0..0, [("p50", p50), ("p99", p99)]);
        }
        let mut line = format!("  {order:<10} {name:<28}");
        for (q, v) in figures {
            line += &format!(" {q} {v:>10.0}");
            rows.push(Row::new(
                "pause",
                format!("first growth {order} {q}"),
                n,
                name,
                v,
                "ns",
            ));
        }
        println!("{line}   (each: {})", maxes.join(", "));
    }
}

/// `first-growth p50 p99 max cpu_max at` (tab-separated) from a child's
/// output.
fn parse_child(text: &str) -> Option<FirstGrowth> {
    let line = text.lines().find(|l| l.starts_with("first-growth\t"))?;
    let v: Vec<f64> = line
        .split('\t')
        .skip(1)
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let [p50, p99, max, cpu_max, at] = v[..] else {
        return None;
    };
    Some(FirstGrowth {
        p50,
        p99,
        max,
        cpu_max,
        at: at as usize,
    })
}

/// The child: `STRUCTURE ORDER N` (`index` or `tree`; an order of
/// [`ORDERS`]). Grows one fresh structure and prints one line for
/// [`parse_child`].
pub(crate) fn child(args: &[String]) {
    let [structure, order, n] = args else {
        panic!("usage: compare {CHILD_ARG} index|tree ORDER N");
    };
    let n: usize = n.parse().expect("N");
    assert!(ORDERS.contains(&order.as_str()), "unknown order {order}");
    let keys = keys(n, order);
    let mut wall = Vec::with_capacity(n);
    let (mut max, mut cpu_max, mut at) = (0u64, 0u64, 0usize);
    let mut time = |i: usize, f: &mut dyn FnMut()| {
        let c = thread_cpu();
        let t = Instant::now();
        f();
        let ns = t.elapsed().as_nanos() as u64;
        let cpu = (thread_cpu() - c).as_nanos() as u64;
        wall.push(ns);
        if ns > max {
            (max, at) = (ns, i);
        }
        cpu_max = cpu_max.max(cpu);
    };
    match (structure.as_str(), order.as_str()) {
        ("index", "bulk") => {
            let index = AddrIndex::new();
            time(0, &mut || {
                index.write(|b| {
                    for &k in &keys {
                        b.insert(range_of(k), ()).expect("disjoint");
                    }
                })
            });
        }
        ("tree", "bulk") => {
            let tree = LatchTree::new();
            time(0, &mut || {
                tree.write(|b| {
                    for &k in &keys {
                        b.insert(k, k + 1);
                    }
                })
            });
        }
        ("index", _) => {
            let index = AddrIndex::new();
            for (i, &k) in keys.iter().enumerate() {
                time(i, &mut || {
                    index.insert(range_of(k), ()).expect("disjoint");
                });
            }
        }
        ("tree", _) => {
            let tree = LatchTree::new();
            for (i, &k) in keys.iter().enumerate() {
                time(i, &mut || {
                    tree.insert(k, k + 1);
                });
            }
        }
        _ => panic!("unknown structure {structure}"),
    }
    let [(_, p50), (_, p99)] = quantiles(&mut wall);
    println!("first-growth\t{p50}\t{p99}\t{max}\t{cpu_max}\t{at}");
}
