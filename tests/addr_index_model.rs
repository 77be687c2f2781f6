//! Model test for `AddrIndex`: random operation sequences against a
//! linear-scan oracle, with the invariant checker after every step.

use latchtree::{AddrIndex, AddrIndexError, ModuleId};
use proptest::prelude::*;
use std::ops::Range;

/// The oracle: a list of modules, each with its ranges, scanned linearly.
#[derive(Default)]
struct Oracle {
    modules: Vec<(ModuleId, Vec<Range<u64>>, u32)>,
}

impl Oracle {
    fn find(&self, addr: u64) -> Option<(Range<u64>, ModuleId, u32)> {
        self.modules.iter().find_map(|(id, rs, v)| {
            rs.iter()
                .find(|r| r.contains(&addr))
                .map(|r| (r.clone(), *id, *v))
        })
    }

    /// The error `insert_module(ranges)` must give, if any.
    fn reject(&self, ranges: &[Range<u64>]) -> Option<AddrIndexError> {
        if ranges.is_empty() {
            return Some(AddrIndexError::NoRanges);
        }
        for r in ranges {
            if r.start == r.end {
                return Some(AddrIndexError::EmptyRange(r.clone()));
            }
            if r.start > r.end {
                return Some(AddrIndexError::InvertedRange(r.clone()));
            }
        }
        let mut sorted = ranges.to_vec();
        sorted.sort_by_key(|r| r.start);
        for w in sorted.windows(2) {
            if w[0].end > w[1].start {
                return Some(AddrIndexError::SelfOverlap(w[0].clone(), w[1].clone()));
            }
        }
        for r in &sorted {
            let lowest = self
                .modules
                .iter()
                .flat_map(|(id, rs, _)| rs.iter().map(move |e| (e, id)))
                .filter(|(e, _)| e.start < r.end && r.start < e.end)
                .min_by_key(|(e, _)| e.start);
            if let Some((e, id)) = lowest {
                return Some(AddrIndexError::Overlap {
                    range: r.clone(),
                    existing: e.clone(),
                    module: *id,
                });
            }
        }
        None
    }

    fn bounds(&self) -> Option<Range<u64>> {
        let all = self.modules.iter().flat_map(|(_, rs, _)| rs.iter());
        let lo = all.clone().map(|r| r.start).min()?;
        let hi = all.map(|r| r.end).max()?;
        Some(lo..hi)
    }
}

#[derive(Clone, Debug)]
enum Op {
    Insert(Vec<Range<u64>>, u32),
    /// Remove the n-th live module (modulo), or an unknown id.
    Remove(usize),
    Lookup(u64),
}

/// Addresses cluster in a small space so that ranges collide often, plus
/// the extremes `0` and `u64::MAX`.
fn addr() -> impl Strategy<Value = u64> {
    prop_oneof![
        8 => 0..512u64,
        1 => Just(0u64),
        1 => Just(u64::MAX),
        1 => (u64::MAX - 64)..=u64::MAX,
    ]
}

fn range() -> impl Strategy<Value = Range<u64>> {
    prop_oneof![
        6 => (0..500u64, 1..40u64).prop_map(|(s, l)| s..s + l),
        1 => (addr(), addr()).prop_map(|(a, b)| a..b),
        1 => ((u64::MAX - 64)..u64::MAX).prop_map(|s| s..u64::MAX),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (prop::collection::vec(range(), 0..5), any::<u32>()).prop_map(|(r, v)| Op::Insert(r, v)),
        2 => any::<usize>().prop_map(Op::Remove),
        4 => addr().prop_map(Op::Lookup),
    ]
}

