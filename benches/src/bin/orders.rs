//! `AddrIndex::lookup` on the trees programs build: every structure grown by
//! ascending, descending or random single inserts, or by one bulk batch,
//! against a sorted `Vec` and a `BTreeMap` grown in the same order, in one
//! run, on two probe streams (see `latchtree_benches::probes`): the same
//! 65,536 addresses re-queried, and a stream of 2^20 or more distinct
//! addresses. Uses only API that earlier releases have too, so the same
//! file measures the previous `main` (`benches/figures.sh` copies this
//! crate into that checkout; the lines between the `lookup_many` markers
//! are the only ones that need round 4's crate).
//!
//! ```text
//! cargo run --release -p latchtree-benches --bin orders -- [--quick] [--sizes 84,4096]
//!     [--probes requery,stream,sorted] [--iters N] [--wall] [--factors]
//! cargo run --release -p latchtree-benches --features huge-pages --bin orders   # the huge-pages column
//! ```
//!
//! Every repetition is timed on both clocks at once: the thread's CPU time
//! (the default; time the thread was descheduled does not count) and the
//! wall clock (`--wall` makes it the one the ratios use). The output is TSV
//! under `#` lines that name the CPU, the build and the clocks: ns per
//! lookup (median of round-robin repetitions), the ratios to the sorted
//! `Vec` and the `BTreeMap` of the same cell, and the other clock's median.
//! Then one line per target of issue "Performance IV" that the run measured
//! (at 262 144 against the `BTreeMap` built by `FromIterator`, the bulk
//! cell's).
//!
//! `--iters N` sets the lookups of a repetition at every size and probe
//! stream (by default 2^17, a quarter of it for the re-queried set above
//! 4096 ranges). `--probes sorted` adds a stream in ascending address order.
//! `--factors` adds the contenders that tell apart what another harness may
//! measure differently: a sorted `Vec<u64>` of starts (ends beside it), a
//! sorted `Vec` of `(start, end, id)`, and `lookup` reading every field of
//! its hit.

use latchtree::AddrIndex;
use latchtree_benches::machine;
use latchtree_benches::peers::{btree_contains, vec_contains};
use latchtree_benches::probes::{Probes, STREAM_MIN, lookup_loop};
use latchtree_benches::thread_cpu::thread_cpu;
use latchtree_benches::workload::{SplitMix64, Workload};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Instant;

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

/// One contender: `(first, iters)` runs `iters` lookups from the probe
/// stream's `first` address and returns a checksum.
type Run<'a> = Box<dyn FnMut(usize, usize) -> u64 + 'a>;

