//! Fuzz target: arbitrary sequences of `LatchTree` operations (inserts,
//! removes, lookups, bound queries, batches with reads, batches rolled back
//! by a panic, double-ended range walks, pops, retain, clear, bulk loads)
//! checked against `BTreeMap`, with the invariant checker after every
//! operation.
//!
//! `cargo +nightly fuzz run tree_ops -- -max_total_time=60`

#![no_main]

use arbitrary::Arbitrary;
use latchtree::LatchTree;
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;
use std::ops::Bound;

/// A bound for `upper_bound`/`lower_bound`.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum B {
    Included(u8),
    Excluded(u8),
    Unbounded,
}

impl B {
    fn get(self) -> Bound<u8> {
        match self {
            B::Included(k) => Bound::Included(k),
            B::Excluded(k) => Bound::Excluded(k),
            B::Unbounded => Bound::Unbounded,
        }
    }
}

/// One change inside a batch.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Change {
    Insert(u8, u32),
    Remove(u8),
    /// `Batch::contains_key`: sees the batch's own earlier changes.
    Contains(u8),
    /// `Batch::get` and the bound queries: read-your-writes.
    Get(u8),
    Floor(u8),
    Clear,
}

/// One operation on the tree.
#[derive(Arbitrary, Debug)]
enum Op {
    Insert(u8, u32),
    Remove(u8),
    Get(u8),
    UpperBound(B),
    LowerBound(B),
    FirstLast,
    /// Several changes applied atomically.
    Batch(Vec<Change>),
    /// Several changes, then a panic: the whole write must be rolled back.
    AbortedBatch(Vec<Change>),
    Snapshot,
    /// `range(lo, hi)` walked from the front (`true`) or the back.
    Range(B, B, Vec<bool>),
    Pop(bool),
    Retain(u8),
    Clear,
    /// Rebuild through `FromIterator` (bulk load) with extra pairs.
    Rebuild(Vec<(u8, u32)>),
}

/// The payload of a deliberate panic inside a write closure.
struct Abort;

/// libfuzzer-sys aborts the process on any panic; let the deliberate
/// `Abort` through (it is caught below) and keep that for every other one.
fn allow_abort_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let fuzzer_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !info.payload().is::<Abort>() {
                fuzzer_hook(info);
            }
        }));
    });
}

/// Applies `changes` to `model` as the batch must, returning what each
/// change must return.
fn apply(model: &mut BTreeMap<u8, u32>, changes: &[Change]) -> Vec<bool> {
    changes
        .iter()
        .map(|c| match *c {
            Change::Insert(k, v) => model.insert(k, v).is_none(),
            Change::Remove(k) => model.remove(&k).is_some(),
            Change::Contains(k) => model.contains_key(&k),
            Change::Get(k) => model.contains_key(&k),
            Change::Floor(k) => model.range(..=k).next_back().is_some(),
            Change::Clear => {
                model.clear();
                true
            }
        })
        .collect()
}

/// Runs `changes` inside a write, recording what each returned.
fn run_batch(batch: &mut latchtree::Batch<'_, u8, u32>, changes: &[Change]) -> Vec<bool> {
    let got: Vec<bool> = changes
        .iter()
        .map(|c| match *c {
            Change::Insert(k, v) => batch.insert(k, v),
            Change::Remove(k) => batch.remove(&k),
            Change::Contains(k) => batch.contains_key(&k),
            Change::Get(k) => batch.get(&k).is_some(),
            Change::Floor(k) => batch.upper_bound(Bound::Included(&k)).is_some(),
            Change::Clear => {
                batch.clear();
                true
            }
        })
        .collect();
    got
}

