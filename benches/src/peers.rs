//! Every structure of the comparison, filled with the same ranges, and the
//! one query they all answer: the start of the range containing an address.

use crate::workload::Growth;
use arc_swap::ArcSwap;
use crossbeam_skiplist::SkipMap;
use latchtree::{AddrIndex, LatchTree};
use left_right::Absorb;
use std::collections::BTreeMap;
use std::ops::Bound;

/// A left-right operation on a `BTreeMap<u64, u64>`.
pub enum Op {
    Insert(u64, u64),
    Remove(u64),
}

impl Absorb<Op> for BTreeMap<u64, u64> {
    fn absorb_first(&mut self, op: &mut Op, _: &Self) {
        match *op {
            Op::Insert(k, v) => {
                self.insert(k, v);
            }
            Op::Remove(k) => {
                self.remove(&k);
            }
        }
    }

    fn sync_with(&mut self, first: &Self) {
        self.clone_from(first);
    }
}

/// The reference answer: predecessor of `a`, then an end check.
#[inline]
pub fn btree_contains(map: &BTreeMap<u64, u64>, a: u64) -> Option<u64> {
    map.range(..=a)
        .next_back()
        .filter(|&(_, &e)| a < e)
        .map(|(&s, _)| s)
}

/// `LatchTree::upper_bound` then an end check.
#[inline]
pub fn latch_contains(tree: &LatchTree<u64, u64>, a: u64, guard: &latchtree::Guard) -> Option<u64> {
    tree.upper_bound(Bound::Included(&a), guard)
        .filter(|&(_, &e)| a < e)
        .map(|(&s, _)| s)
}

/// `SkipMap::upper_bound` then an end check.
#[inline]
pub fn skip_contains(skip: &SkipMap<u64, u64>, a: u64) -> Option<u64> {
    skip.upper_bound(Bound::Included(&a))
        .filter(|e| a < *e.value())
        .map(|e| *e.key())
}

/// `scc::TreeIndex::locate` (scc 3: the closest entry at or below `a`)
/// then an end check.
#[inline]
pub fn scc_contains(scc: &scc::TreeIndex<u64, u64>, a: u64, guard: &scc::Guard) -> Option<u64> {
    use scc::tree_index::Proximity;
    let below = match scc.locate(&a, guard) {
        Proximity::Exact(it) | Proximity::Between(it) => it.get(),
        Proximity::Smaller(it) => it.get_back(),
        Proximity::Larger(_) | Proximity::Empty => None,
    };
    below.filter(|&(_, &e)| a < e).map(|(&s, _)| s)
}

/// A sorted array and binary search: the floor for a read-only structure.
#[inline]
pub fn vec_contains(vec: &[(u64, u64)], a: u64) -> Option<u64> {
    let i = vec.partition_point(|&(s, _)| s <= a);
    i.checked_sub(1)
        .map(|i| vec[i])
        .filter(|&(_, e)| a < e)
        .map(|(s, _)| s)
}

/// All structures, each holding `start → end` for every range.
pub struct Peers {
    pub index: AddrIndex<()>,
    pub tree: LatchTree<u64, u64>,
    pub map: BTreeMap<u64, u64>,
    pub vec: Vec<(u64, u64)>,
    pub std_rw: std::sync::RwLock<BTreeMap<u64, u64>>,
    pub pl_rw: parking_lot::RwLock<BTreeMap<u64, u64>>,
    pub swap: ArcSwap<BTreeMap<u64, u64>>,
    /// Kept alive: readers get `None` once the writer is gone.
    pub lr_write: left_right::WriteHandle<BTreeMap<u64, u64>, Op>,
    pub lr_read: left_right::ReadHandle<BTreeMap<u64, u64>>,
    pub skip: SkipMap<u64, u64>,
    pub scc: scc::TreeIndex<u64, u64>,
}

impl Peers {
    /// Every structure grows by single inserts in one random order (no
    /// bulk-built B-tree nodes, no sorted-insertion tree shapes).
    pub fn new(ranges: &[(u64, u64)]) -> Self {
        Peers::grown(ranges, Growth::Random)
    }

    /// Every structure grows by single inserts in the order `growth` gives
    /// (the same order for all).
    pub fn grown(ranges: &[(u64, u64)], growth: Growth) -> Self {
        let order = growth.arrange(ranges);
        let index = AddrIndex::new();
        let tree = LatchTree::new();
        // Each BTreeMap-based peer grows its own map by the same inserts (a
        // clone would be compactly allocated, unlike a map grown by updates).
        let [mut map, mut std_map, mut pl_map, mut swap_map] = [(); 4].map(|()| BTreeMap::new());
        let (mut lr_write, lr_read) = left_right::new::<BTreeMap<u64, u64>, Op>();
        let skip = SkipMap::new();
        let scc = scc::TreeIndex::new();
        for &(s, e) in &order {
            index.insert(s..e, ()).expect("disjoint ranges");
            tree.insert(s, e);
            for m in [&mut map, &mut std_map, &mut pl_map, &mut swap_map] {
                m.insert(s, e);
            }
            lr_write.append(Op::Insert(s, e));
            skip.insert(s, e);
            scc.insert_sync(s, e).expect("distinct starts");
        }
        lr_write.publish();
        let mut vec = ranges.to_vec();
        vec.sort_unstable();
        Peers {
            index,
            tree,
            vec,
            std_rw: std::sync::RwLock::new(std_map),
            pl_rw: parking_lot::RwLock::new(pl_map),
            swap: ArcSwap::from_pointee(swap_map),
            map,
            lr_write,
            lr_read,
            skip,
            scc,
        }
    }
}
