//! Instructions per write pair, for callgrind: `insert` of a one-range
//! module plus its `remove` at 84 modules (the kernel's module count), after
//! a warm-up, against the insert and remove of one key beside 84 others in
//! a `LatchTree` and in a `BTreeMap`. Uses only API that earlier releases
//! have too, so the same file measures the previous `main`.
//!
//! ```text
//! cargo build --release -p latchtree-benches --bin pair
//! valgrind --tool=callgrind --toggle-collect='*index_pairs*' target/release/pair
//! valgrind --tool=callgrind --toggle-collect='*latch_pairs*' target/release/pair
//! valgrind --tool=callgrind --toggle-collect='*btree_pairs*' target/release/pair
//! ```
//!
//! Divide the collected instructions (`Collected` in callgrind's summary) by
//! [`PAIRS`], which the binary prints.
//!
//! Those pairs churn one key past the last of the 84, which flatters the
//! ratios: a `BTreeMap` then splits and merges its last leaf every pair
//! (613 instructions a pair against 505 in the middle of the map). The
//! *spread* pairs (`index_spread_pairs`, `latch_spread_pairs`,
//! `btree_spread_pairs`) churn a key in a different gap each pair, all over
//! the tree, as a workload that is not append-only does:
//!
//! ```text
//! valgrind --tool=callgrind --toggle-collect='*latch_spread_pairs*' target/release/pair
//! ```
//!
//! With an argument (`ascending`, `descending` or `random`) it instead grows
//! an `AddrIndex` to [`GROWN`] one-range modules by single inserts in that
//! order (`benches/src/workload.rs`'s `Growth`), in `grow_index`:
//!
//! ```text
//! valgrind --tool=callgrind --toggle-collect='*grow_index*' target/release/pair random
//! ```
//!
//! and prints how many inserts it made to divide by.
//!
//! With `lookups ORDER` (`ascending`, `descending`, `random` or `bulk`: one
//! batch) it grows an `AddrIndex` to [`LOOKED_UP`] ranges of
//! `Workload::ranges` in that order, then looks up a stream of [`STREAM`]
//! distinct addresses, in `lookup_stream`, for callgrind's cache simulation:
//! what a lookup costs readers in instructions and simulated misses, a figure
//! that does not drift with a shared machine's load as wall time does:
//!
//! ```text
//! valgrind --tool=callgrind --cache-sim=yes --toggle-collect='*lookup_stream*' target/release/pair lookups random
//! ```

use latchtree::{AddrIndex, LatchTree};
use latchtree_benches::workload::{Growth, Workload};
use std::collections::BTreeMap;
use std::hint::black_box;

/// Modules registered besides the churned one.
const N: u64 = 84;
/// Measured pairs.
const PAIRS: u64 = 10_000;
/// Pairs before measuring.
const WARM_UP: u64 = 1_000;

#[inline(never)]
fn index_pair(ix: &AddrIndex<u64>, i: u64) {
    let id = ix
        .insert(N * 0x1000 + 0x100..N * 0x1000 + 0x200, i)
        .expect("disjoint");
    drop(black_box(ix.remove(id)));
}

#[inline(never)]
fn index_pairs(ix: &AddrIndex<u64>) {
    for i in 0..PAIRS {
        index_pair(ix, i);
    }
}

#[inline(never)]
fn latch_pair(t: &LatchTree<u64, u64>, i: u64) {
    t.insert(N * 0x1000 + 0x100, i);
    black_box(t.remove(&(N * 0x1000 + 0x100)));
}

#[inline(never)]
fn latch_pairs(t: &LatchTree<u64, u64>) {
    for i in 0..PAIRS {
        latch_pair(t, i);
    }
}

#[inline(never)]
fn btree_pair(m: &mut BTreeMap<u64, u64>, i: u64) {
    m.insert(N * 0x1000 + 0x100, i);
    black_box(m.remove(&(N * 0x1000 + 0x100)));
}

#[inline(never)]
fn btree_pairs(m: &mut BTreeMap<u64, u64>) {
    for i in 0..PAIRS {
        btree_pair(m, i);
    }
}

/// Where the `i`th pair of a spread run churns: in the gap after one of the
/// [`N`] registered ranges (keys), a different one each pair in turn, so
/// that the churned key lies anywhere in the tree rather than past its
/// last key.
fn spread(i: u64) -> u64 {
    (i * 37 % N) * 0x1000 + 0x900
}