fuzz_target!(|ops: Vec<Op>| {
    allow_abort_panics();
    let mut tree = LatchTree::new();
    let mut model = BTreeMap::new();
    for op in ops {
        let guard = latchtree::pin();
        match op {
            Op::Insert(k, v) => assert_eq!(tree.insert(k, v), model.insert(k, v).is_none()),
            Op::Remove(k) => assert_eq!(tree.remove(&k), model.remove(&k).is_some()),
            Op::Get(k) => {
                assert_eq!(tree.get(&k, &guard), model.get(&k));
                assert_eq!(tree.get_key_value(&k, &guard), model.get_key_value(&k));
                assert_eq!(tree.contains_key(&k), model.contains_key(&k));
            }
            Op::UpperBound(b) => assert_eq!(
                tree.upper_bound(b.get().as_ref(), &guard),
                model.range((Bound::Unbounded, b.get())).next_back()
            ),
            Op::LowerBound(b) => assert_eq!(
                tree.lower_bound(b.get().as_ref(), &guard),
                model.range((b.get(), Bound::Unbounded)).next()
            ),
            Op::FirstLast => {
                assert_eq!(tree.first_key_value(&guard), model.first_key_value());
                assert_eq!(tree.last_key_value(&guard), model.last_key_value());
            }
            Op::Batch(changes) => {
                let got = tree.write(|batch| {
                    let got = run_batch(batch, &changes);
                    assert_eq!(batch.len(), {
                        let mut m = model.clone();
                        apply(&mut m, &changes);
                        m.len()
                    });
                    got
                });
                assert_eq!(got, apply(&mut model, &changes));
            }
            Op::AbortedBatch(changes) => {
                let before = tree.stats().writes;
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    tree.write(|batch| {
                        let got = run_batch(batch, &changes);
                        assert_eq!(got, apply(&mut model.clone(), &changes));
                        std::panic::panic_any(Abort)
                    })
                }));
                assert!(r.is_err_and(|p| p.is::<Abort>()));
                assert_eq!(tree.stats().writes, before, "a rolled-back write counted");
            }
            Op::Snapshot => {
                let snap = tree.snapshot(&guard);
                assert!(snap.iter().copied().eq(model.iter()), "snapshot differs");
            }
            Op::Range(lo, hi, ends) => {
                let (lo, hi) = (lo.get(), hi.get());
                let mut want: std::collections::VecDeque<(u8, u32)> = model
                    .iter()
                    .filter(|(k, _)| std::ops::RangeBounds::contains(&(lo, hi), *k))
                    .map(|(k, v)| (*k, *v))
                    .collect();
                let mut it = tree.range((lo, hi), &guard).map(|(k, v)| (*k, *v));
                for front in ends {
                    if front {
                        assert_eq!(it.next(), want.pop_front(), "range front");
                    } else {
                        assert_eq!(it.next_back(), want.pop_back(), "range back");
                    }
                }
                assert!(it.eq(want), "range rest");
            }
            Op::Pop(first) => {
                let (got, want) = if first {
                    (tree.pop_first(&guard), model.pop_first())
                } else {
                    (tree.pop_last(&guard), model.pop_last())
                };
                assert_eq!(got.map(|(k, v)| (*k, *v)), want);
            }
            Op::Retain(m) => {
                let m = u32::from(m.max(1));
                tree.retain(|k, v| u32::from(*k).wrapping_add(*v) % m != 0);
                model.retain(|k, v| u32::from(*k).wrapping_add(*v) % m != 0);
            }
            Op::Clear => {
                tree.clear();
                model.clear();
            }
            Op::Rebuild(extra) => {
                drop(guard);
                let mut all = tree.to_vec();
                all.extend(extra.iter().copied());
                model.extend(extra);
                tree = all.into_iter().collect();
            }
        }
        if let Err(e) = tree.check_invariants() {
            panic!("invariant broken: {e}");
        }
        assert_eq!(tree.len(), model.len());
        assert_eq!(tree.is_empty(), model.is_empty());
    }
    assert_eq!(tree.to_vec(), model.into_iter().collect::<Vec<_>>());
});
