//! Single-threaded lookups: the same "which range contains this address"
//! query against every structure, at several sizes, each grown by
//! ascending, descending and random inserts, and on the kernel's 84-module
//! workload. From [`STREAM_FROM`] ranges up the probes are a stream of
//! 2^20 or more distinct addresses (a fresh window every repetition, so the
//! working set is the whole structure), below it and under `--requery` the
//! same 65,536 addresses at every repetition (`latchtree_benches::probes`).

use crate::measure::{Run, round_robin};
use crate::peers::{
    Peers, btree_contains, latch_contains, scc_contains, skip_contains, vec_contains,
};
use crate::report::{Row, set_baseline};
use crate::workload::{Growth, Workload};
use crate::{BTREEMAP, Config};
use latchtree_benches::probes::{Probes, STREAM_MIN, lookup_loop};

/// Structure names of the lookup rows (also the chart's series).
pub(crate) const SORTED_VEC: &str = "sorted Vec (partition_point)";
pub(crate) const ADDR_LOOKUP: &str = "latchtree AddrIndex::lookup";
pub(crate) const MODULE_HELD: &str = "latchtree module_address (held guard)";
pub(crate) const MODULE_PIN: &str = "latchtree module_address (pin per call)";
pub(crate) const SECTION: &str = "latchtree HandlerSection::lookup (open section)";
pub(crate) const UPPER_BOUND: &str = "latchtree LatchTree::upper_bound (held)";
pub(crate) const STD_RW: &str = "std RwLock<BTreeMap>";
pub(crate) const PL_RW: &str = "parking_lot RwLock<BTreeMap>";
pub(crate) const ARC_SWAP: &str = "ArcSwap<BTreeMap>";
pub(crate) const LEFT_RIGHT: &str = "left-right BTreeMap";
pub(crate) const SKIPMAP: &str = "crossbeam SkipMap";
pub(crate) const SCC: &str = "scc TreeIndex";

/// The smallest size whose lookups walk a stream (unless `--requery`).
pub(crate) const STREAM_FROM: usize = 4096;

/// The probes of the lookups at `n` ranges.
pub(crate) fn probes(cfg: &Config, n: usize) -> Probes {
    if n >= STREAM_FROM && !cfg.requery {
        Probes::Stream
    } else {
        Probes::Requery
    }
}

/// Lookups per repetition at `n` ranges: a stream walks as many at every
/// size (long blocks: a repetition starts with the structure evicted by
/// the contender before it); the re-queried set a quarter above 4096, as
/// it always has.
fn iters(cfg: &Config, n: usize) -> usize {
    match probes(cfg, n) {
        Probes::Requery if n > 4096 => cfg.iters / 4,
        _ => cfg.iters,
    }
}

/// What the lookups walk, for the run's head.
pub(crate) fn describe(cfg: &Config) -> String {
    let big = cfg.sizes.iter().copied().find(|&n| n >= STREAM_FROM);
    match big.map(|n| probes(cfg, n)) {
        Some(Probes::Stream) => format!(
            "lookups below n={STREAM_FROM}: {}; from n={STREAM_FROM}: {}",
            Probes::Requery.describe(0),
            Probes::Stream.describe(Probes::Stream.len(cfg.reps, cfg.iters, stream_min(cfg)))
        ),
        _ => format!("lookups: {}", Probes::Requery.describe(0)),
    }
}

/// The fewest addresses of a stream: [`STREAM_MIN`], less in smoke runs.
fn stream_min(cfg: &Config) -> usize {
    if cfg.iters < 1 << 17 {
        1 << 14
    } else {
        STREAM_MIN
    }
}

/// Every size in every growth order, then the kernel case.
pub(crate) fn run(cfg: &Config, rows: &mut Vec<Row>) {
    for &n in &cfg.sizes {
        let w = Workload::ranges(n, 0x6c6f_6f6b ^ n as u64);
        let (probes, iters) = (probes(cfg, n), iters(cfg, n));
        let q = probes.addresses(&w, cfg.reps, iters, stream_min(cfg));
        for growth in Growth::ALL {
            let case = case(n, growth);
            let p = Peers::grown(&w.ranges, growth);
            one_case(cfg, rows, ("lookup", case, n), &p, (probes, iters, &q[..]));
        }
    }
    let w = Workload::kernel(0x6b65_726e);
    let case = "84 modules, 90% inside".into();
    let p = Peers::grown(&w.ranges, Growth::Random);
    let probes = (Probes::Requery, cfg.iters, &w.queries[..]);
    one_case(cfg, rows, ("kernel", case, 84), &p, probes);
}

