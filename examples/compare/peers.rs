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
    /// Keyed by range end, valued by start (see [`scc_contains`]).
    pub(crate) scc: scc::TreeIndex<u64, u64>,
}

impl Peers {
    pub(crate) fn new(ranges: &[(u64, u64)]) -> Self {
        let index = AddrIndex::new();
        for &(s, e) in ranges {
            index.insert(s..e, ()).expect("disjoint ranges");
        }
        let tree = LatchTree::new();
        for &(s, e) in ranges {
            tree.insert(s, e);
        }
        let map: BTreeMap<u64, u64> = ranges.iter().copied().collect();
        let (mut lr_write, lr_read) = left_right::new::<BTreeMap<u64, u64>, Op>();
        for &(s, e) in ranges {
            lr_write.append(Op::Insert(s, e));
        }
        lr_write.publish();
        let skip = SkipMap::new();
        let scc = scc::TreeIndex::new();
        for &(s, e) in ranges {
            skip.insert(s, e);
            scc.insert(e, s).expect("distinct ends");
        }
        Peers {
            index,
            tree,
            vec: ranges.to_vec(),
            std_rw: std::sync::RwLock::new(map.clone()),
            pl_rw: parking_lot::RwLock::new(map.clone()),
            swap: ArcSwap::from_pointee(map.clone()),
            map,
            _lr_write: lr_write,
            lr_read,
            skip,
            scc,
        }
    }
}
