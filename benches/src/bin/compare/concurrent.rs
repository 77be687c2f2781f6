//! Readers and a writer at the same time, on the kernel's 84-module
//! workload: reader ns per lookup (wall clock) and writer updates per
//! second, for 1..=`--readers-max` readers and three writer behaviours.
//!
//! Each reader does one complete lookup per query the way a real caller
//! would: one lock, `load`, `enter` or pin per lookup. The writer churns one
//! fresh one-byte range per update (insert it, then remove it; each counts
//! as one update), made visible to readers at once.

use crate::measure::{ConcResult, WriterMode, concurrent, median};
use crate::peers::{Op, btree_contains, latch_contains, skip_contains};
use crate::report::{Row, find};
use crate::workload::Workload;
use crate::{BTREEMAP, Config};
use arc_swap::ArcSwap;
use crossbeam_skiplist::SkipMap;
use latchtree::{AddrIndex, LatchTree};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Names of the structures in the concurrent rows.
pub(crate) const C_ADDR: &str = "latchtree AddrIndex::lookup";
pub(crate) const C_TREE: &str = "latchtree LatchTree (pin per call)";
pub(crate) const C_TREE_HELD: &str = "latchtree LatchTree (held guard)";
pub(crate) const C_STD: &str = "std RwLock<BTreeMap>";
pub(crate) const C_PL: &str = "parking_lot RwLock<BTreeMap>";
pub(crate) const C_SWAP: &str = "ArcSwap<BTreeMap>";
pub(crate) const C_LR: &str = "left-right BTreeMap";
pub(crate) const C_SKIP: &str = "crossbeam SkipMap";

/// All structures, in table order.
pub(crate) const STRUCTURES: [&str; 8] = [
    C_ADDR,
    C_TREE,
    C_TREE_HELD,
    C_STD,
    C_PL,
    C_SWAP,
    C_LR,
    C_SKIP,
];

/// How many lookups a "held guard" reader does under one pin before it
/// repins (so that the writer's garbage can still be reclaimed).
const REPIN_EVERY: u32 = 1024;

/// A busy JIT's write rate: one remove + insert pair every 20 µs.
pub(crate) const PACED_WRITES_PER_S: u64 = 100_000;

/// A `BTreeMap` grown by inserts in `order`.
fn map_of(order: &[(u64, u64)]) -> BTreeMap<u64, u64> {
    let mut m = BTreeMap::new();
    for &(s, e) in order {
        m.insert(s, e);
    }
    m
}

