//! `AddrIndex::lookup` on the trees programs build: every structure grown by
//! ascending, descending or random single inserts, or by one bulk batch,
//! against a sorted `Vec` and a `BTreeMap` grown in the same order, in one
//! run. Uses only API that earlier releases have too, so the same file
//! measures the previous `main` (copy it into that checkout's
//! `benches/src/bin/`): the lines between the `lookup_many` markers are the
//! only ones that need today's crate.
//!
//! ```text
//! cargo run --release -p latchtree-benches --bin orders -- [--quick] [--sizes 84,4096]
//! ```
//!
//! Thread CPU time, median of round-robin repetitions; ns per lookup and the
//! ratios to the `Vec` and the `BTreeMap` of the same cell; then one line
//! per target of issue "Performance IV" that this run measured, with its
//! ratio and whether it is met (at 262 144, against the `BTreeMap` built by
//! `FromIterator`, the bulk cell's).

use latchtree::AddrIndex;
use latchtree_benches::peers::{btree_contains, vec_contains};
use latchtree_benches::thread_cpu::thread_cpu;
use latchtree_benches::workload::{QUERIES, SplitMix64, Workload};
use std::collections::BTreeMap;
use std::hint::black_box;

/// How a structure is grown.
#[derive(Clone, Copy)]
enum Order {
    Ascending,
    Descending,
    Random,
    /// One batch of ascending inserts (for `BTreeMap`: `FromIterator` of a
    /// sorted run, its bulk build).
    Bulk,
}

impl Order {
    const ALL: [Order; 4] = [
        Order::Ascending,
        Order::Descending,
        Order::Random,
        Order::Bulk,
    ];

    fn name(self) -> &'static str {
        match self {
            Order::Ascending => "ascending",
            Order::Descending => "descending",
            Order::Random => "random",
            Order::Bulk => "bulk",
        }
    }

    fn arrange(self, ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
        let mut out = ranges.to_vec();
        match self {
            Order::Ascending | Order::Bulk => {}
            Order::Descending => out.reverse(),
            Order::Random => {
                let mut rng = SplitMix64(0x6f72_6465 ^ ranges.len() as u64);
                for i in (1..out.len()).rev() {
                    out.swap(i, rng.below(i as u64 + 1) as usize);
                }
            }
        }
        out
    }
}

type Run<'a> = Box<dyn FnMut(usize) -> u64 + 'a>;

fn lookup_loop(q: &[u64], iters: usize, mut f: impl FnMut(u64) -> Option<u64>) -> u64 {
    let mask = q.len() - 1;
    let mut acc = 0u64;
    for i in 0..iters {
        if let Some(s) = f(black_box(q[i & mask])) {
            acc = acc.wrapping_add(s ^ (i as u64 & mask as u64));
        }
    }
    acc
}

