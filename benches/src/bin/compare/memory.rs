//! Memory per entry for `u64 → u64`, counted by the global allocator:
//! bytes requested and blocks held after inserting `n` random keys one by
//! one (malloc's own per-block overhead, typically 8–16 bytes, comes on top
//! and weighs most on one-block-per-entry structures).

use crate::alloc_count::measure;
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

    set_baseline(rows, "memory", &format!("u64->u64, n={n}"));
}