#[inline(never)]
fn index_spread_pairs(ix: &AddrIndex<u64>) {
    for i in 0..PAIRS {
        let at = spread(i);
        let id = ix.insert(at..at + 0x100, i).expect("disjoint");
        drop(black_box(ix.remove(id)));
    }
}

#[inline(never)]
fn latch_spread_pairs(t: &LatchTree<u64, u64>) {
    for i in 0..PAIRS {
        t.insert(spread(i), i);
        black_box(t.remove(&spread(i)));
    }
}

#[inline(never)]
fn btree_spread_pairs(m: &mut BTreeMap<u64, u64>) {
    for i in 0..PAIRS {
        m.insert(spread(i), i);
        black_box(m.remove(&spread(i)));
    }
}

/// Modules a growth ends with.
const GROWN: u64 = 65_536;

#[inline(never)]
fn grow_index(ix: &AddrIndex<u64>, ranges: &[(u64, u64)]) {
    for (i, &(start, end)) in ranges.iter().enumerate() {
        black_box(ix.insert(start..end, i as u64).expect("disjoint"));
    }
}

/// Ranges a `lookups` run grows to.
const LOOKED_UP: usize = 262_144;
/// Distinct addresses a `lookups` run looks up.
const STREAM: usize = 1 << 20;

#[inline(never)]
fn lookup_stream(ix: &AddrIndex<u64>, addrs: &[u64]) -> usize {
    addrs.iter().filter(|&&a| ix.lookup(a).is_some()).count()
}

/// `pair lookups ORDER`: see the module docs.
fn lookups(order: &str) {
    let w = Workload::ranges(LOOKED_UP, 0x6c6f_6f6b ^ LOOKED_UP as u64);
    let ix = AddrIndex::new();
    if order == "bulk" {
        ix.write(|b| {
            for (i, &(s, e)) in w.ranges.iter().enumerate() {
                b.insert(s..e, i as u64).expect("disjoint");
            }
        });
    } else {
        let growth = Growth::ALL
            .into_iter()
            .find(|g| g.name() == order)
            .unwrap_or_else(|| {
                panic!("unknown order {order:?}: ascending, descending, random or bulk")
            });
        grow_index(&ix, &growth.arrange(&w.ranges));
    }
    let addrs = w.stream(STREAM, 0x7374_7265);
    let hits = black_box(lookup_stream(&ix, &addrs));
    println!(
        "{STREAM} lookups ({hits} hits) at {LOOKED_UP} ranges, {order}; {}",
        latchtree_benches::machine::describe()
    );
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("lookups") {
        let order = std::env::args().nth(2).unwrap_or_else(|| "random".into());
        return lookups(&order);
    }
    if let Some(order) = std::env::args().nth(1) {
        let growth = Growth::ALL
            .into_iter()
            .find(|g| g.name() == order)
            .unwrap_or_else(|| panic!("unknown order {order:?}: ascending, descending or random"));
        let ranges: Vec<(u64, u64)> = (0..GROWN)
            .map(|i| (i * 0x1000, i * 0x1000 + 0x800))
            .collect();
        let ix = AddrIndex::new();
        grow_index(&ix, &growth.arrange(&ranges));
        println!(
            "{GROWN} inserts, {}; {}",
            growth.name(),
            latchtree_benches::machine::describe()
        );
        return;
    }
    let ix = AddrIndex::new();
    let t = LatchTree::new();
    let mut m = BTreeMap::new();
    for i in 0..N {
        ix.insert(i * 0x1000..i * 0x1000 + 0x800, i)
            .expect("disjoint");
        t.insert(i * 0x1000, i);
        m.insert(i * 0x1000, i);
    }
    for i in 0..WARM_UP {
        index_pair(&ix, i);
        latch_pair(&t, i);
        btree_pair(&mut m, i);
    }
    index_pairs(&ix);
    latch_pairs(&t);
    btree_pairs(&mut m);
    index_spread_pairs(&ix);
    latch_spread_pairs(&t);
    btree_spread_pairs(&mut m);
    println!(
        "{PAIRS} pairs each; {}",
        latchtree_benches::machine::describe()
    );
}
