//! Single-threaded write costs: insert, remove, insert+remove, replace and
//! batches of 8. Every write is visible to readers when it returns
//! (left-right publishes after each one).

use crate::lookups::{ARC_SWAP, LEFT_RIGHT, PL_RW, SCC, SKIPMAP, STD_RW};
use crate::measure::Stopwatch;
use crate::peers::Op;
use crate::report::{Row, set_baseline};
use crate::workload::Workload;
use crate::{BTREEMAP, Config, LATCHTREE};
use arc_swap::ArcSwap;
use crossbeam_skiplist::SkipMap;
use latchtree::{AddrIndex, LatchTree, ModuleId};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;

/// A structure under write test. `slot` identifies a fresh key (so that the
/// address index can find the module id to remove without a side lookup).
trait Writes {
    fn insert(&mut self, slot: usize, k: u64);
    fn remove(&mut self, slot: usize, k: u64);
    /// Overwrites an existing key's value; `false` if unsupported.
    fn replace(&mut self, k: u64, v: u64) -> bool;
    /// Inserts `keys` in one atomic write; `false` if unsupported.
    fn batch_insert(&mut self, first_slot: usize, keys: &[u64]) -> bool;
    fn batch_remove(&mut self, first_slot: usize, keys: &[u64]);
}

impl Writes for LatchTree<u64, u64> {
    fn insert(&mut self, _: usize, k: u64) {
        LatchTree::insert(self, k, k + 1);
    }
    fn remove(&mut self, _: usize, k: u64) {
        LatchTree::remove(self, &k);
    }
    fn replace(&mut self, k: u64, v: u64) -> bool {
        LatchTree::insert(self, k, v);
        true
    }
    fn batch_insert(&mut self, _: usize, keys: &[u64]) -> bool {
        self.write(|b| {
            for &k in keys {
                b.insert(k, k + 1);
            }
        });
        true
    }
    fn batch_remove(&mut self, _: usize, keys: &[u64]) {
        self.write(|b| {
            for k in keys {
                b.remove(k);
            }
        });
    }
}

/// The address index: a fresh key `k` is the one-byte range `[k, k+1)`;
/// a batch is one module owning 8 ranges.
struct AddrWrites {
    index: AddrIndex<()>,
    ids: Vec<Option<ModuleId>>,
}

impl Writes for AddrWrites {
    fn insert(&mut self, slot: usize, k: u64) {
        self.ids[slot] = Some(self.index.insert(k..k + 1, ()).expect("fresh range"));
    }
    fn remove(&mut self, slot: usize, _: u64) {
        let id = self.ids[slot].take().expect("inserted");
        assert!(self.index.remove(id).is_some());
    }
    fn replace(&mut self, _: u64, _: u64) -> bool {
        false
    }
    fn batch_insert(&mut self, first_slot: usize, keys: &[u64]) -> bool {
        let id = self
            .index
            .insert_module(keys.iter().map(|&k| k..k + 1), ())
            .expect("fresh ranges");
        self.ids[first_slot] = Some(id);
        true
    }
    fn batch_remove(&mut self, first_slot: usize, _: &[u64]) {
        let id = self.ids[first_slot].take().expect("inserted");
        assert!(self.index.remove(id).is_some());
    }
}

impl Writes for BTreeMap<u64, u64> {
    fn insert(&mut self, _: usize, k: u64) {
        BTreeMap::insert(self, k, k + 1);
    }
    fn remove(&mut self, _: usize, k: u64) {
        BTreeMap::remove(self, &k);
    }
    fn replace(&mut self, k: u64, v: u64) -> bool {
        BTreeMap::insert(self, k, v);
        true
    }
    fn batch_insert(&mut self, _: usize, keys: &[u64]) -> bool {
        for &k in keys {
            BTreeMap::insert(self, k, k + 1);
        }
        true
    }
    fn batch_remove(&mut self, _: usize, keys: &[u64]) {
        for k in keys {
            BTreeMap::remove(self, k);
        }
    }
}

/// Lock types that hand out `&mut BTreeMap`.
macro_rules! locked_writes {
    ($ty:ty, $lock:ident => $guard:expr) => {
        impl Writes for $ty {
            fn insert(&mut self, _: usize, k: u64) {
                let $lock = &*self;
                $guard.insert(k, k + 1);
            }
            fn remove(&mut self, _: usize, k: u64) {
                let $lock = &*self;
                $guard.remove(&k);
            }
            fn replace(&mut self, k: u64, v: u64) -> bool {
                let $lock = &*self;
                $guard.insert(k, v);
                true
            }
            fn batch_insert(&mut self, _: usize, keys: &[u64]) -> bool {
                let $lock = &*self;
                let mut m = $guard;
                for &k in keys {
                    m.insert(k, k + 1);
                }
                true
            }
            fn batch_remove(&mut self, _: usize, keys: &[u64]) {
                let $lock = &*self;
                let mut m = $guard;
                for k in keys {
                    m.remove(k);
                }
            }
        }
    };
}
locked_writes!(std::sync::RwLock<BTreeMap<u64, u64>>, l => l.write().unwrap_or_else(|e| e.into_inner()));
locked_writes!(parking_lot::RwLock<BTreeMap<u64, u64>>, l => l.write());

