//! Memory per entry for `u64 → u64`, counted by the global allocator:
//! bytes requested and blocks held after inserting `n` random keys one by
//! one (malloc's own per-block overhead, typically 8–16 bytes, comes on top
//! and weighs most on one-block-per-entry structures).

use crate::alloc_count::{allocations, measure};
use crate::lookups::{SCC, SKIPMAP};
use crate::peers::Op;
use crate::report::{Row, set_baseline};
use crate::workload::SplitMix64;
use crate::writes::ADDR_LOOKUP_WRITES;
use crate::{BTREEMAP, Config, LATCHTREE};
use crossbeam_skiplist::SkipMap;
use latchtree::{AddrIndex, LatchTree};
use std::collections::BTreeMap;

/// Left-right keeps two maps.
const LR_NAME: &str = "left-right BTreeMap (2 copies)";
/// The address index grown in ascending address order (a loader's order).
pub(crate) const ADDR_ASCENDING: &str = "latchtree AddrIndex (ascending inserts)";
/// Bytes an index holds after growing to n, removing 99 % and flushing,
/// over what a fresh index of the remaining 1 % holds.
pub(crate) const AFTER_REMOVAL: &str = "latchtree AddrIndex after 99% removed + synchronize";
/// The same after [`AddrIndex::shrink_to_fit`].
pub(crate) const AFTER_SHRINK: &str = "latchtree AddrIndex after 99% removed + shrink_to_fit";
/// The case of the after-removal rows.
pub(crate) const AFTER_CASE: &str = "held / fresh index of the 1% left";
/// Allocator calls per `insert` + `remove` pair.
pub(crate) const PAIR_CASE: &str = "allocations per insert+remove, n=84";

pub(crate) fn run(cfg: &Config, rows: &mut Vec<Row>) {
    let n = cfg.memory_n;
    let mut rng = SplitMix64(0x6d65_6d00);
    let keys: Vec<u64> = (0..n).map(|_| rng.next_u64() >> 1).collect();
    // Pin once first: crossbeam-epoch registers the thread (allocates) on
    // its first pin, which is not the tree's memory.
    drop(latchtree::pin());

    let mut record = |name: &'static str, bytes: isize, blocks: isize| {
        let mut row = Row::new(
            "memory",
            format!("u64->u64, n={n}"),
            n,
            name,
            bytes as f64 / n as f64,
            "B/entry",
        );
        row.extra = Some(blocks as f64 / n as f64);
        rows.push(row);
    };

    let (m, b, k) = measure(|| {
        let mut m = BTreeMap::new();
        for &x in &keys {
            m.insert(x, x);
        }
        m
    });
    assert_eq!(m.len(), keys.len());
    drop(m);
    record(BTREEMAP, b, k);

    let (t, b, k) = measure(|| {
        let t = LatchTree::new();
        for &x in &keys {
            t.insert(x, x);
        }
        t
    });
    assert_eq!(t.len(), keys.len());
    drop(t);
    record(LATCHTREE, b, k);

    let (s, b, k) = measure(|| {
        let s = SkipMap::new();
        for &x in &keys {
            s.insert(x, x);
        }
        s
    });
    assert_eq!(s.len(), keys.len());
    drop(s);
    record(SKIPMAP, b, k);

    let (s, b, k) = measure(|| {
        let s = scc::TreeIndex::new();
        for &x in &keys {
            s.insert_sync(x, x).expect("distinct keys");
        }
        s
    });
    assert_eq!(s.len(), keys.len());
    drop(s);
    record(SCC, b, k);

    let (lr, b, k) = measure(|| {
        let (mut w, r) = left_right::new::<BTreeMap<u64, u64>, Op>();
        w.publish(); // past the initial sync, so both copies grow by ops
        for &x in &keys {
            w.append(Op::Insert(x, x));
        }
        w.publish();
        w.publish(); // the second copy absorbs the ops, the oplog empties
        (w, r)
    });
    assert_eq!(lr.1.enter().expect("writer alive").len(), keys.len());
    drop(lr);
    record(LR_NAME, b, k);

    // The address index: one one-byte range per entry, in random order.
    let (ix, b, k) = measure(|| {
        let ix = AddrIndex::new();
        for &x in &keys {
            ix.insert(x * 2..x * 2 + 1, ()).expect("distinct keys");
        }
        ix
    });
    assert_eq!(ix.range_count(), keys.len());
    drop(ix);
    record(ADDR_LOOKUP_WRITES, b, k);

    // The same, grown in ascending address order.
    let (ix, b, k) = measure(|| {
        let ix = AddrIndex::new();
        for x in 0..n as u64 {
            ix.insert(x * 2..x * 2 + 1, ()).expect("distinct keys");
        }
        ix
    });
    assert_eq!(ix.range_count(), n);
    drop(ix);
    record(ADDR_ASCENDING, b, k);

    set_baseline(rows, "memory", &format!("u64->u64, n={n}"));

    after_removal(&keys, rows);
    allocations_per_pair(rows);
}