/// Median ns per op of each contender; all must agree on the checksum.
fn round_robin(runs: &mut [(&str, Run<'_>)], iters: usize, reps: usize) -> Vec<f64> {
    let want = (runs[0].1)(iters);
    for (name, run) in runs.iter_mut() {
        assert_eq!(run(iters), want, "{name} disagrees with the baseline");
    }
    let mut samples = vec![Vec::new(); runs.len()];
    for _ in 0..reps {
        for (i, (_, run)) in runs.iter_mut().enumerate() {
            let t = thread_cpu();
            black_box(run(iters));
            samples[i].push((thread_cpu() - t).as_nanos() as f64 / iters as f64);
        }
    }
    samples
        .iter_mut()
        .map(|s| {
            s.sort_by(f64::total_cmp);
            s[s.len() / 2]
        })
        .collect()
}

// bulk: begin
/// All of `ranges` in one batch: one version, one pair of flips.
fn bulk(index: &AddrIndex<()>, ranges: &[(u64, u64)]) {
    index.write(|b| {
        for &(s, e) in ranges {
            b.insert(s..e, ()).expect("disjoint");
        }
    });
}
// bulk: end

fn main() {
    let mut sizes = vec![84, 4096, 262_144];
    let mut reps = 9;
    let mut iters = 1 << 17;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => {
                sizes = vec![84, 4096];
                reps = 3;
                iters = 1 << 12;
            }
            "--sizes" => {
                sizes = it
                    .next()
                    .map(|s| s.split(',').map(|x| x.parse().expect("a size")).collect())
                    .expect("--sizes N,M,...")
            }
            _ => {
                eprintln!("usage: orders [--quick] [--sizes N,M,...]");
                std::process::exit(2)
            }
        }
    }
    println!("n\torder\tcontender\tns/lookup\tvs Vec\tvs BTreeMap");
    // (n, order, contender) -> ns per lookup, for the targets.
    let mut cells: Vec<(usize, &str, &str, f64)> = Vec::new();
    for &n in &sizes {
        let w = Workload::ranges(n, 0x6c6f_6f6b ^ n as u64);
        assert_eq!(w.queries.len(), QUERIES);
        let mut vec = w.ranges.clone();
        vec.sort_unstable();
        for order in Order::ALL {
            let grown = order.arrange(&w.ranges);
            let index = AddrIndex::new();
            let map: BTreeMap<u64, u64> = match order {
                Order::Bulk => {
                    bulk(&index, &grown);
                    grown.iter().copied().collect()
                }
                _ => {
                    let mut m = BTreeMap::new();
                    for &(s, e) in &grown {
                        index.insert(s..e, ()).expect("disjoint");
                        m.insert(s, e);
                    }
                    m
                }
            };
            let iters = if n > 4096 { iters / 4 } else { iters };
            let q = &w.queries[..];
            let (vec, map, index) = (&vec, &map, &index);
            let mut runs: Vec<(&str, Run<'_>)> = vec![
                (
                    "sorted Vec",
                    Box::new(move |it| lookup_loop(q, it, |a| vec_contains(vec, a))),
                ),
                (
                    "BTreeMap",
                    Box::new(move |it| lookup_loop(q, it, |a| btree_contains(map, a))),
                ),
                (
                    "AddrIndex::lookup",
                    Box::new(move |it| {
                        lookup_loop(q, it, |a| index.lookup(a).map(|h| h.range().start))
                    }),
                ),
                // lookup_many: begin
                (
                    "AddrIndex::lookup_many",
                    Box::new(move |it| {
                        let mask = q.len() - 1;
                        let mut acc = 0u64;
                        for i in (0..it).step_by(8) {
                            let addrs: [u64; 8] = core::array::from_fn(|k| q[(i + k) & mask]);
                            let hits = index.lookup_many(black_box(addrs));
                            for (k, h) in hits.iter().enumerate() {
                                if let Some(h) = h {
                                    acc =
                                        acc.wrapping_add(h.range().start ^ ((i + k) & mask) as u64);
                                }
                            }
                        }
                        acc
                    }),
                ),
                // lookup_many: end
            ];
            let ns = round_robin(&mut runs, iters, reps);
            for ((name, _), t) in runs.iter().zip(&ns) {
                cells.push((n, order.name(), name, *t));
                println!(
                    "{n}\t{}\t{name}\t{t:.1}\t{:.2}\t{:.2}",
                    order.name(),
                    t / ns[0],
                    t / ns[1]
                );
            }
        }
    }
    println!();
    println!("targets (issue \"Performance IV\"; ratios measured in this run):");
    let cell = |n: usize, order: &str, who: &str| {
        cells
            .iter()
            .find(|c| c.0 == n && c.1 == order && c.2 == who)
            .map(|c| c.3)
    };
    let line = |label: String, a: Option<f64>, b: Option<f64>, limit: f64| {
        if let (Some(a), Some(b)) = (a, b) {
            let x = a / b;
            let verdict = if x <= limit { "met" } else { "MISSED" };
            println!("  {label:<66} {x:>5.2}x  (target <= {limit}x)  {verdict}");
        }
    };
    const LOOKUP: &str = "AddrIndex::lookup";
    const MANY: &str = "AddrIndex::lookup_many";
    for order in Order::ALL.map(Order::name) {
        // (n, contender, baseline's order, baseline, limit, what): at
        // 262 144 the baseline is the `BTreeMap` built by `FromIterator`.
        for (n, who, base_order, base, limit, what) in [
            (
                84,
                LOOKUP,
                order,
                "sorted Vec",
                1.25,
                "lookup vs sorted Vec",
            ),
            (4096, LOOKUP, order, "BTreeMap", 0.55, "lookup vs BTreeMap"),
            (
                262_144,
                LOOKUP,
                "bulk",
                "BTreeMap",
                1.5,
                "lookup vs BTreeMap (FromIterator)",
            ),
            (
                84,
                MANY,
                order,
                "sorted Vec",
                1.0,
                "lookup_many vs sorted Vec",
            ),
            (
                262_144,
                MANY,
                "bulk",
                "BTreeMap",
                0.5,
                "lookup_many vs BTreeMap (FromIterator)",
            ),
        ] {
            line(
                format!("n={n} {order} {what}"),
                cell(n, order, who),
                cell(n, base_order, base),
                limit,
            );
        }
    }
}