/// The case name of the lookup rows of `n` ranges grown by `growth`.
pub(crate) fn case(n: usize, growth: Growth) -> String {
    format!("n={n} {}", growth.name())
}

/// Every contender on the structures `p`, `iters` lookups a repetition of
/// the addresses `q` walked as `probes` says.
fn one_case(
    cfg: &Config,
    rows: &mut Vec<Row>,
    (section, case, n): (&'static str, String, usize),
    p: &Peers,
    (probes, iters, q): (Probes, usize, &[u64]),
) {
    let scc_guard = scc::Guard::new();
    let scc_guard = &scc_guard;
    // "Held guard" contenders pin once per repetition, inside their closure:
    // a guard held across all contenders would turn "pin per call" into a
    // cheap nested pin instead of a real one.
    let mut contenders: Vec<(&'static str, Run<'_>)> = vec![
        (
            BTREEMAP,
            Box::new(move |f, it| lookup_loop(q, f, it, |a| btree_contains(&p.map, a))),
        ),
        (
            SORTED_VEC,
            Box::new(move |f, it| lookup_loop(q, f, it, |a| vec_contains(&p.vec, a))),
        ),
        (
            ADDR_LOOKUP,
            Box::new(move |f, it| {
                lookup_loop(q, f, it, |a| p.index.lookup(a).map(|h| h.range().start))
            }),
        ),
        (
            MODULE_HELD,
            Box::new(move |f, it| {
                let guard = &latchtree::pin();
                lookup_loop(q, f, it, |a| {
                    p.index.module_address(a, guard).map(|h| h.range().start)
                })
            }),
        ),
        (
            MODULE_PIN,
            Box::new(move |f, it| {
                lookup_loop(q, f, it, |a| {
                    let g = latchtree::pin();
                    p.index.module_address(a, &g).map(|h| h.range().start)
                })
            }),
        ),
        (
            SECTION,
            Box::new(move |f, it| {
                // One section per repetition, as a handler holds one for
                // the samples it resolves (like the held guard above).
                let section = p.index.handler_section();
                lookup_loop(q, f, it, |a| section.lookup(a).map(|h| h.range().start))
            }),
        ),
        (
            UPPER_BOUND,
            Box::new(move |f, it| {
                let guard = &latchtree::pin();
                lookup_loop(q, f, it, |a| latch_contains(&p.tree, a, guard))
            }),
        ),
        (
            STD_RW,
            Box::new(move |f, it| {
                lookup_loop(q, f, it, |a| {
                    btree_contains(&p.std_rw.read().unwrap_or_else(|e| e.into_inner()), a)
                })
            }),
        ),
        (
            PL_RW,
            Box::new(move |f, it| lookup_loop(q, f, it, |a| btree_contains(&p.pl_rw.read(), a))),
        ),
        (
            ARC_SWAP,
            Box::new(move |f, it| lookup_loop(q, f, it, |a| btree_contains(&p.swap.load(), a))),
        ),
        (
            LEFT_RIGHT,
            Box::new(move |f, it| {
                lookup_loop(q, f, it, |a| {
                    btree_contains(&p.lr_read.enter().expect("writer alive"), a)
                })
            }),
        ),
        (
            SKIPMAP,
            Box::new(move |f, it| lookup_loop(q, f, it, |a| skip_contains(&p.skip, a))),
        ),
        (
            SCC,
            Box::new(move |f, it| lookup_loop(q, f, it, |a| scc_contains(&p.scc, a, scc_guard))),
        ),
    ];
    let first = |rep| probes.first(rep, iters);
    let ns = round_robin(&mut contenders, iters, cfg.reps, cfg.clock, first);
    for ((name, _), ns) in contenders.iter().zip(ns) {
        rows.push(Row::new(section, case.clone(), n, name, ns, "ns/op"));
    }
    set_baseline(rows, section, &case);
}