/// Copy-on-write: every write clones the whole map.
impl Writes for ArcSwap<BTreeMap<u64, u64>> {
    fn insert(&mut self, _: usize, k: u64) {
        let mut m = BTreeMap::clone(&self.load());
        m.insert(k, k + 1);
        self.store(Arc::new(m));
    }
    fn remove(&mut self, _: usize, k: u64) {
        let mut m = BTreeMap::clone(&self.load());
        m.remove(&k);
        self.store(Arc::new(m));
    }
    fn replace(&mut self, k: u64, v: u64) -> bool {
        let mut m = BTreeMap::clone(&self.load());
        m.insert(k, v);
        self.store(Arc::new(m));
        true
    }
    fn batch_insert(&mut self, _: usize, keys: &[u64]) -> bool {
        let mut m = BTreeMap::clone(&self.load());
        for &k in keys {
            m.insert(k, k + 1);
        }
        self.store(Arc::new(m));
        true
    }
    fn batch_remove(&mut self, _: usize, keys: &[u64]) {
        let mut m = BTreeMap::clone(&self.load());
        for k in keys {
            m.remove(k);
        }
        self.store(Arc::new(m));
    }
}

/// A left-right pair; a reader handle stays alive (as in real use).
struct LeftRight {
    w: left_right::WriteHandle<BTreeMap<u64, u64>, Op>,
    _r: left_right::ReadHandle<BTreeMap<u64, u64>>,
}

impl Writes for LeftRight {
    fn insert(&mut self, _: usize, k: u64) {
        self.w.append(Op::Insert(k, k + 1)).publish();
    }
    fn remove(&mut self, _: usize, k: u64) {
        self.w.append(Op::Remove(k)).publish();
    }
    fn replace(&mut self, k: u64, v: u64) -> bool {
        self.w.append(Op::Insert(k, v)).publish();
        true
    }
    fn batch_insert(&mut self, _: usize, keys: &[u64]) -> bool {
        for &k in keys {
            self.w.append(Op::Insert(k, k + 1));
        }
        self.w.publish();
        true
    }
    fn batch_remove(&mut self, _: usize, keys: &[u64]) {
        for &k in keys {
            self.w.append(Op::Remove(k));
        }
        self.w.publish();
    }
}

/// Lock-free, but no atomic batches.
impl Writes for SkipMap<u64, u64> {
    fn insert(&mut self, _: usize, k: u64) {
        SkipMap::insert(self, k, k + 1);
    }
    fn remove(&mut self, _: usize, k: u64) {
        SkipMap::remove(self, &k);
    }
    fn replace(&mut self, k: u64, v: u64) -> bool {
        SkipMap::insert(self, k, v);
        true
    }
    fn batch_insert(&mut self, _: usize, _: &[u64]) -> bool {
        false
    }
    fn batch_remove(&mut self, _: usize, _: &[u64]) {}
}

/// No upsert, no atomic batches.
impl Writes for scc::TreeIndex<u64, u64> {
    fn insert(&mut self, _: usize, k: u64) {
        scc::TreeIndex::insert_sync(self, k, k + 1).expect("fresh key");
    }
    fn remove(&mut self, _: usize, k: u64) {
        assert!(scc::TreeIndex::remove_sync(self, &k));
    }
    fn replace(&mut self, _: u64, _: u64) -> bool {
        false
    }
    fn batch_insert(&mut self, _: usize, _: &[u64]) -> bool {
        false
    }
    fn batch_remove(&mut self, _: usize, _: &[u64]) {}
}

/// Every structure, filled with `ranges`.
fn contenders(ranges: &[(u64, u64)]) -> Vec<(&'static str, Box<dyn Writes>)> {
    // Each BTreeMap-based contender grows its own map by the same inserts.
    let [mut map, mut std_map, mut pl_map, mut swap_map] = [(); 4].map(|()| BTreeMap::new());
    let tree = LatchTree::new();
    let index = AddrIndex::new();
    let (mut lr_w, lr_r) = left_right::new::<BTreeMap<u64, u64>, Op>();
    let skip = SkipMap::new();
    let scc = scc::TreeIndex::new();
    for &(s, e) in &crate::workload::shuffled(ranges) {
        for m in [&mut map, &mut std_map, &mut pl_map, &mut swap_map] {
            m.insert(s, e);
        }
        tree.insert(s, e);
        index.insert(s..e, ()).expect("disjoint");
        lr_w.append(Op::Insert(s, e));
        skip.insert(s, e);
        scc.insert_sync(s, e).expect("distinct starts");
    }
    lr_w.publish();
    vec![
        (BTREEMAP, Box::new(map)),
        (LATCHTREE, Box::new(tree)),
        (
            ADDR_LOOKUP_WRITES,
            Box::new(AddrWrites {
                index,
                ids: vec![None; ranges.len()],
            }),
        ),
        (STD_RW, Box::new(std::sync::RwLock::new(std_map))),
        (PL_RW, Box::new(parking_lot::RwLock::new(pl_map))),
        (ARC_SWAP, Box::new(ArcSwap::from_pointee(swap_map))),
        (LEFT_RIGHT, Box::new(LeftRight { w: lr_w, _r: lr_r })),
        (SKIPMAP, Box::new(skip)),
        (SCC, Box::new(scc)),
    ]
}

