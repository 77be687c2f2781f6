//! Model test: random operation sequences against `BTreeMap`, with the
//! invariant checker after every operation.

use latchtree::LatchTree;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::ops::Bound;

#[derive(Clone, Debug)]
enum Op {
    Insert(u16, u32),
    Remove(u16),
    Get(u16),
    Upper(Bound<u16>),
    Lower(Bound<u16>),
    Batch(Vec<(bool, u16, u32)>),
    Snapshot,
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

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (key(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
        3 => key().prop_map(Op::Remove),
        2 => key().prop_map(Op::Get),
        1 => bound().prop_map(Op::Upper),
        1 => bound().prop_map(Op::Lower),
        1 => prop::collection::vec((any::<bool>(), key(), any::<u32>()), 0..12).prop_map(Op::Batch),
        1 => Just(Op::Snapshot),
    ]
}

fn as_ref(b: &Bound<u16>) -> Bound<&u16> {
    match b {
        Bound::Included(k) => Bound::Included(k),
        Bound::Excluded(k) => Bound::Excluded(k),
        Bound::Unbounded => Bound::Unbounded,
    }
}

fn run(ops: Vec<Op>) {
    let tree = LatchTree::new();
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
            Op::Batch(items) => {
                let got = tree.write(|batch| {
                    items
                        .iter()
                        .map(|&(ins, k, v)| {
                            if ins {
                                batch.insert(k, v)
                            } else {
                                batch.remove(&k)
                            }
                        })
                        .collect::<Vec<_>>()
                });
                let want: Vec<bool> = items
                    .iter()
                    .map(|&(ins, k, v)| {
                        if ins {
                            model.insert(k, v).is_none()
                        } else {
                            model.remove(&k).is_some()
                        }
                    })
                    .collect();
                assert_eq!(got, want);
            }
            Op::Snapshot => {
                let snap = tree.snapshot(&guard);
                assert!(snap.iter().copied().eq(model.iter()));
            }
        }
        tree.check_invariants().unwrap();
        assert_eq!(tree.len(), model.len());
        assert_eq!(tree.first_key_value(&guard), model.first_key_value());
        assert_eq!(tree.last_key_value(&guard), model.last_key_value());
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 4 } else { 256 },
        ..ProptestConfig::default()
    })]

    #[test]
    fn matches_btreemap(ops in prop::collection::vec(op(), 0..if cfg!(miri) { 30 } else { 300 })) {
        run(ops);
    }
}

/// Sequential inserts then removes in several orders: exercises every
/// rotation case on both copies.
#[test]
fn ascending_descending_and_interleaved() {
    let n: u32 = if cfg!(miri) { 64 } else { 2000 };
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
fn reentrant_write_panics_instead_of_deadlocking() {
    let tree = LatchTree::new();
    tree.write(|batch| {
        batch.insert(1, 1);
        tree.insert(2, 2);
    });
}

#[test]
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