fn run(ops: Vec<Op>) {
    let index = AddrIndex::new();
    let mut oracle = Oracle::default();
    let mut removed = Vec::new();
    for op in ops {
        match op {
            Op::Insert(ranges, v) => {
                let want = oracle.reject(&ranges);
                let before = index.snapshot();
                match index.insert_module(ranges.clone(), v) {
                    Ok(id) => {
                        assert_eq!(want, None, "accepted {ranges:?}");
                        assert!(oracle.modules.iter().all(|m| m.0 < id), "ids increase");
                        assert!(!removed.contains(&id), "ids are never reused");
                        let mut sorted = ranges;
                        sorted.sort_by_key(|r| r.start);
                        assert_eq!(index.ranges_of(id).as_deref(), Some(&sorted[..]));
                        oracle.modules.push((id, sorted, v));
                    }
                    Err(e) => {
                        assert_eq!(Some(e), want, "for {ranges:?}");
                        assert_eq!(
                            index.snapshot(),
                            before,
                            "a rejected insert changes nothing"
                        );
                    }
                }
            }
            Op::Remove(i) => {
                if oracle.modules.is_empty() || i % 5 == 0 {
                    if let Some(&gone) = removed.last() {
                        assert!(!index.remove(gone), "removing a removed id");
                    }
                } else {
                    let (id, ..) = oracle.modules.remove(i % oracle.modules.len());
                    assert!(index.remove(id));
                    assert!(!index.remove(id));
                    removed.push(id);
                }
            }
            Op::Lookup(a) => {
                let want = oracle.find(a);
                let got = index.lookup(a).map(|h| (h.range(), h.id()));
                assert_eq!(got, want.as_ref().map(|(r, id, _)| (r.clone(), *id)));
                let guard = latchtree::pin();
                let hit = index.module_address(a, &guard);
                assert_eq!(hit.map(|h| (h.range(), h.id(), *h.value())), want);
            }
        }
        index.check_invariants().unwrap();
        assert_eq!(index.bounds(), oracle.bounds());
        assert_eq!(index.module_count(), oracle.modules.len());
        let n: usize = oracle.modules.iter().map(|m| m.1.len()).sum();
        assert_eq!(index.len(), n);
        let guard = latchtree::pin();
        for (id, _, v) in &oracle.modules {
            assert_eq!(index.get(*id, &guard), Some(v));
        }
        for id in &removed {
            assert_eq!(index.get(*id, &guard), None);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 4 } else { 256 },
        ..ProptestConfig::default()
    })]

    #[test]
    fn matches_linear_scan(ops in prop::collection::vec(op(), 0..if cfg!(miri) { 25 } else { 200 })) {
        run(ops);
    }
}

#[test]
fn extremes_and_adjacent_ranges() {
    let index = AddrIndex::new();
    let top = index.insert((u64::MAX - 10)..u64::MAX, "top").unwrap();
    let bottom = index.insert(0..1, "bottom").unwrap();
    let a = index.insert_module([10..20, 20..30], "a").unwrap();
    let b = index.insert(30..40, "b").unwrap();
    assert_eq!(index.lookup(0).map(|h| h.id()), Some(bottom));
    assert_eq!(index.lookup(1), None);
    assert_eq!(index.lookup(19).map(|h| h.range()), Some(10..20));
    assert_eq!(
        index.lookup(20).map(|h| (h.id(), h.range())),
        Some((a, 20..30))
    );
    assert_eq!(index.lookup(30).map(|h| h.id()), Some(b));
    assert_eq!(index.lookup(u64::MAX - 1).map(|h| h.id()), Some(top));
    assert_eq!(index.lookup(u64::MAX), None);
    assert_eq!(index.bounds(), Some(0..u64::MAX));
    assert_eq!(
        index.insert(u64::MAX..u64::MAX, "empty"),
        Err(AddrIndexError::EmptyRange(u64::MAX..u64::MAX))
    );
    #[allow(clippy::reversed_empty_ranges)]
    let inverted = 5..4;
    assert_eq!(
        index.insert(inverted.clone(), "x"),
        Err(AddrIndexError::InvertedRange(inverted))
    );
    assert_eq!(
        index.insert_module(Vec::new(), "none"),
        Err(AddrIndexError::NoRanges)
    );
    assert_eq!(
        index.insert(25..35, "over"),
        Err(AddrIndexError::Overlap {
            range: 25..35,
            existing: 20..30,
            module: a
        })
    );
    index.check_invariants().unwrap();
}