/// The address index's name in the write rows.
pub(crate) const ADDR_LOOKUP_WRITES: &str = "latchtree AddrIndex (range/module)";

const OPS: [&str; 6] = [
    "insert",
    "remove",
    "insert+remove",
    "replace",
    "batch8 insert",
    "batch8 remove",
];

/// Times every op on every structure at each size.
pub(crate) fn run(cfg: &Config, rows: &mut Vec<Row>) {
    for &n in &cfg.write_sizes {
        let w = Workload::ranges(n, 0x7772_6974 ^ n as u64);
        // Fresh keys (and existing ones, for replace) in random order, so a
        // window of them is spread over the whole tree.
        let fresh: Vec<u64> = crate::workload::shuffled(&w.ranges)
            .iter()
            .map(|&(_, e)| e)
            .collect();
        let existing: Vec<u64> = crate::workload::shuffled(&w.ranges)
            .iter()
            .map(|&(s, _)| s)
            .collect();
        let mut cs = contenders(&w.ranges);
        let k = (n / 2).clamp(8, 256) / 8 * 8;
        let mut samples = vec![vec![Vec::new(); OPS.len()]; cs.len()];
        for rep in 0..=cfg.write_reps {
            let start = (rep * k) % (n - k + 1);
            let keys = &fresh[start..start + k];
            let existing = &existing[start..start + k];
            for (ci, (_, c)) in cs.iter_mut().enumerate() {
                let mut t = [None; OPS.len()];
                // Untimed pass: bring this structure (and the allocator) back
                // into cache after the other contenders ran.
                for (i, &key) in keys.iter().enumerate() {
                    c.insert(start + i, key);
                    c.remove(start + i, key);
                }
                // Pairs first: the size stays at n, as in steady state.
                let clock = Stopwatch::start(cfg.clock);
                for (i, &key) in keys.iter().enumerate() {
                    c.insert(start + i, key);
                    c.remove(start + i, key);
                }
                t[2] = Some(clock.ns_per(k));
                let clock = Stopwatch::start(cfg.clock);
                for (i, &key) in keys.iter().enumerate() {
                    c.insert(start + i, key);
                }
                t[0] = Some(clock.ns_per(k));
                let clock = Stopwatch::start(cfg.clock);
                for (i, &key) in keys.iter().enumerate() {
                    c.remove(start + i, key);
                }
                t[1] = Some(clock.ns_per(k));
                let clock = Stopwatch::start(cfg.clock);
                let mut supported = true;
                for &key in existing {
                    supported &= c.replace(key, black_box(key ^ rep as u64));
                }
                t[3] = supported.then(|| clock.ns_per(k));
                let clock = Stopwatch::start(cfg.clock);
                let mut supported = true;
                for (i, batch) in keys.chunks(8).enumerate() {
                    supported &= c.batch_insert(start + 8 * i, batch);
                }
                if supported {
                    t[4] = Some(clock.ns_per(k / 8));
                    let clock = Stopwatch::start(cfg.clock);
                    for (i, batch) in keys.chunks(8).enumerate() {
                        c.batch_remove(start + 8 * i, batch);
                    }
                    t[5] = Some(clock.ns_per(k / 8));
                }
                // The first round is a warm-up.
                if rep > 0 {
                    for (op, x) in t.iter().enumerate() {
                        if let Some(x) = x {
                            samples[ci][op].push(*x);
                        }
                    }
                }
            }
        }
        for (op, op_name) in OPS.iter().enumerate() {
            let case = format!("{op_name} n={n}");
            for (ci, (name, _)) in cs.iter().enumerate() {
                let s = &mut samples[ci][op];
                if !s.is_empty() {
                    let unit = if op >= 4 { "ns/batch" } else { "ns/op" };
                    rows.push(Row::new(
                        "write",
                        case.clone(),
                        n,
                        name,
                        crate::measure::median(s),
                        unit,
                    ));
                }
            }
            set_baseline(rows, "write", &case);
        }
    }
}