/// One run of `structure` with `readers` readers and writer `mode`. Each run
/// builds its structure afresh from `w`.
fn run_one(
    structure: &str,
    readers: usize,
    mode: WriterMode,
    dur: Duration,
    w: &Workload,
) -> ConcResult {
    let q = &w.queries[..];
    let order = crate::workload::shuffled(&w.ranges);
    let fresh = w.fresh_keys();
    let key = |i: usize| fresh[(i / 2) % fresh.len()];
    match structure {
        C_ADDR => {
            let index = AddrIndex::new();
            for &(s, e) in &order {
                index.insert(s..e, ()).expect("disjoint");
            }
            let index = &index;
            let mut id = None;
            concurrent(
                readers,
                mode,
                dur,
                q,
                || |a| index.lookup(a).map(|h| h.range().start),
                move |i| {
                    if i % 2 == 0 {
                        let k = key(i);
                        id = Some(index.insert(k..k + 1, ()).expect("fresh"));
                    } else {
                        index.remove(id.take().expect("inserted"));
                    }
                },
            )
        }
        C_TREE | C_TREE_HELD => {
            let tree = LatchTree::new();
            for &(s, e) in &order {
                tree.insert(s, e);
            }
            let tree = &tree;
            let held = structure == C_TREE_HELD;
            concurrent(
                readers,
                mode,
                dur,
                q,
                || {
                    let mut guard = latchtree::pin();
                    let mut since_pin = 0u32;
                    move |a| {
                        if !held {
                            let g = latchtree::pin();
                            return latch_contains(tree, a, &g);
                        }
                        since_pin += 1;
                        if since_pin == REPIN_EVERY {
                            since_pin = 0;
                            guard.repin();
                        }
                        latch_contains(tree, a, &guard)
                    }
                },
                move |i| {
                    let k = key(i);
                    if i % 2 == 0 {
                        tree.insert(k, k + 1);
                    } else {
                        tree.remove(&k);
                    }
                },
            )
        }
        C_STD => {
            let lock = std::sync::RwLock::new(map_of(&order));
            let lock = &lock;
            concurrent(
                readers,
                mode,
                dur,
                q,
                || |a| btree_contains(&lock.read().unwrap_or_else(|e| e.into_inner()), a),
                move |i| {
                    let k = key(i);
                    let mut m = lock.write().unwrap_or_else(|e| e.into_inner());
                    if i % 2 == 0 {
                        m.insert(k, k + 1);
                    } else {
                        m.remove(&k);
                    }
                },
            )
        }
        C_PL => {
            let lock = parking_lot::RwLock::new(map_of(&order));
            let lock = &lock;
            concurrent(
                readers,
                mode,
                dur,
                q,
                || |a| btree_contains(&lock.read(), a),
                move |i| {
                    let k = key(i);
                    let mut m = lock.write();
                    if i % 2 == 0 {
                        m.insert(k, k + 1);
                    } else {
                        m.remove(&k);
                    }
                },
            )
        }
        C_SWAP => {
            let swap = ArcSwap::from_pointee(map_of(&order));
            let swap = &swap;
            concurrent(
                readers,
                mode,
                dur,
                q,
                || |a| btree_contains(&swap.load(), a),
                move |i| {
                    let k = key(i);
                    let mut m = BTreeMap::clone(&swap.load());
                    if i % 2 == 0 {
                        m.insert(k, k + 1);
                    } else {
                        m.remove(&k);
                    }
                    swap.store(Arc::new(m));
                },
            )
        }
        C_LR => {
            let (mut wh, rh) = left_right::new::<BTreeMap<u64, u64>, Op>();
            for &(s, e) in &order {
                wh.append(Op::Insert(s, e));
            }
            wh.publish();
            let factory = rh.factory();
            let factory = &factory;
            concurrent(
                readers,
                mode,
                dur,
                q,
                || {
                    let h = factory.handle();
                    move |a| btree_contains(&h.enter().expect("writer alive"), a)
                },
                move |i| {
                    let k = key(i);
                    if i % 2 == 0 {
                        wh.append(Op::Insert(k, k + 1));
                    } else {
                        wh.append(Op::Remove(k));
                    }
                    wh.publish();
                },
            )
        }
        C_SKIP => {
            let skip = SkipMap::new();
            for &(s, e) in &order {
                skip.insert(s, e);
            }
            let skip = &skip;
            concurrent(
                readers,
                mode,
                dur,
                q,
                || |a| skip_contains(skip, a),
                move |i| {
                    let k = key(i);
                    if i % 2 == 0 {
                        skip.insert(k, k + 1);
                    } else {
                        skip.remove(&k);
                    }
                },
            )
        }
        _ => unreachable!("unknown structure {structure}"),
    }
}

/// Every (readers, writer mode, structure) combination; the paced writer
/// only at 1 and 2 readers.
pub(crate) fn run(cfg: &Config, rows: &mut Vec<Row>) {
    let w = Workload::kernel(0x6b65_726e);
    let baseline = find(rows, "kernel", "84 modules, 90% inside", BTREEMAP).map(|r| r.value);
    for readers in 1..=cfg.readers_max {
        for mode in [
            WriterMode::None,
            WriterMode::Tight,
            WriterMode::Paced(PACED_WRITES_PER_S),
        ] {
            if matches!(mode, WriterMode::Paced(_)) && readers > 2 {
                continue;
            }
            let case = format!(
                "{readers} reader{}, {}",
                if readers == 1 { "" } else { "s" },
                mode.label()
            );
            for structure in STRUCTURES {
                let runs: Vec<ConcResult> = (0..cfg.conc_reps)
                    .map(|_| run_one(structure, readers, mode, cfg.conc_dur, &w))
                    .collect();
                let pick =
                    |f: fn(&ConcResult) -> f64| median(&mut runs.iter().map(f).collect::<Vec<_>>());
                let mut row = Row::new(
                    "readers",
                    case.clone(),
                    w.ranges.len(),
                    structure,
                    pick(|r| r.reader_ns),
                    "ns/op",
                );
                row.readers = readers;
                row.baseline = baseline;
                row.extra = Some(pick(|r| r.reader_cpu_ns));
                if mode != WriterMode::None {
                    row.writer_ops_s = Some(pick(|r| r.writer_ops_s));
                }
                rows.push(row);
            }
        }
    }
}
