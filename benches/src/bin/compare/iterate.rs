//! Walking the map in key order: a full `iter()` and a `range()` over the
//! middle half, against `BTreeMap` and `SkipMap`, on maps grown by random
//! single inserts (no bulk-built, key-ordered node layout).
//!
//! Each timed block walks the structure several times; the figure is ns per
//! item yielded. `LatchTree`'s iterators pin nothing themselves: the guard
//! is taken once per walk, as a caller would.

use crate::measure::{Run, round_robin};
use crate::peers::Peers;
use crate::report::{Row, set_baseline};
use crate::workload::Workload;
use crate::{BTREEMAP, Config, LATCHTREE};
use std::hint::black_box;

/// The size the walks are measured at.
pub(crate) const N: usize = 4096;
/// The case labels.
pub(crate) const ITER: &str = "iter() n=4096";
pub(crate) const RANGE: &str = "range(middle half) n=4096";
const SKIPMAP: &str = crate::lookups::SKIPMAP;

pub(crate) fn run(cfg: &Config, rows: &mut Vec<Row>) {
    let w = Workload::ranges(N, 0x6974_6572 ^ N as u64);
    let p = Peers::new(&w.ranges);
    let p = &p;
    let (lo, hi) = (w.ranges[N / 4].0, w.ranges[3 * N / 4].0);
    for (case, items_per_walk) in [(ITER, N), (RANGE, N / 2)] {
        let full = case == ITER;
        // A whole number of walks, about as many items as a lookup block.
        let walks = (cfg.iters / items_per_walk).max(1);
        let items = walks * items_per_walk;
        let mut contenders: Vec<(&'static str, Run<'_>)> = vec![
            (
                BTREEMAP,
                Box::new(move |_, _| {
                    let mut acc = 0u64;
                    for _ in 0..walks {
                        if full {
                            for (k, _) in black_box(&p.map).iter() {
                                acc = acc.wrapping_add(*k);
                            }
                        } else {
                            for (k, _) in black_box(&p.map).range(lo..hi) {
                                acc = acc.wrapping_add(*k);
                            }
                        }
                    }
                    acc
                }),
            ),
            (
                LATCHTREE,
                Box::new(move |_, _| {
                    let mut acc = 0u64;
                    for _ in 0..walks {
                        let guard = latchtree::pin();
                        let tree = black_box(&p.tree);
                        if full {
                            for (k, _) in tree.iter(&guard) {
                                acc = acc.wrapping_add(*k);
                            }
                        } else {
                            for (k, _) in tree.range(lo..hi, &guard) {
                                acc = acc.wrapping_add(*k);
                            }
                        }
                    }
                    acc
                }),
            ),
            (
                SKIPMAP,
                Box::new(move |_, _| {
                    let mut acc = 0u64;
                    for _ in 0..walks {
                        let skip = black_box(&p.skip);
                        if full {
                            for e in skip.iter() {
                                acc = acc.wrapping_add(*e.key());
                            }
                        } else {
                            for e in skip.range(lo..hi) {
                                acc = acc.wrapping_add(*e.key());
                            }
                        }
                    }
                    acc
                }),
            ),
        ];
        let ns = round_robin(&mut contenders, items, cfg.reps, cfg.clock, |_| 0);
        for ((name, _), ns) in contenders.iter().zip(ns) {
            rows.push(Row::new(
                "iterate",
                case.to_string(),
                N,
                name,
                ns,
                "ns/item",
            ));
        }
        set_baseline(rows, "iterate", case);
    }
}
