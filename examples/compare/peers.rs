//! Every structure of the comparison, filled with the same ranges, and the
//! one query they all answer: the start of the range containing an address.

use arc_swap::ArcSwap;
use crossbeam_skiplist::SkipMap;
use latchtree::{AddrIndex, LatchTree};
use left_right::Absorb;
use std::collections::BTreeMap;
use std::ops::Bound;

/// A left-right operation on a `BTreeMap<u64, u64>`.
pub(crate) enum Op {
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
pub(crate) fn btree_contains(map: &BTreeMap<u64, u64>, a: u64) -> Option<u64> {
    map.range(..=a)
        .next_back()
        .filter(|&(_, &e)| a < e)
        .map(|(&s, _)| s)
}

/// `LatchTree::upper_bound` then an end check.
#[inline]
pub(crate) fn latch_contains(
    tree: &LatchTree<u64, u64>,
    a: u64,
    guard: &latchtree::Guard,
) -> Option<u64> {
    tree.upper_bound(Bound::Included(&a), guard)
        .filter(|&(_, &e)| a < e)
        .map(|(&s, _)| s)
}

/// `SkipMap::upper_bound` then an end check.
#[inline]
pub(crate) fn skip_contains(skip: &SkipMap<u64, u64>, a: u64) -> Option<u64> {
    skip.upper_bound(Bound::Included(&a))
        .filter(|e| a < *e.value())
        .map(|e| *e.key())
}

/// `scc::TreeIndex` 2.x has no predecessor query (its range iterator only
/// goes forward), so its ranges are keyed by *end*: the first range whose
/// end is above `a` is the only candidate, given disjoint ranges.
#[inline]
pub(crate) fn scc_contains(
    scc: &scc::TreeIndex<u64, u64>,
    a: u64,
    guard: &scc::ebr::Guard,
) -> Option<u64> {
    scc.range((Bound::Excluded(a), Bound::Unbounded), guard)
        .next()
        .filter(|&(_, &s)| s <= a)
        .map(|(_, &s)| s)
}

/// A sorted array and binary search: the floor for a read-only structure.
#[inline]
pub(crate) fn vec_contains(vec: &[(u64, u64)], a: u64) -> Option<u64> {
    let i = vec.partition_point(|&(s, _)| s <= a);
    i.checked_sub(1)
        .map(|i| vec[i])
        .filter(|&(_, e)| a < e)
        .map(|(s, _)| s)
}

/// All structures, each holding `start → end` for every range.
pub(crate) struct Peers {
    pub(crate) index: AddrIndex<()>,
    pub(crate) tree: LatchTree<u64, u64>,
    pub(crate) map: BTreeMap<u64, u64>,
    pub(crate) vec: Vec<(u64, u64)>,
    pub(crate) std_rw: std::sync::RwLock<BTreeMap<u64, u64>>,
    pub(crate) pl_rw: parking_lot::RwLock<BTreeMap<u64, u64>>,
    pub(crate) swap: ArcSwap<BTreeMap<u64, u64>>,
    /// Kept alive: readers get `None` once the writer is gone.
    pub(crate) _lr_write: left_right::WriteHandle<BTreeMap<u64, u64>, Op>,
    pub(crate) lr_read: left_right::ReadHandle<BTreeMap<u64, u64>>,
    pub(crate) skip: SkipMap<u64, u64>,
    /// Keyed by range end, valued by start (see [`scc_contains`]); empty
    /// unless built `with_scc`.
    pub(crate) scc: scc::TreeIndex<u64, u64>,
}

impl Peers {
    /// `with_scc`: also fill the `scc` index (slow to query at large n).
    pub(crate) fn new(ranges: &[(u64, u64)], with_scc: bool) -> Self {
        let order = crate::workload::shuffled(ranges);
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
            if with_scc {
                scc.insert(e, s).expect("distinct ends");
            }
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
            _lr_write: lr_write,
            lr_read,
            skip,
            scc,
        }
    }
}
