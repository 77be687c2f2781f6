//! Model test: random operation sequences against `BTreeMap`, with the
//! invariant checker after every operation.

use latchtree::LatchTree;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::ops::Bound;

/// One read or change inside a batch.
#[derive(Clone, Debug)]
enum Change {
    Insert(u16, u32),
    Remove(u16),
    Get(u16),
    Upper(Bound<u16>),
    Lower(Bound<u16>),
    FirstLast,
    Clear,
}

#[derive(Clone, Debug)]
enum Op {
    Insert(u16, u32),
    Remove(u16),
    Get(u16),
    Upper(Bound<u16>),
    Lower(Bound<u16>),
    Batch(Vec<Change>),
    Snapshot,
    /// Walks `range(lo, hi)` taking from the front (`true`) or the back.
    Range(Bound<u16>, Bound<u16>, Vec<bool>),
    /// `iter`, `keys` or `values` (by `which % 3`), mixing both ends.
    Iter(u8, Vec<bool>),
    GetOrInsert(u16, u32),
    RemoveEntry(u16),
    Pop(bool),
    Retain(u16),
    Clear,
    /// Rebuilds the tree by bulk load (`FromIterator`, `from_sorted`,
    /// `Extend` into an empty tree or `Clone`, by `how % 4`), plus extra pairs.
    Rebuild(u8, Vec<(u16, u32)>),
}

fn bound() -> impl Strategy<Value = Bound<u16>> {
    prop_oneof![
        key().prop_map(Bound::Included),
        key().prop_map(Bound::Excluded),
        Just(Bound::Unbounded),
    ]
}

fn key() -> impl Strategy<Value = u16> {
    0..200u16
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        4 => (key(), any::<u32>()).prop_map(|(k, v)| Change::Insert(k, v)),
        3 => key().prop_map(Change::Remove),
        2 => key().prop_map(Change::Get),
        1 => bound().prop_map(Change::Upper),
        1 => bound().prop_map(Change::Lower),
        1 => Just(Change::FirstLast),
        1 => Just(Change::Clear),
    ]
}

