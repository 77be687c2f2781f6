//! Single-threaded lookups: the same "which range contains this address"
//! query against every structure, at several sizes, each grown by
//! ascending, descending and random inserts, and on the kernel's 84-module
//! workload.

use crate::measure::{Run, lookup_loop, round_robin};
use crate::peers::{
    Peers, btree_contains, latch_contains, scc_contains, skip_contains, vec_contains,
};
use crate::report::{Row, set_baseline};
use crate::workload::{Growth, Workload};
use crate::{BTREEMAP, Config};

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

/// Every size in every growth order, then the kernel case.
pub(crate) fn run(cfg: &Config, rows: &mut Vec<Row>) {
    for &n in &cfg.sizes {
        let w = Workload::ranges(n, 0x6c6f_6f6b ^ n as u64);
        for growth in Growth::ALL {
            let case = case(n, growth);
            one_case(cfg, rows, "lookup", case, n, &w, growth);
        }
    }
    let w = Workload::kernel(0x6b65_726e);
    let case = "84 modules, 90% inside".into();
    one_case(cfg, rows, "kernel", case, 84, &w, Growth::Random);
}

/// The case name of the lookup rows of `n` ranges grown by `growth`.
pub(crate) fn case(n: usize, growth: Growth) -> String {
    format!("n={n} {}", growth.name())
}

fn one_case(
    cfg: &Config,
    rows: &mut Vec<Row>,
    section: &'static str,
    case: String,
    n: usize,
    w: &Workload,
    growth: Growth,
) {
    let p = Peers::grown(&w.ranges, growth);
    // Large sizes are cache-miss bound (~1 µs per lookup): fewer suffice.
    let iters = if n > 4096 { cfg.iters / 4 } else { cfg.iters };
    let scc_guard = scc::Guard::new();
    let q = &w.queries[..];
    let (p, scc_guard) = (&p, &scc_guard);
    // "Held guard" contenders pin once per repetition, inside their closure:
    // a guard held across all contenders would turn "pin per call" into a
    // cheap nested pin instead of a real one.
    let mut contenders: Vec<(&'static str, Run<'_>)> = vec![
        (
            BTREEMAP,
            Box::new(move |it| lookup_loop(q, it, |a| btree_contains(&p.map, a))),
        ),
        (
            SORTED_VEC,
            Box::new(move |it| lookup_loop(q, it, |a| vec_contains(&p.vec, a))),
        ),
        (
            ADDR_LOOKUP,
            Box::new(move |it| lookup_loop(q, it, |a| p.index.lookup(a).map(|h| h.range().start))),
        ),
        (
            MODULE_HELD,
            Box::new(move |it| {
                let guard = &latchtree::pin();
                lookup_loop(q, it, |a| {
                    p.index.module_address(a, guard).map(|h| h.range().start)
                })
            }),
        ),
        (
            MODULE_PIN,
            Box::new(move |it| {
                lookup_loop(q, it, |a| {
                    let g = latchtree::pin();
                    p.index.module_address(a, &g).map(|h| h.range().start)
                })
            }),
        ),
        (
            SECTION,
            Box::new(move |it| {
                // One section per repetition, as a handler holds one for
                // the samples it resolves (like the held guard above).
                let section = p.index.handler_section();
                lookup_loop(q, it, |a| section.lookup(a).map(|h| h.range().start))
            }),
        ),
        (
            UPPER_BOUND,
            Box::new(move |it| {
                let guard = &latchtree::pin();
                lookup_loop(q, it, |a| latch_contains(&p.tree, a, guard))
            }),
        ),
        (
            STD_RW,
            Box::new(move |it| {
                lookup_loop(q, it, |a| {
                    btree_contains(&p.std_rw.read().unwrap_or_else(|e| e.into_inner()), a)
                })
            }),
        ),
        (
            PL_RW,
            Box::new(move |it| lookup_loop(q, it, |a| btree_contains(&p.pl_rw.read(), a))),
        ),
        (
            ARC_SWAP,
            Box::new(move |it| lookup_loop(q, it, |a| btree_contains(&p.swap.load(), a))),
        ),
        (
            LEFT_RIGHT,
            Box::new(move |it| {
                lookup_loop(q, it, |a| {
                    btree_contains(&p.lr_read.enter().expect("writer alive"), a)
                })
            }),
        ),
        (
            SKIPMAP,
            Box::new(move |it| lookup_loop(q, it, |a| skip_contains(&p.skip, a))),
        ),
        (
            SCC,
            Box::new(move |it| lookup_loop(q, it, |a| scc_contains(&p.scc, a, scc_guard))),
        ),
    ];
    let ns = round_robin(&mut contenders, iters, cfg.reps, cfg.clock);
    for ((name, _), ns) in contenders.iter().zip(ns) {
        rows.push(Row::new(section, case.clone(), n, name, ns, "ns/op"));
    }
    set_baseline(rows, section, &case);
}