/// Median ns per lookup of each contender on both clocks, `(cpu, wall)`;
/// every contender must agree on the checksum.
fn round_robin(
    runs: &mut [(&str, Run<'_>)],
    probes: Probes,
    iters: usize,
    reps: usize,
) -> Vec<(f64, f64)> {
    let want = (runs[0].1)(probes.first(0, iters), iters);
    for (name, run) in runs.iter_mut() {
        assert_eq!(
            run(probes.first(0, iters), iters),
            want,
            "{name} disagrees with the baseline"
        );
    }
    let mut samples = vec![(Vec::new(), Vec::new()); runs.len()];
    for rep in 1..=reps {
        let first = probes.first(rep, iters);
        for (i, (_, run)) in runs.iter_mut().enumerate() {
            let c = thread_cpu();
            let t = Instant::now();
            black_box(run(first, iters));
            let wall = t.elapsed();
            let cpu = thread_cpu() - c;
            samples[i].0.push(cpu.as_nanos() as f64 / iters as f64);
            samples[i].1.push(wall.as_nanos() as f64 / iters as f64);
        }
    }
    let median = |s: &mut Vec<f64>| {
        s.sort_by(f64::total_cmp);
        s[s.len() / 2]
    };
    samples
        .iter_mut()
        .map(|(c, w)| (median(c), median(w)))
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

/// The contenders' names (rows of the TSV, keys of the target lines).
const VEC: &str = "sorted Vec";
const BTREE: &str = "BTreeMap";
const LOOKUP: &str = "AddrIndex::lookup";
const MANY: &str = "AddrIndex::lookup_many";
const VEC_STARTS: &str = "sorted Vec<u64> starts";
const VEC_TRIPLES: &str = "sorted Vec<(start,end,id)>";
const LOOKUP_ALL: &str = "AddrIndex::lookup, every field";

struct Args {
    sizes: Vec<usize>,
    reps: usize,
    iters: usize,
    stream_min: usize,
    probes: Vec<Probes>,
    /// `--iters`: as many lookups a repetition at every size and probe.
    fixed_iters: bool,
    wall: bool,
    factors: bool,
}

fn usage() -> ! {
    eprintln!(
        "usage: orders [--quick] [--sizes N,M,...] [--probes requery,stream,sorted] [--iters N] [--wall] [--factors]"
    );
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut args = Args {
        sizes: vec![84, 4096, 262_144],
        reps: 9,
        iters: 1 << 17,
        stream_min: STREAM_MIN,
        probes: vec![Probes::Requery, Probes::Stream],
        fixed_iters: false,
        wall: false,
        factors: false,
    };
    let mut it = std::env::args().skip(1);
    let list = |v: Option<String>| v.unwrap_or_else(|| usage());
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => {
                args.sizes = vec![84, 4096];
                args.reps = 3;
                args.iters = 1 << 12;
                args.stream_min = 1 << 14;
            }
            "--sizes" => {
                args.sizes = list(it.next())
                    .split(',')
                    .map(|x| x.parse().unwrap_or_else(|_| usage()))
                    .collect()
            }
            "--probes" => {
                args.probes = list(it.next())
                    .split(',')
                    .map(|p| match p {
                        "requery" => Probes::Requery,
                        "stream" => Probes::Stream,
                        "sorted" => Probes::Sorted,
                        _ => usage(),
                    })
                    .collect()
            }
            "--iters" => {
                args.iters = list(it.next()).parse().unwrap_or_else(|_| usage());
                args.fixed_iters = true;
            }
            "--wall" => args.wall = true,
            "--factors" => args.factors = true,
            _ => usage(),
        }
    }
    args
}

/// One cell's figures: `(n, order, probes, contender, ns)` on the clock the
/// ratios use.
type Cell = (usize, &'static str, &'static str, &'static str, f64);

fn main() {
    let args = parse_args();
    let (clock, other) = if args.wall {
        ("wall clock", "thread CPU")
    } else {
        ("thread CPU time", "wall")
    };
    println!("# orders: AddrIndex::lookup on structures grown in every order");
    println!(
        "# machine: {}; load average {}",
        machine::describe(),
        machine::load_average()
    );
    let requery_big = if args.fixed_iters {
        args.iters
    } else {
        args.iters / 4
    };
    println!(
        "# {clock}, median of {} round-robin repetitions of {} lookups (re-queried above n=4096: {requery_big})",
        args.reps, args.iters,
    );
    for p in &args.probes {
        println!(
            "# {}",
            p.describe(p.len(args.reps, args.iters, args.stream_min))
        );
    }
    println!("n\torder\tprobes\tcontender\tns/lookup\tvs Vec\tvs BTreeMap\tns ({other})");
    let mut cells: Vec<Cell> = Vec::new();
    for &n in &args.sizes {
        let w = Workload::ranges(n, 0x6c6f_6f6b ^ n as u64);
        let mut vec = w.ranges.clone();
        vec.sort_unstable();
        let starts: Vec<u64> = vec.iter().map(|r| r.0).collect();
        let ends: Vec<u64> = vec.iter().map(|r| r.1).collect();
        let triples: Vec<(u64, u64, u64)> = (0..vec.len())
            .map(|i| (vec[i].0, vec[i].1, i as u64))
            .collect();
        let streams: Vec<(Probes, usize, Vec<u64>)> = args
            .probes
            .iter()
            .map(|&p| {
                // The re-queried set keeps its historical block size; a
                // stream walks as many fresh addresses at every size.
                let iters = match p {
                    Probes::Requery if n > 4096 && !args.fixed_iters => args.iters / 4,
                    _ => args.iters,
                };
                (p, iters, p.addresses(&w, args.reps, iters, args.stream_min))
            })
            .collect();
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
            for (probes, iters, q) in &streams {
                let q = &q[..];
                let (vec, map, index) = (&vec, &map, &index);
                let mut runs: Vec<(&'static str, Run<'_>)> = vec![
                    (
                        VEC,
                        Box::new(move |f, it| lookup_loop(q, f, it, |a| vec_contains(vec, a))),
                    ),
                    (
                        BTREE,
                        Box::new(move |f, it| lookup_loop(q, f, it, |a| btree_contains(map, a))),
                    ),
                    (
                        LOOKUP,
                        Box::new(move |f, it| {
                            lookup_loop(q, f, it, |a| index.lookup(a).map(|h| h.range().start))
                        }),
                    ),
                    // lookup_many: begin
                    (
                        MANY,
                        Box::new(move |f, it| {
                            let mask = q.len() - 1;
                            let mut acc = 0u64;
                            for i in (f..f + it).step_by(8) {
                                let addrs: [u64; 8] = core::array::from_fn(|k| q[(i + k) & mask]);
                                let hits = index.lookup_many(black_box(addrs));
                                for (k, h) in hits.iter().enumerate() {
                                    if let Some(h) = h {
                                        acc = acc.wrapping_add(h.range().start ^ (i + k) as u64);
                                    }
                                }
                            }
                            acc
                        }),
                    ),
                    // lookup_many: end
                ];
                if args.factors {
                    let (starts, ends, triples) = (&starts, &ends, &triples);
                    runs.push((
                        VEC_STARTS,
                        Box::new(move |f, it| {
                            lookup_loop(q, f, it, |a| {
                                let i = starts.partition_point(|&s| s <= a);
                                i.checked_sub(1).filter(|&i| a < ends[i]).map(|i| starts[i])
                            })
                        }),
                    ));
                    runs.push((
                        VEC_TRIPLES,
                        Box::new(move |f, it| {
                            lookup_loop(q, f, it, |a| {
                                let i = triples.partition_point(|t| t.0 <= a);
                                let t = triples[i.checked_sub(1)?];
                                black_box(t.2);
                                (a < t.1).then_some(t.0)
                            })
                        }),
                    ));
                    runs.push((
                        LOOKUP_ALL,
                        Box::new(move |f, it| {
                            lookup_loop(q, f, it, |a| {
                                index.lookup(a).map(|h| {
                                    black_box((h.range().end, h.id(), h.base(), h.tag()));
                                    black_box(h.flags());
                                    h.range().start
                                })
                            })
                        }),
                    ));
                }
                let ns = round_robin(&mut runs, *probes, *iters, args.reps);
                let pick = |(cpu, wall): (f64, f64)| if args.wall { wall } else { cpu };
                let (t_vec, t_map) = (pick(ns[0]), pick(ns[1]));
                for ((name, _), &both) in runs.iter().zip(&ns) {
                    let t = pick(both);
                    let o = if args.wall { both.0 } else { both.1 };
                    cells.push((n, order.name(), probes.name(), *name, t));
                    println!(
                        "{n}\t{}\t{}\t{name}\t{t:.1}\t{:.2}\t{:.2}\t{o:.1}",
                        order.name(),
                        probes.name(),
                        t / t_vec,
                        t / t_map
                    );
                }
            }
        }
    }
    targets(&cells, &args.probes);
}

/// One line per target of issue "Performance IV" the run measured, for
/// each probe stream.
fn targets(cells: &[Cell], probes: &[Probes]) {
    println!();
    println!("# targets (issue \"Performance IV\"; ratios measured in this run):");
    let cell = |n: usize, order: &str, p: &str, who: &str| {
        cells
            .iter()
            .find(|c| c.0 == n && c.1 == order && c.2 == p && c.3 == who)
            .map(|c| c.4)
    };
    let line = |label: String, a: Option<f64>, b: Option<f64>, limit: f64| {
        if let (Some(a), Some(b)) = (a, b) {
            let x = a / b;
            let verdict = if x <= limit { "met" } else { "MISSED" };
            println!("#  {label:<74} {x:>5.2}x  (target <= {limit}x)  {verdict}");
        }
    };
    for p in probes.iter().map(|p| p.name()) {
        for order in Order::ALL.map(Order::name) {
            // (n, contender, baseline's order, baseline, limit, what): at
            // 262 144 the baseline is the `BTreeMap` built by `FromIterator`.
            for (n, who, base_order, base, limit, what) in [
                (84, LOOKUP, order, VEC, 1.25, "lookup vs sorted Vec"),
                (4096, LOOKUP, order, BTREE, 0.55, "lookup vs BTreeMap"),
                (
                    262_144,
                    LOOKUP,
                    "bulk",
                    BTREE,
                    1.5,
                    "lookup vs BTreeMap (FromIterator)",
                ),
                (84, MANY, order, VEC, 1.0, "lookup_many vs sorted Vec"),
                (
                    262_144,
                    MANY,
                    "bulk",
                    BTREE,
                    0.5,
                    "lookup_many vs BTreeMap (FromIterator)",
                ),
            ] {
                line(
                    format!("n={n} {order} {p} {what}"),
                    cell(n, order, p, who),
                    cell(n, base_order, p, base),
                    limit,
                );
            }
        }
    }
}