fn ends() -> impl Strategy<Value = Vec<bool>> {
    prop::collection::vec(any::<bool>(), 0..40)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (key(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
        5 => key().prop_map(Op::Remove),
        2 => key().prop_map(Op::Get),
        1 => bound().prop_map(Op::Upper),
        1 => bound().prop_map(Op::Lower),
        2 => prop::collection::vec(change(), 0..16).prop_map(Op::Batch),
        1 => Just(Op::Snapshot),
        3 => (bound(), bound(), ends()).prop_map(|(lo, hi, e)| Op::Range(lo, hi, e)),
        2 => (any::<u8>(), ends()).prop_map(|(w, e)| Op::Iter(w, e)),
        1 => (key(), any::<u32>()).prop_map(|(k, v)| Op::GetOrInsert(k, v)),
        1 => key().prop_map(Op::RemoveEntry),
        1 => any::<bool>().prop_map(Op::Pop),
        1 => (1..5u16).prop_map(Op::Retain),
        1 => Just(Op::Clear),
        1 => (any::<u8>(), prop::collection::vec((key(), any::<u32>()), 0..20))
            .prop_map(|(h, e)| Op::Rebuild(h, e)),
    ]
}

fn as_ref(b: &Bound<u16>) -> Bound<&u16> {
    match b {
        Bound::Included(k) => Bound::Included(k),
        Bound::Excluded(k) => Bound::Excluded(k),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// `BTreeMap::range` panics on inverted ranges; `LatchTree::range` yields
/// nothing for them. This is the model: the entries within both bounds.
fn model_range(model: &BTreeMap<u16, u32>, lo: Bound<u16>, hi: Bound<u16>) -> Vec<(u16, u32)> {
    model
        .iter()
        .filter(|(k, _)| std::ops::RangeBounds::contains(&(lo, hi), *k))
        .map(|(k, v)| (*k, *v))
        .collect()
}

/// Takes from `it`'s front or back as `ends` says, then drains the front;
/// checks each item against the expected entries consumed from both sides.
fn walk<I: DoubleEndedIterator<Item = (u16, u32)>>(it: I, want: &[(u16, u32)], ends: &[bool]) {
    let mut it = it;
    let mut want: std::collections::VecDeque<_> = want.iter().copied().collect();
    for &front in ends {
        if front {
            assert_eq!(it.next(), want.pop_front(), "next");
        } else {
            assert_eq!(it.next_back(), want.pop_back(), "next_back");
        }
    }
    assert!(it.by_ref().eq(want.into_iter()), "rest");
    assert_eq!(it.next(), None, "fused");
    assert_eq!(it.next_back(), None, "fused");
}

/// Applies a batch change to the batch and to the model; checks the reads.
fn change_both(
    batch: &mut latchtree::Batch<'_, u16, u32>,
    model: &mut BTreeMap<u16, u32>,
    c: &Change,
) {
    match *c {
        Change::Insert(k, v) => assert_eq!(batch.insert(k, v), model.insert(k, v).is_none()),
        Change::Remove(k) => assert_eq!(batch.remove(&k), model.remove(&k).is_some()),
        Change::Get(k) => {
            assert_eq!(batch.get(&k), model.get(&k));
            assert_eq!(batch.get_key_value(&k), model.get_key_value(&k));
            assert_eq!(batch.contains_key(&k), model.contains_key(&k));
        }
        Change::Upper(b) => assert_eq!(
            batch.upper_bound(as_ref(&b)),
            model.range((Bound::Unbounded, b)).next_back()
        ),
        Change::Lower(b) => assert_eq!(
            batch.lower_bound(as_ref(&b)),
            model.range((b, Bound::Unbounded)).next()
        ),
        Change::FirstLast => {
            assert_eq!(batch.first_key_value(), model.first_key_value());
            assert_eq!(batch.last_key_value(), model.last_key_value());
        }
        Change::Clear => {
            batch.clear();
            model.clear();
        }
    }
    assert_eq!(batch.len(), model.len());
    assert_eq!(batch.is_empty(), model.is_empty());
}

fn run(ops: Vec<Op>) {
    let mut tree = LatchTree::new();
    let mut model = BTreeMap::new();
    for op in ops {
        let guard = latchtree::pin();
        match op {
            Op::Insert(k, v) => assert_eq!(tree.insert(k, v), model.insert(k, v).is_none()),
            Op::Remove(k) => assert_eq!(tree.remove(&k), model.remove(&k).is_some()),
            Op::Get(k) => {
                assert_eq!(tree.get(&k, &guard), model.get(&k));
                assert_eq!(tree.contains_key(&k), model.contains_key(&k));
            }
            Op::Upper(b) => assert_eq!(
                tree.upper_bound(as_ref(&b), &guard),
                model.range((Bound::Unbounded, b)).next_back()
            ),
            Op::Lower(b) => assert_eq!(
                tree.lower_bound(as_ref(&b), &guard),
                model.range((b, Bound::Unbounded)).next()
            ),
            Op::Batch(changes) => {
                let before = model.clone();
                tree.write(|batch| {
                    for c in &changes {
                        change_both(batch, &mut model, c);
                    }
                    // The tree itself still shows the old version.
                    assert!(
                        tree.iter(&latchtree::pin())
                            .map(|(k, v)| (*k, *v))
                            .eq(before.clone())
                    );
                });
            }
            Op::Snapshot => {
                let snap = tree.snapshot(&guard);
                assert!(snap.iter().copied().eq(model.iter()));
            }
            Op::Range(lo, hi, ends) => {
                let want = model_range(&model, lo, hi);
                walk(
                    tree.range((lo, hi), &guard).map(|(k, v)| (*k, *v)),
                    &want,
                    &ends,
                );
            }
            Op::Iter(which, ends) => {
                let want: Vec<(u16, u32)> = model.iter().map(|(k, v)| (*k, *v)).collect();
                match which % 3 {
                    0 => walk(tree.iter(&guard).map(|(k, v)| (*k, *v)), &want, &ends),
                    1 => walk(tree.keys(&guard).map(|k| (*k, model[k])), &want, &ends),
                    _ => {
                        let vals: Vec<(u16, u32)> = want.iter().map(|&(_, v)| (0, v)).collect();
                        walk(tree.values(&guard).map(|v| (0, *v)), &vals, &ends);
                    }
                }
            }
            Op::GetOrInsert(k, v) => {
                let mut called = false;
                let got = *tree.get_or_insert_with(
                    k,
                    || {
                        called = true;
                        v
                    },
                    &guard,
                );
                assert_eq!(called, !model.contains_key(&k), "f runs only when absent");
                assert_eq!(got, *model.entry(k).or_insert(v));
            }
            Op::RemoveEntry(k) => assert_eq!(
                tree.remove_entry(&k, &guard).map(|(k, v)| (*k, *v)),
                model.remove_entry(&k)
            ),
            Op::Pop(first) => {
                let (got, want) = if first {
                    (tree.pop_first(&guard), model.pop_first())
                } else {
                    (tree.pop_last(&guard), model.pop_last())
                };
                assert_eq!(got.map(|(k, v)| (*k, *v)), want);
            }
            Op::Retain(m) => {
                let mut seen = 0;
                tree.retain(|k, v| {
                    seen += 1;
                    (u32::from(*k) + v) % u32::from(m) != 0
                });
                assert_eq!(seen, model.len(), "keep runs once per entry");
                model.retain(|k, v| (u32::from(*k) + *v) % u32::from(m) != 0);
            }
            Op::Clear => {
                tree.clear();
                model.clear();
            }
            Op::Rebuild(how, extra) => {
                drop(guard);
                let mut all: Vec<(u16, u32)> = tree.to_vec();
                all.extend(extra.iter().copied());
                for &(k, v) in &extra {
                    model.insert(k, v);
                }
                tree = match how % 4 {
                    0 => all.into_iter().collect(),
                    1 => {
                        let sorted: Vec<_> = model.iter().map(|(k, v)| (*k, *v)).collect();
                        LatchTree::from_sorted(sorted).unwrap()
                    }
                    2 => {
                        let mut t = LatchTree::new();
                        t.extend(all);
                        t
                    }
                    _ => {
                        let mut t = LatchTree::new();
                        t.extend(model.iter().map(|(k, v)| (*k, *v)));
                        let c = t.clone();
                        assert!(c == t);
                        c
                    }
                };
                assert_eq!(tree.stats().writes, u64::from(!model.is_empty()));
            }
        }
        tree.check_invariants().unwrap();
        let guard = latchtree::pin();
        assert_eq!(tree.len(), model.len());
        assert_eq!(tree.first_key_value(&guard), model.first_key_value());
        assert_eq!(tree.last_key_value(&guard), model.last_key_value());
    }
    let expect: LatchTree<u16, u32> = model.iter().map(|(k, v)| (*k, *v)).collect();
    assert!(tree == expect);
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 3 } else { 256 },
        ..ProptestConfig::default()
    })]

    #[test]
    fn matches_btreemap(ops in prop::collection::vec(op(), 0..if cfg!(miri) { 30 } else { 300 })) {
        run(ops);
    }

    #[test]
    fn from_sorted_accepts_exactly_strictly_increasing_input(
        keys in prop::collection::vec(0..50u16, 0..40)
    ) {
        let sorted = keys.windows(2).all(|w| w[0] < w[1]);
        let r = LatchTree::from_sorted(keys.iter().map(|&k| (k, ())));
        match r {
            Ok(tree) => {
                prop_assert!(sorted);
                tree.check_invariants().unwrap();
                prop_assert!(tree.keys(&latchtree::pin()).copied().eq(keys.iter().copied()));
            }
            Err(e) => {
                prop_assert!(!sorted);
                let p = e.position();
                prop_assert!(keys[p - 1] >= keys[p]);
                prop_assert!(keys[..p].windows(2).all(|w| w[0] < w[1]));
            }
        }
    }
}