/// Grows an index to `keys.len()` ranges (random order), removes all but
/// every 100th and synchronizes; then the bytes it still holds, against a
/// fresh index of the ranges left (the ratio is the row's value).
fn after_removal(keys: &[u64], rows: &mut Vec<Row>) {
    let kept: Vec<u64> = keys.iter().copied().step_by(100).collect();
    let ((), fresh, _) = {
        let (ix, b, k) = measure(|| {
            let ix = AddrIndex::new();
            for &x in &kept {
                ix.insert(x * 2..x * 2 + 1, ()).expect("distinct keys");
            }
            ix
        });
        drop(ix);
        ((), b, k)
    };
    let grow_and_remove = || {
        let ix = AddrIndex::new();
        let ids: Vec<_> = keys
            .iter()
            .map(|&x| ix.insert(x * 2..x * 2 + 1, ()).expect("distinct keys"))
            .collect();
        for (i, id) in ids.into_iter().enumerate() {
            if i % 100 != 0 {
                drop(ix.remove(id));
            }
        }
        ix.synchronize();
        assert_eq!(ix.range_count(), kept.len());
        ix
    };
    let mut row = |name, held: isize| {
        let mut row = Row::new(
            "memory",
            AFTER_CASE.to_string(),
            kept.len(),
            name,
            held as f64 / fresh as f64,
            "x fresh",
        );
        row.extra = Some(held as f64 / kept.len() as f64);
        rows.push(row);
    };
    let (ix, held, _) = measure(grow_and_remove);
    drop(ix);
    row(AFTER_REMOVAL, held);
    let (ix, held, _) = measure(|| {
        let mut ix = grow_and_remove();
        ix.shrink_to_fit();
        ix
    });
    drop(ix);
    row(AFTER_SHRINK, held);
}

/// Allocator calls per `insert` (a one-range module) + `remove` pair at 84
/// modules, after a warm-up, against `BTreeMap::insert` + `remove`.
fn allocations_per_pair(rows: &mut Vec<Row>) {
    const N: u64 = 84;
    const PAIRS: u64 = 10_000;
    let mut row = |name, calls: isize| {
        rows.push(Row::new(
            "memory",
            PAIR_CASE.to_string(),
            N as usize,
            name,
            calls as f64 / PAIRS as f64,
            "allocs",
        ))
    };
    let ix = AddrIndex::new();
    for i in 0..N {
        ix.insert(i * 0x1000..i * 0x1000 + 0x800, i)
            .expect("disjoint");
    }
    let pair = |i: u64| {
        let r = N * 0x1000 + 0x100..N * 0x1000 + 0x200;
        let id = ix.insert(r, i).expect("disjoint");
        drop(ix.remove(id));
    };
    (0..1000).for_each(pair);
    row(
        ADDR_LOOKUP_WRITES,
        allocations(|| (0..PAIRS).for_each(pair)),
    );
    let mut m = BTreeMap::new();
    for i in 0..N {
        m.insert(i * 0x1000, i);
    }
    let mut pair = |i: u64| {
        m.insert(N * 0x1000 + 0x100, i);
        m.remove(&(N * 0x1000 + 0x100));
    };
    (0..1000).for_each(&mut pair);
    row(BTREEMAP, allocations(|| (0..PAIRS).for_each(&mut pair)));
}