/// A bulk load of every size up to a few hundred gives a valid red-black
/// tree in both copies (the checker), in one write.
#[test]
fn bulk_load_builds_a_valid_tree_of_every_size() {
    // Under Miri every size to 17 (heights 0 to 4, each fill) and the
    // sizes around 32 (a full level, one short, one over): a third of the
    // interpretation time of every size to 40.
    let sizes: Vec<u32> = if cfg!(miri) {
        (0..18).chain([31, 32, 33]).collect()
    } else {
        (0..600).collect()
    };
    for n in sizes {
        let tree = LatchTree::from_sorted((0..n).map(|k| (k, k))).unwrap();
        tree.check_invariants()
            .unwrap_or_else(|e| panic!("n = {n}: {e}"));
        assert_eq!(tree.len(), n as usize);
        assert_eq!(tree.stats().writes, u64::from(n > 0));
        // Later writes keep it valid.
        tree.insert(n / 2, 0);
        tree.remove(&(n / 3));
        tree.check_invariants()
            .unwrap_or_else(|e| panic!("n = {n}: {e}"));
    }
}

/// Sequential inserts then removes in several orders: exercises every
/// rotation case on both copies.
#[test]
fn ascending_descending_and_interleaved() {
    let n: u32 = if cfg!(miri) { 40 } else { 2000 };
    for order in 0..3 {
        let tree = LatchTree::new();
        let keys: Vec<u32> = match order {
            0 => (0..n).collect(),
            1 => (0..n).rev().collect(),
            _ => (0..n).map(|i| (i * 7919) % n).collect(),
        };
        for &k in &keys {
            assert!(tree.insert(k, k));
        }
        tree.check_invariants().unwrap();
        for &k in keys.iter().step_by(2) {
            assert!(tree.remove(&k));
        }
        tree.check_invariants().unwrap();
        assert_eq!(tree.len(), (n / 2) as usize);
        for &k in keys.iter().skip(1).step_by(2) {
            assert!(tree.remove(&k));
            if k % 97 == 0 {
                tree.check_invariants().unwrap();
            }
        }
        assert!(tree.is_empty());
        tree.check_invariants().unwrap();
    }
}

#[test]
#[should_panic(expected = "from inside a write of the same tree")]
#[cfg_attr(
    not(feature = "std"),
    ignore = "without std no thread-local tells a nested write (guide::no_std)"
)]
fn reentrant_write_panics_instead_of_deadlocking() {
    let tree = LatchTree::new();
    tree.write(|batch| {
        batch.insert(1, 1);
        tree.insert(2, 2);
    });
}

#[test]
#[cfg_attr(
    not(feature = "std"),
    ignore = "without std no thread-local tells a nested write (guide::no_std)"
)]
fn reentrant_write_leaves_the_tree_unchanged() {
    let tree = LatchTree::new();
    tree.insert(0, 0);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        tree.write(|batch| {
            batch.insert(1, 1);
            tree.remove(&0);
        })
    }));
    assert!(r.is_err());
    assert_eq!(tree.to_vec(), vec![(0, 0)]);
    tree.check_invariants().unwrap();
    assert!(tree.insert(3, 3), "writes work afterwards");
}
